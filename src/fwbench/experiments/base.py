"""What an experiment is to the run loop.

An experiment turns a scenario into a plan of cells, checks before any testbed is
built that it can run them, says which testbed it needs, runs one trial in it and
says in one line what the trial found. Everything around that (the run directory,
seeded interleaving, resume, SIGTERM, progress with time left, the testbed session,
adaptive rounds, the table at the end) is the loop's, the same for every experiment.

A cell is one value of each of the experiment's `factors`, its named plan dimensions
(the sweeps: backend, rules, frame_size; droprate: treatment, set_size, frame_size);
records and run.json's plan carry them by name (fwbench.results, schema 3).
"""
from __future__ import annotations

import abc
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from rich.console import Console, RenderableType

from fwbench.plan import Cell, TrialKey
from fwbench.results import TrialRecord
from fwbench.scenario import Scenario
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology


@dataclass
class Planned:
    """What a new run of the experiment will do, decided before any testbed exists."""
    scenario: Scenario                  # resolved (e.g. `all` backends made a list)
    cells: list[Cell]
    meta: dict = field(default_factory=dict)   # more for run.json (skipped backends, ...)
    notes: list[str] = field(default_factory=list)   # printed before the run starts


class Experiment(abc.ABC):
    """One kind of measurement. Subclasses set `factors` and implement the
    abstract methods; `sc` is the scenario as run.json holds it."""

    # The plan's named dimensions, in cell order ("repetition" is the key's own).
    factors: tuple[str, ...] = ("backend", "rules", "frame_size")

    def __init__(self, sc: Scenario):
        self.sc = sc

    @property
    def method(self) -> str:
        return self.sc.method

    # --- before any testbed ----------------------------------------------------------

    @abc.abstractmethod
    def check(self) -> None:
        """Raise FwbenchError (one line) unless this machine can run the experiment
        (tools, kernel features, CPUs). Runs before a new run and before a resume."""

    @abc.abstractmethod
    def plan(self) -> Planned:
        """The cells of a new run; raise FwbenchError for a scenario that cannot run."""

    @abc.abstractmethod
    def versions(self, planned: Planned) -> dict[str, str | None]:
        """Tool versions for run.json's environment."""

    # --- the testbed session -----------------------------------------------------------

    @abc.abstractmethod
    def topology(self) -> Topology:
        """The testbed this experiment needs."""

    def testbed(self) -> AbstractContextManager:
        """The testbed, built on entry and removed on exit, however the run ends."""
        return NetnsTestbed(self.topology())

    @abc.abstractmethod
    def open(self, tb: NetnsTestbed, plan: list[TrialKey], console: Console) -> dict:
        """Once per session, before its first trial: set up what every trial shares
        (calibration, a target, instruments). Returns what the session record adds."""

    def close(self, tb: NetnsTestbed) -> None:
        """After the session's last trial, however the session ends."""

    def environment(self, session: dict) -> dict:
        """Additions to run.json's environment from a session's record."""
        return {}

    # --- one trial ---------------------------------------------------------------------

    def cell_label(self, key: TrialKey) -> str:
        """The cell, for the progress bar and the trial line."""
        return " ".join(f"{f}={v}" for f, v in zip(self.factors, key.cell))

    @abc.abstractmethod
    def run_trial(self, tb: NetnsTestbed, key: TrialKey, idx: int,
                  step=None) -> TrialRecord:
        """One trial of cell `key`, the `idx`-th of the plan; `step(line)` reports
        progress inside a long trial."""

    @abc.abstractmethod
    def line(self, rec: TrialRecord) -> str:
        """What an ok trial found, in a few words (rich markup allowed)."""

    @abc.abstractmethod
    def summary(self, records: list[TrialRecord], meta: dict) -> RenderableType:
        """The table printed when the run ends."""
