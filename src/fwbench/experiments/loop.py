"""The one run loop: `fwbench run` for every experiment.

start() asks the experiment for its plan (checked before any testbed exists),
interleaves the cells over the repetitions with the scenario's seed and writes
run.json; execute() (also `--resume`) runs what the plan still lacks in one testbed
session, appending every record the moment its trial ends; a trial the instrument
made invalid runs again at the end of the session (RERUNS_PER_CELL). SIGTERM becomes
Interrupted so every cleanup path runs; the testbed is removed however the run ends.

With `[adaptive] max_repeat` set, the planned trials are followed by adaptive rounds
on the same testbed: each round appends one trial per cell whose headline interval
is still wide (fwbench.adaptive, on the experiment's headline metric) to run.json's
plan before running any of them, so `--resume` finishes an interrupted round and
then goes on with the next. With `until = "claims"` (a study's run), a round holds
instead the cells that the study's claims not yet decided read, chosen by the
caller's decider (the report's, handed in as `claims`), until every claim is decided
or its cells reach max_repeat.
"""
from __future__ import annotations

import random
import signal
from contextlib import contextmanager
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from fwbench import adaptive, environment, experiments
from fwbench.errors import FwbenchError
from fwbench.experiments.base import Cell, Experiment, now
from fwbench.plan import TrialKey, interleave, shuffled
from fwbench.results import RunDir, TrialRecord
from fwbench.scenario import Scenario, from_dict


class Interrupted(Exception):
    """SIGTERM, turned into an exception so every cleanup path runs."""


@contextmanager
def sigterm_raises():
    def handler(signum, frame):
        raise Interrupted(signal.Signals(signum).name)
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def progress_bar(console: Console) -> Progress:
    """The bar every run shows: the current cell, done/total, time spent and left."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                    console=console, transient=False)


@dataclass
class RunOutcome:
    path: Path
    records: list[TrialRecord]
    planned: int
    skipped_backends: dict[str, str]
    method: str
    summary: RenderableType | None = None   # the experiment's table of the records


def default_out(sc: Scenario) -> Path:
    return Path("results") / f"{sc.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _preflight(exp: Experiment) -> None:
    exp.preflight()
    if exp.sc.testbed.provider == "ssh" and (why := exp.over_ssh()):
        raise FwbenchError(f"the ssh provider cannot run this: {why}")
    if exp.sc.testbed.latency == "round-trip" and (why := exp.over_round_trips()):
        raise FwbenchError(f"latency = \"round-trip\" cannot be used here: {why}")


def start(sc: Scenario, out: str | Path, console: Console,
          claims: OpenClaims | None = None) -> RunOutcome:
    exp = experiments.get(sc)
    _preflight(exp)
    planned = exp.plan()
    for note in planned.notes:
        console.print(f"[yellow]{escape(note)}[/]")
    resolved = planned.scenario
    plan = interleave(planned.cells, resolved.repeat, resolved.seed, exp.blocks())
    rd = RunDir.create(out, {
        "scenario": resolved.dump(),
        "factors": list(exp.factors),
        **planned.meta,
        "plan": [k.as_dict(exp.factors) for k in plan],
        "environment": environment.collect(exp.versions(planned)),
        "sessions": [],
    })
    return execute(rd, console, exp, claims)


def resume(path: str | Path, console: Console,
           claims: OpenClaims | None = None) -> RunOutcome:
    rd = RunDir.open(path)
    rd.writable()
    return execute(rd, console, claims=claims)


def execute(rd: RunDir, console: Console, exp: Experiment | None = None,
            claims: OpenClaims | None = None) -> RunOutcome:
    """Run what run.json's plan still lacks; `exp` is the experiment start() has
    already checked (a resume makes and checks its own). `claims`: a sequential
    study's chooser of its next round (OpenClaims)."""
    token = _open_claims.set(claims)
    try:
        return _execute(rd, console, exp)
    finally:
        _open_claims.reset(token)


def _execute(rd: RunDir, console: Console, exp: Experiment | None) -> RunOutcome:
    meta = rd.meta()
    sc = from_dict(meta["scenario"])
    if exp is None:
        exp = experiments.get(sc)
        _preflight(exp)
    names = tuple(meta["factors"])
    if names != tuple(exp.factors):
        raise FwbenchError(f"{rd.path}: the run's factors ({', '.join(names)}) are not "
                           f"those of experiment {sc.method} ({', '.join(exp.factors)})")
    plan = [TrialKey.from_dict(k, names) for k in meta["plan"]]
    records = rd.records()
    done = {r.key(names) for r in records}
    todo = [(i, k) for i, k in enumerate(plan) if k not in done]
    more = bool(sc.adaptive.max_repeat) and not meta.get("adaptive", {}).get("stopped") \
        and bool(_needing_more(sc, names, records, meta=meta))
    if todo or more:
        _sessions(rd, exp, plan, console)
    records = rd.records()
    return RunOutcome(rd.path, records, len(rd.meta()["plan"]),
                      meta.get("skipped_backends", {}), sc.method,
                      exp.summary(records, rd.meta()))


