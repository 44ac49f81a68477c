"""The report of any experiment, read from its factors and the metric registry: per
metric a figure of every cell's median with its interval, a table of the cells, and
each cell tested against its reference cell (Welch two-tailed, Holm across the
metric's cells, Mann-Whitney U and Cliff's delta beside it).

The sweeps (backend x rules x frame size) have a richer report (report.build.Report:
pair tables, the cost per rule, crossovers); every other experiment gets this one.
A cell's reference is by default the same cell at the first level of the first factor
(the toy's `a`); an experiment may choose another (droprate: the best treatment of
its group) and add its own blocks in front (report.droprate).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fwbench.metrics import Metric
from fwbench.plan import Cell
from fwbench.report import analysis as an
from fwbench.report import figures as fg
from fwbench.report.data import RunData
from fwbench.report.document import Block, Bullets, FigureBlock, Heading, Para, Table
from fwbench.report.formats import fmt, fmt_pct

References = dict[Cell, Cell]   # cell -> the cell it is compared with


def first_level(data: RunData, cells: dict[Cell, an.CellSummary]) -> References:
    """Each cell against the same cell at the first factor's first planned level."""
    levels = data.levels(data.factors[0])
    if not levels:
        return {}
    out = {}
    for c in cells:
        ref = (levels[0], *c[1:])
        if ref != c and ref in cells:
            out[c] = ref
    return out


@dataclass
class MetricSection:
    metric: Metric
    cells: dict[Cell, an.CellSummary]
    references: References
    comparisons: dict[Cell, an.Comparison] = field(default_factory=dict)


