"""Does the ssh provider rank the backends as the netns provider does? Both
testbeds at once in one session, trials interleaved:

  netns   the usual testbed: namespaces and veths, commands by `ip netns exec`
  ssh     the local lab (`fwbench lab up`): three namespaces each running sshd,
          every command, process and file over SSH (fwbench's ssh provider)

Each round runs every (provider, backend) cell of the scenario once, in a fresh
shuffled order, through the experiment's own trial (load, verify, maxrate at open
throttle, ping), exactly as `fwbench run` does. Per provider the backends are
ranked by their median rx pps; the two rankings are compared with Kendall's tau,
and every pair of backends the providers order differently is listed with the
Mann-Whitney p of that pair's difference under each provider (a swap between
backends neither provider tells apart is noise, not a disagreement).

Run as root, with a lab up (fwbench lab up DIR):
    .venv/bin/python bench/providers.py DIR/inventory.toml [--rules 1000]
        [--rounds 5] [--backends iptables-legacy,nftables,...] [--duration 0.5]
"""
from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time

from rich.console import Console
from scipy import stats

from _ratios import run_main

from fwbench import bpf, engine, environment, experiments, scenario
from fwbench.backends import kernel
from fwbench.plan import TrialKey
from fwbench.testbed import hosts, inventory
from fwbench.testbed.netns import NetnsTestbed

PROVIDERS = ("netns", "ssh")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inventory")
    ap.add_argument("--rules", type=int, default=1000)
    ap.add_argument("--frame-size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=0.5)
    ap.add_argument("--backends", default="all")
    ap.add_argument("--seed", type=int, default=18)
    a = ap.parse_args()
    inv = inventory.load(a.inventory)
    over = {"rules": [a.rules], "frame_sizes": [a.frame_size], "duration_s": a.duration,
            "backends": a.backends.split(","), "repeat": 1}
    exps = {"netns": experiments.get(scenario.load("scenarios/quick.toml", over)),
            "ssh": experiments.get(scenario.load("scenarios/quick.toml", {
                **over, "testbed.provider": "ssh", "testbed.inventory": inv.path}))}
    for e in exps.values():
        e.preflight()
    planned = {p: e.plan() for p, e in exps.items()}
    names = [n for n in planned["netns"].scenario.backends if n != "none"]
    cells = [(n, a.rules, a.frame_size) for n in names]
    print(f"{environment.collect({})['kernel']}; rules {a.rules}, {a.frame_size} B, "
          f"{a.duration:g} s per trial, {a.rounds} rounds; backends: {', '.join(names)}",
          flush=True)
    programs = [engine.binary(), kernel.nftdump_binary(), bpf.binary(), bpf.DROP_OBJECT]
    rng = random.Random(a.seed)
    got: dict[tuple[str, str], list[float]] = {(p, n): [] for p in PROVIDERS for n in names}
    console = Console(stderr=True)
    t0 = time.monotonic()
    with NetnsTestbed(exps["netns"].topology()) as ntb, \
            hosts.SshTestbed(exps["ssh"].topology(), inv, programs) as stb:
        beds = {"netns": ntb, "ssh": stb}
        plan = [TrialKey(c, 0) for c in cells]
        for p in PROVIDERS:
            exps[p].sc = planned[p].scenario
            exps[p].open(beds[p], plan, console)
        try:
            for rnd in range(a.rounds):
                order = [(p, c) for p in PROVIDERS for c in cells]
                rng.shuffle(order)
                for i, (p, c) in enumerate(order):
                    rec = exps[p].run_trial(beds[p], TrialKey(c, rnd), i)
                    if rec.status != "ok":
                        print(f"  {p} {c[0]}: {rec.status}: {rec.reason}", flush=True)
                        continue
                    got[(p, c[0])].append(rec.metrics["rx_pps"])
                print(f"round {rnd + 1}: " + "; ".join(
                    f"{n} {got[('netns', n)][-1] / 1e3:,.0f}k/{got[('ssh', n)][-1] / 1e3:,.0f}k"
                    for n in names if got[("netns", n)] and got[("ssh", n)])
                    + "  (netns/ssh rx pps)", flush=True)
        finally:
            for p in PROVIDERS:
                exps[p].close(beds[p])
    med = {k: statistics.median(v) for k, v in got.items() if v}
    rank = {p: sorted((n for n in names if (p, n) in med), key=lambda n: -med[(p, n)])
            for p in PROVIDERS}
    print(f"\n{time.monotonic() - t0:.0f} s. Median rx pps (netns | ssh | ssh/netns):")
    for n in rank["netns"]:
        if ("ssh", n) in med:
            print(f"  {n:16s} {med[('netns', n)]:>10,.0f} | {med[('ssh', n)]:>10,.0f} | "
                  f"{med[('ssh', n)] / med[('netns', n)]:.2f}")
    for p in PROVIDERS:
        print(f"order {p:5s}: {' > '.join(rank[p])}")
    both = [n for n in names if ("netns", n) in med and ("ssh", n) in med]
    tau = stats.kendalltau([med[("netns", n)] for n in both], [med[("ssh", n)] for n in both])
    print(f"Kendall tau {tau.statistic:.2f} (p {tau.pvalue:.2g}) over {len(both)} backends")
    swaps = 0
    for x, y in itertools.combinations(both, 2):
        d = {p: med[(p, x)] - med[(p, y)] for p in PROVIDERS}
        if (d["netns"] > 0) != (d["ssh"] > 0):
            swaps += 1
            ps = {p: stats.mannwhitneyu(got[(p, x)], got[(p, y)]).pvalue for p in PROVIDERS}
            print(f"  swapped: {x} vs {y}: Mann-Whitney p netns {ps['netns']:.2g}, "
                  f"ssh {ps['ssh']:.2g}")
    print(f"{swaps} of {len(both) * (len(both) - 1) // 2} pairs ordered differently")
    return 0


if __name__ == "__main__":
    run_main(main, "providers")