# A testbed that breaks (fwbench.testbed's health(): a namespace or link gone, a link
# down, forwarding off) is taken down and a new one built, at most this many times a run.
MAX_REBUILDS = 3


class TestbedBroken(Exception):
    """The testbed is no longer the one built: the session ends, a new one starts."""


def _todo(rd: RunDir, plan: list[TrialKey], factors: tuple[str, ...]) -> list[tuple[int, TrialKey]]:
    done = {r.key(factors) for r in rd.records()}
    return [(i, k) for i, k in enumerate(plan) if k not in done]


def _sessions(rd: RunDir, exp: Experiment, plan: list[TrialKey], console: Console) -> None:
    """Testbed sessions until the plan, and the adaptive rounds after it, are done.

    After a trial that is not ok the testbed's health is checked; if it broke, the
    trial is not recorded, the session ends and a new testbed runs it again. A trial
    that breaks the new testbed too is recorded as failed with both reasons (the
    treatment, not chance, broke it) and the run goes on on a third."""
    broke: dict[int, str] = {}      # plan position -> how its trial broke a testbed
    rebuilt: str | None = None
    with sigterm_raises():
        # The first testbed is built before the progress bar shows: a host or a
        # namespace that cannot serve is then an error line of its own.
        tb = _built(exp)
        try:
            with progress_bar(console) as progress:
                task = progress.add_task("trials", total=len(plan))
                for attempt in range(MAX_REBUILDS + 1):
                    todo = _todo(rd, plan, exp.factors)
                    progress.update(task, total=len(plan), completed=len(plan) - len(todo))
                    this, tb = tb or _built(exp), None
                    try:
                        _session(rd, exp, plan, todo, progress, task, broke, rebuilt, this)
                        return
                    except TestbedBroken as e:
                        rebuilt = str(e)
                        progress.console.print(f"[yellow]the testbed broke: "
                                               f"{escape(rebuilt)}; building a new one[/]")
                raise FwbenchError(f"the testbed broke {MAX_REBUILDS + 1} times; the last: "
                                   f"{rebuilt}")
        finally:
            if tb is not None:    # built but never handed to a session
                tb.__exit__(None, None, None)


def _built(exp: Experiment):
    """The experiment's testbed, built (on failure it has removed itself)."""
    tb = exp.testbed()
    tb.__enter__()
    return tb


def _session(rd: RunDir, exp: Experiment, plan: list[TrialKey],
             todo: list[tuple[int, TrialKey]], progress: Progress, task,
             broke: dict[int, str], rebuilt: str | None, tb) -> None:
    """One testbed (built; removed here however the session ends) for the trials
    still to run, and the adaptive rounds after them."""
    try:
        _in_session(rd, exp, plan, todo, progress, task, broke, rebuilt, tb)
    finally:
        tb.__exit__(None, None, None)
        if "restored" in tb.recorded:   # real hosts: were they put back as they were?
            sessions = rd.meta()["sessions"]
            if sessions and sessions[-1].get("testbed_id") == tb.topo.run_id:
                sessions[-1]["restored"] = tb.recorded["restored"]
                rd.update_meta(sessions=sessions)


