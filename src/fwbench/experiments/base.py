"""What an experiment is to the run loop.

An experiment turns a scenario into a plan of cells, checks before any testbed is
built that it can run them, says which testbed it needs, runs one trial in it and
says in one line what the trial found. Everything around that (the run directory,
seeded interleaving, resume, SIGTERM, progress with time left, the testbed session,
adaptive rounds, the table at the end) is the loop's, the same for every experiment.

A cell is one value of each of the experiment's `factors`, its named plan dimensions
(the sweeps: backend, rules, frame_size; droprate: treatment, set_size, frame_size);
records and run.json's plan carry them by name (fwbench.results, schema 3), and the
trial's hooks get it as a named record (`c.backend`, `c.rules`).

Every experiment's trial is the one pipeline of `Experiment.run_trial`: prepare,
load, verify, prove, measure, release, record. An experiment supplies the hooks
where it differs (its rule set, what it proves, what it measures); the order, the
catching of errors into the trial's status and the release are the same for all.
"""
from __future__ import annotations

import abc
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timezone

from rich.console import Console, RenderableType

from fwbench import backends as registry
from fwbench import proc, statecheck
from fwbench.backends.base import Backend
from fwbench.backends.base import Verification
from fwbench.errors import FwbenchError, MeasurementInvalid
from fwbench.plan import Cell, TrialKey, named_cell
from fwbench.results import SCHEMA_VERSION, TrialRecord
from fwbench.ruleset.model import RuleSet
from fwbench.scenario import ALL, Scenario
from fwbench.testbed.base import Testbed
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Phases(dict):
    """Wall time of each phase of a trial, seconds (recorded in its conditions)."""

    def timed(self, name: str, fn, *args, **kw):
        t = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            self[name] = round(time.perf_counter() - t, 4)


class Trial:
    """What every trial keeps, whatever it measures: when it started, its status and
    why, the verification, the load time, the metrics, its sub-trials and the wall
    time of each phase; `record()` makes them the trial's record."""

    def __init__(self, factors: tuple[str, ...], key: TrialKey, idx: int):
        self.factors, self.key, self.idx = factors, key, idx
        self.started, self._t0 = now(), time.perf_counter()
        self.status, self.reason = "ok", None
        self.verification: dict = {"ok": False, "rules_loaded": None, "reason": "not reached"}
        self.load_time_s: float | None = None
        # How the backend loaded the rule set where it is not the rendering's
        # obvious form (Backend.load_form): kept in the record's conditions.
        self.load_form: str | None = None
        self.metrics: dict = {}
        self.trials: list = []
        self.phases = Phases()
        self._filled = None         # statecheck.FillResult while background entries stand

    def timed(self, name: str, fn, *args, **kw):
        return self.phases.timed(name, fn, *args, **kw)

    def verified(self, verification) -> bool:
        """Keep a verification (a backends.base.Verification); a failed one fails
        the trial with its reason."""
        self.verification = verification.as_dict()
        if not verification.ok:
            self.fail(f"verification: {verification.reason}")
        return verification.ok

    def fail(self, reason: str, status: str = "failed") -> None:
        self.status, self.reason = status, reason

    def fill_conntrack(self, tb: Testbed, entries: int, **kw) -> None:
        """Fill the firewall's connection table with `entries` background entries
        (statecheck.fill, its keywords), kept in the metrics; short of them is an
        error. release_conntrack() undoes it, whatever happened in between."""
        self._filled = self.timed("fill_s", statecheck.fill, tb, entries, **kw)
        self.metrics["conntrack_fill"] = self._filled.as_dict()
        if not self._filled.reached:
            raise FwbenchError(f"the connection table reached {self._filled.created:,} "
                               f"of {entries:,} entries")

    def release_conntrack(self, tb: Testbed) -> None:
        """Release what fill_conntrack() made, if anything. A failed release fails the
        trial with its reason: the next trial's flush empties the table anyway, so it
        must not end the run with a traceback."""
        if self._filled is None:
            return
        try:
            statecheck.release(tb, self._filled)
        except FwbenchError as e:
            self.fail(f"releasing the background connections: {e}")
        finally:
            self._filled = None

    def record(self, run_id: str, method: str, traffic: str, ruleset_sha256: str | None,
               conditions: dict) -> TrialRecord:
        return TrialRecord(
            schema_version=SCHEMA_VERSION, run_id=run_id, trial=self.idx,
            factors=dict(zip(self.factors, self.key.cell, strict=True)), method=method,
            traffic=traffic, repetition=self.key.repetition, status=self.status,
            reason=self.reason, verification=self.verification,
            load_time_s=self.load_time_s, metrics=self.metrics, started_at=self.started,
            duration_s=time.perf_counter() - self._t0, ruleset_sha256=ruleset_sha256,
            conditions={**conditions, "phases": self.phases,
                        **({"load_form": self.load_form} if self.load_form else {})},
            trials=self.trials)


