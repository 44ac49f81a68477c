"""The studies' claims decided on runs of known numbers (nothing measured): each
verdict follows what was planted, an unknown verdict is refused, every study's claims
appear once and in order, and a run that belongs to no study has no findings."""
from __future__ import annotations

import random

import numpy as np
import pytest

from fwbench.experiments.base import Trial
from fwbench.findings import CLAIMS, DOES_NOT_HOLD, HOLDS, NOT_SHOWN, Finding, claim
from fwbench.plan import TrialKey, interleave, sweep_cells
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
    plan = interleave(sweep_cells(list(model), RULES, FRAMES), repeat, seed)
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
    # equal RTTs: no longer round trip shown, and none as long as the claim means
    # (half the seed's 2.6x: 1.8x)
    assert v["nft-slower-latency"] == DOES_NOT_HOLD


def test_seed000_no_change_where_the_seed_found_one_does_not_hold():
    """nftables' lag the same at every frame size (on veth no wire caps the large
    frames): the lag with small frames is shown short of the least the claim means,
    half the seed's 0.82x."""
    same = {"iptables-legacy": linear(1000, 4.0), "nftables": linear(1000, 20.0),
            "ipset": linear(1300, 0.0), "nftset": linear(1300, 0.0)}
    found = {f.claim.key: f for f in rf.decide(sweep(same))}
    f = found["small-frames-worse"]
    assert f.verdict == DOES_NOT_HOLD and "0.91x, the least change" in f.why
    assert "over 4 rule counts" in f.ours        # every rule count, 20 to 10,000
    assert found["nft-slower-throughput"].verdict == HOLDS


def test_seed000_noise_leaves_it_not_shown():
    equal = {b: linear(1000, 4.0) for b in ("iptables-legacy", "nftables", "ipset", "nftset")}
    v = verdicts(rf.decide(sweep(equal, noise=0.4, repeat=3)))
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


# --- seed 002 ---------------------------------------------------------------------------

DR = ("treatment", "set_size", "frame_size")


def dr_rec(tid, size, rep, pps):
    t = Trial(DR, TrialKey((tid, size, 128), rep), rep)
    t.metrics = {"disposed_pps": pps, "cpu_ns_per_pkt": 1e9 / pps,
                 "softirq_ns_per_pkt": 5e8 / pps}
    return t.record("r", "droprate", "engine", None, {"group": "drop", "label": tid})


def droprate(rates: dict, n=5, noise=0.005, drift=0.3) -> RunData:
    """Every treatment once a round; a shared drift of +-30 % per round moves all."""
    rng = random.Random(5)
    recs = []
    for i in range(n):
        d = 1 + rng.uniform(-drift, drift)
        recs += [dr_rec(tid, size, i, v * d * (1 + rng.gauss(0, noise)))
                 for (tid, size), v in rates.items()]
    return RunData(__import__("pathlib").Path("/x"),
                   {"scenario": {"method": "droprate"}, "factors": list(DR)}, recs)


SEED002_LIKE = {("notrack", 0): 1.20e6, ("conntrack", 0): 1.0e6, ("raw", 0): 1.12e6,
                ("filter-input", 0): 1.0e6, ("ipset", 1): 1.0e6, ("ipset", 130561): 0.99e6,
                ("string-bm", 0): 1.1e6, ("string-kmp", 0): 1.0e6}


def test_seed002_as_the_seed_found_holds_despite_the_drift():
    found = {f.claim.key: f for f in rf.decide(droprate(SEED002_LIKE))}
    assert {k: f.verdict for k, f in found.items()} == dict.fromkeys(
        ("notrack-faster", "raw-cheaper", "ipset-flat", "bm-cheaper"), HOLDS)
    assert "direction holds, size holds" in found["notrack-faster"].why
    # each claim names the cells it reads: what a sequential round re-runs
    assert {c[0] for c in found["notrack-faster"].cells} == {"notrack", "conntrack"}
    assert {c[1] for c in found["ipset-flat"].cells} == {1, 130561}


