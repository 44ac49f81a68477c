"""Throughput search after MLRsearch: NDR and PDR bounds from one series of trials.

The semantics follow the IETF BMWG draft "Multiple Loss Ratio Search" and FD.io CSIT's
implementation of it (no code is taken from either):

- A *goal* is a loss ratio (0 for NDR, e.g. 0.005 for PDR) plus the exceed ratio,
  final trial duration, duration sum and relative width shared by all goals here.
- Every trial serves every goal: a trial is *high-loss* for a goal when its loss ratio
  exceeds the goal's. Per goal, a load is classified from all trials measured at it
  (`classify_load`): an *upper bound* once more than `exceed_ratio` of the duration
  sum is high-loss whatever later trials show, a *lower bound* once enough full-length
  low-loss time is in that it can no longer become an upper bound, else undecided.
- The answer per goal is a pair of *relevant* bounds: the smallest upper bound, and the
  largest lower bound below it. The search stops when they are `relative_width` apart.

How the search spends its time (`search`): a discarded warm-up at max load; short
trials first, to narrow each goal's interval to a few widths cheaply (a "short" phase
with its own, proportionally smaller duration sum); then full-length trials near the
answer (the "final" phase). It starts at max load and jumps to the forwarded rate
measured there, as CSIT does, since a saturated device forwards about its capacity.
From there it expands or contracts geometrically from the nearer bound, and bisects.

Trials whose sender fell short of its offered load measured the generator: they are
kept in the record, flagged, never used as a bound, and the rate the sender did reach
becomes the ceiling for further loads (DESIGN.md: "flag any trial whose generator did
not reach its offered load").
"""
from __future__ import annotations

import enum
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Callable, Iterable

from fwbench.errors import FwbenchError
from fwbench.measurer import Measurer, TrialResult

# The short phase stops at this many final widths: close enough that a few full-length
# bisections finish the job, wide enough that short trials' optimism does no harm.
SHORT_PHASE_WIDTH_FACTOR = 4.0
# After a sender falls short, further loads stay this far below what it reached, so the
# next trial at the ceiling is not short again by a hair.
CEILING_MARGIN = 0.99
# Loads are rounded to this many decimals, so "the same load" is the same dict key.
_LOAD_DECIMALS = 3
# Steps aim a hair inside the width, so rounding never costs an extra trial.
_AIM = 1 - 1e-3
_EPS = 1e-9

OnTrial = Callable[[int, dict], None]


