"""The table that ends a run: each cell's headline figures (median over repetitions)
per backend, rule count and frame size, with the ratio to `none` (no firewall) at the
same frame size. Which figures are the headline depends on the method."""
from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Callable

from rich.table import Table

from fwbench.results import TrialRecord

Getter = Callable[[dict], float | None]


def _idle_p50(m: dict) -> float | None:
    return m.get("latency_us", {}).get("idle", {}).get("p50")


# method -> (title, (primary column, getter), (secondary column, getter))
HEADLINES: dict[str, tuple[str, tuple[str, Getter], tuple[str, Getter]]] = {
    "maxrate": ("pps = packets reaching the server per second, sender at full throttle",
                ("rx pps", lambda m: m.get("rx_pps")),
                ("RTT us", lambda m: m.get("rtt_us_median"))),
    "throughput": ("NDR: highest load with 0 loss; PDR: with <= 0.5 % loss (MLRsearch)",
                   ("NDR pps", lambda m: m.get("ndr_pps")),
                   ("PDR pps", lambda m: m.get("pdr_pps"))),
    "latency": ("one-way latency, engine stamp to XDP sink; NDR from the same search",
                ("NDR pps", lambda m: m.get("ndr_pps")),
                ("idle p50 us", _idle_p50)),
    "lossload": ("highest offered load without loss (RFC 2544 frame loss rate)",
                 ("lossless pps", lambda m: m.get("max_lossless_offered_pps")),
                 ("loss at max %", lambda m: 100 * m["loss_ratio_at_max"])),
    "fixedrate": ("seed 003 flows: 128 B @ 15, 512 B @ 30, 1280 B @ 45 Mbit/s",
                  ("processed pps", lambda m: m.get("processed_pps")),
                  ("loss %", lambda m: 100 * m["loss_ratio"])),
}


def _median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def medians(records: list[TrialRecord]) -> dict[tuple[str, int, int], dict]:
    """(backend, rules, frame_size) -> {primary, secondary, n, not_ok} over ok trials."""
    groups: dict[tuple, list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[(r.backend, r.rules, r.frame_size)].append(r)
    out = {}
    for key, recs in groups.items():
        ok = [r for r in recs if r.status == "ok"]
        _, (_, first), (_, second) = HEADLINES[recs[0].method]
        out[key] = {"primary": _median([first(r.metrics) for r in ok]),
                    "secondary": _median([second(r.metrics) for r in ok]),
                    "n": len(ok), "not_ok": len(recs) - len(ok)}
    return out


def table(records: list[TrialRecord], backend_order: list[str]) -> Table:
    method = records[0].method if records else "maxrate"
    title, (col1, _), (col2, _) = HEADLINES[method]
    cells = medians(records)
    t = Table(title=f"{method}: median over repetitions (frame size incl. FCS; {title})")
    for col, just in (("frame", "right"), ("backend", "left"), ("rules", "right"),
                      (col1, "right"), ("x none", "right"), (col2, "right"),
                      ("n ok", "right"), ("not ok", "right")):
        t.add_column(col, justify=just)
    order = {b: i for i, b in enumerate(backend_order)}
    for (b, n, f) in sorted(cells, key=lambda k: (k[2], order.get(k[0], 99), k[1])):
        c = cells[(b, n, f)]
        base = cells.get(("none", 0, f), {}).get("primary")
        ratio = f"{c['primary'] / base:.2f}" if c["primary"] and base else "-"
        t.add_row(str(f), b, f"{n:,}" if b != "none" else "-",
                  f"{c['primary']:,.0f}" if c["primary"] is not None else "-", ratio,
                  f"{c['secondary']:,.1f}" if c["secondary"] is not None else "-",
                  str(c["n"]), str(c["not_ok"]) if c["not_ok"] else "")
    return t
