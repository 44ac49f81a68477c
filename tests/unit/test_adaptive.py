"""Adaptive repetitions: which cells need another trial, and how a round is planned
into run.json (no root: records are made up, nothing is measured)."""
import json
import math
import random

import pytest
from scipy import stats as sps

from fwbench import scenario
from fwbench.adaptive import cell_widths, cells_needing_more
from fwbench.plan import TrialKey, interleave, sweep_cells
from fwbench.results import SCHEMA_VERSION, SWEEP_FACTORS, RunDir, TrialRecord
from fwbench.experiments.loop import adaptive_round
from fwbench.report.data import RunData

# With 3 values the 95 % bootstrap interval of the median is min..max: a resample's
# median is the minimum with probability P(Bin(3, 1/3) >= 2) = 7/27, far above 2.5 %
# (and the maximum likewise). So the widths are exact: range / median.
NARROW = [100_000.0, 100_200.0, 99_900.0]      # 300 / 100,000: 0.3 %
WIDE = [60_000.0, 100_000.0, 140_000.0]        # 80,000 / 100,000: 80 %


def rec(backend="iptables-legacy", rules=20, frame=64, rep=0, status="ok",
        method="maxrate", **metrics) -> TrialRecord:
    return TrialRecord(
        schema_version=SCHEMA_VERSION, run_id="t", trial=0,
        factors={"backend": backend, "rules": rules, "frame_size": frame}, method=method, traffic="engine+ping", repetition=rep,
        status=status, reason=None if status == "ok" else "verification: no",
        verification={"ok": status == "ok"}, load_time_s=0.01,
        metrics=metrics if status == "ok" else {}, started_at="2026-01-01T00:00:00Z",
        duration_s=1.0, ruleset_sha256=None)


def cell(values, status="ok", method="maxrate", key="rx_pps", **where):
    return [rec(rep=i, status=status, method=method, **where, **{key: v})
            for i, v in enumerate(values)]


def need(records, method="maxrate", rel_width=0.05, max_repeat=10, level=0.95):
    return cells_needing_more(records, method, SWEEP_FACTORS, rel_width, level, max_repeat)


def test_a_narrow_cell_stops_and_a_wide_one_continues():
    records = cell(NARROW) + cell(WIDE, backend="nftables")
    assert need(records) == [("nftables", 20, 64)]
    assert sps.binom.sf(1, 3, 1 / 3) == pytest.approx(7 / 27)
    assert cell_widths(records, "maxrate", SWEEP_FACTORS) == {("iptables-legacy", 20, 64): pytest.approx(0.003),
                                               ("nftables", 20, 64): pytest.approx(0.8)}


def test_rel_width_is_the_threshold():
    records = cell(WIDE)
    w = cell_widths(records, "maxrate", SWEEP_FACTORS)[("iptables-legacy", 20, 64)]
    assert need(records, rel_width=w * 1.01) == []
    assert need(records, rel_width=w * 0.99) == [("iptables-legacy", 20, 64)]


def test_two_values_give_their_range_as_the_width():
    (w,) = cell_widths(cell([90.0, 110.0]), "maxrate", SWEEP_FACTORS).values()
    assert w == pytest.approx(20 / 100)


def test_the_cap_counts_every_status():
    failing = cell([None] * 4, status="failed")
    assert need(failing, max_repeat=4) == []
    assert need(failing[:3], max_repeat=4) == [("iptables-legacy", 20, 64)]
    # A wide cell stops at the cap too, counting its failed trial.
    mixed = cell(WIDE) + [rec(rep=3, status="invalid")]
    assert need(mixed, max_repeat=5) == [("iptables-legacy", 20, 64)]
    assert need(mixed, max_repeat=4) == []


