"""How a report writes a number: by the metric's unit, and changes as signed percent."""
from __future__ import annotations

import math

from fwbench.metrics import Metric

FORMATS = {"packets/s": "{:,.0f}", "µs": "{:,.1f}", "ns": "{:,.1f}", "%": "{:.2f}",
           "ms": "{:,.3f}"}


def fmt(metric: Metric, v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return FORMATS.get(metric.unit, "{:.4g}").format(v)


def fmt_pct(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{100 * v:+.1f} %"
