"""From samples to conclusions: cell summaries, pairwise comparisons per cell with
Holm's correction, the per-rule cost model and its crossovers, warnings, and the
sentences a report states. Pure functions of a RunData; the renderers only format
what is here.

How a comparison decides (`compare`, `apply_holm`): a against b is a ratio,
estimated and tested on the log scale (stats.log_ratio), paired by round where both
cells were measured in the same rounds, else Welch's t on the logs. Holm runs across
a family that asks one question (documented where each family is built); each
comparison's interval is printed at the level its Holm step tested it at, so a
verdict never contradicts the interval beside it. The seeds' own tests (Welch on
raw values, Mann-Whitney, Cliff's delta) are kept beside, and decide nothing.
"""
from __future__ import annotations

import math

import itertools
import statistics
from dataclasses import dataclass, field

from fwbench import backends as registry
from fwbench import stats
from fwbench.metrics import Metric
from fwbench.report.data import Cell, RunData

ALPHA = 0.05
# Not a difference, and an interval reaching past this factor either way: too wide
# to call the cells alike. Such a verdict is "undecided", never "no difference".
UNDECIDED = 2.0
NOISY = 0.10            # a cell's 95 % median interval wider than this fraction
GENERATOR_BOUND = 0.95  # a rate within 5 % of the no-firewall ceiling measured the sender


@dataclass(frozen=True)
class CellSummary:
    cell: Cell            # the factors' values, in the run's factor order
    values: tuple[float, ...]
    mean: float
    sd: float | None
    median: float
    ci: stats.Interval | None  # bootstrap 95 % interval of the median
    rounds: tuple | None = None  # the round of each value (None: not to be paired)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def rel_width(self) -> float | None:
        return self.ci.width_relative_to(self.median) if self.ci else None


def summarize(cell: Cell, values: list[float], rounds: list | None = None) -> CellSummary:
    return CellSummary(cell, tuple(values), statistics.fmean(values),
                       statistics.stdev(values) if len(values) > 1 else None,
                       statistics.median(values), stats.median_ci(values),
                       tuple(rounds) if rounds is not None else None)


def summaries(data: RunData, metric: Metric) -> dict[Cell, CellSummary]:
    """Every cell's summary, each value with its round (for pairing)."""
    return {c: summarize(c, [v for _, v in rv], [r for r, _ in rv])
            for c, rv in data.samples_by_round(metric).items() if rv}


@dataclass
class Comparison:
    """Treatment a against treatment b in one cell (or one cell of two runs).
    `test` decides (the log ratio, paired by round where it can be); the seed's
    tests (`welch` on raw values, `mwu`, `delta`) are shown beside and decide
    nothing. `holm` is filled in across the comparison's family."""
    a: CellSummary
    b: CellSummary
    test: stats.RatioTest | None
    welch: stats.TestResult | None        # the seed's test (seed 000's Welch)
    mwu: stats.TestResult | None          # two-tailed
    mwu_less: stats.TestResult | None     # one-tailed: a tends to be smaller
    mwu_greater: stats.TestResult | None  # one-tailed: a tends to be larger
    delta: float | None                   # Cliff's delta of a against b
    holm: stats.HolmVerdict | None = None

    @property
    def change(self) -> float:
        """a / b - 1: the ratio the test estimates (of geometric means, or the mean
        within-round ratio), or of the medians when it cannot test."""
        if self.test is not None:
            return self.test.ratio - 1
        return self.a.median / self.b.median - 1 if self.b.median else float("nan")

    @property
    def level(self) -> float:
        """The confidence level of `change_ci`: Holm's, for this comparison."""
        return 1 - self.holm.alpha if self.holm else 1 - ALPHA

    @property
    def change_ci(self) -> stats.Interval | None:
        """The interval of `change` at `level`: it excludes 0 exactly when the
        verdict is a difference."""
        if self.test is None:
            return None
        iv = self.test.interval(self.level)
        return stats.Interval(iv.low - 1, iv.high - 1, iv.coverage)

    @property
    def holm_p(self) -> float | None:
        return self.holm.p_adjusted if self.holm else None

    @property
    def how_sure(self) -> float | None:
        """Half the interval's width on the log scale, as a fraction: +-x %."""
        iv = self.test.interval(self.level) if self.test else None
        return math.sqrt(iv.high / iv.low) - 1 if iv and iv.low > 0 else None

    def verdict(self, metric: Metric, alpha: float = ALPHA) -> str:
        """"better" / "worse" (a against b); "same" (no difference shown, the
        interval within UNDECIDED either way); "undecided" (none shown, but the
        interval too wide to say the two are alike); "untestable" (too few values,
        or a value of 0)."""
        if self.test is None or self.holm is None:
            return "untestable"
        if not self.holm.rejected:
            iv = self.test.interval(self.level)
            wide = iv.low <= 1 / UNDECIDED or iv.high >= UNDECIDED
            return "undecided" if wide else "same"
        a_higher = self.test.log_ratio > 0
        return "better" if a_higher == metric.higher_is_better else "worse"