@dataclass(frozen=True)
class Refusal:
    """Why a backend cannot run in an experiment: `skipped` is what run.json's
    skipped_backends records when the scenario asked for all backends, `error` the
    one line when the scenario named it."""
    skipped: str
    error: str

    @classmethod
    def same(cls, why: str | None) -> "Refusal | None":
        return None if why is None else cls(why, why)

    @classmethod
    def unavailable(cls, b: Backend) -> "Refusal | None":
        """The backend's own reason it cannot run on this machine, if any."""
        why = b.unavailable()
        return None if why is None else cls(why, f"backend {b.name} cannot run here: {why}")


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
    # The programs its trials run, each with the Debian package that has it, and
    # whether they run fwbench's traffic engine: preflight() checks both for every
    # experiment, one line naming the first missing.
    tools: dict[str, str] = {"ip": "iproute2"}
    uses_engine: bool = True

    def __init__(self, sc: Scenario):
        self.sc = sc
        self._backends: dict[str, Backend] = {}

    @property
    def method(self) -> str:
        return self.sc.method

    def backend(self, name: str) -> Backend:
        """The backend of that name, one instance for the experiment's life (its
        renderings and checks are remembered there)."""
        if name not in self._backends:
            self._backends[name] = registry.get(name)
        return self._backends[name]

    def choose_backends(self, every, refusal) -> tuple[list[str], dict[str, str]]:
        """The backends a run measures, and those left out with why: the scenario's,
        or `every` when it asks for all. `refusal(backend)` is why one cannot run
        (a Refusal) or None, and may raise FwbenchError for what is an error either
        way; a backend the scenario names that is refused is an error (one line),
        one of all is left out."""
        explicit = ALL not in self.sc.backends
        chosen, skipped = [], {}
        for name in (self.sc.backends if explicit else every):
            r = refusal(self.backend(name))
            if r is not None and explicit:
                raise FwbenchError(r.error)
            if r is not None:
                skipped[name] = r.skipped
            else:
                chosen.append(name)
        return chosen, skipped

    def backend_versions(self, names) -> dict[str, str | None]:
        """Every named backend's tool versions, for run.json's environment."""
        out: dict[str, str | None] = {}
        for n in names:
            out.update(self.backend(n).versions())
        return out

    # --- before any testbed ----------------------------------------------------------

    def preflight(self) -> None:
        """Raise FwbenchError (one line) unless this machine can run the experiment
        (tools, kernel features, CPUs). Runs before a new run and before a resume.
        An experiment that checks more calls this first."""
        self.require_tools()

    def require_tools(self) -> None:
        """The experiment's `tools`, and the engine's binary if it uses it."""
        proc.require(self.tools)
        if self.uses_engine:
            from fwbench import engine
            engine.binary()

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
        """The testbed, built on entry and removed on exit, however the run ends. What
        it yields has `topo`, `recorded` (what the build measured, for the session
        record) and `health()` (why it is no longer the testbed built, or None): the
        loop asks after every trial that is not ok, and builds a new one if need be.
        The scenario's provider builds it: namespaces here, or the inventory's hosts."""
        s = self.sc.testbed
        if s.provider == "ssh":
            from fwbench import bpf, engine
            from fwbench.backends import kernel
            from fwbench.testbed import hosts, inventory
            programs = [engine.binary(), kernel.nftdump_binary(), bpf.binary(),
                        bpf.DROP_OBJECT]
            return hosts.SshTestbed(self.topology(), inventory.load(s.inventory), programs,
                                    registry.firewalls())
        return NetnsTestbed(self.topology())

    def over_ssh(self) -> str | None:
        """None when the experiment runs on the ssh provider's hosts (everything it
        reads and runs goes through the testbed), else why not."""
        return f"method {self.sc.method} has not been made to run over SSH"

    def over_round_trips(self) -> str | None:
        """None when the experiment's latency can be timed as round trips (the
        engine's reflect mode, for client and server on separate clocks), else
        why not."""
        return f"method {self.sc.method} times packets one way only"

    @abc.abstractmethod
    def open(self, tb: Testbed, plan: list[TrialKey], console: Console) -> dict:
        """Once per session, before its first trial: set up what every trial shares
        (calibration, a target, instruments). Returns what the session record adds."""

    def close(self, tb: Testbed) -> None:
        """After the session's last trial, however the session ends."""

    def environment(self, session: dict) -> dict:
        """Additions to run.json's environment from a session's record."""
        return {}

    # --- one trial ---------------------------------------------------------------------

    def blocks(self):
        """A function giving each cell its block, when cells must run back to back
        within a round (fwbench.plan.interleave), or None (the default: no blocks)."""
        return None

    def cell(self, key: TrialKey) -> tuple:
        """The key's cell as a named record of the experiment's factors
        (`c.backend`, `c.rules`); still the tuple the plan holds."""
        return named_cell(self.factors)(*key.cell)

    def cell_label(self, key: TrialKey) -> str:
        """The cell, for the progress bar and the trial line."""
        return " ".join(f"{f}={v}" for f, v in zip(self.factors, key.cell))

    def run_trial(self, tb: Testbed, key: TrialKey, idx: int,
                  step=None) -> TrialRecord:
        """One trial of cell `key`, the `idx`-th of the plan; `step(line)` reports
        progress inside a long trial. The one trial pipeline, every experiment's:

        prepare → load → verify → prove → measure, stopping at the first that fails
        the trial; a MeasurementInvalid (the instrument failed) makes it `invalid`,
        any other FwbenchError `failed`, both with their one line (then `failed()`);
        `release()` whatever happened; the record. An experiment supplies the hooks
        below where it differs; a cell whose `ruleset()` is None loads nothing."""
        c = self.cell(key)
        t = Trial(self.factors, key, idx)
        say = step or _quiet
        try:
            self.prepare(tb, t, c, step)
            for stage in (self._loaded, self.prove, self.measure):
                if t.status != "ok":
                    break
                stage(tb, t, c, say)
        except MeasurementInvalid as e:
            t.fail(str(e), "invalid")
            self.failed(tb, t, c)
        except FwbenchError as e:
            t.fail(str(e))
            self.failed(tb, t, c)
        finally:
            self.release(tb, t, c)
        method, traffic = self.recorded_as(c)
        return t.record(tb.topo.run_id, method, traffic, self.digest(c),
                        self.conditions(tb, c))

    def _loaded(self, tb: Testbed, t: Trial, c, say) -> None:
        """The cell's rule set loaded and verified, or standing from an earlier
        trial; nothing for a cell with none."""
        standing = self.standing(c)
        if standing is not None:
            t.verification = standing
        elif self.ruleset(c) is not None:
            say("loading")
            self._load_form = None
            took = t.timed(self.load_phase, self.load, tb, c)
            t.load_time_s = t.phases[self.load_phase] if took is None else took
            t.load_form = getattr(self, "_load_form", None)
            say("verifying")
            t.verified(t.timed("verify_s", self.verify, tb, c))

    # The hooks of run_trial, in the order it calls them. `c` is the named cell, `t`
    # the Trial (its metrics, sub-trials, phases and fail()).

    # The phase the load is timed as in the record's conditions.
    load_phase = "apply_s"

    def ruleset(self, c) -> RuleSet | None:
        """The rule set the cell loads (the default load and verify, the record's
        digest), or None when the experiment loads none."""
        return None

    def prepare(self, tb: Testbed, t: Trial, c, step) -> None:
        """Before the load: empty what the last trial left (the connection table),
        set what this cell sets (RPS steering), note what the load is compared with."""

    def standing(self, c) -> dict | None:
        """A verification that still holds for the cell's rule set, loaded and
        verified by an earlier trial (the sweeps' keep_loaded): then nothing is
        loaded or verified, and the record carries it. None: load and verify."""
        return None

    def load(self, tb: Testbed, c) -> float | None:
        """Load the cell's rule set in one step (every firewall flushed first);
        returns the load time, or None when the phase's wall time is it."""
        stats = self.backend(c.backend).apply(tb, self.ruleset(c))
        self._load_form = stats.form
        return stats.load_time_s

    def verify(self, tb: Testbed, c) -> Verification:
        """What the kernel holds is the rule set, and its probes end as it says (the
        backend's verification); a failed one is never measured."""
        return self.backend(c.backend).verify(tb, self.ruleset(c))

    def prove(self, tb: Testbed, t: Trial, c, say) -> None:
        """After verification, what the experiment must see before it measures (NAT
        and state with a real connection, every client's own rules counting); fails
        the trial with its reason when it does not hold."""

    @abc.abstractmethod
    def measure(self, tb: Testbed, t: Trial, c, say) -> None:
        """The measurement into `t` (metrics, sub-trials), each step timed as a
        phase; may fail the trial on what it measured."""

    def failed(self, tb: Testbed, t: Trial, c) -> None:
        """After an error failed the trial (its status says which kind): put back
        what the error may have broken (a receiver, a server)."""

    def release(self, tb: Testbed, t: Trial, c) -> None:
        """However the trial ended: release what it holds (background connections,
        the treatment). A failed release fails the trial, never the run."""

    @abc.abstractmethod
    def recorded_as(self, c) -> tuple[str, str]:
        """The record's method and traffic."""

    def digest(self, c) -> str | None:
        """The record's ruleset_sha256: the loaded rule set's."""
        rs = self.ruleset(c)
        return None if rs is None else rs.digest()

    def conditions(self, tb: Testbed, c) -> dict:
        """What the record keeps about the trial's setting (duration, rule set...)."""
        return {}

    @abc.abstractmethod
    def line(self, rec: TrialRecord) -> str:
        """What an ok trial found, in a few words (rich markup allowed)."""

    @abc.abstractmethod
    def summary(self, records: list[TrialRecord], meta: dict) -> RenderableType:
        """The table printed when the run ends."""


def _quiet(line: str) -> None:
    pass


def disturbed_of(method) -> dict:
    """The disturbed measurements a method took again since the last call
    (methods.base.Method.take_disturbed), for the trial's metrics; {} for a
    method that keeps its own (maxrate, cpucost)."""
    take = getattr(method, "take_disturbed", None)
    return take() if take is not None else {}

