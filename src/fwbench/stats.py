"""Statistics for repeated trials, on scipy: what the report needs to say which
differences are real.

- Intervals for a median: exact order statistics (`median_interval`, the binomial
  argument, reporting the coverage it really has) and a percentile bootstrap
  (`median_ci`, `scipy.stats.bootstrap`); for a mean, the same bootstrap (`mean_ci`);
  for any statistic of several samples, each resampled on its own (`bootstrap`).
- Ratios of medians: paired by round (`paired_ratio_interval`: two treatments measured
  in the same round stay together, so drift between rounds does not widen the interval
  twice) or independent (`ratio_interval`).
- The comparison of two treatments (`log_ratio`), which decides: the ratio of a to
  b estimated and tested on the log scale, paired by round where both were measured
  in the same rounds (the within-round ratio cancels the drift that moves both),
  else Welch's t on the logs; its interval and its p-value come from one t
  statistic, so at any level the interval excludes 1 exactly when p is below it.
  Across a family, `holm_levels` gives each comparison Holm's verdict and the level
  its interval is printed at, so verdict and interval never disagree.
- The seeds' own tests, shown beside and deciding nothing: Welch's t-test on raw
  values, two-tailed, as seed 000 used (`welch`); Mann-Whitney U, one- or
  two-tailed, as seed 004 used (`mann_whitney`); Cliff's delta (`cliffs_delta`);
  Holm's adjusted p-values (`holm`).
- The per-packet cost model `1/pps = a + b*N` (`fit_cost`, weighted least squares):
  `b` is the time one more rule adds to every packet, in ns, with its t interval; `crossover` is the rule count
  where two backends cost the same, with a bootstrap interval.

Every function takes plain sequences of floats and returns None where the data cannot
support an answer (too few values, no variance), never a made-up number.
"""
from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fwbench.lazy import Module

sps = Module("scipy.stats")
optimize = Module("scipy.optimize")

LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    coverage: float  # the probability it holds, 0..1 (exact for order statistics)

    def width_relative_to(self, centre: float) -> float:
        return (self.high - self.low) / abs(centre) if centre else math.inf


# -- intervals for one treatment -------------------------------------------------------

