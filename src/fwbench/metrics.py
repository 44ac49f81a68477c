"""The metric registry: what each method records (declared in its experiment's
package, fwbench.catalog), one definition for everything that reads records (the
table that ends a run, adaptive repetitions, report, compare). A metric is one
number per trial, read from its record; the first of a method's metrics is its
headline, the figure its cells are compared and repeated on.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from fwbench import catalog
from fwbench.results import TrialRecord


@dataclass(frozen=True)
class Metric:
    key: str                    # column name in the CSV tables
    label: str                  # what a reader sees on an axis
    unit: str
    higher_is_better: bool
    get: Callable[[TrialRecord], float | None]
    throughput: bool = False    # a packet rate: the cost model's input
    log_ok: bool = True         # may be drawn on a log scale (positive values)
    column: str = ""            # its head in the table that ends a run (headline and second)

    def value(self, rec: TrialRecord) -> float | None:
        try:
            v = self.get(rec)
        except (KeyError, TypeError, AttributeError):
            return None
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def at(*path: str) -> Callable[[TrialRecord], float | None]:
    """A metric read from the record's metrics at that path of keys."""
    def get(rec: TrialRecord):
        v = rec.metrics
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        return v
    return get


def load_ms(rec: TrialRecord) -> float | None:
    return rec.load_time_s * 1e3 if rec.load_time_s is not None else None


# Two metrics most experiments record.
LOAD_TIME = Metric("load_time_ms", "rule-set load time", "ms", False, load_ms)
FW_CPU = Metric("fw_cpu_ns_per_pkt", "firewall CPU per packet", "ns", False,
                at("cpu", "fw_cpu_ns_per_pkt"))


def round_trips(records) -> bool:
    """Whether the run's engine timed round trips (hosts on separate clocks, or
    asked for): its latency figures are round-trip times, labelled so."""
    return any(r.metrics.get("latency_kind") == "round trip" for r in records
               if r.status == "ok")


def relabelled(ms: tuple[Metric, ...], records) -> tuple[Metric, ...]:
    """`ms` as a run whose `records` timed round trips must show them."""
    if not round_trips(records):
        return ms
    return tuple(replace(m, label=m.label.replace("one-way", "round-trip"),
                         column=m.column.replace("one-way", "round-trip"))
                 for m in ms)


def title(method: str, records) -> str:
    """What the method's headline means (its declaration's title), for a run of
    `records`."""
    t = catalog.room(method).title
    return t.replace("one-way latency", "round-trip latency") if round_trips(records) else t


def of(method: str) -> tuple[Metric, ...]:
    """The method's metrics, headline first (its declaration's, fwbench.catalog)."""
    room = catalog.room(method)
    if room is None:
        raise ValueError(f"method {method} records no metrics fwbench knows")
    return room.metrics


def known(method: str) -> tuple[Metric, ...]:
    """The method's metrics, or none for a method not in the catalog."""
    room = catalog.room(method)
    return () if room is None else room.metrics


def headline(method: str) -> Metric:
    return of(method)[0]