class CellReport:
    """Everything the report says about a run of any experiment, computed once."""

    def __init__(self, data: RunData,
                 references: Callable[[RunData, dict], References] = first_level,
                 lead: list[Block] | None = None, tests_note: str | None = None,
                 order: list[Cell] | None = None, labels: dict[Cell, str] | None = None):
        self.data = data
        self.order_given = order
        self.labels = labels or {}
        self.lead = lead or []
        self.tests_note = tests_note
        self.figures: list[fg.Figure] = []
        self.order = self._order()
        self.sections = []
        for m in data.metrics():
            cells = an.summaries(data, m)
            sec = MetricSection(m, cells, references(data, cells))
            for c, ref in sec.references.items():
                sec.comparisons[c] = an.compare(cells[c], cells[ref])
            an.apply_holm(list(sec.comparisons.values()))
            self.sections.append(sec)

    def _order(self) -> list[Cell]:
        """The planned cells, sorted (an experiment may pass its own order)."""
        return self.order_given or sorted({tuple(k[f] for f in self.data.factors)
                                           for k in self.data.meta.get("plan", [])})

    def label(self, cell: Cell) -> str:
        return self.labels.get(cell) or self.data.label(cell)

    def sentences(self, sec: MetricSection) -> list[str]:
        out = []
        m = sec.metric
        for c in self.order:
            comp = sec.comparisons.get(c)
            if comp is None or (v := comp.verdict(m)) not in ("better", "worse"):
                continue
            out.append(f"{self.label(c)}: {m.label} {v} than {self.label(sec.references[c])}, "
                       f"{fmt(m, comp.a.median)} against {fmt(m, comp.b.median)} {m.unit} "
                       f"({fmt_pct(comp.change)} [{fmt_pct(comp.change_ci.low)}, "
                       f"{fmt_pct(comp.change_ci.high)}]), p = {an.format_p(comp.holm_p)} "
                       f"({comp.test.test}, Holm-adjusted).")
        return out

    def blocks(self, environment: Table) -> list[Block]:
        d = self.data
        out: list[Block] = [Heading(1, f"fwbench report: {d.name}")]
        desc = d.scenario.get("description", "").rstrip(".")
        dims = "; ".join(f"{f}: {', '.join(map(str, d.levels(f)))}" for f in d.factors)
        out.append(Para(f"{desc + '. ' if desc else ''}Experiment {d.method}; {dims}."))
        out += self.lead
        out.append(Heading(2, "Conclusions", "conclusions"))
        said = [s for sec in self.sections for s in self.sentences(sec)]
        out.append(Bullets(said) if said else Para(
            "No cell differs from the cell it is compared with at the corrected "
            "significance level; see each table.", "note"))
        out.append(Para(self.tests_note or (
            f"Tests: each cell against its reference cell, as a ratio on the log scale "
            f"(paired by round where both ran in the same rounds, else Welch's t on the "
            f"logs), Holm's correction across the cells of each metric, significance at "
            f"{an.ALPHA}, each interval at its Holm level; the seed's tests "
            f"(Welch on values, Mann-Whitney U, Cliff's delta) beside it decide "
            f"nothing."), "note"))
        out.append(Heading(2, "Environment", "environment"))
        out.append(environment)
        out.append(Heading(2, "Warnings", "warnings"))
        bad = [f"{self.label(d.cell(r))} rep {r.repetition}: {r.status}: {r.reason}"
               for r in d.records if r.status != "ok"]
        out.append(Bullets(bad, "warning") if bad else
                   Para("None: every trial verified and measured.", "note"))
        if (dist := an.disturbance_note(d)) is not None:
            out.append(Para(f"Disturbed: {dist.detail}" +
                            (f": {dist.cells}." if dist.cells != "-" else "."), "note"))
        for sec in self.sections:
            m = sec.metric
            out.append(Heading(2, f"{m.label} ({m.unit})", f"metric-{m.key}"))
            fig = fg.cell_intervals(m, sec.cells, self.order, sec.references, self.label)
            if fig:
                self.figures.append(fig)
                out.append(FigureBlock(fig, f"figures/{fig.id}.svg"))
            out.append(self._table(sec))
        return out

    def _table(self, sec: MetricSection) -> Table:
        m, d = sec.metric, self.data
        rows = []
        for c in self.order:
            s = sec.cells.get(c)
            if s is None:
                continue
            comp = sec.comparisons.get(c)
            # the intervals on a second line (a space in Markdown): the table fits 1280 px
            ci = f"\n[{fmt(m, s.ci.low)}, {fmt(m, s.ci.high)}]" if s.ci else ""
            row = [*map(str, c), f"{fmt(m, s.median)}{ci}", str(s.n)]
            if comp is None:
                rows.append(row + ["reference" if c in sec.references.values() else "-",
                                   "", "", "", "", ""])
                continue
            iv = comp.change_ci
            rows.append(row + [
                self.label(sec.references[c]),
                fmt_pct(comp.change) + (f"\n[{fmt_pct(iv.low)}, {fmt_pct(iv.high)}]" if iv else ""),
                an.format_p(comp.holm_p),
                ("paired" if comp.test.paired else "unpaired") if comp.test else "-",
                an.format_p(comp.welch.p if comp.welch else None),
                an.format_p(comp.mwu.p if comp.mwu else None)])
        return Table([*d.factors, "median [95 %]", "n", "against", "change [interval]",
                      "p Holm", "test", "seed: p Welch", "seed: p Mann-Whitney"], rows,
                     f"{m.label} ({m.unit}): median over repetitions with its bootstrap "
                     f"95 % interval; change = the ratio to the reference - 1, on the log "
                     f"scale, with its interval at its Holm level ({an.pairing(list(sec.comparisons.values()))}); "
                     f"the seed's tests decide nothing",
                     id=f"cells-{m.key}", kind="pvalues")

    def csv_tables(self) -> dict[str, tuple[list[str], list[list]]]:
        d = self.data
        cells, comps = [], []
        for sec in self.sections:
            for c in self.order:
                s = sec.cells.get(c)
                if s is None:
                    continue
                cells.append([sec.metric.key, *c, s.n, s.mean, s.sd, s.median,
                              s.ci.low if s.ci else None, s.ci.high if s.ci else None])
                comp = sec.comparisons.get(c)
                if comp is None:
                    continue
                comps.append([sec.metric.key, *c, *sec.references[c], comp.a.n, comp.b.n,
                              comp.a.median, comp.b.median,
                              *an.comparison_columns(comp, sec.metric)])
        metrics = [sec.metric for sec in self.sections]
        trials = [[r.trial, *d.cell(r), r.repetition, r.status] +
                  [m.value(r) if r.status == "ok" else None for m in metrics]
                  for r in d.records]
        f = list(d.factors)
        return {
            "cells": (["metric", *f, "n", "mean", "sd", "median", "median_ci_low",
                       "median_ci_high"], cells),
            "comparisons": (["metric", *f, *[f"reference_{x}" for x in f], "n", "n_reference",
                             "median", "median_reference", *an.COMPARISON_COLUMNS], comps),
            "trials": (["trial", *f, "repetition", "status"] + [m.key for m in metrics],
                       trials),
        }

