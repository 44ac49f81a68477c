"""What does GRO on the firewall's ingress cost the firewall? The XDP sender needs it
(veth hands XDP frames only to a peer in NAPI mode, which GRO turns on), so before a
run uses that sender every backend's figures must be shown to move alike.

Per backend (seed 000's rule set, 1,000 rules; none, iptables-legacy, nftables, nftset),
in one testbed, with the AF_PACKET sender (which works either way), GRO off and on in
a shuffled order within every repetition, the backend loaded once for both:

  ns/pkt       busy time of the firewall CPU per forwarded packet at a fixed load
               (fwbench.soaker, as `cpucost` measures it)
  max pps      the rate forwarded with the sender at full throttle

Prints per backend the paired change on - off (median and range over repetitions) in
both, then the spread of the ns/pkt change across the netfilter backends: when the
change is the same for every backend, it is part of the path every backend shares
(the cost model's base a), not of any backend's cost per rule. Run as root:

    .venv/bin/python bench/ingress_gro.py            (about 3 minutes)
"""
from __future__ import annotations

import argparse
import random
import statistics

from _ratios import run_main, seed000_for

from fwbench import backends, environment
from fwbench.soaker import Soaker, busy_ns
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology
from fwbench.traffic.native import EngineTraffic

BACKENDS = ("none", "iptables-legacy", "nftables", "nftset")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rules", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=20000.0, help="the fixed load, pps")
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    env = environment.collect({})
    print(f"machine: {env['cpu_model']}, {env['cpus']} CPUs; kernel {env['kernel']}")
    print(f"{a.reps} repetitions; backends {', '.join(BACKENDS)} at {a.rules:,} rules; "
          f"64 B; fixed load {a.rate:,.0f} pps for {a.duration:g} s, full throttle "
          f"for {a.duration:g} s; AF_PACKET sender on CPU 0, firewall ingress on CPU 1")
    ns: dict[tuple[str, str], list[float]] = {}
    pps: dict[tuple[str, str], list[float]] = {}
    with NetnsTestbed(Topology.new()) as tb:
        port = tb.topo.fw_client_side
        engine = EngineTraffic()

        def gro(state: str) -> None:
            tb.exec(port.host, ["ethtool", "-K", port.ifname, "gro", state])

        with Soaker(tb.topo.settings.firewall_cpu) as soaker:
            for rep in range(a.reps):
                order = list(BACKENDS)
                rng.shuffle(order)
                for name in order:
                    b = backends.get(name)
                    engine.close()
                    b.apply(tb, seed000_for(tb, a.rules, b))
                    m = engine.measurer(tb, 64)
                    for state in rng.sample(["off", "on"], 2):
                        gro(state)
                        idle = soaker.idle_rate(0.3)
                        x = soaker.read()
                        r = m.measure(a.duration, a.rate)
                        y = soaker.read()
                        ns.setdefault((name, state), []).append(
                            busy_ns(x, y, idle) / max(r.received, 1))
                        pps.setdefault((name, state), []).append(
                            m.measure(a.duration, 0).forwarded_pps)
                print(f"rep {rep + 1}: " + "; ".join(
                    f"{n} {ns[(n, 'off')][-1]:,.0f}/{ns[(n, 'on')][-1]:,.0f} ns"
                    for n in BACKENDS) + " (GRO off/on)", flush=True)
        engine.close()
        gro("off")

    deltas = {}
    for n in BACKENDS:
        d_ns = [y - x for x, y in zip(ns[(n, "off")], ns[(n, "on")])]
        r_pps = [y / x - 1 for x, y in zip(pps[(n, "off")], pps[(n, "on")])]
        deltas[n] = statistics.median(d_ns)
        print(f"{n}: GRO on - off = {statistics.median(d_ns):+,.0f} ns/pkt "
              f"(paired {min(d_ns):+,.0f}..{max(d_ns):+,.0f}; off "
              f"{statistics.median(ns[(n, 'off')]):,.0f} ns); max rate "
              f"{statistics.median(r_pps):+.1%} (paired {min(r_pps):+.1%}..{max(r_pps):+.1%})")
    nf = [deltas[n] for n in BACKENDS if n != "none"]
    print(f"spread of the ns/pkt change across the netfilter backends: "
          f"{max(nf) - min(nf):,.0f} ns (changes {', '.join(f'{v:+,.0f}' for v in nf)})")
    return 0


if __name__ == "__main__":
    run_main(main, "ingress_gro")
