"""`fwbench report` of an echo run (seed 001): the seed's findings, each beside ours
and said to hold or not; the decrease against plain forwarding per cell; the loss per
rule for IPv4 and IPv6; threads against epoll by the number of clients with the
turning point; TCP against UDP and IPv4 against IPv6; what was left out and why. Then
every metric as any experiment has it (report.cells), each cell with rules against
the same cell without (F = 0).
"""
from __future__ import annotations

import math

from fwbench import claims as cl
from fwbench import findings as fd
from fwbench.experiments.echo import stats as es
from fwbench.experiments.echo.design import FACTORS
from fwbench.findings import CLAIMS, Finding
from fwbench.report import analysis as an
from fwbench.report import figures as fg
from fwbench.report.cells import CellReport, References
from fwbench.report.data import RunData
from fwbench.report.document import Block, FigureBlock, Heading, Para, Table
from fwbench.report.deciding import cells_where, decided


def without_rules(data: RunData, cells: dict) -> References:
    return {c: es.reference(c) for c in cells
            if c.rules_per_client and es.reference(c) in cells}


def _iv(iv, digits: int = 2, unit: str = "") -> str:
    return f" [{iv[0]:.{digits}f}, {iv[1]:.{digits}f}]{unit}" if iv else ""


# --- the findings ----------------------------------------------------------------------

def _slope_row(sl: es.Slope | None, family: str, level: float = 0.95) -> list[str]:
    """Loss per rule, "about" the seed's: above 0, and within half the seed's figure
    either way (0.05 %/rule: 0.025..0.075), each read off our bootstrap
    interval at the verdicts' level (a direction and a size, both shown when the
    interval is inside)."""
    seed = es.SEED001["per_rule_pct"][family]
    lo_ok, hi_ok = seed / 2, seed * 1.5
    claim = (f"throughput loss grows linearly with the rules, about {seed} % per {family} "
             f"rule" + (f" ({sl.backend})" if sl else ""))
    if sl is None:
        return [claim, f"{seed} %/rule", "-", "not shown", "no cell of this family with "
                "rules and its F = 0 reference"]
    ours = f"{sl.pct_per_rule:.4f} %/rule{_iv(sl.interval, 4)}" + \
        (f" ({cl.pct(level)})" if sl.interval else "") + f", R² {sl.r2:.2f}"
    if sl.interval is None:
        return [claim, f"{seed} %/rule", ours, "not shown", "too few trials for an interval"]
    lo, hi = sl.interval
    way = "holds" if lo > 0 else "does not hold" if hi < 0 else "not shown"
    size = "holds" if lo_ok <= lo and hi <= hi_ok else \
        "does not hold" if hi < lo_ok or lo > hi_ok else "not shown"
    why = (f"direction {way}, size {size} (the {cl.pct(level)} interval against "
           f"{lo_ok:g}..{hi_ok:g} "
           f"%/rule; fitted over {sl.cells} cells, up to {sl.max_rules:,} rules)")
    verdict = "does not hold" if "does not hold" in (way, size) else \
        "holds" if way == size == "holds" else "not shown"
    return [claim, f"{seed} %/rule", ours, verdict, why]


def _server_row(tests: list[es.ServerTest], turn: float | None) -> list[str]:
    """Threads against epoll: "threads beat epoll below about 40 clients and lose
    above", the turning point "about" 40 as every size is (half of it either way:
    20..60 clients). Where the client counts' verdicts (Welch on logs, Holm across
    the table) bracket it: past the largest count where threads are significantly
    faster, up to the smallest where epoll is. Holds when that bracket lies within
    20..60; does not hold when it lies wholly outside (epoll significantly faster at
    20 clients or fewer, or threads at 60 or more), or when threads are
    significantly faster above a count where epoll is (no one turning point)."""
    seed = es.SEED001["turning_point_clients"]
    lo_ok, hi_ok = seed / 2, seed * 1.5
    claim = f"threads beat epoll below about {seed} clients and lose above"
    fig = f"turning point ~{seed}"
    if not tests:
        return [claim, fig, "-", "not shown", "no cell measured with both server models"]
    th = [t.clients for t in tests if t.verdict == "threads faster"]
    ep = [t.clients for t in tests if t.verdict == "epoll faster"]
    ours = (f"the means change sign at ~{turn:.0f} clients" if turn
            else "the means do not change sign")
    after, upto = max(th, default=0), min(ep, default=math.inf)
    bracket = f"{after or 0:g}..{upto:g} clients" if upto < math.inf else \
        f"above {after:g} clients" if after else "no count significant either way"
    said = f"turning point within {bracket} (Holm) against {lo_ok:g}..{hi_ok:g}"
    if th and ep and max(th) > min(ep):
        return [claim, fig, ours, "does not hold", "threads significantly faster at "
                f"{max(th)} clients, above {min(ep)} where epoll is: no one turning point"]
    if upto <= lo_ok or after >= hi_ok:
        return [claim, fig, ours, "does not hold", said]
    if lo_ok <= after and upto <= hi_ok:
        return [claim, fig, ours, "holds", said]
    return [claim, fig, ours, "not shown", said]


