"""The five studies as commands: `fwbench study ID` runs the study's scenario (the
seed's design, scaled where the seed's own time is unreasonable) and writes its
report, which opens with the study's findings (fwbench.findings); `fwbench study
all` runs the five in turn and writes one page of every finding.

A study is one scenario under scenarios/ whose runs belong to it (its `study` key,
or its method: echo, droprate, fixedrate and loadlatency exist for one study each).
Running a study into a directory that already holds its run finishes that run
(fwbench.experiments.loop.resume): an interrupted study loses nothing. A directory
that holds a run of another study, or of none, is refused before anything runs and
left as it is (`validate_out`).
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from rich.console import Console

from fwbench import catalog, owned
from fwbench.errors import FwbenchError
from fwbench.findings import CLAIMS, Finding, study_of
from fwbench.experiments import room

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


class Study(room.Study):
    """A study as its experiment declares it, with where its scenario is and what
    `study list --json` says of it."""

    def path(self) -> Path:
        p = SCENARIOS / self.scenario
        if not p.is_file():
            raise FwbenchError(f"study {self.id}: its scenario {p} is missing")
        return p

    def as_dict(self) -> dict:
        return {**asdict(self), "claims": [c.text for c in CLAIMS[self.id]]}


# Each study is declared by the experiment whose method runs it (fwbench.catalog).
STUDIES: dict[str, Study] = {sid: Study(**asdict(s))
                             for sid, (s, _) in catalog.studies().items()}


def get(study_id: str) -> Study:
    try:
        return STUDIES[study_id]
    except KeyError:
        raise FwbenchError(f"unknown study {study_id!r} (known: "
                           f"{', '.join(STUDIES)}, or all)") from None


@dataclass
class Outcome:
    study: Study
    path: Path
    seconds: float
    trials: int
    not_ok: int
    findings: list[Finding]
    report: Path | None
    looks: int = 1        # the most looks its claims had (report.findings.looks)


def default_out(study_id: str) -> Path:
    """results/study-ID-<time>, or results/studies-<time> for all five."""
    stamp = datetime.now().strftime('%Y%m%d-%H%M%S')
    return Path("results") / (f"studies-{stamp}" if study_id == "all" else
                              f"study-{study_id}-{stamp}")


def validate_out(study_id: str, out: str | Path) -> None:
    """Refuse, in one line and touching nothing, an output directory `fwbench study
    ID` (or `all`) must not write into: one holding a run of another study or of
    none (run.json's scenario says whose: its `study` key, or its method), or, for
    `all`, one holding a run itself or in a study's subdirectory OUT/<id> that is
    not that study's. A run of the study itself is fine: it is finished."""
    from fwbench.results import RunDir

    path = Path(out)
    if study_id == "all":
        theirs = _not_studies(path)
        if theirs:
            raise FwbenchError(f"{path} holds what is not the studies' ({', '.join(theirs)}"
                               f"); `fwbench study all` writes into a new or empty "
                               f"directory, or one of its own")
        if (path / "run.json").exists():
            meta = RunDir.open(path).meta()
            raise FwbenchError(f"{path} holds a run ({_describe(meta)}); `fwbench study "
                               f"all` writes each study into {path}/<id>: choose another "
                               f"--out")
        for sid in STUDIES:
            validate_out(sid, path / sid)
        return
    st = get(study_id)
    if not (path / "run.json").exists():
        held = [sid for sid in STUDIES if (path / sid / "run.json").exists()]
        if held:
            raise FwbenchError(f"{path} holds the runs of `fwbench study all` (in "
                               f"{', '.join(held)}): finish them with `fwbench study all "
                               f"--out {path}`, or study {st.id} alone with --out {path / st.id}")
        return
    meta = RunDir.open(path).meta()
    got = study_of(meta.get("scenario") or {})
    if got == st.id:
        return
    finish = (f"`fwbench study {got} --out {path}` finishes it" if got else
              f"`fwbench run --resume {path}` finishes it")
    raise FwbenchError(f"{path} holds a run of {f'study {got}' if got else 'no study'} "
                       f"({_describe(meta)}), not of study {st.id}: choose another --out "
                       f"({finish})")


def _not_studies(path: Path) -> list[str]:
    """What `study all`'s directory holds that is not its own (its page, a study's
    directory), unless fwbench made it; the first few names."""
    if not path.exists():
        return []
    if not path.is_dir():
        return [path.name]
    if owned.marker(str(path)) is not None:
        return []
    return sorted(set(os.listdir(path)) - set(STUDIES) - {"index.html", "index.md"})[:3]


def _describe(meta: dict) -> str:
    sc = meta.get("scenario") or {}
    return f"scenario {sc.get('name', '?')!r}, method {sc.get('method', 'maxrate')}"


def run(study_id: str, out: str | Path | None, console: Console) -> Outcome:
    """Run (or, into a directory holding its run, finish) one study and write its
    report."""
    from fwbench import scenario
    from fwbench.experiments import loop
    from fwbench.report import build
    from fwbench.report import findings as rf
    from fwbench.report.data import load

    st = get(study_id)
    path = Path(out) if out else default_out(study_id)
    validate_out(st.id, path)
    t0 = time.monotonic()
    if (path / "run.json").exists():
        console.print(f"study {st.id}: finishing the run in {path}")
        outcome = loop.resume(path, console, rf.open_claims)
    else:
        sc = scenario.load(str(st.path()), {})
        console.print(f"study {st.id}: {st.title}; {st.runs}; scale: {st.scale}; about "
                      f"{st.minutes:g} min here", highlight=False)
        outcome = loop.start(sc, path, console, rf.open_claims)
    not_ok = sum(1 for r in outcome.records if r.status != "ok")
    report = None
    found: list[Finding] = []
    data = load(path)
    if any(r.status == "ok" for r in outcome.records):
        report = build(path).html
        found = rf.decide(data)
    return Outcome(st, path, time.monotonic() - t0, len(outcome.records), not_ok, found,
                   report, rf.looks(data.scenario))


def run_all(out: str | Path | None, console: Console) -> tuple[list[Outcome], Path]:
    """Every study in turn, each into OUT/<id> (finished if it is there already), then
    OUT/index.html and index.md: every study's findings, time and report."""
    root = Path(out) if out else default_out("all")
    validate_out("all", root)      # every study's directory, before the first runs
    done = []
    for sid in STUDIES:
        done.append(run(sid, root / sid, console))
        console.print(f"study {sid}: {minutes(done[-1].seconds)}, report: {done[-1].report}",
                      highlight=False)
        write_index(root, done)
    return done, write_index(root, done)


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def write_index(root: Path, done: list[Outcome]) -> Path:
    """The page of every finished study: its findings table, time and report."""
    from fwbench.report import findings as rf
    from fwbench.report.build import write_atomic
    from fwbench.report.document import Block, Heading, Para, markdown, to_html

    total = sum(o.seconds for o in done)
    blocks: list[Block] = [Heading(1, "fwbench: the five studies"),
                           Para(f"{len(done)} of {len(STUDIES)} studies, {minutes(total)} "
                                f"in all.", "conclusion")]
    for o in done:
        rel = o.report.relative_to(root) if o.report else None
        blocks += [Heading(2, f"Seed {o.study.id}: {o.study.title}", f"study-{o.study.id}"),
                   Para(f"{o.study.runs}. Scale: {o.study.scale}. {o.trials} trials"
                        f"{f' ({o.not_ok} not ok)' if o.not_ok else ''} in "
                        f"{minutes(o.seconds)}; report: {rel or 'none (no ok trial)'}.")]
        if o.findings:
            blocks.append(rf.table(o.findings, o.study.id, o.looks))
    if not root.is_dir():
        owned.make(str(root), "the five studies (fwbench study all)",
                   ["index.html", "index.md", "*.tmp"], mode=0o755)
    write_atomic(root / "index.md", markdown(blocks))
    page = root / "index.html"
    write_atomic(page, to_html("fwbench: the five studies", blocks))
    return page