def _config_error(name: str, value: object, must: str) -> FwbenchError:
    return FwbenchError(f"search config: {name} = {value!r}: {must}")


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise _config_error(name, value, "must be a finite number")
    return float(value)


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """What one search looks for and how long it may measure. Validated on creation."""

    max_load_pps: float
    """Top of the search range, packets per second; typically the no-firewall ceiling
    measured just before. The warm-up and the first trial run here."""
    min_load_pps: float = 1_000.0
    """Bottom of the search range. Loss here ends the search with no lower bound."""
    loss_ratios: tuple[float, ...] = (0.0, 0.005)
    """One goal per loss ratio, in [0, 1): 0 is NDR, 0.005 is PDR 0.5 %. Kept sorted."""
    exceed_ratio: float = 0.5
    """Share of the duration sum that may be high-loss at a lower bound, in [0, 1).
    0.5 lets a minority of unlucky trials at a load be outvoted; 0 is RFC 2544."""
    final_trial_duration_s: float = 1.0
    """Duration of full-length trials, the only ones that can make a lower bound."""
    duration_sum_s: float | None = None
    """Trial time per load needed to decide it; None means 3 x the final duration, so
    with exceed ratio 0.5 a load is decided by the best two of at most three trials."""
    initial_trial_duration_s: float = 0.2
    """Duration of the short trials that narrow the interval first. Equal to the final
    duration means no short phase."""
    relative_width: float = 0.01
    """The search stops when (upper - lower) / upper is at most this, for every goal."""
    warmup_duration_s: float = 1.0
    """A first trial at max load, recorded but never used as a bound (0: none)."""
    max_trials: int = 100
    """Safety cap on the number of trials, warm-up included; hitting it leaves the
    search unfinished, with the bounds found so far."""

    def __post_init__(self) -> None:
        ratios = self.loss_ratios
        if isinstance(ratios, (str, bytes)) or not isinstance(ratios, (tuple, list)) \
                or not ratios:
            raise _config_error("loss_ratios", ratios, "must be a non-empty list of ratios")
        values = [_number("loss_ratios", r) for r in ratios]
        for r in values:
            if not 0 <= r < 1:
                raise _config_error("loss_ratios", ratios, f"{r} is outside [0, 1)")
        if len(set(values)) != len(values):
            raise _config_error("loss_ratios", ratios, "has duplicates")
        self._set("loss_ratios", tuple(sorted(values)))

        exceed = _number("exceed_ratio", self.exceed_ratio)
        if not 0 <= exceed < 1:
            raise _config_error("exceed_ratio", self.exceed_ratio, "must be in [0, 1)")
        self._set("exceed_ratio", exceed)

        self._positive("final_trial_duration_s", "initial_trial_duration_s",
                       "min_load_pps", "max_load_pps")
        if self.initial_trial_duration_s > self.final_trial_duration_s:
            raise _config_error("initial_trial_duration_s", self.initial_trial_duration_s,
                                f"must not exceed final_trial_duration_s "
                                f"({self.final_trial_duration_s})")
        if self.duration_sum_s is None:
            self._set("duration_sum_s", 3 * self.final_trial_duration_s)
        total = _number("duration_sum_s", self.duration_sum_s)
        if total < self.final_trial_duration_s:
            raise _config_error("duration_sum_s", total, f"must be at least "
                                f"final_trial_duration_s ({self.final_trial_duration_s})")
        self._set("duration_sum_s", total)

        width = _number("relative_width", self.relative_width)
        if not 0 < width < 1:
            raise _config_error("relative_width", width, "must be in (0, 1)")
        self._set("relative_width", width)

        if self.min_load_pps >= self.max_load_pps:
            raise _config_error("min_load_pps", self.min_load_pps,
                                f"must be below max_load_pps ({self.max_load_pps})")

        warmup = _number("warmup_duration_s", self.warmup_duration_s)
        if warmup < 0:
            raise _config_error("warmup_duration_s", warmup, "must be >= 0 (0: no warm-up)")
        self._set("warmup_duration_s", warmup)

        if isinstance(self.max_trials, bool) or not isinstance(self.max_trials, int) \
                or self.max_trials < 1:
            raise _config_error("max_trials", self.max_trials, "must be an integer >= 1")

    def _positive(self, *names: str) -> None:
        for name in names:
            value = _number(name, getattr(self, name))
            if value <= 0:
                raise _config_error(name, value, "must be > 0")
            self._set(name, value)

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)  # normalising a frozen instance

    @classmethod
    def rfc2544_strict(cls, *, max_load_pps: float, min_load_pps: float = 1_000.0,
                       trial_duration_s: float = 60.0, relative_width: float = 0.01,
                       warmup_duration_s: float = 1.0,
                       max_trials: int = 100) -> SearchConfig:
        """RFC 2544 throughput: one full trial per load (60 s by default), no short
        trials, and any lost packet makes the load fail (NDR only, exceed ratio 0)."""
        return cls(max_load_pps=max_load_pps, min_load_pps=min_load_pps,
                   loss_ratios=(0.0,), exceed_ratio=0.0,
                   final_trial_duration_s=trial_duration_s,
                   duration_sum_s=trial_duration_s,
                   initial_trial_duration_s=trial_duration_s,
                   relative_width=relative_width, warmup_duration_s=warmup_duration_s,
                   max_trials=max_trials)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["loss_ratios"] = list(self.loss_ratios)
        return d


class Verdict(enum.Enum):
    """What the trials at one load say about it, for one goal."""

    UPPER = "upper"
    """Too much high-loss time already: no further trial can make it a lower bound."""
    LOWER = "lower"
    """Enough full-length low-loss time: no further trial can make it an upper bound."""
    LEANS_UPPER = "leans-upper"
    """Undecided, but the trials so far exceed the exceed ratio."""
    LEANS_LOWER = "leans-lower"
    """Undecided, but the trials so far stay within the exceed ratio."""
    UNKNOWN = "unknown"
    """No trial here counts for this goal yet (e.g. only short low-loss trials)."""


