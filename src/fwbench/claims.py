"""How a study's claim is decided: the claim's rule, written down with it, applied
to a ratio estimated on the log scale.

Every claim of the five studies compares two things as a ratio (a rate, a round
trip, a degradation point, a slope against the seed's). A claim says one of three
things about that ratio, and its `Rule` says which and with what margin:

- **a direction** ("nftables forwards less than iptables"): the ratio is below 1
  (or above). Holds when a one-sided test at ALPHA shows it, does not hold when
  the one-sided test shows the other direction. Where the seed gave the change a
  size, the rule also carries the least change the claim means (`least`: half
  the seed's change, as for a size below), and the claim does not hold when the
  one-sided test shows the ratio short of that: a direction with no size to it is
  not the seed's finding, and a claim whose truth is "no change" is then decided
  instead of staying open however many trials are run. The two verdicts are each
  one-sided tests at ALPHA of hypotheses that cannot both be false, so each keeps
  its error at ALPHA; where both reject (a change shown, and shown smaller than
  the least), the claim as worded, a direction, holds.
- **an equivalence** ("about the same", "flat"): the ratio lies within a margin of
  1 written with the claim (10 %: 0.90x..1.10x). Two one-sided tests (TOST) at
  ALPHA: holds when both reject, i.e. the 1 - 2 ALPHA interval lies inside the
  margin (an end exactly on it counts as inside); does not hold when the interval
  lies wholly outside it (the one-sided test that the ratio is beyond the margin
  rejects).
- **a size** ("about 20 % faster"): the direction, and the size separately, against
  the range of ratios written with the claim as "about" it (half the claimed change
  either way: +10..+30 % for "about 20 %"). Holds when both hold; does not hold when
  either does not ("direction holds, size does not hold").

Every verdict is a one-sided test at ALPHA, so the interval printed beside it is
the 1 - 2 ALPHA (90 %) interval, and the verdict can be read off it.

A claim over many cells is decided on one estimate across them (`pooled`: the mean
of the cells' log ratios, its standard error from the cells' own, as the average
over exactly the design's cells), or, where the claim
says "at every frame size" or "in every flow", by `every`: it holds when every
part holds at ALPHA (an intersection-union test needs no correction), and does not
hold when some part does not hold at its Holm level across the parts (so one part
among many contradicting by chance does not decide it).

A claim not decided says what it would need (`need`): the half-width that would
decide it, and about how many trials a cell that takes if the interval narrows as
one over the square root of the trials.

Pure functions of numbers: the studies' reports build the estimates, this decides.
"""
from __future__ import annotations

import math
import statistics
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Sequence

from fwbench.stats import RatioTest, holm, sps
from fwbench.stats import log_ratio as stats_log_ratio

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
NOT_SHOWN = "not shown"
VERDICTS = (HOLDS, DOES_NOT_HOLD, NOT_SHOWN)

ALPHA = 0.05            # each claim's one-sided tests, at one look
_EPS = 1e-9             # p exactly at alpha, to rounding: an interval's end on a bound
HOPELESS = 20           # `need`: more than this many times the trials is said to be so
_looks: ContextVar[int] = ContextVar("looks", default=1)


@contextmanager
def looks(k: int):
    """Decide as one of at most `k` looks at a study's growing data (a sequential
    study: after its planned rounds, then after each round it adds): every test at
    ALPHA / k, so the chance of any false verdict at any look stays at ALPHA
    (Bonferroni over the looks, the simplest alpha spending)."""
    token = _looks.set(max(1, int(k)))
    try:
        yield
    finally:
        _looks.reset(token)


def alpha() -> float:
    """The level each one-sided test is at now: ALPHA, or ALPHA / looks."""
    return ALPHA / _looks.get()


def level() -> float:
    """The interval printed beside a verdict: 1 - 2 alpha (90 % at one look)."""
    return 1 - 2 * alpha()


def pct(x: float) -> str:
    """A fraction as the reports print it: 0.1 -> '10 %', 0.975 -> '97.5 %'."""
    return f"{100 * x:.3g} %"


def _shown(p: float) -> bool:
    """The claim is shown: p at or below alpha (an interval end exactly on a margin
    counts as inside it)."""
    return p <= alpha() * (1 + _EPS)


