"""Seed 003's figures from a fixedrate run, in one place: the report shows them and
a study's findings check them.

Every function takes the run's records (a list of results.TrialRecord) or anything
holding them as `.records` (report.data.RunData), and uses ok trials only. A record
written before `chain` and `cpus` were factors counts as chain "forward", 1 CPU.

- `degradation_points(data)`: per (backend, frame_size, chain, cpus), the rule count
  where loss begins: `Degradation(rules, bracket)`, `rules` the largest count that
  still processed every packet and `bracket` (lo, hi) with hi the smallest count
  that did not (lost packets, held the sender back or fell behind: fixedrate's
  `degraded`). Each repetition's bracket comes from every rule count it measured (the
  grid's cells and the degradation search's steps); across repetitions the medians
  (median_low: counts that were measured). hi None: no loss up to the largest count
  measured; lo None: loss already at the smallest.
- `degradation_ratio(data)`: per (frame_size, chain, cpus), where iptables-legacy
  begins to lose over where nftables does (seed 003: about 5), from the brackets.
- `advantage_at(data, rules=6000)`: per (frame_size, chain, cpus), iptables-legacy's
  processed rate over nftables' at that rule count (seed 003: 5.2x, 2.9x, 1.7x for
  128, 512, 1280 B).
- `input_vs_forward(data)`: per (backend, frame_size, cpus), the processed rate with
  the rules in INPUT over FORWARD (seed 003: the same).
- `cpus_effect(data)`: per (backend, frame_size, chain), the most CPUs over one
  (seed 003: no difference between 1 and 4 vCPUs).

Ratios are `Ratio(value, interval)`: the ratio of the two cells' geometric means,
with a Welch interval on the logarithms (`log_ratio`: t with Welch-Satterthwaite
degrees of freedom, so with 2-3 trials a side the interval is wide, as it should
be); interval None with fewer than two trials a side.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Iterable, NamedTuple

from scipy import stats as sps

SEED_ADVANTAGE_AT_6000 = {128: 5.2, 512: 2.9, 1280: 1.7}
# Seed 003's degradation points (rules, roughly, read from its figures 3 and 4).
SEED_DEGRADATION = {"iptables": {128: 5000, 512: 11000, 1280: 20000},
                    "nftables": {128: 1000, 512: 2000, 1280: 3500}}
LEVEL = 0.95
# A point loses when its loss ratio is above this: the method's own criterion.
LOSS_THRESHOLD = 0.0


class Degradation(NamedTuple):
    rules: int | None                          # the last count with no loss
    bracket: tuple[int | None, int | None]     # (lo: no loss, hi: loss)


class Ratio(NamedTuple):
    value: float | None     # None: a degradation range with an open end
    interval: tuple[float, float] | None


def records_of(data) -> list:
    recs = getattr(data, "records", data)
    return [r for r in recs if r.status == "ok"]


def chain_of(r) -> str:
    return r.factors.get("chain", "forward")


def cpus_of(r) -> int:
    return r.factors.get("cpus", 1)


def _shortfall(point: dict) -> float:
    """How much of the flow did not get through: the loss ratio, or 1 when the
    firewall held the sender back or fell behind instead (methods.fixedrate's
    `degraded`), whatever it lost."""
    return 1.0 if point.get("sender_short") or point.get("fell_behind") \
        else point["loss_ratio"]


def _losses(r) -> list[tuple[int, float]]:
    """(rules, shortfall) of the trial itself and of every search step it made."""
    out = [(r.factors["rules"], _shortfall(r.metrics))]
    out += [(t["rules"], _shortfall(t)) for t in r.trials
            if "rules" in t and t.get("loss_ratio") is not None]
    return out


def _bracket(points: list[tuple[int, float]], threshold: float
             ) -> tuple[int | None, int | None]:
    lossy = [n for n, loss in points if loss > threshold]
    hi = min(lossy) if lossy else None
    clean = [n for n, loss in points if loss <= threshold and (hi is None or n < hi)]
    return (max(clean) if clean else None), hi


def degradation_points(data, threshold: float = LOSS_THRESHOLD
                       ) -> dict[tuple[str, int, str, int], Degradation]:
    """(backend, frame_size, chain, cpus) -> Degradation; see the module's doc."""
    reps: dict[tuple, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in records_of(data):
        key = (r.factors["backend"], r.factors["frame_size"], chain_of(r), cpus_of(r))
        reps[key][r.repetition] += _losses(r)
    out = {}
    for key, by_rep in reps.items():
        brackets = [_bracket(pts, threshold) for pts in by_rep.values()]
        los = [-1 if lo is None else lo for lo, _ in brackets]
        his = [math.inf if hi is None else hi for _, hi in brackets]
        lo, hi = statistics.median_low(los), statistics.median_high(his)
        lo = None if lo < 0 else lo
        hi = None if hi == math.inf else hi
        out[key] = Degradation(lo, (lo, hi))
    return out


def degradation_ratio(data, a: str = "iptables-legacy", b: str = "nftables",
                      threshold: float = LOSS_THRESHOLD) -> dict[tuple[int, str, int], Ratio]:
    """(frame_size, chain, cpus) -> where a begins to lose over where b does (seed 003:
    about 5, 5.5 and 5.7 for 128, 512 and 1280 B). The interval is the ratio's whole
    range over the brackets, (lo_a / hi_b, hi_a / lo_b), with 0 or inf where a
    bracket is open: b that never lost makes the low end 0 (a flow where nftables
    lasts at least as long as iptables stays, and can contradict the claim), a that
    never lost makes the high end inf. The value is the ratio of the two brackets'
    geometric middles where all four ends are known, else None. A flow is left out
    only where the range says nothing (0 to inf)."""
    pts = degradation_points(data, threshold)
    out = {}
    for (backend, f, c, k), da in pts.items():
        db = pts.get((b, f, c, k))
        if backend != a or db is None:
            continue
        (alo, ahi), (blo, bhi) = da.bracket, db.bracket
        low = alo / bhi if alo and bhi else 0.0
        high = ahi / blo if ahi and blo else math.inf
        if low == 0.0 and high == math.inf:
            continue
        mid = math.sqrt(alo * ahi) / math.sqrt(blo * bhi) if alo and ahi and blo and bhi \
            else None
        out[(f, c, k)] = Ratio(mid, (low, high))
    return out


def bracket_text(d: Degradation) -> str:
    lo, hi = d.bracket
    if hi is None:
        return f"none up to {lo:,}" if lo is not None else "-"
    if lo is None:
        return f"at or below {hi:,}"
    return f"{lo:,}-{hi:,}"


def log_ratio(a: Iterable[float], b: Iterable[float], level: float = LEVEL) -> Ratio | None:
    """Geometric mean of a over that of b, with a Welch t interval on the logs. None
    when either side has no positive value."""
    la = [math.log(x) for x in a if x and x > 0]
    lb = [math.log(x) for x in b if x and x > 0]
    if not la or not lb:
        return None
    d = statistics.fmean(la) - statistics.fmean(lb)
    if len(la) < 2 or len(lb) < 2:
        return Ratio(math.exp(d), None)
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    se = math.sqrt(va + vb)
    if se == 0:
        return Ratio(math.exp(d), (math.exp(d), math.exp(d)))
    df = (va + vb) ** 2 / ((va ** 2 / (len(la) - 1) if va else 0) +
                           (vb ** 2 / (len(lb) - 1) if vb else 0))
    t = float(sps.t.ppf(0.5 + level / 2, df))
    return Ratio(math.exp(d), (math.exp(d - t * se), math.exp(d + t * se)))


def processed(data) -> dict[tuple[str, int, int, str, int], list[float]]:
    """(backend, rules, frame_size, chain, cpus) -> processed pps of its ok trials."""
    out: dict[tuple, list[float]] = defaultdict(list)
    for r in records_of(data):
        f = r.factors
        out[(f["backend"], f["rules"], f["frame_size"], chain_of(r), cpus_of(r))].append(
            r.metrics["processed_pps"])
    return dict(out)


def advantage_estimates(data, rules: int = 6000, a: str = "iptables-legacy",
                        b: str = "nftables") -> dict[tuple[int, str, int], "Estimate"]:
    """(frame_size, chain, cpus) -> a's processed rate over b's at `rules`, as
    fwbench.claims estimates (Welch on the logs), for the claims."""
    from fwbench.claims import estimate
    cells = processed(data)
    out = {}
    for (backend, n, f, chain, cpus), xs in cells.items():
        ys = cells.get((b, n, f, chain, cpus))
        if backend == a and n == rules and ys and (e := estimate(xs, ys)) is not None:
            out[(f, chain, cpus)] = e
    return out


def input_forward_estimates(data) -> dict[tuple[str, int, int], "Estimate"]:
    """(backend, frame_size, cpus) -> INPUT over FORWARD at the largest rule count both
    chains measured, as fwbench.claims estimates (Welch on the logs)."""
    from fwbench.claims import estimate
    cells = processed(data)
    out = {}
    for (b, f, cpus) in sorted({(b, f, k) for (b, n, f, c, k) in cells}):
        n = _common_top(cells, b, f, [("input", cpus), ("forward", cpus)])
        xs, ys = cells.get((b, n, f, "input", cpus)), cells.get((b, n, f, "forward", cpus))
        if xs and ys and (e := estimate(xs, ys)) is not None:
            out[(b, f, cpus)] = e
    return out


def advantage_at(data, rules: int = 6000, a: str = "iptables-legacy",
                 b: str = "nftables") -> dict[tuple[int, str, int], Ratio]:
    """(frame_size, chain, cpus) -> a's processed rate over b's at `rules`."""
    cells = processed(data)
    out = {}
    for (backend, n, f, chain, cpus), xs in cells.items():
        if backend != a or n != rules:
            continue
        ys = cells.get((b, n, f, chain, cpus))
        if ys and (r := log_ratio(xs, ys)) is not None:
            out[(f, chain, cpus)] = r
    return out


def _common_top(cells: dict, backend: str, frame: int, variants: list[tuple]) -> int | None:
    """The largest rule count every variant (chain, cpus) of a backend measured."""
    counts = [{n for (b, n, f, c, k) in cells if (b, f, c, k) == (backend, frame, *v)}
              for v in variants]
    both = set.intersection(*counts) if counts else set()
    return max(both) if both else None


def input_vs_forward(data, rules: int | None = None
                     ) -> dict[tuple[str, int, int], Ratio]:
    """(backend, frame_size, cpus) -> processed rate in INPUT over FORWARD at `rules`
    (None: the largest rule count both chains measured, where they differ most)."""
    cells = processed(data)
    out = {}
    for (b, f, cpus) in sorted({(b, f, k) for (b, n, f, c, k) in cells}):
        n = rules if rules is not None else \
            _common_top(cells, b, f, [("input", cpus), ("forward", cpus)])
        xs, ys = cells.get((b, n, f, "input", cpus)), cells.get((b, n, f, "forward", cpus))
        if xs and ys and (r := log_ratio(xs, ys)) is not None:
            out[(b, f, cpus)] = r
    return out


def cpus_effect(data, rules: int | None = None) -> dict[tuple[str, int, str], Ratio]:
    """(backend, frame_size, chain) -> processed rate on the most CPUs over one CPU at
    `rules` (None: the largest rule count both measured)."""
    cells = processed(data)
    counts = sorted({k for (_, _, _, _, k) in cells})
    if len(counts) < 2:
        return {}
    lo, hi = counts[0], counts[-1]
    out = {}
    for (b, f, c) in sorted({(b, f, c) for (b, n, f, c, k) in cells}):
        n = rules if rules is not None else _common_top(cells, b, f, [(c, lo), (c, hi)])
        xs, ys = cells.get((b, n, f, c, hi)), cells.get((b, n, f, c, lo))
        if xs and ys and (r := log_ratio(xs, ys)) is not None:
            out[(b, f, c)] = r
    return out


def softirq_by_cpu(data) -> dict[tuple[str, int, int, str, int], dict[str, float]]:
    """(backend, rules, frame_size, chain, cpus) -> each CPU's median softirq share of
    the trial window (seed 003's figures 6 and 7)."""
    shares: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records_of(data):
        s = r.metrics.get("softirq_share")
        if not s:
            continue
        f = r.factors
        key = (f["backend"], f["rules"], f["frame_size"], chain_of(r), cpus_of(r))
        for c, v in s.items():
            shares[key][c].append(v)
    return {k: {c: statistics.median(v) for c, v in sorted(d.items())}
            for k, d in shares.items()}
