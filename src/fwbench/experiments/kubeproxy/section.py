"""`fwbench report` of a kubeproxy run: what a cluster operator reads first.

First-packet latency (SYN to SYN-ACK through kube-proxy's DNAT) per mode and
number of services, each percentile over every connection of the cell with its
distribution-free interval, the published figures beside; nftables mode against
iptables mode, as ratios of the trials' percentiles paired by round; the
connection rate each configuration held; the full sync's time; the endpoint
spread; and the published claims, each decided (holds / does not hold / not
shown). Then every metric as any experiment has it (report.cells).
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict

from fwbench import claims as cl
from fwbench.experiments.kubeproxy import DIRECT
from fwbench.findings import EQUAL, NOT_SHOWN, Claim, Finding, direction
from fwbench.report.cells import CellReport, References
from fwbench.report.data import RunData
from fwbench.report.document import Block, Bullets, Heading, Para, Table
from scipy.stats import norm

from fwbench.traffic.connections import Latency, bucket_width

QUANTILES = ("p01", "p50", "p90", "p99")
# Bonferroni over the two percentiles a ratio of pooled percentiles reads.
LEVEL = 0.95

# kubernetes.io, "NFTables mode for kube-proxy" (2025-02-28): iptables mode's
# first-packet round trip, read off its chart, ms: services -> (p50, p99).
BLOG = "kubernetes.io blog, 2025-02-28"
PUBLISHED_IPTABLES = {5000: (0.047, 0.15), 10000: (0.062, 0.26), 30000: (0.27, 0.71)}
# kubernetes PR #126013: one Service added with 10,000 present, ~8 min -> ~141 ms;
# kubernetes issue #96018: a 695,992-line iptables-restore took 12.8 s.
PUBLISHED_SYNC = ("kubernetes issue #96018: one iptables-restore of 695,992 lines took "
                  "12.8 s (54,000 lines/s); PR #126013: adding one Service with 10,000 "
                  "present fell from ~8 min to ~141 ms (kube-proxy's whole sync, its "
                  "own computation included)")


def _claim(key: str, text: str, seed: str, test: str, rule) -> Claim:
    return Claim("kube", key, text, seed, test, rule)


CLAIMS = (
    _claim("nft-p50-at-iptables-p01",
           "nftables mode's median first packet is about iptables mode's 1st percentile, "
           "at 5,000 and 10,000 services", BLOG,
           "nftables p50 / iptables p01 per trial, paired by round, the mean log ratio "
           "over 5,000 and 10,000 services", cl.Rule("equal", EQUAL)),
    _claim("nft-p99-below-iptables-p01",
           "at 30,000 services nftables mode's 99th percentile beats iptables mode's "
           "1st percentile", BLOG,
           "nftables p99 / iptables p01 per trial at 30,000 services, paired by round",
           cl.Rule("below")),
    _claim("iptables-grows",
           "iptables mode's median first packet grows with services: 5.7x from 5,000 "
           "to 30,000", f"{BLOG}: 0.047 -> 0.27 ms",
           "iptables p50 at 30,000 / at 5,000 services, paired by round",
           direction(0.27 / 0.047)),
    _claim("nft-flat",
           "nftables mode's first packet does not grow with services", BLOG,
           "nftables p50 at 30,000 / at 5,000 services, paired by round",
           cl.Rule("equal", EQUAL)),
)


def pooled(hists: list[list]) -> Latency | None:
    """Every connection of a cell's trials as one distribution (the engine's
    histograms added)."""
    acc: dict[float, int] = defaultdict(int)
    for h in hists:
        for lo, n in h:
            acc[float(lo)] += int(n)
    if not acc:
        return None
    hist = tuple(sorted(acc.items()))
    return Latency(sum(acc.values()), None, None, None, None, None, None, None, None, hist)


def quantile(d: Latency, q: float) -> float:
    """The q-quantile of a histogram: the bucket holding rank ceil(nq), its midpoint."""
    n = sum(c for _, c in d.hist)
    rank, seen = max(1, math.ceil(n * q)), 0
    for lo, c in d.hist:
        seen += c
        if seen >= rank:
            return (lo + bucket_width(lo) / 2) / 1000
    return d.hist[-1][0] / 1000


class Cells:
    """The run's ok trials by cell, with what the tables read."""

    def __init__(self, data: RunData):
        self.data = data
        self.by: dict[tuple, list] = defaultdict(list)
        for r in data.ok:
            if "connect" in r.metrics:
                self.by[data.cell(r)].append(r)

    def where(self, mode: str, services: int) -> list[tuple]:
        return [c for c in self.by if c.mode == mode and c.services == services]

    def values(self, c, q: str) -> tuple[list[float], list[int]]:
        rs = [r for r in self.by[c] if r.metrics["connect"]["rtt"].get(q) is not None]
        return [r.metrics["connect"]["rtt"][q] for r in rs], [r.repetition for r in rs]

    def estimate(self, a, qa: str, b, qb: str) -> cl.Estimate | None:
        va, ra = self.values(a, qa)
        vb, rb = self.values(b, qb)
        return cl.estimate(va, vb, ra, rb)


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def latency_table(cs: Cells) -> Table:
    z = _z(1 - (1 - LEVEL) / 2)
    rows = []
    for c in sorted(cs.by, key=lambda c: (c.mode != DIRECT, c.mode, c.services, c.backend)):
        d = pooled([r.metrics["connect"].get("rtt_hist") or [] for r in cs.by[c]])
        if d is None:
            continue
        cells = []
        for q in QUANTILES:
            p = float(q[1:]) / 100
            lo, hi = d.percentile_interval(p, z)
            cells.append(f"{quantile(d, p):,.1f}\n[{lo:,.1f}, {hi:,.1f}]")
        pub = PUBLISHED_IPTABLES.get(c.services) if c.mode == "iptables" else None
        rows.append(["no rules (direct)" if c.mode == DIRECT else c.mode, c.backend,
                     "-" if c.mode == DIRECT else f"{c.services:,}", str(len(cs.by[c])),
                     f"{d.count:,}", *cells,
                     f"{1e3 * pub[0]:,.0f} / {1e3 * pub[1]:,.0f}" if pub else ""])
    return Table(["mode", "backend", "services", "trials", "connections", *QUANTILES,
                  "published p50 / p99"], rows,
                 "First-packet round trip (µs): the client kernel's SYN -> SYN-ACK time "
                 "of each new connection to a service drawn at random, through the "
                 "firewall and its DNAT to an endpoint. Each percentile over every "
                 f"connection of the cell's trials, with a distribution-free {LEVEL:.0%} "
                 "interval (order statistics, bucket edges included); it holds the "
                 "connections' spread, not the trials': the ratios below are tested "
                 f"on trials. Published: iptables mode, {BLOG}, read off its chart, on "
                 "its own cluster (a different machine: compare shapes, not levels).",
                 id="kube-latency")


