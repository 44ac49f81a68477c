"""Seed 004's statistics on made-up records (nothing measured): configurations,
the load / no-load test, backend and NAT comparisons with Holm, the seed's pooled
view beside the per-trial one."""
from __future__ import annotations

import random

import pytest

from fwbench.experiments.base import Trial
from fwbench.experiments.loadlatency import stats as ll
from fwbench.plan import TrialKey

FACTORS = ("ruleset", "backend", "load", "entries")


def rec(cell, rep, median, spread=5.0, status="ok", load=None, seed=0):
    rng = random.Random(f"{cell}{rep}{seed}")
    rtts = [median + rng.uniform(-spread, spread) for _ in range(200)]
    t = Trial(FACTORS, TrialKey(cell, rep), rep)
    if status != "ok":
        t.fail("verification: no")
    else:
        t.metrics = {"ping": {"median": median, "mean": median, "lost": 0},
                     "ping_replies": [[1e9 + i / 100, i, x] for i, x in enumerate(rtts)],
                     "probes": {"p50": median / 3, "p99": median / 2},
                     "series": {"ping": [{"t": i, "median": median} for i in range(5)]}}
        if load:
            t.metrics["load"] = {"up_bps": 5e9, "down_bps": 4e9}
    return t.record("r", "loadlatency", "ping", None, {})


def design(n=6, loaded=3.0, nft_faster=0.0, noise=4.0, seed=1):
    """2 rule sets x 2 backends x 2 loads, n trials each: means around 60 µs
    without load, `loaded` times that with; nftables `nft_faster` µs lower."""
    rng = random.Random(seed)
    out = []
    for r in ("seed004-forward", "seed004-nat"):
        for b in ("iptables-legacy", "nftables"):
            for load in ("none", "tcp-bidir"):
                base = 60.0 * (loaded if load != "none" else 1) - \
                    (nft_faster if b == "nftables" else 0)
                for i in range(n):
                    out.append(rec((r, b, load, 0), i, base + rng.gauss(0, noise),
                                   load=load != "none"))
    return out


def test_configurations_pool_replies_and_keep_trial_medians():
    cs = ll.configs(design(n=4) + [rec(("seed004-nat", "nftables", "none", 0), 9, 1.0,
                                       status="failed")])
    s = cs[("seed004-nat", "nftables", "none", 0)]
    assert s.n == 4 and len(s.replies) == 800           # the failed trial counts nowhere
    p = s.pooled()
    assert p["p2_5"] < p["median"] < p["p97_5"] and p["replies"] == 800
    assert cs[("seed004-nat", "nftables", "tcp-bidir", 0)].load_up == [5e9] * 4


def test_load_is_found_higher_for_every_backend_with_holm():
    tests = ll.load_tests(ll.configs(design(n=6)))
    assert len(tests) == 4
    assert all(t.verdict() == "higher" and t.holm < 0.05 for t in tests)
    assert all(t.change == pytest.approx(2.0, abs=0.3) for t in tests)
    assert all(t.change_ci.low > 1.5 for t in tests)
    assert all(t.ratio.paired for t in tests)     # the same rounds: paired by round


def test_four_trials_decide_where_the_seeds_rank_test_cannot():
    """At n = 4 the seed's smallest one-tailed Mann-Whitney p is 1/70: four of them,
    Holm-adjusted, stay above 0.05 however large the effect. The log ratio, paired
    by round, decides; the seed's test stays beside."""
    tests = ll.load_tests(ll.configs(design(n=4, loaded=10)))
    assert all(t.greater.p == pytest.approx(1 / 70) for t in tests)
    assert all(t.verdict() == "higher" and t.holm < 0.05 for t in tests)


def test_equal_backends_show_no_difference_and_a_real_one_is_found():
    same = ll.backend_tests(ll.configs(design(n=6, nft_faster=0.0, seed=3)))
    assert len(same) == 4 and all(t.a[1] == "nftables" for t in same)
    assert sum(t.verdict() != "no difference shown" for t in same) <= 1
    faster = ll.backend_tests(ll.configs(design(n=6, nft_faster=30.0, noise=2.0)))
    assert all(t.verdict() == "lower" and t.holm < 0.01 for t in faster)


def test_the_pooled_replies_claim_what_trials_do_not():
    """Two backends whose trial medians differ by noise alone: the pooled test on
    1,200 replies a side finds a 'difference' the per-trial test does not."""
    recs = []
    for b, shift, phase in (("iptables-legacy", 0.0, 0), ("nftables", 1.0, 1)):
        for i in range(6):   # each trial +-3 µs of its own, not shared by the round
            recs.append(rec(("seed004-forward", b, "none", 0), i,
                            60.0 + shift + (-1) ** (i + phase) * 3.0, spread=0.5))
    (t,) = ll.backend_tests(ll.configs(recs))
    assert t.pooled_two.p < 1e-6 and t.verdict() == "no difference shown"


def test_nat_against_forwarding_pairs_the_same_backend_and_load():
    tests = ll.nat_tests(ll.configs(design(n=5)))
    assert {(t.a[1], t.a[2]) for t in tests} == {
        (b, load) for b in ("iptables-legacy", "nftables") for load in ("none", "tcp-bidir")}
    assert all(t.a[0] == "seed004-nat" and t.b[0] == "seed004-forward" for t in tests)


def test_background_connections_are_tested_against_the_fewest():
    recs = [rec(("seed004-nat", "nftables", "none", n), i, 60.0 + (20.0 if n == 100_000
                                                                  else 0.0) + i % 3)
            for n in (1, 1_000, 100_000) for i in range(6)]
    tests = ll.entries_tests(ll.configs(recs))
    assert [t.what for t in tests] == ["nftables, seed004-nat, none: 1,000 vs 1 conns",
                                       "nftables, seed004-nat, none: 100,000 vs 1 conns"]
    assert tests[0].verdict() == "no difference shown" and tests[1].verdict() == "higher"
    assert ll.entries_tests(ll.configs(design(n=2))) == []   # one level: nothing to test
