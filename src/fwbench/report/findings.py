"""A run's findings: the claims of the study its scenario names (`study = "000"`),
each decided on the run's trials, and the table every report opens with.

The decisions live in each study's experiment package, named by its declaration
(fwbench.catalog, experiments.room.Room.findings). A claim the run cannot decide is
"not shown", with why.
"""
from __future__ import annotations

from fwbench import catalog
from fwbench import claims as cl
from fwbench import findings as fd
from fwbench.findings import CLAIMS, NOT_SHOWN, STUDY_OF_METHOD, Claim, Finding  # noqa: F401
from fwbench.report.data import RunData
from fwbench.report.document import Block, Heading, Para, Table


def study_of(data: RunData) -> str | None:
    """The run's study (fwbench.findings.study_of): never one whose claims its
    method's trials cannot decide."""
    return fd.study_of(data.scenario)


def looks(scenario: dict) -> int:
    """The most looks a run's claims get (fwbench.claims.looks): a study that adds
    rounds until its claims are decided (`[adaptive] until = "claims"`) looks after
    its planned rounds and after every `step` rounds it adds, at most
    1 + ceil((max_repeat - repeat) / step) times; any other run looks once."""
    a = scenario.get("adaptive") or {}
    if a.get("until") != "claims" or not a.get("max_repeat"):
        return 1
    more = max(0, a["max_repeat"] - scenario.get("repeat", 3))
    return 1 + -(-more // max(1, a.get("step", 1)))


def decide(data: RunData) -> list[Finding]:
    """The findings of the run's study, one per claim; [] when the run has none.
    Each test at 5 % over the run's looks (`looks`)."""
    with cl.looks(looks(data.scenario)):
        return _decide(data)


def _decide(data: RunData) -> list[Finding]:
    study = study_of(data)
    if study not in CLAIMS:
        return []
    _, method = catalog.studies()[study]
    got = {f.claim.key: f for f in catalog.resolve(catalog.room(method).findings)(data)}
    return [got.get(c.key) or missing(c, "this run's experiment does not decide it")
            for c in CLAIMS[study]]


SPARE = 2   # open_claims: a claim needing more than SPARE x max_repeat trials is left


def open_claims(meta: dict, records: list) -> tuple[list, list[str]]:
    """A sequential study's next round (experiments.loop.OpenClaims): the cells
    its claims not yet decided read, and those claims' keys, decided on the run's
    records so far. A claim whose estimate needs more than SPARE times the trials a
    cell may reach (max_repeat) to be decided (Finding.needs: its interval narrowing
    as one over the square root of the trials) is left as it is: rounds for it
    would be spent without deciding it. The factor leaves room for an estimate that
    moves as trials come in."""
    from pathlib import Path
    found = decide(RunData(Path("."), meta, records))
    most = ((meta.get("scenario") or {}).get("adaptive") or {}).get("max_repeat") or 0
    open_ = [f for f in found if f.verdict == NOT_SHOWN and f.cells and
             not (most and f.needs is not None and f.needs > SPARE * most)]
    return [c for f in open_ for c in f.cells], [f.claim.key for f in open_]


def missing(c: Claim, why: str) -> Finding:
    return Finding(c, "-", NOT_SHOWN, why)


def table(findings: list[Finding], study: str, k: int = 1) -> Table:
    return Table(["claim", f"seed {study}'s figure", "decided by", "ours [interval]",
                  "verdict", "why"],
                 [[f.claim.text, f.claim.seed, f.claim.margin, f.ours, f.verdict, f.why]
                  for f in findings],
                 f"Each of seed {study}'s headline claims decided on this run's trials "
                 f"(fwbench.claims): a direction by a one-sided test at "
                 f"{cl.pct(cl.ALPHA / k)}"
                 + (f" (5 % over the run's {k} looks at most: it added rounds until its "
                    f"claims were decided)" if k > 1 else "") +
                 f", \"about the "
                 f"same\" by two one-sided tests against the margin written with the "
                 f"claim, \"about\" a size by its direction and its size separately; the "
                 f"interval beside is the {cl.pct(1 - 2 * cl.ALPHA / k)} one those tests "
                 f"are read from. What each "
                 f"estimate is: " + "; ".join(f"({i}) {f.claim.test}" for i, f in
                                              enumerate(findings, 1)) + ".",
                 id="findings", kind="kv")   # kv: left-aligned text that wraps


def blocks(data: RunData, found: list[Finding]) -> list[Block]:
    """The findings heading and table, for the top of the run's report; [] when the
    run belongs to no study."""
    if not found:
        return []
    study = found[0].claim.study
    counts = {v: sum(f.verdict == v for f in found) for v in dict.fromkeys(
        f.verdict for f in found)}
    return [Heading(2, f"Seed {study}'s findings", "findings"),
            Para(", ".join(f"{n} {v}" for v, n in counts.items()) + f" of {len(found)} "
                 f"claims.", "conclusion"),
            table(found, study, looks(data.scenario))]


def csv_table(found: list[Finding]) -> tuple[list[str], list[list]]:
    header = ["study", "key", "claim", "seed", "test", "margin", "ours", "verdict", "why"]
    return header, [[f.as_dict()[k] for k in header] for f in found]