def _refuted(p: float) -> bool:
    """The claim is shown false: p strictly below alpha (an interval touching the
    margin is not wholly beyond it)."""
    return p < alpha() * (1 - _EPS)


@dataclass(frozen=True)
class Estimate:
    """A ratio on the log scale: log(ratio), its standard error and t degrees of
    freedom (se 0: known exactly; df None then), and how it was had."""
    log: float
    se: float
    df: float | None
    how: str
    trials: int = 0     # trials a cell behind it (0: not counted)
    cells: int = 1

    @property
    def ratio(self) -> float:
        return math.exp(self.log)

    def half_width(self, at: float) -> float:
        """Half the two-sided t interval at level `at`, on the log scale."""
        return 0.0 if self.se == 0 or self.df is None else \
            float(sps.t.ppf(0.5 + at / 2, self.df)) * self.se

    def interval(self, at: float | None = None) -> tuple[float, float]:
        """The interval at `at` (None: the verdicts' own, `level()`)."""
        q = self.half_width(level() if at is None else at)
        return math.exp(self.log - q), math.exp(self.log + q)

    def p_above(self, log_bound: float) -> float:
        """One-sided p of "the log ratio is at most log_bound" (small: it is above)."""
        if self.se == 0 or self.df is None:
            return 0.0 if self.log > log_bound else 1.0
        return float(sps.t.sf((self.log - log_bound) / self.se, self.df))

    def p_below(self, log_bound: float) -> float:
        """One-sided p of "the log ratio is at least log_bound" (small: it is below)."""
        if self.se == 0 or self.df is None:
            return 0.0 if self.log < log_bound else 1.0
        return float(sps.t.sf((log_bound - self.log) / self.se, self.df))

    @classmethod
    def of(cls, t: RatioTest, trials: int | None = None) -> Estimate:
        """A comparison's test (stats.log_ratio) as an estimate."""
        return cls(t.log_ratio, t.se, t.df, t.test,
                   trials if trials is not None else min(t.n_a, t.n_b))


def pooled(parts: Sequence[Estimate], what: str = "cells") -> Estimate | None:
    """One estimate across cells: the mean of their log ratios (a geometric mean
    ratio), with the standard error of that mean from each cell's own
    (sqrt(sum se^2) / cells; Welch-Satterthwaite degrees of freedom). A study's
    cells are its design's fixed points, not a sample of cells: the claim is about
    the average over exactly these, so the uncertainty is the cells' own and their
    true differences are not noise (their span is shown beside). One cell: its own
    estimate. None: no cell."""
    parts = list(parts)
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    k = len(parts)
    var = sum(p.se ** 2 for p in parts)
    se = math.sqrt(var) / k
    if se == 0:
        df = None
    else:
        den = sum(p.se ** 4 / p.df for p in parts if p.se and p.df)
        df = var ** 2 / den if den else None
    return Estimate(statistics.fmean(p.log for p in parts), se, df,
                    f"mean over {k} {what}", min(p.trials for p in parts), k)


def contrast(a: Estimate, b: Estimate, how: str = "") -> Estimate:
    """a's ratio over b's (a ratio of ratios): the logs' difference, its standard
    error from both, Welch-Satterthwaite degrees of freedom."""
    va, vb = a.se ** 2, b.se ** 2
    se = math.sqrt(va + vb)
    if se == 0:
        df = None
    else:
        den = sum(v ** 2 / d for v, d in ((va, a.df), (vb, b.df)) if v and d)
        df = (va + vb) ** 2 / den if den else None
    return Estimate(a.log - b.log, se, df, how or "difference of two log ratios",
                    min(a.trials, b.trials), a.cells + b.cells)


def fmt_bound(r: float) -> str:
    """A rule's bound: as fmt_ratio, but to four places within 1 % of 1 (0.9992x),
    where two would print 1.00x."""
    return f"{r:.4f}x" if r != 1 and abs(r - 1) < 0.01 else fmt_ratio(r)


