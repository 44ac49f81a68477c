"""`fwbench report` of a loadlatency run (seed 004): the seed's figures per
configuration beside ours, latency under load against no load, iptables against
nftables (its Tables 2 and 3), NAT against forwarding, the latency distributions
and the per-second time series; then every metric as any experiment has it
(report.cells), each loaded cell against the same cell without load.
"""
from __future__ import annotations

import statistics

from fwbench import claims as cl
from fwbench.findings import NOT_SHOWN, Finding, claim
from fwbench.experiments.loadlatency import stats as ll
from fwbench.metrics import round_trips
from fwbench.plan import Cell
from fwbench.report import analysis as an
from fwbench.report import figures as fg
from fwbench.report.cells import CellReport, References
from fwbench.report.data import RunData
from fwbench.report.document import Block, Bullets, FigureBlock, Heading, Para, Table
from fwbench.report.deciding import decided
from fwbench.report.formats import fmt_pct


def without_load(data: RunData, cells: dict) -> References:
    return {c: c._replace(load="none") for c in cells
            if c.load != "none" and c._replace(load="none") in cells}


def _name(c: Cell) -> str:
    return (f"{c.backend}, {c.ruleset.removeprefix('seed004-')}, {c.load}"
            + (f", {c.entries:,} conns" if c.entries else ""))


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _p(t) -> str:
    return an.format_p(t.p if t else None)


def figures_table(cs: dict, round_trip: bool = False) -> Table:
    kind = "round-trip" if round_trip else "one-way"
    rows = []
    for c, s in sorted(cs.items(), key=lambda kv: (kv[0].load, kv[0].ruleset, kv[0].entries,
                                                   ll._backend_order(kv[0].backend))):
        p = s.pooled()
        ci = s.value_ci()
        seed = ll.SEED004.get((c.ruleset, c.backend, c.load)) if c.entries == 0 else None
        rows.append([
            c.ruleset, c.backend, c.load, f"{c.entries:,}", str(s.n),
            (f"{statistics.median(s.trial_values):,.1f}" +
             (f" [{ci.low:,.1f}, {ci.high:,.1f}]" if ci else "")) if s.n else "-",
            f"{statistics.median(s.trial_medians):,.1f}" if s.n else "-",
            _us(p.get("mean")), _us(p.get("median")), _us(p.get("sd")),
            f"{p['p2_5']:,.0f}..{p['p97_5']:,.0f}" if p else "-",
            f"{statistics.median(s.probe_p50):,.1f} / {statistics.median(s.probe_p99):,.1f}"
            if s.probe_p50 else "-",
            f"{statistics.median(s.load_up) / 1e9:.2f} / {statistics.median(s.load_down) / 1e9:.2f}"
            + (f" ({s.short} short)" if s.short else "") if s.load_up else "-",
            f"{seed[0]:,.2f} / {seed[1]:,.0f} / {seed[2]:,.2f}" if seed else ""])
    return Table(["rule set", "backend", "load", "conns", "n", "trial mean [95 %]",
                  "trial median",
                  "pooled mean", "pooled median", "pooled sd", "95 % of replies",
                  f"{kind} p50 / p99", "load up / down Gbit/s", "seed mean / median / sd"],
                 rows, "Ping RTT through the firewall (µs). Trial mean: each trial's mean "
                 "reply, the median over trials and its bootstrap 95 % interval (the "
                 "tests below use the trial means); trial median: the same for each "
                 "trial's median reply. "
                 "Pooled: every reply of the configuration, as seed 004 reported (its error "
                 "bars were the range holding 95 % of replies). "
                 f"{kind.capitalize()}: the engine's stamped probes. Seed 004: 2017, dedicated hosts, 1 GbE, 10 x 15 min.",
                 id="seed004-figures")