def median_interval(values: Sequence[float], level: float = LEVEL) -> Interval | None:
    """The narrowest order-statistics interval [x(k), x(n+1-k)] whose coverage is at
    least `level`; when even min..max falls short (n <= 5 at 95 %), min..max with its
    coverage. None for fewer than 2 values."""
    xs = sorted(values)
    n = len(xs)
    if n < 2:
        return None
    # P(Bin(n, 1/2) < k) = cdf(k - 1): the chance the median lies below x(k).
    coverage = lambda k: 1 - 2 * sps.binom.cdf(k - 1, n, 0.5)  # noqa: E731
    best = 1
    for k in range(2, n // 2 + 1):
        if coverage(k) < level:
            break
        best = k
    return Interval(xs[best - 1], xs[n - best], float(coverage(best)))


def _bootstrap(data: tuple, statistic, *, paired: bool, level: float, resamples: int,
               seed: int) -> Interval:
    res = sps.bootstrap(data, statistic, paired=paired, vectorized=True,
                        confidence_level=level, n_resamples=resamples,
                        method="percentile", random_state=np.random.default_rng(seed))
    ci = res.confidence_interval
    return Interval(float(ci.low), float(ci.high), level)


def bootstrap(samples: Sequence[Sequence[float]], statistic, level: float = LEVEL,
              resamples: int = 9999, seed: int = 1) -> Interval:
    """Seeded percentile-bootstrap interval of `statistic(*samples, axis=-1)`, every
    sample resampled on its own: the statistic takes one array per sample, its
    resamples along the last axis, and returns one value per resample."""
    return _bootstrap(tuple(np.asarray(x, dtype=float) for x in samples), statistic,
                      paired=False, level=level, resamples=resamples, seed=seed)


def mean_ci(values: Sequence[float], level: float = LEVEL, resamples: int = 9999,
            seed: int = 1) -> Interval | None:
    """Percentile-bootstrap interval of the mean. None for fewer than 2 values."""
    return _one_sample_ci(values, np.mean, level, resamples, seed)


def median_ci(values: Sequence[float], level: float = LEVEL, resamples: int = 9999,
              seed: int = 1) -> Interval | None:
    """Percentile-bootstrap interval of the median. None for fewer than 2 values.
    With few values it is no wider than min..max: read the coverage as nominal."""
    return _one_sample_ci(values, np.median, level, resamples, seed)


def _one_sample_ci(values: Sequence[float], location, level: float, resamples: int,
                   seed: int) -> Interval | None:
    """`location(x, axis=...)`'s bootstrap interval; a constant sample is its own."""
    xs = np.asarray(values, dtype=float)
    if len(xs) < 2:
        return None
    if np.all(xs == xs[0]):
        return Interval(float(xs[0]), float(xs[0]), level)
    return _bootstrap((xs,), lambda x, axis: location(x, axis=axis), paired=False,
                      level=level, resamples=resamples, seed=seed)


def _median_ratio(a, b, axis):
    return np.median(a, axis=axis) / np.median(b, axis=axis) - 1


def paired_ratio_interval(pairs: Sequence[tuple[float, float]], level: float = LEVEL,
                          resamples: int = 10_000, seed: int = 1) -> Interval | None:
    """Interval of median(a) / median(b) - 1 over (a, b) pairs measured together,
    by a seeded percentile bootstrap over the pairs. None with fewer than 2 pairs."""
    if len(pairs) < 2:
        return None
    a = np.array([p[0] for p in pairs], dtype=float)
    b = np.array([p[1] for p in pairs], dtype=float)
    return _bootstrap((a, b), _median_ratio, paired=True, level=level,
                      resamples=resamples, seed=seed)


def ratio_interval(a: Sequence[float], b: Sequence[float], level: float = LEVEL,
                   resamples: int = 9999, seed: int = 1) -> Interval | None:
    """Interval of median(a) / median(b) - 1 for independent samples (each resampled
    on its own). None unless both have 2 values."""
    if len(a) < 2 or len(b) < 2:
        return None
    return _bootstrap((np.asarray(a, float), np.asarray(b, float)), _median_ratio,
                      paired=False, level=level, resamples=resamples, seed=seed)


# -- comparing two treatments: the ratio, on the log scale ----------------------------

@dataclass(frozen=True)
class RatioTest:
    """a against b as a ratio: `ratio` = exp(mean of log a - mean of log b), or of
    the mean within-round log ratio when `paired`. One t statistic gives the
    interval (`interval(level)`) and the two-sided p of "ratio = 1", so they agree."""
    log_ratio: float
    se: float                 # standard error of log_ratio (0: every value agrees)
    df: float | None          # t degrees of freedom (None: se is 0)
    p: float                  # two-sided
    paired: bool
    n_a: int
    n_b: int
    n_pairs: int              # rounds both were measured in (paired), else 0

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    @property
    def test(self) -> str:
        return (f"paired t on log ratios, {self.n_pairs} rounds" if self.paired
                else f"Welch t on logs, {self.n_a} and {self.n_b} trials")

    def interval(self, level: float = LEVEL) -> Interval:
        """The ratio's two-sided t interval at `level`."""
        if self.se == 0 or self.df is None:
            return Interval(self.ratio, self.ratio, level)
        half = float(sps.t.ppf(0.5 + level / 2, self.df)) * self.se
        return Interval(math.exp(self.log_ratio - half), math.exp(self.log_ratio + half),
                        level)


def _by_round(values: Sequence[float], rounds: Sequence) -> dict:
    """Round -> mean log of the values measured in it."""
    logs: dict = {}
    for v, r in zip(values, rounds):
        logs.setdefault(r, []).append(math.log(v))
    return {r: sum(x) / len(x) for r, x in logs.items()}


def log_ratio(a: Sequence[float], b: Sequence[float], a_rounds: Sequence | None = None,
              b_rounds: Sequence | None = None) -> RatioTest | None:
    """a against b on the log scale. Paired by round when both carry rounds and
    share at least 2 (a one-sample t on the within-round log ratios, over the
    shared rounds); otherwise Welch's t on the logs (Welch-Satterthwaite degrees of
    freedom). None when a value is not positive (no log: a rate of 0) or there are
    too few: 2 shared rounds, or 2 values a side."""
    if any(not (x > 0) for x in (*a, *b)):
        return None
    if a_rounds is not None and b_rounds is not None:
        ra, rb = _by_round(a, a_rounds), _by_round(b, b_rounds)
        shared = sorted(set(ra) & set(rb), key=str)
        if len(shared) >= 2:
            d = [ra[r] - rb[r] for r in shared]
            n = len(d)
            mean = statistics.fmean(d)
            se = statistics.stdev(d) / math.sqrt(n)
            return _t(mean, se, n - 1, True, len(a), len(b), n)
    if len(a) < 2 or len(b) < 2:
        return None
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va ** 2 / (len(la) - 1) if va else 0) +
                          (vb ** 2 / (len(lb) - 1) if vb else 0)) if se else None
    return _t(statistics.fmean(la) - statistics.fmean(lb), se, df, False, len(a),
              len(b), 0)