def _z(p: float) -> float:
    return float(norm.ppf(p))


def ratio_table(cs: Cells) -> Table:
    rows = []
    for n in sorted({c.services for c in cs.by if c.mode != DIRECT}):
        for a in cs.where("nftables", n):
            for b in cs.where("iptables", n):
                row = [f"{n:,}", f"{a.backend} / {b.backend}"]
                for q in ("p50", "p99"):
                    est = cs.estimate(a, q, b, q)
                    row.append(cl.show(est) if est else "-")
                rows.append(row)
    return Table(["services", "nftables mode / iptables mode", "p50 ratio", "p99 ratio"],
                 rows, "The trials' percentiles, nftables mode over iptables mode, "
                 "paired by round (the log ratio's t interval); below 1: nftables mode "
                 "is faster.", id="kube-ratios")


def rate_table(cs: Cells) -> Table:
    rows = []
    for c in sorted(cs.by, key=lambda c: (c.mode != DIRECT, c.mode, c.services, c.backend)):
        got = [r.metrics.get("search") for r in cs.by[c] if r.metrics.get("search")]
        if not got:
            continue
        held = [g["held"] for g in got if g.get("held")]
        limits = sorted({g["limited_by"] for g in got if g.get("limited_by")})
        rows.append(["no rules (direct)" if c.mode == DIRECT else c.mode, c.backend,
                     "-" if c.mode == DIRECT else f"{c.services:,}",
                     f"{statistics.median(held):,.0f}" if held else "-",
                     f"{min(held):,.0f}..{max(held):,.0f}" if held else "-",
                     ", ".join(limits) or "a failed or slow connect"])
    return Table(["mode", "backend", "services", "held, median conn/s", "trials' range",
                  "limited by"], rows,
                 "The highest rate of new connections held without a failed or slow "
                 "connect (a step of search_step_s; doubling, then the bracket halved). "
                 "Limited by the generator: the rate is a floor, the firewall held more.",
                 id="kube-rate")


