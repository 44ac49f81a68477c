"""The MLRsearch-style throughput search, driven by the simulated firewall.

Every search here runs against `SimulatedFirewall`, whose true answer is known, so the
tests check the answer and how the search spent its trial time, without root.
"""
import json
import math
import random
import statistics
from collections import Counter

import pytest

from fwbench.errors import FwbenchError
from fwbench.measurer import TrialResult
from fwbench.methods.search import (SHORT_PHASE_WIDTH_FACTOR, SearchConfig, Verdict,
                                    classify_load, search)
from fwbench.methods.simulated import SimulatedFirewall

NOISE = 0.01
# A load within a few noise sigmas of the capacity can be misclassified by a majority
# of noisy trials; three sigmas out, two bad trials of three happen ~1e-5 of the time.
MARGIN = 3 * NOISE
# The simulator counts whole packets: a load a fraction of a packet per trial above
# the capacity still loses nothing. This covers that, and nothing else.
COUNTING = 1e-4


def contains(goal, true_pps, margin=COUNTING):
    return (goal.lower_bound_pps * (1 - margin) <= true_pps
            <= goal.upper_bound_pps * (1 + margin))


def trial(loss_ratio=0.0, duration_s=1.0, offered_pps=1000.0):
    sent = round(offered_pps * duration_s)
    return TrialResult(offered_pps=offered_pps, duration_s=duration_s, sent=sent,
                       received=sent - round(sent * loss_ratio), achieved_pps=offered_pps)


# --- the answer -----------------------------------------------------------------------

def test_noisy_ndr_and_pdr_found_within_width_across_three_orders_of_magnitude():
    """60 noisy firewalls from 5k to 500k pps behind one 600k pps max load.

    Each trial sees the capacity with 1 % noise, so no search can pin it closer than
    the noise: the true rate must lie inside the found bounds widened by 3 sigmas
    (MARGIN). The interval itself must meet the configured width exactly, and across
    all 60 the found bounds must not be biased (median within 1 % of the truth).
    """
    config = SearchConfig(max_load_pps=600_000)
    rng = random.Random(2544)
    centres, capacities = [], []
    for seed in range(60):
        true_pps = 5_000 * 100 ** rng.random()
        capacities.append(true_pps)
        sim = SimulatedFirewall(true_ndr_pps=true_pps, noise=NOISE, seed=seed)
        result = search(sim, config)
        ndr, pdr = result.ndr, result.pdr
        assert result.finished, (seed, ndr.reason, pdr.reason)
        assert ndr.relative_width <= config.relative_width * (1 + 1e-9)
        assert pdr.relative_width <= config.relative_width * (1 + 1e-9)
        assert contains(ndr, sim.true_rate(0.0), MARGIN), (seed, true_pps, ndr)
        assert contains(pdr, sim.true_rate(0.005), MARGIN), (seed, true_pps, pdr)
        assert ndr.lower_bound_pps <= pdr.lower_bound_pps
        assert ndr.upper_bound_pps <= pdr.upper_bound_pps
        # Conditional throughput: the lower bound less the loss its goal allows there.
        assert ndr.conditional_throughput_pps == pytest.approx(ndr.lower_bound_pps)
        assert (pdr.lower_bound_pps * (1 - 0.005) <= pdr.conditional_throughput_pps
                <= pdr.lower_bound_pps)
        centres.append(math.sqrt(ndr.lower_bound_pps * ndr.upper_bound_pps) / true_pps)
    assert max(capacities) / min(capacities) > 50  # really spread over the range
    assert abs(statistics.median(centres) - 1) < 0.01


def test_a_knee_separates_pdr_from_ndr_and_both_are_found_exactly():
    """With a loss knee, PDR 0.5 % sits ~2 % above NDR; noiseless, both true rates
    must fall inside their own bounds, and the two intervals must not overlap."""
    sim = SimulatedFirewall(true_ndr_pps=80_000, knee=0.05, seed=1)
    assert sim.true_rate(0.005) > sim.true_rate(0.0) * 1.015
    result = search(sim, SearchConfig(max_load_pps=600_000))
    assert contains(result.ndr, sim.true_rate(0.0))
    assert contains(result.pdr, sim.true_rate(0.005))
    assert result.ndr.upper_bound_pps <= result.pdr.lower_bound_pps


