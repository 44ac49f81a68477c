"""Intervals for small samples: order statistics for a median, paired bootstrap for a
ratio of medians.

Reference intervals are computed here without the code under test: order-statistics
coverage by counting subsets (math.comb), and bootstrap intervals from the exact
bootstrap distribution (every possible resample with its multinomial probability)
instead of random resamples."""
import itertools
import math
import random
from collections import defaultdict
from fractions import Fraction

import pytest

from fwbench.stats import Interval, median_interval, paired_ratio_interval


def order_statistics_interval(xs, level):
    """The narrowest [x(k), x(n+1-k)] that holds the median with probability at least
    `level`, or min..max: that probability is P(k <= Bin(n, 1/2) <= n-k), counted
    exactly as the share of the 2^n sign patterns."""
    n, s = len(xs), sorted(xs)

    def cover(k):
        return Fraction(sum(math.comb(n, i) for i in range(k, n - k + 1)), 2 ** n)
    k = max([k for k in range(1, n // 2 + 1) if cover(k) >= level], default=1)
    return s[k - 1], s[n - k], cover(k)


def _resamples(n):
    """Every multiset of n draws (with replacement) from n items, with its probability."""
    for idx in itertools.combinations_with_replacement(range(n), n):
        ways = math.factorial(n) // math.prod(math.factorial(idx.count(i)) for i in set(idx))
        yield idx, Fraction(ways, n ** n)


def exact_bootstrap(samples, statistic, paired=False):
    """The bootstrap distribution of statistic(*samples), exactly: sorted (value,
    probability). Paired: one resample of positions for all samples; else each sample
    is resampled on its own."""
    dist = defaultdict(Fraction)
    if paired:
        for idx, p in _resamples(len(samples[0])):
            dist[statistic(*([x[i] for i in idx] for x in samples))] += p
    else:
        for picks in itertools.product(*(list(_resamples(len(x))) for x in samples)):
            dist[statistic(*([x[i] for i in idx] for x, (idx, _) in zip(samples, picks)))] \
                += math.prod(p for _, p in picks)
    return sorted(dist.items())


def _quantile(dist, q):
    cum = 0
    for v, p in dist:
        cum += p
        if cum >= q:
            return v
    return dist[-1][0]


def percentile_range(dist, level, resamples, z=5):
    """Where a percentile-bootstrap interval from `resamples` random resamples can end:
    each end between the exact distribution's points at its quantile -+ z standard
    errors of a quantile estimated from that many resamples. Where no value of the
    distribution has its cumulative probability that near, the range is one value."""
    out = []
    for q in ((1 - level) / 2, (1 + level) / 2):
        se = math.sqrt(q * (1 - q) / resamples)
        out.append((_quantile(dist, q - z * se), _quantile(dist, q + z * se)))
    return out


def within(iv, ranges):
    return all(lo - 1e-12 * abs(lo) <= x <= hi + 1e-12 * abs(hi)
               for x, (lo, hi) in zip((iv.low, iv.high), ranges))


def _median(x):
    s, n = sorted(x), len(x)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _median_ratio(a, b):
    return _median(a) / _median(b) - 1


def test_five_values_give_min_to_max_at_its_real_coverage():
    iv = median_interval([5.0, 1.0, 4.0, 2.0, 3.0])
    # 1 - 2 * (1/2)^5: no 95 % interval exists with 5 values.
    assert (iv.low, iv.high) == (1.0, 5.0) and iv.coverage == pytest.approx(0.9375)


def test_ten_values_drop_one_from_each_end():
    iv = median_interval([float(x) for x in range(10, 0, -1)])
    # k = 2: 1 - 2 * (1 + 10) / 1024 = 0.9785; k = 3 would cover only 0.8906.
    assert (iv.low, iv.high) == (2.0, 9.0) and iv.coverage == pytest.approx(1 - 22 / 1024)


@pytest.mark.parametrize("level", [0.8, 0.9, 0.95, 0.99])
def test_order_statistics_interval_for_every_size(level):
    for n in range(2, 41):
        xs = [10.0 + 1.5 * v for v in random.Random(n).sample(range(n), n)]
        low, high, cover = order_statistics_interval(xs, level)
        iv = median_interval(xs, level)
        assert (iv.low, iv.high) == (low, high), (n, level)
        assert iv.coverage == pytest.approx(float(cover), rel=1e-12), (n, level)


def test_lower_level_gives_a_narrower_interval():
    xs = [float(x) for x in range(1, 11)]
    # k = 3: 1 - 2 * (1 + 10 + 45) / 1024 = 0.8906 >= 0.8; k = 4 covers only 0.6562.
    iv = median_interval(xs, level=0.8)
    assert (iv.low, iv.high) == (3.0, 8.0) and iv.coverage == pytest.approx(1 - 112 / 1024)


@pytest.mark.parametrize("xs", [[], [3.0]])
def test_no_interval_from_fewer_than_two(xs):
    assert median_interval(xs) is None


def test_paired_ratio_of_a_constant_factor_is_that_factor():
    pairs = [(1.2 * b, b) for b in (100.0, 90.0, 110.0, 95.0, 105.0)]
    iv = paired_ratio_interval(pairs)
    assert iv.low == pytest.approx(0.2) and iv.high == pytest.approx(0.2)


def test_paired_ratio_interval_is_the_exact_bootstraps_and_is_seeded():
    pairs = [(110.0, 100.0), (104.0, 99.0), (121.0, 101.0), (100.0, 98.0), (115.0, 100.0)]
    dist = exact_bootstrap([[a for a, _ in pairs], [b for _, b in pairs]], _median_ratio,
                           paired=True)
    ranges = percentile_range(dist, 0.95, 10_000)
    # Far from any step of the distribution: each end is one value, 100/98 - 1 and
    # 121/101 - 1.
    assert ranges == [(100 / 98 - 1,) * 2, (121 / 101 - 1,) * 2]
    iv = paired_ratio_interval(pairs, seed=3)
    assert within(iv, ranges) and iv.coverage == 0.95
    assert iv == paired_ratio_interval(pairs, seed=3)


def test_pairing_removes_drift_shared_by_both():
    """Both treatments drift together across rounds: paired, the ratio is exact."""
    drift = [100.0, 150.0, 80.0, 200.0, 120.0]
    iv = paired_ratio_interval([(d, d / 1.1) for d in drift])
    assert iv.high - iv.low < 1e-9


def test_paired_ratio_needs_two_pairs():
    assert paired_ratio_interval([(1.0, 1.0)]) is None


# -- tests between treatments: reference values ---------------------------------------

import math  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats as sps  # noqa: E402

from fwbench.stats import (bootstrap, cliffs_delta, crossover, fit_cost,  # noqa: E402
                           holm, mann_whitney, mean_ci, median_ci, ratio_interval,
                           welch)

# Wikipedia, "Welch's t-test", example 1: t = -2.46, nu = 24.98, p = 0.021.
A1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
A2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]


def test_welch_matches_the_textbook_example():
    r = welch(A1, A2)
    assert r.statistic == pytest.approx(-2.46, abs=0.005)
    assert r.df == pytest.approx(24.98, abs=0.01)
    assert r.p == pytest.approx(0.021, abs=0.0005)


def test_welch_is_seed_000s_formula():
    """t = (mean1 - mean2) / sqrt(S1^2/n1 + S2^2/n2), two-tailed on the
    Welch-Satterthwaite degrees of freedom."""
    a, b = [455.0, 457.0, 459.0, 452.0], [694.0, 650.0, 720.0, 701.0, 688.0]
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    t = (np.mean(a) - np.mean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    r = welch(a, b)
    assert r.statistic == pytest.approx(t) and r.df == pytest.approx(df)
    assert r.p == pytest.approx(2 * sps.t.sf(abs(t), df))


@pytest.mark.parametrize("a,b", [([1.0], [2.0, 3.0]), ([2.0, 2.0], [2.0, 2.0])])
def test_welch_refuses_what_it_cannot_test(a, b):
    assert welch(a, b) is None


def test_mann_whitney_exact_at_complete_separation():
    """3 against 3, fully separated: 1 of C(6, 3) = 20 orderings is as extreme."""
    lo, hi = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]
    assert mann_whitney(lo, hi).p == pytest.approx(2 / 20)
    assert mann_whitney(lo, hi, "less").p == pytest.approx(1 / 20)
    assert mann_whitney(lo, hi, "greater").p == pytest.approx(1.0)
    assert mann_whitney(lo, hi).statistic == 0.0       # U of a


def test_mann_whitney_agrees_with_scipy_on_ties():
    a, b = [1.0, 2.0, 2.0, 3.0, 5.0], [2.0, 3.0, 4.0, 4.0, 6.0, 7.0]
    ref = sps.mannwhitneyu(a, b, alternative="two-sided")
    r = mann_whitney(a, b)
    assert (r.statistic, r.p) == pytest.approx((ref.statistic, ref.pvalue))


def test_cliffs_delta_counts_pairs():
    a, b = [1.0, 2.0, 2.0, 3.0, 5.0], [2.0, 3.0, 4.0, 4.0, 6.0, 7.0]
    gt = sum(x > y for x in a for y in b)
    lt = sum(x < y for x in a for y in b)
    assert cliffs_delta(a, b) == pytest.approx((gt - lt) / (len(a) * len(b)))
    assert cliffs_delta([5.0, 6.0], [1.0, 2.0]) == 1.0


def test_holm_textbook_example_and_gaps():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> 0.06
    assert holm([0.01, 0.04, None, 0.03, 0.005]) == pytest.approx(
        [0.03, 0.06, None, 0.06, 0.02])
    assert holm([0.5, 0.9]) == [1.0, 1.0]
    assert holm([]) == []


def test_median_ci_is_the_exact_bootstraps_and_is_seeded():
    xs = [10.0, 12.0, 11.0, 13.0, 9.0, 30.0, 11.5]
    ranges = percentile_range(exact_bootstrap([xs], _median), 0.95, 9999)
    # A resampled median is at most the smallest value 1.0 % of the time and at most
    # the second smallest 10.8 % (P(Bin(7, j/7) >= 4)): the 2.5 % point is 10, and
    # symmetrically the 97.5 % point is the second largest, 13.
    assert ranges == [(10.0, 10.0), (13.0, 13.0)]
    iv = median_ci(xs)
    assert within(iv, ranges) and iv.coverage == 0.95
    assert iv == median_ci(xs)
    for n in (3, 5):  # the 2.5 % point is the minimum: P(Bin(n, 1/n) > n/2) >= 5.8 %
        xs = [100.0 + 7 * i % 11 for i in range(n)]
        assert percentile_range(exact_bootstrap([xs], _median), 0.95, 9999) == \
            [(min(xs),) * 2, (max(xs),) * 2]
        assert within(median_ci(xs), [(min(xs),) * 2, (max(xs),) * 2])
    assert median_ci([5.0, 5.0, 5.0]) == median_ci([5.0, 5.0]) == Interval(5.0, 5.0, 0.95)
    assert median_ci([1.0]) is None


def test_median_ci_covers_the_true_median_about_as_often_as_it_says():
    """25 values: a resampled median is at most x(j) with probability
    P(Bin(25, j/25) >= 13), which first reaches 2.5 % at j = 8 (3.0 %) and 97.5 % at
    j = 18, so the interval is [x(8), x(18)]. It holds the true median when 8 to 17
    of the values lie below it: P = 0.957. Over 200 samples the hits must lie in
    the central 99.9 % of Binomial(200, 0.957)."""
    F = [sps.binom.sf(12, 25, j / 25) for j in range(1, 26)]
    assert F[6] < 0.025 <= F[7] and F[16] < 0.975 <= F[17]
    cover = sps.binom.cdf(17, 25, 0.5) - sps.binom.cdf(7, 25, 0.5)
    rng = np.random.default_rng(7)
    hits = sum(iv.low <= 100.0 <= iv.high for iv in
               (median_ci(list(rng.normal(100, 5, 25)), seed=s) for s in range(200)))
    lo, hi = sps.binom.interval(0.999, 200, cover)
    assert lo <= hits <= hi, (hits, cover)


def test_mean_ci_is_the_exact_bootstraps_and_is_seeded():
    xs = [10.0, 12.0, 11.0, 13.0, 9.0, 30.0]
    ranges = percentile_range(exact_bootstrap([xs], lambda x: sum(x) / len(x)), 0.95, 4000)
    iv = mean_ci(xs, resamples=4000)
    assert within(iv, ranges) and iv.coverage == 0.95, (iv, ranges)
    assert iv == mean_ci(xs, resamples=4000) != mean_ci(xs, resamples=4000, seed=2)
    assert mean_ci([5.0, 5.0, 5.0]) == Interval(5.0, 5.0, 0.95) and mean_ci([1.0]) is None


def test_bootstrap_resamples_every_sample_on_its_own():
    a, b = [120.0, 121.0, 119.0, 126.0], [100.0, 104.0, 99.0]
    exact = exact_bootstrap([a, b], lambda x, y: sum(x) / len(x) - sum(y) / len(y))
    ranges = percentile_range(exact, 0.9, 2000)
    iv = bootstrap([a, b], lambda x, y, axis: x.mean(axis=axis) - y.mean(axis=axis),
                   level=0.9, resamples=2000)
    assert within(iv, ranges) and iv.coverage == 0.9, (iv, ranges)


def test_independent_ratio_interval():
    a, b = [120.0, 121.0, 119.0, 120.5], [100.0, 101.0, 99.0, 100.5]
    ranges = percentile_range(exact_bootstrap([a, b], _median_ratio), 0.95, 9999)
    iv = ratio_interval(a, b)
    assert within(iv, ranges), (iv, ranges)
    # The ranges are narrow: the check above pins each end to about 0.2 %.
    assert all(hi - lo < 0.003 for lo, hi in ranges), ranges


# -- the cost model -------------------------------------------------------------------

def _points(a_ns, b_ns, rules, reps=3, noise=0.0, seed=1):
    rng = np.random.default_rng(seed)
    return [(n, 1e9 / ((a_ns + b_ns * n) * (1 + noise * rng.standard_normal())))
            for n in rules for _ in range(reps)]


def test_fit_recovers_an_exact_line():
    f = fit_cost(_points(1000.0, 4.0, [20, 1000, 10000]))
    assert f.b_ns == pytest.approx(4.0) and f.a_ns == pytest.approx(1000.0)
    assert f.b_interval.low == pytest.approx(4.0) and f.r_squared == pytest.approx(1.0)
    assert (f.rules_min, f.rules_max, f.points) == (20, 10000, 9)


def test_fit_interval_covers_the_true_slope_at_its_level():
    hits = 0
    for seed in range(200):
        f = fit_cost(_points(1000.0, 4.0, [20, 1000, 5000, 10000], noise=0.03, seed=seed))
        hits += f.b_interval.low <= 4.0 <= f.b_interval.high
    assert 0.88 <= hits / 200 <= 0.99


def test_fit_by_groups_covers_the_slope_when_noise_differs_by_rule_count():
    """Few rules near the sender's ceiling scatter by 20 %, 10,000 rules by 3 %: each
    rule count weighed by its own scatter, the interval still covers at its level and
    is narrower than one noise model for all would make it."""
    noise = {100: 0.2, 1000: 0.1, 3000: 0.05, 10000: 0.03}
    hits, widths = 0, []
    for seed in range(300):
        rng = np.random.default_rng(seed)
        pts = [(n, 1e9 / ((1000.0 + 4.0 * n) * (1 + noise[n] * rng.standard_normal())))
               for n in noise for _ in range(3)]
        f = fit_cost(pts)
        hits += f.b_interval.low <= 4.0 <= f.b_interval.high
        widths.append((f.b_interval.high - f.b_interval.low) / 2 / 4.0)
    assert 0.9 <= hits / 300 <= 0.99
    assert np.median(widths) < 0.06


def test_fit_needs_two_rule_counts():
    assert fit_cost([(100, 1e6), (100, 1.1e6), (100, 0.9e6)]) is None
    assert fit_cost([(100, 1e6), (200, 1e6)]) is None


def test_crossover_of_a_cheap_linear_and_a_flat_set():
    linear = _points(1000.0, 4.0, [20, 200, 1000, 2000], noise=0.01)
    flat = _points(3000.0, 0.0, [20, 200, 1000, 2000], noise=0.01, seed=2)
    c = crossover(linear, flat)
    assert c.rules == pytest.approx(500, rel=0.1) and c.inside
    assert c.interval.low < 500 < c.interval.high


def test_no_crossover_when_one_is_cheaper_everywhere():
    assert crossover(_points(1000.0, 1.0, [10, 100, 1000]),
                     _points(2000.0, 2.0, [10, 100, 1000])) is None