@pytest.mark.parametrize("records", [
    cell([100_000.0]),                                         # one value
    cell([100_000.0]) + [rec(rep=1, status="failed")],         # one ok, one failed
    cell([100_000.0, None, float("nan"), True]),               # one numeric value
    cell([0.0, 0.0, 0.0]),                                     # a zero median: no width
], ids=["one", "one-ok", "non-numeric", "zero"])
def test_fewer_than_two_numeric_values_need_more(records):
    assert need(records) == [("iptables-legacy", 20, 64)]
    assert cell_widths(records, "maxrate", SWEEP_FACTORS)[("iptables-legacy", 20, 64)] is None


def test_equal_values_are_narrow():
    assert need(cell([5000.0, 5000.0])) == []


@pytest.mark.parametrize("method, primary, other", [
    ("maxrate", "rx_pps", "rtt_us_median"),
    ("throughput", "ndr_pps", "pdr_pps"),
    ("latency", "ndr_pps", "rx_pps"),
    ("lossload", "max_lossless_offered_pps", "rx_pps"),
    ("fixedrate", "processed_pps", "rx_pps"),
])
def test_only_the_methods_primary_metric_counts(method, primary, other):
    def records(primary_values, other_values):
        return [rec(rep=i, method=method, **{primary: p, other: o})
                for i, (p, o) in enumerate(zip(primary_values, other_values))]
    assert need(records(NARROW, WIDE), method) == []
    assert need(records(WIDE, NARROW), method) == [("iptables-legacy", 20, 64)]


def test_none_counts_like_any_cell_and_the_answer_is_sorted():
    records = (cell(WIDE, backend="nftables", frame=1518) + cell(WIDE, backend="none", rules=0)
               + cell(NARROW, backend="ipset") + cell(WIDE, frame=64))
    assert need(records) == [("iptables-legacy", 20, 64), ("nftables", 20, 1518),
                             ("none", 0, 64)]


def test_a_higher_level_is_wider():
    """Seven values, 90 95 98 100 101 103 110: a resample's median is at most the j-th
    smallest with probability P(Bin(7, j/7) >= 4) = 1.0 %, 10.8 %, ... 89.2 %, 99.0 %
    (j = 1, 2, ..., 5, 6). The 90 % interval's ends (5 % and 95 %) are then the 2nd
    and 6th values, 95..103; the 99 % interval's (0.5 % and 99.5 %) the 1st and 7th,
    90..110, each end several standard errors of 9,999 resamples away from the next
    value's quantile. Widths over the median, 100."""
    F = [sps.binom.sf(3, 7, j / 7) for j in range(1, 8)]
    assert F[0] < 0.05 <= F[1] and F[4] < 0.95 <= F[5]
    assert 0.005 <= F[0] and F[5] < 0.995
    records = cell([95.0, 98.0, 100.0, 101.0, 103.0, 110.0, 90.0])
    (w90,) = cell_widths(records, "maxrate", SWEEP_FACTORS, 0.9).values()
    (w99,) = cell_widths(records, "maxrate", SWEEP_FACTORS, 0.99).values()
    assert (w90, w99) == (pytest.approx(8 / 100), pytest.approx(20 / 100))


def test_a_method_without_a_headline_is_refused():
    # every method fwbench runs has one (droprate's too, since the metric registry
    # holds it); a record of an unknown method has none to repeat on
    with pytest.raises(ValueError, match="nosuch"):
        need(cell(NARROW), method="nosuch")


# --- a round planned into run.json (loop.adaptive_round) ----------------------------

def run_dir(tmp_path, max_repeat=4, repeat=2, seed=5, rules=(20,)):
    sc = scenario.load(None, {"backends": ["none", "iptables-legacy", "nftables"],
                              "rules": list(rules), "repeat": repeat, "seed": seed,
                              "adaptive.max_repeat": max_repeat})
    plan = interleave(sweep_cells(sc.backends, sc.rules, sc.frame_sizes), sc.repeat, sc.seed)
    rd = RunDir.create(tmp_path / "run", {"scenario": sc.dump(),
                                          "factors": list(SWEEP_FACTORS),
                                          "plan": [k.as_dict(SWEEP_FACTORS) for k in plan]})
    return sc, rd, plan


