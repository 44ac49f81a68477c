"""Does a change leave the quick job as it was? An interleaved A/B of two revisions.

Each revision is cloned into its own directory and set up there (./scripts/setup.sh:
its own venv and engine build), then the quick job (scenarios/quick.toml, one round
each time) runs alternately from A and from B, `--pairs` times, A first in odd pairs
and B first in even ones, so the machine's drift hits both alike. Printed, from one
run of this script:

  - whether both planned the same cells and wrote records with the same keys
    (run.json's plan, trials.jsonl's schema, metrics' names), and whether each
    side's report of its first run has the same sections (report.md's headings);
  - verification: trials not ok on each side;
  - per cell, the ratio B/A of the headline (rx_pps) within each pair, and over
    every cell and pair their geometric mean with a 95 % bootstrap interval
    (resampling cells, their pairs kept together).

Within noise: the interval reaches within --tolerance of 1. The interval resamples
cells, which share each run's drift, so the same code's drift from one run to the
next is printed beside it: a B/A no further from 1 than that is not a difference
this many pairs can show. Exits 1 when the cells, the record keys or the report
sections differ, or when the interval lies further than --tolerance from 1. Run as root:
  .venv/bin/python bench/ab_quick.py --base f083581 --pairs 3
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def sh(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, text=True, **kw)


def checkout(rev: str, where: Path) -> str:
    """A clone of `rev` set up in `where` (kept for the next call); its commit."""
    commit = sh(["git", "-C", str(REPO), "rev-parse", rev], capture_output=True).stdout.strip()
    if not (where / ".git").exists() or sh(["git", "-C", str(where), "rev-parse", "HEAD"],
                                           capture_output=True).stdout.strip() != commit:
        sh(["rm", "-rf", str(where)])
        sh(["git", "clone", "-q", str(REPO), str(where)])
        sh(["git", "-C", str(where), "checkout", "-q", commit])
    print(f"setting up {rev} ({commit[:7]}) in {where}", flush=True)
    sh([str(where / "scripts/setup.sh")], stdout=subprocess.DEVNULL)
    return commit


def run_quick(where: Path, out: Path) -> None:
    sh([str(where / ".venv/bin/fwbench"), "run", str(where / "scenarios/quick.toml"),
        "--repeat", "1", "--no-report", "--out", str(out)], stdout=subprocess.DEVNULL,
       cwd=where)


def load(out: Path) -> tuple[list[dict], dict]:
    recs = [json.loads(ln) for ln in (out / "trials.jsonl").read_text().splitlines() if ln]
    return recs, json.loads((out / "run.json").read_text())


def sections(where: Path, run: Path) -> list[str]:
    """The headings of the report each revision writes of its run."""
    sh([str(where / ".venv/bin/fwbench"), "report", str(run)], stdout=subprocess.DEVNULL,
       cwd=where)
    md = run / "report.md"
    return [ln for ln in md.read_text().splitlines() if ln.startswith("#")]


def cell(rec: dict) -> tuple:
    return tuple(sorted(rec["factors"].items()))


def keys(recs: list[dict]) -> tuple[set, set]:
    top = set().union(*(r.keys() for r in recs))
    metrics = set().union(*(r["metrics"].keys() for r in recs if r["status"] == "ok"))
    return top, metrics


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="f083581", help="revision A (default f083581)")
    ap.add_argument("--head", default="HEAD", help="revision B (default HEAD)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--work", default="/tmp/fwbench-ab", help="clones and results")
    ap.add_argument("--metric", default="rx_pps")
    ap.add_argument("--tolerance", type=float, default=0.05,
                    help="how far outside 1 the interval may lie before it fails")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("ab_quick: run as root (the quick job builds namespaces)", file=sys.stderr)
        return 2
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    trees = {"A": work / "A", "B": work / "B"}
    commits = {"A": checkout(a.base, trees["A"]), "B": checkout(a.head, trees["B"])}
    runs: dict[str, list[Path]] = {"A": [], "B": []}
    for p in range(a.pairs):
        for side in (("A", "B") if p % 2 == 0 else ("B", "A")):
            out = work / f"{side}{p + 1}"
            sh(["rm", "-rf", str(out)])
            print(f"pair {p + 1}: quick job from {side} ({commits[side][:7]})", flush=True)
            run_quick(trees[side], out)
            runs[side].append(out)

    got = {s: [load(o) for o in outs] for s, outs in runs.items()}
    ok = True
    plans = {s: [sorted(map(str, rj["plan"])) for _, rj in got[s]] for s in got}
    same_cells = all(x == plans["A"][0] for s in plans for x in plans[s])
    print(f"cells: {'the same' if same_cells else 'DIFFERENT'} "
          f"({len(plans['A'][0])} planned per run)")
    ok &= same_cells
    ka = keys([r for recs, _ in got["A"] for r in recs])
    kb = keys([r for recs, _ in got["B"] for r in recs])
    for what, x, y in (("record keys", ka[0], kb[0]), ("metric names", ka[1], kb[1])):
        print(f"{what}: " + ("the same" if x == y else
                             f"DIFFERENT (only A: {sorted(x - y)}; only B: {sorted(y - x)})"))
        ok &= x == y
    heads = {s: sections(trees[s], runs[s][0]) for s in runs}
    print(f"report sections: {'the same' if heads['A'] == heads['B'] else 'DIFFERENT'} "
          f"({len(heads['A'])} headings)")
    if heads["A"] != heads["B"]:
        print(f"  only A: {[h for h in heads['A'] if h not in heads['B']]}; "
              f"only B: {[h for h in heads['B'] if h not in heads['A']]}")
    ok &= heads["A"] == heads["B"]
    for s in ("A", "B"):
        bad = [(r["factors"], r["status"]) for recs, _ in got[s] for r in recs
               if r["status"] != "ok"]
        print(f"{s}: {sum(len(recs) for recs, _ in got[s])} trials, {len(bad)} not ok"
              + (f" (first: {bad[0]})" if bad else ""))

    # Per cell, the log ratio B/A within each pair.
    per_cell: dict[tuple, list[float]] = {}
    for (ra, _), (rb, _) in zip(got["A"], got["B"]):
        va = {cell(r): r["metrics"].get(a.metric) for r in ra if r["status"] == "ok"}
        vb = {cell(r): r["metrics"].get(a.metric) for r in rb if r["status"] == "ok"}
        for c in va.keys() & vb.keys():
            if va[c] and vb[c]:
                per_cell.setdefault(c, []).append(math.log(vb[c] / va[c]))
    cells = sorted(per_cell)
    rng = random.Random(1)

    def gmean(cs) -> float:
        return math.exp(statistics.fmean(x for c in cs for x in per_cell[c]))
    boots = sorted(gmean([rng.choice(cells) for _ in cells]) for _ in range(2000))
    lo, hi = boots[49], boots[1949]
    for c in cells:
        print(f"  {dict(c)}: B/A " + ", ".join(f"{math.exp(x):.2f}" for x in per_cell[c]))
    # The interval resamples cells, whose pairs share each run's drift: what the
    # same code drifts from one of its runs to the next is printed beside it.
    for side in ("A", "B"):
        first = {cell(r): r["metrics"].get(a.metric) for r in got[side][0][0]
                 if r["status"] == "ok"}
        for k, (recs, _) in enumerate(got[side][1:], 2):
            later = {cell(r): r["metrics"].get(a.metric) for r in recs if r["status"] == "ok"}
            common = [c for c in first if c in later and first[c] and later[c]]
            if common:
                drift = math.exp(statistics.fmean(math.log(later[c] / first[c])
                                                  for c in common))
                print(f"same code, run {k} / run 1: {side} {drift:.3f}")
    within = lo <= 1 + a.tolerance and hi >= 1 - a.tolerance
    print(f"{a.metric} B/A over {len(cells)} cells x {a.pairs} pairs: geometric mean "
          f"{gmean(cells):.3f}, 95 % interval {lo:.3f}..{hi:.3f} "
          f"({'within noise' if within else 'OUTSIDE noise'}; A = {commits['A'][:7]}, "
          f"B = {commits['B'][:7]})")
    ok &= within
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
