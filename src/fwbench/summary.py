"""The table that ends a run. `render` draws it for every experiment from the
title, columns and rows the experiment gives (experiments.base.Experiment.summary);
`table` is the rule-count sweeps': each cell's headline figures (median over
repetitions) per backend, rule count and frame size, with the ratio to `none` (no
firewall) at the same frame size, the figures being the method's headline and
second metric (fwbench.metrics)."""
from __future__ import annotations

import statistics
from collections import defaultdict

from typing import Iterable, Sequence

from rich.table import Table

from fwbench import metrics
from fwbench.results import SWEEP_FACTORS, SweepCell, TrialRecord

def render(title: str, columns: Sequence[tuple[str, str]], rows: Iterable[Sequence],
           caption: str | None = None) -> Table:
    """The table that ends a run, for every experiment: `columns` are (head,
    justify), each row one cell's texts (rich markup or Text)."""
    t = Table(title=title, caption=caption)
    for head, justify in columns:
        t.add_column(head, justify=justify)
    for row in rows:
        t.add_row(*row)
    return t


def _median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def medians(records: list[TrialRecord]) -> dict[SweepCell, dict]:
    """(backend, rules, frame_size) -> {primary, secondary, n, not_ok} over ok trials."""
    groups: dict[SweepCell, list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[SweepCell(*r.cell(SWEEP_FACTORS))].append(r)
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
    order = {b: i for i, b in enumerate(backend_order)}

    def row(k: SweepCell) -> list[str]:
        c = cells[k]
        base = cells.get(k._replace(backend="none", rules=0), {}).get("primary")
        ratio = f"{c['primary'] / base:.2f}" if c["primary"] and base else "-"
        return [str(k.frame_size), k.backend, f"{k.rules:,}" if k.backend != "none" else "-",
                f"{c['primary']:,.0f}" if c["primary"] is not None else "-", ratio,
                f"{c['secondary']:,.1f}" if c["secondary"] is not None else "-",
                str(c["n"]), str(c["not_ok"]) if c["not_ok"] else ""]
    return render(f"{method}: median over repetitions (frame size incl. FCS; {title})",
                  [("frame", "right"), ("backend", "left"), ("rules", "right"),
                   (col1, "right"), ("x none", "right"), (col2, "right"),
                   ("n ok", "right"), ("not ok", "right")],
                  (row(k) for k in sorted(cells, key=lambda k: (
                      k.frame_size, order.get(k.backend, 99), k.rules))))
