"""Seed 004's statistics from a run's records: per configuration the mean, median,
standard deviation and the range holding 95 % of the ping replies (the seed's
Figures 6.1-6.3, whose error bars were that range); Mann-Whitney U one- and
two-tailed between backends for each rule set and load (its Tables 2 and 3), with
Cliff's delta and Holm's correction; the load / no-load ratio with its interval;
NAT against forwarding.

The unit of replication is the trial: each trial's mean RTT is one value (the seed
reported averages; under load it is the tail that grows, and a mean sees the tail
where a median does not: on a VM the median RTT can even fall under load, because a
busy CPU wakes faster than an idle one), so n is the number of trials per
configuration. Medians are reported beside it. The seed instead pooled every ping reply of
its ten runs into one sample; replies within a run are not independent (they share
the run's machine state), so pooled p-values overstate certainty. Both are given:
the per-trial tests decide the conclusions, the pooled ones show what the seed's
method would say on the same data.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
from rich.table import Table

from fwbench import stats
from fwbench import summary
from fwbench.metrics import round_trips
from fwbench.plan import named_cell
from fwbench.results import TrialRecord

FACTORS = ("ruleset", "backend", "load", "entries")
ALPHA = 0.05
# Seed 004's published figures (µs): (rule set, backend, load) -> (mean, median, sd).
# Its text labels every median "NFtables forwarding"; the order of the paragraphs
# says which configuration each belongs to.
SEED004 = {
    ("seed004-forward", "nftables", "none"): (379.92, 370.00, 25.19),
    ("seed004-nat", "nftables", "none"): (380.71, 371.00, 24.55),
    ("seed004-forward", "iptables-legacy", "none"): (380.61, 371.00, 24.90),
    ("seed004-nat", "iptables-legacy", "none"): (381.35, 372.00, 25.35),
    ("seed004-forward", "nftables", "tcp-bidir"): (1109.05, 1110.00, 99.89),
    ("seed004-nat", "nftables", "tcp-bidir"): (1106.56, 1105.00, 100.72),
    ("seed004-forward", "iptables-legacy", "tcp-bidir"): (1111.90, 1107.00, 100.42),
    ("seed004-nat", "iptables-legacy", "tcp-bidir"): (1108.42, 1105.00, 100.16),
}
# Its Tables 2 and 3: (rule set, load) -> (one-tailed significant, two-tailed), nftables
# against iptables.
SEED004_TESTS = {
    ("seed004-forward", "none"): (True, True), ("seed004-nat", "none"): (True, True),
    ("seed004-forward", "tcp-bidir"): (True, False), ("seed004-nat", "tcp-bidir"): (True, True),
}

Config = named_cell(FACTORS)  # a cell: c.ruleset, c.backend, c.load, c.entries


@dataclass
class ConfigSummary:
    config: Config
    trial_values: list[float]                  # each ok trial's mean RTT, µs
    trial_medians: list[float]                 # each ok trial's median RTT, µs
    replies: np.ndarray                        # every ping RTT of the ok trials, µs
    lost: int
    probe_p50: list[float] = field(default_factory=list)   # engine one-way, per trial
    probe_p99: list[float] = field(default_factory=list)
    load_up: list[float] = field(default_factory=list)     # bits/s per trial
    load_down: list[float] = field(default_factory=list)
    short: int = 0                                          # trials whose load fell short
    rounds: list[int] = field(default_factory=list)         # each trial value's round

    @property
    def n(self) -> int:
        return len(self.trial_values)

    def pooled(self) -> dict:
        r = self.replies
        if not len(r):
            return {}
        return {"mean": float(r.mean()), "median": float(np.median(r)),
                "sd": float(r.std(ddof=1)) if len(r) > 1 else None,
                "p2_5": float(np.percentile(r, 2.5)), "p97_5": float(np.percentile(r, 97.5)),
                "replies": int(len(r))}

    def value_ci(self) -> stats.Interval | None:
        """Bootstrap 95 % interval of the median of the trials' mean RTTs."""
        return stats.median_ci(self.trial_values) if self.n >= 2 else None


