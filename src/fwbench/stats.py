"""Intervals for small samples of repeated trials.

- `median_interval`: the distribution-free confidence interval for a median from
  order statistics (the binomial argument: the true median lies between the k-th
  smallest and k-th largest of n values with probability 1 - 2 P(Bin(n, 1/2) < k)).
  It reports the coverage it really has: with 5 values the widest interval, min to
  max, covers 93.75 %, so no 95 % interval exists there and the record says so.
- `paired_ratio_interval`: a percentile bootstrap of median(a) / median(b) - 1
  that resamples whole rounds, so two treatments measured in the same round stay
  together and drift between rounds does not widen the interval twice.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    coverage: float  # the probability it holds, 0..1 (exact for order statistics)


def _below(n: int, k: int) -> float:
    """P(Bin(n, 1/2) < k)."""
    return sum(math.comb(n, i) for i in range(k)) / 2 ** n


def median_interval(values: list[float], level: float = 0.95) -> Interval | None:
    """The narrowest order-statistics interval [x(k), x(n+1-k)] whose coverage is at
    least `level`; when even min..max falls short (n <= 5 at 95 %), min..max with its
    coverage. None for fewer than 2 values."""
    xs = sorted(values)
    n = len(xs)
    if n < 2:
        return None
    best = 1
    for k in range(1, n // 2 + 1):
        if 1 - 2 * _below(n, k) >= level:
            best = k
        else:
            break
    return Interval(xs[best - 1], xs[n - best], 1 - 2 * _below(n, best))


def paired_ratio_interval(pairs: list[tuple[float, float]], level: float = 0.95,
                          resamples: int = 10_000, seed: int = 1) -> Interval | None:
    """Interval of median(a) / median(b) - 1 over (a, b) pairs measured together,
    by a seeded percentile bootstrap over the pairs. None with fewer than 2 pairs."""
    n = len(pairs)
    if n < 2:
        return None
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        pick = [pairs[rng.randrange(n)] for _ in range(n)]
        stats.append(statistics.median(a for a, _ in pick) /
                     statistics.median(b for _, b in pick) - 1)
    stats.sort()
    tail = (1 - level) / 2
    lo = stats[int(math.floor(tail * (resamples - 1)))]
    hi = stats[int(math.ceil((1 - tail) * (resamples - 1)))]
    return Interval(lo, hi, level)