def _slower_row(data: RunData, s: dict, factor: str, slow: str, fast: str,
                key: str) -> list[str]:
    """`slow` against `fast` over every pair of cells equal but for `factor` (epoll
    server on both sides: UDP has no thread-per-client server): each pair's log
    ratio of throughput per client (Welch on the logs), their mean over the pairs
    (fwbench.claims.pooled), by the claim's rule (below 1)."""
    c = fd.claim("001", key)
    seed = {"tcp-vs-udp": es.SEED001["tcp_slower_than_udp_pct"],
            "ipv6-vs-ipv4": es.SEED001["ipv6_slower_than_ipv4_pct"],
            "sctp-vs-tcp": es.SEED001["sctp_slower_than_tcp_pct"]}[key]
    seed_text = f"{seed[0]} % ({seed[1]}..{seed[2]})"
    parts, read = [], []
    for cell, xs in sorted(s.items(), key=lambda kv: str(kv[0])):
        pair = cell._replace(**{factor: fast})
        other = s.get(pair)
        if getattr(cell, factor) == slow and cell.server == "epoll" and other and \
                (e := cl.estimate(xs, other)) is not None:
            parts.append(e)
            read += [cell, pair]
    est = cl.pooled(parts, "pairs of cells")
    if est is None:
        left = data.meta.get("left_out") or {}
        why = next((w for w in left if w.startswith(slow)), None)
        return [c.text, seed_text, "-", "not shown",
                why or f"no pair of cells measured with {slow} and {fast}, two trials "
                       f"or more each"]
    slower = 100 * (1 - est.ratio)
    ours = f"{slower:.2f} % slower, {slow} / {fast} {cl.show(est)} over {len(parts)} pairs"
    f = decided(data, c, ours, cl.decide(c.rule, est), est, read)
    return [c.text, seed_text, f.ours, f.verdict, f.why, f.cells]


def _seed_slope(slopes: dict, family: str) -> es.Slope | None:
    """The slope the seed's figure is compared with: iptables (legacy, the seed's
    2015 iptables) where measured, else the first backend's."""
    mine = [sl for (fam, _), sl in slopes.items() if fam == family and sl]
    return next((sl for sl in mine if sl.backend == "iptables-legacy"), mine[0] if mine else None)


def _rows(data: RunData, st: "_Stats") -> list[list[str]]:
    """Each claim's row: [claim, seed's figure, ours, verdict, why], in CLAIMS order."""
    return [_slope_row(_seed_slope(st.slopes, "ipv4"), "ipv4", st.level)
            + [_family(data, st, "ipv4")],
            _slope_row(_seed_slope(st.slopes, "ipv6"), "ipv6", st.level)
            + [_family(data, st, "ipv6")],
            _server_row(st.tests, st.turn),
            _slower_row(data, st.s, "protocol", "tcp", "udp", "tcp-vs-udp"),
            _slower_row(data, st.s, "family", "ipv6", "ipv4", "ipv6-vs-ipv4"),
            _slower_row(data, st.s, "protocol", "sctp", "tcp", "sctp-vs-tcp")]


def _family(data: RunData, st: "_Stats", family: str) -> list:
    """The cells a family's slope reads: its backend's, with rules and without."""
    sl = _seed_slope(st.slopes, family)
    return cells_where(data, family=family, backend=sl.backend) if sl else []


class _Stats:
    """Seed 001's statistics of one run, computed once for its findings and tables."""

    def __init__(self, data: RunData, level: float = 0.95):
        self.s = s = es.samples(data.records)
        self.decs = es.decreases(s)
        backends = list(dict.fromkeys(c.backend for c in s))
        self.level = level     # the slopes' bootstrap intervals
        self.slopes = {(fam, b): es.per_rule_slope(s, fam, b, level=level)
                       for fam in ("ipv4", "ipv6") for b in backends}
        self.tests = es.server_tests(s)
        self.turn = es.turning_point(self.tests)
        self.tcp_udp = es.paired_average(s, "protocol", "tcp", "udp", "TCP slower than UDP")
        self.v6_v4 = es.paired_average(s, "family", "ipv6", "ipv4", "IPv6 slower than IPv4")


def seed_findings(data: RunData, st: _Stats | None = None) -> list[Finding]:
    """Seed 001's claims decided on this run (fwbench.findings.CLAIMS["001"])."""
    st = st or _Stats(data, cl.level())    # the slopes at the verdicts' own level
    rows = _rows(data, st)
    return [Finding(c, ours, verdict, why, tuple(more[0]) if more else ())
            for c, (_claim, _seed, ours, verdict, why, *more)
            in zip(CLAIMS["001"], rows, strict=True)]


