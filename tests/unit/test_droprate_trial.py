"""One drop-position trial's decisions (the one trial pipeline, with droprate's
hooks), with the testbed and the kernel faked: a treatment whose listing or probe
fails is never flooded; a flood on a shared CPU is redone, and stays `invalid`
when every attempt was shared."""
from types import SimpleNamespace

import pytest

from fwbench import scenario
from fwbench.backends.base import Verification
from fwbench.experiments.droprate import experiment, measure
from fwbench.experiments.droprate.treatments import RawDrop, Target
from fwbench.plan import TrialKey

T = Target("fwbabc123-f0", "198.18.0.2", "198.18.0.1")
TB = SimpleNamespace(topo=SimpleNamespace(run_id="abc123"))
SHARED = "the path CPU was shared: the sender and ksoftirqd/0 ran 60 % of the window"


@pytest.fixture
def fake(monkeypatch):
    calls = {"floods": 0, "cleared": 0}
    state = {"verified": True, "listed": True, "shared": 0}

    def flood(tb, tr, t, frame, duration, cpu, share):
        calls["floods"] += 1
        shared = calls["floods"] <= state["shared"]
        return ({"disposed_pps": 1e5 * calls["floods"]}, [SHARED] if shared else [])

    def listing(tb, tr, t, files):
        return Verification(state["listed"], 1, None if state["listed"] else
                            "the kernel's rule set differs from the rendered one: ...",
                            {"listing": {"backend": "iptables-legacy"}})

    def prove(tb, tr, t, frame, packets):
        calls["probes"] = calls.get("probes", 0) + 1
        return measure.Proof(state["verified"],
                             None if state["verified"] else "probe: 0 of 2,000 dropped by it",
                             {"probe": {"sent": packets}})

    monkeypatch.setattr(experiment, "clear", lambda tb, t: calls.__setitem__(
        "cleared", calls["cleared"] + 1))
    monkeypatch.setattr(experiment, "leftovers", lambda tb, t: [])
    monkeypatch.setattr(experiment.measure, "listing", listing)
    monkeypatch.setattr(experiment.measure, "prove", prove)
    monkeypatch.setattr(experiment.measure, "flood", flood)
    monkeypatch.setattr(RawDrop, "apply", lambda self, tb, t: 0.001)
    monkeypatch.setattr(experiment, "_RETRY_PAUSE_S", 0)
    return calls, state


def trial(attempts=3):
    sc = scenario.load(None, {"method": "droprate"})
    sc = scenario.from_dict({**sc.dump(), "droprate": {**sc.droprate.model_dump(),
                                                      "attempts": attempts}})
    exp = experiment.DropRate(sc)
    exp.trs, exp.target = {("raw", 1): RawDrop()}, T
    return exp.run_trial(TB, TrialKey(("raw", 1, 128), 0), 0)


def test_clean_flood_counts_once(fake):
    calls, _ = fake
    rec = trial()
    assert rec.status == "ok" and calls["floods"] == 1 and len(rec.trials) == 1
    assert rec.metrics["disposed_pps"] == 1e5
    assert calls["cleared"] == 2  # before the load and after the trial
    # the probe's account is kept in the verification, beside the listing
    assert rec.verification == {"ok": True, "rules_loaded": 1, "reason": None, "details": {
        "listing": {"backend": "iptables-legacy"}, "probe": {"sent": 2000}}}
    assert rec.load_time_s == 0.001


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
    assert rec.verification["ok"] is False
    assert rec.verification["reason"] == "probe: 0 of 2,000 dropped by it"
    assert calls["cleared"] == 2  # before the load and after the trial


def test_a_listing_that_differs_is_never_probed(fake):
    calls, state = fake
    state["listed"] = False
    rec = trial()
    assert rec.status == "failed" and "probes" not in calls and calls["floods"] == 0
    assert rec.reason.startswith("verification: the kernel's rule set differs")


def test_leftovers_fail_the_trial_before_anything_loads(fake, monkeypatch):
    monkeypatch.setattr(experiment, "leftovers", lambda tb, t: ["an XDP program"])
    rec = trial()
    assert rec.status == "failed" and "left an XDP program" in rec.reason
