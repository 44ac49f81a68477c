"""The studies' headline findings, each written down once: the claim, the seed's
figure, and the test that decides it on a run's trials.

`for_run(data)` gives the findings of the study a run belongs to (run.json's
scenario key `study`, e.g. "000"), each as a `Finding`: ours with its interval and a
verdict (holds / does not hold / not shown) with the statistic behind it. Every
report opens with `table(findings)`; `fwbench study` collects them across a study's
runs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
NOT_SHOWN = "not shown"
VERDICTS = (HOLDS, DOES_NOT_HOLD, NOT_SHOWN)


@dataclass(frozen=True)
class Finding:
    study: str        # "000" ... "004"
    claim: str        # the seed's claim in a few words
    seed: str         # the seed's figure, as it gave it
    ours: str         # our figure with its 95 % interval; "-" where nothing was measured
    verdict: str      # one of VERDICTS
    why: str          # the statistic that decided it, or why it is not shown

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")

    def as_dict(self) -> dict:
        return asdict(self)
