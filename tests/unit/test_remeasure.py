"""Disturbed measurements taken again in every method on the engine's measurer
(methods.base.Remeasuring), and counted in the report (report.analysis
.disturbance), with a measurer that plays canned CPU figures: nothing is measured."""
from __future__ import annotations

from types import SimpleNamespace

from fwbench.experiments.base import disturbed_of
from fwbench.measurer import TrialResult
from fwbench.methods import base
from fwbench.experiments.sweep.cpucost import CpuCost
from fwbench.experiments.sweep.latency import Latency
from fwbench.experiments.sweep.lossload import LossLoad
from fwbench.report import analysis as an

QUIET = {"drift": {"others": 0.01, "steal": 0.0}}
BUSY = {"drift": {"others": 0.30, "steal": 0.0}}


class Canned:
    """Answers each measure() with the next (cpu, received of 1,000) it was given."""

    def __init__(self, *plays):
        self.plays = list(plays)
        self.calls = 0

    def measure(self, duration_s, offered_pps):
        cpu, received = self.plays[self.calls]
        self.calls += 1
        return TrialResult(offered_pps=offered_pps or 1000.0, duration_s=duration_s,
                           sent=1000, received=received, achieved_pps=1000.0, cpu=cpu,
                           extra={"open_throttle": offered_pps <= 0})


def test_a_disturbed_lossy_measurement_is_taken_again_until_it_is_not():
    log = []
    m = base.Remeasuring(Canned((BUSY, 900), (QUIET, 990)), log)
    r = m.measure(1.0, 5000)
    assert r.received == 990 and "disturbed" not in r.extra
    assert log == [{"offered_pps": 5000, "sent": 1000, "received": 900,
                    "disturbed": "other tasks took 30% of the firewall CPU", "kept": False}]


def test_at_most_redo_times_and_the_last_says_it_was_disturbed():
    log = []
    canned = Canned(*[(BUSY, 900)] * 5)
    r = base.Remeasuring(canned, log).measure(1.0, 5000)
    assert canned.calls == base.REDO + 1
    assert r.extra["disturbed"].startswith("other tasks took 30%")
    assert [e["kept"] for e in log] == [False] * base.REDO + [True]


def test_a_disturbance_that_could_not_have_moved_it_is_kept():
    # lossless at a fixed load: the firewall kept up despite the disturbance
    canned = Canned((BUSY, 1000))
    log = []
    assert base.Remeasuring(canned, log).measure(1.0, 5000).received == 1000
    assert canned.calls == 1 and log == []
    # ...unless the method's result is latency, which any disturbance moves
    canned = Canned((BUSY, 1000), (QUIET, 1000))
    base.Remeasuring(canned, log, always=True).measure(1.0, 5000)
    assert canned.calls == 2 and len(log) == 1
    # open throttle: the rate is the result
    canned = Canned((BUSY, 1000), (QUIET, 1000))
    base.Remeasuring(canned, [], always=False).measure(1.0, 0)
    assert canned.calls == 2


def test_methods_remeasure_through_their_measurer_and_hand_the_count_over():
    engine = SimpleNamespace(measurer=lambda tb, f: Canned((BUSY, 500), (QUIET, 990)))
    m = LossLoad(engine, SimpleNamespace())
    r = m.measurer(None, 64).measure(1.0, 5000)
    assert r.received == 990
    got = disturbed_of(m)
    assert got["disturbed_measurements"]["retaken"] == 1
    assert got["disturbed_measurements"]["kept"] == 0
    assert disturbed_of(m) == {}                     # taken once, then empty
    assert Latency.remeasure_always and not LossLoad.remeasure_always
    # cpucost's soaker takes the firewall's CPU on purpose: it judges by itself
    assert CpuCost.remeasure is False
    assert disturbed_of(SimpleNamespace()) == {}     # maxrate keeps its own


def rec(metrics, trials=()):
    return SimpleNamespace(metrics=metrics, trials=list(trials), status="ok",
                           repetition=0)


def test_the_report_counts_them_whoever_measured():
    assert an.disturbance(rec({"disturbed_measurements": {"retaken": 3, "kept": 1,
                                                          "attempts": []}})) == (3, 1)
    # maxrate: each disturbed attempt a sub-trial, the kept one flagged
    assert an.disturbance(rec({"disturbed": "x"}, [{"disturbed": "x"}] * 3)) == (2, 1)
    assert an.disturbance(rec({}, [{"disturbed": "x"}])) == (1, 0)
    # cpucost: disturbed attempts flagged True
    assert an.disturbance(rec({"disturbed": False}, [{"disturbed": True}])) == (1, 0)
    assert an.disturbance(rec({}, [{"offered_pps": 1}])) == (0, 0)


def test_the_note_names_what_kept_a_disturbed_measurement():
    recs = [rec({"disturbed_measurements": {"retaken": 2, "kept": 0, "attempts": []}}),
            rec({"disturbed": "x"}, [{"disturbed": "x"}] * 3), rec({})]
    data = SimpleNamespace(ok=recs, cell=lambda r: ("b",), label=lambda c: c[0])
    note = an.disturbance_note(data)
    assert "4 measurements in 2 of 3 trials taken again" in note.detail
    assert note.cells == "b rep 0" and "1 trial kept a disturbed one" in note.detail
    assert an.disturbance_note(SimpleNamespace(ok=[rec({})])) is None


class Counters:
    """A firewall whose input counters grow by what each measurement delivered."""

    def __init__(self):
        self.delivered = 0

    def snmp(self, host):
        return {"Ip:InDelivers": self.delivered}

    own_traffic = False


def test_a_fixedrate_point_is_measured_again_with_its_own_counters():
    """An INPUT flow's loss is read from the firewall's counters around the
    measurement: a re-take reads them around itself alone, never summed over the
    attempts (the receiver counts nothing of such a flow)."""
    from fwbench.experiments.fixedrate.method import FixedRate
    from fwbench.experiments.fixedrate import FixedRateSettings

    tb = Counters()

    class Delivering(Canned):
        def measure(self, duration_s, offered_pps):
            tb.delivered += [900, 1000][self.calls]     # the first lost 100
            r = super().measure(duration_s, offered_pps)
            return r

    fr = FixedRate(SimpleNamespace(), FixedRateSettings(), 1000, count_delivered=True)
    fr._tb = tb
    m = Delivering((BUSY, 0), (QUIET, 0))
    out = fr._point(m, 1.0, 1000)
    assert out["delivered"] == 1000 and out["loss_ratio"] == 0.0
    got = disturbed_of(fr)["disturbed_measurements"]
    assert got["retaken"] == 1 and got["attempts"][0]["loss_ratio"] == 0.1
    assert FixedRate.remeasure is False       # not the measurer's: it would sum them
