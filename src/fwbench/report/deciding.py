"""A study claim's finding from its decision (fwbench.claims), for the deciders
beside each experiment's report (report.seed000, seed003, echo, droprate,
loadlatency): a claim not decided says what deciding it would need, at what the
run's own trials cost."""
from __future__ import annotations

import statistics

from fwbench import claims as cl
from fwbench.findings import NOT_SHOWN, Claim, Finding
from fwbench.report.data import RunData


def trial_seconds(data: RunData) -> float | None:
    """What one trial costs, for saying what a claim would need: the median trial's
    wall time."""
    ds = [r.duration_s for r in data.records if r.duration_s]
    return statistics.median(ds) if ds else None


def decided(data: RunData, c: Claim, ours: str, d: cl.Decision,
            est: cl.Estimate | None, cells) -> Finding:
    """A claim's finding from its decision, with the run's cells its estimate reads;
    one not shown says what deciding it would need (fwbench.claims.need, those
    cells re-run)."""
    cells = tuple(sorted(set(map(tuple, cells)), key=str))
    why, needs = d.why, None
    if d.verdict == NOT_SHOWN and isinstance(c.rule, cl.Rule):
        needs = cl.trials_needed(c.rule, est)
        if more := cl.need(c.rule, est, trial_seconds(data), len(cells)):
            why += f"; {more}"
    return Finding(c, ours, d.verdict, why, cells, needs)


def cells_where(data: RunData, **values) -> list:
    """The run's cells whose factors take the given values (a value may be a set)."""
    def fits(r) -> bool:
        return all(r.factors.get(k) in (v if isinstance(v, (set, frozenset)) else {v})
                   for k, v in values.items())
    return sorted({data.cell(r) for r in data.records if fits(r)}, key=str)
