"""What a study claims and what a run found about it.

Each study's claims are written down once, in the package of the experiment that
runs it (its declaration's `claims`, fwbench.catalog); `CLAIMS` collects them. A
`Claim` is the study's sentence, its figure as published and the test that
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


def claims(study: str, *rows: tuple[str, str, str, str, Rule | str]) -> tuple[Claim, ...]:
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



def __getattr__(name: str):
    # The claims and which method decides them are the experiments' declarations
    # (fwbench.catalog), read on first use: the experiment packages import this
    # module for Claim, so it cannot read them while it is imported.
    if name not in _DERIVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _CACHE:
        rooms = catalog.rooms()
        studies = catalog.studies()
        # Each study's claims, by study id, from the experiment that runs it.
        _CACHE["CLAIMS"] = {sid: rooms[m].claims for sid, (_, m) in studies.items()}
        _CACHE["STUDY_IDS"] = tuple(_CACHE["CLAIMS"])
        # The method each study runs (its scenario under scenarios/, fwbench.studies):
        # its claims are decided on that method's trials, so a scenario names study
        # X (its `study` key) only with X's method.
        _CACHE["METHOD_OF_STUDY"] = {sid: m for sid, (_, m) in studies.items()}
        # Experiments that exist for one study: their runs are that study's whatever
        # the scenario says. A sweep belongs to a study only when its scenario names one.
        _CACHE["STUDY_OF_METHOD"] = {m: r.study.id for m, r in rooms.items()
                                     if r.study is not None and r.study_always}
    return _CACHE[name]


_DERIVED = ("CLAIMS", "STUDY_IDS", "METHOD_OF_STUDY", "STUDY_OF_METHOD")
_CACHE: dict = {}


def study_of(scenario: dict) -> str | None:
    """The study a run of `scenario` (as run.json holds it) belongs to, or None: the
    one its `study` key names, else its method's. A key naming a study of another
    method (run.json written before the scenario refused that) is not taken: that
    study's claims cannot be decided on this method's trials."""
    method = scenario.get("method", "maxrate")
    named = scenario.get("study")
    if named is not None and __getattr__("METHOD_OF_STUDY").get(named) == method:
        return named
    return __getattr__("STUDY_OF_METHOD").get(method)


def claim(study: str, key: str) -> Claim:
    for c in __getattr__("CLAIMS")[study]:
        if c.key == key:
            return c
    raise KeyError(f"study {study} has no claim {key!r}")
