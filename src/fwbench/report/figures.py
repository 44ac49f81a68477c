"""The report's figures, drawn with matplotlib into SVG and embedded as data URIs, so
report.html opens from disk with no network and no scripts.

- the ranking at a glance: time per packet against rule-set size, one line per backend
  labelled at its end, and a backend x rule-set size heat map of the headline rate;
- one figure per frame size and metric: the metric against rule-set size, one panel per
  backend family (analysis.groups) on shared axes, a line per backend through the cell
  medians with the median's 95 % interval as a band and every trial as a dot (seed 000,
  Figures 6-19), log-scaled where the range needs it;
- latency percentile curves per frame size (p50 .. p99.9 on a "nines" axis);
- the headline rate against frame size with a link's line rate drawn in;
- the cost model per frame size: time per packet against rules with the fitted lines.

Sizes are chosen for a 1280-pixel-wide page: no figure is wider than 10.5 in (1,008 px
at 96 px per inch, shown unscaled in the page's 1,100 px column), text is at least 8 pt
(10.7 px) there, and text is SVG text (svg.fonttype none), not glyph outlines, so a
browser and a test can read its size.
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

from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator)

from fwbench.report.analysis import CellSummary, CostRow, groups  # noqa: E402
from fwbench.metrics import Metric, round_trips  # noqa: E402
from fwbench.report.data import PERCENTILES, RunData, SweepCell  # noqa: E402

plt.rcParams.update({"svg.hashsalt": "fwbench", "svg.fonttype": "none", "figure.dpi": 100,
                     "font.size": 9, "legend.fontsize": 8, "axes.grid": True,
                     "grid.alpha": 0.3})

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


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "*", "p")
WIDE = 10.5   # inches: the widest figure (see the module's docstring)


def colours(backends: list[str]) -> dict[str, str]:
    return {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(backends)}


def markers(backends: list[str]) -> dict[str, str]:
    """A marker per backend besides its colour, so lines stay apart in grey too."""
    return {b: MARKERS[i % len(MARKERS)] for i, b in enumerate(backends)}


def _plain(v: float, _pos=None) -> str:
    """A tick label without mathtext (10^3 sets its exponent at 6 pt): 1,000, 0.5."""
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def _log_axis(ax, which: str, values: list[float] | None = None) -> None:
    """Log scale on ax's `which` ("x" or "y") axis with plain labels: at `values` if
    given (the rule counts measured), else at 1-2-5 steps."""
    getattr(ax, f"set_{which}scale")("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    if values:
        axis.set_major_locator(FixedLocator(_spaced(ax, which, sorted(set(values)))))
    else:
        axis.set_major_locator(LogLocator(subs=_subs(ax, which)))
    axis.set_major_formatter(FuncFormatter(_plain))
    # no minor ticks: unlabelled, ungridded, and at four panels a figure their
    # placement was most of the time a report took to draw
    axis.set_minor_locator(NullLocator())


def _spaced(ax, which: str, values: list[float]) -> list[float]:
    """Of `values` (positive, ascending) those whose labels do not collide on ax's log
    axis: each kept one at least a label's length (at 9 pt) past the one before."""
    lo, hi = getattr(ax, f"get_{which}lim")()
    if len(values) < 2 or lo <= 0 or hi <= lo:
        return values
    box, fig = ax.get_position(), ax.figure
    length = box.width * fig.get_figwidth() if which == "x" else \
        box.height * fig.get_figheight()
    label = (max(len(f"{v:,.0f}") for v in values) * 0.08 + 0.15 if which == "x"
             else 0.25)   # inches a label needs along its axis
    gap = math.log10(hi / lo) * label / length
    # powers of ten first (1, 10, 1,000 read better than 50, 500), then the ends
    first = sorted(values, key=lambda v: (not math.log10(v).is_integer(),
                                          v not in (values[0], values[-1])))
    kept: list[float] = []
    for v in first:
        if all(abs(math.log10(v / k)) >= gap for k in kept):
            kept.append(v)
    return sorted(kept)


def _subs(ax, which: str) -> tuple[float, ...]:
    """Labels at 1-2-5 steps where the axis has room for them, else at each power of
    ten (log axis, its limits set)."""
    lo, hi = getattr(ax, f"get_{which}lim")()
    if lo <= 0 or hi <= lo:
        return (1.0, 2.0, 5.0)
    box, fig = ax.get_position(), ax.figure
    length = box.width * fig.get_figwidth() if which == "x" else \
        box.height * fig.get_figheight()
    room = length / (0.6 if which == "x" else 0.25)   # labels that fit, in inches each
    return (1.0, 2.0, 5.0) if 3 * math.log10(hi / lo) <= room else (1.0,)


