"""Do the eBPF filters beat netfilter where it matters? Ratios measured in one run,
at 10,000 rules (seed 000's template, test entry last), 64-byte frames, the engine
at open throttle:

  xdp-set / iptables-legacy    target >= 1 (an indexed eBPF filter is at least as
                               fast as a linear iptables chain)
  xdp-set / xdp-linear         target >= 1.05 (the hash clearly beats the scan)

tc-set, tc-linear and none are measured beside them and their ratios printed for
information. Every treatment is loaded and verified (rule count, probes, counters)
before each measurement, and all run interleaved in a shuffled order in every
repetition, in one testbed. Prints the ratios last; exits 1 if a target is missed.
Run as root:  .venv/bin/python bench/ebpf_ratios.py
"""
from __future__ import annotations

import argparse
import random

from _ratios import check, interleave, run_main, seed000_for

from fwbench import backends, environment
from fwbench.errors import FwbenchError
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology
from fwbench.traffic.native import EngineTraffic

TREATMENTS = ["iptables-legacy", "xdp-linear", "xdp-set", "tc-linear", "tc-set", "none"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rules", type=int, default=10_000)
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per measurement")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    env = environment.collect({})
    print(f"machine: {env['cpu_model']}, {env['cpus']} CPUs; kernel {env['kernel']}")
    print(f"{a.reps} repetitions x {len(TREATMENTS)} treatments at {a.rules:,} rules, "
          f"{a.duration:g} s each, 64 B frames, sender on CPU 0, firewall ingress on CPU 1")
    for name in TREATMENTS:
        if why := backends.get(name).unavailable():
            raise FwbenchError(f"{name} cannot run here: {why}")

    topo = Topology.new()
    with NetnsTestbed(topo) as tb:
        chosen = {name: backends.get(name) for name in TREATMENTS}
        # One rule set per layout: the linear and set treatments hold the same entries.
        rulesets = {b.layout: seed000_for(tb, a.rules, b) for b in chosen.values()}
        engine = EngineTraffic()

        def measure(name: str) -> float:
            b = chosen[name]
            rs = rulesets[b.layout]
            b.apply(tb, rs)
            # The engine's XDP sink on the server's port would take the probes
            # before verification's capture sees them; the measurement restarts it.
            engine.close()
            v = b.verify(tb, rs)
            if not v.ok:
                raise FwbenchError(f"{name} did not verify: {v.reason}")
            return engine.measurer(tb, 64).measure(a.duration, 0).forwarded_pps

        try:
            got = interleave(TREATMENTS, a.reps, rng, measure)
        finally:
            engine.close()

    ok = check(got, "xdp-set/iptables-legacy", "xdp-set", "iptables-legacy", 1.0)
    ok &= check(got, "xdp-set/xdp-linear", "xdp-set", "xdp-linear", 1.05)
    print("for information:")
    check(got, "tc-set/iptables-legacy", "tc-set", "iptables-legacy", 1.0)
    check(got, "tc-linear/iptables-legacy", "tc-linear", "iptables-legacy", 1.0)
    check(got, "none/xdp-set", "none", "xdp-set", 1.0)
    return 0 if ok else 1


if __name__ == "__main__":
    run_main(main, "ebpf_ratios")