def compare(a: CellSummary, b: CellSummary, paired: bool = True) -> Comparison:
    """a against b. `paired`: by round where both cells carry their rounds (one
    run); two runs' cells are never paired."""
    x, y = a.values, b.values
    ra, rb = (a.rounds, b.rounds) if paired else (None, None)
    return Comparison(
        a, b, stats.log_ratio(x, y, ra, rb), stats.welch(x, y), stats.mann_whitney(x, y),
        stats.mann_whitney(x, y, "less"), stats.mann_whitney(x, y, "greater"),
        stats.cliffs_delta(x, y))


def apply_holm(comparisons: list[Comparison], alpha: float = ALPHA) -> None:
    """Holm across one family: the comparisons that answer one question (the
    caller says which)."""
    for c, h in zip(comparisons, stats.holm_levels(
            [c.test.p if c.test else None for c in comparisons], alpha)):
        c.holm = h


# A comparison in a CSV row: the ratio a / b with its interval (at `ci_level`, the
# comparison's Holm level) and the test that decided, then the seed's own tests.
COMPARISON_COLUMNS = ["ratio", "ratio_ci_low", "ratio_ci_high", "ci_level", "test",
                      "paired", "n_pairs", "t_df", "p", "p_holm", "verdict",
                      "seed_welch_t", "seed_welch_df", "seed_welch_p", "seed_mwu_u",
                      "seed_mwu_p_two_sided", "seed_mwu_p_less", "seed_mwu_p_greater",
                      "seed_cliffs_delta"]


def comparison_columns(c: Comparison, m: Metric) -> list:
    t, w, iv = c.test, c.welch, c.change_ci
    return [1 + c.change, 1 + iv.low if iv else None, 1 + iv.high if iv else None,
            c.level if t else None, t.test if t else None, t.paired if t else None,
            t.n_pairs if t else None, t.df if t else None, t.p if t else None, c.holm_p,
            c.verdict(m), w.statistic if w else None, w.df if w else None,
            w.p if w else None, c.mwu.statistic if c.mwu else None,
            c.mwu.p if c.mwu else None, c.mwu_less.p if c.mwu_less else None,
            c.mwu_greater.p if c.mwu_greater else None, c.delta]


def pairing(comparisons: list[Comparison]) -> str:
    """How a table's comparisons were made, for its caption."""
    tests = [c.test for c in comparisons if c.test]
    paired = sum(t.paired for t in tests)
    if not tests:
        return "no comparison could be tested"
    if paired == len(tests):
        return "ratios paired by round (paired t on the log ratios)"
    if not paired:
        return "ratios unpaired (Welch's t on the logs)"
    return (f"ratios paired by round where both were measured in the same rounds "
            f"({paired} of {len(tests)}), else Welch's t on the logs")


@dataclass
class PairTable:
    """Seed 000's table: rule-set sizes across, the two treatments down, p-values."""
    a: str
    b: str
    metric: Metric
    frame_size: int
    rules: list[int]
    columns: list[Comparison]


