"""The drop-position table in seed 002's layout (Method / PPS / Cost %), grouped
Accept / Drop, with intervals, CPU cost per packet and the seed's own figures.

- PPS: the median over rounds of the disposal rate, with the order-statistics
  interval of the median (its real coverage is printed: 93.75 % at 5 rounds).
- Cost %: best / pps - 1, the extra time per packet against the treatment with the
  best median in its group, with a percentile-bootstrap interval that resamples
  whole rounds (each round measured every treatment once, so pairs stay together).
- Seed 002's cost column is not one formula throughout: its 12 % and 10 % are
  best / pps - 1, its 17 % (kmp) and 20 % (hashlimit) are nearer 1 - pps / best.
  The table prints the seed's figure as published and, beside it, best / pps - 1
  recomputed from the seed's own PPS.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text

from fwbench import summary
from fwbench.experiments.droprate.treatments import NAMES
from fwbench.results import TrialRecord
from fwbench.stats import Interval, log_ratio, median_interval, paired_ratio_interval

# Seed 002's summary table: treatment id -> (PPS, cost % as published).
SEED002: dict[str, tuple[int, int | None]] = {
    "notrack": (106_000, None), "conntrack": (87_000, 20),
    "raw": (280_000, None), "raw-after-rules": (250_000, 12),
    "filter-input": (250_000, 12), "ipset": (255_000, 10),
    "string-bm": (255_000, 10), "string-kmp": (235_000, 17),
    "hashlimit": (225_000, 20),
}
SEED_BEST = {"accept": 106_000, "drop": 280_000}
GROUP_TITLES = {"accept": "Accepting all packets", "drop": "Rejecting all packets"}
# The acceptance: (faster, slower, how it reads).
ORDERINGS = (("xdp", "raw", "XDP >= raw PREROUTING"),
             ("raw", "filter-input", "raw PREROUTING >= filter INPUT"),
             ("notrack", "conntrack", "NOTRACK >= conntrack"))


def cost(best_pps: float, pps: float) -> float:
    """Extra time per packet against the best, as a fraction: best / pps - 1."""
    return best_pps / pps - 1


def seed_figures(tid: str, size: int) -> tuple[int, int | None, float | None] | None:
    """(PPS, published cost %, recomputed cost %) of seed 002's row, if it has one."""
    if tid not in SEED002 or (tid == "raw-after-rules" and size != 6):
        return None
    pps, printed = SEED002[tid]
    group = "accept" if tid in ("notrack", "conntrack") else "drop"
    return pps, printed, 100 * cost(SEED_BEST[group], pps)


@dataclass
class Row:
    tid: str
    size: int
    group: str
    label: str
    pps: dict[int, float]           # round -> disposal rate, ok trials only
    cpu_ns: list[float]
    softirq_ns: list[float]
    not_ok: list[tuple[str, str]]   # (status, reason)
    median: float | None = None
    interval: Interval | None = None
    cost: float | None = None       # fraction
    cost_interval: Interval | None = None
    is_best: bool = False


def rows(records: list[TrialRecord], resamples: int = 10_000) -> list[Row]:
    """One row per treatment, in table order, with medians, intervals and costs."""
    by: dict[tuple[str, int], Row] = {}
    for r in records:
        key = tid, size = r.factors["treatment"], r.factors["set_size"]
        if key not in by:
            by[key] = Row(tid, size, r.conditions.get("group", "drop"),
                          r.conditions.get("label", tid), {}, [], [], [])
        row = by[key]
        if r.status == "ok":
            row.pps[r.repetition] = r.metrics["disposed_pps"]
            row.cpu_ns.append(r.metrics["cpu_ns_per_pkt"])
            row.softirq_ns.append(r.metrics["softirq_ns_per_pkt"])
        else:
            row.not_ok.append((r.status, r.reason or ""))
    order = {n: i for i, n in enumerate(NAMES)}
    out = sorted(by.values(), key=lambda w: (order.get(w.tid, 99), w.size))
    for row in out:
        if row.pps:
            row.median = statistics.median(row.pps.values())
            row.interval = median_interval(list(row.pps.values()))
    for group in {w.group for w in out}:
        members = [w for w in out if w.group == group and w.median]
        if not members:
            continue
        best = max(members, key=lambda w: w.median)
        best.is_best = True
        for w in members:
            w.cost = cost(best.median, w.median)
            if w is not best:
                w.cost_interval = paired_ratio_interval(_pairs(best, w), resamples=resamples)
    return out


def _pairs(a: Row, b: Row) -> list[tuple[float, float]]:
    return [(a.pps[k], b.pps[k]) for k in sorted(a.pps) if k in b.pps]


@dataclass(frozen=True)
class Ordering:
    text: str
    verdict: str          # "holds", "does not hold", "not resolved", "not measured"
    ratio: float | None   # median(a) / median(b) - 1
    interval: Interval | None

    def line(self) -> str:
        if self.ratio is None:
            return f"{self.text}: not measured"
        iv = self.interval
        span = f" [{100 * iv.low:+.1f}, {100 * iv.high:+.1f}]" if iv else ""
        return f"{self.text}: {self.verdict} ({100 * self.ratio:+.1f} %{span})"