# --- how the time is spent --------------------------------------------------------------

def test_short_trials_come_first_then_full_length_trials_near_the_answer():
    config = SearchConfig(max_load_pps=600_000)
    rng = random.Random(7)
    for seed in range(20):
        sim = SimulatedFirewall(true_ndr_pps=5_000 * 100 ** rng.random(), noise=NOISE,
                                seed=seed)
        result = search(sim, config)
        trials = result.trials
        phases = [t["phase"] for t in trials]
        first_final = phases.index("final")
        assert phases[0] == "warmup"
        assert phases[1:first_final] == ["short"] * (first_final - 1)
        assert set(phases[first_final:]) == {"final"}
        assert first_final >= 4  # the short phase did real narrowing work
        assert {t["duration_s"] for t in trials if t["phase"] == "short"} == {0.2}
        assert {t["duration_s"] for t in trials if t["phase"] == "final"} == {1.0}

        # It starts at max load, then jumps to the rate forwarded there.
        assert trials[1]["offered_pps"] == config.max_load_pps
        assert trials[2]["offered_pps"] == pytest.approx(trials[1]["forwarded_pps"], abs=0.01)

        # Full-length trials only near an answer: within the short phase's width plus
        # the noise margin of NDR or PDR.
        near = (SHORT_PHASE_WIDTH_FACTOR + 2) * config.relative_width
        answers = (sim.true_rate(0.0), sim.true_rate(0.005))
        for t in trials[first_final:]:
            assert min(abs(math.log(t["offered_pps"] / a)) for a in answers) < near, t

        # The record accounts for every second the simulator was asked for.
        assert sim.calls == len(trials)
        assert sim.total_duration_s == pytest.approx(result.total_trial_time_s)
        assert result.total_trial_time_s < 25  # vs 7+ minutes of 60 s RFC 2544 trials


def test_warmup_trial_is_recorded_and_discarded():
    sim = SimulatedFirewall(true_ndr_pps=1e6, seed=2)  # max load is lossless
    result = search(sim, SearchConfig(max_load_pps=100_000, warmup_duration_s=0.5))
    warmup = result.trials[0]
    assert warmup["phase"] == "warmup" and warmup["flag"] == "warmup"
    assert warmup["discarded"] and warmup["duration_s"] == 0.5
    assert warmup["offered_pps"] == 100_000
    # Same load as the lower bound, yet only the counted trials carry that role.
    assert not warmup["used_as_lower"]
    assert all(t["used_as_lower"] for t in result.trials[1:])

    no_warmup = search(SimulatedFirewall(true_ndr_pps=1e6, seed=2),
                       SearchConfig(max_load_pps=100_000, warmup_duration_s=0))
    assert "warmup" not in {t["phase"] for t in no_warmup.trials}


def test_on_trial_sees_every_trial_in_order():
    seen = []
    result = search(SimulatedFirewall(true_ndr_pps=30_000, seed=3),
                    SearchConfig(max_load_pps=100_000),
                    on_trial=lambda i, t: seen.append((i, t)))
    assert [i for i, _ in seen] == list(range(len(result.trials)))
    for (_, live), final in zip(seen, result.trials):
        assert {k: final[k] for k in live} == live


# --- the range ends and the generator ---------------------------------------------------

def test_sender_that_cannot_reach_the_loads_is_reported_not_taken_for_an_ndr():
    sim = SimulatedFirewall(true_ndr_pps=200_000, sender_max_pps=100_000, seed=4)
    result = search(sim, SearchConfig(max_load_pps=150_000))
    short = [t for t in result.trials if t["sender_short"]]
    assert [t["flag"] for t in short if t["phase"] != "warmup"] == ["sender_short"]
    assert all(t["discarded"] and not t["used_as_upper"] for t in short)
    # No counted trial was offered more than the sender could do.
    assert all(t["offered_pps"] <= 100_000 for t in result.trials if not t["discarded"])
    assert result.generator_ceiling_pps == pytest.approx(99_000)
    for goal in result.goals:
        assert goal.generator_limited and not goal.finished
        assert goal.upper_bound_pps is None
        assert goal.lower_bound_pps <= 100_000
        assert "generator-limited" in goal.reason
    assert not result.finished


