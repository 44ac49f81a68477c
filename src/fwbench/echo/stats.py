"""Seed 001's analysis from an echo run's records.

The unit of replication is the trial: each trial's mean throughput per client is one
value. The seed averaged three runs of each of its 1,260 combinations and reported
averages over groups of them; here every figure carries its interval and every
comparison its test.

- Decrease against F = 0: each cell with rules against the same cell without (F = 0),
  the ratio of their mean per-client throughput minus 1, with a bootstrap interval.
- Loss per rule: the seed fitted the decrease (%) against the number of rules for each
  protocol and family and averaged the gradients (0.05 %/rule for IPv4, 0.03 % for
  IPv6). Here: a least-squares line through the origin (no rules, no decrease) of every
  trial's decrease against its cell's rule count (n x F), per family, with a bootstrap
  interval that resamples the trials of every cell, the F = 0 references included.
- Threads against epoll: per number of clients (TCP, F = 0, as the seed), the ratio of
  the means with its interval, Welch two-tailed with Holm across the clients, Mann-
  Whitney beside it; the turning point is where the sign of the difference changes
  (interpolated in log n between the two client counts around it).
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
from fwbench.echo.design import FACTORS
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

Cell = tuple


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
    tr, ent = FACTORS.index("transaction"), FACTORS.index("entries")
    out: dict[Cell, list[float]] = defaultdict(list)
    for r in records:
        v = value(r)
        c = r.cell(FACTORS)
        if r.status == "ok" and v is not None and c[tr] == "echo" and not c[ent]:
            out[c].append(v)
    return dict(out)


def reference(cell: Cell) -> Cell:
    """The same cell without rules (F = 0)."""
    return cell[:F_INDEX] + (0,) + cell[F_INDEX + 1:]


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
    decrease_pct: float                 # 100 x (1 - mean / mean at F = 0)
    interval: tuple[float, float] | None   # of decrease_pct
    n: int
    n_ref: int
    p_holm: float | None = None         # Welch two-tailed, Holm across the decreases


def _mean_ratio_interval(a: list[float], b: list[float], seed: int = 1,
                         resamples: int = 4000) -> tuple[float, float] | None:
    if len(a) < 2 or len(b) < 2:
        return None
    rng = np.random.default_rng(seed)
    A, B = np.asarray(a), np.asarray(b)
    ra = A[rng.integers(0, len(A), (resamples, len(A)))].mean(axis=1)
    rb = B[rng.integers(0, len(B), (resamples, len(B)))].mean(axis=1)
    r = ra / rb
    return float(np.quantile(r, 0.025)), float(np.quantile(r, 0.975))


def decreases(s: dict[Cell, list[float]]) -> list[Decrease]:
    out = []
    for cell, xs in s.items():
        f = cell[F_INDEX]
        ref = s.get(reference(cell))
        if not f or not ref:
            continue
        ratio = statistics.fmean(xs) / statistics.fmean(ref)
        iv = _mean_ratio_interval(xs, ref)
        w = stats.welch(xs, ref)
        out.append(Decrease(cell, cell[0] * f, 100 * (1 - ratio),
                            (100 * (1 - iv[1]), 100 * (1 - iv[0])) if iv else None,
                            len(xs), len(ref), w.p if w else None))
    adj = stats.holm([d.p_holm for d in out])
    return [Decrease(d.cell, d.rules, d.decrease_pct, d.interval, d.n, d.n_ref, p)
            for d, p in zip(out, adj)]


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
                   resamples: int = 2000) -> Slope | None:
    """Decrease (%) = slope x rules, least squares through the origin, over every cell of
    the family and backend that has rules and its F = 0 reference."""
    fam, be = FACTORS.index("family"), FACTORS.index("backend")
    pairs = [(c, xs, s[reference(c)]) for c, xs in s.items()
             if c[fam] == family and c[be] == backend and c[F_INDEX]
             and s.get(reference(c))]
    if not pairs:
        return None

    def fit(groups) -> float:
        num = den = 0.0
        for c, xs, ref in groups:
            rules = c[0] * c[F_INDEX]
            base = float(np.mean(ref))
            for x in xs:
                y = 100 * (1 - x / base)
                num += rules * y
                den += rules * rules
        return num / den

    point = fit(pairs)
    iv = None
    if all(len(xs) >= 2 and len(ref) >= 2 for _, xs, ref in pairs):
        rng = np.random.default_rng(seed)
        boots = []
        for _ in range(resamples):
            boots.append(fit([(c, np.asarray(xs)[rng.integers(0, len(xs), len(xs))],
                               np.asarray(ref)[rng.integers(0, len(ref), len(ref))])
                              for c, xs, ref in pairs]))
        iv = (float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975)))
    # How well a line through the origin holds the cells' mean decreases (uncentred
    # R², as for any fit without an intercept): 1 is a straight line.
    pts = [(c[0] * c[F_INDEX], 100 * (1 - float(np.mean(xs)) / float(np.mean(ref))))
           for c, xs, ref in pairs]
    ss_res = sum((y - point * x) ** 2 for x, y in pts)
    ss_tot = sum(y * y for _, y in pts) or 1.0
    return Slope(family, backend, point, iv, len(pairs), max(x for x, _ in pts),
                 1 - ss_res / ss_tot)


# --- threads against epoll ----------------------------------------------------------------

@dataclass(frozen=True)
class ServerTest:
    group: Cell                 # the cell without its server factor
    clients: int
    diff_pct: float             # 100 x (threads / epoll - 1), means
    interval: tuple[float, float] | None
    p: float | None             # Welch two-tailed
    p_holm: float | None
    mwu_p: float | None
    n_threads: int
    n_epoll: int

    @property
    def verdict(self) -> str:
        if self.p_holm is None:
            return "untestable"
        if self.p_holm >= ALPHA:
            return "no difference shown"
        return "threads faster" if self.diff_pct > 0 else "epoll faster"


def server_tests(s: dict[Cell, list[float]]) -> list[ServerTest]:
    """Threads against epoll in every cell measured with both."""
    srv = FACTORS.index("server")
    out = []
    for cell, th in s.items():
        if cell[srv] != "threads":
            continue
        ep = s.get(cell[:srv] + ("epoll",) + cell[srv + 1:])
        if not ep:
            continue
        iv = _mean_ratio_interval(th, ep)
        w = stats.welch(th, ep)
        mw = stats.mann_whitney(th, ep)
        out.append(ServerTest(cell[:srv] + cell[srv + 1:], cell[0],
                              100 * (statistics.fmean(th) / statistics.fmean(ep) - 1),
                              (100 * (iv[0] - 1), 100 * (iv[1] - 1)) if iv else None,
                              w.p if w else None, None, mw.p if mw else None,
                              len(th), len(ep)))
    adj = stats.holm([t.p for t in out])
    return sorted((ServerTest(t.group, t.clients, t.diff_pct, t.interval, t.p, p, t.mwu_p,
                              t.n_threads, t.n_epoll) for t, p in zip(out, adj)),
                  key=lambda t: (t.group[1:], t.clients))


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
    i, srv = FACTORS.index(factor), FACTORS.index("server")
    diffs = []
    for cell, xs in s.items():
        if cell[i] != slow or cell[srv] != "epoll":
            continue
        other = s.get(cell[:i] + (fast,) + cell[i + 1:])
        if other:
            diffs.append(100 * (1 - statistics.fmean(xs) / statistics.fmean(other)))
    if not diffs:
        return None
    iv = None
    if len(diffs) >= 3:
        rng = np.random.default_rng(seed)
        d = np.asarray(diffs)
        boots = d[rng.integers(0, len(d), (4000, len(d)))].mean(axis=1)
        iv = (float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975)))
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
    change_pct: float | None    # against base, means
    interval: tuple[float, float] | None
    p_holm: float | None
    n: int


def conn_rates(records: list[TrialRecord]) -> list[ConnRate]:
    """Every crr cell's connection rate, and its change against the same cell with
    no rules and no background connection-table entries."""
    tr, ent = FACTORS.index("transaction"), FACTORS.index("entries")
    rates: dict[Cell, list[float]] = defaultdict(list)
    for r in records:
        c = r.cell(FACTORS)
        if r.status == "ok" and c[tr] == "crr":
            rates[c].append(float(r.metrics["throughput"]["msgs_per_s"]))
    out = []
    for c, xs in sorted(rates.items(), key=lambda kv: (kv[0][F_INDEX], kv[0][ent])):
        base = reference(c)[:ent] + (0,)
        ref = rates.get(base) if base != c else None
        iv = _mean_ratio_interval(xs, ref) if ref else None
        w = stats.welch(xs, ref) if ref else None
        out.append(ConnRate(c, base, statistics.fmean(xs),
                            100 * (statistics.fmean(xs) / statistics.fmean(ref) - 1)
                            if ref else None,
                            (100 * (iv[0] - 1), 100 * (iv[1] - 1)) if iv else None,
                            w.p if w else None, len(xs)))
    adj = stats.holm([x.p_holm for x in out])
    return [ConnRate(x.cell, x.base, x.rate, x.change_pct, x.interval, p, x.n)
            for x, p in zip(out, adj)]


# --- the table that ends a run --------------------------------------------------------

def table(records: list[TrialRecord]) -> Table:
    s = samples(records)
    dec = {d.cell: d for d in decreases(s)}
    t = Table(title="echo: mean throughput per client (message bytes one way)")
    for col in ("cell", "trials", "per client", "vs F=0"):
        t.add_column(col, justify="left" if col == "cell" else "right")
    for cell in sorted(s):
        d = dec.get(cell)
        t.add_row(label(cell), str(len(s[cell])),
                  f"{statistics.fmean(s[cell]) / 1e6:,.2f} Mbit/s",
                  f"{-d.decrease_pct:+.1f} %" if d else "")
    return t