def record_plan(rd, plan, value):
    for i, k in enumerate(plan):
        if k not in {r.key(SWEEP_FACTORS) for r in rd.records()}:
            rd.append(rec(*k.cell, k.repetition, rx_pps=value(k)))


def test_a_round_is_written_to_the_plan_before_it_runs(tmp_path):
    sc, rd, plan = run_dir(tmp_path)
    # iptables-legacy's two values agree; the others are far apart.
    record_plan(rd, plan, lambda k: 1000.0 if k.cell[0] == "iptables-legacy"
                else 1000.0 * (1 + k.repetition))
    r = adaptive_round(rd, sc, SWEEP_FACTORS, plan)
    assert r.round == 1 and r.positions == [6, 7]
    new = {(plan[i].cell[0], plan[i].repetition) for i in r.positions}
    assert new == {("none", 2), ("nftables", 2)}
    meta = rd.meta()
    assert [TrialKey.from_dict(k, SWEEP_FACTORS) for k in meta["plan"]] == plan
    assert len(plan) == 8 and meta["plan"][0].keys() == {*SWEEP_FACTORS, "repetition"}
    (rnd,) = meta["adaptive"]["rounds"]
    assert rnd["round"] == 1 and sorted(map(tuple, rnd["cells"])) == [
        ("nftables", 20, 64), ("none", 0, 64)]
    assert rnd["widths"]["iptables-legacy/20/64"] == 0
    assert rnd["widths"]["none/0/64"] == pytest.approx(1 / 1.5)
    json.dumps(meta, allow_nan=False)  # no inf or nan in run.json

    # Once the round's trials are recorded, the next round numbers on, the narrow
    # cell stays out, and the cap (4 trials per cell) ends it.
    record_plan(rd, plan, lambda k: 1000.0 * (1 + k.repetition))
    r2 = adaptive_round(rd, sc, SWEEP_FACTORS, plan)
    assert r2.round == 2 and r2.positions == [8, 9]
    assert {(plan[i].cell[0], plan[i].repetition) for i in r2.positions} == {
        ("none", 3), ("nftables", 3)}
    record_plan(rd, plan, lambda k: 1000.0 * (1 + k.repetition))
    assert adaptive_round(rd, sc, SWEEP_FACTORS, plan) is None  # every cell at max_repeat = 4
    assert len(rd.meta()["adaptive"]["rounds"]) == 2


def seeded_round(cells, seed, k):
    """Round k's order as loop.adaptive_round makes it: the cells that need more,
    sorted, shuffled by random.Random(f"{seed}:adaptive:{k}")."""
    order = sorted(cells)
    random.Random(f"{seed}:adaptive:{k}").shuffle(order)
    return order


def test_round_order_is_seeded_by_seed_and_round(tmp_path):
    cells = [("none", 0, 64)] + [(b, n, 64) for b in ("iptables-legacy", "nftables")
                                 for n in (20, 1000)]
    got = {}
    for seed in (5, 6):
        sc, rd, plan = run_dir(tmp_path / str(seed), seed=seed, rules=(20, 1000))
        for k in (1, 2):
            record_plan(rd, plan, lambda key: 1000.0 * (1 + key.repetition))  # all wide
            r = adaptive_round(rd, sc, SWEEP_FACTORS, plan)
            assert r.round == k
            got[seed, k] = [plan[i].cell for i in r.positions]
    want = {key: seeded_round(cells, *key) for key in got}
    assert got == want
    # The four reference orders differ from each other and from the sorted order, so
    # the comparison catches an order that ignores the seed or the round, or none.
    orders = {tuple(o) for o in want.values()} | {tuple(sorted(cells))}
    assert len(orders) == 5


