"""The table that ends a run: each cell's headline figures (median over repetitions)
per backend, rule count and frame size, with the ratio to `none` (no firewall) at the
same frame size. The figures are the method's headline and second metric
(fwbench.metrics)."""
from __future__ import annotations

import statistics
from collections import defaultdict

from rich.table import Table

from fwbench import metrics
from fwbench.results import SWEEP_FACTORS, TrialRecord

def _median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def medians(records: list[TrialRecord]) -> dict[tuple[str, int, int], dict]:
    """(backend, rules, frame_size) -> {primary, secondary, n, not_ok} over ok trials."""
    groups: dict[tuple, list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[r.cell(SWEEP_FACTORS)].append(r)
    out = {}
    for key, recs in groups.items():
        ok = [r for r in recs if r.status == "ok"]
        first, second = metrics.of(recs[0].method)[:2]
        out[key] = {"primary": _median([first.value(r) for r in ok]),
                    "secondary": _median([second.value(r) for r in ok]),
                    "n": len(ok), "not_ok": len(recs) - len(ok)}
    return out


def table(records: list[TrialRecord], backend_order: list[str]) -> Table:
    method = records[0].method if records else "maxrate"
    title = metrics.title(method, records)
    col1, col2 = (m.column for m in metrics.relabelled(metrics.of(method), records)[:2])
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
