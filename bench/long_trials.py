"""Do long trials measure what short ones do? Two checks, measured in one testbed:

  long / short        the no-firewall path at open throttle, 10 s trials against
                      0.5 s trials interleaved in a shuffled order: the ratio of
                      forwarded rates (target within 5 %), and every trial's
                      copies and out-of-window counts (target 0). Before the
                      receivers' sliding window, every packet after the 2^21st of
                      a stream counted as a copy, so a 10 s trial lost half.
  strict / mlrsearch  iptables-legacy with 1,000 rules: the NDR of the
                      `rfc2544-strict` preset (60 s trials, 0 % loss) against the
                      default MLRsearch's (1 s trials), run default, strict,
                      default, so drift during the long search shows.

Loss at open throttle is counted apart by where it happened: `refused` frames were
turned away by the firewall's full input queue (the sender was faster than the
forwarding), everything else was lost on the path. Prints the ratios last; exits 1
if a target is missed. Run as root:  .venv/bin/python bench/long_trials.py
(about 3 minutes with --skip-strict, 15-25 with the strict search)
"""
from __future__ import annotations

import argparse
import random
import statistics

from _ratios import interleave, run_main, seed000_for

from fwbench import backends, environment
from fwbench.errors import FwbenchError
from fwbench.methods.search import search
from fwbench.experiments.sweep.throughput import search_config
from fwbench.experiments.sweep import ThroughputSettings
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology
from fwbench.traffic.native import EngineTraffic

TOLERANCE = 0.05


def _pps(v: float | None) -> str:
    return "none" if v is None else f"{v:,.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--long", type=float, default=10.0, help="seconds of a long trial")
    ap.add_argument("--short", type=float, default=0.5, help="seconds of a short trial")
    ap.add_argument("--rules", type=int, default=1000, help="iptables-legacy rules, strict check")
    ap.add_argument("--strict-duration", type=float, default=60.0)
    ap.add_argument("--skip-strict", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    env = environment.collect({})
    print(f"machine: {env['cpu_model']}, {env['cpus']} CPUs; kernel {env['kernel']}; "
          f"64 B frames, sender on CPU 0, firewall ingress on CPU 1")
    ok = True
    topo = Topology.new()
    none, legacy = backends.get("none"), backends.get("iptables-legacy")
    with NetnsTestbed(topo) as tb:
        engine = EngineTraffic()
        engine.start(tb)
        none.apply(tb, seed000_for(tb, 1, none))
        trials: dict[str, list] = {"short": [], "long": []}

        def open_throttle(what: str) -> float:
            r = engine.measurer(tb, 64).measure(getattr(a, what), 0)
            trials[what].append(r)
            refused = r.extra["refused_by_next_hop"]
            print(f"  {what} {r.duration_s:g} s: sent {r.sent:,}, received {r.received:,}, "
                  f"refused at the firewall's input {refused:,}, lost on the path "
                  f"{r.lost - refused:,}, copies {r.duplicated}, out of window "
                  f"{r.out_of_window}, loss ratio {r.loss_ratio:.5f}", flush=True)
            return r.forwarded_pps

        print(f"{a.reps} repetitions of a {a.short:g} s and a {a.long:g} s open-throttle "
              f"trial through no firewall, shuffled")
        got = interleave(["short", "long"], a.reps, random.Random(a.seed), open_throttle)
        paired = [x / y for x, y in zip(got["long"], got["short"])]
        ratio = statistics.median(got["long"]) / statistics.median(got["short"])
        clean = all(r.duplicated == 0 and r.out_of_window == 0
                    for rs in trials.values() for r in rs)
        within = abs(ratio - 1) <= TOLERANCE
        ok &= within and clean
        loss = {k: statistics.median(r.loss_ratio for r in rs) for k, rs in trials.items()}

        if not a.skip_strict:
            ruleset = seed000_for(tb, a.rules, legacy)
            ceiling = engine.measurer(tb, 64).measure(0.5, 0).achieved_pps
            legacy.apply(tb, ruleset)
            engine.close()  # its XDP sink would take the probes from the capture
            if not (v := legacy.verify(tb, ruleset)).ok:
                raise FwbenchError(f"iptables-legacy did not verify: {v.reason}")
            ndr: dict[str, list] = {"mlrsearch": [], "rfc2544-strict": []}
            for preset in ("mlrsearch", "rfc2544-strict", "mlrsearch"):
                duration = a.strict_duration if preset == "rfc2544-strict" else 1.0
                cfg = search_config(ThroughputSettings(preset=preset), duration, ceiling)
                res = search(engine.measurer(tb, 64), cfg)
                g = res.ndr
                ndr[preset].append(g.lower_bound_pps)
                if g.lower_bound_pps is None:
                    raise FwbenchError(f"{preset}: no NDR ({g.reason})")
                print(f"  {preset} ({duration:g} s trials): NDR {g.lower_bound_pps:,.0f} "
                      f"pps, bounds [{g.lower_bound_pps:,.0f}, {_pps(g.upper_bound_pps)}], "
                      f"{len(res.trials)} trials, {res.total_trial_time_s:,.0f} s; "
                      f"{g.reason}", flush=True)
        engine.close()

    print(f"loss ratio, median: short {loss['short']:.5f}, long {loss['long']:.5f}; "
          f"copies and out-of-window packets in every trial: {'none' if clean else 'SOME'}")
    print(f"long/short forwarded rate = {ratio:.3f} (paired {min(paired):.3f}.."
          f"{max(paired):.3f}; target within {TOLERANCE:.0%}: "
          f"{'met' if within else 'MISSED'})")
    if not a.skip_strict:
        base = statistics.mean(ndr["mlrsearch"])
        strict = ndr["rfc2544-strict"][0]
        spread = abs(ndr["mlrsearch"][0] - ndr["mlrsearch"][1]) / base
        print(f"strict/mlrsearch NDR = {strict / base:.3f} (the two MLRsearch NDRs "
              f"around it differ by {spread:.1%})")
    return 0 if ok else 1


if __name__ == "__main__":
    run_main(main, "long_trials")
