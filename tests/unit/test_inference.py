"""The one inference for comparisons (stats.log_ratio, stats.holm_levels), on
seeded simulations and on numbers whose right answer is known by hand: a ratio on
the log scale, paired by round where the design allows, with its interval and its
verdict from one analysis."""
import math

import numpy as np
import pytest
from scipy import stats as sps

from fwbench import stats
from fwbench import metrics
from fwbench.report import analysis as an
from fwbench.report.data import RunData


def rounds_of(n: int) -> list[int]:
    return list(range(n))


def simulate(rng, n_rounds: int, true_ratio: float, drift: float, noise: float):
    """Two cells measured once a round each: a shared drift factor per round
    (uniform within +-drift, as a busy machine moves every cell of a round alike)
    times each trial's own noise (lognormal, `noise` sd on the log scale)."""
    shared = rng.uniform(1 - drift, 1 + drift, n_rounds)
    a = 1e5 * true_ratio * shared * np.exp(noise * rng.standard_normal(n_rounds))
    b = 1e5 * shared * np.exp(noise * rng.standard_normal(n_rounds))
    return list(a), list(b)


def test_pairing_by_round_finds_a_5_percent_difference_through_50_percent_drift():
    """Shared drift of +-50 % a round, 2 % noise of each trial's own, a true 5 %
    difference, 6 rounds: the paired analysis finds it in at least 90 % of runs
    at 0.05; unpaired, the drift swamps it (shown for contrast)."""
    rng = np.random.default_rng(33)
    runs, paired_hits, unpaired_hits = 2000, 0, 0
    for _ in range(runs):
        a, b = simulate(rng, 6, 1.05, 0.5, 0.02)
        t = stats.log_ratio(a, b, rounds_of(6), rounds_of(6))
        assert t.paired and t.n_pairs == 6
        paired_hits += t.p < 0.05 and t.ratio > 1
        unpaired_hits += stats.log_ratio(a, b).p < 0.05
    assert paired_hits / runs >= 0.90, paired_hits / runs
    assert unpaired_hits / runs < 0.2


def test_with_no_difference_the_paired_analysis_errs_at_most_5_percent():
    """The same design with no difference: "a difference" at most 5 % of the time.
    With 4,000 runs the estimate's own sd is 0.34 %: allowed up to 5 % + 3 sd."""
    rng = np.random.default_rng(7)
    runs = 4000
    wrong = sum(stats.log_ratio(*simulate(rng, 6, 1.0, 0.5, 0.02), rounds_of(6),
                                rounds_of(6)).p < 0.05 for _ in range(runs))
    assert wrong / runs <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs), wrong / runs


def test_a_40x_ratio_with_3_trials_a_side_is_a_difference():
    """The issue's own numbers: iptables-legacy against ipset at 10,000 rules. Welch
    on the raw rates gives p = 0.022, swamped by the fast cell's spread (0.110 once
    Holm multiplied it by the report's 5 cells: "no difference shown" beside 37x);
    on the logs it is p = 0.002, and so is the paired analysis, and the interval
    agrees."""
    legacy = [16_573, 16_371, 16_728]
    ipset = [620_553, 386_693, 631_881]
    assert stats.welch(legacy, ipset).p == pytest.approx(0.022, abs=0.001)
    for t in (stats.log_ratio(legacy, ipset),
              stats.log_ratio(legacy, ipset, rounds_of(3), rounds_of(3))):
        assert t.p == pytest.approx(0.002, abs=0.0005), t
        iv = t.interval(0.95)
        assert iv.high < 1 and iv.low < t.ratio < iv.high
        assert 1 / t.ratio == pytest.approx(32.2, rel=0.01)


