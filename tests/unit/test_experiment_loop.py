"""A toy experiment, added the way a real one is (a class, its declaration and one
catalog line), through the one run loop: plan, interleaving,
interruption, resume, adaptive rounds and the report. Its testbed is a stand-in,
so this runs without root; the real experiments run the same loop in
tests/privileged (test_run.py, test_droprate.py)."""
from __future__ import annotations

import io
import json
import random
import sys

import pytest
from rich.console import Console

from fwbench import catalog
from fwbench.errors import FwbenchError
from fwbench.experiments import loop
from fwbench.experiments.base import Experiment, Planned, Trial
from fwbench.experiments.room import Room
from fwbench.metrics import Metric
from fwbench.report import build
from fwbench.results import TrialRecord
from fwbench.scenario import from_dict
from fwbench.testbed.topology import Topology

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from tests.runrecords import records  # noqa: E402

EVENTS: list[str] = []
STOP_AT: list[int] = []      # trial counts at which the toy raises Interrupted
BREAK_AT: list[tuple[int, int]] = []   # (trial count, testbeds) at which a trial breaks it
BROKEN: list[bool] = []      # the current stand-in testbed is broken
INVALID: dict[tuple, int] = {}   # cell -> how many more of its trials come out invalid


class Bed:
    """A testbed that builds nothing: what the loop reads of one."""

    def __init__(self, topo: Topology):
        self.topo, self.recorded = topo, {"toy": True}

    def __enter__(self):
        EVENTS.append(f"built {self.topo.run_id}")
        BROKEN.clear()
        return self

    def __exit__(self, *exc):
        EVENTS.append(f"removed {self.topo.run_id}")

    def health(self) -> str | None:
        return "the toy link is gone" if BROKEN else None


class Toy(Experiment):
    """Two variants a and b at two sizes; b is 20 % slower, with noise. Two factors
    of its own: neither a backend nor a rule count."""
    factors = ("variant", "size")

    def preflight(self) -> None:
        EVENTS.append("check")

    def plan(self) -> Planned:
        return Planned(self.sc, [(v, s) for v in ("a", "b") for s in (64, 1518)],
                       {"toy_meta": 1}, ["a note before the run"])

    def versions(self, planned):
        return {"toy": "1.0"}

    def topology(self) -> Topology:
        return Topology.new()

    def testbed(self):
        return Bed(self.topology())

    def open(self, tb, plan, console) -> dict:
        EVENTS.append("open")
        return {"toy_session": len(plan)}

    def close(self, tb) -> None:
        EVENTS.append("close")

    # The trial: Experiment.run_trial's pipeline, with a measurement alone (the toy
    # loads no rule set).

    def measure(self, tb, t: Trial, c, say) -> None:
        n = sum(e == "trial" for e in EVENTS)
        if n in STOP_AT:
            STOP_AT.remove(n)
            raise loop.Interrupted("SIGTERM")
        EVENTS.append("trial")
        key = t.key
        rng = random.Random(f"{key}")
        built = sum(e.startswith("built") for e in EVENTS)
        if any(n == at and built in beds for at, *beds in BREAK_AT):
            BROKEN.append(True)
            t.fail("the probe got no answer")
            return
        if INVALID.get(key.cell):
            INVALID[key.cell] -= 1
            t.fail(f"the instrument lost packets ({key.cell} rep {key.repetition})",
                   "invalid")
            return
        t.load_time_s = 0.001
        t.metrics = {"toy_pps": (1e6 if c.variant == "a" else 8e5) *
                     (1 + rng.uniform(-0.01, 0.01))}

    def recorded_as(self, c) -> tuple[str, str]:
        return "toy", "none"

    def line(self, rec: TrialRecord) -> str:
        return f"{rec.metrics['toy_pps']:,.0f} pps"

    def summary(self, records, meta):
        return f"{len(records)} toy trials"