@dataclass(frozen=True)
class Rule:
    """What a claim says of its ratio. kind: "above" / "below" (a direction, with
    `least` the smallest change it means, a ratio on its side of 1, or None),
    "equal" (within `margin` of 1), "about" (the direction of `size`, and a ratio
    within `size`, the range that counts as the claimed size)."""
    kind: str
    margin: float = 0.0
    size: tuple[float, float] | None = None
    least: float | None = None

    def __post_init__(self):
        if self.kind not in ("above", "below", "equal", "about"):
            raise ValueError(f"unknown rule {self.kind!r}")
        if self.kind == "equal" and not 0 < self.margin < 1:
            raise ValueError("an equivalence needs a margin between 0 and 1")
        if self.kind == "about" and not (self.size and 0 < self.size[0] < self.size[1]
                                         and not self.size[0] < 1 < self.size[1]):
            raise ValueError("a size is a range of ratios on one side of 1")
        if self.least is not None and not (
                self.kind == "above" and self.least > 1
                or self.kind == "below" and 0 < self.least < 1):
            raise ValueError("a least change is a ratio on the claimed side of 1, "
                             "for a direction")

    @property
    def text(self) -> str:
        """The margin or threshold, as the findings table states it."""
        if self.kind in ("above", "below"):
            said = f"ratio {self.kind} 1"
            if self.least is not None:
                said += f"; short of {fmt_bound(self.least)} does not hold"
            return said + " (one-sided, 5 %)"
        if self.kind == "equal":
            return f"within ±{pct(self.margin)} (TOST, 5 %)"
        lo, hi = self.size
        return f"{fmt_ratio(lo)}..{fmt_ratio(hi)} and its direction (one-sided, 5 %)"

    @property
    def bounds(self) -> tuple[float, float]:
        """The ratios that count as the claim's: the margin's or the size's range."""
        return (1 - self.margin, 1 + self.margin) if self.kind == "equal" else self.size

    @property
    def upward(self) -> bool:
        return self.kind == "above" or (self.kind == "about" and self.size[0] > 1)


def fmt_ratio(r: float) -> str:
    """A ratio as the tables print it: 0.93x, 3.0x, 12x."""
    if r == math.inf:
        return "inf"
    return f"{r:.2f}x" if r < 2 else f"{r:.1f}x" if r < 10 else f"{r:.0f}x"


def show(est: Estimate) -> str:
    """'0.31x [0.25, 0.38] (90 %)': at the verdicts' own level."""
    lo, hi = est.interval()
    return f"{fmt_ratio(est.ratio)} [{fmt_ratio(lo)[:-1]}, {fmt_ratio(hi)[:-1]}] ({pct(level())})"


def p_holds(rule: Rule, est: Estimate) -> float:
    """The one-sided (TOST: the larger of two) p-value whose rejection at ALPHA
    shows the claim."""
    if rule.kind == "above":
        return est.p_above(0.0)
    if rule.kind == "below":
        return est.p_below(0.0)
    lo, hi = rule.bounds
    return max(est.p_above(math.log(lo)), est.p_below(math.log(hi)))


def p_fails(rule: Rule, est: Estimate) -> float:
    """The one-sided p-value whose rejection at ALPHA shows the claim false: the
    other direction, the ratio beyond the margin, or outside the size (either
    way)."""
    if rule.kind in ("above", "below"):
        # Short of the least change (with none: of any change, the other way).
        bound = 0.0 if rule.least is None else math.log(rule.least)
        return est.p_below(bound) if rule.kind == "above" else est.p_above(bound)
    lo, hi = rule.bounds
    # Either side: the two events are disjoint wherever the truth lies inside, so
    # the smaller p keeps the error at ALPHA (the interval lies wholly beyond one).
    return min(est.p_below(math.log(lo)), est.p_above(math.log(hi)))


@dataclass(frozen=True)
class Decision:
    verdict: str
    why: str


def decide(rule: Rule, est: Estimate | None) -> Decision:
    """The claim's verdict on one estimate, with why in a phrase."""
    if est is None:
        return Decision(NOT_SHOWN, "too few trials for an estimate")
    if rule.kind == "about":
        return _about(rule, est)
    if _shown(p_holds(rule, est)):
        return Decision(HOLDS, _said(rule, est, True))
    if _refuted(p_fails(rule, est)):
        return Decision(DOES_NOT_HOLD, _said(rule, est, False))
    return Decision(NOT_SHOWN, _said(rule, est, None))