def test_sender_below_min_load_stops_the_search_and_says_so():
    sim = SimulatedFirewall(true_ndr_pps=1e6, sender_max_pps=500, seed=4)
    result = search(sim, SearchConfig(max_load_pps=100_000, min_load_pps=1_000))
    assert result.generator_ceiling_pps < 1_000
    assert sim.calls == 2  # the warm-up and one short trial, then nothing to measure
    for goal in result.goals:
        assert goal.lower_bound_pps is None and goal.upper_bound_pps is None
        assert goal.generator_limited and not goal.finished
        assert "below min_load" in goal.reason


def test_sender_short_trials_are_not_upper_bounds_when_the_firewall_is_slower():
    """The lossy, sender-short trials at max load would make a fine-looking upper
    bound; they must not, and the firewall's own NDR is still found below them."""
    sim = SimulatedFirewall(true_ndr_pps=60_000, sender_max_pps=100_000, noise=NOISE,
                            seed=5)
    result = search(sim, SearchConfig(max_load_pps=150_000))
    at_max = [t for t in result.trials if t["offered_pps"] == 150_000]
    assert at_max and all(t["sender_short"] and t["discarded"] for t in at_max)
    assert all(t["loss_ratio"] > 0.3 and not t["used_as_upper"] for t in at_max)
    assert result.finished and not result.ndr.generator_limited
    assert contains(result.ndr, 60_000, MARGIN)


def test_no_loss_at_max_load_reports_max_as_lower_and_no_upper():
    sim = SimulatedFirewall(true_ndr_pps=1e6, noise=NOISE, seed=6)
    result = search(sim, SearchConfig(max_load_pps=100_000))
    for goal in result.goals:
        assert goal.lower_bound_pps == 100_000 and goal.upper_bound_pps is None
        assert goal.finished and not goal.generator_limited
        assert "no loss up to max_load" in goal.reason
    assert result.total_trial_time_s < 5  # confirmed at max, nothing else


def test_loss_at_min_load_reports_no_lower_bound():
    sim = SimulatedFirewall(true_ndr_pps=500, seed=7)
    result = search(sim, SearchConfig(max_load_pps=100_000, min_load_pps=1_000))
    for goal in result.goals:
        assert goal.lower_bound_pps is None and goal.upper_bound_pps == 1_000
        assert goal.finished and "min_load" in goal.reason
    assert min(t["offered_pps"] for t in result.trials) == 1_000


def test_a_truncated_search_claims_finished_only_within_width():
    """Stop the same searches after every possible number of trials: whenever both
    bounds exist, `finished` must say exactly whether they are within the width."""
    widths_seen = set()
    for seed in range(3):
        for cap in range(1, 25):
            sim = SimulatedFirewall(true_ndr_pps=70_000, noise=NOISE, seed=seed)
            config = SearchConfig(max_load_pps=600_000, max_trials=cap)
            for goal in search(sim, config).goals:
                if goal.relative_width is None:
                    assert not goal.finished
                    continue
                within = goal.relative_width <= config.relative_width * (1 + 1e-9)
                assert goal.finished == within, (seed, cap, goal)
                widths_seen.add(within)
                if not within:
                    assert "max_trials" in goal.reason
    assert widths_seen == {True, False}


def test_max_trials_leaves_the_search_unfinished_with_what_it_has():
    sim = SimulatedFirewall(true_ndr_pps=80_000, seed=8)
    result = search(sim, SearchConfig(max_load_pps=600_000, max_trials=4))
    assert len(result.trials) == 4 and sim.calls == 4
    assert not result.finished
    assert all("max_trials" in g.reason for g in result.goals)


# --- presets and the exceed ratio -------------------------------------------------------

