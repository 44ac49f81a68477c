"""Seed 000's claims decided on a rule-count sweep (backend x rules x frame size):
nftables (linear) against iptables at 1,000 rules and more, in rate and round trip;
its lag growing as frames get smaller; ipset and nft sets flat in the rule count and
about equal. Every comparison is analysis.compare's (the ratio on the log scale,
paired by round, its interval at its Holm level), Holm across the cells a claim
spans.
"""
from __future__ import annotations

from fwbench.findings import DOES_NOT_HOLD, HOLDS, NOT_SHOWN, Finding, claim
from fwbench.metrics import Metric
from fwbench.report import analysis as an
from fwbench.report.data import RunData

LARGE = 1000          # the seed's "once rule sets reach 1,000 rules"
FLAT = 0.10           # "flat", "about equal": every interval within 10 % of no change
LINEAR = ("nftables", "iptables-legacy")
SETS = ("ipset", "nftset")


def _metric(data: RunData, key: str | None) -> Metric | None:
    ms = data.metrics()
    return data.headline() if key is None else next((m for m in ms if m.key == key), None)


def _ratio(c: an.Comparison) -> str:
    iv = c.change_ci
    span = f" [{1 + iv.low:.2f}, {1 + iv.high:.2f}]" if iv else ""
    return f"{1 + c.change:.2f}x{span}"


def _pairs(data: RunData, m: Metric, a: str, b: str, keep) -> list[an.Comparison]:
    """a's cell against b's at every (rules, frame) both have and `keep` takes, Holm
    across them."""
    cells = an.summaries(data, m)
    out = [an.compare(cells[(a, n, f)], cells[(b, n, f)])
           for (x, n, f) in sorted(cells) if x == a and keep(n, f) and (b, n, f) in cells]
    an.apply_holm(out)
    return out


def _slower(data: RunData, key: str | None, claim_key: str, what: str) -> Finding:
    c = claim("000", claim_key)
    m = _metric(data, key)
    if m is None:
        return Finding(c, "-", NOT_SHOWN, f"this run did not measure {what}")
    comps = _pairs(data, m, *LINEAR, lambda n, f: n >= LARGE)
    if not comps:
        return Finding(c, "-", NOT_SHOWN, f"no rule count >= {LARGE:,} measured on both "
                       f"nftables and iptables-legacy")
    verdicts = [x.verdict(m) for x in comps]
    worse, better = verdicts.count("worse"), verdicts.count("better")
    top = max(x.a.cell[1] for x in comps)
    at_top = [x for x in comps if x.a.cell[1] == top]
    ours = (f"nftables / iptables-legacy ({m.label}) at {top:,} rules: " +
            ", ".join(f"{_ratio(x)} ({x.a.cell[2]} B)" for x in at_top) +
            f"; nftables worse in {worse} of {len(comps)} cells")
    ps = [x.holm_p for x in comps if x.holm_p is not None]
    tail = f" (Holm-adjusted p <= {an.format_p(max(ps))})" if ps and worse == len(comps) else ""
    if worse == len(comps):
        return Finding(c, ours, HOLDS, f"significantly worse in every cell with >= "
                       f"{LARGE:,} rules{tail}")
    if better:
        return Finding(c, ours, DOES_NOT_HOLD, f"nftables significantly better in "
                       f"{better} of {len(comps)} cells")
    return Finding(c, ours, NOT_SHOWN, f"{len(comps) - worse} of {len(comps)} cells show "
                   f"no significant difference (too few trials, or none there)")