def test_rounds_go_on_from_what_run_json_holds(tmp_path):
    """As after `--resume`: the round number continues from run.json's rounds."""
    sc, rd, plan = run_dir(tmp_path)
    record_plan(rd, plan, lambda k: 1000.0 * (1 + k.repetition))
    adaptive_round(rd, sc, SWEEP_FACTORS, plan)
    record_plan(rd, plan, lambda k: 1000.0 * (1 + k.repetition))
    reopened = RunDir.open(rd.path)
    plan2 = [TrialKey.from_dict(k, SWEEP_FACTORS) for k in reopened.meta()["plan"]]
    r = adaptive_round(reopened, sc, SWEEP_FACTORS, plan2)
    assert r.round == 2 and r.positions == [9, 10, 11]
    assert not math.isnan(r.widths[("none", 0, 64)])


# --- a time budget (adaptive.budget_min) ----------------------------------------------

def test_within_budget_keeps_the_widest_cells_that_fit():
    from fwbench.adaptive import within_budget
    recs = [rec(rep=i, rx_pps=1.0) for i in range(10)]      # 10 trials of 1 s each
    cells = [("a",), ("b",), ("c",), ("d",)]
    widths = {("a",): 0.1, ("b",): None, ("c",): 0.5, ("d",): 0.2}
    # 13 s budget, 10 spent: room for 3 trials: no width yet, then the widest two
    assert within_budget(cells, widths, recs, 13.0) == [("b",), ("c",), ("d",)]
    assert within_budget(cells, widths, recs, 11.5) == [("b",)]
    assert within_budget(cells, widths, recs, 10.5) == []
    assert within_budget(cells, widths, recs, 100.0) == cells


def test_a_spent_budget_ends_the_rounds_and_says_so(tmp_path):
    sc, rd, plan = run_dir(tmp_path, max_repeat=6)
    record_plan(rd, plan, lambda k: 1000.0 * (1 + k.repetition))      # every cell wide
    spent = sum(r.duration_s for r in rd.records())                   # 6 trials, 6 s
    tight = scenario.from_dict({**sc.dump(), "adaptive": {
        **sc.dump()["adaptive"], "budget_min": (spent + 2.5) / 60}})
    r = adaptive_round(rd, tight, SWEEP_FACTORS, plan)
    assert len(r.positions) == 2                                      # 2 of 3 cells fit
    assert rd.meta()["adaptive"]["rounds"][0]["left_for_budget"] == 1
    record_plan(rd, plan, lambda k: 1000.0 * (1 + k.repetition))
    assert adaptive_round(rd, tight, SWEEP_FACTORS, plan) is None
    assert "budget of" in rd.meta()["adaptive"]["stopped"]


# --- blocks: cells that run back to back (keep_loaded) ---------------------------------

def test_blocks_keep_their_cells_together_in_every_round_and_stay_seeded():
    cells = sweep_cells(["none", "iptables-legacy", "nftables"], [20, 1000], [64, 512, 1518])
    block = lambda c: c[:2]   # noqa: E731
    plan = interleave(cells, 3, 7, block)
    assert plan == interleave(cells, 3, 7, block)
    for rep in range(3):
        rnd = [k.cell for k in plan if k.repetition == rep]
        assert sorted(rnd) == sorted(cells)
        seen = []
        for c in rnd:                          # a block never comes back once left
            if not seen or seen[-1] != block(c):
                assert block(c) not in seen
                seen.append(block(c))
    orders = {tuple(k.cell for k in plan if k.repetition == rep) for rep in range(3)}
    assert len(orders) == 3                    # each round its own order


def test_keep_loaded_is_for_the_sweeps_only():
    assert scenario.load(None, {"keep_loaded": True}).keep_loaded
    with pytest.raises(Exception, match="keep_loaded applies to the rule-count sweeps"):
        scenario.load(None, {"keep_loaded": True, "method": "droprate"})


# --- a sequential study: rounds for the claims not yet decided -----------------------