def test_rfc2544_strict_preset_runs_one_full_trial_per_load():
    config = SearchConfig.rfc2544_strict(max_load_pps=200_000)
    assert config.loss_ratios == (0.0,) and config.exceed_ratio == 0.0
    assert (config.final_trial_duration_s == config.initial_trial_duration_s
            == config.duration_sum_s == 60.0)
    sim = SimulatedFirewall(true_ndr_pps=37_000, noise=NOISE, seed=9)
    result = search(sim, config)
    counted = [t for t in result.trials if t["phase"] != "warmup"]
    assert counted and all(t["duration_s"] == 60.0 for t in counted)
    assert {t["phase"] for t in counted} == {"final"}
    assert max(Counter(t["offered_pps"] for t in counted).values()) == 1
    assert [g.loss_ratio for g in result.goals] == [0.0]
    assert result.pdr is None and result.ndr.finished
    # Every counted trial at or below the lower bound lost nothing at all.
    assert all(t["lost"] == 0 for t in counted
               if t["offered_pps"] <= result.ndr.lower_bound_pps)


def test_exceed_ratio_trades_spike_tolerance_for_strictness():
    """Spikes: 15 % of trials lose a few packets whatever the load.

    With exceed ratio 0.5 a load is decided by most of its trial time, so a lone spike
    at a load below the capacity is outvoted by the next trials there: the NDR is still
    found, at the price of up to three trials per load. With exceed ratio 0 (RFC 2544's
    rule) any high-loss trial makes its load an upper bound, so one spike below the
    capacity drags the NDR under it: conservative and cheap to explain, but the result
    then measures the testbed's hiccups, not the firewall.
    """
    true_pps = 80_000
    tolerant = strict = 0
    spiked_tolerant = spiked_tolerant_ok = 0
    for seed in range(30):
        results = {}
        for exceed in (0.5, 0.0):
            sim = SimulatedFirewall(true_ndr_pps=true_pps, spike_prob=0.15, seed=seed)
            results[exceed] = search(sim, SearchConfig(max_load_pps=600_000,
                                                       exceed_ratio=exceed))
        for exceed, result in results.items():
            ndr = result.ndr
            ok = ndr.finished and contains(ndr, true_pps)
            spiked = any(t["lost"] and t["offered_pps"] < true_pps
                         for t in result.trials if not t["discarded"])
            if exceed == 0.5:
                tolerant += ok
                spiked_tolerant += spiked
                spiked_tolerant_ok += spiked and ok
            else:
                strict += ok
                if spiked:  # the spike's load became an upper bound below the truth
                    assert ndr.upper_bound_pps < true_pps
    assert tolerant >= 27
    assert spiked_tolerant >= 3 and spiked_tolerant_ok >= spiked_tolerant - 1
    assert strict <= 22


# --- load classification ----------------------------------------------------------------

def verdict(*trials, exceed_ratio=0.5, duration_sum_s=3.0):
    return classify_load(trials, loss_ratio=0.0, exceed_ratio=exceed_ratio,
                         trial_duration_s=1.0, duration_sum_s=duration_sum_s)


def test_classification_is_a_best_of_three_with_the_defaults():
    lossy, clean = trial(0.01), trial(0.0)
    assert verdict() is Verdict.UNKNOWN
    assert verdict(lossy) is Verdict.LEANS_UPPER
    assert verdict(clean) is Verdict.LEANS_LOWER
    assert verdict(lossy, lossy) is Verdict.UPPER
    assert verdict(clean, clean) is Verdict.LOWER
    assert verdict(lossy, clean) is Verdict.LEANS_LOWER
    assert verdict(lossy, clean, lossy) is Verdict.UPPER
    assert verdict(lossy, clean, clean) is Verdict.LOWER
    # Past the duration sum the share is over all counted time; exactly half
    # high-loss does not *exceed* 0.5, so the load stays a lower bound.
    assert verdict(lossy, clean, lossy, clean) is Verdict.LOWER
    assert verdict(lossy, clean, lossy, clean, lossy) is Verdict.UPPER


def test_short_trials_make_upper_bounds_but_never_lower_ones():
    short_clean, short_lossy = trial(0.0, duration_s=0.2), trial(0.01, duration_s=0.2)
    assert verdict(*[short_clean] * 50) is Verdict.UNKNOWN
    assert verdict(*[short_lossy] * 8) is Verdict.UPPER  # 1.6 s > half of 3 s
    assert verdict(*[short_lossy] * 8, *[short_clean] * 8) is Verdict.UNKNOWN
    assert verdict(short_lossy, exceed_ratio=0.0) is Verdict.UPPER