def test_seed002_notrack_5_percent_faster_is_the_direction_not_the_size():
    rates = {**SEED002_LIKE, ("notrack", 0): 1.05e6, ("ipset", 130561): 0.75e6,
             ("string-bm", 0): 0.8e6}
    found = {f.claim.key: f for f in rf.decide(droprate(rates))}
    assert found["notrack-faster"].verdict == DOES_NOT_HOLD
    assert found["notrack-faster"].why.startswith("direction holds, size does not hold")
    assert found["ipset-flat"].verdict == DOES_NOT_HOLD       # 25 % slower: beyond 10 %
    assert found["bm-cheaper"].verdict == DOES_NOT_HOLD       # the other way


def test_seed002_too_few_rounds_or_too_noisy_is_not_shown_with_what_it_needs():
    found = {f.claim.key: f for f in rf.decide(droprate(SEED002_LIKE, n=1))}
    assert all(f.verdict == NOT_SHOWN for f in found.values())
    assert "too few paired rounds" in found["notrack-faster"].why
    noisy = {f.claim.key: f for f in rf.decide(droprate(
        {**SEED002_LIKE, ("ipset", 130561): 1.0e6}, n=3, noise=0.08))}
    f = noisy["ipset-flat"]
    assert f.verdict == NOT_SHOWN and "reaches past ±10 %" in f.why
    assert "needs ±" in f.why and "trials a cell" in f.why


# --- seed 001 ---------------------------------------------------------------------------

from fwbench.experiments.echo.design import FACTORS as EF   # noqa: E402


def echo_rec(cell: dict, rep: int, bps: float):
    t = Trial(EF, TrialKey(tuple(cell[f] for f in EF), rep), rep)
    t.metrics = {"throughput": {"client_mean_bps": bps}}
    return t.record("r", "echo", "echo", None, {})


def echo(slower: dict, n=4, noise=0.01, sctp=False) -> RunData:
    """Echo cells at 10 and 40 clients, F = 0: protocol x family, epoll; the slow
    side of each factor `slower[factor]` x the other."""
    rng = random.Random(9)
    recs = []
    protocols = ("tcp", "udp", "sctp") if sctp else ("tcp", "udp")
    for clients in (10, 40):
        for proto in protocols:
            for fam in ("ipv4", "ipv6"):
                base = 1e8 * (slower["protocol"] if proto == "tcp" else 1.0) * \
                    (slower["family"] if fam == "ipv6" else 1.0) * \
                    (slower.get("sctp", 1.0) if proto == "sctp" else 1.0)
                if proto == "sctp":
                    base *= slower["protocol"]      # relative to TCP
                cell = {"clients": clients, "protocol": proto, "family": fam, "frame": 64,
                        "server": "epoll", "rules_per_client": 0,
                        "backend": "iptables-legacy", "transaction": "echo", "entries": 0}
                recs += [echo_rec(cell, i, base * (1 + rng.gauss(0, noise)))
                         for i in range(n)]
    meta = {"scenario": {"method": "echo"}, "factors": list(EF)}
    if not sctp:
        meta["left_out"] = {"sctp: this kernel has no SCTP (modprobe sctp failed)": 8}
    return RunData(__import__("pathlib").Path("/x"), meta, recs)


def test_seed001_tcp_and_ipv6_slower_are_decided_on_the_mean_over_pairs():
    found = {f.claim.key: f for f in rf.decide(echo({"protocol": 0.92, "family": 0.91}))}
    noisy = {f.claim.key: f for f in rf.decide(echo({"protocol": 0.98, "family": 0.91},
                                                    n=2, noise=0.2))}
    assert noisy["tcp-vs-udp"].verdict == NOT_SHOWN and "holds 1" in noisy["tcp-vs-udp"].why
    assert found["tcp-vs-udp"].verdict == HOLDS and found["ipv6-vs-ipv4"].verdict == HOLDS
    assert "over 4 pairs" in found["tcp-vs-udp"].ours
    # without SCTP in the kernel the SCTP row says why, from the run
    assert found["sctp-vs-tcp"].verdict == NOT_SHOWN
    assert "this kernel has no SCTP" in found["sctp-vs-tcp"].why


