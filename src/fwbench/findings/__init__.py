"""The five studies' headline claims, each written down once, and what a run found
about them.

A `Claim` is the study's sentence, its figure as published and the test that
decides it here. A `Finding` is a claim decided on one run's trials: our figure with
its 95 % interval, a verdict (holds / does not hold / not shown) and the statistic
behind it, or why it is not shown. The decisions read a run's trials and live beside
each experiment's report (fwbench.report.findings collects them); this module is
only the record and the claims, so anything may import it.
"""
from __future__ import annotations

from dataclasses import dataclass

from fwbench import catalog
from fwbench.claims import DOES_NOT_HOLD, HOLDS, NOT_SHOWN, VERDICTS, Rule  # noqa: F401


@dataclass(frozen=True)
class Claim:
    study: str        # "000" ... "004"
    key: str          # short and stable, e.g. "nft-slower-linear"
    text: str         # the seed's claim in a sentence
    seed: str         # the seed's figure, as it gave it
    test: str         # how a run decides it
    rule: Rule | str  # what the ratio must show, with its margin (fwbench.claims)

    @property
    def margin(self) -> str:
        """The margin or threshold the findings table states."""
        return self.rule.text if isinstance(self.rule, Rule) else self.rule


@dataclass(frozen=True)
class Finding:
    claim: Claim
    ours: str         # our figure with its interval; "-" where nothing was measured
    verdict: str      # one of VERDICTS
    why: str          # the statistic that decided it, or why it is not shown
    cells: tuple = () # the run's cells (factor values) its estimate reads: where a
                      # sequential study adds trials while the claim is not shown
    needs: float | None = None  # not shown: about the trials a cell that would
                      # decide it (fwbench.claims.trials_needed; inf: none would)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")

    def as_dict(self) -> dict:
        c = self.claim
        return {"study": c.study, "key": c.key, "claim": c.text, "seed": c.seed,
                "test": c.test, "margin": c.margin, "ours": self.ours, "verdict": self.verdict, "why": self.why}


def _claims(study: str, *rows: tuple[str, str, str, str, Rule | str]) -> tuple[Claim, ...]:
    return tuple(Claim(study, *r) for r in rows)


EQUAL = 0.10       # "about the same", "flat", "the same": within 10 % of 1


def about(claimed: float) -> Rule:
    """"About" a ratio: its direction, and the ratio within half the claimed change
    either way (about 1.20x: 1.10x..1.30x; about 3x: 2x..4x)."""
    half = (claimed - 1) / 2
    return Rule("about", size=(claimed - half, claimed + half))


def direction(seed_ratio: float) -> Rule:
    """A direction the seed found with a size: the side of 1 its ratio lies on, and
    the least change the claim means, half the seed's (as for about(): a seed's
    0.82x means 0.91x at least; its 3.06x, 2.03x). Below that the claim does not
    hold (fwbench.claims)."""
    return Rule("above" if seed_ratio > 1 else "below", least=1 + (seed_ratio - 1) / 2)


PER_FRAME = ("per frame size, the mean log ratio over the rule counts >= 1,000 (each "
             "cell's paired by round); holds at every frame size (intersection-union), "
             "fails where a frame size fails at its Holm level")

