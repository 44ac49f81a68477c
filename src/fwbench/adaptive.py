"""Adaptive repetitions: which cells of a run need another trial.

A fixed `repeat` spends as many trials on a quiet cell as on a noisy one. With
`[adaptive] max_repeat` set, the run loop asks after the planned trials, and again after
every round it adds, which cells (one value of each of the experiment's factors) still
have a wide interval for their headline figure, and repeats only those, up to the cap.

The headline figure is the method's headline metric (`metrics.headline`); the interval
is the percentile-bootstrap interval of its median over the cell's ok trials
(`stats.median_ci`), and its width is read as a fraction of that median. Pure
functions of the records: the run loop decides, these only measure.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable

from fwbench import metrics
from fwbench.results import TrialRecord
from fwbench.stats import median_ci

Cell = tuple  # the factors' values, in the experiment's factor order


def _primary(method: str) -> metrics.Metric:
    try:
        return metrics.headline(method)
    except ValueError:
        raise ValueError(f"method {method} has no headline metric to repeat on") from None


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _by_cell(records: Iterable[TrialRecord],
             factors: tuple[str, ...]) -> dict[Cell, list[TrialRecord]]:
    groups: dict[Cell, list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[r.cell(factors)].append(r)
    return groups


def _width(recs: list[TrialRecord], metric: metrics.Metric, level: float) -> float | None:
    values = [v for r in recs if r.status == "ok" and _numeric(v := metric.value(r))]
    if len(values) < 2:
        return None
    ci = median_ci(values, level)
    if ci is None:
        return None
    w = ci.width_relative_to(statistics.median(values))
    return w if math.isfinite(w) else None  # a zero median has no relative width


def cell_widths(records: Iterable[TrialRecord], method: str, factors: tuple[str, ...],
                level: float = 0.95) -> dict[Cell, float | None]:
    """Each cell's current relative width: the `level` bootstrap interval of the
    median of the method's primary metric over the cell's ok trials, divided by that
    median. None where there is no width to give: fewer than 2 numeric values, or a
    median of 0."""
    metric = _primary(method)
    return {cell: _width(recs, metric, level)
            for cell, recs in _by_cell(records, factors).items()}


def cells_needing_more(records: Iterable[TrialRecord], method: str,
                       factors: tuple[str, ...], rel_width: float, level: float,
                       max_repeat: int,
                       widths: dict[Cell, float | None] | None = None) -> list[Cell]:
    """The cells (values of `factors`) that should get another trial, sorted.

    A cell needs more while its trial count, counting every status, is below
    `max_repeat` (so a cell that always fails still stops at the cap) and either it has
    fewer than 2 numeric primary values from ok trials, or the `level` bootstrap
    interval of their median is wider than `rel_width` times the median (a median of 0
    counts as infinitely wide). Only cells with at least one record are considered.
    `widths`: `cell_widths` of the same records, if the caller has them already.
    """
    groups = _by_cell(records, factors)
    if widths is None:
        widths = cell_widths([r for recs in groups.values() for r in recs], method,
                             factors, level)
    out = []
    for cell, recs in sorted(groups.items()):
        if len(recs) >= max_repeat:
            continue
        w = widths.get(cell)
        if w is None or w > rel_width:
            out.append(cell)
    return out


def within_budget(cells: list[Cell], widths: dict[Cell, float | None],
                  records: list[TrialRecord], budget_s: float,
                  trials: int = 1) -> list[Cell]:
    """The cells of an adaptive round that fit what is left of a time budget, widest
    first (a cell with no width yet before any), in their given order, each to run
    `trials` trials. What a trial costs is read from the records: the budget counts
    the trials' own wall time (`duration_s`), the median trial's for each trial
    still to run."""
    spent = sum(r.duration_s for r in records)
    per = statistics.median(r.duration_s for r in records) if records else 0.0
    room = len(cells) if per <= 0 else int((budget_s - spent) // (per * max(1, trials)))
    if room <= 0:
        return []
    widest = sorted(cells, key=lambda c: -math.inf if widths.get(c) is None
                    else -widths[c])[:room]
    keep = set(widest)
    return [c for c in cells if c in keep]
