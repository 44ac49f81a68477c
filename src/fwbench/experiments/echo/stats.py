"""Seed 001's analysis from an echo run's records.

The unit of replication is the trial: each trial's mean throughput per client is one
value. The seed averaged three runs of each of its 1,260 combinations and reported
averages over groups of them; here every figure carries its interval and every
comparison its test.

- Decrease against F = 0: each cell with rules against the same cell without (F = 0),
  the log ratio of their per-client throughput (Welch on the logs), Holm across the
  table, its interval at its Holm level; the seed's Welch on raw values beside.
- Loss per rule: the seed fitted the decrease (%) against the number of rules for each
  protocol and family and averaged the gradients (0.05 %/rule for IPv4, 0.03 % for
  IPv6). Here: a least-squares line through the origin (no rules, no decrease) of every
  trial's decrease against its cell's rule count (n x F), per family, with a bootstrap
  interval that resamples the trials of every cell, the F = 0 references included.
- Threads against epoll: per number of clients (TCP, F = 0, as the seed), the log
  ratio (Welch on the logs), Holm across the clients, its interval at its Holm level;
  the seed's Welch on raw values and Mann-Whitney beside it; the turning point is
  where the sign of the difference changes (interpolated in log n between the two
  client counts around it).
- TCP against UDP and IPv4 against IPv6: over every pair of cells equal but for that
  factor (epoll server for both), the mean of the pairs' relative differences with its
  minimum and maximum, as the seed gave them, a bootstrap interval over the pairs and a
  Wilcoxon signed-rank test of the pairs.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from rich.table import Table
from scipy import stats as sps

from fwbench import stats
from fwbench import summary
from fwbench.experiments.echo.design import FACTORS, EchoCell, rules_of
from fwbench.plan import named_cell
from fwbench.results import TrialRecord

ALPHA = 0.05
F_INDEX = FACTORS.index("rules_per_client")
# Seed 001's published figures (its section 3).
SEED001 = {
    "per_rule_pct": {"ipv4": 0.05, "ipv6": 0.03},
    "mean_decrease_pct": 2.25,
    "decrease_by_family_pct": {"ipv4": 2.71, "ipv6": 1.79},
    "turning_point_clients": 40,
    "tcp_slower_than_udp_pct": (8.42, 5.18, 10.64),     # mean, min, max
    "ipv6_slower_than_ipv4_pct": (9.22, 4.59, 13.8),
    "sctp_slower_than_tcp_pct": (32.65, 9.28, 48.23),
}

Cell = EchoCell


def jain(xs: list[float]) -> float | None:
    """Jain's fairness index: 1 when every client got the same, 1/n when one got all."""
    s, sq = sum(xs), sum(x * x for x in xs)
    return s * s / (len(xs) * sq) if xs and sq else None


def percentile(xs: list[float], q: float) -> float:
    """The q-quantile (0..1), linear between order statistics."""
    return float(np.quantile(xs, q))


def value(rec: TrialRecord) -> float | None:
    try:
        return float(rec.metrics["throughput"]["client_mean_bps"])
    except (KeyError, TypeError):
        return None


def samples(records: list[TrialRecord]) -> dict[Cell, list[float]]:
    """Each echo cell's ok trials' mean per-client throughput (bit/s): seed 001's
    transaction, without background connection-table entries (crr cells are
    conn_rates()'s)."""
    out: dict[Cell, list[float]] = defaultdict(list)
    for r in records:
        v = value(r)
        c = EchoCell(*r.cell(FACTORS))
        if r.status == "ok" and v is not None and c.transaction == "echo" and not c.entries:
            out[c].append(v)
    return dict(out)


def reference(cell: Cell) -> Cell:
    """The same cell without rules (F = 0)."""
    return EchoCell(*cell)._replace(rules_per_client=0)   # `cell` may be a plan's tuple


def label(cell: Cell) -> str:
    c = dict(zip(FACTORS, cell))
    text = (f"n={c['clients']} {c['protocol']}/{c['family']} {c['frame']} B {c['server']} "
            f"F={c['rules_per_client']} {c['backend']}")
    if c["transaction"] != "echo":
        text += f" {c['transaction']}"
    return text + (f" +{c['entries']:,}" if c["entries"] else "")


# --- decrease against F = 0 ---------------------------------------------------------------

@dataclass(frozen=True)
class Decrease:
    cell: Cell
    rules: int
    decrease_pct: float                 # 100 x (1 - ratio), the log ratio's estimate
    interval: tuple[float, float] | None   # of decrease_pct, at its Holm level
    n: int
    n_ref: int
    p_holm: float | None = None         # the log ratio's, Holm across the decreases
    seed_welch_p: float | None = None   # the seed's: Welch on the raw values


def _decided(tests: list) -> list[tuple]:
    """Holm across a table of log-ratio tests (stats.log_ratio, Welch on the logs:
    samples() keeps no rounds): each (ratio, interval at its Holm level, adjusted p),
    or Nones where a test could not be made."""
    out = []
    for t, h in zip(tests, stats.holm_levels([t.p if t else None for t in tests], ALPHA)):
        if t is None:
            out.append((None, None, None))
            continue
        iv = t.interval(1 - h.alpha)
        out.append((t.ratio, (iv.low, iv.high), h.p_adjusted))
    return out


