"""Seed 003's claims decided on a fixedrate run, from fwbench.fixedrate.stats (the
same numbers the run's report shows): where nftables begins to lose against
iptables, iptables' advantage at 6,000 rules by packet size, INPUT against FORWARD.
"""
from __future__ import annotations

from fwbench.findings import DOES_NOT_HOLD, HOLDS, NOT_SHOWN, Finding, claim
from fwbench.fixedrate import stats as s3
from fwbench.report.data import RunData

EQUAL = 0.10        # "the same": every interval within 10 % of 1
SEED_DEGRADATION_RATIO = 5.0


def _iv(r: s3.Ratio, unit: str = "x") -> str:
    iv = r.interval
    if iv is None:
        return f"{r.value:.2f}{unit}"
    hi = "inf" if iv[1] == float("inf") else f"{iv[1]:.2f}"
    return f"{r.value:.2f}{unit} [{iv[0]:.2f}, {hi}]"


def _variant(chain: str, cpus: int) -> str:
    return f"{chain.upper()}, {cpus} CPU{'s' if cpus > 1 else ''}"


def _degrades(data: RunData) -> Finding:
    c = claim("003", "nft-degrades-earlier")
    got = s3.degradation_ratio(data)
    if not got:
        return Finding(c, "-", NOT_SHOWN, "no flow where both iptables-legacy and nftables "
                       "began to lose within the rule counts measured")
    ours = "; ".join(f"{f} B {_variant(ch, k)}: {_iv(r)}" for (f, ch, k), r in sorted(got.items()))
    above = [r for r in got.values() if r.interval and r.interval[0] > 1]
    below = [r for r in got.values() if r.interval and r.interval[1] < 1]
    size = sum(1 for r in got.values() if r.interval and
               r.interval[0] <= SEED_DEGRADATION_RATIO <= r.interval[1])
    if below:
        return Finding(c, ours, DOES_NOT_HOLD, f"nftables lasts longer in {len(below)} of "
                       f"{len(got)} flows")
    if len(above) == len(got):
        return Finding(c, ours, HOLDS, f"nftables begins to lose first in every flow; the "
                       f"seed's {SEED_DEGRADATION_RATIO:g}x is inside {size} of {len(got)} "
                       f"ranges (iptables-legacy's point over nftables', from the search's "
                       f"brackets)")
    return Finding(c, ours, NOT_SHOWN, "the brackets overlap in some flow")


def _advantage(data: RunData, rules: int = 6000) -> Finding:
    c = claim("003", "advantage-small-packets")
    got = s3.advantage_at(data, rules)
    if not got:
        return Finding(c, "-", NOT_SHOWN, f"iptables-legacy and nftables were not both "
                       f"measured at {rules:,} rules")
    ours = "; ".join(f"{f} B {_variant(ch, k)}: {_iv(r)}" for (f, ch, k), r in sorted(got.items()))
    verdicts = []
    for ch, k in sorted({(ch, k) for (_, ch, k) in got}):
        frames = sorted(f for (f, c2, k2) in got if (c2, k2) == (ch, k))
        if len(frames) < 2:
            continue
        small, large = got[(frames[0], ch, k)], got[(frames[-1], ch, k)]
        if not (small.interval and large.interval):
            verdicts.append(NOT_SHOWN)
        elif small.interval[0] > large.interval[1]:
            verdicts.append(HOLDS)
        elif small.interval[1] < large.interval[0]:
            verdicts.append(DOES_NOT_HOLD)
        else:
            verdicts.append(NOT_SHOWN)
    if not verdicts:
        return Finding(c, ours, NOT_SHOWN, "needs two flows (packet sizes) or more")
    if DOES_NOT_HOLD in verdicts:
        return Finding(c, ours, DOES_NOT_HOLD, "the smallest packets' advantage lies below "
                       "the largest's")
    if all(v == HOLDS for v in verdicts):
        return Finding(c, ours, HOLDS, "the smallest packets' advantage interval lies above "
                       "the largest packets' in every chain and CPU count (Welch on logs)")
    return Finding(c, ours, NOT_SHOWN, "the smallest and largest packets' intervals overlap")


def _input_forward(data: RunData) -> Finding:
    c = claim("003", "input-equals-forward")
    every = {k: r for k, r in s3.input_vs_forward(data).items() if k[0] != "none"}
    # Decided where the firewall has a CPU of its own, as the seed's had: on this
    # testbed a second firewall CPU is the sender's too (its work there runs in the
    # sender's system calls), which no chain of the seed's shared.
    got = {k: r for k, r in every.items() if k[2] == 1} or every
    if not got:
        return Finding(c, "-", NOT_SHOWN, "INPUT and FORWARD were not both measured")
    note = (f" (on 1 CPU; on {max(k[2] for k in every)} CPUs, one shared with the "
            f"sender: " + ", ".join(f"{b} {f} B {_iv(r)}" for (b, f, k), r in
                                    sorted(every.items()) if k != 1) + ")"
            if len(got) < len(every) else "")
    ours = "; ".join(f"{b} {f} B, {k} CPU{'s' if k > 1 else ''}: {_iv(r)}"
                     for (b, f, k), r in sorted(got.items()))
    ivs = [r.interval for r in got.values()]
    outside = sum(1 for iv in ivs if iv and (iv[0] > 1 + EQUAL or iv[1] < 1 - EQUAL))
    inside = sum(1 for iv in ivs if iv and 1 - EQUAL <= iv[0] and iv[1] <= 1 + EQUAL)
    if outside:
        return Finding(c, ours, DOES_NOT_HOLD, f"{outside} of {len(ivs)} intervals wholly "
                       f"beyond {EQUAL:.0%} of equal{note}")
    if inside == len(ivs):
        return Finding(c, ours, HOLDS, f"every interval within {EQUAL:.0%} of equal{note}")
    return Finding(c, ours, NOT_SHOWN, f"{len(ivs) - inside} of {len(ivs)} intervals reach "
                   f"past {EQUAL:.0%}{note}")


def findings(data: RunData) -> list[Finding]:
    if data.method != "fixedrate":
        return []
    return [_degrades(data), _advantage(data), _input_forward(data)]
