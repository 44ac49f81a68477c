"""`fwbench report` of an update run: when each update took effect, with
intervals, per backend, size, kind and mechanism; what the kept flow saw (loss,
longest gap, latency peak, recovery); update latency against rule-set size with
its cost per entry as a fit; the kept flow's time series around an update.
Then every metric as any experiment has it (report.cells).
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict

import matplotlib.pyplot as plt
from scipy import stats as sps

from fwbench import stats
from fwbench.report import figures as fg
from fwbench.report.cells import CellReport
from fwbench.report.data import RunData
from fwbench.report.document import Block, FigureBlock, Heading, Para, Table
from fwbench.results import TrialRecord
from fwbench.experiments.update.experiment import FACTORS

Key = tuple[str, int, str, str]     # backend, rules, kind, mechanism


def cells(data: RunData) -> dict[Key, list[TrialRecord]]:
    out: dict[Key, list[TrialRecord]] = defaultdict(list)
    for r in data.records:
        if r.status == "ok":
            out[r.cell(FACTORS)].append(r)
    return dict(out)


def mean_interval(xs: list[float], level: float = 0.95) -> tuple[float, float, float] | None:
    """Mean and its t interval; None for no values, the mean twice for one."""
    if not xs:
        return None
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, m, m
    half = sps.t.ppf(0.5 + level / 2, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}" if abs(v) >= 1 else f"{v:.2f}"


def _iv(t: tuple[float, float, float] | None, n: int) -> str:
    if t is None:
        return "-"
    m, lo, hi = t
    return f"{_ms(m)} [{_ms(lo)}, {_ms(hi)}]" if n > 1 else f"{_ms(m)} (one trial)"


def _order(k: Key) -> tuple:
    return (k[2], k[1], k[0], k[3])


def latency_table(cs: dict[Key, list[TrialRecord]]) -> Table:
    rows = []
    for k in sorted(cs, key=_order):
        recs = cs[k]
        lat = [1e3 * r.metrics["update_s"] for r in recs]
        rows.append([
            k[2], f"{k[1]:,}", k[0], k[3] + (" (atomic)" if recs[0].conditions.get("atomic")
                                             else ""),
            _iv(mean_interval(lat), len(lat)),
            f"±{_ms(1e3 * statistics.fmean(r.metrics['update_resolution_s'] for r in recs))}",
            _ms(statistics.median(1e3 * r.metrics["command_s"] for r in recs)),
            _ms(statistics.median(1e3 * r.metrics["effect_minus_exit_s"] for r in recs)),
            str(len(recs))])
    return Table(["kind", "rules", "backend", "mechanism", "in effect ms [95 %]",
                  "resolution ms", "command ms", "effect - exit ms", "n"], rows,
                 "In effect: from the update's first command starting to the probe flow "
                 "starting or stopping (mean over trials, t interval); resolution: each "
                 "trial's own uncertainty (mean), half the span its probe packets bound "
                 "the change to: from the schedule of the last packet the old rules "
                 "decided to the arrival of the first the new ones did; command: the "
                 "commands' wall time (median); effect - exit: negative when the kernel "
                 "held the new rule set before the last command ended", id="update-latency")


def kept_table(cs: dict[Key, list[TrialRecord]]) -> Table:
    rows = []
    for k in sorted(cs, key=_order):
        kept = [r.metrics["kept"] for r in cs[k]]
        lost = [m["lost"] for m in kept]
        rows.append([
            k[2], f"{k[1]:,}", k[0], k[3],
            f"{statistics.fmean(lost):,.1f} (max {max(lost):,})",
            f"{statistics.median(1e3 * m['max_gap_s'] for m in kept):,.2f} "
            f"(max {max(1e3 * m['max_gap_s'] for m in kept):,.2f})",
            _ms(statistics.median(m["baseline_latency_us"] or 0 for m in kept)),
            _ms(statistics.median(m["peak_latency_us"] or 0 for m in kept)),
            _ms(statistics.median(r.metrics.get("kept_send_lag_max_us", 0) for r in cs[k])),
            _ms(statistics.median(1e3 * m["recovery_s"] for m in kept))])
    return Table(["kind", "rules", "backend", "mechanism", "lost (mean)", "longest gap ms",
                  "baseline µs", "peak µs", "sender lag µs", "recovery ms"], rows,
                 "The kept flow, whose rule no update touches, from before the update to "
                 "after_s past its last command: packets lost; the longest time between "
                 "two arrivals (median and largest over trials); one-way latency before "
                 "the update (median of slot means) and its peak from the update on; how "
                 "long after the update began its slots last showed loss or latency above "
                 "twice the baseline's 99th percentile of slot maxima. Sender lag: the "
                 "most the sender fell behind its schedule in the trial (median over "
                 "trials); a peak no larger may be the sender's, not the firewall's",
                 id="update-kept")


def zero_loss(cs: dict[Key, list[TrialRecord]]) -> Para:
    """For which backends and mechanisms the kept flow lost nothing in any trial."""
    by: dict[tuple[str, str], list[int]] = defaultdict(list)
    atomic: dict[tuple[str, str], bool] = {}
    for (b, _, _, mech), recs in cs.items():
        by[(b, mech)] += [r.metrics["kept"]["lost"] for r in recs]
        atomic[(b, mech)] = bool(recs[0].conditions.get("atomic"))
    clean = sorted(k for k, v in by.items() if not any(v))
    lossy = sorted(k for k, v in by.items() if any(v))
    text = ("The kept flow lost no packet in any trial of "
            + (", ".join(f"{b} by {m}" for b, m in clean) or "no backend and mechanism")
            + ". ")
    if lossy:
        text += ("It lost packets with " + ", ".join(
            f"{b} by {m} ({sum(by[(b, m)]):,} in {sum(1 for x in by[(b, m)] if x)} of "
            f"{len(by[(b, m)])} trials{', atomic' if atomic[(b, m)] else ''})"
            for b, m in lossy) + ".")
    else:
        text += "No mechanism of any backend lost any."
    return Para(text)


def _mb(v: float) -> str:
    return f"{v / 2**20:,.2f}"


def memory_tables(cs: dict[Key, list[TrialRecord]]) -> list[Table]:
    """What a loaded rule set holds per backend and size, and the extra an update
    needed at its peak."""
    held: dict[tuple[str, int], list[int]] = defaultdict(list)
    maps: dict[tuple[str, int], list[int]] = defaultdict(list)
    for (b, n, _, _), recs in cs.items():
        for r in recs:
            if "memory" in r.metrics:
                held[(b, n)].append(r.metrics["memory"]["held_bytes"])
                if "bpf_maps" in r.metrics["memory"].get("held", {}):
                    maps[(b, n)].append(r.metrics["memory"]["held"]["bpf_maps"])
    rows = []
    for (b, n), xs in sorted(held.items()):
        m, lo, hi = mean_interval([float(x) for x in xs])
        rows.append([b, f"{n:,}", f"{_mb(m)} [{_mb(lo)}, {_mb(hi)}]", f"{m / n:,.0f}",
                     _mb(statistics.median(maps[(b, n)])) if maps[(b, n)] else "-",
                     str(len(xs))])
    if not rows:
        return []
    out = [Table(["backend", "rules", "MiB held [95 %]", "bytes per entry",
                  "BPF maps MiB", "n"], rows,
                 "Kernel memory (slab + vmalloc + per-CPU, /proc/meminfo) after loading "
                 "the rule set before each update, less the same reading with every "
                 "firewall empty; the machine's own activity moves these readings, hence "
                 "the intervals. BPF maps: what the kernel charges for the eBPF filter's "
                 "maps (their memlock)", id="update-memory")]
    peaks = []
    for k in sorted(cs, key=_order):
        xs = [r.metrics["memory"]["update_peak_bytes"] for r in cs[k]
              if "memory" in r.metrics]
        if xs:
            peaks.append([k[2], f"{k[1]:,}", k[0], k[3], _mb(statistics.median(xs)),
                          _mb(max(xs))])
    out.append(Table(["kind", "rules", "backend", "mechanism", "peak extra MiB (median)",
                      "largest"], peaks,
                     "The most kernel memory above what the loaded rule set held, sampled "
                     "every 2 ms while the update's commands ran", id="update-memory-peak"))
    return out


def cost_table(cs: dict[Key, list[TrialRecord]]) -> Table | None:
    """Update latency against size per (backend, kind, mechanism): a + b N, b per
    1,000 entries, with its interval (stats.fit_cost on the rate 1/t, so that its
    time per event is the update's)."""
    groups: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
    for (b, n, kind, mech), recs in cs.items():
        groups[(kind, b, mech)] += [(n, 1 / r.metrics["update_s"]) for r in recs
                                    if r.metrics["update_s"] > 0]
    rows = []
    for (kind, b, mech), pts in sorted(groups.items()):
        fit = stats.fit_cost(pts)
        if fit is None:
            continue
        per_k = 1e3 * fit.b_ns / 1e6          # ms per 1,000 entries
        iv = fit.b_interval
        rows.append([kind, b, mech, f"{per_k:,.3f} [{1e3 * iv.low / 1e6:,.3f}, "
                     f"{1e3 * iv.high / 1e6:,.3f}]", _ms(fit.a_ns / 1e6),
                     f"{fit.r_squared:.2f}", f"{fit.rules_min:,}..{fit.rules_max:,}"])
    if not rows:
        return None
    return Table(["kind", "backend", "mechanism", "ms per 1,000 entries [95 %]",
                  "fixed ms", "R²", "rules"], rows,
                 "Update latency = fixed + per-entry cost x rules, weighted least squares "
                 "over every ok trial", id="update-cost")


def latency_figure(cs: dict[Key, list[TrialRecord]], kind: str) -> fg.Figure | None:
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (b, n, k, mech), recs in sorted(cs.items(), key=lambda kv: kv[0][1]):
        if k == kind:
            series[f"{b} by {mech}"].append(
                (n, statistics.fmean(1e3 * r.metrics["update_s"] for r in recs)))
    if not any(len(v) > 1 for v in series.values()):
        return None
    return fg.points(f"fig-update-latency-{kind}", f"{kind}: time until in effect",
                     dict(series), "entries before the update", "in effect after (ms)",
                     "Mean over trials per size; log scales.", log_x=True, log_y=True,
                     legend="outside")


def series_figure(cs: dict[Key, list[TrialRecord]], kind: str) -> fg.Figure | None:
    """At the largest size of `kind`: the kept flow's latency (slot maximum) and
    the share of it delivered, around the update, in the trial whose update latency
    is the median of its cell."""
    here = {k: v for k, v in cs.items() if k[2] == kind}
    if not here:
        return None
    top = max(k[1] for k in here)
    chosen = {}
    for k, recs in sorted(here.items()):
        if k[1] == top:
            recs = sorted(recs, key=lambda r: r.metrics["update_s"])
            chosen[f"{k[0]} by {k[3]}"] = recs[len(recs) // 2]
    fig, (lat_ax, got_ax) = plt.subplots(2, 1, figsize=(fg.WIDE, 6.4), sharex=True)
    colour = fg.colours(list(chosen))
    for label, r in chosen.items():
        s = r.metrics["series"]
        xs = [s["t0_s"] + (i + 0.5) * s["slot_s"] for i in range(len(s["kept_due"]))]
        lat_ax.plot(xs, [v or math.nan for v in s["kept_max_us"]], lw=0.9,
                    color=colour[label], label=label)
        got_ax.plot(xs, [g / d if d else math.nan
                         for g, d in zip(s["kept_received"], s["kept_due"])],
                    lw=0.9, color=colour[label])
    for ax in (lat_ax, got_ax):
        ax.axvline(0, color="#555", lw=0.8, ls="--")
    lat_ax.set_yscale("log")
    lat_ax.set_ylabel("latency, slot max (µs)")
    got_ax.set_ylabel("delivered / due")
    got_ax.set_xlabel("seconds from the update's start")
    lat_ax.set_title(f"{kind} at {top:,} entries: the kept flow around the update")
    lat_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fg.Figure(f"fig-update-series-{kind}", f"{kind} at {top:,} entries",
                     "The kept flow in the trial whose update latency is its cell's "
                     "median, per slot of scheduled send time (merged to at most 2,000 "
                     "slots); the dashed line is the first command's start.",
                     fg.svg(fig))


def _figure(fig: fg.Figure, figs: list[fg.Figure]) -> FigureBlock:
    figs.append(fig)
    return FigureBlock(fig, f"figures/{fig.id}.svg")


def lead(data: RunData) -> tuple[list[Block], list[fg.Figure]]:
    cs = cells(data)
    out: list[Block] = [Heading(2, "Rule-set updates under traffic", "updates")]
    figs: list[fg.Figure] = []
    if not cs:
        out.append(Para("No trial of this run is ok: nothing to say about updates.",
                        "note"))
        return out, figs
    out.append(Para(
        "Each trial loads a rule set, proves it, then changes it under traffic. Two "
        "flows run throughout: the kept flow, whose rule no update touches (the chain's "
        "first entry, or a set element), and the probe flow, which the update lets "
        "through or stops; the moment the probe flow changed is when the kernel held "
        "the new rule set, timed from the packets' own schedule (one clock with the "
        "commands). After the traffic, the kernel's rule set is compared with the new "
        "rendering entry by entry.", "note"))
    out += [Heading(3, "Time until in effect", "update-latency"), latency_table(cs)]
    if (cost := cost_table(cs)) is not None:
        out.append(cost)
    kinds = sorted({k[2] for k in cs})
    for kind in kinds:
        if (fig := latency_figure(cs, kind)) is not None:
            out.append(_figure(fig, figs))
    out += [Heading(3, "What the kept flow saw", "update-kept"), zero_loss(cs),
            kept_table(cs)]
    for kind in kinds:
        if (fig := series_figure(cs, kind)) is not None:
            out.append(_figure(fig, figs))
    if mem := memory_tables(cs):
        out += [Heading(3, "Memory", "update-memory"), *mem]
    return out, figs


def report(data: RunData) -> CellReport:
    blocks, figs = lead(data)
    # No cell is the others' reference: every figure above stands on its own.
    out = CellReport(data, references=lambda d, c: {}, lead=blocks)
    out.figures.extend(figs)
    return out