def pair_tables(data: RunData, metric: Metric, cells: dict[Cell, CellSummary],
                pairs) -> list[PairTable]:
    """`cells`: the metric's summaries (`summaries(data, metric)`)."""
    out = []
    for a, b in pairs:
        family: list[Comparison] = []
        tables = []
        for f in data.frame_sizes():
            here = {(c.backend, c.rules): s for c, s in cells.items() if c.frame_size == f}
            rules = [n for n in data.rule_counts() if (a, n) in here and (b, n) in here]
            if not rules:
                continue
            cols = [compare(here[(a, n)], here[(b, n)]) for n in rules]
            family += cols
            tables.append(PairTable(a, b, metric, f, rules, cols))
        apply_holm(family)
        out += tables
    return out


def pair_kinds() -> list[tuple[str, list[tuple[str, str]]]]:
    """The pairs a reader asks about, by the question each answers (`--pair`
    replaces them): those the backends declare (registry.pair_kinds)."""
    return registry.pair_kinds()


def default_pairs(data: RunData) -> list[tuple[str, str]]:
    present = set(data.backends())
    return [p for _, pairs in pair_kinds() for p in pairs if set(p) <= present]


def pair_kind(a: str, b: str) -> str:
    """The question a pair answers (pair_kinds), or "chosen" for a `--pair` of one's own."""
    return next((k for k, pairs in pair_kinds() if (a, b) in pairs), "chosen")


def groups(backends: list[str]) -> list[tuple[str, list[str]]]:
    """The backend groups (registry.groups: the per-metric figures' panels)
    restricted to `backends` (`none` left out), in their order; a backend of no
    group goes into "other"."""
    every = registry.groups()
    out = [(name, [b for b in members if b in backends]) for name, members in every]
    known = {b for _, members in every for b in members}
    out.append(("other", [b for b in backends if b not in known and b != "none"]))
    return [(name, members) for name, members in out if members]


# -- each backend against the best at each rule count --------------------------------

@dataclass
class AgainstBest:
    """One metric at one frame size: the best backend at each rule count (highest
    median rate, lowest median otherwise; `none` left out) and every other backend
    tested against it. The best is picked from the same data, which leans a little
    towards finding a difference. Holm runs across the backends at one rule count and
    frame size (the question "which differ from the best here?"); across a whole
    seed-000-sized run (630 tests) it would hide a 400-fold difference at n = 3."""
    frame_size: int
    best: dict[int, str]                               # rule count -> best backend
    comparisons: dict[tuple[str, int], Comparison]     # (backend, rules) -> against it


def against_best(data: RunData, metric: Metric,
                 cells: dict[Cell, CellSummary]) -> list[AgainstBest]:
    out = []
    pick = max if metric.higher_is_better else min
    for f in data.frame_sizes():
        row = AgainstBest(f, {}, {})
        for n in data.rule_counts():
            here = {c.backend: s for c, s in cells.items()
                    if c.rules == n and c.frame_size == f and c.backend != "none"}
            if len(here) < 2:
                continue
            top = pick(here, key=lambda b: here[b].median)
            row.best[n] = top
            family = {b: compare(s, here[top]) for b, s in here.items() if b != top}
            apply_holm(list(family.values()))
            row.comparisons |= {(b, n): c for b, c in family.items()}
        if row.best:
            out.append(row)
    return out


def ranking(data: RunData, metric: Metric, cells: dict[Cell, CellSummary],
            frame: int) -> list[str]:
    """The backends at one frame size, best first: by their median at the largest rule
    count, a backend missing there after those that have it (by its own largest)."""
    sign = -1 if metric.higher_is_better else 1
    key = {}
    for b in data.backends():
        mine = sorted((c.rules, s.median) for c, s in cells.items()
                      if c.backend == b and c.frame_size == frame and b != "none")
        if mine:
            key[b] = (-mine[-1][0], sign * mine[-1][1])
    return sorted(key, key=key.get)


