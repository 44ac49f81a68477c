"""One drop-position trial's decisions, with the testbed and the kernel faked: a
treatment that fails verification is never flooded; a flood on a shared CPU is
redone, and stays `invalid` when every attempt was shared."""
from types import SimpleNamespace

import pytest

from fwbench import scenario
from fwbench.backends.base import Verification
from fwbench.experiments.droprate import experiment
from fwbench.experiments.droprate.treatments import RawDrop, Target
from fwbench.plan import TrialKey

T = Target("fwbabc123-f0", "198.18.0.2", "198.18.0.1")
TB = SimpleNamespace(topo=SimpleNamespace(run_id="abc123"))
SHARED = "the path CPU was shared: the sender and ksoftirqd/0 ran 60 % of the window"


@pytest.fixture
def fake(monkeypatch):
    calls = {"floods": 0, "cleared": 0}
    state = {"verified": True, "shared": 0}

    def flood(tb, tr, t, frame, duration, cpu, share):
        calls["floods"] += 1
        shared = calls["floods"] <= state["shared"]
        return ({"disposed_pps": 1e5 * calls["floods"]}, [SHARED] if shared else [])

    def verify(tb, tr, t, files, frame, packets):
        return Verification(state["verified"], 1,
                            None if state["verified"] else "probe: 0 of 2,000 dropped by it")

    monkeypatch.setattr(experiment, "clear", lambda tb, t: calls.__setitem__(
        "cleared", calls["cleared"] + 1))
    monkeypatch.setattr(experiment, "leftovers", lambda tb, t: [])
    monkeypatch.setattr(experiment.measure, "verify", verify)
    monkeypatch.setattr(experiment.measure, "flood", flood)
    monkeypatch.setattr(RawDrop, "load", lambda self, tb, files: None)
    monkeypatch.setattr(experiment, "_RETRY_PAUSE_S", 0)
    return calls, state


def trial(attempts=3):
    sc = scenario.load(None, {"method": "droprate"})
    sc = scenario.from_dict({**sc.dump(), "droprate": {**sc.droprate.model_dump(),
                                                      "attempts": attempts}})
    return experiment.run_trial(TB, RawDrop(), T, TrialKey(("raw", 1, 128), 0), 0, sc)


def test_clean_flood_counts_once(fake):
    calls, _ = fake
    rec = trial()
    assert rec.status == "ok" and calls["floods"] == 1 and len(rec.trials) == 1
    assert rec.metrics["disposed_pps"] == 1e5
    assert calls["cleared"] == 2  # before the load and after the trial


def test_shared_cpu_is_flooded_again_and_every_attempt_kept(fake):
    calls, state = fake
    state["shared"] = 2
    rec = trial()
    assert rec.status == "ok" and calls["floods"] == 3
    assert [a["problems"] for a in rec.trials] == [[SHARED], [SHARED], []]
    assert rec.metrics["disposed_pps"] == 3e5  # the clean attempt's, not the others'


def test_shared_every_time_is_invalid(fake):
    _, state = fake
    state["shared"] = 99
    rec = trial(attempts=2)
    assert rec.status == "invalid" and rec.reason == SHARED and len(rec.trials) == 2


def test_failed_verification_is_never_flooded(fake):
    calls, state = fake
    state["verified"] = False
    rec = trial()
    assert rec.status == "failed" and calls["floods"] == 0 and rec.metrics == {}
    assert rec.reason == "verification: probe: 0 of 2,000 dropped by it"
    assert calls["cleared"] == 2  # before the load and after the trial


def test_leftovers_fail_the_trial_before_anything_loads(fake, monkeypatch):
    monkeypatch.setattr(experiment, "leftovers", lambda tb, t: ["an XDP program"])
    rec = trial()
    assert rec.status == "failed" and "left an XDP program" in rec.reason
