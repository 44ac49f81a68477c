"""Seed 000's claims decided on a rule-count sweep (backend x rules x frame size):
nftables (linear) against iptables at 1,000 rules and more, in rate and round trip;
its lag growing as frames get smaller (over every rule count); ipset and nft sets flat in the rule count and
about equal.

Each cell's comparison is the log ratio of the two backends, paired by round
(stats.log_ratio); a claim over many cells is decided on the mean of those log
ratios, its interval from their spread (fwbench.claims.pooled), by the rule
written with the claim (fwbench.findings.CLAIMS["000"]). "At every frame size" is
a claim per frame size, holding when it holds at each (fwbench.claims.every).
"""
from __future__ import annotations

from fwbench import claims as cl
from fwbench.findings import NOT_SHOWN, Finding, claim
from fwbench.metrics import Metric
from fwbench.report import analysis as an
from fwbench.report.data import RunData, SweepCell
from fwbench.report.deciding import decided

LARGE = 1000          # the seed's "once rule sets reach 1,000 rules"
LINEAR = ("nftables", "iptables-legacy")
SETS = ("ipset", "nftset")


def _metric(data: RunData, key: str | None) -> Metric | None:
    ms = data.metrics()
    return data.headline() if key is None else next((m for m in ms if m.key == key), None)


def _cells(data: RunData, m: Metric, a: str, b: str, keep=lambda n, f: True
           ) -> dict[tuple[int, int], cl.Estimate]:
    """(rules, frame) -> a's cell over b's, for every cell both have and `keep` takes."""
    cells = an.summaries(data, m)
    out = {}
    for ca in sorted(cells):
        cb = ca._replace(backend=b)
        if ca.backend == a and keep(ca.rules, ca.frame_size) and cb in cells:
            e = cl.estimate(cells[ca].values, cells[cb].values,
                            cells[ca].rounds, cells[cb].rounds)
            if e is not None:
                out[(ca.rules, ca.frame_size)] = e
    return out


def _slower(data: RunData, key: str | None, claim_key: str, what: str) -> Finding:
    c = claim("000", claim_key)
    m = _metric(data, key)
    if m is None:
        return Finding(c, "-", NOT_SHOWN, f"this run did not measure {what}")
    got = _cells(data, m, *LINEAR, lambda n, f: n >= LARGE)
    if not got:
        return Finding(c, "-", NOT_SHOWN, f"no rule count >= {LARGE:,} measured on both "
                       f"nftables and iptables-legacy")
    frames = sorted({f for _, f in got})
    per = {f"{f} B": cl.pooled([e for (n, g), e in got.items() if g == f], "rule counts")
           for f in frames}
    ours = f"nftables / iptables-legacy ({m.label}): " + ", ".join(
        f"{k} {cl.show(e)}" for k, e in per.items())
    d = cl.every(c.rule, per, "frame sizes")
    widest = max(per.values(), key=lambda e: e.se) if per else None
    return decided(data, c, ours, d, widest, [SweepCell(backend=x, rules=n, frame_size=f)
                                              for (n, f) in got for x in LINEAR])


def _small_frames(data: RunData) -> Finding:
    c = claim("000", "small-frames-worse")
    m = data.headline()
    # Every rule count: the seed's lag with small frames is at 40..1,000 rules
    # (from 2,500 on its ratio is the same at 64 B and 1518 B).
    got = _cells(data, m, *LINEAR) if m else {}
    frames = sorted({f for _, f in got})
    if len(frames) < 2:
        return Finding(c, "-", NOT_SHOWN, "needs nftables and iptables-legacy at two "
                       "frame sizes or more")
    small, large = frames[0], frames[-1]
    diffs = [cl.contrast(got[(n, small)], got[(n, large)])
             for n in sorted({n for n, _ in got}) if (n, small) in got and (n, large) in got]
    est = cl.pooled(diffs, "rule counts")
    if est is None:
        return Finding(c, "-", NOT_SHOWN, f"{small} B and {large} B are not both measured "
                       f"at one rule count")
    ours = (f"the ratio at {small} B over the ratio at {large} B: {cl.show(est)} over "
            f"{len(diffs)} rule counts")
    used = [n for n in sorted({n for n, _ in got}) if (n, small) in got and (n, large) in got]
    return decided(data, c, ours, cl.decide(c.rule, est), est,
                   [SweepCell(backend=x, rules=n, frame_size=f)
                    for x in LINEAR for n in used for f in (small, large)])


def _span(ests) -> str:
    rs = [e.ratio for e in ests]
    return f"{min(rs):.2f}..{max(rs):.2f}x over {len(rs)} cells"


def _sets_flat(data: RunData) -> Finding:
    c = claim("000", "sets-flat")
    m = data.headline()
    cells = an.summaries(data, m) if m else {}
    per: dict[str, cl.Estimate | None] = {}
    spans, read = [], []
    for b in SETS:
        ns = sorted({k.rules for k in cells if k.backend == b})
        if len(ns) < 2:
            continue
        parts = []
        for f in data.frame_sizes():
            top = SweepCell(backend=b, rules=ns[-1], frame_size=f)
            bottom = top._replace(rules=ns[0])
            hi, lo = cells.get(top), cells.get(bottom)
            if hi and lo and (e := cl.estimate(hi.values, lo.values, hi.rounds, lo.rounds)):
                parts.append(e)
                read += [top, bottom]
        per[b] = cl.pooled(parts, "frame sizes")
        if parts:
            spans.append(f"{b} {ns[-1]:,} / {ns[0]:,} rules {cl.show(per[b])} "
                         f"({_span(parts)})")
    if not per:
        return Finding(c, "-", NOT_SHOWN, "no set backend measured at two rule counts")
    d = cl.every(c.rule, per, "set backends")
    widest = max((e for e in per.values() if e), key=lambda e: e.se, default=None)
    return decided(data, c, "; ".join(spans) or "-", d, widest, read)


def _sets_equal(data: RunData) -> Finding:
    c = claim("000", "sets-equal")
    m = data.headline()
    got = _cells(data, m, *SETS) if m else {}
    est = cl.pooled(list(got.values()), "cells")
    if est is None:
        return Finding(c, "-", NOT_SHOWN, "no cell with both ipset and nftset measured")
    ours = f"ipset / nftset {cl.show(est)} ({_span(got.values())})"
    return decided(data, c, ours, cl.decide(c.rule, est), est,
                   [SweepCell(backend=x, rules=n, frame_size=f)
                    for (n, f) in got for x in SETS])


def findings(data: RunData) -> list[Finding]:
    if not data.is_sweep:
        return []
    return [_slower(data, None, "nft-slower-throughput", "a packet rate"),
            _slower(data, "rtt_us_median", "nft-slower-latency", "ping RTT"),
            _small_frames(data), _sets_flat(data), _sets_equal(data)]