def test_exceed_ratio_zero_needs_the_whole_sum_loss_free():
    clean, lossy = trial(0.0), trial(0.001)
    assert verdict(clean, clean, exceed_ratio=0.0) is Verdict.LEANS_LOWER
    assert verdict(clean, clean, clean, exceed_ratio=0.0) is Verdict.LOWER
    assert verdict(clean, clean, clean, lossy, exceed_ratio=0.0) is Verdict.UPPER


# --- configuration ----------------------------------------------------------------------

def test_defaults_and_normalisation():
    config = SearchConfig(max_load_pps=500_000, loss_ratios=[0.005, 0])
    assert config.loss_ratios == (0.0, 0.005)
    assert config.duration_sum_s == 3 * config.final_trial_duration_s
    assert SearchConfig(max_load_pps=1e5, final_trial_duration_s=2).duration_sum_s == 6


@pytest.mark.parametrize("field, value", [
    ("loss_ratios", ()), ("loss_ratios", (1.0,)), ("loss_ratios", (-0.1,)),
    ("loss_ratios", (0.0, 0.0)), ("loss_ratios", "0.0"), ("loss_ratios", ("x",)),
    ("exceed_ratio", 1.0), ("exceed_ratio", -0.1), ("exceed_ratio", float("nan")),
    ("final_trial_duration_s", 0), ("final_trial_duration_s", -1.0),
    ("initial_trial_duration_s", 0.0), ("initial_trial_duration_s", 2.0),
    ("duration_sum_s", 0.5), ("duration_sum_s", -3.0),
    ("relative_width", 0.0), ("relative_width", 1.0), ("relative_width", 1.5),
    ("min_load_pps", 0), ("min_load_pps", 600_000.0), ("min_load_pps", 500_000.0),
    ("max_load_pps", -1.0), ("max_load_pps", "fast"), ("max_load_pps", True),
    ("warmup_duration_s", -1.0), ("max_trials", 0), ("max_trials", 2.5),
])
def test_bad_config_values_are_one_line_errors_naming_the_field(field, value):
    with pytest.raises(FwbenchError) as caught:
        SearchConfig(**{"max_load_pps": 500_000.0, field: value})
    message = str(caught.value)
    assert "\n" not in message
    assert field in message.split(":")[1]  # "search config: <field> = ...: why"


def test_result_serialises_to_json():
    result = search(SimulatedFirewall(true_ndr_pps=20_000, seed=10),
                    SearchConfig(max_load_pps=100_000))
    d = json.loads(json.dumps(result.to_dict()))
    assert [g["name"] for g in d["goals"]] == ["NDR", "PDR 0.5%"]
    assert len(d["trials"]) == len(result.trials)
    assert d["config"]["loss_ratios"] == [0.0, 0.005]
    assert {"p50", "p99_9", "max"} <= set(d["trials"][-1]["latency_us"])


# --- the simulator itself ---------------------------------------------------------------

def test_simulator_curve_counts_and_latency():
    sim = SimulatedFirewall(true_ndr_pps=10_000, knee=0.05, seed=11)
    for ratio in (0.0, 0.005, 0.05):
        rate = sim.true_rate(ratio)
        assert sim.loss_ratio_at(rate * (1 - 1e-6)) <= ratio < sim.loss_ratio_at(rate * 1.001)
    below, above = sim.measure(1.0, 9_000), sim.measure(1.0, 20_000)
    assert below.lost == 0 and isinstance(above.received, int) and above.lost > 0
    assert below.latency_us["p99"] < above.latency_us["p99"]
    lat = below.latency_us
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99_9"] <= lat["max"]

    sender = SimulatedFirewall(true_ndr_pps=1e6, sender_max_pps=50_000)
    limited = sender.measure(0.5, 80_000)
    assert limited.sender_short and limited.sent == 25_000
    assert not sender.measure(0.5, 40_000).sender_short
    assert sender.calls == 2 and sender.total_duration_s == 1.0