def decreases(s: dict[Cell, list[float]]) -> list[Decrease]:
    found = []
    for cell, xs in s.items():
        ref = s.get(reference(cell))
        if cell.rules_per_client and ref:
            found.append((cell, xs, ref, stats.log_ratio(xs, ref)))
    out = []
    for (cell, xs, ref, t), (ratio, iv, p) in zip(found, _decided([x[3] for x in found])):
        if ratio is None:
            ratio = statistics.fmean(xs) / statistics.fmean(ref)
        w = stats.welch(xs, ref)
        out.append(Decrease(cell, rules_of(cell), 100 * (1 - ratio),
                            (100 * (1 - iv[1]), 100 * (1 - iv[0])) if iv else None,
                            len(xs), len(ref), p, w.p if w else None))
    return out


# --- loss per rule -----------------------------------------------------------------------

@dataclass(frozen=True)
class Slope:
    family: str
    backend: str
    pct_per_rule: float
    interval: tuple[float, float] | None
    cells: int                  # cells with rules that went into it
    max_rules: int
    r2: float                   # of the cell means about the line (through the origin)


def per_rule_slope(s: dict[Cell, list[float]], family: str, backend: str, seed: int = 1,
                   resamples: int = 2000, level: float = 0.95) -> Slope | None:
    """Decrease (%) = slope x rules, least squares through the origin, over every cell of
    the family and backend that has rules and its F = 0 reference."""
    pairs = [(c, xs, s[reference(c)]) for c, xs in s.items()
             if c.family == family and c.backend == backend and c.rules_per_client
             and s.get(reference(c))]
    if not pairs:
        return None

    rules = [rules_of(c) for c, _, _ in pairs]

    def fit(*groups, axis=-1):
        # groups: each pair's trials, then its reference's; along the last axis.
        # One value at a time, in order, so the estimate is the plain sum's.
        num, den = 0.0, 0
        for r, xs, ref in zip(rules, groups[::2], groups[1::2]):
            base = np.mean(ref, axis=-1)
            for j in range(xs.shape[-1]):
                num = num + r * (100 * (1 - xs[..., j] / base))
                den += r * r
        return num / den

    samples = [np.asarray(x, dtype=float) for _, xs, ref in pairs for x in (xs, ref)]
    point = float(fit(*samples))
    iv = None
    if all(len(x) >= 2 for x in samples):
        b = stats.bootstrap(samples, fit, level=level, resamples=resamples, seed=seed)
        iv = (b.low, b.high)
    # How well a line through the origin holds the cells' mean decreases (uncentred
    # R², as for any fit without an intercept): 1 is a straight line.
    pts = [(rules_of(c), 100 * (1 - float(np.mean(xs)) / float(np.mean(ref))))
           for c, xs, ref in pairs]
    ss_res = sum((y - point * x) ** 2 for x, y in pts)
    ss_tot = sum(y * y for _, y in pts) or 1.0
    return Slope(family, backend, point, iv, len(pairs), max(x for x, _ in pts),
                 1 - ss_res / ss_tot)


# --- threads against epoll ----------------------------------------------------------------

# A server test's group: the cell without its server factor.
Group = named_cell(tuple(f for f in FACTORS if f != "server"))


@dataclass(frozen=True)
class ServerTest:
    group: Group
    clients: int
    diff_pct: float             # 100 x (threads / epoll - 1), the log ratio's estimate
    interval: tuple[float, float] | None   # of diff_pct, at its Holm level
    p: float | None             # the log ratio's (Welch on the logs), two-tailed
    p_holm: float | None
    mwu_p: float | None         # Mann-Whitney, beside (decides nothing)
    n_threads: int
    n_epoll: int
    welch_p: float | None = None   # the seed's test: Welch on the raw values

    @property
    def verdict(self) -> str:
        if self.p_holm is None:
            return "untestable"
        if self.p_holm >= ALPHA:
            lo, hi = self.interval
            wide = lo <= -50 or hi >= 100
            return "undecided" if wide else "no difference shown"
        return "threads faster" if self.diff_pct > 0 else "epoll faster"


def server_tests(s: dict[Cell, list[float]]) -> list[ServerTest]:
    """Threads against epoll in every cell measured with both: the log ratio of
    their mean throughput per client (Welch on the logs), Holm across them."""
    found = []
    for cell, th in s.items():
        if cell.server != "threads":
            continue
        ep = s.get(cell._replace(server="epoll"))
        if ep:
            found.append((cell, th, ep, stats.log_ratio(th, ep)))
    out = []
    for (cell, th, ep, t), (ratio, iv, p) in zip(found, _decided([x[3] for x in found])):
        if ratio is None:
            ratio = statistics.fmean(th) / statistics.fmean(ep)
        w, mw = stats.welch(th, ep), stats.mann_whitney(th, ep)
        group = Group(**{f: v for f, v in cell._asdict().items() if f != "server"})
        out.append(ServerTest(group, cell.clients, 100 * (ratio - 1),
                              (100 * (iv[0] - 1), 100 * (iv[1] - 1)) if iv else None,
                              t.p if t else None, p, mw.p if mw else None,
                              len(th), len(ep), w.p if w else None))
    # by every factor of the group but the clients, then the clients
    return sorted(out, key=lambda t: (t.group._replace(clients=0), t.clients))


