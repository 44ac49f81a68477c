"""The report's figures, drawn with matplotlib into SVG and embedded as data URIs, so
report.html opens from disk with no network and no scripts.

- one figure per frame size and metric: the metric against rule-set size, a line per
  backend through the cell medians with the median's 95 % interval as a band and every
  trial as a dot (seed 000, Figures 6-19), log-scaled where the range needs it;
- latency percentile curves per frame size (p50 .. p99.9 on a "nines" axis);
- the headline rate against frame size with a link's line rate drawn in;
- the cost model per frame size: time per packet against rules with the fitted lines.
"""
from __future__ import annotations

import base64
import io
import math
import statistics
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fwbench.report.analysis import CellSummary, CostRow  # noqa: E402
from fwbench.metrics import Metric  # noqa: E402
from fwbench.report.data import PERCENTILES, RunData  # noqa: E402

plt.rcParams.update({"svg.hashsalt": "fwbench", "figure.dpi": 100, "font.size": 9,
                     "axes.grid": True, "grid.alpha": 0.3})

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#637939")


@dataclass(frozen=True)
class Figure:
    id: str
    title: str
    caption: str
    svg: bytes

    @property
    def data_uri(self) -> str:
        return f"data:image/svg+xml;base64,{base64.b64encode(self.svg).decode()}"


def colours(backends: list[str]) -> dict[str, str]:
    return {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(backends)}


