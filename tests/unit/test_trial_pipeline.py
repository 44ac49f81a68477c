"""The one trial pipeline (Experiment.run_trial) with an experiment of hooks that
note their calls: the order, where a failure stops it, which errors make a trial
`failed` or `invalid`, that release runs however it ends, and that a standing
verification skips the load. The testbed and backend are stand-ins (no root)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from fwbench import scenario
from fwbench.backends.base import Verification
from fwbench.errors import FwbenchError, MeasurementInvalid
from fwbench.experiments.base import Experiment
from fwbench.plan import TrialKey, named_cell

TB = SimpleNamespace(topo=SimpleNamespace(run_id="abc123"))
KEY = TrialKey(("nftables", 100, 64), 2)


class Stub(Experiment):
    """Every hook notes its call; `fails` names the hook that raises or fails."""

    def __init__(self, fails: dict | None = None, standing: dict | None = None):
        super().__init__(scenario.load(None, {}))
        self.calls: list[str] = []
        self.fails = fails or {}
        self.kept = standing

    def _hook(self, name, t=None):
        self.calls.append(name)
        how = self.fails.get(name)
        if isinstance(how, BaseException):
            raise how
        if how is not None:
            t.fail(how)

    def plan(self): ...
    def versions(self, planned): ...
    def topology(self): ...
    def open(self, tb, plan, console): ...
    def line(self, rec): ...
    def summary(self, records, meta): ...

    def ruleset(self, c):
        return SimpleNamespace(digest=lambda: f"sha-{c.backend}-{c.rules}")

    def prepare(self, tb, t, c, step):
        self._hook("prepare", t)

    def standing(self, c):
        return self.kept

    def load(self, tb, c):
        self._hook("load")
        return 0.25

    def verify(self, tb, c):
        self.calls.append("verify")
        ok = "verify" not in self.fails
        return Verification(ok, c.rules, None if ok else "2 of 9 probes forwarded")

    def prove(self, tb, t, c, say):
        self._hook("prove", t)

    def measure(self, tb, t, c, say):
        self._hook("measure", t)
        t.metrics = {"pps": 1.0, "frame": c.frame_size}

    def failed(self, tb, t, c):
        self.calls.append(f"failed:{t.status}")

    def release(self, tb, t, c):
        self.calls.append("release")

    def recorded_as(self, c):
        return "stub", "none"

    def conditions(self, tb, c):
        return {"cell_backend": c.backend}


def test_the_hooks_run_in_order_into_one_record():
    exp = Stub()
    rec = exp.run_trial(TB, KEY, 7)
    assert exp.calls == ["prepare", "load", "verify", "prove", "measure", "release"]
    assert rec.status == "ok" and rec.trial == 7 and rec.repetition == 2
    assert rec.factors == {"backend": "nftables", "rules": 100, "frame_size": 64}
    assert rec.metrics == {"pps": 1.0, "frame": 64}
    assert (rec.method, rec.traffic, rec.ruleset_sha256) == ("stub", "none", "sha-nftables-100")
    assert rec.load_time_s == 0.25 and rec.verification["ok"] is True
    assert rec.conditions["cell_backend"] == "nftables"
    assert set(rec.conditions["phases"]) == {"apply_s", "verify_s"}


def test_a_failed_verification_is_never_proved_or_measured():
    exp = Stub({"verify": "no"})
    rec = exp.run_trial(TB, KEY, 0)
    assert exp.calls == ["prepare", "load", "verify", "release"]
    assert rec.status == "failed" and rec.reason == "verification: 2 of 9 probes forwarded"
    assert rec.metrics == {}


def test_a_failed_proof_is_never_measured():
    exp = Stub({"prove": "NAT and state proof: no entry"})
    rec = exp.run_trial(TB, KEY, 0)
    assert exp.calls == ["prepare", "load", "verify", "prove", "release"]
    assert rec.status == "failed" and rec.reason == "NAT and state proof: no entry"


@pytest.mark.parametrize("error, status", [
    (MeasurementInvalid("the instrument lost packets"), "invalid"),
    (FwbenchError("the receiver died"), "failed")])
def test_an_error_is_the_trials_status_and_release_still_runs(error, status):
    exp = Stub({"measure": error})
    rec = exp.run_trial(TB, KEY, 0)
    assert exp.calls[-2:] == [f"failed:{status}", "release"]
    assert rec.status == status and rec.reason == str(error)


def test_an_error_before_the_load_loads_nothing():
    exp = Stub({"prepare": FwbenchError("clearing the firewall left an XDP program")})
    rec = exp.run_trial(TB, KEY, 0)
    assert exp.calls == ["prepare", "failed:failed", "release"]
    assert rec.verification["reason"] == "not reached" and rec.load_time_s is None


def test_a_failed_preparation_loads_nothing():
    exp = Stub({"prepare": "RPS steering: no such CPU"})
    rec = exp.run_trial(TB, KEY, 0)
    assert exp.calls == ["prepare", "release"] and rec.status == "failed"


def test_anything_else_propagates_after_release():
    exp = Stub({"measure": KeyboardInterrupt()})
    with pytest.raises(KeyboardInterrupt):
        exp.run_trial(TB, KEY, 0)
    assert exp.calls[-1] == "release"


def test_a_standing_verification_is_neither_loaded_nor_verified_again():
    exp = Stub(standing={"ok": True, "rules_loaded": 100, "reason": None, "kept_from": 3})
    rec = exp.run_trial(TB, KEY, 4)
    assert exp.calls == ["prepare", "prove", "measure", "release"]
    assert rec.verification["kept_from"] == 3 and rec.load_time_s is None


def test_a_cell_with_no_rule_set_loads_nothing():
    exp = Stub()
    exp.ruleset = lambda c: None
    rec = exp.run_trial(TB, KEY, 0)
    assert exp.calls == ["prepare", "prove", "measure", "release"]
    assert rec.ruleset_sha256 is None and rec.status == "ok"


def test_the_cell_is_a_named_record_equal_to_the_plans_tuple():
    c = Stub().cell(KEY)
    assert (c.backend, c.rules, c.frame_size) == ("nftables", 100, 64)
    assert c == KEY.cell and hash(c) == hash(KEY.cell)
    assert named_cell(("backend", "rules", "frame_size")) is type(c)