ROOM = Room("toy", f"{__name__}:Toy", "a toy", "toy rate", (
    Metric("toy_pps", "toy rate", "packets/s", True,
           lambda r: r.metrics["toy_pps"], throughput=True, column="toy pps"),
    Metric("load_time_ms", "load time", "ms", False, lambda r: 1e3 * r.load_time_s,
           column="load ms")))


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(catalog.EXPERIMENTS, "toy", f"{__name__}:ROOM")
    for state in (EVENTS, STOP_AT, BREAK_AT, BROKEN, INVALID):
        state.clear()
    yield
    STOP_AT.clear()
    BREAK_AT.clear()
    INVALID.clear()


def test_a_toy_experiment_runs_resumes_and_reports(toy, tmp_path):
    sc = from_dict({"name": "toy", "method": "toy", "repeat": 3, "seed": 5})
    d, out = tmp_path / "run", io.StringIO()
    console = Console(file=out, width=200)
    STOP_AT.append(5)
    with pytest.raises(loop.Interrupted):
        loop.start(sc, d, console)
    # the testbed went away however the run ended, after the experiment closed
    built = next(e for e in EVENTS if e.startswith("built"))
    assert EVENTS[:3] == ["check", built, "open"]       # checked once, before the testbed
    assert EVENTS[-2:] == ["close", built.replace("built", "removed")]
    assert len(records(d)) == 5
    meta = json.loads((d / "run.json").read_text())
    assert meta["toy_meta"] == 1 and meta["environment"]["tools"]["toy"] == "1.0"
    assert meta["factors"] == ["variant", "size"]
    assert meta["sessions"][0]["toy_session"] == 12
    assert meta["sessions"][0]["testbed"]["toy"] is True
    # seeded interleaving: every cell once per round, each round its own order
    plan = [(k["variant"], k["size"], k["repetition"]) for k in meta["plan"]]
    rounds = [[p[:2] for p in plan if p[2] == r] for r in range(3)]
    assert all(sorted(r) == sorted(rounds[0]) for r in rounds) and len(rounds[0]) == 4
    assert rounds[0] != rounds[1] or rounds[1] != rounds[2]
    assert "a note before the run" in out.getvalue()

    outcome = loop.resume(d, console)
    assert outcome.planned == len(outcome.records) == 12
    keys = [(r["factors"]["variant"], r["factors"]["size"], r["repetition"])
            for r in records(d)]
    assert sorted(keys) == sorted(plan)          # each planned trial exactly once
    assert [r["trial"] for r in records(d)] == sorted(r["trial"] for r in records(d))
    assert len(json.loads((d / "run.json").read_text())["sessions"]) == 2
    assert outcome.summary == "12 toy trials"
    assert "[12/12] variant=" in out.getvalue()

    rep = build(d, tmp_path / "report")
    md = rep.html.with_name("report.md").read_text()
    assert "toy rate" in md and " b " in md


def test_adaptive_rounds_for_a_toy(toy, tmp_path):
    sc = from_dict({"name": "toy", "method": "toy", "repeat": 2, "seed": 5,
                    "adaptive": {"max_repeat": 4, "rel_width": 1e-9}})
    d = tmp_path / "run"
    outcome = loop.start(sc, d, Console(file=io.StringIO()))
    assert outcome.planned == len(outcome.records) == 16   # every cell to the cap
    meta = json.loads((d / "run.json").read_text())
    assert [r["round"] for r in meta["adaptive"]["rounds"]] == [1, 2]
    assert EVENTS.count("open") == 1     # one session for planned and adaptive trials