def _said(rule: Rule, est: Estimate, held: bool | None) -> str:
    if rule.kind in ("above", "below"):
        side = "above" if rule.kind == "above" else "below"
        other = "below" if side == "above" else "above"
        iv = f"the {pct(level())} interval"
        lo, hi = est.interval()
        the_other_way = lo > 1 if rule.kind == "below" else hi < 1
        short = "" if rule.least is None else f"{fmt_bound(rule.least)}, "
        return {True: f"{iv} lies {side} 1",
                False: f"{iv} lies {other} 1: the other way" if the_other_way else
                f"{iv} lies {other} {short}the least change the claim means "
                f"(half the seed's)",
                None: f"{iv} holds 1" if rule.least is None else
                f"{iv} holds 1 and reaches past {fmt_bound(rule.least)}, the least "
                f"change the claim means"}[held]
    m = f"±{pct(rule.margin)}"
    iv = f"the {pct(level())} interval"
    return {True: f"{iv} lies within {m}",
            False: f"{iv} lies wholly beyond {m}",
            None: f"{iv} reaches past {m}"}[held]


def _about(rule: Rule, est: Estimate) -> Decision:
    way = Rule("above" if rule.upward else "below")
    d = DOES_NOT_HOLD if _refuted(p_fails(way, est)) else \
        HOLDS if _shown(p_holds(way, est)) else NOT_SHOWN
    s = HOLDS if _shown(p_holds(rule, est)) else \
        DOES_NOT_HOLD if _refuted(p_fails(rule, est)) else NOT_SHOWN
    lo, hi = rule.size
    said = f"direction {d}, size {s} (the {pct(level())} interval "
    said += f"against {fmt_ratio(lo)}..{fmt_ratio(hi)})"
    if d == DOES_NOT_HOLD or s == DOES_NOT_HOLD:
        return Decision(DOES_NOT_HOLD, said)
    if d == HOLDS and s == HOLDS:
        return Decision(HOLDS, said)
    return Decision(NOT_SHOWN, said)


def every(rule: Rule, parts: dict[str, Estimate | None], what: str) -> Decision:
    """A claim of every part ("at every frame size"): holds when every part's claim
    holds at ALPHA (intersection-union); does not hold when some part's fails at
    its Holm level across the parts; else not shown. `what` names a part
    ("frame sizes")."""
    got = {k: e for k, e in parts.items() if e is not None}
    if not got:
        return Decision(NOT_SHOWN, f"no {what} with an estimate")
    keys = list(got)
    failing = holm([p_fails(rule, got[k]) for k in keys])
    # A part shown as claimed is not against it, even where it is also shown short
    # of the least change (decide: the direction, as worded, holds).
    against = [k for k, p in zip(keys, failing) if p is not None and _refuted(p)
               and not _shown(p_holds(rule, got[k]))]
    if against:
        return Decision(DOES_NOT_HOLD, f"fails in {', '.join(against)} (Holm across "
                                       f"{len(keys)} {what})")
    held = [k for k in keys if decide(rule, got[k]).verdict == HOLDS]
    missing = [k for k, e in parts.items() if e is None]
    if len(held) == len(keys) and not missing:
        return Decision(HOLDS, f"holds in every one of {len(keys)} {what} at 5 % "
                               f"(intersection-union)")
    open_ = [k for k in keys if k not in held] + missing
    return Decision(NOT_SHOWN, f"holds in {len(held)} of {len(parts)} {what}; not shown "
                               f"in {', '.join(open_)}")


def trials_needed(rule: Rule, est: Estimate | None) -> float | None:
    """About how many trials a cell would decide a claim not decided, where its
    estimate lies now: the verdicts' interval narrowing as one over the square root
    of the trials until it clears the nearest bound that decides it (inf: the
    estimate lies on that bound). None when nothing can be said (no spread, or the
    interval already clears it)."""
    gap = _gap(rule, est)
    if gap is None:
        return None
    if gap <= 0:
        return math.inf
    half_now = est.half_width(level())
    return None if gap >= half_now else est.trials * (half_now / gap) ** 2