def configs(records: list[TrialRecord]) -> dict[Config, ConfigSummary]:
    out: dict[Config, ConfigSummary] = {}
    replies: dict[Config, list[float]] = defaultdict(list)
    for r in sorted(records, key=lambda r: r.repetition):
        c = Config(*r.cell(FACTORS))
        s = out.setdefault(c, ConfigSummary(c, [], [], np.empty(0), 0))
        if r.status != "ok":
            continue
        m = r.metrics
        s.trial_values.append(m["ping"]["mean"])
        s.rounds.append(r.repetition)
        s.trial_medians.append(m["ping"]["median"])
        s.lost += m["ping"].get("lost", 0)
        replies[c] += [x[2] for x in m.get("ping_replies") or []]
        if m.get("probes"):
            s.probe_p50.append(m["probes"]["p50"])
            s.probe_p99.append(m["probes"]["p99"])
        if m.get("load"):
            s.load_up.append(m["load"]["up_bps"])
            s.load_down.append(m["load"]["down_bps"])
        s.short += bool(m.get("load_short"))
    for c, v in replies.items():
        out[c].replies = np.asarray(v, float)
    return out


@dataclass
class Test:
    """a against b on the trials' mean RTTs. `ratio` decides: the log ratio, paired
    by round where both ran in the same rounds, else Welch on the logs
    (stats.log_ratio), two-sided, Holm across the test's table. The seed's tests
    beside it decide nothing: Mann-Whitney on the trial means (one- and two-tailed),
    Cliff's delta, and Mann-Whitney on every reply pooled (the seed's way)."""
    what: str                   # e.g. "nftables vs iptables-legacy, seed004-nat, tcp-bidir"
    a: Config
    b: Config
    ratio: stats.RatioTest | None        # decides
    less: stats.TestResult | None        # the seed's: one-tailed, a lower than b
    greater: stats.TestResult | None     # the seed's: one-tailed, a higher than b
    two: stats.TestResult | None         # the seed's: two-tailed
    delta: float | None                  # Cliff's delta of a against b
    pooled_two: stats.TestResult | None  # the seed's way: every reply pooled
    pooled_less: stats.TestResult | None
    n: tuple[int, int] = (0, 0)          # trials a side
    hv: stats.HolmVerdict | None = None  # Holm's verdict in its table

    @property
    def holm(self) -> float | None:
        """The deciding p, Holm-adjusted in its table."""
        return self.hv.p_adjusted if self.hv else None

    @property
    def change(self) -> float | None:
        """a / b - 1 of the trials' mean RTTs (geometric means, or the mean
        within-round ratio)."""
        return self.ratio.ratio - 1 if self.ratio else None

    @property
    def change_ci(self) -> stats.Interval | None:
        """The interval of `change` at the level Holm tested it at: it excludes 0
        exactly where a difference is shown."""
        if self.ratio is None:
            return None
        iv = self.ratio.interval(1 - self.hv.alpha if self.hv else 1 - ALPHA)
        return stats.Interval(iv.low - 1, iv.high - 1, iv.coverage)

    def verdict(self) -> str:
        """lower / higher (a against b); no difference shown (the interval within
        2x either way); undecided (wider); untestable (too few trials)."""
        if self.ratio is None or self.hv is None:
            return "untestable"
        if self.hv.rejected:
            return "lower" if self.ratio.log_ratio < 0 else "higher"
        iv = self.ratio.interval(1 - self.hv.alpha)
        return "undecided" if iv.low <= 0.5 or iv.high >= 2.0 else "no difference shown"


def test(what: str, a: ConfigSummary, b: ConfigSummary) -> Test:
    x, y = a.trial_values, b.trial_values
    ra, rb = a.replies, b.replies
    return Test(what, a.config, b.config,
                stats.log_ratio(x, y, a.rounds, b.rounds) if x and y else None,
                stats.mann_whitney(x, y, "less"), stats.mann_whitney(x, y, "greater"),
                stats.mann_whitney(x, y), stats.cliffs_delta(x, y),
                stats.mann_whitney(ra, rb) if len(ra) and len(rb) else None,
                stats.mann_whitney(ra, rb, "less") if len(ra) and len(rb) else None,
                (len(x), len(y)))


def _holm(tests: list[Test]) -> list[Test]:
    for t, h in zip(tests, stats.holm_levels([t.ratio.p if t.ratio else None
                                              for t in tests], ALPHA)):
        t.hv = h
    return tests


def _levels(cs: dict[Config, ConfigSummary], factor: str) -> list:
    return list(dict.fromkeys(getattr(c, factor) for c in cs))


