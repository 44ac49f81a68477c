"""Do round trips rank the backends as one-way latency does? Across machines the
engine can only time round trips (the server's sink reflects a sample, the client
times it); on one machine a round-trip testbed records both for the same trial:
the one-way latency of every packet at the server, the round trip of the sample at
the client. So each trial is its own paired comparison.

Every backend holds seed 000's rule set (test entry last), is loaded and verified,
and measured at each load (1 s of 64-byte frames, paced), all (backend, load)
cells interleaved in a fresh shuffled order every round, in one testbed. Prints
per load and backend the medians over rounds of one-way p50 and round-trip p50,
their difference (the way back) and ratio, then per load Kendall's tau between
the backends ranked by one and by the other, and every swapped pair with the
Mann-Whitney p of that pair under each timing.

Run as root:  .venv/bin/python bench/round_trips.py [--rules 1000] [--rounds 5]
    [--loads 1000,20000] [--backends iptables-legacy,nftables,...]
"""
from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time

from scipy import stats

from _ratios import run_main, seed000_for

from fwbench import backends, environment
from fwbench.errors import FwbenchError
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import TestbedSettings, Topology
from fwbench.traffic.native import EngineTraffic

TREATMENTS = ["none", "iptables-legacy", "iptables-nft", "nftables", "ipset", "nftset",
              "xdp-set", "tc-set"]
TIMINGS = ("one-way", "round trip")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loads", default="1000,20000", help="offered pps, comma-separated")
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--backends", default=",".join(TREATMENTS))
    ap.add_argument("--seed", type=int, default=18)
    a = ap.parse_args()
    names = a.backends.split(",")
    loads = [int(x) for x in a.loads.split(",")]
    for n in names:
        if why := backends.get(n).unavailable():
            raise FwbenchError(f"{n} cannot run here: {why}")
    env = environment.collect({})
    print(f"{env['cpu_model']}, {env['cpus']} CPUs; kernel {env['kernel']}; "
          f"{a.rules:,} rules, 64 B, {a.duration:g} s per trial, {a.rounds} rounds, "
          f"loads {', '.join(f'{x:,}' for x in loads)} pps", flush=True)
    rng = random.Random(a.seed)
    # (timing, backend, load) -> p50 per round; and the sample sizes
    got: dict[tuple[str, str, int], list[float]] = {
        (t, n, x): [] for t in TIMINGS for n in names for x in loads}
    samples: dict[tuple[str, int], list[int]] = {(n, x): [] for n in names for x in loads}
    t0 = time.monotonic()
    with NetnsTestbed(Topology.new(TestbedSettings(latency="round-trip"))) as tb:
        chosen = {n: backends.get(n) for n in names}
        rulesets = {b.layout: seed000_for(tb, a.rules, b) for b in chosen.values()}
        eng = EngineTraffic()
        try:
            for rnd in range(a.rounds):
                order = [(n, x) for n in names for x in loads]
                rng.shuffle(order)
                for n, x in order:
                    b = chosen[n]
                    rs = rulesets[b.layout]
                    b.apply(tb, rs)
                    eng.close()     # verification's capture needs the server's port
                    v = b.verify(tb, rs)
                    if not v.ok:
                        raise FwbenchError(f"{n} did not verify: {v.reason}")
                    r = eng.measurer(tb, 64).measure(a.duration, x)
                    if r.loss_ratio > 0 or r.sender_short:
                        print(f"  {n} at {x:,} pps: loss {r.loss_ratio:.2%}"
                              f"{', sender short' if r.sender_short else ''}", flush=True)
                    got[("one-way", n, x)].append(r.extra["one_way_latency_us"]["p50"])
                    got[("round trip", n, x)].append(r.latency_us["p50"])
                    samples[(n, x)].append(r.extra["returned"])
                print(f"round {rnd + 1}: " + "; ".join(
                    f"{n}@{x // 1000}k {got[('one-way', n, x)][-1]:.1f}/"
                    f"{got[('round trip', n, x)][-1]:.1f}" for n in names for x in loads)
                    + "  (one-way/round-trip p50 us)", flush=True)
        finally:
            eng.close()
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"\n{time.monotonic() - t0:.0f} s. Medians over rounds, µs "
          f"(one-way p50 | round-trip p50 | difference | ratio | round trips timed):")
    for x in loads:
        print(f"at {x:,} pps:")
        for n in sorted(names, key=lambda n: med[("one-way", n, x)]):
            ow, rt = med[("one-way", n, x)], med[("round trip", n, x)]
            print(f"  {n:16s} {ow:8.1f} | {rt:8.1f} | {rt - ow:7.1f} | {rt / ow:5.2f} | "
                  f"{statistics.median(samples[(n, x)]):,.0f}")
        ranked = [n for n in names if n != "none"]
        tau = stats.kendalltau([med[("one-way", n, x)] for n in ranked],
                               [med[("round trip", n, x)] for n in ranked])
        print(f"  Kendall tau {tau.statistic:.2f} (p {tau.pvalue:.2g}) over "
              f"{len(ranked)} backends")
        swaps = 0
        for p, q in itertools.combinations(ranked, 2):
            d = {t: med[(t, p, x)] - med[(t, q, x)] for t in TIMINGS}
            if (d["one-way"] > 0) != (d["round trip"] > 0):
                swaps += 1
                ps = {t: stats.mannwhitneyu(got[(t, p, x)], got[(t, q, x)]).pvalue
                      for t in TIMINGS}
                print(f"  swapped: {p} vs {q}: Mann-Whitney p one-way "
                      f"{ps['one-way']:.2g}, round trip {ps['round trip']:.2g}")
        print(f"  {swaps} of {len(ranked) * (len(ranked) - 1) // 2} pairs ordered "
              f"differently")
    return 0


if __name__ == "__main__":
    run_main(main, "round_trips")
