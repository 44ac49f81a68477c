"""`fwbench report` of a droprate run (seed 002): the experiment's own table in seed
002's layout (fwbench.experiments.droprate.report) and its orderings in front, then every metric
as any experiment has it (report.cells), each treatment tested against the best
treatment of its group (accept or drop) at the same frame size, the one its cost %
is measured from.
"""
from __future__ import annotations

import statistics

from fwbench import claims as cl
from fwbench.experiments.droprate import report as seed002
from fwbench.findings import NOT_SHOWN, Finding, claim
from fwbench.metrics import headline
from fwbench.plan import Cell
from fwbench.report.cells import CellReport, References
from fwbench.report.data import RunData
from fwbench.report.document import Block, Bullets, Heading, Para, Table
from fwbench.report.deciding import cells_where, decided


def _groups(data: RunData) -> dict[Cell, str]:
    return {data.cell(r): r.conditions.get("group", "drop") for r in data.records}


def best_of_group(data: RunData, cells: dict) -> References:
    """Each cell -> the cell of its group and frame size with the best median
    disposal rate (the same reference for every metric)."""
    head = headline(data.method)
    rates: dict[Cell, list[float]] = data.samples(head)
    groups = _groups(data)
    best: dict[tuple, Cell] = {}
    for c, values in rates.items():
        k = (groups.get(c), c.frame_size)
        if k not in best or statistics.median(values) > statistics.median(rates[best[k]]):
            best[k] = c
    out = {}
    for c in cells:
        ref = best.get((groups.get(c), c.frame_size))
        if ref is not None and ref != c and ref in cells:
            out[c] = ref
    return out


def seed_table(data: RunData) -> tuple[list[Block], list[Cell]]:
    """Seed 002's table and the orderings, and the treatments' table order."""
    rows = seed002.rows(data.records)
    cov = next((w.interval.coverage for w in rows if w.interval and len(w.pps) > 1), None)
    body = []
    for w in rows:
        seed = seed002.seed_figures(w.tid, w.size)
        seed_pps = seed002.kpps(seed[0]) if seed else ""
        seed_cost = f"{seed[1]} ({seed[2]:.1f})" if seed and seed[1] is not None else ""
        n = f"{len(w.pps)}" + (f" (+{len(w.not_ok)} not ok)" if w.not_ok else "")
        if w.median is None:
            body.append([w.label, seed002.GROUP_TITLES.get(w.group, w.group), "-", "-", "-",
                         n, seed_pps, seed_cost])
            continue
        iv = w.interval
        pps = seed002.kpps(w.median) + (f" [{seed002.kpps(iv.low)}, {seed002.kpps(iv.high)}]"
                                      if iv else "")
        cost = "best" if w.is_best else f"{100 * w.cost:.1f}" + (
            f" [{100 * w.cost_interval.low:.1f}, {100 * w.cost_interval.high:.1f}]"
            if w.cost_interval else "")
        body.append([w.label, seed002.GROUP_TITLES.get(w.group, w.group), pps, cost,
                     f"{statistics.median(w.cpu_ns):,.0f} "
                     f"({statistics.median(w.softirq_ns):,.0f})", n, seed_pps, seed_cost])
    frame = data.frame_sizes()
    blocks: list[Block] = [
        Heading(2, "Where to drop (seed 002's table)", "seed002"),
        Table(["Method", "group", f"PPS [{100 * cov:.1f} %]" if cov else "PPS",
               "Cost % [95 %]", "CPU ns/pkt (softirq)", "n ok", "seed PPS", "seed cost %"],
              body, f"Disposal rate of a UDP flood on one CPU, {', '.join(map(str, frame))}-"
                    f"byte frames: median over rounds with its order-statistics interval; "
                    f"cost % = best / pps - 1 in its group with a bootstrap interval over "
                    f"rounds. Seed 002 (4.4 kernel, loopback, one EC2 core): its cost % as "
                    f"published, in parentheses recomputed from its own PPS.",
              id="seed002"),
        Para("Orderings (a / b - 1 of the medians, 95 % bootstrap interval over rounds):"),
        Bullets([o.line() for o in seed002.orderings(rows)])]
    if lines := seed002.not_ok_lines(rows):
        blocks.append(Bullets(lines, "warning"))
    order = [(w.tid, w.size, f) for w in rows for f in frame]
    return blocks, order


def labels(data: RunData) -> dict[Cell, str]:
    """Each cell by its treatment's own words (`Drop at very start of raw table`),
    with the frame size when the run had more than one."""
    several = len(data.frame_sizes()) > 1
    return {data.cell(r): r.conditions.get("label", r.factors["treatment"]) +
            (f", {r.factors['frame_size']} B" if several else "") for r in data.records}


def report(data: RunData) -> CellReport:
    lead, order = seed_table(data)
    return CellReport(data, best_of_group, lead, order=order, labels=labels(data),
                      tests_note=(
        "Tests: each treatment against the best of its group (accept or drop) at its "
        "frame size, as a ratio on the log scale paired by round (each round ran every "
        "treatment once), Holm's correction across the treatments of each metric, "
        "significance at 0.05, each interval at its Holm level; the seed's tests "
        "(Welch on values, Mann-Whitney U, Cliff's delta) beside it decide nothing."))


# --- seed 002's claims (fwbench.findings.CLAIMS["002"]) -------------------------------

def _estimate(a, b) -> cl.Estimate | None:
    """a's disposal rate over b's, paired by round (both ran in every round)."""
    ks = sorted(set(a.pps) & set(b.pps))
    return cl.estimate([a.pps[k] for k in ks], [b.pps[k] for k in ks], ks, ks)


def _faster(c, rows: list, a_id: str, b_id: str, data: RunData) -> Finding:
    a = next((w for w in rows if w.tid == a_id and w.median), None)
    b = next((w for w in rows if w.tid == b_id and w.median), None)
    if a is None or b is None:
        return Finding(c, "-", NOT_SHOWN, f"{a_id} and {b_id} were not both measured")
    est = _estimate(a, b)
    if est is None:
        return Finding(c, f"{a_id} / {b_id}: {a.median / b.median:.2f}x", NOT_SHOWN,
                       "too few paired rounds for an interval")
    return decided(data, c, f"{a_id} / {b_id} {cl.show(est)}", cl.decide(c.rule, est),
                   est, cells_where(data, treatment={a_id, b_id}))


def _ipset_flat(c, rows: list, data: RunData) -> Finding:
    sets = sorted((w for w in rows if w.tid == "ipset" and w.median), key=lambda w: w.size)
    if len(sets) < 2:
        return Finding(c, "-", NOT_SHOWN, "ipset was not measured at two set sizes")
    small, large = sets[0], sets[-1]
    est = _estimate(large, small)
    what = f"{large.size:,} against {small.size:,} entries"
    if est is None:
        return Finding(c, f"{large.median / small.median:.2f}x ({what})", NOT_SHOWN,
                       "too few paired rounds for an interval")
    return decided(data, c, f"{cl.show(est)} ({what})", cl.decide(c.rule, est), est,
                   cells_where(data, treatment="ipset", set_size={small.size, large.size}))


def findings(data: RunData) -> list[Finding]:
    rows = seed002.rows(data.records)
    return [_faster(claim("002", "notrack-faster"), rows, "notrack", "conntrack", data),
            _faster(claim("002", "raw-cheaper"), rows, "raw", "filter-input", data),
            _ipset_flat(claim("002", "ipset-flat"), rows, data),
            _faster(claim("002", "bm-cheaper"), rows, "string-bm", "string-kmp", data)]