def classify_load(results: Iterable[TrialResult], *, loss_ratio: float,
                  exceed_ratio: float, trial_duration_s: float,
                  duration_sum_s: float) -> Verdict:
    """Classify one load for one goal from the trials measured at it.

    After the draft's load classification: full-length trials count as they are.
    Short trials may only add to the high-loss side, and only by as much as their
    high-loss time outweighs their low-loss time (weighted by the exceed ratio), so
    short trials can make an upper bound but never a lower one. The duration sum is
    the trial time that decides a load; what is missing of it is assumed high-loss to
    test for a lower bound (pessimistic) and low-loss to test for an upper bound
    (optimistic). Once the sum is reached both tests agree, so every trial counts.
    """
    full_low = full_high = short_low = short_high = 0.0
    for r in results:
        high = r.loss_ratio > loss_ratio
        if r.duration_s >= trial_duration_s * (1 - _EPS):
            if high:
                full_high += r.duration_s
            else:
                full_low += r.duration_s
        elif high:
            short_high += r.duration_s
        else:
            short_low += r.duration_s
    balancing = short_low * exceed_ratio / (1 - exceed_ratio)
    high = full_high + max(0.0, short_high - balancing)
    counted = full_low + high
    whole = max(duration_sum_s, counted)
    missing = max(0.0, duration_sum_s - counted - _EPS * duration_sum_s)
    allowed = exceed_ratio * whole
    if high > allowed + _EPS * whole:
        return Verdict.UPPER
    if high + missing <= allowed + _EPS * whole:
        return Verdict.LOWER
    if counted <= 0:
        return Verdict.UNKNOWN
    return Verdict.LEANS_UPPER if high > exceed_ratio * counted else Verdict.LEANS_LOWER


@dataclass(frozen=True)
class GoalResult:
    """One goal's answer. Loads are offered packets per second."""

    loss_ratio: float
    """The goal's loss ratio: 0 for NDR."""
    exceed_ratio: float
    """The exceed ratio the bounds were classified with."""
    lower_bound_pps: float | None
    """The relevant lower bound: the largest load classified lower below the upper
    bound. This is the throughput to report; None if min_load already lost."""
    upper_bound_pps: float | None
    """The relevant upper bound: the smallest load classified upper. None if no load
    up to max_load (or the generator's ceiling) lost enough."""
    relative_width: float | None
    """(upper - lower) / upper, when both bounds exist."""
    conditional_throughput_pps: float | None
    """Forwarding rate at the lower bound after setting aside the worst exceed-ratio
    share of its full-length trial time (the draft's conditional throughput)."""
    finished: bool
    """True when the bounds are within width or a range end decided the answer."""
    generator_limited: bool
    """True when the answer stops at the sender's ceiling: the generator, not the
    firewall, was the limit, and the real throughput is higher."""
    reason: str
    """One line saying how the goal ended."""

    @property
    def name(self) -> str:
        return "NDR" if self.loss_ratio == 0 else f"PDR {self.loss_ratio * 100:g}%"

    def to_dict(self) -> dict:
        return {"name": self.name, **asdict(self)}


@dataclass(frozen=True)
class SearchResult:
    """Every goal's answer plus every trial, in order, for the record."""

    goals: tuple[GoalResult, ...]
    """One result per loss ratio, in increasing loss ratio."""
    trials: tuple[dict, ...]
    """Every trial: `TrialResult.to_dict()` plus `index`, `phase` (warmup / short /
    final), `discarded` (not counted for any goal), `flag` (None, "warmup" or
    "sender_short"), and `used_as_upper` / `used_as_lower` (the trial counted at a
    load some goal reports as its bound)."""
    total_trial_time_s: float
    """Sum of all trial durations asked for, warm-up included."""
    generator_ceiling_pps: float | None
    """The load the sender could still reach after falling short, or None if it never
    fell short outside the warm-up."""
    config: SearchConfig

    @property
    def finished(self) -> bool:
        return all(g.finished for g in self.goals)

    @property
    def ndr(self) -> GoalResult | None:
        """The goal with loss ratio 0, if searched for."""
        return next((g for g in self.goals if g.loss_ratio == 0), None)

    @property
    def pdr(self) -> GoalResult | None:
        """The goal with the largest nonzero loss ratio, if any."""
        partial = [g for g in self.goals if g.loss_ratio > 0]
        return partial[-1] if partial else None

    def to_dict(self) -> dict:
        return {"method": "mlrsearch", "finished": self.finished,
                "goals": [g.to_dict() for g in self.goals],
                "total_trial_time_s": self.total_trial_time_s,
                "generator_ceiling_pps": self.generator_ceiling_pps,
                "config": self.config.to_dict(), "trials": [dict(t) for t in self.trials]}


