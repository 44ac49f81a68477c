"""Is the cost per rule precise and repeatable? The cost model, twice back to back:

  half-width     per backend, the 95 % interval of the fitted ns per rule, half its
                 width as a fraction of the value (target <= 5 % for iptables-legacy
                 and nftables)
  agreement      per backend, |run 1 - run 2| / mean of the two (target <= 10 %)
  ratio          nftables / iptables-legacy ns per rule in each run: the figure that
                 needs no absolute scale (printed, no target)
  measuring      each run's wall time (target <= 5 minutes)

Each run is `fwbench run` as a user runs it (interleaved rounds, the none backend in
every round), into a fresh directory, and the fit is the report's (weighted least
squares of time per packet on the rule count). Prints the ratios last; exits 1 if a
target is missed. Run as root (about 10 minutes with the defaults):

    .venv/bin/python bench/precision.py
    .venv/bin/python bench/precision.py --method cpucost --rate 2000
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _ratios import run_main

from fwbench import environment
from fwbench.errors import FwbenchError
from fwbench.report import analysis, data

BACKENDS = ("iptables-legacy", "nftables")
TARGET_HALF = 0.05
TARGET_AGREE = 0.10
TARGET_WALL_S = 300.0


def one_run(a, out: Path) -> tuple[dict[str, analysis.CostRow], float]:
    argv = [sys.executable, "-m", "fwbench", "run", "--method", a.method,
            "--backends", ",".join((*BACKENDS, "none")), "--rules", a.rules,
            "--frame-sizes", "64", "--repeat", str(a.repeat), "--duration", str(a.duration),
            "--seed", str(a.seed), "--out", str(out), "--no-report"]
    if a.method == "cpucost":
        argv.insert(4, str(Path(out.parent, "cpucost.toml")))
        Path(out.parent, "cpucost.toml").write_text(
            f"[cpucost]\nrate_pps = {a.rate:.1f}\n")
    t0 = time.monotonic()
    cp = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if cp.returncode != 0:
        tail = (cp.stderr.strip().splitlines() or ["no output"])[-1]
        raise FwbenchError(f"fwbench run failed: {tail}")
    rd = data.load(out)
    rows = {r.backend: r for r in analysis.cost_rows(rd, set()) if r.fit is not None}
    missing = [b for b in BACKENDS if b not in rows]
    if missing:
        raise FwbenchError(f"no cost fit for {', '.join(missing)} in {out}")
    return rows, wall


def half_width(row: analysis.CostRow) -> float:
    f = row.fit
    return (f.b_interval.high - f.b_interval.low) / 2 / abs(f.b_ns)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", choices=("maxrate", "cpucost"), default="maxrate")
    # Two rule counts far apart carry the slope best; six rounds of 3 s fit in the
    # five minutes (each rule count's own scatter weighs it: stats.fit_cost).
    ap.add_argument("--rules", default="100,10000")
    ap.add_argument("--repeat", type=int, default=6)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--rate", type=float, default=2000.0,
                    help="cpucost's fixed load (below every cell's capacity)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", metavar="DIR", help="keep both runs' directories under DIR")
    a = ap.parse_args()
    env = environment.collect({})
    print(f"machine: {env['cpu_model']}, {env['cpus']} CPUs; kernel {env['kernel']}")
    print(f"method {a.method}{f' at {a.rate:,.0f} pps' if a.method == 'cpucost' else ''}; "
          f"rules {a.rules}; 64 B; {a.repeat} rounds x {a.duration:g} s; backends "
          f"{', '.join(BACKENDS)} and none, interleaved; two runs back to back", flush=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="fwbench-precision-") as tmp:
        for i in (1, 2):
            d = Path(a.keep or tmp, f"run{i}")
            d.mkdir(parents=True)
            rows, wall = one_run(a, d / "out")
            runs.append((rows, wall))
            print(f"run {i}: {wall / 60:.1f} min; " + "; ".join(
                f"{b} {rows[b].fit.b_ns:.2f} ns/rule [{rows[b].fit.b_interval.low:.2f}, "
                f"{rows[b].fit.b_interval.high:.2f}]" for b in BACKENDS), flush=True)
    ok = True
    for i, (rows, wall) in enumerate(runs, 1):
        for b in BACKENDS:
            h = half_width(rows[b])
            met = h <= TARGET_HALF
            ok &= met
            print(f"run {i} {b}: half-width {h:.1%} of {rows[b].fit.b_ns:.2f} ns/rule "
                  f"(target <= {TARGET_HALF:.0%}: {'met' if met else 'MISSED'})")
        met = wall <= TARGET_WALL_S
        ok &= met
        ratio = rows["nftables"].fit.b_ns / rows["iptables-legacy"].fit.b_ns
        print(f"run {i}: nftables / iptables-legacy per rule = {ratio:.2f}; measuring "
              f"{wall / 60:.1f} min (target <= {TARGET_WALL_S / 60:.0f}: "
              f"{'met' if met else 'MISSED'})")
    for b in BACKENDS:
        x, y = runs[0][0][b].fit.b_ns, runs[1][0][b].fit.b_ns
        agree = abs(x - y) / ((x + y) / 2)
        met = agree <= TARGET_AGREE
        ok &= met
        print(f"agreement {b}: run 1 {x:.2f}, run 2 {y:.2f} ns/rule, {agree:.1%} apart "
              f"(target <= {TARGET_AGREE:.0%}: {'met' if met else 'MISSED'})")
    return 0 if ok else 1


if __name__ == "__main__":
    run_main(main, "precision")
