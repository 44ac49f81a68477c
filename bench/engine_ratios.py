"""Is the engine fast enough to be invisible? Three ratios, measured in one run:

  engine / iperf3          packets per second each gets through the no-firewall
                           path at 64-byte frames, both at full throttle from the
                           same single sender core (target >= 2)
  ceiling / legacy-1k      the engine's no-firewall rate over its rate through
                           iptables-legacy with 1,000 linear rules (target >= 3),
                           so the firewall is the bottleneck being measured
  xdp / packet sender      what the XDP live-frames sender gets out at full
                           throttle over what the packet socket gets out, each
                           from one core (target >= 2); what arrives through the
                           no-firewall path with each is printed beside it (there
                           the forwarding CPU, not the sender, is the limit)

The four treatments run interleaved in a shuffled order in every repetition, in
one testbed, so the machine's drift hits them alike; GRO at the firewall's ingress
is on for the XDP sender's (it needs it) and off for the others. Ratios come from the medians
and, per repetition, from paired values (min..max shown). Prints the ratios last;
exits 1 if a target is missed. Run as root:  .venv/bin/python bench/engine_ratios.py
"""
from __future__ import annotations

import argparse
import random
import statistics

from _ratios import check, interleave, run_main, seed000_for

from fwbench import backends, environment
from fwbench.errors import FwbenchError
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology
from fwbench.traffic.native import EngineSettings, EngineTraffic
from fwbench.traffic.iperf3 import Iperf3Rate

TARGETS = {"engine/iperf3": 2.0, "ceiling/iptables-legacy-1k": 3.0,
           "xdp/packet sender": 2.0}


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
    print(f"{a.reps} repetitions x 4 treatments, {a.duration:g} s each, "
          f"{a.frame_size} B frames, sender pinned to CPU 0, firewall ingress on CPU 1")

    # Server-side RPS on, as the iperf3 adapter needs it; the engine's XDP sink
    # does not care.
    topo = Topology.new(server_rps=True)
    legacy, none = backends.get("iptables-legacy"), backends.get("none")
    with NetnsTestbed(topo) as tb:
        rs_1k = seed000_for(tb, 1000, legacy)
        rs_1 = seed000_for(tb, 1, none)
        engine, iperf3 = EngineTraffic(EngineSettings(sender="packet")), Iperf3Rate()
        xdp = EngineTraffic(EngineSettings(sender="xdp"))
        iperf3.start(tb)
        sent: dict[str, list[float]] = {"engine": [], "xdp": []}
        port = tb.topo.fw_client_side

        def gro(state: str) -> None:
            tb.exec(port.host, ["ethtool", "-K", port.ifname, "gro", state])

        def measure(what: str) -> float:
            if what == "xdp":
                engine.close()
                none.apply(tb, rs_1)
                gro("on")
                try:
                    r = xdp.measurer(tb, a.frame_size).measure(a.duration, 0)
                finally:
                    xdp.close()
                    gro("off")
                sent["xdp"].append(r.achieved_pps)
                return r.forwarded_pps
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
            r = engine.measurer(tb, a.frame_size).measure(a.duration, 0)
            if what == "engine":
                sent["engine"].append(r.achieved_pps)
            return r.forwarded_pps

        got = interleave(["engine", "xdp", "iperf3", "legacy-1k"], a.reps, rng, measure)
        engine.close()

    ok = check(got, "engine/iperf3", "engine", "iperf3", TARGETS["engine/iperf3"])
    ok &= check(got, "ceiling/iptables-legacy-1k", "engine", "legacy-1k",
                TARGETS["ceiling/iptables-legacy-1k"])
    print("sent at full throttle: " + ", ".join(
        f"{k} {statistics.median(v):,.0f} pps" for k, v in sent.items()))
    ok &= check(sent, "xdp/packet sender", "xdp", "engine", TARGETS["xdp/packet sender"])
    r = statistics.median(got["xdp"]) / statistics.median(got["engine"])
    print(f"through the no-firewall path, xdp/packet = {r:.2f} (printed, no target: the "
          f"forwarding CPU limits both)")
    return 0 if ok else 1


if __name__ == "__main__":
    run_main(main, "engine_ratios")
