"""Are large rule sets loaded and verified at the kernel's speed? Per backend:

  bare           the tool by hand on the rendered file in the firewall namespace
                 (`nft -f FILE`, `iptables-legacy-restore < FILE`, `ipset restore`),
                 the best of --reps
  first trial    what a trial pays the first time it meets the rule set: render,
                 flush, load and verify (the kernel's rule set compared with the
                 rendering, the probes and a corpus sample through the testbed,
                 the counters), exactly the sweep's apply and verify
  later trials   the same rule set again, as every later trial of a sweep pays it
                 (the rendering, the reference evaluator and the corpus are kept
                 per rule set); the median of --reps
  ratio          each trial's time over bare; target <= 1.5 for later trials of
                 nftables and iptables-legacy at 100,000 rules

Also loads and verifies 1,000,000-element sets (ipset, nftset), printed without a
target (--sets 0 skips them). Building the rule set in Python (the template, its
digest) is printed apart: it happens once per rule set, before any trial. Prints
the ratios last; exits 1 if a target is missed. Run as root (about 10 minutes):

    .venv/bin/python bench/large_rulesets.py
    .venv/bin/python bench/large_rulesets.py --rules 20000 --sets 0
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _ratios import run_main, seed000_for

from fwbench import backends, environment
from fwbench.backends import kernel
from fwbench.backends.base import interfaces
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology

TARGET = 1.5
LINEAR = ("iptables-legacy", "nftables")
SETS = ("ipset", "nftset")


def bare_argv(backend, name: str, path: Path) -> list[str]:
    """The command a user would type to load one rendered file."""
    if name == "rules.nft":
        return ["nft", "-f", str(path)]
    if name == "sets.ipset":
        return ["sh", "-c", f"ipset restore < {path}"]
    tool = kernel.xt(backend.variant, 6 if name == "rules.ip6tables" else 4).tool
    return ["sh", "-c", f"{tool}-restore < {path}"]


def bare_load(tb: NetnsTestbed, backend, files: dict[str, str], tmp: Path) -> float:
    kernel.flush_all(tb)
    paths = {}
    for name, text in files.items():
        paths[name] = tmp / name
        paths[name].write_text(text)
    # Sets first: a rule names its set.
    order = sorted(files, key=lambda n: n != "sets.ipset")
    t0 = time.perf_counter()
    for name in order:
        tb.exec("fw", bare_argv(backend, name, paths[name]))
    took = time.perf_counter() - t0
    kernel.flush_all(tb)
    return took


def trial(tb: NetnsTestbed, backend, rs) -> tuple[float, float, float]:
    """(apply s, verify s, load s) of one trial, as the sweep runs it."""
    t0 = time.perf_counter()
    load = backend.apply(tb, rs)
    t1 = time.perf_counter()
    v = backend.verify(tb, rs)
    t2 = time.perf_counter()
    if not v.ok:
        raise SystemExit(f"{backend.name}: verification failed: {v.reason}")
    return t1 - t0, t2 - t1, load.load_time_s


def measure(tb: NetnsTestbed, name: str, n: int, reps: int, tmp: Path) -> dict:
    b = backends.get(name)
    why = b.unavailable()
    if why:
        raise SystemExit(f"{name}: {why}")
    t0 = time.perf_counter()
    rs = seed000_for(tb, n, b)
    rs.digest()
    build = time.perf_counter() - t0
    files = b.render(rs, interfaces(tb))
    bare = min(bare_load(tb, b, files, tmp) for _ in range(reps))
    first = trial(tb, b, rs)
    later = [trial(tb, b, rs) for _ in range(reps)]
    kernel.flush_all(tb)
    row = {"name": name, "n": n, "build": build, "bare": bare, "first": first,
           "later": sorted(later, key=sum)[len(later) // 2]}
    f, m = row["first"], row["later"]
    print(f"{name} at {n:,}: rule set built in {build:.1f} s; bare load {bare:.2f} s; "
          f"first trial {sum(f[:2]):.2f} s (apply {f[0]:.2f}, of it load {f[2]:.2f}; "
          f"verify {f[1]:.2f}); later trials {sum(m[:2]):.2f} s (apply {m[0]:.2f}, "
          f"load {m[2]:.2f}; verify {m[1]:.2f})", flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", type=int, default=100_000)
    ap.add_argument("--sets", type=int, default=1_000_000,
                    help="elements of the set backends' sets; 0 skips them")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    env = environment.collect({})
    tools = {k: v for b in LINEAR + SETS for k, v in backends.get(b).versions().items() if v}
    print(f"machine: {env['cpu_model']}, {env['cpus']} CPUs; kernel {env['kernel']}; "
          + "; ".join(tools.values()))
    print(f"seed 000's rule set: {a.rules:,} rules (linear)"
          + (f", {a.sets:,} elements (sets)" if a.sets else "")
          + f"; bare load best of {a.reps}, later trials median of {a.reps}", flush=True)
    rows = []
    with NetnsTestbed(Topology.new()) as tb, tempfile.TemporaryDirectory() as tmp:
        for name in LINEAR:
            rows.append(measure(tb, name, a.rules, a.reps, Path(tmp)))
        if a.sets:
            for name in SETS:
                rows.append(measure(tb, name, a.sets, a.reps, Path(tmp)))
    ok = True
    for r in rows:
        first = sum(r["first"][:2]) / r["bare"]
        later = sum(r["later"][:2]) / r["bare"]
        targeted = r["name"] in LINEAR
        met = later <= TARGET
        ok &= met or not targeted
        print(f"{r['name']} at {r['n']:,}: trial overhead / bare load: later trials "
              f"{later:.2f}, first trial {first:.2f}"
              + (f" (target later <= {TARGET:g}: {'met' if met else 'MISSED'})"
                 if targeted else " (no target)"))
    return 0 if ok else 1


if __name__ == "__main__":
    run_main(main, "large_rulesets")