def study_dir(tmp_path, nft_at_1000: float, sets_noise: float, max_repeat=4):
    """Study 000's design in small: rounds add the cells its claims not yet decided
    read (until = "claims"), decided by the report's own deciders."""
    sc = scenario.load(None, {"backends": ["none", "iptables-legacy", "nftables", "ipset",
                                           "nftset"], "rules": [20, 1000], "repeat": 3,
                              "seed": 5, "study": "000", "adaptive.max_repeat": max_repeat,
                              "adaptive.until": "claims"})
    plan = interleave(sweep_cells(sc.backends, sc.rules, sc.frame_sizes), sc.repeat, sc.seed)
    rd = RunDir.create(tmp_path / "run", {"scenario": sc.dump(),
                                          "factors": list(SWEEP_FACTORS),
                                          "plan": [k.as_dict(SWEEP_FACTORS) for k in plan]})
    rng = random.Random(1)

    def value(k):
        b, n, _f = k.cell
        base = 1e6 * (nft_at_1000 if (b, n) == ("nftables", 1000) else 1.0)
        noise = sets_noise if b in ("ipset", "nftset") else 0.01
        return base * math.exp(rng.gauss(0, noise))
    return sc, rd, plan, value


def test_a_sequential_round_holds_the_cells_of_the_claims_not_yet_decided(tmp_path,
                                                                         monkeypatch):
    from fwbench.experiments import loop
    from fwbench.report import findings as rf
    from fwbench.report.findings import open_claims

    # Every open claim served, however many trials it needs (the next test: not so).
    monkeypatch.setattr(rf, "SPARE", math.inf)
    sc, rd, plan, value = study_dir(tmp_path, nft_at_1000=0.2, sets_noise=0.3)
    record_plan(rd, plan, value)
    token = loop._open_claims.set(open_claims)
    try:
        r = adaptive_round(rd, sc, SWEEP_FACTORS, plan)
        cells = {plan[i].cell for i in r.positions}
        # nftables forwards a fifth of iptables' rate at 1,000 rules: decided, so
        # its cells are not repeated for it; the sets' 30 % noise leaves "flat" and
        # "about equal" open, and their cells run again.
        assert "nft-slower-throughput" not in r.claims
        assert {"sets-flat", "sets-equal"} <= set(r.claims)
        assert {("ipset", 1000, 64), ("nftset", 20, 64)} <= cells
        assert ("none", 0, 64) not in cells
        assert rd.meta()["adaptive"]["rounds"][0]["for_claims"] == r.claims
        assert "for the claims not yet decided (" in loop._round_line(
            type("E", (), {"cell_label": lambda self, k: str(k.cell)})(), r, plan, 0.05)
        record_plan(rd, plan, value)
        assert adaptive_round(rd, sc, SWEEP_FACTORS, plan) is None   # cells at 4 trials
        assert "still not shown with their cells at 4 trials" in \
            rd.meta()["adaptive"]["stopped"]
    finally:
        loop._open_claims.reset(token)


def test_a_claim_more_trials_would_not_decide_gets_no_round(tmp_path):
    """The sets' 30 % noise against their 10 % margin: thousands of trials a cell
    would decide them where their estimates lie, far past 2 x max_repeat (4): no
    round is spent on them."""
    from fwbench.experiments import loop
    from fwbench.report import findings as rf

    sc, rd, plan, value = study_dir(tmp_path, nft_at_1000=0.2, sets_noise=0.3)
    record_plan(rd, plan, value)
    found = {f.claim.key: f for f in rf.decide(RunData(tmp_path, rd.meta(), rd.records()))}
    assert found["sets-flat"].needs > rf.SPARE * 4 and found["sets-equal"].needs > 16
    token = loop._open_claims.set(rf.open_claims)
    try:
        assert rf.open_claims(rd.meta(), rd.records()) == ([], [])
        assert adaptive_round(rd, sc, SWEEP_FACTORS, plan) is None
        assert rd.meta()["adaptive"]["stopped"] == \
            "no claim left that more trials of its cells could decide"
    finally:
        loop._open_claims.reset(token)


