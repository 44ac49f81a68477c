"""The studies' claims decided on runs of known numbers (nothing measured): each
verdict follows what was planted, an unknown verdict is refused, every study's claims
appear once and in order, and a run that belongs to no study has no findings."""
from __future__ import annotations

import random

import numpy as np
import pytest

from fwbench.experiments.base import Trial
from fwbench.findings import CLAIMS, DOES_NOT_HOLD, HOLDS, NOT_SHOWN, Finding, claim
from fwbench.plan import TrialKey, make_plan
from fwbench.report import findings as rf
from fwbench.report.data import RunData
from fwbench.results import SCHEMA_VERSION, SWEEP_FACTORS, TrialRecord
from fwbench.scenario import from_dict

RULES = [20, 100, 1000, 10000]
FRAMES = [64, 1518]


def sweep(model, study="000", repeat=5, noise=0.01, seed=1, rtt=None) -> RunData:
    """A maxrate run: ns per packet = model[backend](rules, frame), 1 % noise;
    `rtt(backend, rules)` the ping RTT (µs)."""
    sc = from_dict({"name": "s", "backends": list(model), "rules": RULES,
                    "frame_sizes": FRAMES, "repeat": repeat, "study": study})
    plan = make_plan(list(model), RULES, FRAMES, repeat, seed)
    rng = np.random.default_rng(seed)
    recs = []
    for i, k in enumerate(plan):
        b, n, f = k.cell
        ns = model[b](n, f) * (1 + noise * rng.standard_normal())
        r = (rtt(b, n) if rtt else 100.0) * (1 + noise * rng.standard_normal())
        recs.append(TrialRecord(
            schema_version=SCHEMA_VERSION, run_id="t", trial=i,
            factors=dict(zip(SWEEP_FACTORS, k.cell)), method="maxrate",
            traffic="engine+ping", repetition=k.repetition, status="ok", reason=None,
            verification={"ok": True}, load_time_s=0.01,
            metrics={"rx_pps": 1e9 / ns, "rtt_us_median": r}, started_at="x",
            duration_s=1.0, ruleset_sha256=None))
    meta = {"scenario": sc.dump(), "factors": list(SWEEP_FACTORS),
            "plan": [k.as_dict(SWEEP_FACTORS) for k in plan]}
    return RunData(__import__("pathlib").Path("/nonexistent"), meta, recs)


def linear(a, b, small=1.0):
    """a + b * rules ns; `small` multiplies the per-rule cost of 64-byte frames."""
    return lambda n, f: a + b * n * (small if f == 64 else 1.0)


SEED000_LIKE = {"iptables-legacy": linear(1000, 4.0), "nftables": linear(1000, 20.0, 2.0),
                "ipset": linear(1300, 0.0), "nftset": linear(1300, 0.0)}


def verdicts(found):
    return {f.claim.key: f.verdict for f in found}


def test_seed000_planted_as_the_seed_found_holds_throughout():
    found = rf.decide(sweep(SEED000_LIKE, rtt=lambda b, n: 100 + (n / 10 if b == "nftables"
                                                                  else n / 100)))
    assert [f.claim for f in found] == list(CLAIMS["000"])
    assert verdicts(found) == dict.fromkeys(
        ("nft-slower-throughput", "nft-slower-latency", "small-frames-worse", "sets-flat",
         "sets-equal"), HOLDS)
    # per frame size, the mean over the 2 rule counts >= 1,000
    assert "64 B 0.11x" in found[0].ours and "1518 B 0.22x" in found[0].ours
    assert "every one of 2 frame sizes" in found[0].why


def test_seed000_the_other_way_round_does_not_hold():
    model = {"iptables-legacy": linear(1000, 20.0, 2.0), "nftables": linear(1000, 4.0),
             "ipset": linear(1300, 0.05), "nftset": linear(1300 * 1.5, 0.0)}
    v = verdicts(rf.decide(sweep(model)))
    assert v["nft-slower-throughput"] == DOES_NOT_HOLD
    assert v["sets-flat"] == DOES_NOT_HOLD      # ipset: 1300 -> 1800 ns, 28 % slower
    assert v["sets-equal"] == DOES_NOT_HOLD     # 1.5x apart
    assert v["nft-slower-latency"] == NOT_SHOWN  # equal RTTs: no difference shown


def test_seed000_noise_leaves_it_not_shown():
    equal = {b: linear(1000, 4.0) for b in ("iptables-legacy", "nftables", "ipset", "nftset")}
    v = verdicts(rf.decide(sweep(equal, noise=0.2, repeat=3)))
    assert v["nft-slower-throughput"] == NOT_SHOWN and v["small-frames-worse"] == NOT_SHOWN


def test_seed000_without_the_backends_is_not_shown_with_why():
    found = rf.decide(sweep({"iptables-legacy": linear(1000, 4.0)}))
    assert all(f.verdict == NOT_SHOWN and f.why for f in found)


def test_a_run_of_no_study_has_no_findings():
    assert rf.decide(sweep(SEED000_LIKE, study=None)) == []


def test_a_finding_takes_only_the_three_verdicts():
    with pytest.raises(ValueError):
        Finding(claim("000", "sets-flat"), "-", "maybe", "")
    assert {f.claim.study for s in CLAIMS.values() for f in
            [Finding(c, "-", NOT_SHOWN, "x") for c in s]} == set(CLAIMS)