def test_a_broken_testbed_is_rebuilt_and_the_trial_runs_again(toy, tmp_path):
    """The 3rd trial breaks the first testbed: it is not recorded, a new testbed is
    built and runs it again. The 6th trial overall breaks the second testbed and, run
    again, the third too: the treatment, not chance, so it is recorded as failed with
    both reasons and the run finishes on a fourth."""
    sc = from_dict({"name": "toy", "method": "toy", "repeat": 2, "seed": 5})
    BREAK_AT.extend([(2, 1), (5, 2), (6, 3)])
    out = io.StringIO()
    outcome = loop.start(sc, tmp_path / "run", Console(file=out, width=200))
    recs = records(tmp_path / "run")
    assert outcome.planned == len(recs) == 8       # every planned trial exactly once
    assert sorted(r["trial"] for r in recs) == list(range(8))
    failed = [r for r in recs if r["status"] != "ok"]
    assert len(failed) == 1 and "broke the testbed twice" in failed[0]["reason"]
    assert "the probe got no answer" in failed[0]["reason"]
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    sessions = meta["sessions"]
    assert len(sessions) == 4 and "rebuilt_after" not in sessions[0]
    assert all("the toy link is gone" in s["rebuilt_after"] for s in sessions[1:])
    built = [e for e in EVENTS if e.startswith("built")]
    removed = [e for e in EVENTS if e.startswith("removed")]
    assert len(built) == len(removed) == 4 and EVENTS.count("close") == 4
    assert out.getvalue().count("the testbed broke") == 3


def test_a_testbed_that_keeps_breaking_ends_the_run(toy, tmp_path):
    sc = from_dict({"name": "toy", "method": "toy", "repeat": 2, "seed": 5})
    BREAK_AT.extend([(n, b) for n in range(8) for b in range(1, 9)])
    with pytest.raises(FwbenchError, match="the testbed broke 4 times"):
        loop.start(sc, tmp_path / "run", Console(file=io.StringIO()))
    built = [e for e in EVENTS if e.startswith("built")]
    assert len(built) == 4 and len([e for e in EVENTS if e.startswith("removed")]) == 4


def test_invalid_trials_run_again_later_at_most_twice_per_cell(toy, tmp_path):
    """Cell a/64's first trial is invalid once: it runs again after the planned
    trials and its second try stands. Every trial of b/1518 is invalid: its cell
    gets two re-runs in all, then its trials are recorded invalid. run.json and the
    console count the re-runs."""
    sc = from_dict({"name": "toy", "method": "toy", "repeat": 2, "seed": 5})
    INVALID.update({("a", 64): 1, ("b", 1518): 99})
    out = io.StringIO()
    outcome = loop.start(sc, tmp_path / "run", Console(file=out, width=200))
    recs = records(tmp_path / "run")
    assert outcome.planned == len(recs) == 8      # every planned trial recorded once
    keys = [(r["factors"]["variant"], r["factors"]["size"], r["repetition"]) for r in recs]
    assert sorted(keys) == sorted((v, s, n) for v in "ab" for s in (64, 1518)
                                  for n in range(2))
    bad = {k for k, r in zip(keys, recs) if r["status"] != "ok"}
    assert bad == {("b", 1518, 0), ("b", 1518, 1)}
    assert all(r["status"] == "invalid" for r in recs if r["status"] != "ok")
    # The re-runs come after every planned trial's first try, in plan order.
    plan = json.loads((tmp_path / "run" / "run.json").read_text())["plan"]
    order = [(k["variant"], k["size"], k["repetition"]) for k in plan]
    again = sorted([("a", 64, 0), ("b", 1518, 0), ("b", 1518, 1)], key=order.index)
    assert keys == [k for k in order if k not in again] + again
    assert EVENTS.count("trial") == 8 + 3
    reruns = json.loads((tmp_path / "run" / "run.json").read_text())["reruns"]
    assert reruns["trials"] == 3 and reruns["cells"] == {"a/64": 1, "b/1518": 2}
    assert all("the instrument lost packets" in r for r in reruns["reasons"])
    assert out.getvalue().count("runs again later in this run") == 3
    assert "3 trials run again after the instrument made them invalid" in out.getvalue()
    rep = build(tmp_path / "run", tmp_path / "report")
    assert "3 trials run again after the instrument made them invalid" in \
        rep.html.with_name("report.md").read_text()