def _svg(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def _finish(fig, ax, ident: str, title: str, xlabel: str, ylabel: str,
            caption: str, legend: bool = True) -> Figure:
    """Labels, title and legend, as every figure of the report has them; then SVG."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=7, ncols=2)
    return Figure(ident, title, caption, _svg(fig))


def _spread(values: list[float]) -> float:
    pos = [v for v in values if v > 0]
    return max(pos) / min(pos) if len(pos) >= 2 else 1.0


def metric_vs_rules(data: RunData, metric: Metric, frame: int,
                    cells: dict[tuple, CellSummary], colour: dict[str, str]) -> Figure | None:
    here = {c: s for c, s in cells.items() if c[2] == frame}
    if not here:
        return None
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    all_medians, xs_all = [], []
    for b in data.backends():
        mine = sorted((s for (bb, _, _), s in here.items() if bb == b), key=lambda s: s.cell[1])
        if not mine:
            continue
        all_medians += [s.median for s in mine]
        if b == "none":
            s = mine[0]
            ax.axhline(s.median, color="black", ls="--", lw=1, label="none (no firewall)")
            if s.ci:
                ax.axhspan(s.ci.low, s.ci.high, color="black", alpha=0.08)
            continue
        xs = [s.cell[1] for s in mine]
        xs_all += xs
        ax.plot(xs, [s.median for s in mine], marker="o", ms=3, lw=1.4, color=colour[b],
                label=b)
        if all(s.ci for s in mine):
            ax.fill_between(xs, [s.ci.low for s in mine], [s.ci.high for s in mine],
                            color=colour[b], alpha=0.18, lw=0)
        for s in mine:
            ax.plot([s.cell[1]] * s.n, s.values, ls="none", marker=".", ms=2.5,
                    color=colour[b], alpha=0.6)
    if xs_all and _spread(xs_all) >= 20:
        ax.set_xscale("log")
    log_y = metric.log_ok and _spread(all_medians) >= 30 and min(all_medians) > 0
    if log_y:
        ax.set_yscale("log")
    return _finish(fig, ax, f"fig-{metric.key}-{frame}", f"{metric.label}, {frame}-byte frames",
                   "rules in the rule set (N)", f"{metric.label} ({metric.unit})",
                   f"Median over repetitions per cell, band: bootstrap 95 % interval of the "
                   f"median, dots: single trials{'; log scale' if log_y else ''}.")


def _percentiles(rec, method: str) -> dict[str, float] | None:
    lat = rec.metrics.get("latency_us")
    if not isinstance(lat, dict):
        return None
    if method == "latency":
        lat = lat.get("idle") if isinstance(lat.get("idle"), dict) else None
    if not lat or any(not isinstance(lat.get(k), (int, float)) for k, _ in PERCENTILES):
        return None
    return {k: float(lat[k]) for k, _ in PERCENTILES}


def _nines(p: float) -> float:
    return -math.log10(1 - p / 100)


def latency_percentiles(data: RunData, frame: int, colour: dict[str, str]) -> Figure | None:
    """At the largest rule count each backend ran (and `none`): the median over trials
    of each percentile."""
    where = "at full throttle" if data.method == "maxrate" else "idle"
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    drawn = 0
    for b in data.backends():
        recs = [(n, r) for r in data.ok for bb, n, f in [data.cell(r)]
                if bb == b and f == frame]
        if not recs:
            continue
        top = max(n for n, _ in recs)
        curves = [p for n, r in recs if n == top and (p := _percentiles(r, data.method))]
        if not curves:
            continue
        ys = [statistics.median(c[k] for c in curves) for k, _ in PERCENTILES]
        label = "none (no firewall)" if b == "none" else f"{b}, N={top:,}"
        ax.plot([_nines(p) for _, p in PERCENTILES], ys, marker="o", ms=3,
                color="black" if b == "none" else colour[b],
                ls="--" if b == "none" else "-", label=label)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xticks([_nines(p) for _, p in PERCENTILES], [f"p{p:g}" for _, p in PERCENTILES])
    ax.set_yscale("log")
    return _finish(fig, ax, f"fig-latency-{frame}",
                   f"latency percentiles {where}, {frame}-byte frames",
                   "percentile", "one-way latency (µs)",
                   "Engine timestamp to XDP sink, against the scheduled send time; median "
                   "over trials of each percentile, at each backend's largest rule set.")


def line_rate_pps(link_bps: float, frame: int) -> float:
    """Frames per second a link carries at `frame` bytes (FCS included): each frame
    also takes 8 B of preamble and 12 B of inter-frame gap on the wire."""
    return link_bps / ((frame + 20) * 8)


def rate_vs_frame(data: RunData, metric: Metric, cells: dict[tuple, CellSummary],
                  colour: dict[str, str], link_bps: float) -> Figure | None:
    frames = data.frame_sizes()
    if len(frames) < 2:
        return None
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for b in data.backends():
        mine = [s for (bb, _, _), s in cells.items() if bb == b]
        if not mine:
            continue
        top = max(s.cell[1] for s in mine)
        line = sorted((s for s in mine if s.cell[1] == top), key=lambda s: s.cell[2])
        label = "none (no firewall)" if b == "none" else f"{b}, N={top:,}"
        ax.plot([s.cell[2] for s in line], [s.median for s in line], marker="o", ms=3,
                color="black" if b == "none" else colour[b],
                ls="--" if b == "none" else "-", label=label)
    fs = list(range(frames[0], frames[-1] + 1, 2))
    ax.plot(fs, [line_rate_pps(link_bps, f) for f in fs], color="grey", lw=2, alpha=0.6,
            label=f"line rate, {link_bps / 1e9:g} Gbit/s")
    ax.set_yscale("log")
    return _finish(fig, ax, "fig-rate-frame", f"{metric.label} against frame size",
                   "frame size incl. FCS (bytes)", f"{metric.label} ({metric.unit})",
                   f"Median per cell at each backend's largest rule set; the grey line is "
                   f"what a {link_bps / 1e9:g} Gbit/s Ethernet link can carry (preamble and "
                   f"inter-frame gap included).")


def cost_model(rows: list[CostRow], frame: int, colour: dict[str, str]) -> Figure | None:
    mine = [r for r in rows if r.frame_size == frame and r.fit is not None]
    if not mine:
        return None
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for r in mine:
        xs = [n for n, _ in r.points]
        ax.plot(xs, [1e9 / p for _, p in r.points], ls="none", marker=".", ms=3,
                color=colour[r.backend])
        lo, hi = r.fit.rules_min, r.fit.rules_max
        ax.plot([lo, hi], [r.fit.at(lo), r.fit.at(hi)], color=colour[r.backend], lw=1.2,
                label=f"{r.backend}: {r.fit.b_ns:.3f} ns/rule")
    ax.set_yscale("log")
    return _finish(fig, ax, f"fig-cost-{frame}",
                   f"cost model 1/pps = a + b·N, {frame}-byte frames",
                   "rules in the rule set (N)", "time per packet, 1/pps (ns)",
                   "Dots: single trials (generator-bound ones left out); lines: weighted "
                   "least-squares fit over the measured range; b is the cost of one rule.")


def cell_intervals(metric: Metric, cells: dict[tuple, CellSummary], order: list[tuple],
                   reference: dict[tuple, tuple], label) -> Figure | None:
    """Any experiment's cells, one row each in `order`: the median with its 95 %
    interval as a bar, every trial as a dot, a reference cell's median as a dotted
    line across its rows. Coloured by the first factor's level."""
    rows = [c for c in order if c in cells]
    if not rows:
        return None
    levels = list(dict.fromkeys(c[0] for c in rows))
    colour = colours(levels)
    fig, ax = plt.subplots(figsize=(7.0, max(2.0, 0.32 * len(rows) + 1.2)))
    ys = range(len(rows))[::-1]
    for y, c in zip(ys, rows):
        s = cells[c]
        if s.ci:
            ax.plot([s.ci.low, s.ci.high], [y, y], color=colour[c[0]], lw=3, alpha=0.35)
        ax.plot([s.median], [y], marker="o", ms=5, color=colour[c[0]], ls="none")
        ax.plot(s.values, [y] * s.n, ls="none", marker=".", ms=3, color="black", alpha=0.5)
        ref = reference.get(c)
        if ref in cells:
            ax.plot([cells[ref].median] * 2, [y - 0.4, y + 0.4], color="grey", lw=1, ls=":")
    ax.set_yticks(list(ys), [label(c) for c in rows])
    spread = _spread([cells[c].median for c in rows])
    log_x = metric.log_ok and spread >= 30
    if log_x:
        ax.set_xscale("log")
    return _finish(fig, ax, f"fig-{metric.key}-cells", metric.label, f"{metric.label} "
                   f"({metric.unit})", "", f"Per cell: the median over repetitions (circle), "
                   f"its bootstrap 95 % interval (bar), single trials (dots); the dotted "
                   f"line is the median of the cell it is compared with"
                   f"{'; log scale' if log_x else ''}.", legend=False)


def distributions(ident: str, title: str, samples: dict[str, list[float]],
                  unit: str = "µs") -> Figure | None:
    """The empirical distribution (CDF) of each labelled sample: every value kept."""
    drawn = {k: sorted(v) for k, v in samples.items() if v}
    if not drawn:
        return None
    colour = colours(list(drawn))
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for label, xs in drawn.items():
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", color=colour[label], lw=1.2, label=label)
    if _spread([x for v in drawn.values() for x in v]) >= 30:
        ax.set_xscale("log")
    return _finish(fig, ax, ident, title, f"round-trip time ({unit})",
                   "fraction of replies at or below",
                   "Every ping reply of the configuration's ok trials, pooled.")


def time_series(ident: str, title: str, series: dict[str, list[tuple[float, float]]],
                ylabel: str, caption: str) -> Figure | None:
    """One line per label: (seconds into the trial, value) points."""
    return points(ident, title, series, "seconds into the trial", ylabel, caption,
                  marker=".", ms=3)


def points(ident: str, title: str, series: dict[str, list[tuple[float, float]]],
           xlabel: str, ylabel: str, caption: str, log_x: bool = False,
           zero_line: bool = False, marker: str = "o", ms: float = 4) -> Figure | None:
    """One line with markers per label through its (x, y) points."""
    drawn = {k: v for k, v in series.items() if v}
    if not drawn:
        return None
    colour = colours(list(drawn))
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for label, pts in drawn.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, ms=ms, lw=1,
                color=colour[label], label=label)
    if log_x and all(p[0] > 0 for v in drawn.values() for p in v):
        ax.set_xscale("log")
    if zero_line:
        ax.axhline(0, color="#555", lw=0.8)
    return _finish(fig, ax, ident, title, xlabel, ylabel, caption)
