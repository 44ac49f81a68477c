"""kube-proxy's control plane at N services (issue 36, deliverable 3): the full
sync (the whole rule set in one load), one service added and removed by each
mechanism, the listing and the kernel memory held, per backend and mode.

    sudo .venv/bin/python bench/kube_control.py --services 1000,5000,10000 \\
        --pairs iptables-legacy:iptables,nftables:nftables [--json out.json]

One namespace testbed; per N and pair: flush, load (timed: the full sync), verify
the probes, then fwbench.experiments.kubeproxy.control.measure, each step proved.
Prints one row per (pair, N, mechanism) and, with --json, every figure.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from fwbench import backends
from fwbench.backends import kernel
from fwbench.experiments.kubeproxy import control
from fwbench.ruleset.templates import kubeproxy as kp
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", default="1000,5000,10000")
    ap.add_argument("--endpoints", type=int, default=3)
    ap.add_argument("--pairs", default="iptables-legacy:iptables,nftables:nftables",
                    help="backend:mode, comma-separated")
    ap.add_argument("--mechanisms", default=None, help="default: all but reload")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sizes = [int(x) for x in a.services.split(",")]
    pairs = [tuple(p.split(":")) for p in a.pairs.split(",")]
    mechs = a.mechanisms.split(",") if a.mechanisms else None
    out = []
    with NetnsTestbed(Topology.new().serving((kp.POD_CIDR,))) as tb:
        for n in sizes:
            for name, mode in pairs:
                b = backends.get(name)
                if why := b.unavailable():
                    sys.exit(f"{name}: {why}")
                t0 = time.perf_counter()
                rs = kp.kube_proxy(services=n, endpoints=a.endpoints, mode=mode)
                build = time.perf_counter() - t0
                load = b.apply(tb, rs).load_time_s
                v = b.verify(tb, rs, 0)
                if not v.ok:
                    sys.exit(f"{name} {mode} N={n}: not verified: {v.reason}")
                got = control.measure(tb, b, rs, mode, mechanisms=mechs)
                got.update(full_sync_s=load, build_s=build, rules=rs.rule_count,
                           entries=b.expected_entries(rs))
                out.append(got)
                mem = got["memory"]
                print(f"{name} {mode} N={n:,} ({rs.rule_count:,} rules): full sync "
                      f"{load:.3f} s (again {got['sync_again_s']:.3f} s), listing "
                      f"{got['listing']['s']:.3f} s ({' '.join(got['listing']['argv'])}), "
                      f"memory held {mem['held_bytes'] / 2**20:.1f} MiB (meminfo "
                      f"{mem['meminfo']['held_bytes'] / 2**20:.1f} MiB, spread "
                      f"{mem['meminfo']['spread_bytes'] / 2**10:.0f} KiB)", flush=True)
                for mech, m in got["mechanisms"].items():
                    print(f"    {mech:9s} add {1e3 * m['add']['command_s']:9.1f} ms "
                          f"({m['add']['steps']} cmd, {m['add']['input_bytes']:,} B)   "
                          f"remove {1e3 * m['remove']['command_s']:9.1f} ms "
                          f"({m['remove']['steps']} cmd, {m['remove']['input_bytes']:,} B)",
                          flush=True)
                kernel.flush_all(tb)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
