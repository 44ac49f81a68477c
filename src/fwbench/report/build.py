"""`fwbench report <run dir>`: report.html (self-contained), report.md with its SVG
figures, and CSV tables with every number at full precision.

Sections of a rule-count sweep's report: conclusions, environment, warnings,
per-metric figures and cell tables, seed 000's pair tables with p-values, the cost per
rule and crossovers, latency percentiles, rate against frame size. Every other
experiment's report is the section its declaration names (fwbench.catalog), built on
report.cells.
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

from fwbench import catalog, owned
from fwbench.errors import FwbenchError
from fwbench.report import analysis as an
from fwbench.report import findings
from fwbench.report.cells import CellReport
from fwbench.report import figures as fg
from fwbench.metrics import Metric
from fwbench.report.data import RunData, SweepCell, load
from fwbench.report.formats import fmt, fmt_pct
from fwbench.results import RUN_FILES
from fwbench.report.document import (Block, Bullets, Details, FigureBlock, Heading, Para,
                                     Table, markdown, to_html)

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
    for s in sessions[:1]:
        if timing := s.get("testbed", {}).get("timing"):
            rows.append(["latency", timing["how"]])
    bias = env.get("engine_bias")
    kind = next((k for k in ("one_way_us", "round_trip_us") if (bias or {}).get(k)), None)
    if kind:
        ow = bias[kind]
        rows.append(["engine bias", f"{'one-way' if kind == 'one_way_us' else 'round-trip'} "
                                    f"p50 {ow.get('p50', 0):.1f} µs, min "
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
    if n := (data.meta.get("reruns") or {}).get("trials"):
        rows.append(["re-run", f"{n} trial{'s' if n != 1 else ''} run again after the "
                               "instrument made them invalid (the last try's record stands)"])
    return rows


def _cell_table(metric: Metric, frame: int, cells: dict, backends: list[str],
                rules: list[int]) -> Table:
    """Backends down, rule-set sizes across: each cell's median and, below it, its 95 %
    interval relative to the median, so ten rule counts fit a 1280-pixel page
    (cells.csv has the interval itself)."""
    cols = ["backend"] + [f"{n:,}" for n in rules]
    here = [s for c, s in cells.items() if c.frame_size == frame]
    usual = max(set(s.n for s in here), key=[s.n for s in here].count) if here else 0
    rows = []
    for b in backends:
        if b == "none":
            s = cells.get(SweepCell(backend="none", rules=0, frame_size=frame))
            if s:
                rows.append([b] + [_median_text(metric, s, usual)] * len(rules))
            continue
        got = [cells.get(SweepCell(backend=b, rules=n, frame_size=frame)) for n in rules]
        if any(got):
            rows.append([b] + [_median_text(metric, s, usual) if s else "-" for s in got])
    return Table(cols, rows, f"{metric.label} ({metric.unit}), {frame}-byte frames: median "
                             f"of {usual} trials per cell (n=... where fewer or more), below "
                             f"it the median's 95 % bootstrap interval relative to the median",
                 id=f"cells-{metric.key}-{frame}")


def _median_text(metric: Metric, s: an.CellSummary, usual: int = 0) -> str:
    n = "" if s.n == usual else f" n={s.n}"
    if not s.ci or not s.median:
        return f"{fmt(metric, s.median)}" + (f"\n{n.strip()}" if n else "")
    lo, hi = (100 * (x / s.median - 1) for x in (s.ci.low, s.ci.high))
    pct = lambda v: f"{v:+.1f}" if abs(v) < 10 else f"{v:+.0f}"  # noqa: E731
    return f"{fmt(metric, s.median)}\n[{pct(lo)}, {pct(hi)}] %{n}"


def pair_table_block(t: an.PairTable) -> Table:
    m = t.metric
    rows = [[t.a] + [fmt(m, c.a.mean) for c in t.columns],
            [t.b] + [fmt(m, c.b.mean) for c in t.columns],
            ["A / B - 1"] + [fmt_pct(c.change) for c in t.columns],
            ["p-value (t on the log ratio)"] + [an.format_p(c.test.p if c.test else None)
                                                for c in t.columns],
            ["p-value (Holm-adjusted)"] + [an.format_p(c.holm_p) for c in t.columns],
            ["seed's test: Welch, p"] + [an.format_p(c.welch.p if c.welch else None)
                                         for c in t.columns],
            ["seed's: Mann-Whitney, p"] + [an.format_p(c.mwu.p if c.mwu else None)
                                           for c in t.columns],
            ["Cliff's delta"] + ["-" if c.delta is None else f"{c.delta:+.2f}"
                                 for c in t.columns]]
    return Table(["", *[f"{n:,}" for n in t.rules]], rows,
                 f"{m.label} ({m.unit}), {t.frame_size}-byte frames: mean of "
                 f"{'/'.join(sorted({str(c.a.n) for c in t.columns} | {str(c.b.n) for c in t.columns}))} "
                 f"trials per cell, by rule-set size; A / B - 1 is {an.pairing(t.columns)} "
                 f"(intervals in the pairs table); the seed's tests decide nothing",
                 id=f"pair-{t.a}-{t.b}-{m.key}-{t.frame_size}", kind="pvalues",
                 row_classes=["", "", "", "pvalue", "holm", "pvalue", "pvalue", ""])


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
    """The report of a run that is not a rule-count sweep: its experiment's report
    section (its declaration's, fwbench.catalog: droprate's with seed 002's table in
    front and each treatment against its group's best, ...), or, for an experiment
    that declares none, each cell against its first factor's first level."""
    room = catalog.room(data.method)
    if room is None or room.report is None:
        return CellReport(data)
    return catalog.resolve(room.report)(data)


def times(x: float) -> str:
    """A factor in three digits or fewer: 0.32x, 1.13x, 52.4x, 165x."""
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x" if x < 100 else f"{x:.0f}x"


def _and(items) -> str:
    """a, b and c."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _where(hit: list[tuple[int, int, object]], cols: list[tuple[int, int, object]]) -> str:
    """Where a pair differs: (frame, rules, comparison) of the cells that do, among
    all the pair's cells, in few words."""
    if len(hit) == len(cols):
        return "at every rule count and frame size"
    hit = sorted(hit, key=lambda x: x[:2])
    frames = list(dict.fromkeys(f for f, _, _ in hit))
    by_rules: dict[tuple[int, ...], list[int]] = {}
    for f in frames:
        by_rules.setdefault(tuple(n for ff, n, _ in hit if ff == f), []).append(f)
    every = {f: [n for ff, n, _ in cols if ff == f] for f in frames}
    parts = []
    for ns, fs in by_rules.items():
        rules = ("every rule count" if all(list(ns) == every[f] for f in fs) else
                 "N = " + _and(f"{n:,}" for n in ns))
        parts.append(f"{rules} ({_and(map(str, fs))} B)")
    return "at " + "; ".join(parts)


class Report:
    """A rule-count sweep's report (backend x rules x frame size): everything it
    says, computed once and written three ways.

    blocks() opens with the title (blocks()[0]) and the run's line (blocks()[1]); a
    lead of the caller's, such as the findings table, goes in at index LEAD_AT, in
    front of the ranking at a glance."""

    LEAD_AT = 2

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
        head = self.head = data.headline()
        head_cells = self.cells[head.key] if head else {}
        bound_trials = an.generator_bound(data, an.ceilings(data, head_cells))
        self.bound = {c for c, _ in bound_trials}
        self.cost = an.cost_rows(data, bound_trials)
        self.crossings = an.crossovers(self.cost)
        self.warnings = an.warnings(data, bound_trials, head_cells)
        # (metric, pair table, what it concludes), in report order
        self.compared = [(m, t, an.conclusions(t, self.bound))
                         for m in self.metrics for t in self.tables[m.key]]
        # the headline against the best backend at each rule count, per frame size
        self.best = an.against_best(data, head, head_cells) if head else []
        frames = data.frame_sizes()
        # the glance shows the smallest frames (the firewall's hardest case) and the largest
        self.glance_frames = frames[:1] + frames[-1:] if len(frames) > 1 else frames
        self.colour = fg.colours(data.backends())
        self.marker = fg.markers(data.backends())
        self.figures: list[fg.Figure] = []

    def blocks(self) -> list[Block]:
        d = self.data
        out: list[Block] = [Heading(1, f"fwbench report: {d.name}")]
        desc = d.scenario.get("description", "").rstrip(".")
        out.append(Para(f"{desc + '. ' if desc else ''}Method {d.method}; "
                        f"backends {', '.join(d.backends())}; rule-set sizes "
                        f"{', '.join(f'{n:,}' for n in d.rule_counts())}; frame sizes "
                        f"{', '.join(map(str, d.frame_sizes()))} B.".strip()))
        out += self.glance()
        out += self.conclusions()
        out.append(Heading(2, "Environment", "environment"))
        out.append(Table(["", "value"], environment_rows(d), id="environment", kind="kv"))
        out.append(Heading(2, "Warnings", "warnings"))
        if self.warnings:
            out.append(Table(["kind", "cells", "detail"],
                             [[w.kind, w.cells, w.detail] for w in self.warnings],
                             id="warnings", kind="wrap"))
        else:
            out.append(Para("None: every trial verified and measured the firewall.", "note"))
        for m in self.metrics:
            out += self.metric_section(m)
        if self.head is not None:
            out += self.cost_section()
        lat = [fig for f in d.frame_sizes()
               if (fig := fg.latency_percentiles(d, f, self.colour))]
        if lat:
            out.append(Heading(2, "Latency percentiles", "latency"))
            out += [self._figure(x) for x in lat]
        if self.head is not None:
            fig = fg.rate_vs_frame(d, self.head, self.cells[self.head.key], self.colour,
                                   self.link_bps)
            if fig:
                out.append(Heading(2, "Rate against frame size", "frames"))
                out.append(self._figure(fig))
        out += self.seed000_tables()
        return out

    # -- the lead ----------------------------------------------------------------------

    def glance(self) -> list[Block]:
        """Time per packet of every backend against rule-set size, the ranking in words,
        and the heat map of the headline rate."""
        head, d = self.head, self.data
        if head is None or head.unit != "packets/s":
            return []
        cells = self.cells[head.key]
        out: list[Block] = [Heading(2, "Ranking at a glance", "glance")]
        f = self.glance_frames[0]
        order = an.ranking(d, head, cells, f)
        fig = fg.time_per_packet(d, head, f, cells, self.colour, self.marker, order)
        if fig:
            out.append(self._figure(fig))
        for f in self.glance_frames:
            if s := self._ranking_sentence(f):
                out.append(Para(s, "conclusion"))
        for f in self.glance_frames:
            fig = fg.heat_map(head, f, cells, an.ranking(d, head, cells, f), d.rule_counts())
            if fig:
                out.append(self._figure(fig))
        return out

    def _ranking_sentence(self, frame: int) -> str | None:
        """Best first at the largest rule count: each backend's time per packet and its
        factor over the best's."""
        head, d = self.head, self.data
        cells = self.cells[head.key]
        ab = next((x for x in self.best if x.frame_size == frame), None)
        if ab is None or not ab.best:
            return None
        n = max(ab.best)
        at = SweepCell(backend=ab.best[n], rules=n, frame_size=frame)
        top = cells[at]
        parts = []
        for b in an.ranking(d, head, cells, frame):
            s = cells.get(at._replace(backend=b))
            if s is None or s.median <= 0:
                continue
            c = ab.comparisons.get((b, n))
            what = "" if c is None else (
                f" ({times(top.median / s.median)}" +
                {"same": ", no difference shown", "undecided": ", undecided"}.get(
                    c.verdict(head), "") + ")")
            parts.append(f"{b} {1e9 / s.median:,.0f} ns{what}")
        none = cells.get(SweepCell(backend="none", rules=0, frame_size=frame))
        tail = (f"; without a firewall {1e9 / none.median:,.0f} ns" if none and none.median
                else "")
        return (f"At {n:,} rules, {frame}-byte frames, best first: " + ", ".join(parts) +
                f" per packet{tail}.")

    def conclusions(self) -> list[Block]:
        head = self.head
        out: list[Block] = [Heading(2, "Conclusions", "conclusions")]
        if head is None:
            return out
        claims = self._pair_sentences(head)
        if claims:
            out.append(Bullets(claims))
        elif self.pairs:
            out.append(Para("No difference between the backend pairs compared "
                            f"({'; '.join(f'{a} vs {b}' for a, b in self.pairs)}) "
                            f"is shown in {head.label} at any cell; see the table.", "note"))
        for f in self.glance_frames:
            if t := self._best_table(f):
                out.append(t)
        if rows := self._pair_rows(head, self.glance_frames[:1]):
            out.append(rows)
        out.append(Para(
            f"How these are decided: each comparison is a ratio, estimated and tested "
            f"on the log scale, paired by round where both cells ran in the same rounds "
            f"(the within-round ratio cancels drift that moves both), else Welch's t on "
            f"the logs; Holm's correction runs across the cells of each pair and metric "
            f"(against the best: across the backends at each rule count), at "
            f"{an.ALPHA}, and each interval is printed at the level its Holm step "
            f"tested, so it excludes 1 exactly where a difference is shown. Where none "
            f"is shown, the data neither show one nor rule one out. Seed 000's own "
            f"tests (Welch on values, Mann-Whitney U, Cliff's delta) are in "
            f"comparisons.csv and its tables below, and decide nothing. Each metric's "
            f"section has every frame size; the cost per rule is under Cost per "
            f"rule.", "note"))
        return out

    def _pair_sentences(self, m: Metric) -> list[str]:
        """One plain sentence per pair and direction that the corrected tests show, over
        every frame size, with the range of its factor."""
        out = []
        for a, b in self.pairs:
            tables = [t for mm, t, _ in self.compared if mm is m and (t.a, t.b) == (a, b)]
            cols = [(t.frame_size, n, c) for t in tables for n, c in zip(t.rules, t.columns)]
            for kind in ("better", "worse"):
                hit = [(f, n, c) for f, n, c in cols if c.verdict(m) == kind]
                if not hit:
                    continue
                word = an.verdict_words(hit[0][2], m, a).split(" ", 1)[1]
                facs = [an.factor(c, m)[0] for _, _, c in hit]
                ps = [c.holm_p for _, _, c in hit]
                span = (times(min(facs)) if times(min(facs)) == times(max(facs)) else
                        f"{times(min(facs))} to {times(max(facs))}")
                claim, what = ((f"is {word} than", "its time per packet is")
                               if m.unit == "packets/s" else
                               (f"has a {word} {m.label} than", "it is"))
                out.append(f"{a} {claim} {b} ({an.pair_kind(a, b)}) {_where(hit, cols)}: "
                           f"{what} {span} that of {b}, {an.p_bound(ps)} (t on the "
                           f"log ratio, Holm-adjusted).")
        return out

    def _best_table(self, frame: int) -> Table | None:
        head = self.head
        ab = next((x for x in self.best if x.frame_size == frame), None)
        if ab is None:
            return None
        cells = self.cells[head.key]
        rules = sorted(ab.best)
        rows = []
        for b in an.ranking(self.data, head, cells, frame):
            row = [b]
            for n in rules:
                s = cells.get(SweepCell(backend=b, rules=n, frame_size=frame))
                c = ab.comparisons.get((b, n))
                if s is None:
                    row.append("-")
                elif ab.best[n] == b:
                    row.append(f"best\n{1e9 / s.median:,.0f} ns")
                elif math.isnan(an.factor(c, head)[0]):   # a median rate of 0
                    row.append(f"-\n{fmt(head, s.median)} {head.unit}")
                else:
                    x, lo, hi = an.factor(c, head)
                    v = c.verdict(head)
                    mark = {"same": "≈ ", "undecided": "? ", "untestable": "? "}.get(v, "")
                    iv = (f"{times(lo)[:-1]}-{times(hi)[:-1]}" if lo is not None and
                          hi is not None else "-")
                    row.append(f"{mark}{times(x)}\n{iv}")
            rows.append(row)
        return Table(["backend", *[f"{n:,}" for n in rules]], rows,
                     f"Each backend against the best at each rule-set size, {head.label}, "
                     f"{frame}-byte frames: its time per packet over the best's, below "
                     f"it the interval at its Holm level; ≈: no difference shown, ?: "
                     f"undecided (an interval past {an.UNDECIDED:g}x) or untestable ({an.pairing(list(ab.comparisons.values()))}, "
                     f"Holm-adjusted, {an.ALPHA}); rows best first",
                     id=f"against-best-{frame}")

    def _pair_rows(self, m: Metric, frames: list[int] | None = None,
                   ident: str | None = None) -> Table | None:
        """The compact comparison table of metric m: pair | frame | rules | factor with
        its interval | how sure | p (Holm) | test | verdict, pairs grouped by what
        they answer."""
        rows, classes = [], []
        order = {k: i for i, (k, _) in enumerate(an.pair_kinds())}
        tables = [t for mm, t, _ in self.compared if mm is m
                  and (frames is None or t.frame_size in frames)]
        tables.sort(key=lambda t: (order.get(an.pair_kind(t.a, t.b), 99),
                                   self.pairs.index((t.a, t.b)), t.frame_size))
        last_kind = last_pair = None
        for t in tables:
            kind = an.pair_kind(t.a, t.b)
            for n, c in zip(t.rules, t.columns):
                x, lo, hi = an.factor(c, m)
                iv = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
                if math.isnan(x):   # B's median is 0 (no loss, say): no ratio
                    x, iv = "-", ""
                else:
                    x = f"{x:.2f}"
                v = an.verdict_words(c, m, t.a)
                if (t.a, n, t.frame_size) in self.bound or (t.b, n, t.frame_size) in self.bound:
                    v += " (generator-bound)"
                pair = f"{t.a} vs {t.b}"
                sure = f"±{c.how_sure * 100:.0f} %" if c.how_sure is not None else "-"
                test = ("paired" if c.test.paired else "unpaired") if c.test else "-"
                rows.append(["" if kind == last_kind else kind,
                             "" if pair == last_pair else pair, f"{t.frame_size}",
                             f"{n:,}", f"{x}{iv}", sure, an.format_p(c.holm_p), test, v])
                classes.append("verdict-diff" if c.verdict(m) in ("better", "worse") else "")
                last_kind, last_pair = kind, pair
        if not rows:
            return None
        what = ("A's time per packet over B's" if m.unit == "packets/s" else
                f"A's median {m.label} over B's")
        where = (f", {', '.join(map(str, frames))}-byte frames" if frames else "")
        return Table(["question", "pair A vs B", "frame B", "rules", "A / B [interval]",
                      "how sure", "p (Holm)", "test", "verdict"], rows,
                     f"{m.label}{where}, each pair at each rule-set size: A / B is {what} "
                     f"(geometric, on the log scale) with its interval at its Holm level "
                     f"(95 % or more), which excludes 1 exactly where a difference is "
                     f"shown; how sure: the interval's half-width; test: t on the log "
                     f"ratios paired by round, or unpaired (Welch on the logs); bold: a "
                     f"difference shown",
                     id=ident or f"pairs-{m.key}", kind="pairs", row_classes=classes)

    # -- the body ----------------------------------------------------------------------

    def metric_section(self, m: Metric) -> list[Block]:
        d = self.data
        out: list[Block] = [Heading(2, f"{m.label} ({m.unit})", f"metric-{m.key}")]
        for f in d.frame_sizes():
            fig = fg.metric_vs_rules(d, m, f, self.cells[m.key], self.colour, self.marker)
            if fig:
                out.append(self._figure(fig))
            out.append(_cell_table(m, f, self.cells[m.key], d.backends(), d.rule_counts()))
        if t := self._pair_rows(m, ident=f"pairs-{m.key}-all"):
            out.append(Heading(3, f"Pairs, {m.label}"))
            said = self._pair_sentences(m)
            out.append(Bullets(said) if said else Para(
                f"No difference in {m.label} between the pairs compared is shown at any "
                f"cell.", "note"))
            out.append(Details(f"Every pair at every rule count and frame size "
                               f"({len(t.rows)} rows)", [t]))
        return out

    def cost_section(self) -> list[Block]:
        d = self.data
        out: list[Block] = [Heading(2, "Cost per rule", "cost"), cost_table(self.cost),
                            Para(ABSOLUTE_NOTE, "note")]
        if costs := [s for r in self.cost if (s := an.cost_sentence(r))]:
            out.append(Bullets(costs))
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
        return out

    def seed000_tables(self) -> list[Block]:
        """Seed 000's table for each pair (headline metric): rule-set sizes across, the
        two treatments' means down, the p-values; with its sentences."""
        head = self.head
        picked = [(t, cl) for m, t, cl in self.compared if m is head]
        if not picked:
            return []
        out: list[Block] = [Heading(2, "Seed 000's tables", "seed000-tables"),
                            Para(f"{head.label}, each pair as seed 000 tabulates it; the "
                                 f"other metrics' are in comparisons.csv.", "note")]
        for t, claims in picked:
            out.append(Heading(3, f"{t.a} vs {t.b}, {t.frame_size} B"))
            out.append(pair_table_block(t))
            out += [Para(c.text) for c in claims]
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
                    comps.append([m.key, t.a, t.b, t.frame_size, n, c.a.n, c.b.n, c.a.mean,
                                  c.b.mean, c.a.median, c.b.median,
                                  *an.comparison_columns(c, m)])
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
        best = []
        for ab in self.best:
            for (b, n), c in sorted(ab.comparisons.items(), key=lambda x: (x[0][1], x[0][0])):
                x, lo, hi = an.factor(c, self.head)
                best.append([self.head.key, ab.frame_size, n, b, ab.best[n], c.a.median,
                             c.b.median, x, lo, hi, c.level, c.test.p if c.test else None,
                             c.holm_p, c.test.test if c.test else None,
                             c.verdict(self.head)])
        cross = [[c.a, c.b, c.frame_size, c.crossing.rules, c.crossing.interval.low,
                  c.crossing.interval.high, c.crossing.inside, c.cheaper_below]
                 for c in self.crossings]
        trials = [[r.trial, *self.data.cell(r), r.repetition, r.status] +
                  [m.value(r) for m in self.metrics] for r in self.data.records]
        return {
            "cells": (["metric", "backend", "rules", "frame_size", "n", "mean", "sd",
                       "median", "median_ci_low", "median_ci_high"], cells),
            "comparisons": (["metric", "a", "b", "frame_size", "rules", "n_a", "n_b",
                             "mean_a", "mean_b", "median_a", "median_b",
                             *an.COMPARISON_COLUMNS], comps),
            "cost_per_rule": (["backend", "frame_size", "b_ns_per_rule", "b_ci_low",
                               "b_ci_high", "a_ns", "a_ci_low", "a_ci_high", "r_squared",
                               "points", "generator_bound_excluded", "rules_min",
                               "rules_max", "reference", "b_over_reference",
                               "b_over_reference_low", "b_over_reference_high"], cost),
            "against_best": (["metric", "frame_size", "rules", "backend", "best", "median",
                              "median_best", "factor", "factor_ci_low", "factor_ci_high",
                              "ci_level", "p", "p_holm", "test", "verdict"], best),
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
        # The run's own directory is fwbench's; another must be new, empty or ours.
        if dest.resolve() != data.path.resolve():
            owned.ready(str(dest), f"the report of {data.path}", RUN_FILES)
        if not figdir.is_dir():
            owned.make(str(figdir), "the report's figures", ["*.svg"], mode=0o755)
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
    except owned.NotOurs as e:
        raise FwbenchError(f"report --out {e}; the report goes into a new or empty "
                           f"directory") from None
    except OSError as e:
        raise FwbenchError(f"cannot write the report to {dest}: {e.strerror}") from None
    return ReportFiles(page, md, csvs, len(rep.figures))