def si(v: float) -> str:
    """A rate in three digits: 1.23M, 412k, 9.4k, 950."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            x = v / div
            return f"{x:.3g}{unit}"
    return f"{v:.3g}"


def svg(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def _finish(fig, ax, ident: str, title: str, xlabel: str, ylabel: str,
            caption: str, legend: bool | str = True) -> Figure:
    """Labels, title and legend, as every figure of the report has them; then SVG.
    legend="outside": one column right of the axes, for many lines."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend == "outside":
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    elif legend:
        ax.legend(ncols=2)
    return Figure(ident, title, caption, svg(fig))


def _spread(values: list[float]) -> float:
    pos = [v for v in values if v > 0]
    return max(pos) / min(pos) if len(pos) >= 2 else 1.0


def _facets(n: int, height: float = 3.0):
    """n panels on shared axes, two a row (one panel: the classic 7 x 4.2 in)."""
    if n == 1:
        fig, ax = plt.subplots(figsize=(7.0, 4.2))
        return fig, [ax]
    rows = math.ceil(n / 2)
    h = height * rows + 0.5
    fig, axs = plt.subplots(rows, 2, figsize=(WIDE, h), sharex=True, sharey=True,
                            squeeze=False)
    # fixed margins (in inches), not tight_layout, which draws the figure once more
    fig.subplots_adjust(left=0.95 / WIDE, right=1 - 0.15 / WIDE, top=1 - 0.6 / h,
                        bottom=0.55 / h, wspace=0.08, hspace=0.55 / height * 2)
    flat = list(axs.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    for ax in flat[:n]:   # every row keeps its rule counts: the rows are far apart
        ax.tick_params(labelbottom=True)
    return fig, flat[:n]


def metric_vs_rules(data: RunData, metric: Metric, frame: int,
                    cells: dict[tuple, CellSummary], colour: dict[str, str],
                    marker: dict[str, str] | None = None) -> Figure | None:
    """One panel per backend family on shared axes, `none` as a dashed line in each."""
    here = {c: s for c, s in cells.items() if c.frame_size == frame}
    if not here:
        return None
    marker = marker or markers(data.backends())
    present = sorted({c.backend for c in here})
    panels = groups([b for b in data.backends() if b in present])
    if not panels:   # only `none`
        panels = [("", [])]
    fig, axes = _facets(len(panels))
    base = here.get(SweepCell(backend="none", rules=0, frame_size=frame))
    all_medians, xs_all = ([base.median] if base else []), []
    for ax, (title, members) in zip(axes, panels):
        if base:
            ax.axhline(base.median, color="black", ls="--", lw=1, label="none (no firewall)")
            if base.ci:
                ax.axhspan(base.ci.low, base.ci.high, color="black", alpha=0.08)
        for b in members:
            mine = sorted((s for c, s in here.items() if c.backend == b),
                          key=lambda s: s.cell.rules)
            if not mine:
                continue
            all_medians += [s.median for s in mine]
            xs = [s.cell.rules for s in mine]
            xs_all += xs
            ax.plot(xs, [s.median for s in mine], marker=marker[b], ms=4, lw=1.4,
                    color=colour[b], label=b)
            if all(s.ci for s in mine):
                ax.fill_between(xs, [s.ci.low for s in mine], [s.ci.high for s in mine],
                                color=colour[b], alpha=0.18, lw=0)
            ax.plot([s.cell.rules for s in mine for _ in s.values],
                    [v for s in mine for v in s.values], ls="none", marker=".", ms=2.5,
                    color=colour[b], alpha=0.6)
        if title:
            _panel_title(ax, title)
        ax.legend(loc="best")
    log_x = bool(xs_all) and _spread(xs_all) >= 20
    log_y = metric.log_ok and _spread(all_medians) >= 30 and min(all_medians) > 0
    for ax in axes:
        if log_x:
            _log_axis(ax, "x", xs_all)
        if log_y:
            _log_axis(ax, "y")
    title = f"{metric.label}, {frame}-byte frames"
    xlabel, ylabel = "rules in the rule set (N)", f"{metric.label} ({metric.unit})"
    caption = (f"Median over repetitions per cell, band: bootstrap 95 % interval of the "
               f"median, dots: single trials; dashed: no firewall"
               f"{'; log scale' if log_y else ''}.")
    ident = f"fig-{metric.key}-{frame}"
    if len(axes) == 1:
        return _finish(fig, axes[0], ident, title, xlabel, ylabel, caption, legend=False)
    return _finish_facets(fig, axes, ident, title, xlabel, ylabel,
                          caption + " One panel per backend family, on shared axes.")


def _panel_title(ax, text: str) -> None:
    """A panel's title at a fixed place: set_title re-measures every axis to place it,
    which was a third of a faceted figure's drawing time."""
    ax.text(0.5, 1.02, text, transform=ax.transAxes, ha="center", va="bottom",
            fontsize=10)


def _finish_facets(fig, axes, ident: str, title: str, xlabel: str, ylabel: str,
                   caption: str) -> Figure:
    for i, ax in enumerate(axes):
        if i + 2 >= len(axes):   # the lowest panel of its column
            ax.set_xlabel(xlabel)
        if i % 2 == 0:
            ax.set_ylabel(ylabel)
    fig.suptitle(title)
    return Figure(ident, title, caption, svg(fig))


def time_per_packet(data: RunData, metric: Metric, frame: int,
                    cells: dict[tuple, CellSummary], colour: dict[str, str],
                    marker: dict[str, str], order: list[str]) -> Figure | None:
    """The ranking at a glance: 1e9 / median rate against rule-set size, log-log, each
    backend's line labelled at its right end with its time at the largest rule set
    (labels pushed apart so none overlap), `none` dashed."""
    here = {c: s for c, s in cells.items() if c.frame_size == frame and s.median > 0}
    if not here:
        return None
    fig, ax = plt.subplots(figsize=(9.0, 5.2))
    fig.subplots_adjust(left=0.09, right=0.72, top=0.93, bottom=0.11)
    ends, xs_all, ys_all = [], [], []
    for b in order:
        mine = sorted((s for c, s in here.items() if c.backend == b),
                      key=lambda s: s.cell.rules)
        if not mine:
            continue
        xs, ys = [s.cell.rules for s in mine], [1e9 / s.median for s in mine]
        xs_all += xs
        ys_all += ys
        ax.plot(xs, ys, marker=marker[b], ms=5, lw=1.6, color=colour[b])
        ends.append((f"{b}  {ys[-1]:,.0f} ns", xs[-1], ys[-1], colour[b]))
    base = here.get(SweepCell(backend="none", rules=0, frame_size=frame))
    if base:
        y = 1e9 / base.median
        ys_all.append(y)
        ax.axhline(y, color="black", ls="--", lw=1)
    if not ends:
        plt.close(fig)
        return None
    if _spread(xs_all) >= 20:
        _log_axis(ax, "x", xs_all)
    ax.set_yscale("log")
    ax.set_ylim(min(ys_all) / 1.3, max(ys_all) * 1.3)
    _log_axis(ax, "y")
    if base:
        ends.append((f"none (no firewall)  {1e9 / base.median:,.0f} ns", max(xs_all),
                     1e9 / base.median, "black"))
    _end_labels(ax, ends)
    title = f"time per packet, {frame}-byte frames"
    ax.set_xlabel("rules in the rule set (N)")
    ax.set_ylabel("time per packet, 1e9 / packets/s (ns)")
    ax.set_title(title)
    return Figure(f"fig-glance-{frame}", title,
                  f"1e9 / the median {metric.label} per cell: the whole path's time per "
                  f"packet (sender, forwarding, firewall), lower is better; the dashed "
                  f"line is the path without a firewall. Labels give each backend's time "
                  f"at its largest rule set; log scales. The firewall's own CPU time per "
                  f"packet, where the run recorded it, has its section below.", svg(fig))


def _end_labels(ax, ends: list[tuple[str, float, float, str]], size: float = 9) -> None:
    """Each (text, x, y, colour) right of the axes at the height of its line's end,
    moved apart by one text line where they would overlap, joined to the end by a
    thin line."""
    fig = ax.figure
    px = ax.transData.transform
    line = size * fig.dpi / 72 * 1.35
    items = sorted(ends, key=lambda e: px((e[1], e[2]))[1])
    ys = [px((x, y))[1] for _, x, y, _ in items]
    for i in range(1, len(ys)):
        ys[i] = max(ys[i], ys[i - 1] + line)
    top = ax.bbox.y1
    if ys and ys[-1] > top:
        ys[-1] = top
        for i in range(len(ys) - 2, -1, -1):
            ys[i] = min(ys[i], ys[i + 1] - line)
    # In figure fractions: SVG is drawn at 72 dpi, not the figure's, so pixels move.
    w, h = fig.bbox.width, fig.bbox.height
    x_text = (ax.bbox.x1 + 12) / w
    for (text, x, y, c), yt in zip(items, ys):
        ax.annotate(text, xy=(x, y), xycoords="data", xytext=(x_text, yt / h),
                    textcoords="figure fraction", va="center", ha="left", color=c,
                    fontsize=size, annotation_clip=False,
                    arrowprops=dict(arrowstyle="-", color=c, lw=0.6, alpha=0.6,
                                    shrinkA=0, shrinkB=3))


def heat_map(metric: Metric, frame: int, cells: dict[tuple, CellSummary],
             order: list[str], rules: list[int]) -> Figure | None:
    """Backend (rows, in `order`) x rule-set size: each cell's median rate, coloured
    and labelled by its fraction of the no-firewall rate (absolute rate when the run
    has no `none`)."""
    here = {(c.backend, c.rules): s for c, s in cells.items() if c.frame_size == frame}
    rows = [b for b in order if any((b, n) in here for n in rules)]
    if not rows or not rules:
        return None
    base = here.get(("none", 0))
    ref = base.median if base else max(here[(b, n)].median for b in rows
                                       for n in rules if (b, n) in here)
    fig, ax = plt.subplots(figsize=(min(WIDE, 3.6 + 0.8 * len(rules)),
                                    1.1 + 0.42 * len(rows)))
    grid = [[here[(b, n)].median / ref if (b, n) in here else math.nan
             for n in rules] for b in rows]
    low = min(min(v for r in grid for v in r if v == v), 0.5)
    norm = LogNorm(vmin=max(low, 1e-4), vmax=max(1.0, max(v for r in grid for v in r
                                                          if v == v)))
    im = ax.imshow(grid, cmap="viridis", norm=norm, aspect="auto")
    for i, b in enumerate(rows):
        for j, n in enumerate(rules):
            s = here.get((b, n))
            if s is None:
                ax.text(j, i, "-", ha="center", va="center", fontsize=9)
                continue
            frac = s.median / ref
            dark = norm(frac) < 0.55
            ax.text(j, i, f"{si(s.median)}\n{100 * frac:.0f} %" if base else si(s.median),
                    ha="center", va="center", fontsize=9,
                    color="white" if dark else "black")
    ax.set_xticks(range(len(rules)), [f"{n:,}" for n in rules])
    ax.set_yticks(range(len(rows)), rows)
    ax.grid(False)
    ax.set_xlabel("rules in the rule set (N)")
    bar = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.02)
    bar.set_label("fraction of the no-firewall rate" if base else "fraction of the best")
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{100 * v:g} %"))
    bar.ax.yaxis.set_minor_formatter(NullFormatter())
    title = f"{metric.label}, {frame}-byte frames"
    ax.set_title(title)
    what = ("and below it as a percentage of the no-firewall rate (`none`, "
            f"{base.median:,.0f} {metric.unit}), which also sets the colour" if base else
            "coloured by its fraction of the best cell (the run has no `none`)")
    return Figure(f"fig-heat-{frame}", f"{title}, heat map",
                  f"Median {metric.label} per cell ({metric.unit}, k = thousand, "
                  f"M = million) {what}; rows best first at the largest rule set.",
                  svg(fig))


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
    kind, back = (("round-trip", " and back to the client's") if round_trips(data.ok)
                  else ("one-way", ""))
    marker = markers(data.backends())
    fig, ax = plt.subplots(figsize=(9.0, 4.6))
    drawn = 0
    for b in data.backends():
        recs = [(c.rules, r) for r in data.ok for c in [data.cell(r)]
                if c.backend == b and c.frame_size == frame]
        if not recs:
            continue
        top = max(n for n, _ in recs)
        curves = [p for n, r in recs if n == top and (p := _percentiles(r, data.method))]
        if not curves:
            continue
        ys = [statistics.median(c[k] for c in curves) for k, _ in PERCENTILES]
        label = "none (no firewall)" if b == "none" else f"{b}, N={top:,}"
        ax.plot([_nines(p) for _, p in PERCENTILES], ys, marker=marker[b], ms=4,
                color="black" if b == "none" else colour[b],
                ls="--" if b == "none" else "-", label=label)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xticks([_nines(p) for _, p in PERCENTILES], [f"p{p:g}" for _, p in PERCENTILES])
    _log_axis(ax, "y")
    return _finish(fig, ax, f"fig-latency-{frame}",
                   f"latency percentiles {where}, {frame}-byte frames",
                   "percentile", f"{kind} latency (µs)",
                   f"Engine timestamp to XDP sink{back}, against the scheduled send time; median "
                   "over trials of each percentile, at each backend's largest rule set.",
                   legend="outside")


