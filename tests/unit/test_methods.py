"""The methods built on `measure(duration, load)`, against the simulated firewall:
no root, no traffic. The engine is replaced by a stand-in whose measurer is a
SimulatedFirewall, so only the method's own logic is under test."""
import math

import pytest

from fwbench.testbed.base import REFLECT_PPS
from fwbench.errors import MeasurementInvalid
from fwbench.experiments.fixedrate.method import FixedRate, flow_pps
from fwbench.experiments.sweep.latency import Latency
from fwbench.experiments.sweep.lossload import LossLoad
from fwbench.measurer import TrialResult
from fwbench.methods.simulated import SimulatedFirewall
from fwbench.experiments.sweep.throughput import Throughput
from fwbench.experiments.fixedrate import FixedRateSettings
from fwbench.experiments.sweep import LatencySettings, LossLoadSettings, ThroughputSettings


class FakeEngine:
    name = "simulated"

    def __init__(self, fw):
        self.fw = fw

    def measurer(self, tb, frame_size):
        return self.fw

    def versions(self):
        return {}


def method_with(cls, fw, *args, ceiling=1_000_000.0):
    m = cls(FakeEngine(fw), *args)
    m.ceilings[64] = m.ceilings[128] = ceiling
    return m


def test_throughput_records_ndr_pdr_bounds_and_every_trial():
    fw = SimulatedFirewall(true_ndr_pps=40_000, noise=0.005, knee=0.05, seed=3)
    m = method_with(Throughput, fw, ThroughputSettings())
    out = m.run(None, 64, 1.0)
    # What the search promises (test_search.py): bounds within the configured width
    # (1 %), around the simulator's true rate widened by 3 noise sigmas.
    for key, loss in (("ndr", 0.0), ("pdr", 0.005)):
        lo, hi = out[f"{key}_bounds_pps"]
        assert out[f"{key}_finished"] and out[f"{key}_pps"] == lo
        assert (hi - lo) / hi <= 0.01 * (1 + 1e-9)
        assert lo * (1 - 3 * 0.005) <= fw.true_rate(loss) <= hi * (1 + 3 * 0.005), key
    assert fw.true_rate(0.0) == 40_000 and out["pdr_pps"] >= out["ndr_pps"]
    assert len(out["trials"]) == fw.calls and out["trials"][0]["phase"] == "warmup"


def test_lossload_steps_down_until_two_clean_loads():
    fw = SimulatedFirewall(true_ndr_pps=450_000, seed=1)
    m = method_with(LossLoad, fw, LossLoadSettings(step=0.1))
    out = m.run(None, 64, 1.0)
    loads = [p["offered_pps"] for p in out["curve"]]
    # 1.0M .. 0.5M lose, 0.4M and 0.3M are clean: stop there.
    assert [round(x) for x in loads] == [round(1e6 * (1 - 0.1 * i)) for i in range(8)]
    assert out["curve"][0]["loss_ratio"] > 0.5
    assert math.isclose(out["max_lossless_offered_pps"], 400_000)
    assert all(p["loss_ratio"] == 0 for p in out["curve"][-2:])


class RuleCostFirewall:
    """A firewall whose capacity falls with the rule count: 1/pps = a + b*N."""

    def __init__(self, a_ns=500.0, b_ns=10.0):
        self.a, self.b, self.n = a_ns, b_ns, 1
        self.reloads = []

    def reload(self, n):
        self.n = n
        self.reloads.append(n)

    def measure(self, duration_s, offered_pps):
        cap = 1e9 / (self.a + self.b * self.n)
        return SimulatedFirewall(true_ndr_pps=cap, seed=self.n).measure(duration_s, offered_pps)

    def degradation_rules(self, pps):
        return (1e9 / pps - self.a) / self.b


def test_fixedrate_finds_the_degradation_point_by_search():
    fw = RuleCostFirewall()
    pps = flow_pps(128)
    assert math.isclose(pps, 15e6 / 1024)
    m = method_with(FixedRate, fw, FixedRateSettings(rules_width=0.05), 20_000)
    fw.reload(20_000)
    out = m.run(None, 128, 1.0, rules=20_000, reload=fw.reload)
    true_n = fw.degradation_rules(pps)  # ~6,777 rules
    lo, hi = out["degradation_bounds"]
    assert lo <= true_n <= hi and (hi - lo) / hi <= 0.05
    assert out["loss_ratio"] > 0 and fw.reloads[-1] == 20_000  # cell's rule set restored
    assert len(out["trials"]) < 20  # a search, not a grid


def test_fixedrate_does_not_search_below_the_largest_cell():
    fw = RuleCostFirewall()
    m = method_with(FixedRate, fw, FixedRateSettings(), 20_000)
    fw.reload(10_000)
    out = m.run(None, 128, 1.0, rules=10_000, reload=fw.reload)
    assert "degradation_bounds" not in out and fw.reloads == [10_000]


class FakePing:
    def measure(self, tb, frame_size):
        return {"rtt_us_median": 40.0}

    def versions(self):
        return {}