@dataclass(frozen=True)
class _Phase:
    """A stage of the search: which trial length counts as full, the time that decides
    a load at that length, and the width to reach before moving on."""

    name: str
    trial_duration_s: float
    duration_sum_s: float
    width: float

    @property
    def log_width(self) -> float:
        """The width as log(upper/lower), so intervals halve and add up exactly."""
        return -math.log1p(-self.width)


def _phases(config: SearchConfig) -> list[_Phase]:
    final = _Phase("final", config.final_trial_duration_s, config.duration_sum_s,
                   config.relative_width)
    if config.initial_trial_duration_s >= config.final_trial_duration_s:
        return [final]
    scale = config.initial_trial_duration_s / config.final_trial_duration_s
    short_width = max(config.relative_width,
                      min(0.5, SHORT_PHASE_WIDTH_FACTOR * config.relative_width))
    short = _Phase("short", config.initial_trial_duration_s,
                   config.duration_sum_s * scale, short_width)
    return [short, final]


@dataclass(frozen=True)
class _Bound:
    load: float
    hard: bool
    """False for a leaning load or one borrowed from the previous phase: it steers
    the search but must be confirmed before the goal can finish."""


def _relevant(verdicts: dict[float, Verdict], hard_only: bool
              ) -> tuple[_Bound | None, _Bound | None]:
    """The smallest upper bound, and the largest lower bound below it."""
    up = {Verdict.UPPER} if hard_only else {Verdict.UPPER, Verdict.LEANS_UPPER}
    down = {Verdict.LOWER} if hard_only else {Verdict.LOWER, Verdict.LEANS_LOWER}
    uppers = [x for x, v in verdicts.items() if v in up]
    upper = min(uppers) if uppers else None
    lowers = [x for x, v in verdicts.items()
              if v in down and (upper is None or x < upper)]
    lower = max(lowers) if lowers else None
    return (None if lower is None else _Bound(lower, verdicts[lower] is Verdict.LOWER),
            None if upper is None else _Bound(upper, verdicts[upper] is Verdict.UPPER))


def _estimate(results: list[TrialResult], loss_ratio: float) -> float:
    """Where a saturated pipe would meet this loss ratio: the forwarded rate measured
    at an overloaded load, scaled up by the loss the goal allows."""
    return statistics.median(r.forwarded_pps for r in results) / (1 - loss_ratio)


class _Run:
    """The mutable side of one search: the trials so far and the sender's ceiling."""

    def __init__(self, measurer: Measurer, config: SearchConfig, on_trial: OnTrial | None):
        self.measurer = measurer
        self.config = config
        self.on_trial = on_trial
        self.records: list[dict] = []
        self.record_loads: list[float] = []
        self.counted: dict[float, list[TrialResult]] = {}
        self.ceiling = config.max_load_pps
        self.total_time_s = 0.0

    def measure(self, load: float, duration_s: float, phase: str) -> None:
        result = self.measurer.measure(duration_s, load)
        flag = None
        if phase == "warmup":
            flag = "warmup"
        elif result.sender_short:
            flag = "sender_short"
            self.ceiling = min(self.ceiling,
                               round(result.achieved_pps * CEILING_MARGIN, _LOAD_DECIMALS))
        else:
            self.counted.setdefault(load, []).append(result)
        record = {**result.to_dict(), "index": len(self.records), "phase": phase,
                  "discarded": flag is not None, "flag": flag}
        self.records.append(record)
        self.record_loads.append(load)
        self.total_time_s += duration_s
        if self.on_trial is not None:
            self.on_trial(record["index"], dict(record))

    def loads(self) -> dict[float, list[TrialResult]]:
        """Counted trials by load, for loads the sender can still reach: above its
        ceiling a load can no longer be confirmed, so it steers nothing."""
        return {x: rs for x, rs in self.counted.items() if x <= self.ceiling * (1 + _EPS)}

    def verdicts(self, loss_ratio: float, phase: _Phase) -> dict[float, Verdict]:
        return {x: classify_load(rs, loss_ratio=loss_ratio,
                                 exceed_ratio=self.config.exceed_ratio,
                                 trial_duration_s=phase.trial_duration_s,
                                 duration_sum_s=phase.duration_sum_s)
                for x, rs in self.loads().items()}

    @property
    def out_of_trials(self) -> bool:
        return len(self.records) >= self.config.max_trials

    @property
    def sender_below_range(self) -> bool:
        return self.ceiling < self.config.min_load_pps