def test_seed001_the_other_way_does_not_hold_and_sctp_is_decided_where_it_ran():
    found = {f.claim.key: f for f in rf.decide(
        echo({"protocol": 1.10, "family": 1.05, "sctp": 0.7}, sctp=True))}
    assert found["tcp-vs-udp"].verdict == DOES_NOT_HOLD       # TCP faster here
    assert found["ipv6-vs-ipv4"].verdict == DOES_NOT_HOLD     # and IPv6
    # SCTP cells ran: the row is decided on them (it was hard-wired "not shown")
    assert found["sctp-vs-tcp"].verdict == HOLDS and "sctp / tcp" in found["sctp-vs-tcp"].ours


@pytest.mark.parametrize("interval, verdict, said", [
    ((0.04, 0.06), HOLDS, "direction holds, size holds"),
    ((0.025, 0.075), HOLDS, "direction holds, size holds"),          # exactly on the size
    ((0.010, 0.020), DOES_NOT_HOLD, "direction holds, size does not hold"),  # below it
    ((0.030, 0.090), NOT_SHOWN, "direction holds, size not shown"),   # straddling
    ((-0.01, 0.06), NOT_SHOWN, "direction not shown, size not shown"),
    ((-0.05, -0.01), DOES_NOT_HOLD, "direction does not hold"),
    (None, NOT_SHOWN, "too few trials"),
])
def test_seed001_loss_per_rule_literal_intervals(interval, verdict, said):
    from fwbench.experiments.echo import stats as es
    from fwbench.experiments.echo.section import _slope_row
    mid = sum(interval) / 2 if interval else 0.05
    sl = es.Slope("ipv4", "iptables-legacy", mid, interval, 6, 640, 0.9)
    row = _slope_row(sl, "ipv4")
    assert row[3] == verdict and said in row[4], row


def test_a_sequential_study_says_its_looks_and_level_in_the_table():
    from fwbench.report.document import markdown
    data = sweep(SEED000_LIKE)
    data.meta["scenario"]["adaptive"] = {"until": "claims", "max_repeat": 9}
    data.meta["scenario"]["repeat"] = 5
    assert rf.looks(data.scenario) == 5
    text = markdown(rf.blocks(data, rf.decide(data)))
    assert "a one-sided test at 1 % (5 % over the run's 5 looks" in text
    assert "the interval beside is the 98 % one" in text and "(98 %)" in text
    assert rf.looks(sweep(SEED000_LIKE).scenario) == 1


def _server_tests(verdicts: dict[int, str]):
    """Threads against epoll per client count: "t" threads significantly faster,
    "e" epoll, "-" no difference shown (Holm-adjusted p as given)."""
    from fwbench.experiments.echo import stats as es
    out = []
    for n, v in verdicts.items():
        diff, p = {"t": (10.0, 0.001), "e": (-30.0, 0.001), "-": (-3.0, 0.4)}[v]
        out.append(es.ServerTest(("tcp", "ipv4"), n, diff, (diff - 5, diff + 5), p, p,
                                 None, 4, 4))
    return out


@pytest.mark.parametrize("pattern, verdict, said", [
    # this machine, two study runs: epoll faster from 10 clients; from 20 with threads
    # faster at 5. Both put the turning point below 20: does not hold, both times.
    ("-eeeeee", DOES_NOT_HOLD, "within 0..10 clients"),
    ("t-eeeee", DOES_NOT_HOLD, "within 5..20 clients"),
    ("ttteeee", HOLDS, "within 20..40 clients"),          # the seed's: ~40
    ("ttt-eee", NOT_SHOWN, "within 20..80 clients"),      # reaches past 60
    ("-------", NOT_SHOWN, "no count significant either way"),
    ("tttttte", DOES_NOT_HOLD, "within 160..320 clients"),  # beyond 60
    ("tteette", DOES_NOT_HOLD, "no one turning point"),
])
def test_seed001_threads_against_epoll_brackets_the_turning_point(pattern, verdict, said):
    from fwbench.experiments.echo.section import _server_row
    tests = _server_tests(dict(zip((5, 10, 20, 40, 80, 160, 320), pattern)))
    row = _server_row(tests, None)
    assert row[3] == verdict and said in row[4], row