def test_the_interval_and_the_p_value_are_one_analysis():
    """At any level, the interval excludes 1 exactly when p is below 1 - level;
    by hand for the paired case: a one-sample t on the log ratios."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(2, 9))
        a, b = simulate(rng, n, float(rng.uniform(0.9, 1.1)), 0.3, 0.05)
        paired = bool(rng.integers(2))
        t = stats.log_ratio(a, b, *((rounds_of(n),) * 2 if paired else (None, None)))
        ref = (sps.ttest_1samp(np.log(a) - np.log(b), 0.0) if paired else
               sps.ttest_ind(np.log(a), np.log(b), equal_var=False))
        assert t.p == pytest.approx(ref.pvalue, rel=1e-9)
        for level in (0.9, 0.95, 0.99, 0.999):
            iv = t.interval(level)
            assert (iv.low > 1 or iv.high < 1) == (t.p < 1 - level)


def test_pairs_only_shared_rounds_and_falls_back_to_welch_on_logs():
    a, b = [100.0, 110.0, 90.0, 105.0], [50.0, 56.0, 44.0]
    t = stats.log_ratio(a, b, [0, 1, 2, 7], [0, 1, 2])
    assert t.paired and t.n_pairs == 3 and t.test == "paired t on log ratios, 3 rounds"
    t = stats.log_ratio(a, b, [0, 1, 5, 7], [0, 2, 3])    # one shared round: unpaired
    assert not t.paired and t.test == "Welch t on logs, 4 and 3 trials"
    assert stats.log_ratio([1.0, 0.0], [1.0, 2.0]) is None   # a rate of 0: no log
    assert stats.log_ratio([1.0], [1.0, 2.0]) is None        # one value a side
    same = stats.log_ratio([2.0, 2.0], [1.0, 1.0], [0, 1], [0, 1])
    assert (same.ratio, same.p, same.interval(0.95).low) == (2.0, 0.0, 2.0)


def test_holm_s_verdicts_and_the_printed_intervals_never_disagree():
    """Over random families: each comparison's interval, printed at the level its
    Holm step tested it at, excludes 1 exactly when Holm calls it a difference."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        m = int(rng.integers(1, 12))
        tests = [stats.log_ratio(*simulate(rng, 4, float(rng.choice([1.0, 1.03, 1.2])),
                                           0.4, 0.03), rounds_of(4), rounds_of(4))
                 for _ in range(m)]
        verdicts = stats.holm_levels([t.p for t in tests])
        adjusted = stats.holm([t.p for t in tests])
        for t, v, adj in zip(tests, verdicts, adjusted):
            iv = t.interval(1 - v.alpha)
            assert (iv.low > 1 or iv.high < 1) == v.rejected
            assert v.rejected == (adj <= 0.05) and v.p_adjusted == adj


def test_holm_steps_down_and_stops_at_the_first_it_keeps():
    got = stats.holm_levels([0.01, 0.04, 0.03, None, 0.2])
    assert [(g.rejected, round(g.alpha, 4)) if g else None for g in got] == [
        (True, 0.0125), (False, 0.0167), (False, 0.0167), None, (False, 0.0167)]


def _record(cell, repetition, value):
    from fwbench.results import SCHEMA_VERSION, SWEEP_FACTORS, TrialRecord
    return TrialRecord(
        schema_version=SCHEMA_VERSION, run_id="t", trial=0,
        factors=dict(zip(SWEEP_FACTORS, cell)), method="maxrate", traffic="engine",
        repetition=repetition, status="ok", reason=None, verification={"ok": True},
        load_time_s=0.0, metrics={"rx_pps": value}, started_at="2026-01-01T00:00:00Z",
        duration_s=1.0, ruleset_sha256=None)