def _step_up(lower: float, verdicts: dict[float, Verdict], width: float) -> float:
    """Log-step to expand upward from `lower`: one width at first, then twice the gap
    to the previous lower bound, so repeated expansions double."""
    below = [x for x, v in verdicts.items()
             if v in (Verdict.LOWER, Verdict.LEANS_LOWER) and x < lower]
    return max(width, 2 * math.log(lower / max(below))) if below else width


def _step_down(upper: float, verdicts: dict[float, Verdict],
               loads: dict[float, list[TrialResult]], loss_ratio: float,
               width: float) -> float:
    """Log-step to contract downward from `upper`, doubling like `_step_up`; but one
    width only when `upper` is where the estimate from the load above sent us, since
    then the answer should lie just below it."""
    above = [x for x, v in verdicts.items()
             if v in (Verdict.UPPER, Verdict.LEANS_UPPER) and x > upper]
    if not above:
        return width
    nearest = min(above)
    if _estimate(loads[nearest], loss_ratio) <= upper * math.exp(width / 2):
        return width
    return max(width, 2 * math.log(nearest / upper))


def _next_load(run: _Run, loss_ratio: float, phase: _Phase,
               previous: _Phase | None) -> float | None:
    """The load this goal wants measured next in this phase, or None when the phase
    is done for it. Bounds not yet decided (leaning, or borrowed from the previous
    phase) steer the search; the goal is done only once its bounds are decided."""
    loads = run.loads()
    verdicts = run.verdicts(loss_ratio, phase)
    lower, upper = _relevant(verdicts, hard_only=False)
    if previous is not None:
        before, after = _relevant(run.verdicts(loss_ratio, previous), hard_only=True)
        if upper is None and after and (lower is None or after.load > lower.load):
            upper = _Bound(after.load, hard=False)
        if lower is None and before and (upper is None or before.load < upper.load):
            lower = _Bound(before.load, hard=False)

    width = phase.log_width
    aim = width * _AIM
    floor, ceiling = run.config.min_load_pps, run.ceiling
    if upper is None:
        if lower is None:
            return ceiling
        if lower.load >= ceiling * (1 - _EPS):
            return None if lower.hard else lower.load
        return min(ceiling, lower.load * math.exp(_step_up(lower.load, verdicts, aim)))
    estimate = _estimate(loads[upper.load], loss_ratio)
    if lower is None:
        if upper.load <= floor * (1 + _EPS):
            return None if upper.hard else upper.load
        if estimate < upper.load * math.exp(-width):
            return max(floor, estimate)  # the jump: go where the forwarded rate says
        step = _step_down(upper.load, verdicts, loads, loss_ratio, aim)
        return max(floor, upper.load * math.exp(-step))

    gap = math.log(upper.load / lower.load)
    if gap <= width * (1 + _EPS):
        if upper.hard and lower.hard:
            return None
        # Confirm the upper bound first: a spike makes a false upper bound more
        # often than luck makes a false lower one.
        return upper.load if not upper.hard else lower.load
    if estimate <= lower.load * math.exp(aim):
        return lower.load * math.exp(min(_step_up(lower.load, verdicts, aim), gap / 2))
    if estimate >= upper.load * math.exp(-aim):
        step = _step_down(upper.load, verdicts, loads, loss_ratio, aim)
        return upper.load * math.exp(-min(step, gap / 2))
    return estimate