def factor(c: Comparison, metric: Metric) -> tuple[float, float | None, float | None]:
    """a against b as one factor with its interval (at the comparison's Holm level,
    so it excludes 1 exactly when the verdict is a difference): for a packet rate,
    a's time per packet over b's (b's rate over a's), so above 1 means a is slower;
    for any other metric a over b."""
    r = 1 + c.change
    iv = c.change_ci
    lo, hi = (1 + iv.low, 1 + iv.high) if iv else (None, None)
    if metric.unit != "packets/s":
        return r, lo, hi
    inv = lambda x: 1 / x if x and x > 0 else None  # noqa: E731
    return inv(r) or math.nan, inv(hi), inv(lo)


def verdict_words(c: Comparison, metric: Metric, a: str, alpha: float = ALPHA) -> str:
    v = c.verdict(metric, alpha)
    if v == "same":
        return "no difference shown"
    if v == "undecided":
        return f"undecided (±{c.how_sure * 100:.0f} %)"
    if v == "untestable":
        return "untestable"
    if metric.unit == "packets/s":
        return f"{a} {'faster' if v == 'better' else 'slower'}"
    higher = (v == "better") == metric.higher_is_better
    return f"{a} {'higher' if higher else 'lower'}"


# -- generator-bound trials ----------------------------------------------------------

def ceilings(data: RunData, head_cells: dict[Cell, CellSummary]) -> dict[int, float]:
    """Frame size -> the no-firewall rate: the `none` cell's median (from `head_cells`,
    the headline metric's summaries) if the run has it, else the sender ceiling
    calibrated at the start of the session."""
    out: dict[int, float] = {}
    for s in data.meta.get("sessions", []):
        for f, v in (s.get("engine") or {}).get("sender_ceiling_pps", {}).items():
            if v:
                out[int(f)] = float(v)
    if data.method == "maxrate":
        for c, s in head_cells.items():
            if c.backend == "none":
                out[c.frame_size] = s.median
    return out


def generator_bound(data: RunData, top: dict[int, float]) -> set[tuple[Cell, int]]:
    """(cell, repetition) of trials whose packet rate says nothing about the firewall:
    the search's own flag, or (open-throttle methods) a rate within 5 % of the
    no-firewall ceiling `top` at that frame size."""
    head = data.headline()
    if head is None:
        return set()
    out = set()
    for r in data.ok:
        cell = data.cell(r)
        if cell.backend == "none":
            continue
        v = head.value(r)
        if r.metrics.get("ndr_generator_limited") or r.metrics.get("pdr_generator_limited"):
            out.add((cell, r.repetition))
        elif (data.method == "maxrate" and v is not None and cell.frame_size in top
              and v >= GENERATOR_BOUND * top[cell.frame_size]):
            out.add((cell, r.repetition))
    return out


# -- the cost model ------------------------------------------------------------------

@dataclass
class CostRow:
    backend: str
    frame_size: int
    fit: stats.CostFit | None
    excluded: int          # generator-bound trials left out of the fit
    points: list[tuple[int, float]] = field(default_factory=list)


def cost_rows(data: RunData, bound: set[tuple[Cell, int]]) -> list[CostRow]:
    """Per backend and frame size, the fit over every ok trial not in `bound`."""
    head = data.headline()
    if head is None:
        return []
    pts: dict[tuple[str, int], list[tuple[int, float]]] = {}
    excluded: dict[tuple[str, int], int] = {}
    for r in data.ok:
        v = head.value(r)
        cell = data.cell(r)
        if cell.backend == "none" or v is None or v <= 0:
            continue
        key = (cell.backend, cell.frame_size)
        if (cell, r.repetition) in bound:
            excluded[key] = excluded.get(key, 0) + 1
            continue
        pts.setdefault(key, []).append((cell.rules, v))
    order = {b: i for i, b in enumerate(data.backends())}
    keys = sorted(set(pts) | set(excluded), key=lambda k: (k[1], order.get(k[0], 99)))
    return [CostRow(b, f, stats.fit_cost(pts.get((b, f), [])), excluded.get((b, f), 0),
                    sorted(pts.get((b, f), []))) for b, f in keys]


