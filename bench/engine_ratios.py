"""Is the engine fast enough to be invisible? Two ratios, measured in one run:

  engine / iperf3          packets per second each gets through the no-firewall
                           path at 64-byte frames, both at full throttle from the
                           same single sender core (target >= 2)
  ceiling / legacy-1k      the engine's no-firewall rate over its rate through
                           iptables-legacy with 1,000 linear rules (target >= 3),
                           so the firewall is the bottleneck being measured

The three treatments run interleaved in a shuffled order in every repetition, in
one testbed, so the machine's drift hits them alike. Ratios come from the medians
and, per repetition, from paired values (min..max shown). Prints the ratios last;
exits 1 if a target is missed. Run as root:  .venv/bin/python bench/engine_ratios.py
"""
from __future__ import annotations

import argparse
import random

from _ratios import check, interleave, run_main, seed000_for

from fwbench import backends, environment
from fwbench.errors import FwbenchError
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology
from fwbench.traffic.engine import EngineTraffic
from fwbench.traffic.iperf3 import Iperf3Rate

TARGETS = {"engine/iperf3": 2.0, "ceiling/iptables-legacy-1k": 3.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per measurement")
    ap.add_argument("--frame-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    env = environment.collect({})
    print(f"machine: {env['cpu_model']}, {env['cpus']} CPUs; kernel {env['kernel']}")
    print(f"{a.reps} repetitions x 3 treatments, {a.duration:g} s each, "
          f"{a.frame_size} B frames, sender pinned to CPU 0, firewall ingress on CPU 1")

    # Server-side RPS on, as the iperf3 adapter needs it; the engine's XDP sink
    # does not care.
    topo = Topology.new(server_rps=True)
    legacy, none = backends.get("iptables-legacy"), backends.get("none")
    with NetnsTestbed(topo) as tb:
        rs_1k = seed000_for(tb, 1000, legacy)
        rs_1 = seed000_for(tb, 1, none)
        engine, iperf3 = EngineTraffic(), Iperf3Rate()
        iperf3.start(tb)

        def measure(what: str) -> float:
            if what == "iperf3":
                engine.close()  # the XDP sink would take iperf3's UDP port
                none.apply(tb, rs_1)
                return iperf3.measure(tb, a.frame_size, a.duration)["rx_pps"]
            b, rs = (none, rs_1) if what == "engine" else (legacy, rs_1k)
            b.apply(tb, rs)
            if what == "legacy-1k":
                engine.close()  # its XDP sink would take the probes from the capture
                if not (v := legacy.verify(tb, rs)).ok:
                    raise FwbenchError(f"iptables-legacy did not verify: {v.reason}")
            return engine.measurer(tb, a.frame_size).measure(a.duration, 0).forwarded_pps

        got = interleave(["engine", "iperf3", "legacy-1k"], a.reps, rng, measure)
        engine.close()

    ok = check(got, "engine/iperf3", "engine", "iperf3", TARGETS["engine/iperf3"])
    ok &= check(got, "ceiling/iptables-legacy-1k", "engine", "legacy-1k",
                TARGETS["ceiling/iptables-legacy-1k"])
    return 0 if ok else 1


if __name__ == "__main__":
    run_main(main, "engine_ratios")
