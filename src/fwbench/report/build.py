"""`fwbench report <run dir>`: report.html (self-contained), report.md with its SVG
figures, and CSV tables with every number at full precision.

Sections of a rule-count sweep's report: conclusions, environment, warnings,
per-metric figures and cell tables, seed 000's pair tables with p-values, the cost per
rule and crossovers, latency percentiles, rate against frame size. Every other
experiment's report is report.cells' (droprate's with report.droprate's lead).
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from fwbench.errors import FwbenchError
from fwbench.report import analysis as an
from fwbench.report import findings
from fwbench.report.cells import CellReport
from fwbench.report import figures as fg
from fwbench.metrics import Metric
from fwbench.report.data import RunData, load
from fwbench.report.formats import fmt, fmt_pct
from fwbench.report.document import (Block, Bullets, FigureBlock, Heading, Para, Table,
                                     markdown, to_html)

def parse_pairs(text: list[str] | None) -> list[tuple[str, str]] | None:
    if not text:
        return None
    out = []
    for item in text:
        a, sep, b = item.partition(":")
        if not sep or not a or not b or a == b:
            raise FwbenchError(f"--pair {item!r}: expected two different backends as A:B")
        out.append((a, b))
    return out


@dataclass
class ReportFiles:
    html: Path
    markdown: Path
    csvs: list[Path]
    figures: int


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(["" if v is None else v for v in row] for row in rows)
    os.replace(tmp, path)
    return path


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def environment_rows(data: RunData) -> list[list[str]]:
    env = data.meta.get("environment", {})
    sc = data.scenario
    rows = [["run", f"{data.name} ({data.path.name})"],
            ["method", f"{data.method}, traffic {sc.get('traffic', '?')}"],
            ["design", f"{sc.get('repeat')} repetitions (interleaved, seed {sc.get('seed')}), "
                       f"{sc.get('duration_s')} s per trial"],
            ["trials", f"{len(data.ok)} ok of {len(data.records)} recorded, "
                       f"{len(data.meta.get('plan', []))} planned"],
            ["kernel", env.get("kernel", "?")],
            ["machine", f"{env.get('cpu_model', '?')}, {env.get('cpus', '?')} CPUs, "
                        f"{env.get('mem_total', '?')}, {env.get('os', '?')}"],
            ["fwbench", f"{env.get('fwbench', '?')} (Python {env.get('python', '?')})"]]
    for tool, version in sorted((env.get("tools") or {}).items()):
        if version:
            rows.append([tool, str(version)])
    rs = data.meta.get("ruleset")
    if rs:   # an imported rule set: what it was, and which flow was measured
        rows.append(["rule set", f"{rs.get('file')} ({rs.get('rules')} rules, sha256 "
                                 f"{str(rs.get('sha256'))[:12]})"])
        f = rs.get("flow") or {}
        rows.append(["measured flow", f"{f.get('proto')} {f.get('src')} -> {f.get('dst')} "
                                      f"port {f.get('dport')}, accepted by rule "
                                      f"{f.get('rule')}"])
        for orig, mapped in rs.get("address_map", []):
            rows.append(["address moved", f"{orig} -> {mapped}"])
    sessions = data.meta.get("sessions", [])
    for i, s in enumerate(sessions, 1):
        tb = s.get("testbed", {})
        keep = {k: tb[k] for k in ("provider", "mtu", "sender_cpu", "firewall_cpu",
                                   "server_cpu", "firewall_rps", "ingress_gro") if k in tb}
        rows.append(["testbed" if len(sessions) == 1 else f"testbed, session {i}",
                     ", ".join(f"{k}={v}" for k, v in keep.items())])
    bias = env.get("engine_bias")
    if bias and bias.get("one_way_us"):
        ow = bias["one_way_us"]
        rows.append(["engine bias", f"one-way p50 {ow.get('p50', 0):.1f} µs, min "
                                    f"{ow.get('min', 0):.1f} µs, p99 {ow.get('p99', 0):.1f} µs "
                                    f"(no firewall, {bias.get('offered_pps')} pps)"])
    for s in data.meta.get("sessions", []):
        eng = s.get("engine") or {}
        ceil = eng.get("sender_ceiling_pps")
        if ceil:
            rows.append(["sender ceiling", ", ".join(f"{f} B: {v:,.0f} pps"
                                                     for f, v in sorted(ceil.items(),
                                                                        key=lambda x: int(x[0])))])
        if eng.get("sender"):
            rows.append(["sender", eng["sender"] + (
                f" (XDP sender unavailable: {eng['xdp_unavailable']})"
                if eng.get("xdp_unavailable") else
                " (XDP live frames"
                + (" at open throttle, the packet socket for paced sending"
                   if eng.get("paced") == "packet" else "")
                + "; GRO on at the firewall's ingress for every backend)"
                if eng["sender"] == "xdp" else "")])
    skipped = data.meta.get("skipped_backends") or {}
    for b, why in skipped.items():
        rows.append([f"skipped {b}", why])
    return rows


def _cell_table(metric: Metric, frame: int, cells: dict, backends: list[str],
                rules: list[int]) -> Table:
    cols = ["backend"] + [f"{n:,}" for n in rules]
    rows = []
    for b in backends:
        if b == "none":
            s = cells.get(("none", 0, frame))
            if s:
                rows.append([b] + [_median_text(metric, s)] * len(rules))
            continue
        got = [cells.get((b, n, frame)) for n in rules]
        if any(got):
            rows.append([b] + [_median_text(metric, s) if s else "-" for s in got])
    return Table(cols, rows, f"{metric.label} ({metric.unit}), {frame}-byte frames: median "
                             f"[95 % interval] (n)", id=f"cells-{metric.key}-{frame}")


def _median_text(metric: Metric, s: an.CellSummary) -> str:
    ci = f" [{fmt(metric, s.ci.low)}, {fmt(metric, s.ci.high)}]" if s.ci else ""
    return f"{fmt(metric, s.median)}{ci} ({s.n})"


def pair_table_block(t: an.PairTable) -> Table:
    m = t.metric
    rows = [[t.a] + [fmt(m, c.a.mean) for c in t.columns],
            [t.b] + [fmt(m, c.b.mean) for c in t.columns],
            ["p-value (Welch, two-tailed)"] + [an.format_p(c.welch.p if c.welch else None)
                                               for c in t.columns],
            ["p-value (Holm-adjusted)"] + [an.format_p(c.welch_holm) for c in t.columns],
            ["p-value (Mann-Whitney U, two-tailed)"] + [an.format_p(c.mwu.p if c.mwu else None)
                                                        for c in t.columns],
            ["Cliff's delta"] + ["-" if c.delta is None else f"{c.delta:+.2f}"
                                 for c in t.columns],
            [f"median {t.a} vs {t.b}"] + [fmt_pct(c.change) for c in t.columns]]
    return Table(["", *[f"{n:,}" for n in t.rules]], rows,
                 f"{m.label} ({m.unit}), {t.frame_size}-byte frames: mean of "
                 f"{'/'.join(sorted({str(c.a.n) for c in t.columns} | {str(c.b.n) for c in t.columns}))} "
                 f"trials per cell, by rule-set size",
                 id=f"pair-{t.a}-{t.b}-{m.key}-{t.frame_size}", kind="pvalues",
                 row_classes=["", "", "pvalue", "holm", "pvalue", "", ""])


def cost_table(rows: list[an.CostRow]) -> Table:
    refs = {f: an.cost_reference(rows, f) for f in {r.frame_size for r in rows}}
    out = []
    for r in rows:
        f, ref = r.fit, refs[r.frame_size]
        if f is None:
            out.append([r.backend, str(r.frame_size), "-", "-", "-", "-", "-",
                        f"{len(r.points)} ({r.excluded} generator-bound)", "-"])
            continue
        rel = an.relative_cost(r, ref) if ref is not None else None
        out.append([r.backend, str(r.frame_size), f"{f.b_ns:.3f}",
                    f"[{f.b_interval.low:.3f}, {f.b_interval.high:.3f}]",
                    "-" if rel is None else (f"{rel[0]:.2f} ({ref.backend})" if r is ref else
                                             f"{rel[0]:.2f} [{rel[1]:.2f}, {rel[2]:.2f}]"),
                    f"{f.a_ns:,.1f}", f"{f.r_squared:.3f}",
                    f"{f.points}" + (f" ({r.excluded} generator-bound left out)"
                                     if r.excluded else ""),
                    f"{f.rules_min:,}..{f.rules_max:,}"])
    return Table(["backend", "frame B", "ns per rule (b)", "95 % interval", "x reference",
                  "base ns (a)", "R²", "trials", "rules"], out,
                 "Per-packet cost model 1/pps = a + b·N, least squares over every trial; "
                 "x reference: b over the reference backend's b from the same rounds",
                 id="cost-per-rule")


ABSOLUTE_NOTE = (
    "Absolute figures (ns per rule, base ns, packet rates) hold for this machine in the "
    "state it was in during this run: on small shared VMs they move 1.5-2.2x between runs "
    "an hour apart. Do not compare them with another run's; compare the x reference "
    "column, or use `fwbench compare --normalise`, which takes each rate as a fraction of "
    "its run's own none backend in the same round.")


def experiment_report(data: RunData) -> CellReport:
    """The report of a run that is not a rule-count sweep: droprate's with seed
    002's table in front and each treatment against its group's best; any other
    experiment's with each cell against its first factor's first level."""
    if data.method == "droprate":
        from fwbench.report import droprate
        return droprate.report(data)
    if data.method == "loadlatency":
        from fwbench.report import loadlatency
        return loadlatency.report(data)
    if data.method == "echo":
        from fwbench.report import echo
        return echo.report(data)
    if data.method == "fixedrate":    # with chain and cpus factors (seed 003 in full)
        from fwbench.report import fixedrate
        return fixedrate.report(data)
    return CellReport(data)


class Report:
    """A rule-count sweep's report (backend x rules x frame size): everything it
    says, computed once and written three ways."""

    def __init__(self, data: RunData, pairs: list[tuple[str, str]] | None = None,
                 link_gbps: float = 10.0):
        self.data = data
        known = set(data.backends())
        if pairs:
            for a, b in pairs:
                for x in (a, b):
                    if x not in known:
                        raise FwbenchError(f"--pair {a}:{b}: this run has no backend {x} "
                                           f"(it has {', '.join(sorted(known))})")
        self.pairs = pairs or an.default_pairs(data)
        self.link_bps = link_gbps * 1e9
        self.metrics = data.metrics()
        self.cells = {m.key: an.summaries(data, m) for m in self.metrics}
        self.tables = {m.key: an.pair_tables(data, m, self.cells[m.key], self.pairs)
                       for m in self.metrics}
        head = data.headline()
        head_cells = self.cells[head.key] if head else {}
        bound_trials = an.generator_bound(data, an.ceilings(data, head_cells))
        self.bound = {c for c, _ in bound_trials}
        self.cost = an.cost_rows(data, bound_trials)
        self.crossings = an.crossovers(self.cost)
        self.warnings = an.warnings(data, bound_trials, head_cells)
        # (metric, pair table, what it concludes), in report order
        self.compared = [(m, t, an.conclusions(t, self.bound))
                         for m in self.metrics for t in self.tables[m.key]]
        self.colour = fg.colours(data.backends())
        self.figures: list[fg.Figure] = []

    def blocks(self) -> list[Block]:
        d = self.data
        head = d.headline()
        out: list[Block] = [Heading(1, f"fwbench report: {d.name}")]
        desc = d.scenario.get("description", "").rstrip(".")
        out.append(Para(f"{desc + '. ' if desc else ''}Method {d.method}; "
                        f"backends {', '.join(d.backends())}; rule-set sizes "
                        f"{', '.join(f'{n:,}' for n in d.rule_counts())}; frame sizes "
                        f"{', '.join(map(str, d.frame_sizes()))} B.".strip()))
        out.append(Heading(2, "Conclusions", "conclusions"))
        claims = [(m, c.text) for m, _, cl in self.compared for c in cl if c.is_difference]
        out += [Para(s, "conclusion") for m, s in claims if m is head]
        if rest := [s for m, s in claims if m is not head]:
            out.append(Bullets(rest))
        if costs := [s for r in self.cost if (s := an.cost_sentence(r))]:
            out.append(Bullets(costs))
        if not claims:
            out.append(Para("No difference between the backend pairs compared "
                            f"({'; '.join(f'{a} vs {b}' for a, b in self.pairs) or 'none'}) "
                            "is shown at any cell; see each table.", "note"))
        out.append(Para(f"Tests: Welch's two-tailed t-test per cell (seed 000's), Holm's "
                        f"correction across the cells of each pair and metric, significance "
                        f"at {an.ALPHA}; Mann-Whitney U and Cliff's delta beside it. With n "
                        f"trials a side the smallest possible two-tailed Mann-Whitney p is "
                        f"2/C(2n, n) (0.1 at n = 3).", "note"))
        out.append(Heading(2, "Environment", "environment"))
        out.append(Table(["", "value"], environment_rows(d), id="environment", kind="kv"))
        out.append(Heading(2, "Warnings", "warnings"))
        out.append(Bullets(self.warnings, "warning") if self.warnings
                   else Para("None: every trial verified and measured the firewall.", "note"))
        for m in self.metrics:
            out.append(Heading(2, f"{m.label} ({m.unit})", f"metric-{m.key}"))
            for f in d.frame_sizes():
                fig = fg.metric_vs_rules(d, m, f, self.cells[m.key], self.colour)
                if fig:
                    out.append(self._figure(fig))
                out.append(_cell_table(m, f, self.cells[m.key], d.backends(), d.rule_counts()))
            for t, claims in ((t, cl) for mm, t, cl in self.compared if mm is m):
                out.append(Heading(3, f"{t.a} vs {t.b}, {m.label}, {t.frame_size} B"))
                out.append(pair_table_block(t))
                out += [Para(c.text, "conclusion" if m is head else "") for c in claims]
        if head is not None:
            out.append(Heading(2, "Cost per rule", "cost"))
            out.append(cost_table(self.cost))
            out.append(Para(ABSOLUTE_NOTE, "note"))
            for f in d.frame_sizes():
                fig = fg.cost_model(self.cost, f, self.colour)
                if fig:
                    out.append(self._figure(fig))
            out.append(Heading(3, "Crossovers"))
            if self.crossings:
                out.append(Table(
                    ["backends", "frame B", "equal cost at N", "95 % interval",
                     "cheaper below", "within measured range"],
                    [[f"{c.a} / {c.b}", str(c.frame_size), f"{c.crossing.rules:,.0f}",
                      f"[{c.crossing.interval.low:,.0f}, {c.crossing.interval.high:,.0f}]",
                      c.cheaper_below, "yes" if c.crossing.inside else "no (extrapolated)"]
                     for c in self.crossings], id="crossovers"))
            else:
                out.append(Para("No two backends' cost lines cross at a rule count the "
                                "bootstrap supports.", "note"))
        lat = [fig for f in d.frame_sizes()
               if (fig := fg.latency_percentiles(d, f, self.colour))]
        if lat:
            out.append(Heading(2, "Latency percentiles", "latency"))
            out += [self._figure(x) for x in lat]
        if head is not None:
            fig = fg.rate_vs_frame(d, head, self.cells[head.key], self.colour, self.link_bps)
            if fig:
                out.append(Heading(2, "Rate against frame size", "frames"))
                out.append(self._figure(fig))
        return out

    def _figure(self, fig: fg.Figure) -> FigureBlock:
        self.figures.append(fig)
        return FigureBlock(fig, f"figures/{fig.id}.svg")

    def csv_tables(self) -> dict[str, tuple[list[str], list[list]]]:
        cells = [[m.key, *s.cell, s.n, s.mean, s.sd, s.median,
                  s.ci.low if s.ci else None, s.ci.high if s.ci else None]
                 for m in self.metrics for s in self.cells[m.key].values()]
        comps = []
        for m in self.metrics:
            for t in self.tables[m.key]:
                for n, c in zip(t.rules, t.columns):
                    w = c.welch
                    comps.append([m.key, t.a, t.b, t.frame_size, n, c.a.n, c.b.n, c.a.mean,
                                  c.b.mean, c.a.median, c.b.median, c.change,
                                  c.change_ci.low if c.change_ci else None,
                                  c.change_ci.high if c.change_ci else None,
                                  w.statistic if w else None, w.df if w else None,
                                  w.p if w else None, c.welch_holm,
                                  c.mwu.statistic if c.mwu else None,
                                  c.mwu.p if c.mwu else None,
                                  c.mwu_less.p if c.mwu_less else None,
                                  c.mwu_greater.p if c.mwu_greater else None, c.delta])
        refs = {f: an.cost_reference(self.cost, f) for f in {r.frame_size for r in self.cost}}
        cost = []
        for r in self.cost:
            if not r.fit:
                continue
            ref = refs[r.frame_size]
            rel = an.relative_cost(r, ref) if ref is not None else None
            cost.append([r.backend, r.frame_size, r.fit.b_ns, r.fit.b_interval.low,
                         r.fit.b_interval.high, r.fit.a_ns, r.fit.a_interval.low,
                         r.fit.a_interval.high, r.fit.r_squared, r.fit.points, r.excluded,
                         r.fit.rules_min, r.fit.rules_max, ref.backend if ref else None,
                         *(rel or (None, None, None))])
        cross = [[c.a, c.b, c.frame_size, c.crossing.rules, c.crossing.interval.low,
                  c.crossing.interval.high, c.crossing.inside, c.cheaper_below]
                 for c in self.crossings]
        trials = [[r.trial, *self.data.cell(r), r.repetition, r.status] +
                  [m.value(r) for m in self.metrics] for r in self.data.records]
        return {
            "cells": (["metric", "backend", "rules", "frame_size", "n", "mean", "sd",
                       "median", "median_ci_low", "median_ci_high"], cells),
            "comparisons": (["metric", "a", "b", "frame_size", "rules", "n_a", "n_b",
                             "mean_a", "mean_b", "median_a", "median_b", "median_change",
                             "median_change_ci_low", "median_change_ci_high", "welch_t",
                             "welch_df", "welch_p", "welch_p_holm", "mwu_u",
                             "mwu_p_two_sided", "mwu_p_less", "mwu_p_greater",
                             "cliffs_delta"], comps),
            "cost_per_rule": (["backend", "frame_size", "b_ns_per_rule", "b_ci_low",
                               "b_ci_high", "a_ns", "a_ci_low", "a_ci_high", "r_squared",
                               "points", "generator_bound_excluded", "rules_min",
                               "rules_max", "reference", "b_over_reference",
                               "b_over_reference_low", "b_over_reference_high"], cost),
            "crossovers": (["a", "b", "frame_size", "rules", "ci_low", "ci_high",
                            "inside_measured_range", "cheaper_below"], cross),
            "trials": (["trial", *self.data.factors, "repetition", "status"] +
                       [m.key for m in self.metrics], trials),
        }


def build(run_dir: str | Path, out: str | Path | None = None,
          pairs: list[tuple[str, str]] | None = None, link_gbps: float = 10.0) -> ReportFiles:
    data = load(run_dir)
    if not data.ok:
        raise FwbenchError(f"{run_dir}: no ok trial to report on")
    if link_gbps <= 0:
        raise FwbenchError("--link-gbps must be positive")
    if data.is_sweep:
        rep = Report(data, pairs, link_gbps)
        blocks = rep.blocks()
    else:
        if pairs:
            raise FwbenchError(f"--pair compares two backends of a rule-count sweep; "
                               f"this is a {data.method} run (factors "
                               f"{', '.join(data.factors)})")
        rep = experiment_report(data)
        blocks = rep.blocks(Table(["", "value"], environment_rows(data), id="environment",
                                  kind="kv"))
    # Every report opens with its study's findings, right after its title and line.
    found = findings.decide(data)
    blocks[2:2] = findings.blocks(data, found)
    dest = Path(out) if out else data.path
    figdir = dest / "figures"
    try:
        figdir.mkdir(parents=True, exist_ok=True)
        for f in rep.figures:
            (figdir / f"{f.id}.svg").write_bytes(f.svg)
        tables = rep.csv_tables()
        if found:
            tables["findings"] = findings.csv_table(found)
        csvs = [write_csv(dest / f"{name}.csv", header, rows)
                for name, (header, rows) in tables.items()]
        md = dest / "report.md"
        write_atomic(md, markdown(blocks))
        page = dest / "report.html"
        write_atomic(page, to_html(f"fwbench report: {data.name}", blocks))
    except OSError as e:
        raise FwbenchError(f"cannot write the report to {dest}: {e.strerror}") from None
    return ReportFiles(page, md, csvs, len(rep.figures))