COST_REFERENCES = ("iptables-legacy", "nftables")


def cost_reference(rows: list[CostRow], frame_size: int) -> CostRow | None:
    """The backend every cost per rule is also given relative to: iptables-legacy, else
    nftables, measured in the same rounds (so the machine's speed cancels)."""
    fitted = {r.backend: r for r in rows if r.frame_size == frame_size and r.fit is not None
              and r.fit.b_ns > 0}
    return next((fitted[b] for b in COST_REFERENCES if b in fitted), None)


def relative_cost(row: CostRow, ref: CostRow) -> tuple[float, float, float] | None:
    """row's ns per rule over ref's, with an approximate 95 % interval: the two fits'
    relative half-widths combined in quadrature (delta method; the fits are of
    different trials, so independent)."""
    a, b = row.fit, ref.fit
    if a is None or b is None or b.b_ns <= 0:
        return None
    ratio = a.b_ns / b.b_ns
    if row is ref:
        return ratio, ratio, ratio
    rel = math.hypot((a.b_interval.high - a.b_interval.low) / 2 / a.b_ns if a.b_ns else 0,
                     (b.b_interval.high - b.b_interval.low) / 2 / b.b_ns)
    return ratio, ratio * (1 - rel), ratio * (1 + rel)


@dataclass
class CrossoverRow:
    a: str
    b: str
    frame_size: int
    crossing: stats.Crossover
    cheaper_below: str     # the backend with the lower cost under the crossing


def crossovers(rows: list[CostRow]) -> list[CrossoverRow]:
    """Every pair of backends at one frame size whose cost lines cross at N > 0 in
    a way the bootstrap supports (an interval exists)."""
    out = []
    by_frame: dict[int, list[CostRow]] = {}
    for r in rows:
        if r.fit is not None:
            by_frame.setdefault(r.frame_size, []).append(r)
    for f, group in sorted(by_frame.items()):
        for r1, r2 in itertools.combinations(group, 2):
            c = stats.crossover(r1.points, r2.points)
            if c is None or c.interval is None:
                continue
            cheaper = r1.backend if r1.fit.a_ns < r2.fit.a_ns else r2.backend
            out.append(CrossoverRow(r1.backend, r2.backend, f, c, cheaper))
    return out


# -- warnings and conclusions --------------------------------------------------------

@dataclass(frozen=True)
class Caveat:
    """One row of the warnings table."""
    kind: str
    cells: str
    detail: str


def disturbance(r) -> tuple[int, int]:
    """A trial's disturbed measurements: (taken again, kept disturbed). Methods on
    the engine's measurer record `disturbed_measurements`; maxrate and cpucost keep
    each disturbed attempt among the trial's sub-trials and flag a kept one."""
    d = r.metrics.get("disturbed_measurements")
    if d:
        return d["retaken"], d["kept"]
    n = sum(1 for t in r.trials if isinstance(t, dict) and t.get("disturbed"))
    kept = 1 if r.metrics.get("disturbed") else 0
    return max(0, n - kept), kept


def disturbance_note(data: RunData) -> Caveat | None:
    """How many measurements were taken again because others took the firewall's
    CPU, and which trials kept one disturbed every time; None when none was."""
    got = [(r, *disturbance(r)) for r in data.ok]
    again = sum(n for _, n, _ in got)
    kept = [f"{data.label(data.cell(r))} rep {r.repetition}" for r, _, k in got if k]
    if not again and not kept:
        return None
    trials = sum(1 for _, n, k in got if n or k)
    return Caveat("disturbed", ", ".join(kept) if kept else "-",
                  f"{again} measurement{'s' if again != 1 else ''} in {trials} of "
                  f"{len(got)} trials taken again: other tasks or the hypervisor took "
                  f"the firewall's CPU while it was measured (fwbench.cpu.disturbed); "
                  + (f"{len(kept)} trial{'s' if len(kept) != 1 else ''} kept a "
                     f"disturbed one after every attempt was (named here)"
                     if kept else "every trial kept an undisturbed one"))