def _gap(rule: Rule, est: Estimate | None) -> float | None:
    """How far (log scale) the estimate lies from the nearest bound deciding it."""
    if est is None or est.se == 0 or est.df is None or not est.trials:
        return None
    bounds = [0.0] if rule.kind in ("above", "below") else \
        [math.log(b) for b in rule.bounds]
    if rule.least is not None:
        bounds.append(math.log(rule.least))
    if rule.kind == "about":
        bounds.append(0.0)
    if rule.kind == "equal":
        # inside: both margins must be cleared; outside: the nearer one.
        inside = bounds[0] < est.log < bounds[1]
        return min(est.log - bounds[0], bounds[1] - est.log) if inside else \
            min(abs(est.log - b) for b in bounds)
    return min(abs(est.log - b) for b in bounds)


def need(rule: Rule, est: Estimate | None, trial_s: float | None = None,
         cells: int | None = None) -> str:
    """What a claim not decided would need: the verdicts' interval's half-width (on the
    log scale, as ±%) that would decide it where the estimate lies now, and about
    how many trials a cell that takes (trials_needed), with the time if a trial's
    seconds and the cells are given. '' when nothing can be said."""
    n = trials_needed(rule, est)
    if n is None:
        return ""
    if n == math.inf:
        return "the estimate lies on the claim's bound: no number of trials decides it"
    n = math.ceil(n)
    closer = math.exp(_gap(rule, est)) - 1
    more = ""
    if trial_s and cells:
        more = f" (~{max(1, round((n - est.trials) * cells * trial_s / 60))} min more)"
    said = f"needs ±{100 * closer:.2g} %: about {n} trials a cell{more}"
    if n > HOPELESS * est.trials:
        said += ("; the estimate lies so near the claim's bound that more trials are "
                 "unlikely to decide it")
    return said


def estimate(a: Sequence[float], b: Sequence[float], a_rounds: Sequence | None = None,
             b_rounds: Sequence | None = None) -> Estimate | None:
    """a over b (stats.log_ratio: paired by round where both share two rounds, else
    Welch on the logs) as an estimate; None with too few values or one not positive."""
    t = stats_log_ratio(a, b, a_rounds, b_rounds)
    return Estimate.of(t) if t is not None else None


def decide_range(rule: Rule, lo: float, hi: float) -> Decision:
    """The claim's verdict on a range known to hold the ratio (not an interval of a
    test: a bracket search's range, with 0 or inf where a bracket is open)."""
    if rule.kind == "about":
        way = decide_range(Rule("above" if rule.upward else "below"), lo, hi).verdict
        a, b = rule.size
        size = HOLDS if a <= lo and hi <= b else DOES_NOT_HOLD if hi < a or lo > b \
            else NOT_SHOWN
        said = f"direction {way}, size {size} (the range against {fmt_ratio(a)}..{fmt_ratio(b)})"
        v = DOES_NOT_HOLD if DOES_NOT_HOLD in (way, size) else \
            HOLDS if way == size == HOLDS else NOT_SHOWN
        return Decision(v, said)
    if rule.kind == "equal":
        a, b = rule.bounds
        v = HOLDS if a <= lo and hi <= b else DOES_NOT_HOLD if hi < a or lo > b \
            else NOT_SHOWN
        return Decision(v, {HOLDS: f"the range lies within ±{pct(rule.margin)}",
                            DOES_NOT_HOLD: f"the range lies wholly beyond ±{pct(rule.margin)}",
                            NOT_SHOWN: f"the range reaches past ±{pct(rule.margin)}"}[v])
    up = rule.kind == "above"
    short = 1.0 if rule.least is None else rule.least
    v = HOLDS if (lo > 1 if up else hi < 1) else \
        DOES_NOT_HOLD if (hi < short if up else lo > short) else NOT_SHOWN
    return Decision(v, {HOLDS: f"the range lies {rule.kind} 1",
                        DOES_NOT_HOLD: "the range lies on the other side of 1"
                        if rule.least is None else f"the range lies short of "
                        f"{fmt_bound(rule.least)}, the least change the claim means",
                        NOT_SHOWN: "the range holds 1"}[v])