def flows_table(cs: Cells) -> Table | None:
    rows = []
    for c in sorted(cs.by, key=lambda c: (c.mode != DIRECT, c.mode, c.services, c.backend)):
        got = [r.metrics["flows"] for r in cs.by[c] if r.metrics.get("flows")]
        if not got:
            continue
        rtt = [g["rtt"]["p50"] / 1e3 for g in got if g["rtt"].get("p50") is not None]
        rows.append(["no rules (direct)" if c.mode == DIRECT else c.mode, c.backend,
                     "-" if c.mode == DIRECT else f"{c.services:,}",
                     _median([g["msgs_per_s"] for g in got], ",.0f"),
                     _median(rtt, ",.1f"), str(got[0]["flows"]), str(len(got))])
    if not rows:
        return None
    return Table(["mode", "backend", "services", "messages/s", "echo p50 us", "flows",
                  "trials"], rows,
                 "Established TCP flows to one service, each echoing one message at a "
                 "time: after its first packet a flow's packets take the connection "
                 "table's fast path and no nat rule, so the rate is expected flat in the "
                 "number of services. Medians, the trials' range in brackets.",
                 id="kube-flows")


def sync_table(cs: Cells) -> Table:
    rows = []
    for c in sorted(cs.by, key=lambda c: (c.mode, c.services, c.backend)):
        if c.mode == DIRECT:
            continue
        t = [r.load_time_s for r in cs.by[c] if r.load_time_s is not None]
        if not t:
            continue
        rows.append([c.mode, c.backend, f"{c.services:,}", f"{statistics.median(t):,.2f}",
                     f"{min(t):,.2f}..{max(t):,.2f}", str(len(t))])
    return Table(["mode", "backend", "services", "full sync s, median", "range", "trials"],
                 rows, "The whole rule set loaded in one step into an emptied firewall "
                 "(iptables-restore / nft -f of the rendering), as kube-proxy's full sync "
                 f"writes it. Published: {PUBLISHED_SYNC}.", id="kube-sync")


def _median(xs: list[float], fmt: str) -> str:
    return "-" if not xs else format(statistics.median(xs), fmt) + \
        (f" ({format(min(xs), fmt)}..{format(max(xs), fmt)})" if len(xs) > 1 else "")


def control_table(cs: Cells) -> Table | None:
    """The control plane's figures by cell: each mechanism's one service added
    and removed, the listing, the memory held."""
    found = [(c, [r.metrics["control"] for r in cs.by[c] if r.metrics.get("control")])
             for c in sorted(cs.by, key=lambda c: (c.mode, c.services, c.backend))
             if c.mode != DIRECT]
    found = [(c, got) for c, got in found if got]
    if not found:
        return None
    mechs = list(dict.fromkeys(m for _, got in found for g in got for m in g["mechanisms"]))
    rows = []
    for c, got in found:
        row = [c.mode, c.backend, f"{c.services:,}"]
        for m in mechs:
            for what in ("add", "remove"):
                row.append(_median([g["mechanisms"][m][what]["command_s"] * 1e3
                                    for g in got if m in g["mechanisms"]], ",.1f"))
        row.append(_median([g["listing"]["s"] for g in got if g.get("listing")], ",.2f"))
        row.append(_median([r.metrics["memory"]["held_bytes"] / 2**20 for r in cs.by[c]
                            if r.metrics.get("memory") and r.metrics.get("control")],
                           ",.1f"))
        row.append(str(len(got)))
        rows.append(row)
    head = ["mode", "backend", "services",
            *(f"{m} {w} ms" for m in mechs for w in ("add", "remove")),
            "listing s", "kernel memory MiB", "trials"]
    return Table(head, rows,
                 "One service created and deleted with the others present, by each "
                 "update mechanism (sync: kube-proxy's partial sync, which writes its own "
                 "chains whole at every sync; batch: the smallest change in one "
                 "transaction), timed on the firewall from the first command's start to "
                 "the last one's end, each change proved against the kernel's listing; "
                 "the whole rule set listed by its own tool (iptables-save, nft list "
                 "ruleset); the kernel memory it holds (read on both sides of the trial's "
                 "load into an emptied firewall). Medians, "
                 "the trials' range in brackets. Published: kubernetes PR #126013, one "
                 "Service added with 10,000 present in ~141 ms, down from ~8 min "
                 "(kube-proxy's whole sync, its own computation included: these times "
                 "are the kernel's and the tool's part of it).", id="kube-control")