def backend_tests(cs: dict[Config, ConfigSummary]) -> list[Test]:
    """Every pair of backends, per rule set, load and entries (the seed's Tables 2 and
    3 are nftables against iptables-legacy); one Holm family."""
    out = []
    for r in _levels(cs, "ruleset"):
        for load in _levels(cs, "load"):
            for n in _levels(cs, "entries"):
                at = Config(ruleset=r, backend=None, load=load, entries=n)  # each b below
                bs = [b for b in _levels(cs, "backend") if at._replace(backend=b) in cs]
                for b1, b2 in combinations(sorted(bs, key=_backend_order), 2):
                    # nftables first, as the seed put it
                    a, b = (b2, b1) if b2 == "nftables" else (b1, b2)
                    out.append(test(f"{a} vs {b}, {r}, {load}" + (f", {n:,} conns" if n else ""),
                                    cs[at._replace(backend=a)], cs[at._replace(backend=b)]))
    return _holm(out)


def _backend_order(b: str) -> int:
    order = ("nftables", "iptables-legacy", "iptables-nft")
    return order.index(b) if b in order else len(order)


def load_tests(cs: dict[Config, ConfigSummary]) -> list[Test]:
    """Under load against no load, per rule set, backend and entries (the seed's
    one-tailed Mann-Whitney beside)."""
    out = []
    for c, s in cs.items():
        idle = c._replace(load="none")
        if c.load != "none" and idle in cs:
            out.append(test(f"{c.backend}, {c.ruleset}: {c.load} vs none"
                            + (f", {c.entries:,} conns" if c.entries else ""), s, cs[idle]))
    return _holm(out)


def nat_tests(cs: dict[Config, ConfigSummary]) -> list[Test]:
    """NAT against forwarding, per backend, load and entries."""
    out = []
    for c, s in cs.items():
        fwd = c._replace(ruleset="seed004-forward")
        if c.ruleset == "seed004-nat" and fwd in cs:
            out.append(test(f"{c.backend}, {c.load}: NAT vs forwarding"
                            + (f", {c.entries:,} conns" if c.entries else ""), s, cs[fwd]))
    return _holm(out)


def entries_tests(cs: dict[Config, ConfigSummary]) -> list[Test]:
    """Each number of background connections against the fewest, per rule set,
    backend and load (beyond the seed: what a fuller table costs)."""
    levels = sorted(_levels(cs, "entries"))
    out = []
    for c, s in cs.items():
        fewest = c._replace(entries=levels[0])
        if c.entries != levels[0] and fewest in cs:
            out.append(test(f"{c.backend}, {c.ruleset}, {c.load}: {c.entries:,} vs "
                            f"{levels[0]:,} conns", s, cs[fewest]))
    return _holm(sorted(out, key=lambda t: t.what))


def table(records: list[TrialRecord]) -> Table:
    """The table that ends a run: per configuration the trials' median RTT, the
    pooled mean / median / sd and the engine's one-way p50, the load achieved."""
    cs = configs(records)

    def row(c, s) -> list[str]:
        p = s.pooled()
        ci = s.value_ci()
        med = (f"{statistics.median(s.trial_values):,.0f}" +
               (f" [{ci.low:,.0f}, {ci.high:,.0f}]" if ci else "")) if s.n else "-"
        load = (f"{statistics.median(s.load_up) / 1e9:.2f} / "
                f"{statistics.median(s.load_down) / 1e9:.2f}" if s.load_up else "-")
        return [c.ruleset, c.backend, c.load, f"{c.entries:,}", str(s.n), med,
                f"{p['mean']:,.0f}" if p else "-", f"{p['median']:,.0f}" if p else "-",
                f"{p['sd']:,.0f}" if p and p["sd"] is not None else "-",
                f"{statistics.median(s.probe_p50):,.1f}" if s.probe_p50 else "-", load]
    return summary.render(
        "loadlatency: ping RTT through the firewall, µs (trial means: their median over "
        "trials; pooled replies as seed 004 reported them)",
        [(col, "left" if col in ("rule set", "backend", "load") else "right") for col in (
            "rule set", "backend", "load", "conns", "n ok", "trial mean [95 %]",
            "pooled mean", "median", "sd",
            "round-trip p50" if round_trips(records) else "one-way p50",
            "load up/down Gbit/s")],
        (row(c, s) for c, s in sorted(cs.items(), key=lambda kv: (
            kv[0].ruleset, kv[0].load, kv[0].entries, _backend_order(kv[0].backend)))))
