"""What a report reads: a run directory's records and conditions, and the metrics
each method records, as getters on a trial record.

A metric is one number per trial. Cells are (backend, rules, frame size); a cell's
sample is the metric over its ok trials (one per repetition).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fwbench.results import RunDir, TrialRecord

Cell = tuple[str, int, int]  # backend, rules, frame size


@dataclass(frozen=True)
class Metric:
    key: str                    # column name in the CSV tables
    label: str                  # what a reader sees on an axis
    unit: str
    higher_is_better: bool
    get: Callable[[TrialRecord], float | None]
    throughput: bool = False    # a packet rate: the cost model's input
    log_ok: bool = True         # may be drawn on a log scale (positive values)

    def value(self, rec: TrialRecord) -> float | None:
        try:
            v = self.get(rec)
        except (KeyError, TypeError, AttributeError):
            return None
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _m(*path: str) -> Callable[[TrialRecord], float | None]:
    def get(rec: TrialRecord):
        v = rec.metrics
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        return v
    return get


def _load_ms(rec: TrialRecord) -> float | None:
    return rec.load_time_s * 1e3 if rec.load_time_s is not None else None


_LOAD_TIME = Metric("load_time_ms", "rule-set load time", "ms", False, _load_ms)
_FW_CPU = Metric("fw_cpu_ns_per_pkt", "firewall CPU per packet", "ns", False,
                 _m("cpu", "fw_cpu_ns_per_pkt"))

# What each method records, headline (the packet rate) first.
METRICS: dict[str, tuple[Metric, ...]] = {
    "maxrate": (
        Metric("rx_pps", "throughput at full throttle", "packets/s", True, _m("rx_pps"),
               throughput=True),
        Metric("rtt_us_median", "ping RTT, median", "µs", False, _m("rtt_us_median")),
        Metric("load_p50_us", "one-way latency p50 at full throttle", "µs", False,
               _m("latency_us", "p50")),
        _FW_CPU, _LOAD_TIME),
    "throughput": (
        Metric("ndr_pps", "NDR (0 % loss)", "packets/s", True, _m("ndr_pps"),
               throughput=True),
        Metric("pdr_pps", "PDR", "packets/s", True, _m("pdr_pps")),
        Metric("fw_cpu_ns_per_pkt", "firewall CPU per packet at NDR", "ns", False,
               _m("cpu_at_ndr", "fw_cpu_ns_per_pkt")),
        _LOAD_TIME),
    "latency": (
        Metric("ndr_pps", "NDR (0 % loss)", "packets/s", True, _m("ndr_pps"),
               throughput=True),
        Metric("idle_p50_us", "one-way latency p50, idle", "µs", False,
               _m("latency_us", "idle", "p50")),
        Metric("idle_p99_us", "one-way latency p99, idle", "µs", False,
               _m("latency_us", "idle", "p99")),
        Metric("ndr_p99_us", "one-way latency p99 at NDR", "µs", False,
               _m("latency_us", "ndr", "p99")),
        _LOAD_TIME),
    "lossload": (
        Metric("lossless_pps", "highest lossless offered load", "packets/s", True,
               _m("max_lossless_offered_pps"), throughput=True),
        Metric("loss_at_max_pct", "loss at full throttle", "%", False,
               lambda r: 100 * r.metrics["loss_ratio_at_max"], log_ok=False),
        _LOAD_TIME),
    "fixedrate": (
        Metric("processed_pps", "processed packets/s at the fixed rate", "packets/s",
               True, _m("processed_pps"), throughput=True),
        Metric("loss_pct", "loss at the fixed rate", "%", False,
               lambda r: 100 * r.metrics["loss_ratio"], log_ok=False),
        _FW_CPU, _LOAD_TIME),
}

# Percentiles of a latency histogram, in the order a percentile curve draws them.
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99_9", 99.9))


@dataclass
class RunData:
    path: Path
    meta: dict
    records: list[TrialRecord]

    @property
    def scenario(self) -> dict:
        return self.meta.get("scenario", {})

    @property
    def method(self) -> str:
        return self.scenario.get("method", "maxrate")

    @property
    def name(self) -> str:
        return self.scenario.get("name", self.path.name)

    @property
    def ok(self) -> list[TrialRecord]:
        return [r for r in self.records if r.status == "ok"]

    def metrics(self) -> list[Metric]:
        """The method's metrics that at least one ok trial recorded."""
        return [m for m in METRICS.get(self.method, ())
                if any(m.value(r) is not None for r in self.ok)]

    def headline(self) -> Metric | None:
        return next((m for m in self.metrics() if m.throughput), None)

    def samples(self, metric: Metric) -> dict[Cell, list[float]]:
        """Cell -> the metric over its ok trials, in repetition order."""
        out: dict[Cell, list[float]] = defaultdict(list)
        for r in sorted(self.ok, key=lambda r: r.repetition):
            v = metric.value(r)
            if v is not None:
                out[(r.backend, r.rules, r.frame_size)].append(v)
        return dict(out)

    def backends(self) -> list[str]:
        """In the order the scenario planned them."""
        planned = self.scenario.get("backends") or []
        seen = {r.backend for r in self.records}
        return [b for b in planned if b in seen] + sorted(seen - set(planned))

    def frame_sizes(self) -> list[int]:
        return sorted({r.frame_size for r in self.records})

    def rule_counts(self) -> list[int]:
        return sorted({r.rules for r in self.records if r.backend != "none"})


def load(path: str | Path) -> RunData:
    rd = RunDir.open(path)
    return RunData(Path(path), rd.meta(), rd.records())
