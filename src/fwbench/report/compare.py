"""`fwbench compare <run A> <run B>`: before/after, for runs of any one experiment.
Every cell (one value of each of the experiment's factors) the two runs share, every metric both recorded, side by side: A's and B's
medians with intervals, B's change against A with a bootstrap interval, Welch and
Mann-Whitney p-values, Holm-adjusted across the shared cells of each metric. Plus what
changed in the conditions (kernel, tool versions, testbed), since that is usually the
question.

Absolute rates from two runs hours apart differ with the machine's state (on this
project's 2-core VMs the no-firewall rate moved 0.42-1.04 M pps). `normalise` compares
instead each packet rate as a fraction of the reference measured in the same run: the
`none` backend's trial of the same round and frame size (the run's median `none` at that
frame size where the round has none).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from fwbench import owned
from fwbench.errors import FwbenchError
from fwbench.report import analysis as an
from fwbench.metrics import Metric
from fwbench.plan import Cell
from fwbench.report.build import environment_rows, write_atomic, write_csv
from fwbench.report.data import RunData, load
from fwbench.report.document import Block, Bullets, Heading, Para, Table, markdown, to_html
from fwbench.report.formats import fmt, fmt_pct
from fwbench.results import RUN_FILES, TrialRecord

REFERENCE = "none"


@dataclass
class Row:
    metric: Metric
    cell: Cell
    comparison: an.Comparison   # a = run B, b = run A: the change is B against A


def relative(data: RunData, m: Metric) -> Metric:
    """`m` as a fraction of the run's own reference (see the module's docstring)."""
    same_round: dict[tuple[int, int], float] = {}
    by_frame: dict[int, list[float]] = {}
    for r in data.ok:
        if r.factors.get("backend") == REFERENCE and (v := m.value(r)):
            f = r.factors["frame_size"]
            same_round[(r.repetition, f)] = v
            by_frame.setdefault(f, []).append(v)
    ref = {f: statistics.median(v) for f, v in by_frame.items()}

    def get(r: TrialRecord) -> float | None:
        v, f = m.value(r), r.factors["frame_size"]
        base = same_round.get((r.repetition, f), ref.get(f))
        if v is None or not base or r.factors.get("backend") == REFERENCE:
            return None
        return v / base
    return replace(m, key=f"{m.key}_rel", label=f"{m.label} as a fraction of {REFERENCE}'s",
                   unit=f"x {REFERENCE}", get=get, log_ok=False)


def _compared(data: RunData, normalise: bool) -> list[Metric]:
    if not normalise:
        return data.metrics()
    if not data.is_sweep or REFERENCE not in data.backends():
        raise FwbenchError(f"{data.path}: --normalise needs a rule-count sweep with the "
                           f"{REFERENCE} backend in it (the reference of every round)")
    return [relative(data, m) for m in data.metrics() if m.throughput]


def rows(a: RunData, b: RunData, normalise: bool = False) -> list[Row]:
    keys_b = {m.key: m for m in _compared(b, normalise)}
    out = []
    for m in _compared(a, normalise):
        if m.key not in keys_b:
            continue
        ca, cb = an.summaries(a, m), an.summaries(b, keys_b[m.key])
        # Two runs share no rounds: unpaired (Welch's t on the logs). The family is
        # the cells both runs have, per metric: "which cells changed from A to B?"
        family = [Row(m, c, an.compare(cb[c], ca[c], paired=False))
                  for c in sorted(set(ca) & set(cb))]
        an.apply_holm([r.comparison for r in family])
        out += family
    return out


def sentence(data: RunData, r: Row, alpha: float = an.ALPHA) -> str | None:
    c, m = r.comparison, r.metric
    v = c.verdict(m, alpha)
    if v not in ("better", "worse"):
        return None
    return (f"{data.label(r.cell)}: {m.label} {'better' if v == 'better' else 'worse'} "
            f"in B, {fmt(m, c.b.median)} -> {fmt(m, c.a.median)} {m.unit} "
            f"({fmt_pct(c.change)} [{fmt_pct(c.change_ci.low)}, {fmt_pct(c.change_ci.high)}]), "
            f"p = {an.format_p(c.holm_p)} (Welch's t on the logs, Holm-adjusted).")


def _env_diff(a: RunData, b: RunData) -> list[list[str]]:
    ea, eb = dict(environment_rows(a)), dict(environment_rows(b))
    skip = {"run", "trials"}
    return [[k, ea.get(k, "-"), eb.get(k, "-")] for k in dict.fromkeys([*ea, *eb])
            if k not in skip and ea.get(k) != eb.get(k)]


def blocks(a: RunData, b: RunData, found: list[Row], normalised: bool = False) -> list[Block]:
    out: list[Block] = [Heading(1, f"fwbench compare: {a.path.name} (A) vs {b.path.name} (B)")]
    said = [s for r in found if (s := sentence(a, r))]
    out.append(Heading(2, "Differences shown"))
    out.append(Bullets(said) if said else Para(
        "No cell differs between A and B at the corrected significance level; the data "
        "neither show a difference nor rule one out.", "note"))
    out.append(Heading(2, "What changed in the conditions"))
    diff = _env_diff(a, b)
    out.append(Table(["", "A", "B"], diff) if diff else Para("Nothing recorded differs.", "note"))
    for m in dict.fromkeys(r.metric for r in found):
        mine = [r for r in found if r.metric is m]
        out.append(Heading(2, f"{m.label} ({m.unit})"))
        out.append(Table(
            [*a.factors, "A median [95 %]", "B median [95 %]",
             "B / A - 1 [interval]", "p Holm", "seed: p Welch", "seed: p Mann-Whitney",
             "n A/B"],
            [[*(f"{v:,}" if isinstance(v, int) else str(v) for v in r.cell),
              _med(m, r.comparison.b), _med(m, r.comparison.a),
              fmt_pct(r.comparison.change) + (
                  f" [{fmt_pct(r.comparison.change_ci.low)}, "
                  f"{fmt_pct(r.comparison.change_ci.high)}]" if r.comparison.change_ci else ""),
              an.format_p(r.comparison.holm_p),
              an.format_p(r.comparison.welch.p if r.comparison.welch else None),
              an.format_p(r.comparison.mwu.p if r.comparison.mwu else None),
              f"{r.comparison.b.n}/{r.comparison.a.n}"] for r in mine],
            id=f"compare-{m.key}"))
    out.append(Para("How it decides: per cell, B against A as a ratio on the log scale, "
                    "unpaired (two runs share no rounds: Welch's t on the logs), Holm "
                    "across the shared cells of each metric at 0.05, each interval at "
                    "its Holm level, so it excludes 0 exactly where a change is shown; "
                    "the seed's tests (Welch on values, Mann-Whitney) decide nothing. A and B were "
                    "measured at different times: a difference can also come from the "
                    "machine's state, so compare runs made under the same load"
                    + (", or compare rates as fractions of each run's own reference "
                       "(--normalise)." if not normalised else
                       "; here every rate is a fraction of its run's own none backend in "
                       "the same round, which takes out the machine's speed but not "
                       "changes to the path the none backend shares."), "note"))
    return out


def _med(m: Metric, s: an.CellSummary) -> str:
    ci = f" [{fmt(m, s.ci.low)}, {fmt(m, s.ci.high)}]" if s.ci else ""
    return fmt(m, s.median) + ci


@dataclass
class CompareFiles:
    html: Path
    markdown: Path
    csv: Path
    sentences: list[str]


def compare_runs(run_a: str | Path, run_b: str | Path,
                 out: str | Path | None = None, normalise: bool = False) -> CompareFiles:
    a, b = load(run_a), load(run_b)
    if a.factors != b.factors:
        raise FwbenchError(f"{run_a} and {run_b} are runs of different experiments "
                           f"(factors {', '.join(a.factors)} against {', '.join(b.factors)})")
    found = rows(a, b, normalise)
    if not found:
        raise FwbenchError(f"{run_a} and {run_b} share no cell ({', '.join(a.factors)}) "
                           f"with a metric both recorded")
    dest = Path(out) if out else b.path / f"compare-vs-{a.path.name}"
    bl = blocks(a, b, found, normalise)
    try:   # new, empty or fwbench's: its pages never replace a user's files
        owned.ready(str(dest), f"the comparison of {a.path} and {b.path}", RUN_FILES)
        write_atomic(dest / "compare.md", markdown(bl))
        write_atomic(dest / "compare.html", to_html(f"fwbench compare {a.path.name} vs "
                                              f"{b.path.name}", bl))
        csv_path = write_csv(dest / "compare.csv", [
            "metric", *a.factors, "n_a", "n_b", "median_a", "median_b",
            *[f"{x}_b_vs_a" if x.startswith("ratio") else x for x in an.COMPARISON_COLUMNS]],
            [[r.metric.key, *r.cell, c.b.n, c.a.n, c.b.median, c.a.median,
              *an.comparison_columns(c, r.metric)]
             for r in found for c in [r.comparison]])
    except owned.NotOurs as e:
        raise FwbenchError(f"compare --out {e}; the comparison goes into a new or empty "
                           f"directory") from None
    except OSError as e:
        raise FwbenchError(f"cannot write the comparison to {dest}: {e.strerror}") from None
    return CompareFiles(dest / "compare.html", dest / "compare.md", csv_path,
                        [s for r in found if (s := sentence(a, r))])