def orderings(table: list[Row], resamples: int = 10_000) -> list[Ordering]:
    """Whether each of the issue's inequalities holds, by a / b - 1 on the log scale,
    paired by round (stats.log_ratio), its 95 % interval: above zero holds, below
    does not, an interval across zero (or fewer than two shared rounds) is not
    resolved."""
    out = []
    for a_id, b_id, text in ORDERINGS:
        a = next((w for w in table if w.tid == a_id and w.median), None)
        b = next((w for w in table if w.tid == b_id and w.median), None)
        if not a or not b:
            out.append(Ordering(text, "not measured", None, None))
            continue
        ks = sorted(set(a.pps) & set(b.pps))
        t = log_ratio([a.pps[k] for k in ks], [b.pps[k] for k in ks], ks, ks)
        if t is None:
            out.append(Ordering(text, "not resolved", a.median / b.median - 1, None))
            continue
        iv = t.interval(0.95)
        iv = Interval(iv.low - 1, iv.high - 1, iv.coverage)
        verdict = "holds" if iv.low > 0 else "does not hold" if iv.high < 0 \
            else "not resolved"
        out.append(Ordering(text, verdict, t.ratio - 1, iv))
    return out


def kpps(pps: float) -> str:
    return f"{pps / 1000:,.0f}k"


def conditions(meta: dict) -> Table:
    sc, env = meta["scenario"], meta["environment"]
    d = sc["droprate"]
    session = (meta.get("sessions") or [{}])[-1]
    tools = env.get("tools", {})
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    frame = sc["frame_sizes"][0]
    t.add_row("kernel", env.get("kernel", "?"))
    t.add_row("CPU", f"{env.get('cpu_model')} ({env.get('cpus')} CPUs); the whole path on "
                     f"CPU {d['cpu']}: sender pinned there, RPS off")
    t.add_row("tools", "; ".join(str(v) for k, v in tools.items() if v))
    t.add_row("flood", f"{frame}-byte frames (FCS included: {frame - 46} B of UDP payload, "
                       f"the stamp then {d['payload_text']!r}), open throttle, UDP to the "
                       f"firewall's own address, port "
                       f"{session.get('target', {}).get('dport', 9)} (no socket)")
    t.add_row("trials", f"{sc['duration_s']:g} s each, {sc['repeat']} rounds, every "
                        f"treatment once per round in seeded random order (seed {sc['seed']})")
    t.add_row("PPS", "disposal rate = (sent - refused by the firewall's input) / s; "
                     "median over rounds, interval from order statistics")
    t.add_row("Cost %", "best / pps - 1 in its group (the extra time per packet), "
                        "interval from a bootstrap over rounds (95 %)")
    return t


def _span(iv: Interval | None, fmt) -> str:
    return f" [{fmt(iv.low)}, {fmt(iv.high)}]" if iv else ""


def table(table_rows: list[Row]) -> Table:
    cov = next((w.interval.coverage for w in table_rows if w.interval and len(w.pps) > 1),
               None)
    body, group = [], None
    for w in table_rows:
        if w.group != group:
            group = w.group
            body.append([f"[bold]{GROUP_TITLES.get(group, group)}[/]", *[""] * 6])
        seed = seed_figures(w.tid, w.size)
        seed_pps = kpps(seed[0]) if seed else ""
        seed_cost = f"{seed[1]} ({seed[2]:.1f})" if seed and seed[1] is not None else ""
        n = f"{len(w.pps)}" + (f" [red]+{len(w.not_ok)}[/]" if w.not_ok else "")
        if w.median is None:
            body.append([Text(w.label),
                         Text(w.not_ok[0][0] if w.not_ok else "-", style="red"),
                         "", "", n, seed_pps, Text(seed_cost)])
            continue
        cost_s = "best" if w.is_best else \
            f"{100 * w.cost:.1f}{_span(w.cost_interval, lambda x: f'{100 * x:.1f}')}"
        body.append([Text(w.label), Text(f"{kpps(w.median)}{_span(w.interval, kpps)}"),
                     Text(cost_s), f"{statistics.median(w.cpu_ns):,.0f} "
                                   f"({statistics.median(w.softirq_ns):,.0f})",
                     n, seed_pps, Text(seed_cost)])
    return summary.render(
        "Seed 002, where to drop: disposal rate of a UDP flood on one CPU",
        [("Method", "left"), (f"PPS ({100 * cov:.1f} % interval)" if cov else "PPS", "right"),
         ("Cost % (95 %)", "right"), ("CPU ns/pkt (softirq)", "right"), ("n ok", "right"),
         ("seed PPS", "right"), ("seed cost %", "right")], body,
        caption="Accepted packets reach UDP, where no socket listens. seed: 4.4 kernel, "
                "loopback, one EC2 core; its cost % as published, in parentheses best / "
                "pps - 1 recomputed from its own PPS.")


def not_ok_lines(table_rows: list[Row]) -> list[str]:
    """One line per treatment with trials that are not in its figures, and why."""
    out = []
    for w in table_rows:
        if w.not_ok:
            status, reason = w.not_ok[-1]
            out.append(f"{w.label}: {len(w.not_ok)} trial(s) not counted, last {status}: "
                       f"{reason}")
    return out


def render(records: list[TrialRecord], meta: dict) -> Group:
    """Conditions, the table, and the acceptance orderings, ready to print."""
    table_rows = rows(records)
    lines = [Text(f"  {ln}") for ln in not_ok_lines(table_rows)]
    if lines:
        lines.insert(0, Text("Not counted (failed verification, or invalid: see trials.jsonl):"))
    lines.append(Text("Acceptance (a / b - 1 on the log scale, paired by round, 95 % t interval):"))
    lines += [Text(f"  {o.line()}") for o in orderings(table_rows)]
    return Group(conditions(meta), table(table_rows), *lines)
