"""fwbench from Python: run scenarios and read their results as pandas DataFrames,
for scripts and notebooks.

    import fwbench.api as fw

    path = fw.run("scenarios/quick.toml", backends=["none", "iptables-legacy"],
                  rules=[20, 1000], frame_sizes=[64], repeat=3)   # as root
    df = fw.trials(path)         # one row per trial
    df.groupby(["backend", "rules"])["rx_pps"].median()
    fw.cells(path, "rx_pps")     # per cell: n, mean, median, its 95 % interval
    fw.cost_model(path)          # ns per rule per backend and frame size
    fw.report(path)              # report.html, as `fwbench report` writes it

Running (needs root; progress and the closing table go to stderr):

run(scenario=None, out=None, **overrides) -> Path
    A scenario file (None: the defaults), its keys overridden as `fwbench run`'s
    flags do: backends, rules, frame_sizes, repeat, duration_s (or duration),
    seed, method, traffic, family, max_repeat, full, ruleset / iface / ipsets /
    flow (the --ruleset options), any other top-level scenario key, and a section
    as a dict (`throughput={"preset": "rfc2544-strict"}` sets that key and keeps
    the section's others). A single value stands for a one-item list
    (`rules=1000`), a comma-separated string too (`backends="none,nftables"`).
    Returns the run directory (`out`, default results/<name>-<time>). The run
    is complete when it returns, whether or not every trial was ok (see
    `trials(path).status`). Unlike `fwbench run` it writes no report: call
    report(path). Must be called from the main thread (SIGTERM handling).
resume(run_dir) -> Path
    Finish an interrupted run as it was planned (`fwbench run --resume`).

Reading a run directory (no root; a schema-2 run is read as schema 3):

trials(run_dir) -> DataFrame
    One row per recorded trial, in the order they ran: `trial` (its position in
    the plan), the run's factors (run.json's `factors`: backend, rules,
    frame_size for the sweeps; treatment, set_size, frame_size for droprate, ...),
    repetition, status ("ok" / "failed" / "invalid"), reason, started_at (UTC
    timestamps), verified (the rule set was proven loaded before measuring), then
    one float column per metric of the run's method (fwbench.metrics: rx_pps,
    rtt_us_median, ... for maxrate; NaN where a trial did not record it). Integer
    factors stay integers.
cells(run_dir, metric=None) -> DataFrame
    Per metric and cell, over the cell's ok trials (fwbench.report.analysis's
    summaries, as report.html's tables and cells.csv have them): metric, the
    factors, n, mean, sd, median, median_ci_low / median_ci_high (percentile
    bootstrap 95 % interval of the median; NaN with one value). `metric` a key
    (e.g. "rx_pps") for one metric; None for every metric the run recorded.
cost_model(run_dir) -> DataFrame
    The cost per rule of a rule-count sweep, as the report's "Cost per rule"
    table and cost_per_rule.csv: per backend and frame size the fit 1/pps = a +
    b*N over its ok trials that were not generator-bound: b_ns_per_rule with
    b_ci_low / b_ci_high (95 %), a_ns with its interval, r_squared, points,
    generator_bound_excluded, rules_min / rules_max, and b against the reference
    backend (iptables-legacy, else nftables) of the same run: reference,
    b_over_reference with its interval. A backend with no fit (fewer than three
    points over two rule counts) has NaN figures. A run of another experiment
    has no cost per rule: FwbenchError.
findings(run_dir) -> DataFrame
    The findings of the study the run belongs to (its scenario's `study`, or the
    experiment's own study), one row per claim, as the report's findings table
    decides them (fwbench.report.findings.decide): study, key, claim, seed (the
    seed's figure), test (the estimate), margin (the rule that decides it, with
    its margin or threshold), ours (our figure with its interval, at the level
    the verdict was tested at), verdict ("holds" / "does not hold" / "not
    shown"), why; no rows when the run belongs to no study.
report(run_dir, out=None) -> Path
    Write report.html, report.md and the CSV tables (`fwbench report`) into
    `out` (default the run directory); returns report.html's path.

The five studies:

studies() -> DataFrame
    What `fwbench study list` shows: id, title, scenario, runs, scale, minutes,
    claims.
study(id, out=None) -> Path
    Run one study (`fwbench study ID`, needs root) and write its report; into a
    directory holding the study's run, finish it. findings(path) has the verdicts.

Errors a user can cause (a bad scenario key, not root, not a run directory, an
unknown metric) raise fwbench.api.FwbenchError with a one-line message.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

try:
    import pandas as pd
except ImportError as e:   # an environment set up before pandas was a dependency
    raise ImportError("fwbench.api needs pandas: run ./scripts/setup.sh (or pip "
                      "install pandas into fwbench's environment)") from e

from fwbench.errors import FwbenchError
from fwbench.metrics import known
from fwbench.report import analysis as an
from fwbench.report.data import RunData, load
from fwbench.report.findings import open_claims

__all__ = ["FwbenchError", "run", "resume", "trials", "cells", "cost_model",
           "findings", "report", "studies", "study"]

PathLike = str | os.PathLike

# Keyword -> scenario key, where run()'s keywords follow the CLI's flags rather than
# the scenario file's keys.
ALIASES = {"duration": "duration_s", "max_repeat": "adaptive.max_repeat",
           "ruleset": "policy.file", "iface": "policy.iface", "ipsets": "policy.ipsets",
           "flow": "policy.flow", "full": "echo.full"}
# Scenario keys holding lists, where one value or "a,b" is accepted as the CLI does.
LISTS = ("backends", "rules", "frame_sizes")


# -- running ----------------------------------------------------------------------------

def _overrides(kw: dict[str, Any]) -> dict[str, Any]:
    """run()'s keywords as scenario.load's overrides (`section.key` for a section)."""
    out: dict[str, Any] = {}
    for k, v in kw.items():
        key = ALIASES.get(k, k)
        if isinstance(v, dict) and "." not in key:
            out.update({f"{key}.{sub}": x for sub, x in v.items()})
            continue
        if key in LISTS:
            if isinstance(v, str):
                v = [x.strip() for x in v.split(",") if x.strip()]
                if key != "backends":
                    try:
                        v = [int(x.replace("_", "")) for x in v]
                    except ValueError:
                        raise FwbenchError(f"{k}: expected integers, got {kw[k]!r}") from None
            elif isinstance(v, (int, float)):
                v = [v]
            elif v is not None:
                v = list(v)
        out[key] = v
    return out


def _console():
    from rich.console import Console
    return Console(stderr=True)


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise FwbenchError(f"{what} must run as root: it builds network namespaces and "
                           f"loads firewall rules inside them")
    if threading.current_thread() is not threading.main_thread():
        raise FwbenchError(f"{what} must be called from the main thread (it turns "
                           f"SIGTERM into a clean stop)")


def _execute(target, path: Path, console) -> Path:
    from fwbench.experiments import loop
    try:
        outcome = target()
    except (KeyboardInterrupt, loop.Interrupted):
        print(f"fwbench: interrupted; finished trials are in {path}/trials.jsonl; "
              f"finish with fwbench.api.resume({str(path)!r})", file=sys.stderr)
        raise
    if outcome.summary is not None:
        console.print(outcome.summary)
    not_ok = sum(1 for r in outcome.records if r.status != "ok")
    console.print(f"{len(outcome.records)} of {outcome.planned} trials recorded"
                  f"{f', {not_ok} not ok' if not_ok else ''}; results: {outcome.path}",
                  highlight=False)
    return Path(outcome.path)


def run(scenario: PathLike | None = None, out: PathLike | None = None,
        **overrides) -> Path:
    """Run a scenario (as `fwbench run SCENARIO --out OUT --FLAG ...`); returns the
    run directory. See the module's documentation for the keywords."""
    from fwbench import scenario as scenarios
    from fwbench.experiments import loop

    sc = scenarios.load(scenario, _overrides(overrides))
    _need_root("fwbench.api.run")
    path = Path(out) if out is not None else loop.default_out(sc)
    console = _console()
    return _execute(lambda: loop.start(sc, path, console, open_claims), path, console)