def _t(mean: float, se: float, df: float | None, paired: bool, n_a: int, n_b: int,
       n_pairs: int) -> RatioTest:
    if se == 0 or not df:   # every value agrees: certain, either way
        return RatioTest(mean, 0.0, None, 1.0 if mean == 0 else 0.0, paired, n_a, n_b,
                         n_pairs)
    p = float(2 * sps.t.sf(abs(mean) / se, df))
    return RatioTest(mean, se, float(df), p, paired, n_a, n_b, n_pairs)


@dataclass(frozen=True)
class HolmVerdict:
    rejected: bool      # a difference, at the family's level
    alpha: float        # the level its own step of Holm's procedure tested it at
    p_adjusted: float   # Holm's adjusted p-value


def holm_levels(pvalues: Sequence[float | None],
                alpha: float = 0.05) -> list[HolmVerdict | None]:
    """Holm's step-down procedure over a family, keeping for each p-value the level
    it was tested at: the k-th smallest against alpha / (m - k + 1), in order,
    until the first that is not below its level; that one and every later one are
    not rejected, all at that step's level. An interval printed at 1 - that level
    then excludes 1 exactly for the rejected: the verdict and the interval beside
    it are one decision. None entries stay None."""
    idx = sorted((i for i, p in enumerate(pvalues) if p is not None),
                 key=lambda i: pvalues[i])
    m = len(idx)
    adjusted = holm(pvalues)
    out: list[HolmVerdict | None] = [None] * len(pvalues)
    stop = None
    for k, i in enumerate(idx):
        level = alpha / (m - k)
        if stop is None and pvalues[i] > level:
            stop = level
        out[i] = HolmVerdict(stop is None, level if stop is None else stop, adjusted[i])
    return out


# -- the seeds' tests (shown beside, deciding nothing) --------------------------------

@dataclass(frozen=True)
class TestResult:
    statistic: float
    p: float
    test: str          # "welch" | "mann-whitney"
    alternative: str   # "two-sided" | "less" | "greater" (a compared with b)
    df: float | None = None


def welch(a: Sequence[float], b: Sequence[float]) -> TestResult | None:
    """Two-tailed Welch t-test (unequal variances): seed 000's
    t = (mean_a - mean_b) / sqrt(s_a^2/n_a + s_b^2/n_b), with Welch-Satterthwaite
    degrees of freedom. None with fewer than 2 values a side or no variance at all."""
    if len(a) < 2 or len(b) < 2:
        return None
    with warnings.catch_warnings():  # nearly equal samples: scipy warns, p is still right
        warnings.simplefilter("ignore", RuntimeWarning)
        r = sps.ttest_ind(a, b, equal_var=False)
    if not math.isfinite(r.pvalue):
        return None
    return TestResult(float(r.statistic), float(r.pvalue), "welch", "two-sided",
                      float(r.df))


def mann_whitney(a: Sequence[float], b: Sequence[float],
                 alternative: str = "two-sided") -> TestResult | None:
    """Mann-Whitney U of a against b ("less": a tends to be smaller). The exact
    distribution for small samples without ties, the normal approximation otherwise
    (scipy's "auto"). The statistic is U of a. None when either side is empty."""
    if not len(a) or not len(b):
        return None
    r = sps.mannwhitneyu(a, b, alternative=alternative, method="auto")
    return TestResult(float(r.statistic), float(r.pvalue), "mann-whitney", alternative)