def test_latency_points_follow_the_search():
    fw = SimulatedFirewall(true_ndr_pps=100_000, knee=0.05, seed=2)
    m = method_with(Latency, fw, ThroughputSettings(), LatencySettings(), FakePing())
    out = m.run(None, 64, 1.0)
    pts = out["latency_us"]
    assert set(pts) == {"idle", "pdr_10", "pdr_50", "pdr_90", "ndr"}
    assert pts["idle"]["offered_pps"] == 1000
    assert math.isclose(pts["pdr_50"]["offered_pps"], 0.5 * out["pdr_pps"])
    assert pts["ndr"]["loss_ratio"] == 0 and pts["ndr"]["p50"] > pts["idle"]["p50"]
    assert out["ping_one_way_us"] == 20.0


def test_no_loss_up_to_the_sender_ceiling_is_reported_as_a_floor():
    """A firewall faster than the sender: the NDR is 'at least the ceiling', and the
    record must not present it as the firewall's throughput."""
    fw = SimulatedFirewall(true_ndr_pps=5_000_000, seed=4)
    m = method_with(Throughput, fw, ThroughputSettings())
    out = m.run(None, 64, 1.0)
    assert out["ndr_bounds_pps"] == [1_000_000.0, None]
    assert out["ndr_generator_limited"] is True and "NDR >=" in m.line(out)


class SenderDiesBelow:
    """The simulated firewall, except that below `dead_below_pps` the sender gets
    nothing out: the result a broken instrument hands back."""

    def __init__(self, fw, dead_below_pps):
        self.fw, self.dead_below = fw, dead_below_pps

    def measure(self, duration_s, offered_pps):
        if offered_pps < self.dead_below:
            return TrialResult(offered_pps=offered_pps, duration_s=duration_s, sent=0,
                               received=0, achieved_pps=0.0)
        return self.fw.measure(duration_s, offered_pps)


def test_a_trial_that_sent_nothing_cannot_exist():
    """0 sent, 0 received would read as loss ratio 0: lossless. It is invalid."""
    with pytest.raises(MeasurementInvalid, match="sent nothing at 5,000 pps offered for 1 s"):
        TrialResult(offered_pps=5000, duration_s=1.0, sent=0, received=0, achieved_pps=0)


@pytest.mark.parametrize("cls, settings", [(Throughput, ThroughputSettings()),
                                           (LossLoad, LossLoadSettings(step=0.1))])
def test_a_step_that_sent_nothing_makes_the_cell_invalid_not_lossless(cls, settings):
    """The firewall loses above 450k; below 700k the sender sends nothing. Read as
    lossless, those steps would give an NDR/lossless load of ~450-700k."""
    fw = SenderDiesBelow(SimulatedFirewall(true_ndr_pps=450_000, seed=1), 700_000)
    m = method_with(cls, fw, settings)
    with pytest.raises(MeasurementInvalid, match="sender sent nothing"):
        m.run(None, 64, 1.0)


def test_a_degradation_step_that_sent_nothing_is_not_lossless():
    """The bisection over the rule count asks 'does n rules lose?': a step where the
    sender sent nothing must not answer 'no'."""
    fw = RuleCostFirewall()

    class DiesBelow5000Rules:
        def measure(self, duration_s, offered_pps):
            if fw.n < 5000:
                return TrialResult(offered_pps=offered_pps, duration_s=duration_s,
                                   sent=0, received=0, achieved_pps=0.0)
            return fw.measure(duration_s, offered_pps)

    m = method_with(FixedRate, DiesBelow5000Rules(), FixedRateSettings(), 20_000)
    fw.reload(20_000)
    with pytest.raises(MeasurementInvalid):
        m.run(None, 128, 1.0, rules=20_000, reload=fw.reload)


def test_overload_rate_is_taken_over_the_arrival_span():
    """A saturated firewall's count moves in steps of its backlog (1,001 packets):
    the rate comes from when the packets arrived, not from the trial's length. Too
    short a span (a burst, a stall) falls back to the duration, and says so."""
    from fwbench.traffic.native import overload_rate

    def trial(received, span):
        return TrialResult(offered_pps=0, duration_s=3.0, sent=6_000_000,
                           received=received, achieved_pps=2e6,
                           extra={"arrival_span_s": span})
    rate, over = overload_rate(trial(14_078, 3.05))
    assert over == "arrival span" and rate == pytest.approx(14_077 / 3.05)
    rate, over = overload_rate(trial(14_078, 1.0))
    assert over == "trial duration" and rate == pytest.approx(14_078 / 3.0)
    assert overload_rate(trial(1, None)) == (pytest.approx(1 / 3.0), "trial duration")


def test_round_trips_reflect_about_5000_packets_a_second():
    """The server's sink reflects every packet whose sequence number is a multiple of
    a power of two: all of them up to 5,000 pps, then halving, so a trial's samples
    stay a few thousand a second and the return load a small share of the load."""
    from fwbench.traffic.native import reflect_every
    assert [reflect_every(r) for r in (1, 1000, 5000, 5001, 20000, 100000, 1.5e6)] == \
        [1, 1, 1, 2, 4, 32, 512]
    for rate in (7000, 64000, 999999, 1.4e7):
        assert REFLECT_PPS / 2 < rate / reflect_every(rate) <= REFLECT_PPS
    assert reflect_every(0) == 256     # open throttle: the rate is known only after