def resume(run_dir: PathLike) -> Path:
    """Finish an interrupted run (`fwbench run --resume RUN_DIR`); returns it."""
    from fwbench.experiments import loop

    _need_root("fwbench.api.resume")
    path = Path(run_dir)
    console = _console()
    return _execute(lambda: loop.resume(path, console, open_claims), path, console)


# -- reading ----------------------------------------------------------------------------

def _data(run_dir: PathLike | RunData) -> RunData:
    return run_dir if isinstance(run_dir, RunData) else load(run_dir)


def _metrics(data: RunData) -> list:
    """The method's registry metrics, each key once (headline first)."""
    seen: dict[str, Any] = {}
    for m in known(data.method):
        seen.setdefault(m.key, m)
    return list(seen.values())


def _typed(df: pd.DataFrame, data: RunData) -> pd.DataFrame:
    """Factor columns as the values they hold: a factor whose planned values are all
    integers is int64, whether or not any trial was recorded yet."""
    plan = data.meta.get("plan", [])
    for f in data.factors:
        values = list(df[f]) or [k.get(f) for k in plan]
        if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            df[f] = df[f].astype("int64")
    return df


def trials(run_dir: PathLike | RunData) -> pd.DataFrame:
    """One row per recorded trial: trial, the factors, repetition, status, reason,
    started_at, verified, and every metric of the run's method."""
    data = _data(run_dir)
    metrics = _metrics(data)
    columns = ["trial", *data.factors, "repetition", "status", "reason", "started_at",
               "verified", *(m.key for m in metrics)]
    rows = [[r.trial, *data.cell(r), r.repetition, r.status, r.reason, r.started_at,
             bool((r.verification or {}).get("ok")), *(m.value(r) for m in metrics)]
            for r in data.records]
    df = pd.DataFrame(rows, columns=columns)
    df["trial"] = df["trial"].astype("int64")
    df["repetition"] = df["repetition"].astype("int64")
    df["verified"] = df["verified"].astype(bool)
    df["started_at"] = pd.to_datetime(df["started_at"], utc=True, format="ISO8601")
    for m in metrics:
        df[m.key] = df[m.key].astype("float64")
    return _typed(df, data)