def warnings(data: RunData, bound: set[tuple[Cell, int]],
             head_cells: dict[Cell, CellSummary]) -> list[Caveat]:
    out = []
    if (d := disturbance_note(data)) is not None:
        out.append(d)
    failed: dict[tuple[str, str], list[str]] = {}
    for r in data.records:
        if r.status != "ok":
            what = ("failed verification" if (r.reason or "").startswith("verification")
                    else r.status)
            failed.setdefault((what, r.reason or ""), []).append(
                f"{data.label(data.cell(r))} rep {r.repetition}")
    for (what, reason), where in failed.items():
        out.append(Caveat(what, ", ".join(where), f"{what}: {reason}"))
    gaps = [f"{data.label(data.cell(r))} rep {r.repetition} "
            f"({r.metrics['accounting']['gap']})" for r in data.ok
            if (r.metrics.get("accounting") or {}).get("gap")]
    if gaps:
        out.append(Caveat("packets unaccounted", ", ".join(gaps),
                          "trials whose sent packets the path's counters do not all "
                          "explain (beyond 0.1 %): lost where no counter on the path "
                          "says; the record's `accounting` has every stage"))
    cells_bound: dict[Cell, int] = {}
    for cell, _ in bound:
        cells_bound[cell] = cells_bound.get(cell, 0) + 1
    if cells_bound:
        out.append(Caveat(
            "generator-bound", ", ".join(f"{data.label(c)} ({k})"
                                         for c, k in sorted(cells_bound.items())),
            "trials (count in brackets) within 5 % of the no-firewall rate: the "
            "instrument's own path, not the firewall, set the rate; left out of the cost "
            "model; `--method cpucost` ranks such backends"))
    head = data.headline()
    if head is not None:
        few = [data.label(c) for c, s in sorted(head_cells.items()) if s.n < 2]
        if few:
            out.append(Caveat("single trial", ", ".join(few),
                              "one ok trial: no interval, nothing can be concluded"))
        noisy: dict[str, list[str]] = {}
        for c, s in sorted(head_cells.items()):
            w = s.rel_width
            if s.n >= 2 and w is not None and w > NOISY:
                noisy.setdefault(c.backend, []).append(
                    f"{c.frame_size} B ({100 * w:.0f} %)" if c.backend == "none" else
                    f"N={c.rules:,} {c.frame_size} B ({100 * w:.0f} %)")
        for i, (b, where) in enumerate(noisy.items()):   # a row per backend
            out.append(Caveat("too noisy", f"{b}: {', '.join(where)}", "as above" if i else
                              f"{head.label}: 95 % interval of the median wider than "
                              f"{100 * NOISY:.0f} % of it (its width in brackets), too "
                              f"noisy to conclude; add repetitions with --max-repeat"))
        if "none" not in data.backends():
            out.append(Caveat("no none cell", "-",
                              "the no-firewall ceiling was not measured in this run, so "
                              "generator-bound trials are judged by the calibration only"))
    return out


def _rules_phrase(subset: list[int], columns: list[int]) -> str:
    if subset == columns:
        return "every rule-set size measured"
    if len(subset) >= 2 and subset == columns[columns.index(subset[0]):]:
        return f">= {subset[0]:,} rules"
    if len(subset) == 1:
        return f"{subset[0]:,} rules"
    return ", ".join(f"{n:,}" for n in subset[:-1]) + f" and {subset[-1]:,} rules"


def format_p(p: float | None) -> str:
    if p is None:
        return "-"
    if p < 0.001:
        return f"{p:.1e}"
    return f"{p:.3f}"


def p_bound(ps: list[float]) -> str:
    worst = max(ps)
    return "p < 0.001" if worst < 0.001 else f"p <= {worst:.3f}"