def decrease_table(decs: list[es.Decrease]) -> Table:
    rows = []
    for d in sorted(decs, key=lambda d: (d.cell.family, d.cell.protocol, d.cell.clients,
                                         d.cell.rules_per_client, d.cell.server,
                                         d.cell.backend)):
        c = dict(zip(FACTORS, d.cell))
        rows.append([c["family"], c["protocol"], str(c["clients"]), c["frame"], c["server"],
                     c["backend"] + ("" if c["transaction"] == "echo" else f" {c['transaction']}"),
                     str(c["rules_per_client"]), f"{d.rules:,}",
                     f"{d.decrease_pct:.2f} %{_iv(d.interval, 2, ' %')}",
                     f"{d.decrease_pct / d.rules:.4f}", an.format_p(d.p_holm),
                     an.format_p(d.seed_welch_p), f"{d.n}/{d.n_ref}"])
    return Table(["family", "protocol", "clients", "frame", "server", "backend", "F", "rules",
                  "decrease vs F = 0 [interval]", "% per rule", "p Holm",
                  "seed's test: p Welch", "trials"], rows,
                 "Throughput per client against the same cell without rules: 100 x (1 - "
                 "ratio), the ratio of geometric means with Welch's t on the logs, Holm "
                 "across this table, the interval at its Holm level; the seed's Welch on "
                 "the raw values beside decides nothing. A negative decrease: faster with "
                 "rules (noise, or a cache effect).", id="decrease")


def slope_table(slopes: dict) -> Table:
    rows = []
    for (fam, backend), sl in slopes.items():
        if sl is None:
            continue
        seed = es.SEED001["per_rule_pct"][fam]
        rows.append([fam, backend, f"{sl.pct_per_rule:.4f}{_iv(sl.interval, 4)}",
                     f"{sl.r2:.2f}", f"{seed}", str(sl.cells), f"{sl.max_rules:,}"])
    return Table(["family", "backend", "% per rule [95 %]", "R²", "seed", "cells",
                  "most rules"], rows,
                 "Decrease (%) = slope x rules, least squares through the origin over every "
                 "trial of every cell with rules, against its F = 0 cell; the interval "
                 "resamples each cell's trials and its reference's (bootstrap, 2,000). R²: "
                 "of the cells' mean decreases about the line (1: straight). The seed's "
                 "figures are for iptables (2015, the legacy one).", id="per-rule")


def server_table(tests: list[es.ServerTest]) -> Table:
    rows = []
    for t in tests:
        g = dict(zip([f for f in FACTORS if f != "server"], t.group))
        rows.append([g["protocol"], g["family"], str(t.clients), g["frame"],
                     str(g["rules_per_client"]), g["backend"],
                     f"{t.diff_pct:+.2f} %{_iv(t.interval, 2, ' %')}", an.format_p(t.p),
                     an.format_p(t.p_holm), t.verdict, an.format_p(t.welch_p),
                     an.format_p(t.mwu_p), f"{t.n_threads}/{t.n_epoll}"])
    return Table(["protocol", "family", "clients", "frame", "F", "backend",
                  "threads vs epoll [interval]", "p (logs)", "p Holm", "verdict",
                  "seed's test: p Welch", "p Mann-Whitney", "trials"], rows,
                 "Throughput per client with a thread per client against one epoll loop; "
                 "positive: threads faster (the seed's Figure 7). The ratio of geometric "
                 "means, Welch's t on the logs, Holm across this table, the interval at "
                 "its Holm level; the seed's Welch on raw values and Mann-Whitney beside "
                 "decide nothing.", id="threads-epoll", kind="pvalues")


def averages_table(avgs: list) -> Table:
    rows = []
    for a, seed in avgs:
        if a is None:
            continue
        rows.append([a.what, f"{a.slower_pct:.2f} %{_iv(a.interval, 2, ' %')}",
                     f"{a.low:.2f} .. {a.high:.2f} %", str(a.pairs), an.format_p(a.p),
                     f"{seed[0]} % ({seed[1]} .. {seed[2]})"])
    return Table(["", "mean [95 %]", "min .. max", "pairs", "p Wilcoxon", "seed"], rows,
                 "Over every pair of cells equal but for the factor (epoll server on both "
                 "sides), how much slower the one side's mean throughput per client is.",
                 id="averages")


