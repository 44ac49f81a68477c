"""The table that ends a run: median packet rate and RTT per backend, rule count and
frame size, with the ratio to `none` (no firewall) at the same frame size."""
from __future__ import annotations

import statistics
from collections import defaultdict

from rich.table import Table

from fwbench.results import TrialRecord


def medians(records: list[TrialRecord]) -> dict[tuple[str, int, int], dict]:
    """(backend, rules, frame_size) -> {rx_pps, rtt_us, n, failed} over ok trials."""
    groups: dict[tuple, list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[(r.backend, r.rules, r.frame_size)].append(r)
    out = {}
    for key, recs in groups.items():
        ok = [r for r in recs if r.status == "ok"]
        out[key] = {
            "rx_pps": statistics.median(r.metrics["rx_pps"] for r in ok) if ok else None,
            "rtt_us": statistics.median(r.metrics["rtt_us_median"] for r in ok) if ok else None,
            "n": len(ok),
            "not_ok": len(recs) - len(ok),
        }
    return out


def table(records: list[TrialRecord], backend_order: list[str]) -> Table:
    cells = medians(records)
    t = Table(title="Median over repetitions (frame size incl. FCS; pps = packets reaching "
                    "the server per second)")
    for col, just in (("frame", "right"), ("backend", "left"), ("rules", "right"),
                      ("rx pps", "right"), ("x none", "right"), ("RTT us", "right"),
                      ("n ok", "right"), ("not ok", "right")):
        t.add_column(col, justify=just)
    order = {b: i for i, b in enumerate(backend_order)}
    for (b, n, f) in sorted(cells, key=lambda k: (k[2], order.get(k[0], 99), k[1])):
        c = cells[(b, n, f)]
        base = cells.get(("none", 0, f), {}).get("rx_pps")
        ratio = f"{c['rx_pps'] / base:.2f}" if c["rx_pps"] and base else "-"
        t.add_row(str(f), b, f"{n:,}" if b != "none" else "-",
                  f"{c['rx_pps']:,.0f}" if c["rx_pps"] is not None else "-", ratio,
                  f"{c['rtt_us']:.0f}" if c["rtt_us"] is not None else "-",
                  str(c["n"]), str(c["not_ok"]) if c["not_ok"] else "")
    return t