WORSE = {True: "is slower than", False: "has a higher {label} than"}
BETTER = {True: "is faster than", False: "has a lower {label} than"}


@dataclass(frozen=True)
class Claim:
    kind: str   # a verdict of Comparison: "worse", "better", "same", "undecided",
    #             "untestable"
    text: str


def conclusions(t: PairTable, bound: set[Cell] = frozenset(),
                alpha: float = ALPHA) -> list[Claim]:
    """Plain sentences for one pair table, claiming only what the corrected tests show:
    the differences first, then where none is shown or none could be tested."""
    m = t.metric
    rate = m.throughput
    out = []
    for kind, words in (("worse", WORSE), ("better", BETTER)):
        where = [n for n, c in zip(t.rules, t.columns) if c.verdict(m, alpha) == kind]
        if not where:
            continue
        ps = [c.holm_p for n, c in zip(t.rules, t.columns) if n in where]
        verb = words[rate].format(label=m.label)
        what = f" ({m.label})" if rate else ""
        s = (f"{t.a} {verb} {t.b}{what} at {_rules_phrase(where, t.rules)} for "
             f"{t.frame_size}-byte frames, {p_bound(ps)} (t on the log ratio, "
             f"Holm-adjusted).")
        hidden = [n for n in where if (t.a, n, t.frame_size) in bound
                  or (t.b, n, t.frame_size) in bound]
        if hidden:
            s += (f" At {_rules_phrase(hidden, t.rules)} a trial was generator-bound, so "
                  f"part of that difference is the sender's.")
        out.append(Claim(kind, s))
    same = [n for n, c in zip(t.rules, t.columns) if c.verdict(m, alpha) == "same"]
    if same:
        ns = sorted({c.a.n for c in t.columns} | {c.b.n for c in t.columns})
        out.append(Claim("same", f"No difference in {m.label} between {t.a} and {t.b} is shown at "
                   f"{_rules_phrase(same, t.rules)} for {t.frame_size}-byte frames "
                   f"(Holm-adjusted p >= {alpha}; {'/'.join(map(str, ns))} trials per "
                   f"cell): every interval holds 1, and the data neither show one nor "
                   f"rule one out."))
    undecided = [n for n, c in zip(t.rules, t.columns) if c.verdict(m, alpha) == "undecided"]
    if undecided:
        out.append(Claim("undecided", f"{t.a} against {t.b} in {m.label} is undecided at "
                         f"{_rules_phrase(undecided, t.rules)} for {t.frame_size}-byte "
                         f"frames: no difference is shown, but the intervals reach past "
                         f"{UNDECIDED:g}x either way; more rounds would narrow them."))
    untestable = [n for n, c in zip(t.rules, t.columns) if c.verdict(m, alpha) == "untestable"]
    if untestable:
        out.append(Claim("untestable", f"{t.a} and {t.b} cannot be compared at "
                         f"{_rules_phrase(untestable, t.rules)} for {t.frame_size}-byte "
                         f"frames (fewer than 2 ok trials a side, or a value of 0)."))
    return out


def cost_sentence(row: CostRow) -> str | None:
    f = row.fit
    if f is None:
        return None
    lo, hi = f.b_interval.low, f.b_interval.high
    if lo <= 0 <= hi:
        return (f"{row.backend}, {row.frame_size} B: no cost per rule shown "
                f"(b = {f.b_ns:.3f} ns/rule, 95 % interval [{lo:.3f}, {hi:.3f}] "
                f"includes 0).")
    if hi < 0:
        return (f"{row.backend}, {row.frame_size} B: time per packet fell as rules were "
                f"added (b = {f.b_ns:.3f} ns/rule, 95 % interval [{lo:.3f}, {hi:.3f}]); no "
                f"rule can save time, so read it as drift during the run, not as a gain.")
    return (f"{row.backend}, {row.frame_size} B: each rule adds {f.b_ns:.3f} ns per "
            f"packet (95 % interval [{lo:.3f}, {hi:.3f}]), over a base of "
            f"{f.a_ns:,.0f} ns.")