def conn_rate_table(rates: list[es.ConnRate]) -> Table:
    rows = []
    for x in rates:
        c = dict(zip(FACTORS, x.cell))
        rows.append([f"{c['clients']}", f"{c['protocol']}/{c['family']}", c["server"],
                     c["backend"], str(c["rules_per_client"]), f"{c['entries']:,}",
                     f"{x.rate:,.0f}",
                     "reference" if x.change_pct is None else
                     f"{x.change_pct:+.2f} %{_iv(x.interval, 2, ' %')}",
                     an.format_p(x.p_holm), str(x.n)])
    return Table(["clients", "protocol", "server", "backend", "F", "background entries",
                  "connections/s", "vs F = 0, no entries [interval]", "p Holm", "trials"],
                 rows,
                 "A new TCP connection per message (connect, send, echo, close with RST), "
                 "as netperf's TCP_CRR, through the stateful variant of the rule set: "
                 "connection tracking accepts a connection's later packets, its first walks "
                 "the per-client rules. Background entries: UDP flows held in the "
                 "connection table during the trial. The change is the ratio of the two "
                 "cells on the log scale (Welch's t on the logs: the trials are not "
                 "paired by round), Holm across this table, each interval at the level "
                 "its Holm step tested it at.", id="crr")


def left_out_table(data: RunData) -> Table | None:
    left = data.meta.get("left_out") or {}
    if not left:
        return None
    return Table(["left out", "cells"], [[why, f"{n:,}"] for why, n in left.items()],
                 "Combinations of the design this run did not measure, and why.",
                 id="left-out")


def _figures(decs: list[es.Decrease], tests: list[es.ServerTest]) -> list[fg.Figure]:
    out = []
    series: dict[str, list[tuple[float, float]]] = {}
    for d in decs:
        c = dict(zip(FACTORS, d.cell))
        series.setdefault(f"{c['protocol']}/{c['family']}", []).append(
            (d.rules, d.decrease_pct))
    fig = fg.points(
        "fig-decrease-vs-rules", "throughput decrease against plain forwarding",
        {k: sorted(v) for k, v in series.items()}, "rules (clients x F)",
        "decrease of mean per-client throughput (%)",
        "Every cell with rules against the same cell without; the seed fitted the "
        "gradient of this per protocol and family.", log_x=True)
    if fig:
        out.append(fig)
    diff: dict[str, list[tuple[float, float]]] = {}
    for t in tests:
        g = dict(zip([f for f in FACTORS if f != "server"], t.group))
        diff.setdefault(f"{g['protocol']}/{g['family']} F={g['rules_per_client']}",
                        []).append((t.clients, t.diff_pct))
    fig = fg.points("fig-threads-epoll", "threads against epoll",
                    {k: sorted(v) for k, v in diff.items()}, "clients",
                    "threads vs epoll, mean per-client throughput (%)",
                    "Positive: a thread per client is faster than one epoll loop (the "
                    "seed's Figure 7).", log_x=True, zero_line=True)
    if fig:
        out.append(fig)
    return out


def lead(data: RunData) -> tuple[list[Block], list[fg.Figure]]:
    """Seed 001's analysis; its findings table is the one every report opens with
    (report.findings, from seed_findings)."""
    st = _Stats(data)
    figs = _figures(st.decs, st.tests)
    out: list[Block] = [Heading(2, "Seed 001's analysis", "seed001")]
    out += [FigureBlock(f, f"figures/{f.id}.svg") for f in figs]
    out += [Heading(3, "Loss per rule"), slope_table(st.slopes),
            Heading(3, "Decrease against plain forwarding (F = 0)"), decrease_table(st.decs),
            Heading(3, "Threads against epoll"),
            server_table(st.tests) if st.tests else Para("No cell was measured with both "
                                                         "server models.", "note"),
            Para(f"Turning point (threads faster below, epoll above): "
                 f"{f'{st.turn:.0f} clients' if st.turn else 'none in this run'}; the seed: "
                 f"about {es.SEED001['turning_point_clients']}.", "note"),
            Heading(3, "TCP against UDP, IPv4 against IPv6"),
            averages_table([(st.tcp_udp, es.SEED001["tcp_slower_than_udp_pct"]),
                            (st.v6_v4, es.SEED001["ipv6_slower_than_ipv4_pct"])])]
    if rates := es.conn_rates(data.records):
        out += [Heading(3, "Connections per second (beyond the seed)"), conn_rate_table(rates)]
    if (t := left_out_table(data)) is not None:
        out += [Heading(3, "Left out"), t]
    return out, figs


def report(data: RunData) -> CellReport:
    blocks, figs = lead(data)
    rep = CellReport(data, without_rules, blocks, tests_note=(
        "Tests in the metric sections below: each cell with rules against the same cell "
        "without (F = 0), as a ratio on the log scale paired by round where both ran in "
        "the same rounds, with Holm's correction."),
        labels={c: es.label(c) for c in {data.cell(r) for r in data.records}})
    rep.figures.extend(figs)
    return rep