# --- seed 004 --------------------------------------------------------------------------

LL = ("ruleset", "backend", "load", "entries")


def ll_rec(cell, rep, mean):
    t = Trial(LL, TrialKey(cell, rep), rep)
    t.metrics = {"ping": {"median": mean, "mean": mean, "lost": 0}, "ping_replies": [],
                 "series": {"ping": []}}
    return t.record("r", "loadlatency", "ping", None, {})


def loadlatency(loaded=3.0, nft=0.0, nat=0.0, n=6, noise=1.0) -> RunData:
    rng = random.Random(1)
    recs = []
    for r in ("seed004-forward", "seed004-nat"):
        for b in ("iptables-legacy", "nftables"):
            for load in ("none", "tcp-bidir"):
                base = 100.0 * (loaded if load != "none" else 1) + \
                    (nft if b == "nftables" and load != "none" else 0) + \
                    (nat if r == "seed004-nat" else 0)
                recs += [ll_rec((r, b, load, 0), i, base + rng.gauss(0, noise))
                         for i in range(n)]
    return RunData(__import__("pathlib").Path("/x"),
                   {"scenario": {"method": "loadlatency"}, "factors": list(LL)}, recs)


def test_seed004_as_the_seed_found():
    v = verdicts(rf.decide(loadlatency(nft=-30.0)))
    assert v == {"load-triples-latency": HOLDS, "nat-equals-forward": HOLDS,
                 "nft-lower-under-load": HOLDS}


def test_seed004_otherwise():
    v = verdicts(rf.decide(loadlatency(loaded=1.0, nft=30.0, nat=50.0)))
    found = {f.claim.key: f for f in rf.decide(loadlatency(loaded=1.0, nft=30.0, nat=50.0))}
    # no load effect at all: not "about 3x", whatever its direction
    assert v["load-triples-latency"] == DOES_NOT_HOLD
    assert "size does not hold" in found["load-triples-latency"].why
    assert v["nat-equals-forward"] == DOES_NOT_HOLD
    assert v["nft-lower-under-load"] == DOES_NOT_HOLD


# --- seed 003 ---------------------------------------------------------------------------

FR = ("backend", "rules", "frame_size", "chain", "cpus")


def fr_rec(cell, rep, pps):
    t = Trial(FR, TrialKey(cell, rep), rep)
    t.metrics = {"processed_pps": pps, "loss_ratio": 0.0}
    return t.record("r", "fixedrate", "engine", None, {})


def fixedrate(ratio_2cpu=1.0, adv=(5.0, 1.7)) -> RunData:
    """iptables-legacy and nftables at 6,000 rules, 128 and 1280 B, both chains, 1 and
    2 CPUs; INPUT = FORWARD on 1 CPU, INPUT `ratio_2cpu` x FORWARD on 2."""
    rng = random.Random(3)
    recs = []
    for b in ("iptables-legacy", "nftables"):
        for f, a in zip((128, 1280), adv):
            for chain in ("forward", "input"):
                for cpus in (1, 2):
                    base = 10_000.0 / (a if b == "nftables" else 1.0)
                    base *= ratio_2cpu if (chain, cpus) == ("input", 2) else 1.0
                    recs += [fr_rec((b, 6000, f, chain, cpus), i,
                                    base * (1 + rng.gauss(0, 0.01))) for i in range(4)]
    return RunData(__import__("pathlib").Path("/x"),
                   {"scenario": {"method": "fixedrate"}, "factors": list(FR)}, recs)


def test_seed003_input_against_forward_is_decided_on_one_cpu_and_says_the_rest():
    found = {f.claim.key: f for f in rf.decide(fixedrate(ratio_2cpu=1.8))}
    f = found["input-equals-forward"]
    assert f.verdict == HOLDS and "1 CPU" in f.ours and "2 CPUs" not in f.ours
    assert "shared with the sender" in f.why and "1.80x" in f.why
    assert found["advantage-small-packets"].verdict == HOLDS
    assert found["nft-degrades-earlier"].verdict == NOT_SHOWN     # nothing lost at all


def test_seed003_advantage_the_other_way_does_not_hold():
    found = {f.claim.key: f for f in rf.decide(fixedrate(adv=(1.5, 3.0)))}
    assert found["advantage-small-packets"].verdict == DOES_NOT_HOLD


@pytest.mark.parametrize("study", ["001", "002", "004"])
def test_a_run_json_naming_a_study_of_another_method_reports_without_a_key_error(study):
    # Written before the scenario refused it: a maxrate sweep that names seed 001's,
    # 002's or 004's study, whose decisions read factors a sweep has not (KeyError).
    data = sweep(SEED000_LIKE)
    data.meta["scenario"]["study"] = study
    assert rf.study_of(data) is None and rf.decide(data) == []


def test_a_one_study_method_keeps_its_own_study_whatever_run_json_names():
    data = RunData(__import__("pathlib").Path("/nonexistent"), {"scenario": {
        **from_dict({"method": "echo"}).dump(), "study": "003"}, "factors": []}, [])
    assert rf.study_of(data) == "001"
    assert rf.study_of(sweep(SEED000_LIKE)) == "000"