def search(measurer: Measurer, config: SearchConfig,
           on_trial: OnTrial | None = None) -> SearchResult:
    """Find every goal's bounds with one series of trials.

    `on_trial(index, trial_dict)` is called after each trial, for progress output;
    the dict is the trial's record as known then (bound roles are added at the end).
    """
    run = _Run(measurer, config, on_trial)
    if config.warmup_duration_s > 0:
        run.measure(config.max_load_pps, config.warmup_duration_s, "warmup")
    phases = _phases(config)
    previous = None
    for phase in phases:
        while not run.out_of_trials and not run.sender_below_range:
            load = next((x for r in config.loss_ratios
                         if (x := _next_load(run, r, phase, previous)) is not None), None)
            if load is None:
                break
            run.measure(round(load, _LOAD_DECIMALS), phase.trial_duration_s, phase.name)
        previous = phase
    return _result(run, phases[-1])


def _conditional_throughput(results: list[TrialResult], load: float,
                            config: SearchConfig) -> float | None:
    """The load times (1 - the loss ratio reached once the worst exceed-ratio share of
    full-length trial time is set aside)."""
    full = [r for r in results
            if r.duration_s >= config.final_trial_duration_s * (1 - _EPS)]
    if not full:
        return None
    allowed = config.exceed_ratio * sum(r.duration_s for r in full)
    worst_first = sorted(full, key=lambda r: r.loss_ratio, reverse=True)
    skipped = 0.0
    for r in worst_first:
        skipped += r.duration_s
        if skipped > allowed + _EPS:
            return load * (1 - r.loss_ratio)
    return load * (1 - worst_first[-1].loss_ratio)  # unreachable while exceed_ratio < 1


def _goal_result(run: _Run, loss_ratio: float, final: _Phase) -> GoalResult:
    config = run.config
    lower, upper = _relevant(run.verdicts(loss_ratio, final), hard_only=True)
    low = lower.load if lower else None
    up = upper.load if upper else None
    width = (up - low) / up if low is not None and up is not None else None
    limited = run.ceiling < config.max_load_pps * (1 - _EPS)
    finished, generator_limited = False, False
    if width is not None and math.log(up / low) <= final.log_width * (1 + _EPS):
        finished, reason = True, (f"bounds within {config.relative_width:.2%} "
                                  f"(achieved {width:.2%})")
    elif up is None and low is not None and low >= run.ceiling * (1 - _EPS):
        if limited:
            generator_limited = True
            reason = (f"generator-limited: no loss up to {low:.0f} pps, where the "
                      f"sender tops out; max_load {config.max_load_pps:.0f} pps not "
                      f"reached, so the firewall's throughput is unknown")
        else:
            finished, reason = True, f"no loss up to max_load {config.max_load_pps:.0f} pps"
    elif low is None and up is not None and up <= config.min_load_pps * (1 + _EPS):
        finished, reason = True, f"loss already at min_load {config.min_load_pps:.0f} pps"
    elif run.sender_below_range:
        generator_limited = True
        reason = (f"generator-limited: the sender reached only {run.ceiling:.0f} pps, "
                  f"below min_load {config.min_load_pps:.0f} pps")
    elif run.out_of_trials:
        reason = f"unfinished: max_trials ({config.max_trials}) reached"
    else:
        reason = "unfinished"
    conditional = (_conditional_throughput(run.counted[low], low, config)
                   if low is not None else None)
    return GoalResult(loss_ratio=loss_ratio, exceed_ratio=config.exceed_ratio,
                      lower_bound_pps=low, upper_bound_pps=up, relative_width=width,
                      conditional_throughput_pps=conditional, finished=finished,
                      generator_limited=generator_limited, reason=reason)


def _result(run: _Run, final: _Phase) -> SearchResult:
    goals = tuple(_goal_result(run, r, final) for r in run.config.loss_ratios)
    uppers = {g.upper_bound_pps for g in goals if g.upper_bound_pps is not None}
    lowers = {g.lower_bound_pps for g in goals if g.lower_bound_pps is not None}
    trials = []
    for record, load in zip(run.records, run.record_loads):
        counted = not record["discarded"]
        trials.append({**record, "used_as_upper": counted and load in uppers,
                       "used_as_lower": counted and load in lowers})
    limited = run.ceiling < run.config.max_load_pps * (1 - _EPS)
    return SearchResult(goals=goals, trials=tuple(trials),
                        total_trial_time_s=run.total_time_s,
                        generator_ceiling_pps=run.ceiling if limited else None,
                        config=run.config)


__all__ = ["SearchConfig", "SearchResult", "GoalResult", "Verdict", "classify_load",
           "search", "SHORT_PHASE_WIDTH_FACTOR", "CEILING_MARGIN"]