def turning_point(tests: list[ServerTest]) -> float | None:
    """The client count where threads stop being faster: the first sign change of the
    difference from + to - along n (mean over groups per n), interpolated in log n."""
    by_n: dict[int, list[float]] = defaultdict(list)
    for t in tests:
        by_n[t.clients].append(t.diff_pct)
    pts = sorted((n, statistics.fmean(v)) for n, v in by_n.items())
    for (n0, d0), (n1, d1) in zip(pts, pts[1:]):
        if d0 > 0 >= d1:
            x0, x1 = math.log(n0), math.log(n1)
            return math.exp(x0 + (x1 - x0) * d0 / (d0 - d1))
    return None


# --- paired averages: TCP against UDP, IPv4 against IPv6 ---------------------------------

@dataclass(frozen=True)
class Average:
    what: str
    slower_pct: float           # mean over pairs of 100 x (1 - slower / faster side)
    low: float                  # the pairs' minimum and maximum, as the seed gave them
    high: float
    interval: tuple[float, float] | None   # bootstrap over pairs, of the mean
    pairs: int
    p: float | None             # Wilcoxon signed-rank, two-tailed


def paired_average(s: dict[Cell, list[float]], factor: str, slow: str, fast: str,
                   what: str, seed: int = 1) -> Average | None:
    """How much slower `slow` is than `fast`, over cells equal but for `factor`; the
    server factor is epoll on both sides (UDP has no thread-per-client server)."""
    diffs = []
    for cell, xs in s.items():
        if getattr(cell, factor) != slow or cell.server != "epoll":
            continue
        other = s.get(cell._replace(**{factor: fast}))
        if other:
            diffs.append(100 * (1 - statistics.fmean(xs) / statistics.fmean(other)))
    if not diffs:
        return None
    iv = None
    if len(diffs) >= 3:
        m = stats.mean_ci(diffs, resamples=4000, seed=seed)
        iv = (m.low, m.high)
    p = None
    if len(diffs) >= 2 and any(diffs):
        p = float(sps.wilcoxon(diffs).pvalue)
    return Average(what, statistics.fmean(diffs), min(diffs), max(diffs), iv, len(diffs), p)


# --- connections per second (crr, beyond the seed) ------------------------------------------

@dataclass(frozen=True)
class ConnRate:
    cell: Cell
    base: Cell                  # the same cell with F = 0 and no background entries
    rate: float                 # mean connections (transactions) per second, all clients
    change_pct: float | None    # against base: the log ratio's estimate (Welch on logs)
    interval: tuple[float, float] | None   # of change_pct, at its Holm level
    p_holm: float | None
    n: int


def conn_rates(records: list[TrialRecord]) -> list[ConnRate]:
    """Every crr cell's connection rate, and its change against the same cell with
    no rules and no background connection-table entries."""
    rates: dict[Cell, list[float]] = defaultdict(list)
    for r in records:
        c = EchoCell(*r.cell(FACTORS))
        if r.status == "ok" and c.transaction == "crr":
            rates[c].append(float(r.metrics["throughput"]["msgs_per_s"]))
    found = []
    for c, xs in sorted(rates.items(), key=lambda kv: (kv[0].rules_per_client,
                                                      kv[0].entries)):
        base = c._replace(rules_per_client=0, entries=0)
        ref = rates.get(base) if base != c else None
        found.append((c, base, xs, ref, stats.log_ratio(xs, ref) if ref else None))
    out = []
    for (c, base, xs, ref, _t), (ratio, iv, p) in zip(found, _decided([f[4] for f in found])):
        if ratio is None and ref:
            ratio = statistics.fmean(xs) / statistics.fmean(ref)
        out.append(ConnRate(c, base, statistics.fmean(xs),
                            100 * (ratio - 1) if ratio is not None else None,
                            (100 * (iv[0] - 1), 100 * (iv[1] - 1)) if iv else None,
                            p, len(xs)))
    return out


# --- the table that ends a run --------------------------------------------------------

def table(records: list[TrialRecord]) -> Table:
    s = samples(records)
    dec = {d.cell: d for d in decreases(s)}
    return summary.render(
        "echo: mean throughput per client (message bytes one way)",
        [(col, "left" if col == "cell" else "right")
         for col in ("cell", "trials", "per client", "vs F=0")],
        ([label(cell), str(len(s[cell])), f"{statistics.fmean(s[cell]) / 1e6:,.2f} Mbit/s",
          f"{-d.decrease_pct:+.1f} %" if (d := dec.get(cell)) else ""]
         for cell in sorted(s)))