def _in_session(rd: RunDir, exp: Experiment, plan: list[TrialKey],
                todo: list[tuple[int, TrialKey]], progress: Progress, task,
                broke: dict[int, str], rebuilt: str | None, tb) -> None:
    sc = exp.sc
    try:
        session = {"testbed_id": tb.topo.run_id, "started_at": now(),
                   "testbed": {**tb.topo.record(), **tb.recorded},
                   "trials_left": len(todo)}
        if rebuilt:
            session["rebuilt_after"] = rebuilt
        session.update(exp.open(tb, plan, progress.console))
        meta = rd.meta()
        rd.update_meta(sessions=meta["sessions"] + [session],
                       environment={**meta["environment"], **exp.environment(session)})

        again: list[tuple[int, TrialKey]] = []    # invalid trials to run once more

        def run(idx: int, key: TrialKey) -> None:
            cell = exp.cell_label(key)
            progress.update(task, description=cell)
            rec = exp.run_trial(tb, key, idx, step=lambda line: progress.update(
                task, description=f"{cell} {line}"))
            why = tb.health() if rec.status != "ok" else None
            if why and idx not in broke:
                broke[idx] = why
                raise TestbedBroken(f"{why} (after trial {idx + 1}, {cell}: "
                                    f"{rec.reason}; it runs again on the new testbed)")
            if why:
                rec = replace(rec, status="failed", reason=(
                    f"the trial broke the testbed twice ({broke[idx]}; then {why}): "
                    f"{rec.reason}"))
            elif rec.status == "invalid" and _rerun(rd, key, rec):
                again.append((idx, key))
                progress.console.print(_trial_line(exp, idx + 1, len(plan), key, rec)
                                       + " [yellow](runs again later in this run)[/]")
                return
            rd.append(rec)
            progress.advance(task)
            progress.console.print(_trial_line(exp, idx + 1, len(plan), key, rec))
            if why:
                raise TestbedBroken(why)

        def run_all(trials) -> None:
            for idx, key in trials:
                run(idx, key)
            while again:
                run(*again.pop(0))

        run_all(todo)
        while sc.adaptive.max_repeat and \
                (r := adaptive_round(rd, sc, exp.factors, plan, exp.blocks())) is not None:
            progress.update(task, total=len(plan))
            progress.console.print(_round_line(exp, r, plan, sc.adaptive.rel_width))
            run_all((idx, plan[idx]) for idx in r.positions)
        if n := rd.meta().get("reruns", {}).get("trials"):
            progress.console.print(f"{n} trial{'s' if n != 1 else ''} run again after "
                                   "the instrument made them invalid")
    finally:
        exp.close(tb)


# An invalid trial (the instrument, not the firewall, failed it: MeasurementInvalid)
# is run again later in the same run, at most this many times per cell; the last
# try's record stands. run.json's `reruns` counts them: {"trials": n, "cells":
# {"a/b": n}, "reasons": [the first few]}.
RERUNS_PER_CELL = 2
_REASONS_KEPT = 10


def _rerun(rd: RunDir, key: TrialKey, rec: TrialRecord) -> bool:
    """Whether the invalid trial `rec` of `key` runs again (its cell below
    RERUNS_PER_CELL re-runs); if so it is counted in run.json, before it runs."""
    reruns = rd.meta().get("reruns", {"trials": 0, "cells": {}, "reasons": []})
    cell = "/".join(map(str, key.cell))
    if reruns["cells"].get(cell, 0) >= RERUNS_PER_CELL:
        return False
    reruns = {"trials": reruns["trials"] + 1,
              "cells": {**reruns["cells"], cell: reruns["cells"].get(cell, 0) + 1},
              "reasons": (reruns["reasons"] + [rec.reason or ""])[:_REASONS_KEPT]}
    rd.update_meta(reruns=reruns)
    return True


def _trial_line(exp: Experiment, n: int, total: int, key: TrialKey,
                rec: TrialRecord) -> str:
    head = f"[{n}/{total}] {escape(exp.cell_label(key))} rep {rec.repetition}:"
    if rec.status != "ok":
        return f"{head} [red]{rec.status}[/]: {escape(rec.reason or '')}"
    return f"{head} {exp.line(rec)}"


# --- adaptive rounds -------------------------------------------------------------------

def _needing_more(sc: Scenario, factors: tuple[str, ...], records: list[TrialRecord],
                  widths: dict | None = None, meta: dict | None = None) -> list[Cell]:
    a = sc.adaptive
    if a.until == "claims":
        return _for_claims(sc, factors, records, meta or {})[0]
    return adaptive.cells_needing_more(records, sc.method, factors, a.rel_width, a.level,
                                       a.max_repeat, widths)


# A sequential study's chooser (`[adaptive] until = "claims"`): (run.json, records)
# -> (the cells its claims not yet decided read, those claims' keys). The deciders
# are the report's (fwbench.report.findings.open_claims), a layer above this loop:
# the caller hands them in (execute's `claims`).
OpenClaims = Callable[[dict, list[TrialRecord]], tuple[list[Cell], list[str]]]
_open_claims: ContextVar[OpenClaims | None] = ContextVar("open_claims", default=None)


def _for_claims(sc: Scenario, factors: tuple[str, ...], records: list[TrialRecord],
                meta: dict) -> tuple[list[Cell], list[str]]:
    """The next round of a sequential study: the cells its claims not yet decided
    read, each below max_repeat trials; and those claims' keys."""
    chooser = _open_claims.get()
    if chooser is None:
        raise FwbenchError("this run adds rounds until its study's claims are decided "
                           "(adaptive.until = \"claims\"): run it with fwbench run, "
                           "fwbench study or fwbench.api")
    open_cells, keys = chooser({**meta, "scenario": sc.dump(), "factors": list(factors)},
                               records)
    count: dict[Cell, int] = {}
    for r in records:
        count[r.cell(factors)] = count.get(r.cell(factors), 0) + 1
    cells = sorted({tuple(c) for c in open_cells
                    if count.get(tuple(c), 0) < sc.adaptive.max_repeat}, key=str)
    return cells, keys


