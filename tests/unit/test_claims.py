"""How claims are decided (fwbench.claims), on estimates built by hand with literal
90 % intervals, where the right verdict is known without the code: inside the
claim's margin, outside it, straddling it, exactly on it, too few trials, and a
part contradicting the claim among parts supporting it. Then every claim of the
five studies under its own rule, and seeded simulations of the error rates."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from fwbench import claims as cl
from fwbench.claims import DOES_NOT_HOLD, HOLDS, NOT_SHOWN, Rule
from fwbench.findings import CLAIMS


def at(lo: float, hi: float, df: float = 8, trials: int = 3) -> cl.Estimate:
    """An estimate whose 90 % interval is exactly [lo, hi]."""
    mid = (math.log(lo) + math.log(hi)) / 2
    se = (math.log(hi) - math.log(lo)) / 2 / sps.t.ppf(0.95, df)
    return cl.Estimate(mid, se, df, "by hand", trials)


def test_the_hand_built_interval_is_the_one_printed():
    assert cl.show(at(0.25, 0.38)) == "0.31x [0.25, 0.38] (90 %)"
    lo, hi = at(1.5, 4.0).interval()
    assert (lo, hi) == (pytest.approx(1.5), pytest.approx(4.0))


EQUAL = Rule("equal", 0.10)


@pytest.mark.parametrize("lo, hi, verdict", [
    (0.95, 1.05, HOLDS),            # inside the margin
    (0.90, 1.10, HOLDS),            # exactly on it: an end on the margin is inside
    (1.12, 1.30, DOES_NOT_HOLD),    # wholly beyond it
    (0.70, 0.85, DOES_NOT_HOLD),    # wholly beyond it, below
    (1.10, 1.30, NOT_SHOWN),        # touching it from outside: not wholly beyond
    (0.95, 1.15, NOT_SHOWN),        # straddling it
    (0.80, 1.25, NOT_SHOWN),        # straddling both ends
])
def test_an_equivalence_is_two_one_sided_tests_against_its_margin(lo, hi, verdict):
    assert cl.decide(EQUAL, at(lo, hi)).verdict == verdict


@pytest.mark.parametrize("rule, lo, hi, verdict", [
    (Rule("below"), 0.25, 0.38, HOLDS),
    (Rule("below"), 0.90, 1.00, HOLDS),           # the end exactly on 1
    (Rule("below"), 1.02, 1.30, DOES_NOT_HOLD),   # the other way
    (Rule("below"), 1.00, 1.30, NOT_SHOWN),       # touching 1 from the other side
    (Rule("below"), 0.90, 1.10, NOT_SHOWN),
    (Rule("above"), 1.01, 1.02, HOLDS),
    (Rule("above"), 0.50, 0.99, DOES_NOT_HOLD),
    (Rule("above"), 0.99, 1.50, NOT_SHOWN),
])
def test_a_direction_is_a_one_sided_test(rule, lo, hi, verdict):
    assert cl.decide(rule, at(lo, hi)).verdict == verdict


ABOUT_20 = Rule("about", size=(1.10, 1.30))


@pytest.mark.parametrize("lo, hi, verdict, said", [
    (1.15, 1.25, HOLDS, "direction holds, size holds"),
    (1.10, 1.30, HOLDS, "direction holds, size holds"),           # exactly on the size
    # seed 002's NOTRACK today: +5.1 % [+0.1, +6.1]: the direction, not the size
    (1.001, 1.061, DOES_NOT_HOLD, "direction holds, size does not hold"),
    (1.05, 1.20, NOT_SHOWN, "direction holds, size not shown"),   # straddling the size
    (0.98, 1.05, DOES_NOT_HOLD, "direction not shown, size does not hold"),
    (0.80, 0.95, DOES_NOT_HOLD, "direction does not hold, size does not hold"),
    (0.95, 1.25, NOT_SHOWN, "direction not shown, size not shown"),
])
def test_a_size_is_decided_on_its_direction_and_its_size_separately(lo, hi, verdict, said):
    d = cl.decide(ABOUT_20, at(lo, hi))
    assert d.verdict == verdict and d.why.startswith(said), d.why


def test_too_few_trials_is_not_shown():
    for rule in (EQUAL, Rule("below"), ABOUT_20):
        d = cl.decide(rule, None)
        assert d.verdict == NOT_SHOWN and "too few trials" in d.why


def test_a_rule_is_written_with_its_margin():
    assert EQUAL.text == "within ±10 % (TOST, 5 %)"
    assert ABOUT_20.text.startswith("1.10x..1.30x")
    with pytest.raises(ValueError):
        Rule("about", size=(0.9, 1.2))       # a size is on one side of 1
    with pytest.raises(ValueError):
        Rule("equal")                        # an equivalence needs its margin
    with pytest.raises(ValueError):
        Rule("sideways")


# -- claims over many parts ---------------------------------------------------------

def test_every_part_must_hold_and_a_chance_contradiction_does_not_decide():
    supporting = {f"{f} B": at(0.2, 0.4) for f in (64, 128, 256, 512, 1024, 1280)}
    # one part a little the other way: p about 0.03 alone, far from it after Holm
    # across seven
    weak = {**supporting, "1518 B": at(1.001, 1.2, df=30)}
    assert cl.p_fails(Rule("below"), weak["1518 B"]) < 0.05
    d = cl.every(Rule("below"), weak, "frame sizes")
    assert d.verdict == NOT_SHOWN and "holds in 6 of 7 frame sizes" in d.why
    # one part clearly the other way: it fails even after Holm
    strong = {**supporting, "1518 B": at(1.5, 1.7)}
    d = cl.every(Rule("below"), strong, "frame sizes")
    assert d.verdict == DOES_NOT_HOLD and "1518 B" in d.why
    assert cl.every(Rule("below"), supporting, "frame sizes").verdict == HOLDS
    # a part without an estimate: not every part shown
    d = cl.every(Rule("below"), {**supporting, "1518 B": None}, "frame sizes")
    assert d.verdict == NOT_SHOWN and "1518 B" in d.why


def test_the_mean_over_cells_is_the_geometric_mean_with_the_cells_own_error():
    parts = [cl.Estimate(math.log(r), 0.1, 4, "x", 3) for r in (0.5, 1.0, 2.0)]
    e = cl.pooled(parts)
    assert e.ratio == pytest.approx(1.0) and e.se == pytest.approx(math.sqrt(3 * 0.01) / 3)
    assert e.df == pytest.approx(12.0)      # Welch-Satterthwaite: 3 x 4
    assert cl.pooled([]) is None and cl.pooled(parts[:1]) is parts[0]


def test_a_ratio_of_ratios():
    a, b = cl.Estimate(math.log(0.2), 0.03, 4, "a", 3), cl.Estimate(math.log(0.5), 0.04, 4, "b", 3)
    c = cl.contrast(a, b)
    assert c.ratio == pytest.approx(0.4) and c.se == pytest.approx(0.05)
    assert 4 < c.df < 8


def test_a_range_from_brackets_decides_without_a_test():
    five = Rule("about", size=(3.0, 7.0))
    assert cl.decide_range(five, 4.0, 6.0).verdict == HOLDS
    assert cl.decide_range(five, 3.0, math.inf).verdict == NOT_SHOWN     # open above
    assert cl.decide_range(five, 0.0, 1 / 3).verdict == DOES_NOT_HOLD    # nftables lasts
    assert cl.decide_range(five, 1.5, 2.5).verdict == DOES_NOT_HOLD      # earlier, not 5x
    assert cl.decide_range(EQUAL, 0.95, 1.10).verdict == HOLDS


# -- what a claim not decided would need --------------------------------------------

def test_an_undecided_claim_says_what_it_would_need():
    e = at(0.80, 1.25, trials=3)      # +-25 %, centred on 1: equivalence within 10 %
    said = cl.need(EQUAL, e, trial_s=2.0, cells=10)
    half = math.log(1.25)
    n = math.ceil(3 * (half / math.log(1.1)) ** 2)
    assert said.startswith(f"needs ±10 %: about {n} trials a cell (~")
    assert f"~{round((n - 3) * 10 * 2.0 / 60)} min more" in said
    # a claim decided already, or estimates exactly on the bound
    assert cl.need(EQUAL, at(0.95, 1.05)) == ""
    on = cl.Estimate(math.log(1.1), 0.05, 8, "x", 3)
    assert "no number of trials" in cl.need(EQUAL, on)
    near = cl.Estimate(math.log(1.001), 0.05, 8, "x", 3)   # a direction claim near 1
    assert "more trials are unlikely to decide it" in cl.need(Rule("above"), near)
    assert "unlikely" not in said


# -- every claim of the five studies under its own rule -------------------------------

def _case(rule: Rule) -> dict[str, tuple[cl.Estimate | None, str]]:
    """Literal estimates for `rule` with the verdict each must get."""
    if rule.kind == "equal":
        m = rule.margin
        return {"inside": (at(1 - m / 2, 1 + m / 2), HOLDS),
                "on": (at(1 - m, 1 + m), HOLDS),
                "outside": (at(1 + 1.5 * m, 1 + 3 * m), DOES_NOT_HOLD),
                "straddling": (at(1, 1 + 2 * m), NOT_SHOWN),
                "too few": (None, NOT_SHOWN)}
    if rule.kind == "about":
        lo, hi = rule.size
        mid = math.sqrt(lo * hi)
        far = hi * 2 if rule.upward else lo / 2
        return {"inside": (at(mid * 0.98, mid * 1.02), HOLDS),
                "on": (at(lo, hi), HOLDS),
                "outside": (at(far, far * 1.1), DOES_NOT_HOLD),
                "straddling": (at(lo * 0.9, mid), NOT_SHOWN),
                "too few": (None, NOT_SHOWN)}
    good, bad = (at(1.2, 1.5), at(0.6, 0.8)) if rule.kind == "above" else \
        (at(0.6, 0.8), at(1.2, 1.5))
    cases = {"inside": (good, HOLDS), "outside": (bad, DOES_NOT_HOLD),
             "on": (at(1.0, 1.3) if rule.kind == "above" else at(0.7, 1.0), HOLDS),
             "straddling": (at(0.9, 1.1), NOT_SHOWN), "too few": (None, NOT_SHOWN)}
    if rule.least is None:
        return cases
    # The least change the claim means: x log-units towards the claim (1: the least).
    s, ll = (1 if rule.kind == "above" else -1), abs(math.log(rule.least))

    def towards(lo: float, hi: float) -> cl.Estimate:
        return at(*sorted((math.exp(s * lo * ll), math.exp(s * hi * ll))))
    return {**cases,
            "straddling": (towards(-0.5, 1.2), NOT_SHOWN),     # holds 1 and the least
            "short": (towards(-0.5, 0.5), DOES_NOT_HOLD),     # holds 1, short of the least
            "on the least": (towards(-0.5, 1.0), NOT_SHOWN),  # touching: not wholly short
            "shown but short": (towards(0.2, 0.6), HOLDS)}    # the direction, as worded


RULED = [c for cs in CLAIMS.values() for c in cs if isinstance(c.rule, Rule)]


@pytest.mark.parametrize("c", RULED, ids=[f"{c.study}-{c.key}" for c in RULED])
def test_every_study_claim_under_its_own_rule(c):
    for name, (est, verdict) in _case(c.rule).items():
        assert cl.decide(c.rule, est).verdict == verdict, (c.key, name)
    # over parts: a contradicting part among supporting ones
    good, _ = _case(c.rule)["inside"]
    bad, _ = _case(c.rule)["outside"]
    bad = cl.Estimate(bad.log, bad.se / 4, bad.df, "clearly", 3)    # beyond, after Holm
    parts = {f"part {i}": good for i in range(5)}
    assert cl.every(c.rule, parts, "parts").verdict == HOLDS
    assert cl.every(c.rule, {**parts, "odd": bad}, "parts").verdict == DOES_NOT_HOLD
    assert cl.every(c.rule, {**parts, "odd": None}, "parts").verdict == NOT_SHOWN


def test_twenty_of_the_twenty_one_claims_have_a_written_rule_or_threshold():
    every_claim = [c for cs in CLAIMS.values() for c in cs]
    assert len(every_claim) == 21 and all(c.margin for c in every_claim)
    assert len(RULED) == 18     # the other three are written as text: slopes, a turning point


# -- the error rates, simulated ---------------------------------------------------------

def _runs(true_ratio: float, n: int, rounds_sd: float, rng) -> list[cl.Estimate]:
    """`n` simulated paired runs of 6 rounds: a shared drift of +-rounds_sd per
    round moves both sides, 2 % noise each."""
    out = []
    for _ in range(n):
        drift = rng.normal(0, rounds_sd, 6)
        a = np.exp(drift + np.log(true_ratio) + rng.normal(0, 0.02, 6))
        b = np.exp(drift + rng.normal(0, 0.02, 6))
        out.append(cl.estimate(list(a), list(b), list(range(6)), list(range(6))))
    return out


def test_equivalence_errors_stay_at_five_percent():
    rng = np.random.default_rng(7)
    # truly 12 % apart: "within 10 %" holds falsely at most 5 % of the time
    wrong = sum(cl.decide(EQUAL, e).verdict == HOLDS for e in _runs(1.12, 400, 0.4, rng))
    assert wrong / 400 <= 0.05
    # truly the same: shown equal nearly always with 6 paired rounds at 2 % noise
    right = sum(cl.decide(EQUAL, e).verdict == HOLDS for e in _runs(1.0, 400, 0.4, rng))
    assert right / 400 >= 0.9
    # a margin exactly at the truth: neither side shown more than 5 % of the time
    edge = [cl.decide(EQUAL, e).verdict for e in _runs(1.10, 400, 0.4, rng)]
    assert edge.count(HOLDS) / 400 <= 0.06 and edge.count(DOES_NOT_HOLD) / 400 <= 0.06


def test_a_direction_claim_is_wrong_at_most_five_percent_of_the_time():
    rng = np.random.default_rng(8)
    null = [cl.decide(Rule("above"), e).verdict for e in _runs(1.0, 600, 0.5, rng)]
    assert null.count(HOLDS) / 600 <= 0.065 and null.count(DOES_NOT_HOLD) / 600 <= 0.065


def _sequential(true_ratio: float, runs: int, start: int, most: int, rng,
                correct: bool) -> list[str]:
    """Each simulated study looks after `start` paired rounds and after each round
    it adds, up to `most`, stopping at the first verdict; the verdict it stops
    with (or "not shown" at the end). `correct`: each look at 5 % / the looks."""
    k = most - start + 1
    out = []
    for _ in range(runs):
        drift = rng.normal(0, 0.5, most)
        a = np.exp(drift + np.log(true_ratio) + rng.normal(0, 0.05, most))
        b = np.exp(drift + rng.normal(0, 0.05, most))
        verdict = NOT_SHOWN
        with cl.looks(k if correct else 1):
            for n in range(start, most + 1):
                e = cl.estimate(list(a[:n]), list(b[:n]), list(range(n)), list(range(n)))
                verdict = cl.decide(Rule("above"), e).verdict
                if verdict != NOT_SHOWN:
                    break
        out.append(verdict)
    return out


def test_repeated_looks_keep_the_error_at_five_percent():
    """A sequential study looks up to 5 times (3 rounds, then one more each time,
    to 7): with each look at 5 % / 5 the chance of a false verdict at any look
    stays at 5 %; looking 5 times at 5 % each would not."""
    rng = np.random.default_rng(11)
    fair = _sequential(1.0, 2000, 3, 7, rng, correct=True)
    assert fair.count(HOLDS) / 2000 <= 0.05 and fair.count(DOES_NOT_HOLD) / 2000 <= 0.05
    naive = _sequential(1.0, 2000, 3, 7, rng, correct=False)
    assert naive.count(HOLDS) / 2000 > 0.06      # what the correction is for
    # and a real 15 % difference (7 % noise on each round's ratio) is still found
    real = _sequential(1.15, 500, 3, 7, rng, correct=True)
    assert real.count(HOLDS) / 500 >= 0.9


def test_looks_set_the_level_the_verdict_and_its_interval_use():
    e = at(1.01, 1.2)
    assert cl.decide(Rule("above"), e).verdict == HOLDS
    with cl.looks(4):
        assert cl.alpha() == pytest.approx(0.0125) and cl.level() == pytest.approx(0.975)
        assert cl.decide(Rule("above"), e).verdict == NOT_SHOWN
        assert "(97.5 %)" in cl.show(e) and "97.5 % interval" in cl.decide(Rule("above"), e).why
    assert cl.alpha() == 0.05


def test_a_direction_short_of_its_least_change_does_not_hold():
    """Seed 001's IPv6 9.2 % slower: the claim means 4.6 % at least (0.954x)."""
    r = Rule("below", least=0.954)
    assert cl.decide(r, at(0.96, 1.05)).verdict == DOES_NOT_HOLD      # short of it
    assert "0.95x, the least change" in cl.decide(r, at(0.96, 1.05)).why
    assert cl.decide(r, at(1.02, 1.05)).why.endswith("the other way")
    assert cl.decide(r, at(0.95, 1.05)).verdict == NOT_SHOWN          # reaches past it
    assert cl.decide(r, at(0.954, 1.05)).verdict == NOT_SHOWN         # on it: not wholly
    assert cl.decide(r, at(0.96, 0.99)).verdict == HOLDS              # shown, as worded
    assert "short of 0.95x does not hold" in r.text
    # what an open one needs: the nearer of 1 and its least
    assert "needs ±" in cl.need(r, cl.Estimate(math.log(0.97), 0.03, 8, "x", 4))
    assert Rule("below", least=0.99916).text.startswith("ratio below 1; short of 0.9992x")
    with pytest.raises(ValueError):
        Rule("below", least=1.1)
    with pytest.raises(ValueError):
        Rule("above", least=0.9)
    with pytest.raises(ValueError):
        Rule("equal", 0.1, least=0.9)