def line_rate_pps(link_bps: float, frame: int) -> float:
    """Frames per second a link carries at `frame` bytes (FCS included): each frame
    also takes 8 B of preamble and 12 B of inter-frame gap on the wire."""
    return link_bps / ((frame + 20) * 8)


def rate_vs_frame(data: RunData, metric: Metric, cells: dict[tuple, CellSummary],
                  colour: dict[str, str], link_bps: float) -> Figure | None:
    frames = data.frame_sizes()
    if len(frames) < 2:
        return None
    marker = markers(data.backends())
    fig, ax = plt.subplots(figsize=(9.0, 4.6))
    for b in data.backends():
        mine = [s for c, s in cells.items() if c.backend == b]
        if not mine:
            continue
        top = max(s.cell.rules for s in mine)
        line = sorted((s for s in mine if s.cell.rules == top),
                      key=lambda s: s.cell.frame_size)
        label = "none (no firewall)" if b == "none" else f"{b}, N={top:,}"
        ax.plot([s.cell.frame_size for s in line], [s.median for s in line], marker=marker[b], ms=4,
                color="black" if b == "none" else colour[b],
                ls="--" if b == "none" else "-", label=label)
    fs = list(range(frames[0], frames[-1] + 1, 2))
    ax.plot(fs, [line_rate_pps(link_bps, f) for f in fs], color="grey", lw=2, alpha=0.6,
            label=f"line rate, {link_bps / 1e9:g} Gbit/s")
    _log_axis(ax, "y")
    return _finish(fig, ax, "fig-rate-frame", f"{metric.label} against frame size",
                   "frame size incl. FCS (bytes)", f"{metric.label} ({metric.unit})",
                   f"Median per cell at each backend's largest rule set; the grey line is "
                   f"what a {link_bps / 1e9:g} Gbit/s Ethernet link can carry (preamble and "
                   f"inter-frame gap included).", legend="outside")