def test_a_sequential_study_steps_several_rounds_between_looks(tmp_path, monkeypatch):
    """step = 3: one look adds three rounds, each recorded as its own (so the report
    pairs by round within each), none past max_repeat; the looks the claims are
    tested over: 1 + ceil((9 - 3) / 3) = 3."""
    from fwbench.experiments import loop
    from fwbench.report import findings as rf

    monkeypatch.setattr(rf, "SPARE", math.inf)
    sc, rd, plan, value = study_dir(tmp_path, nft_at_1000=0.2, sets_noise=0.3,
                                    max_repeat=8)
    sc = sc.model_copy(update={"adaptive": sc.adaptive.model_copy(update={"step": 3})})
    rd.update_meta(scenario=sc.dump())
    record_plan(rd, plan, value)
    assert rf.looks(sc.dump()) == 1 + 2     # after round 3, then 6, then 8
    token = loop._open_claims.set(rf.open_claims)
    try:
        r = adaptive_round(rd, sc, SWEEP_FACTORS, plan)
        rounds = rd.meta()["adaptive"]["rounds"]
        assert [x["round"] for x in rounds] == [1, 2, 3]
        assert all(sorted(map(tuple, x["cells"])) == sorted(map(tuple, rounds[0]["cells"]))
                   for x in rounds)
        keys = [plan[i] for i in r.positions]
        assert len(keys) == 3 * len(rounds[0]["cells"])
        assert {k.repetition for k in keys} == {3, 4, 5}
        assert ", 3 trials each for the claims" in loop._round_line(
            type("E", (), {"cell_label": lambda self, k: str(k.cell)})(), r, plan, 0.05)
        record_plan(rd, plan, value)
        data = RunData(tmp_path, rd.meta(), rd.records())
        c = tuple(rounds[0]["cells"][0])
        assert {data.rounds()[(c, rep)] for rep in (3, 4, 5)} == {3, 4, 5}
        r = adaptive_round(rd, sc, SWEEP_FACTORS, plan)     # two more: max_repeat 8
        assert {plan[i].repetition for i in r.positions} == {6, 7}
    finally:
        loop._open_claims.reset(token)


def test_a_sequential_study_with_every_claim_decided_adds_nothing(tmp_path):
    from fwbench.experiments import loop
    from fwbench.report.findings import open_claims

    sc, rd, plan, value = study_dir(tmp_path, nft_at_1000=0.2, sets_noise=0.001)
    record_plan(rd, plan, value)
    token = loop._open_claims.set(open_claims)
    try:
        # Every claim with cells decided; the RTT claim (no ping in this run) and
        # the small-frames one (one frame size) read no cell more trials could help.
        assert open_claims({**rd.meta()}, rd.records()) == ([], [])
        assert adaptive_round(rd, sc, SWEEP_FACTORS, plan) is None
        assert rd.meta()["adaptive"]["stopped"] == \
            "no claim left that more trials of its cells could decide"
    finally:
        loop._open_claims.reset(token)


def test_a_sequential_round_without_a_decider_is_one_clear_error(tmp_path):
    from fwbench.errors import FwbenchError
    sc, rd, plan, value = study_dir(tmp_path, nft_at_1000=0.2, sets_noise=0.3)
    record_plan(rd, plan, value)
    with pytest.raises(FwbenchError, match="until its study's claims are decided"):
        adaptive_round(rd, sc, SWEEP_FACTORS, plan)


def test_until_claims_needs_a_study_when_rounds_are_on():
    with pytest.raises(Exception, match="needs a study whose claims to decide"):
        scenario.load(None, {"adaptive.until": "claims", "adaptive.max_repeat": 5})
    # --max-repeat 0 turns the rounds off: a study's scenario runs without its study
    sc = scenario.load(None, {"adaptive.until": "claims", "adaptive.max_repeat": 0})
    assert sc.adaptive.until == "claims" and not sc.adaptive.max_repeat
    from fwbench.report.findings import looks
    assert looks(sc.dump()) == 1


def test_a_step_without_claims_is_refused_in_one_line():
    with pytest.raises(Exception, match="adaptive.step applies to until"):
        scenario.load(None, {"adaptive.max_repeat": 6, "adaptive.step": 3})
    assert scenario.load(None, {"study": "000", "adaptive.max_repeat": 6,
                                "adaptive.step": 3, "adaptive.until": "claims"}).adaptive.step == 3
