"""Intervals for small samples: order statistics for a median, paired bootstrap for a
ratio of medians."""
import pytest

from fwbench.stats import median_interval, paired_ratio_interval


def test_five_values_give_min_to_max_at_its_real_coverage():
    iv = median_interval([5.0, 1.0, 4.0, 2.0, 3.0])
    # 1 - 2 * (1/2)^5: no 95 % interval exists with 5 values.
    assert (iv.low, iv.high) == (1.0, 5.0) and iv.coverage == pytest.approx(0.9375)


def test_ten_values_drop_one_from_each_end():
    iv = median_interval([float(x) for x in range(10, 0, -1)])
    # k = 2: 1 - 2 * (1 + 10) / 1024 = 0.9785; k = 3 would cover only 0.8906.
    assert (iv.low, iv.high) == (2.0, 9.0) and iv.coverage == pytest.approx(1 - 22 / 1024)


def test_lower_level_gives_a_narrower_interval():
    xs = [float(x) for x in range(1, 11)]
    assert median_interval(xs, level=0.8).low > median_interval(xs).low


@pytest.mark.parametrize("xs", [[], [3.0]])
def test_no_interval_from_fewer_than_two(xs):
    assert median_interval(xs) is None


def test_paired_ratio_of_a_constant_factor_is_that_factor():
    pairs = [(1.2 * b, b) for b in (100.0, 90.0, 110.0, 95.0, 105.0)]
    iv = paired_ratio_interval(pairs)
    assert iv.low == pytest.approx(0.2) and iv.high == pytest.approx(0.2)


def test_paired_ratio_interval_brackets_the_estimate_and_is_seeded():
    pairs = [(110.0, 100.0), (104.0, 99.0), (121.0, 101.0), (100.0, 98.0), (115.0, 100.0)]
    iv = paired_ratio_interval(pairs, seed=3)
    assert iv.low <= 110.0 / 100.0 - 1 <= iv.high and iv.low > 0
    assert iv == paired_ratio_interval(pairs, seed=3)


def test_pairing_removes_drift_shared_by_both():
    """Both treatments drift together across rounds: paired, the ratio is exact."""
    drift = [100.0, 150.0, 80.0, 200.0, 120.0]
    iv = paired_ratio_interval([(d, d / 1.1) for d in drift])
    assert iv.high - iv.low < 1e-9


def test_paired_ratio_needs_two_pairs():
    assert paired_ratio_interval([(1.0, 1.0)]) is None