def cost_model(rows: list[CostRow], frame: int, colour: dict[str, str]) -> Figure | None:
    """Time per packet against rules with each backend's fitted line, one panel per
    backend family on shared axes."""
    mine = {r.backend: r for r in rows if r.frame_size == frame and r.fit is not None}
    if not mine:
        return None
    panels = groups(list(mine))
    fig, axes = _facets(len(panels))
    for ax, (title, members) in zip(axes, panels):
        for b in members:
            r = mine[b]
            xs = [n for n, _ in r.points]
            ax.plot(xs, [1e9 / p for _, p in r.points], ls="none", marker=".", ms=3,
                    color=colour[b])
            lo, hi = r.fit.rules_min, r.fit.rules_max
            ax.plot([lo, hi], [r.fit.at(lo), r.fit.at(hi)], color=colour[b], lw=1.2,
                    label=f"{b}: {r.fit.b_ns:.3f} ns/rule")
        if len(axes) > 1:
            _panel_title(ax, title)
        ax.legend(loc="upper left")
    for ax in axes:
        _log_axis(ax, "y")
    title = f"cost model 1/pps = a + b·N, {frame}-byte frames"
    xlabel, ylabel = "rules in the rule set (N)", "time per packet, 1/pps (ns)"
    caption = ("Dots: single trials (generator-bound ones left out); lines: weighted "
               "least-squares fit over the measured range; b is the cost of one rule.")
    if len(axes) == 1:
        return _finish(fig, axes[0], f"fig-cost-{frame}", title, xlabel, ylabel, caption,
                       legend=False)
    return _finish_facets(fig, axes, f"fig-cost-{frame}", title, xlabel, ylabel,
                          caption + " One panel per backend family, on shared axes.")


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
        _log_axis(ax, "x")
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
        _log_axis(ax, "x")
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
           zero_line: bool = False, marker: str = "o", ms: float = 4,
           log_y: bool = False, legend: bool | str = True) -> Figure | None:
    """One line with markers per label through its (x, y) points; `legend` as
    _finish takes it."""
    drawn = {k: v for k, v in series.items() if v}
    if not drawn:
        return None
    colour = colours(list(drawn))
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for label, pts in drawn.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, ms=ms, lw=1,
                color=colour[label], label=label)
    if log_x and all(p[0] > 0 for v in drawn.values() for p in v):
        _log_axis(ax, "x")
    if log_y and all(p[1] > 0 for v in drawn.values() for p in v):
        _log_axis(ax, "y")
    if zero_line:
        ax.axhline(0, color="#555", lw=0.8)
    return _finish(fig, ax, ident, title, xlabel, ylabel, caption, legend)