def _nan(v):
    return float("nan") if v is None else v


def cells(run_dir: PathLike | RunData, metric: str | None = None) -> pd.DataFrame:
    """Per metric and cell over its ok trials: n, mean, sd, median and the 95 %
    bootstrap interval of the median (report.analysis.summaries)."""
    data = _data(run_dir)
    known = _metrics(data)
    if metric is None:
        chosen = data.metrics()
    else:
        chosen = [m for m in known if m.key == metric]
        if not chosen:
            raise FwbenchError(f"{data.path}: a {data.method} run has no metric {metric!r} "
                               f"(it has {', '.join(m.key for m in known) or 'none'})")
    columns = ["metric", *data.factors, "n", "mean", "sd", "median", "median_ci_low",
               "median_ci_high"]
    rows = [[m.key, *s.cell, s.n, s.mean, _nan(s.sd), s.median,
             _nan(s.ci.low if s.ci else None), _nan(s.ci.high if s.ci else None)]
            for m in chosen for s in an.summaries(data, m).values()]
    df = pd.DataFrame(rows, columns=columns)
    df["n"] = df["n"].astype("int64")
    for c in ("mean", "sd", "median", "median_ci_low", "median_ci_high"):
        df[c] = df[c].astype("float64")
    return _typed(df, data)


COST_COLUMNS = ["backend", "frame_size", "b_ns_per_rule", "b_ci_low", "b_ci_high", "a_ns",
                "a_ci_low", "a_ci_high", "r_squared", "points", "generator_bound_excluded",
                "rules_min", "rules_max", "reference", "b_over_reference",
                "b_over_reference_low", "b_over_reference_high"]


