"""What the ratio scripts share: seed 000's rule set per backend, interleaved
repetitions and paired ratios."""
from __future__ import annotations

import random
import statistics
import sys
from typing import Callable

from fwbench.backends.base import Backend
from fwbench.errors import FwbenchError
from fwbench.ruleset import templates
from fwbench.ruleset.model import RuleSet
from fwbench.testbed.netns import NetnsTestbed


def seed000_for(tb: NetnsTestbed, rules: int, backend: Backend) -> RuleSet:
    """Seed 000's rule set of `rules` entries, held the way `backend` holds them
    (one rule each, or one set), as `fwbench run` builds it. The template's
    addresses are the testbed's, and its flow the one the engine sends by default."""
    rs = templates.get("seed000")(max(rules, 1), layout=backend.layout)
    if rs.flow.daddr != tb.topo.server.ip4:
        raise FwbenchError(f"seed000's server {rs.flow.daddr} is not the testbed's "
                           f"{tb.topo.server.ip4}")
    return rs


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
