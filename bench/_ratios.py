"""What the ratio scripts share: interleaved repetitions and paired ratios."""
from __future__ import annotations

import random
import statistics
import sys
from typing import Callable

from fwbench.errors import FwbenchError


def interleave(names: list[str], reps: int, rng: random.Random,
               measure: Callable[[str], float]) -> dict[str, list[float]]:
    """Every treatment once per repetition, in a fresh shuffled order each time."""
    got: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(reps):
        order = list(names)
        rng.shuffle(order)
        row = {what: measure(what) for what in order}
        for k, v in row.items():
            got[k].append(v)
        print(f"rep {rep + 1}: " + ", ".join(f"{k} {row[k]:,.0f} pps" for k in names)
              + f"  (order: {' '.join(order)})", flush=True)
    print("medians: " + ", ".join(f"{k} {statistics.median(v):,.0f} pps"
                                  for k, v in got.items()))
    return got


def check(got: dict[str, list[float]], name: str, num: str, den: str,
          target: float) -> bool:
    """Print median ratio num/den with its paired per-repetition range; met only if
    the median ratio and every paired one reach the target."""
    paired = [x / y for x, y in zip(got[num], got[den])]
    r = statistics.median(got[num]) / statistics.median(got[den])
    passed = r >= target and min(paired) >= target
    print(f"{name} = {r:.2f} (paired per repetition {min(paired):.2f}..{max(paired):.2f}; "
          f"target >= {target:g}: {'met' if passed else 'MISSED'})")
    return passed


def run_main(main: Callable[[], int], name: str) -> None:
    """Exit with main()'s code; a user error is one line (exit 2), Ctrl-C exits 130."""
    try:
        sys.exit(main())
    except FwbenchError as e:
        print(f"{name}: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