def spread_bullets(cs: Cells) -> list[str]:
    out = []
    for c in sorted(cs.by, key=lambda c: (c.mode, c.services, c.backend)):
        if c.mode == DIRECT:
            continue
        ps = [(r.metrics.get("spread") or {}).get("service", {}).get("p") for r in cs.by[c]]
        pos = [(r.metrics.get("position") or {}).get("p") for r in cs.by[c]]
        ps, pos = [p for p in ps if p is not None], [p for p in pos if p is not None]
        if ps or pos:
            out.append(f"{c.backend} {c.mode} mode, {c.services:,} services: one "
                       f"service's endpoints p = {_ps(ps)}; by position over all "
                       f"services p = {_ps(pos)}")
    return out


def _ps(ps: list[float]) -> str:
    return ", ".join(f"{p:.2f}" for p in ps) if ps else "-"


def _finding(c: Claim, est: cl.Estimate | None, what: str) -> Finding:
    if est is None:
        return Finding(c, "-", NOT_SHOWN, f"not measured: {what}")
    d = cl.decide(c.rule, est)
    return Finding(c, cl.show(est), d.verdict, d.why)


def findings(cs: Cells) -> list[Finding]:
    def pairs(n, qa, qb):
        return [e for a in cs.where("nftables", n) for b in cs.where("iptables", n)
                if (e := cs.estimate(a, qa, b, qb)) is not None]

    def growth(mode, q):
        return [e for a in cs.where(mode, 30000) for b in cs.where(mode, 5000)
                if a.backend == b.backend and (e := cs.estimate(a, q, b, q)) is not None]

    first = cl.pooled(pairs(5000, "p50", "p01") + pairs(10000, "p50", "p01"), "pairs")
    return [
        _finding(CLAIMS[0], first, "both modes at 5,000 or 10,000 services"),
        _finding(CLAIMS[1], cl.pooled(pairs(30000, "p99", "p01"), "pairs"),
                 "both modes at 30,000 services"),
        _finding(CLAIMS[2], cl.pooled(growth("iptables", "p50"), "backends"),
                 "iptables mode at 5,000 and 30,000 services"),
        _finding(CLAIMS[3], cl.pooled(growth("nftables", "p50"), "backends"),
                 "nftables mode at 5,000 and 30,000 services"),
    ]


def findings_table(found: list[Finding]) -> Table:
    return Table(["claim", "published", "decided by", "ours [interval]", "verdict", "why"],
                 [[f.claim.text, f.claim.seed, f"{f.claim.test}; {f.claim.margin}",
                   f.ours, f.verdict, f.why] for f in found],
                 "The published claims about kube-proxy's modes, each decided on this "
                 "run's trials (the verdict's own interval level).", id="kube-claims",
                 kind="wrap")


def direct_reference(data: RunData, cells: dict) -> References:
    """Every cell against the cell without rules, where the run has one."""
    direct = [c for c in cells if c.mode == DIRECT]
    return {c: direct[0] for c in cells if direct and c.mode != DIRECT}


def lead(data: RunData) -> list[Block]:
    cs = Cells(data)
    ratios = ratio_table(cs)
    found = findings(cs)
    return [Heading(2, "Kubernetes service proxying", "kube-proxy"),
            Para("kube-proxy's rule sets (the kube-proxy template: its iptables mode "
                 "and its nftables mode as kube-proxy writes them) on the firewall, "
                 "which plays the node; new TCP connections from the client to "
                 "services drawn at random, DNATed to endpoints the server holds."),
            Heading(3, "The published claims"), findings_table(found),
            Heading(3, "First-packet latency"), latency_table(cs),
            Heading(3, "nftables mode against iptables mode"), ratios,
            Heading(3, "Connection rate"), rate_table(cs),
            *([Heading(3, "Established flows"), t] if (t := flows_table(cs)) else []),
            Heading(3, "Full sync"), sync_table(cs),
            *([Heading(3, "Control plane: one service at a time"), t]
              if (t := control_table(cs)) else []),
            Heading(3, "Endpoint spread (chi-square against uniform)"),
            Bullets(spread_bullets(cs) or ["no spread measured"])]


def report(data: RunData) -> CellReport:
    return CellReport(data, direct_reference, lead(data), tests_note=(
        "Tests in the metric sections below: each cell against the cell without rules "
        "(direct), as a ratio on the log scale paired by round, with Holm's correction."))