def _small_frames(data: RunData) -> Finding:
    c = claim("000", "small-frames-worse")
    m = data.headline()
    frames = data.frame_sizes()
    comps = _pairs(data, m, *LINEAR, lambda n, f: True) if m else []
    if len(frames) < 2 or not comps:
        return Finding(c, "-", NOT_SHOWN, "needs nftables and iptables-legacy at two frame "
                       "sizes or more")
    top = max(x.a.cell[1] for x in comps)
    at = {x.a.cell[2]: x for x in comps if x.a.cell[1] == top}
    lo, hi = at.get(min(at)), at.get(max(at))
    if lo is None or hi is None or lo is hi:
        return Finding(c, "-", NOT_SHOWN, f"two frame sizes are not both measured at "
                       f"{top:,} rules")
    ours = f"at {top:,} rules: {_ratio(lo)} ({min(at)} B) against {_ratio(hi)} ({max(at)} B)"
    if not (lo.change_ci and hi.change_ci):
        return Finding(c, ours, NOT_SHOWN, "too few trials for the ratios' intervals")
    if lo.change_ci.high < hi.change_ci.low:
        return Finding(c, ours, HOLDS, "the small frame's ratio interval lies below the "
                       "large frame's")
    if lo.change_ci.low > hi.change_ci.high:
        return Finding(c, ours, DOES_NOT_HOLD, "the small frame's ratio interval lies "
                       "above the large frame's: nftables lags less with small frames")
    return Finding(c, ours, NOT_SHOWN, "the two ratios' intervals overlap")


def _within(comps: list[an.Comparison]) -> tuple[int, int]:
    """(intervals inside +-FLAT, intervals wholly outside it)."""
    inside = sum(1 for x in comps if x.change_ci and
                 -FLAT <= x.change_ci.low and x.change_ci.high <= FLAT)
    outside = sum(1 for x in comps if x.change_ci and
                  (x.change_ci.low > FLAT or x.change_ci.high < -FLAT))
    return inside, outside


def _flat_or_equal(c, comps: list[an.Comparison], what: str, ours: str) -> Finding:
    if not comps:
        return Finding(c, "-", NOT_SHOWN, f"no {what} measured")
    inside, outside = _within(comps)
    if inside == len(comps):
        return Finding(c, ours, HOLDS, f"all {len(comps)} intervals within "
                       f"{FLAT:.0%} of no change")
    if outside:
        return Finding(c, ours, DOES_NOT_HOLD, f"{outside} of {len(comps)} intervals "
                       f"wholly beyond {FLAT:.0%}")
    bare = sum(1 for x in comps if x.change_ci is None)
    wide = len(comps) - inside - bare
    return Finding(c, ours, NOT_SHOWN, "; ".join(
        ([f"{wide} of {len(comps)} intervals reach past {FLAT:.0%} (too wide to decide)"]
         if wide else []) +
        ([f"{bare} of {len(comps)} cells without an interval (too few trials)"]
         if bare else [])))


def _span(comps: list[an.Comparison]) -> str:
    ch = [1 + x.change for x in comps]
    return f"{min(ch):.2f}..{max(ch):.2f}x over {len(comps)} cells"


def _sets_flat(data: RunData) -> Finding:
    c = claim("000", "sets-flat")
    m = data.headline()
    cells = an.summaries(data, m) if m else {}
    comps = []
    for b in SETS:
        ns = sorted({n for (x, n, _f) in cells if x == b})
        if len(ns) < 2:
            continue
        for f in data.frame_sizes():
            if (b, ns[-1], f) in cells and (b, ns[0], f) in cells:
                comps.append(an.compare(cells[(b, ns[-1], f)], cells[(b, ns[0], f)]))
    ours = ("largest / smallest rule count: " + "; ".join(
        f"{b} {_span(bc)}" for b in SETS if (bc := [x for x in comps if x.a.cell[0] == b])))
    return _flat_or_equal(c, comps, "set backend at two rule counts", ours)


def _sets_equal(data: RunData) -> Finding:
    c = claim("000", "sets-equal")
    m = data.headline()
    comps = _pairs(data, m, *SETS, lambda n, f: True) if m else []
    ours = f"ipset / nftset: {_span(comps)}" if comps else "-"
    return _flat_or_equal(c, comps, "cell with both ipset and nftset", ours)


def findings(data: RunData) -> list[Finding]:
    if not data.is_sweep:
        return []
    return [_slower(data, None, "nft-slower-throughput", "a packet rate"),
            _slower(data, "rtt_us_median", "nft-slower-latency", "ping RTT"),
            _small_frames(data), _sets_flat(data), _sets_equal(data)]