def tests_table(tests: list[ll.Test], ident: str, caption: str,
                seed_column: bool = False) -> Table:
    rows = []
    for t in tests:
        ci = t.change_ci
        row = [t.what, f"{t.n[0]}/{t.n[1]}",
               fmt_pct(t.change) + (f" [{fmt_pct(ci.low)}, {fmt_pct(ci.high)}]" if ci
                                    else ""),
               f"{100 * (1 - t.hv.alpha):.3g} %" if t.hv else "-",
               t.ratio.test if t.ratio else "-", an.format_p(t.holm), t.verdict(),
               _p(t.less), _p(t.greater), _p(t.two),
               "-" if t.delta is None else f"{t.delta:+.2f}", _p(t.pooled_two)]
        if seed_column:
            sig = ll.SEED004_TESTS.get((t.a.ruleset, t.a.load)) if t.a.entries == 0 and \
                {t.a.backend, t.b.backend} == {"nftables", "iptables-legacy"} else None
            row.append("" if sig is None else
                       f"{'yes' if sig[0] else 'no'} / {'yes' if sig[1] else 'no'}")
        rows.append(row)
    head = ["a vs b", "n", "mean RTT a / b - 1 [interval]", "interval level", "test",
            "p Holm", "verdict", "seed's test: Mann-Whitney a < b",
            "seed's test: a > b", "seed's test: two-tailed", "Cliff's delta",
            "p pooled replies (seed's way)"]
    if seed_column:
        head.append("seed: significant one / two-tailed")
    return Table(head, rows, caption + " Decided by the log ratio of the trials' mean "
                 "RTTs, paired by round where both ran in the same rounds (else Welch on "
                 "the logs), two-sided, the interval at the level Holm tested it at; the "
                 "seed's tests beside decide nothing.", id=ident, kind="pvalues")


def sentence(t: ll.Test, subject: str) -> str:
    v = t.verdict()
    ci = t.change_ci
    span = f" [{fmt_pct(ci.low)}, {fmt_pct(ci.high)}]" if ci else ""
    if v in ("lower", "higher"):
        return (f"{subject}: {v} ({fmt_pct(t.change)}{span} in mean RTT), "
                f"p = {an.format_p(t.holm)} ({t.ratio.test}, Holm-adjusted).")
    if v == "untestable":
        return f"{subject}: not testable (too few trials)."
    return (f"{subject}: {v} ({fmt_pct(t.change)}{span}, p = "
            f"{an.format_p(t.holm)}, Holm-adjusted).")


def lead(data: RunData) -> tuple[list[Block], list[fg.Figure]]:
    cs = ll.configs(data.records)
    loads, backends, nats = ll.load_tests(cs), ll.backend_tests(cs), ll.nat_tests(cs)
    said = [sentence(t, t.what) for t in loads + nats + backends]
    out: list[Block] = [Heading(2, "Seed 004's questions", "seed004"), Bullets(said),
                        Para("Unit of replication: the trial (its mean reply, as the "
                             "seed reported averages). The "
                             "pooled p-values treat every reply as independent, as the "
                             "seed did; replies of one trial share its machine state, so "
                             "those p-values overstate certainty and decide nothing here. "
                             "The seed's Mann-Whitney cannot show a difference with few "
                             "trials (its smallest two-tailed p is 2/C(2n, n): 0.029 at n = "
                             "4, before Holm); the log ratio that decides here can.",
                             "note"),
                        Heading(3, "Per configuration (the seed's Figures 6.1-6.3)"),
                        figures_table(cs, round_trips(data.records)),
                        Heading(3, "Under load against no load"),
                        tests_table(loads, "load-vs-none",
                                    "Each backend and rule set: under load (a) against "
                                    "without (b); Holm across this table."),
                        Heading(3, "Backend against backend (the seed's Tables 2 and 3)"),
                        tests_table(backends, "backends",
                                    "Per rule set and load; Holm across this table. The "
                                    "seed compared nftables with iptables (legacy).",
                                    seed_column=True),
                        Heading(3, "NAT against forwarding"),
                        tests_table(nats, "nat-vs-forward",
                                    "Per backend and load; Holm across this table.")]
    if entries := ll.entries_tests(cs):
        out += [Heading(3, "Background connections (beyond the seed)"),
                tests_table(entries, "conntrack-entries",
                            "Each number of background connections held in the "
                            "firewall's table against the fewest, per backend and load; "
                            "Holm across this table. The table's count and memory are in "
                            "each trial's record (conntrack)."),
                Bullets([sentence(t, t.what) for t in entries])]
    figs: list[fg.Figure | None] = []
    for load in dict.fromkeys(c.load for c in cs):
        figs.append(fg.distributions(
            f"fig-rtt-cdf-{load}", f"ping RTT distribution, load {load}",
            {_name(c): list(s.replies) for c, s in cs.items() if c.load == load}))
        for stat, word in (("median", "median"), ("p99", "99th percentile")):
            figs.append(fg.time_series(
                f"fig-rtt-series-{stat}-{load}", f"ping RTT {word} per second, load {load}",
                {_name(c): _series(data, c, stat) for c in cs if c.load == load},
                f"{word} RTT in that second (µs)",
                f"Each second of the measurement window: the median over trials of that "
                f"second's {word} reply. A flat line: latency was steady over the trial."))
    figs = [f for f in figs if f]
    out[2:2] = [FigureBlock(f, f"figures/{f.id}.svg") for f in figs]
    return out, figs