@dataclass
class AdaptiveRound:
    round: int
    positions: list[int]          # the new trials' places in the plan
    widths: dict[Cell, float | None]  # every cell, before the round
    claims: list[str] = field(default_factory=list)  # until = "claims": those it serves


def adaptive_round(rd: RunDir, sc: Scenario, factors: tuple[str, ...],
                   plan: list[TrialKey], block=None) -> AdaptiveRound | None:
    """Plan the next adaptive round: one trial per cell that needs more, in an order
    seeded by the scenario's seed and the round number (cells of one `block` back to
    back), appended to `plan` and to run.json's plan (with the round's cells and
    every cell's width) before any of them runs; for a sequential study (`until =
    "claims"`), `step` such rounds, each recorded as its own, before it looks again.
    With `[adaptive] budget_min`, the round keeps the widest cells that fit what is
    left of it. None when no cell needs
    more, or the budget is spent (run.json's adaptive.stopped says so)."""
    records = rd.records()
    meta = rd.meta()
    widths = adaptive.cell_widths(records, sc.method, factors, sc.adaptive.level)
    claims: list[str] = []
    if sc.adaptive.until == "claims":
        cells, claims = _for_claims(sc, factors, records, meta)
        if not cells:
            rd.update_meta(adaptive={**meta.get("adaptive", {}), "stopped": (
                f"claims {', '.join(claims)} still not shown with their cells at "
                f"{sc.adaptive.max_repeat} trials" if claims else
                "no claim left that more trials of its cells could decide")})
            return None
    else:
        cells = _needing_more(sc, factors, records, widths)
    if not cells:
        return None
    wanted = len(cells)
    steps = sc.adaptive.step if sc.adaptive.until == "claims" else 1
    if sc.adaptive.budget_min:
        cells = adaptive.within_budget(cells, widths, records, sc.adaptive.budget_min * 60,
                                       steps)
        if not cells:
            rd.update_meta(adaptive={**meta.get("adaptive", {}), "stopped": (
                f"the budget of {sc.adaptive.budget_min:g} min was spent with "
                f"{wanted} cell(s) still wide")})
            return None
    rounds = meta.get("adaptive", {}).get("rounds", [])
    k = len(rounds) + 1
    next_rep: dict[tuple, int] = {}
    for key in plan:
        next_rep[key.cell] = max(next_rep.get(key.cell, 0), key.repetition + 1)
    # A sequential study adds `step` rounds before it looks again: each a whole
    # round of the cells still below max_repeat, in an order of its own, recorded
    # as a round of its own (so a round still pairs the cells it holds).
    first = len(plan)
    for j in range(steps):
        now = cells if j == 0 else \
            [c for c in cells if next_rep.get(c, 0) + j < sc.adaptive.max_repeat]
        if not now:
            break
        order = shuffled(now, random.Random(f"{sc.seed}:adaptive:{k + j}"), block)
        plan.extend(TrialKey(c, next_rep.get(c, 0) + j) for c in order)
        rounds = rounds + [{"round": k + j, "cells": [list(c) for c in order],
                            **({"for_claims": claims} if claims else {}),
                            **({"left_for_budget": wanted - len(order)}
                               if j == 0 and wanted > len(order) else {}),
                            **({"widths": {"/".join(map(str, c)): w
                                           for c, w in sorted(widths.items())}}
                               if j == 0 else {})}]
    rd.update_meta(plan=[p.as_dict(factors) for p in plan],
                   adaptive={**meta.get("adaptive", {}), "rounds": rounds})
    return AdaptiveRound(k, list(range(first, len(plan))), widths, claims)


def _round_line(exp: Experiment, r: AdaptiveRound, plan: list[TrialKey],
                rel_width: float) -> str:
    keys = sorted((plan[i] for i in r.positions), key=lambda k: k.cell)

    def width(k: TrialKey) -> str:
        w = r.widths.get(k.cell)
        return f"{w * 100:.1f} %" if w is not None else "no interval yet"
    if r.claims:
        cells = len({k.cell for k in keys})
        times = "" if len(keys) == cells else f", {len(keys) // cells} trials each"
        return (f"adaptive round {r.round}: {cells} cell{'s' if cells != 1 else ''}"
                f"{times} for the claims not yet decided ({', '.join(r.claims)})")
    return (f"adaptive round {r.round}: {len(keys)} cell{'s' if len(keys) != 1 else ''} "
            f"above {rel_width * 100:g} % width: " +
            ", ".join(f"{escape(exp.cell_label(k))} {width(k)}" for k in keys))