def cliffs_delta(a: Sequence[float], b: Sequence[float]) -> float | None:
    """P(a > b) - P(a < b) over all pairs, in -1..1: the effect size that goes with
    Mann-Whitney (delta = 2U/(n_a n_b) - 1). None when either side is empty."""
    if not len(a) or not len(b):
        return None
    u = sps.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic").statistic
    return float(2 * u / (len(a) * len(b)) - 1)


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (family-wise error), in the input order.
    None entries (no test possible) stay None and do not count in the family.
    scipy has Benjamini-Hochberg (false_discovery_control) but not Holm."""
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    m = len(idx)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


# -- the per-packet cost model --------------------------------------------------------

@dataclass(frozen=True)
class CostFit:
    """`1/pps = a + b*N` over every trial: `a` the per-packet time with no rule
    traversed (the testbed and the backend's fixed cost), `b` what each rule adds."""
    a_ns: float
    b_ns: float                    # ns per rule per packet
    a_interval: Interval
    b_interval: Interval
    r_squared: float
    points: int
    rules_min: int
    rules_max: int

    def at(self, rules: float) -> float:
        """Predicted ns per packet."""
        return self.a_ns + self.b_ns * rules


def fit_cost(points: Sequence[tuple[int, float]], level: float = LEVEL) -> CostFit | None:
    """Fit 1/pps (ns) = a + b*N over (N, pps) points, with t intervals for slope and
    intercept. None unless there are at least 3 points over at least 2 distinct rule
    counts. With GROUP_MIN replicates at every rule count, each rule count is weighed
    by its own scatter (`_fit_by_groups`); otherwise as follows.

    Weighted least squares with the noise taken as relative (sigma proportional to the
    fitted time per packet): a packet that takes 40 us varies by microseconds where
    one that takes 1 us varies by tens of ns, and ordinary least squares, which
    assumes equal noise, gave intervals that covered the true slope only ~82 % of the
    time at a nominal 95 % (tests/unit/test_stats.py measures the coverage)."""
    pts = [(n, p) for n, p in points if p and p > 0]
    xs = np.array([n for n, _ in pts], dtype=float)
    if len(pts) < 3 or len(set(xs)) < 2:
        return None
    ys = np.array([1e9 / p for _, p in pts])
    groups = {n: ys[xs == n] for n in np.unique(xs)}
    if all(len(g) >= GROUP_MIN for g in groups.values()):
        return _fit_by_groups(xs, ys, groups, level)
    ols = sps.linregress(xs, ys)
    guess = np.maximum(ols.intercept + ols.slope * xs, ys.min() / 10)
    with warnings.catch_warnings():  # exact data: covariance 0, scipy warns
        warnings.simplefilter("ignore")
        (a, b), cov = optimize.curve_fit(lambda x, a, b: a + b * x, xs, ys,
                                p0=(ols.intercept, ols.slope), sigma=guess,
                                absolute_sigma=False)
    se_a, se_b = (float(math.sqrt(max(v, 0.0))) if math.isfinite(v) else 0.0
                  for v in np.diag(cov))
    t = float(sps.t.ppf(0.5 + level / 2, len(pts) - 2))
    return CostFit(
        a_ns=float(a), b_ns=float(b),
        a_interval=Interval(float(a - t * se_a), float(a + t * se_a), level),
        b_interval=Interval(float(b - t * se_b), float(b + t * se_b), level),
        r_squared=float(ols.rvalue ** 2), points=len(pts),
        rules_min=int(xs.min()), rules_max=int(xs.max()))


# Replicates per rule count from which the fit weighs each rule count by its own scatter.
GROUP_MIN = 3


def _fit_by_groups(xs: np.ndarray, ys: np.ndarray, groups: dict[float, np.ndarray],
                   level: float) -> CostFit:
    """The line through the rule counts' mean times, each weighted by its variance of
    the mean (s²/n), with Welch-Satterthwaite degrees of freedom for each interval.

    On a shared machine the noise is neither equal nor proportional across rule counts:
    near the sender's ceiling (few rules) a trial varies by 15-20 %, through 10,000
    rules by 2-4 %. Weighing each rule count by what its own replicates show lets the
    steady points carry the slope instead of inflating its interval with the others'
    scatter; a line's coefficients are then linear combinations of independent group
    means, whose variance and degrees of freedom Welch's method gives."""
    ns = np.array(list(groups))
    k = np.array([len(g) for g in groups.values()], dtype=float)
    means = np.array([g.mean() for g in groups.values()])
    # A group of identical values would get infinite weight; floor its variance.
    var = np.array([max(g.var(ddof=1), (1e-9 * g.mean()) ** 2) for g in groups.values()])
    vmean = var / k
    # The weights: each group's variance shrunk halfway to the pooled relative one, as
    # a variance from 3-6 trials is itself noisy (plain plug-in weights covered the true
    # slope 81 % of the time at 95 % with 3 trials per rule count; shrunk, 90-94 %).
    pooled = ((var / means ** 2) * (k - 1)).sum() / (k - 1).sum()
    w = 1 / ((var / 2 + pooled * means ** 2 / 2) / k)
    xbar = (w * ns).sum() / w.sum()
    sxx = (w * (ns - xbar) ** 2).sum()
    cb = w * (ns - xbar) / sxx                      # b = sum(cb * means)
    ca = w / w.sum() - xbar * cb                    # a = sum(ca * means)
    b, a = float((cb * means).sum()), float((ca * means).sum())

    def interval(c: np.ndarray, est: float) -> Interval:
        terms = c ** 2 * vmean                      # each group's own variance of its mean
        se = math.sqrt(terms.sum())
        df = terms.sum() ** 2 / (terms ** 2 / (k - 1)).sum() if se > 0 else float("inf")
        t = float(sps.t.ppf(0.5 + level / 2, df))
        return Interval(est - t * se, est + t * se, level)

    ols = sps.linregress(xs, ys)
    return CostFit(a_ns=a, b_ns=b, a_interval=interval(ca, a), b_interval=interval(cb, b),
                   r_squared=float(ols.rvalue ** 2), points=len(xs),
                   rules_min=int(xs.min()), rules_max=int(xs.max()))


@dataclass(frozen=True)
class Crossover:
    rules: float                 # N where both cost the same per packet
    interval: Interval | None    # bootstrap; None when too many resamples had no crossing
    inside: bool                 # within the rule counts both backends were measured at


def _line(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intercept and slope along the last axis (vectorised), weighted by 1/y^2: the
    relative-noise model of `fit_cost`, with the observed time standing in for the
    fitted one."""
    w = 1 / ys ** 2
    mx = (w * xs).sum(-1, keepdims=True) / w.sum(-1, keepdims=True)
    my = (w * ys).sum(-1, keepdims=True) / w.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        b = (w * (xs - mx) * (ys - my)).sum(-1) / (w * (xs - mx) ** 2).sum(-1)
    return my[..., 0] - b * mx[..., 0], b


def _resample_within_groups(xs: np.ndarray, rng, resamples: int) -> np.ndarray:
    """Indices resampling the points of each rule count among themselves, so every
    resample keeps the design (the same rule counts, as often)."""
    out = np.empty((resamples, len(xs)), dtype=int)
    for n in np.unique(xs):
        where = np.flatnonzero(xs == n)
        out[:, where] = rng.choice(where, size=(resamples, len(where)))
    return out


def crossover(p1: Sequence[tuple[int, float]], p2: Sequence[tuple[int, float]],
              level: float = LEVEL, resamples: int = 4000, seed: int = 1) -> Crossover | None:
    """The rule count where the two fitted lines meet, if they meet at N > 0: below it
    one backend is cheaper, above it the other. The interval is a percentile bootstrap
    resampling trials within each rule count; None if fewer than `level` of the
    resamples cross at all (the crossing is then not established)."""
    f1, f2 = fit_cost(p1), fit_cost(p2)
    if f1 is None or f2 is None or f1.b_ns == f2.b_ns:
        return None
    n_star = (f2.a_ns - f1.a_ns) / (f1.b_ns - f2.b_ns)
    if not n_star > 0:
        return None
    rng = np.random.default_rng(seed)
    fits = []
    for pts in (p1, p2):
        xs = np.array([n for n, p in pts if p and p > 0], dtype=float)
        ys = np.array([1e9 / p for _, p in pts if p and p > 0])
        pick = _resample_within_groups(xs, rng, resamples)
        fits.append(_line(xs[pick], ys[pick]))
    (a1, b1), (a2, b2) = fits
    with np.errstate(invalid="ignore", divide="ignore"):
        ns = (a2 - a1) / (b1 - b2)
    ns = ns[np.isfinite(ns) & (ns > 0)]
    interval = None
    if len(ns) >= level * resamples:
        lo, hi = np.quantile(ns, [0.5 - level / 2, 0.5 + level / 2])
        interval = Interval(float(lo), float(hi), level)
    inside = max(f1.rules_min, f2.rules_min) <= n_star <= min(f1.rules_max, f2.rules_max)
    return Crossover(float(n_star), interval, inside)