def cost_rows(data: RunData) -> list[an.CostRow]:
    """The report's cost model rows, computed as report.build's Report does: the
    headline's cell summaries give the no-firewall ceilings, trials near them are
    generator-bound and left out, the rest are fitted per backend and frame size."""
    head = data.headline()
    head_cells = an.summaries(data, head) if head else {}
    return an.cost_rows(data, an.generator_bound(data, an.ceilings(data, head_cells)))


def cost_model(run_dir: PathLike | RunData) -> pd.DataFrame:
    """The cost per rule per backend and frame size, with intervals and against
    the reference backend, as report.html's "Cost per rule" table gives it."""
    data = _data(run_dir)
    if not data.is_sweep:
        raise FwbenchError(f"{data.path}: a {data.method} run (factors "
                           f"{', '.join(data.factors)}) has no cost per rule: that needs "
                           f"a sweep over backend, rules and frame_size")
    rows = cost_rows(data)
    refs = {f: an.cost_reference(rows, f) for f in {r.frame_size for r in rows}}
    out = []
    for r in rows:
        row = dict.fromkeys(COST_COLUMNS)
        row.update(backend=r.backend, frame_size=r.frame_size, points=len(r.points),
                   generator_bound_excluded=r.excluded)
        f, ref = r.fit, refs[r.frame_size]
        if f is not None:
            row.update(b_ns_per_rule=f.b_ns, b_ci_low=f.b_interval.low,
                       b_ci_high=f.b_interval.high, a_ns=f.a_ns, a_ci_low=f.a_interval.low,
                       a_ci_high=f.a_interval.high, r_squared=f.r_squared, points=f.points,
                       rules_min=f.rules_min, rules_max=f.rules_max)
            rel = an.relative_cost(r, ref) if ref is not None else None
            if rel is not None:
                row.update(reference=ref.backend, b_over_reference=rel[0],
                           b_over_reference_low=rel[1], b_over_reference_high=rel[2])
        out.append(row)
    df = pd.DataFrame(out, columns=COST_COLUMNS)
    for c in ("frame_size", "points", "generator_bound_excluded"):
        df[c] = df[c].astype("int64")
    for c in ("rules_min", "rules_max"):
        df[c] = df[c].astype("Int64")      # no fit, no range: <NA>
    for c in COST_COLUMNS[2:9] + COST_COLUMNS[14:]:
        df[c] = df[c].astype("float64")
    return df


def findings(run_dir: PathLike | RunData) -> pd.DataFrame:
    """The findings of the run's study, one row per claim: the report's findings
    table (findings.csv)."""
    from fwbench.report import findings as fd
    header, rows = fd.csv_table(fd.decide(_data(run_dir)))
    return pd.DataFrame(rows, columns=header)


def report(run_dir: PathLike, out: PathLike | None = None) -> Path:
    """Write the run's report (`fwbench report RUN_DIR --out OUT`); returns the
    path of report.html."""
    from fwbench.report import build
    return build(run_dir, out).html


# -- the studies --------------------------------------------------------------------------

def studies() -> pd.DataFrame:
    """The five studies (`fwbench study list`): id, title, scenario, what it runs, its
    scale against the seed, minutes here, and its claims."""
    from fwbench import studies as st
    return pd.DataFrame([s.as_dict() for s in st.STUDIES.values()])


def study(study_id: str, out: PathLike | None = None) -> Path:
    """Run one study (`fwbench study ID`; needs root): its scenario, then its report,
    which opens with its findings; into a directory that holds the study's run it
    finishes that run. Returns the run directory; findings(path) gives the verdicts."""
    from fwbench import studies as st
    if study_id == "all":
        raise FwbenchError("study('all') is `fwbench study all`; run the studies one "
                           "by one here")
    st.get(study_id)
    _need_root("fwbench.api.study")
    return st.run(study_id, out, _console()).path
