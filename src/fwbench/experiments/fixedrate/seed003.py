"""Seed 003's claims decided on a fixedrate run, from fwbench.experiments.fixedrate.stats (the
same numbers the run's report shows): where nftables begins to lose against
iptables, iptables' advantage at 6,000 rules by packet size, INPUT against FORWARD.
Each by the rule written with it (fwbench.findings.CLAIMS["003"], fwbench.claims).
"""
from __future__ import annotations

import math

from fwbench import claims as cl
from fwbench.findings import NOT_SHOWN, Finding, claim
from fwbench.experiments.fixedrate import stats as s3
from fwbench.report.data import RunData
from fwbench.report.deciding import cells_where, decided


WHOLE = 0.005      # a ratio within 0.5 % of 1, as sure: both processed the flow whole


def _variant(chain: str, cpus: int) -> str:
    return f"{chain.upper()}, {cpus} CPU{'s' if cpus > 1 else ''}"


def _range(r: s3.Ratio) -> str:
    lo, hi = r.interval
    mid = "" if r.value is None else f"{r.value:.1f}x "
    return f"{mid}[{lo:.1f}, {'inf' if hi == math.inf else f'{hi:.1f}'}]"


def _degrades(data: RunData) -> Finding:
    """In every flow, iptables-legacy's degradation point over nftables' lies in the
    claimed size: a range from the brackets, no test, so no Holm: a flow whose range
    lies wholly on the other side of 1 (or outside the size) decides it."""
    c = claim("003", "nft-degrades-earlier")
    got = s3.degradation_ratio(data)
    if not got:
        return Finding(c, "-", NOT_SHOWN, "no flow where iptables-legacy or nftables "
                       "began to lose within the rule counts measured")
    ours = "; ".join(f"{f} B {_variant(ch, k)}: {_range(r)}"
                     for (f, ch, k), r in sorted(got.items()))
    ds = {f"{f} B {_variant(ch, k)}": cl.decide_range(c.rule, *r.interval)
          for (f, ch, k), r in sorted(got.items())}
    against = [k for k, d in ds.items() if d.verdict == cl.DOES_NOT_HOLD]
    if against:
        return Finding(c, ours, cl.DOES_NOT_HOLD, f"{against[0]}: {ds[against[0]].why}"
                       + (f" (and {len(against) - 1} more flows)" if len(against) > 1 else ""))
    held = [k for k, d in ds.items() if d.verdict == cl.HOLDS]
    if len(held) == len(ds):
        return Finding(c, ours, cl.HOLDS, f"in every one of {len(ds)} flows the range lies "
                       f"within {cl.fmt_ratio(c.rule.size[0])}..{cl.fmt_ratio(c.rule.size[1])}")
    open_ = next(k for k, d in ds.items() if d.verdict != cl.HOLDS)
    return Finding(c, ours, NOT_SHOWN, f"holds in {len(held)} of {len(ds)} flows; "
                   f"{open_}: {ds[open_].why} (a finer rule grid would narrow it)")


def _advantage(data: RunData, rules: int = 6000) -> Finding:
    c = claim("003", "advantage-small-packets")
    got = s3.advantage_estimates(data, rules)
    if not got:
        return Finding(c, "-", NOT_SHOWN, f"iptables-legacy and nftables were not both "
                       f"measured at {rules:,} rules")
    parts: dict[str, cl.Estimate | None] = {}
    for ch, k in sorted({(ch, k) for (_, ch, k) in got}):
        frames = sorted(f for (f, c2, k2) in got if (c2, k2) == (ch, k))
        if len(frames) >= 2:
            parts[_variant(ch, k)] = cl.contrast(got[(frames[0], ch, k)],
                                                 got[(frames[-1], ch, k)])
    ours = "; ".join(f"{f} B {_variant(ch, k)}: {cl.show(e)}"
                     for (f, ch, k), e in sorted(got.items()))
    if not parts:
        return Finding(c, ours, NOT_SHOWN, "needs two flows (packet sizes) or more")
    ours += "; smallest over largest: " + ", ".join(f"{k} {cl.show(e)}"
                                                    for k, e in parts.items())
    widest = max(parts.values(), key=lambda e: e.se)
    f = decided(data, c, ours, cl.every(c.rule, parts, "chains and CPU counts"),
                widest, cells_where(data, rules=rules,
                                    backend={"iptables-legacy", "nftables"}))
    whole = sum(1 for e in got.values() if abs(e.log) < WHOLE and e.se < WHOLE)
    if f.verdict == NOT_SHOWN and whole:
        # Fixed-rate flows: where neither backend loses, both process the whole flow
        # and the ratio is 1 whatever the rules cost; only loss can show an advantage.
        return Finding(c, f.ours, f.verdict, f"{f.why} (at {rules:,} rules both backends "
                       f"processed {whole} of {len(got)} flows whole: there the ratio is 1 "
                       f"whatever each costs, and only a flow that overwhelms one of them "
                       f"can show an advantage)", f.cells)
    return f


def _input_forward(data: RunData) -> Finding:
    c = claim("003", "input-equals-forward")
    every = {k: e for k, e in s3.input_forward_estimates(data).items() if k[0] != "none"}
    # Decided where the firewall has a CPU of its own, as the seed's had: on this
    # testbed a second firewall CPU is the sender's too (its work there runs in the
    # sender's system calls), which no chain of the seed's shared.
    got = {k: e for k, e in every.items() if k[2] == 1} or every
    if not got:
        return Finding(c, "-", NOT_SHOWN, "INPUT and FORWARD were not both measured")
    per = {b: cl.pooled([e for (b2, _f, _k), e in got.items() if b2 == b], "flows")
           for b in sorted({b for b, _f, _k in got})}
    note = (f" (on 1 CPU; on {max(k[2] for k in every)} CPUs, one shared with the "
            f"sender: " + ", ".join(f"{b} {f} B {cl.show(e)}" for (b, f, k), e in
                                    sorted(every.items()) if k != 1) + ")"
            if len(got) < len(every) else "")
    cpu = "on 1 CPU" if all(k[2] == 1 for k in got) else "on every CPU count"
    ours = "; ".join(f"{b} {cl.show(e)} over {e.cells} flows" for b, e in per.items()) + \
        f" ({cpu})"
    d = cl.every(c.rule, per, "backends")
    widest = max(per.values(), key=lambda e: e.se)
    f = decided(data, c, ours, d, widest, [
        cell for (b, fr, k) in got for cell in cells_where(data, backend=b, frame_size=fr,
                                                           cpus=k)])
    return Finding(c, f.ours, f.verdict, f.why + note, f.cells)


def findings(data: RunData) -> list[Finding]:
    if data.method != "fixedrate":
        return []
    return [_degrades(data), _advantage(data), _input_forward(data)]