CLAIMS: dict[str, tuple[Claim, ...]] = {
    "000": _claims(
        "000",
        ("nft-slower-throughput",
         "nftables (linear) forwards less than iptables once rule sets reach 1,000 rules, "
         "at every frame size",
         "significantly worse at >= 1,000 rules regardless of frame size",
         f"rx pps nftables / iptables-legacy {PER_FRAME}; the seed's ratio over its "
         "cells at >= 1,000 rules 0.43x", direction(0.43)),
        ("nft-slower-latency",
         "nftables (linear) has a longer round trip than iptables once rule sets reach "
         "1,000 rules",
         "significantly worse at >= 1,000 rules regardless of frame size",
         f"ping RTT nftables / iptables-legacy {PER_FRAME}; the seed's ratio over its "
         "cells at >= 1,000 rules 2.6x", direction(2.6)),
        ("small-frames-worse",
         "nftables falls further behind iptables with small frames",
         "falls behind at 40 rules for small frames; at >= 1,024 B and <= 100 rules "
         "virtually identical",
         "the nftables / iptables-legacy rx pps ratio at the smallest frame over the "
         "same ratio at the largest, the mean over every rule count both measured (the "
         "seed's: 1.00x at 20 rules, 0.60x at 100, 0.50x at 1,000, 1.01x from 2,500 on; "
         "0.82x over its 10)", direction(0.82)),
        ("sets-flat",
         "with indexed sets (ipset, nft set) the rate does not depend on the rule count",
         "performance 'overall very close in all cases' from 20 to 10,000 entries",
         "rx pps at the largest rule count over the smallest, per set backend the mean "
         "over frame sizes; holds for both backends (intersection-union)",
         Rule("equal", EQUAL)),
        ("sets-equal",
         "ipset and nft sets perform about the same",
         "minor differences either way; 'can be considered identical'",
         "ipset / nftset rx pps, the mean log ratio over every rule count and frame size",
         Rule("equal", EQUAL)),
    ),
    "001": _claims(
        "001",
        ("per-rule-ipv4", "throughput loss grows linearly with the rules, about 0.05 % "
         "per IPv4 rule", "0.05 %/rule",
         "a line through the origin of every trial's decrease against its F = 0 cell "
         "(iptables-legacy), bootstrap interval", "above 0 and 0.025..0.075 %/rule"),
        ("per-rule-ipv6", "about 0.03 % per IPv6 rule", "0.03 %/rule", "as for IPv4",
         "above 0 and 0.015..0.045 %/rule"),
        ("threads-vs-epoll", "threads beat epoll below about 40 clients and lose above",
         "turning point ~40 clients",
         "per client count, the log ratio of mean throughput per client, Holm across "
         "client counts", "the turning point, between the largest count threads win and "
         "the smallest epoll wins (each significant), within 20..60 clients"),
        ("tcp-vs-udp", "TCP is slower than UDP", "8.42 % (5.18..10.64)",
         "TCP / UDP mean throughput per client, the mean log ratio over matched pairs of "
         "cells", direction(1 - 0.0842)),
        ("ipv6-vs-ipv4", "IPv6 is slower than IPv4", "9.22 % (4.59..13.8)",
         "IPv6 / IPv4, as above", direction(1 - 0.0922)),
        ("sctp-vs-tcp", "SCTP is slower than TCP", "32.65 % (9.28..48.23)",
         "SCTP / TCP, as above", direction(1 - 0.3265)),
    ),
    "002": _claims(
        "002",
        ("notrack-faster", "NOTRACK accepts a flood about 20 % faster than conntrack",
         "106k vs 87k pps (cost 20 %)",
         "notrack / conntrack accepted pps, paired t on the rounds' log ratios",
         about(1.20)),
        ("raw-cheaper", "dropping in raw PREROUTING is about 12 % cheaper than in filter "
         "INPUT", "280k vs 250k pps (cost 12 %)",
         "raw / filter-input disposal pps, as above", about(1.12)),
        ("ipset-flat", "an ipset blacklist costs about the same whatever its size",
         "255k pps with 265,000 entries (cost 10 % against raw)",
         "largest / smallest set size, as above", Rule("equal", EQUAL)),
        ("bm-cheaper", "string matching with bm is cheaper than with kmp",
         "255k vs 235k pps", "string-bm / string-kmp, as above", direction(255 / 235)),
    ),
    "003": _claims(
        "003",
        ("nft-degrades-earlier", "nftables starts losing packets at about a fifth of the "
         "rules iptables does", "1k / 2k / 3.5k against 5k / 11k / 20k rules (128 / 512 / "
         "1280 B flows)",
         "where iptables-legacy begins to lose over where nftables does, the range the "
         "degradation brackets allow (open brackets kept: 0 or inf), in every flow",
         about(5.0)),
        ("advantage-small-packets", "iptables' advantage is largest for small packets",
         "at 6,000 rules iptables processes 5.2x / 2.9x / 1.7x what nftables does",
         "processed pps iptables-legacy / nftables at 6,000 rules, the 128 B flow's ratio "
         "over the 1280 B flow's (Welch on logs), in every chain and CPU count; the "
         "seed's 5.2x / 1.7x = 3.1x", direction(5.2 / 1.7)),
        ("input-equals-forward", "filtering in INPUT costs the same as in FORWARD",
         "'the same' for both tools",
         "processed pps INPUT / FORWARD on 1 CPU, per backend the mean log ratio over "
         "the flows; holds for every backend (intersection-union)", Rule("equal", EQUAL)),
    ),
    "004": _claims(
        "004",
        ("load-triples-latency", "bidirectional TCP load makes latency about 3x",
         "~1,108 vs ~380 µs mean RTT (2.9x)",
         "mean RTT under load / without, the mean log ratio (each paired by round) over "
         "every backend and rule set", about(3.0)),
        ("nat-equals-forward", "NAT costs about the same latency as plain forwarding",
         "within 1 µs in every configuration",
         "mean RTT NAT / forwarding, the mean log ratio over every backend and load",
         Rule("equal", 0.05)),
        ("nft-lower-under-load", "nftables has slightly lower latency than iptables "
         "under load", "1,106.56 vs 1,108.42 µs (NAT), significant one-tailed on pooled "
         "replies", "mean RTT nftables / iptables-legacy under load, the mean log ratio "
         "over the rule sets", direction(1106.56 / 1108.42)),
    ),
}

STUDY_IDS = tuple(CLAIMS)

# The method each study runs (its scenario under scenarios/, fwbench.studies; the
# study is its experiment's declaration, fwbench.catalog): its claims are decided on
# that method's trials, so a scenario names study X (its `study` key) only with X's
# method.
METHOD_OF_STUDY = {sid: method for sid, (_, method) in catalog.studies().items()}
# Experiments that exist for one study: their runs are that study's whatever the
# scenario says. A sweep belongs to a study only when its scenario names one.
STUDY_OF_METHOD = {method: r.study.id for method, r in catalog.rooms().items()
                   if r.study is not None and r.study_always}


def study_of(scenario: dict) -> str | None:
    """The study a run of `scenario` (as run.json holds it) belongs to, or None: the
    one its `study` key names, else its method's. A key naming a study of another
    method (run.json written before the scenario refused that) is not taken: that
    study's claims cannot be decided on this method's trials."""
    method = scenario.get("method", "maxrate")
    named = scenario.get("study")
    if named is not None and METHOD_OF_STUDY.get(named) == method:
        return named
    return STUDY_OF_METHOD.get(method)


def claim(study: str, key: str) -> Claim:
    for c in CLAIMS[study]:
        if c.key == key:
            return c
    raise KeyError(f"study {study} has no claim {key!r}")