def test_an_adaptive_round_pairs_the_cells_it_ran_together():
    """Two planned rounds ran both cells; adaptive round 1 ran both again, each at
    its own next repetition (2 and 2), adaptive round 2 only A (repetition 3). The
    trials of one round pair, whatever their repetition."""
    a, b = ("iptables-legacy", 1000, 64), ("nftables", 1000, 64)
    plan = [{"backend": c[0], "rules": c[1], "frame_size": c[2], "repetition": r}
            for r in (0, 1) for c in (a, b)]
    plan += [{"backend": c[0], "rules": c[1], "frame_size": c[2], "repetition": r}
             for c, r in ((b, 2), (a, 2), (a, 3))]
    meta = {"scenario": {"method": "maxrate"}, "factors": ["backend", "rules", "frame_size"],
            "plan": plan, "adaptive": {"rounds": [{"round": 1, "cells": [list(b), list(a)]},
                                                  {"round": 2, "cells": [list(a)]}]}}
    records = [_record(a, r, 100.0 + r) for r in range(4)] + \
        [_record(b, r, 50.0 + r) for r in range(3)]
    data = RunData(__import__("pathlib").Path("x"), meta, records)
    rx = next(m for m in metrics.of("maxrate") if m.key == "rx_pps")
    got = data.samples_by_round(rx)
    assert got[a] == [(0, 100.0), (1, 101.0), (2, 102.0), (3, 103.0)]
    assert got[b] == [(0, 50.0), (1, 51.0), (2, 52.0)]
    cells = an.summaries(data, rx)
    c = an.compare(cells[a], cells[b])
    assert c.test.paired and c.test.n_pairs == 3


def test_a_wide_interval_is_undecided_never_no_difference():
    """No difference shown is said only where the interval stays within 2x either
    way; a 2.5x ratio the data cannot confirm is "undecided", with how sure."""
    rx = next(m for m in metrics.of("maxrate") if m.key == "rx_pps")
    wide = an.compare(an.summarize(("a", 1, 64), [100.0, 900.0, 300.0], [0, 1, 2]),
                      an.summarize(("b", 1, 64), [100.0, 100.0, 150.0], [0, 1, 2]))
    narrow = an.compare(an.summarize(("a", 1, 64), [100.0, 104.0, 99.0], [0, 1, 2]),
                        an.summarize(("b", 1, 64), [101.0, 100.0, 100.0], [0, 1, 2]))
    an.apply_holm([wide])
    an.apply_holm([narrow])
    assert wide.test.ratio > 2 and wide.verdict(rx) == "undecided"
    assert an.verdict_words(wide, rx, "a").startswith("undecided (±")
    assert narrow.verdict(rx) == "same"
    assert an.verdict_words(narrow, rx, "a") == "no difference shown"


def test_every_packet_is_accounted_for_and_a_gap_flags_the_trial():
    """The stages of the path, from its counters: the measured XDP trial through no
    firewall (4,886,978 sent, 736,424 dropped at the firewall's ingress backlog),
    then the same with 5,000 packets vanishing between the firewall and the server."""
    from fwbench.testbed.base import IfStats
    from fwbench.traffic import accounting
    z = IfStats(0, 0, 0, 0, 0.0)
    before = {p: z for p in ("sender", "fw_in", "fw_out", "receiver")}
    after = {"sender": IfStats(0, 4_886_978, 0, 0, 0.0),
             "fw_in": IfStats(4_886_978, 0, 736_424, 0, 0.0),
             "fw_out": IfStats(1, 4_150_554, 0, 0, 0.0),
             "receiver": IfStats(4_150_554, 1, 0, 0, 0.0)}
    got = accounting.account(before, after, 4_886_978, 0, {"received": 4_150_554})
    assert got["dropped_at_firewall_ingress"] == 736_424 and got["received"] == 4_150_554
    stages = [k for k in got if k not in ("sent", "gap")]
    assert sum(got[k] for k in stages) == got["sent"] and "gap" not in got
    after["receiver"] = IfStats(4_145_554, 1, 0, 0, 0.0)
    got = accounting.account(before, after, 4_886_978, 0, {"received": 4_145_554})
    assert got["lost_after_firewall"] == 5_000
    assert got["gap"] == "lost after firewall: 5,000 (0.10% of sent)"