def _series(data: RunData, c: Cell, stat: str) -> list[tuple[float, float]]:
    per: dict[int, list[float]] = {}
    for r in data.ok:
        if data.cell(r) != c:
            continue
        for i, sec in enumerate((r.metrics.get("series") or {}).get("ping") or []):
            if sec.get(stat) is not None:
                per.setdefault(i, []).append(sec[stat])
    return [(i + 1, statistics.median(v)) for i, v in sorted(per.items())]


def report(data: RunData) -> CellReport:
    blocks, figs = lead(data)
    rep = CellReport(data, without_load, blocks, tests_note=(
        "Tests in the metric sections below: each loaded cell against the same cell "
        "without load, as a ratio on the log scale paired by round where both ran in the "
        "same rounds, with Holm's correction; the seed's own test, Mann-Whitney U, is in "
        "the tables above."))
    rep.figures.extend(figs)
    return rep


# --- seed 004's claims (fwbench.findings.CLAIMS["004"]) -------------------------------

def _ratio(a: ll.ConfigSummary, b: ll.ConfigSummary) -> cl.Estimate | None:
    """a's mean RTT over b's, paired by round where both ran in the same rounds."""
    return cl.estimate(a.trial_values, b.trial_values, a.rounds, b.rounds)


def _pooled(data: RunData, c, pairs: dict[str, tuple], what: str) -> Finding:
    """The claim decided on the mean log ratio over `pairs` (name -> (a, b))."""
    got = {k: e for k, (a, b) in pairs.items() if (e := _ratio(a, b)) is not None}
    est = cl.pooled(list(got.values()), what)
    if est is None:
        return Finding(c, "-", NOT_SHOWN, f"no {what} measured on both sides with two "
                       f"trials or more")
    ours = f"{cl.show(est)} over {len(got)} {what} (" + ", ".join(
        f"{k} {e.ratio:.2f}x" for k, e in got.items()) + ")"
    return decided(data, c, ours, cl.decide(c.rule, est), est,
                   [x.config for k in got for x in pairs[k]])


def _load_finding(data: RunData, cs: dict) -> Finding:
    c = claim("004", "load-triples-latency")
    pairs = {f"{k.backend}, {k.ruleset.removeprefix('seed004-')}, {k.load}":
             (s, cs[k._replace(load="none")])
             for k, s in cs.items() if k.load != "none" and k._replace(load="none") in cs}
    return _pooled(data, c, pairs, "configurations")


def _nat_finding(data: RunData, cs: dict) -> Finding:
    c = claim("004", "nat-equals-forward")
    fwd = {k: k._replace(ruleset="seed004-forward") for k in cs}
    pairs = {f"{k.backend}, {k.load}": (s, cs[fwd[k]]) for k, s in cs.items()
             if k.ruleset == "seed004-nat" and fwd[k] in cs}
    return _pooled(data, c, pairs, "configurations")


def _nft_under_load(data: RunData, cs: dict) -> Finding:
    c = claim("004", "nft-lower-under-load")
    ipt = {k: k._replace(backend="iptables-legacy") for k in cs}
    pairs = {f"{k.ruleset.removeprefix('seed004-')}, {k.load}": (s, cs[ipt[k]])
             for k, s in cs.items()
             if k.backend == "nftables" and k.load != "none" and ipt[k] in cs}
    return _pooled(data, c, pairs, "rule sets")


def findings(data: RunData) -> list[Finding]:
    cs = ll.configs(data.records)
    plain = {k: v for k, v in cs.items() if not k.entries}   # without background entries
    return [_load_finding(data, plain), _nat_finding(data, plain),
            _nft_under_load(data, plain)]
