"""The metric registry: what each method records, one definition for everything
that reads records (the table that ends a run, adaptive repetitions, report,
compare). A metric is one number per trial, read from its record; the first of a
method's metrics is its headline, the figure its cells are compared and repeated
on.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

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


def _m(*path: str) -> Callable[[TrialRecord], float | None]:
    def get(rec: TrialRecord):
        v = rec.metrics
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        return v
    return get


def _load_ms(rec: TrialRecord) -> float | None:
    return rec.load_time_s * 1e3 if rec.load_time_s is not None else None


def _per_cpu_second(rec: TrialRecord) -> float | None:
    ns = rec.metrics.get("fw_busy_ns_per_pkt")
    return 1e9 / ns if isinstance(ns, (int, float)) and ns > 0 else None


_LOAD_TIME = Metric("load_time_ms", "rule-set load time", "ms", False, _load_ms)
_FW_CPU = Metric("fw_cpu_ns_per_pkt", "firewall CPU per packet", "ns", False,
                 _m("cpu", "fw_cpu_ns_per_pkt"))

# What each method records, headline (the packet rate) first.
METRICS: dict[str, tuple[Metric, ...]] = {
    "maxrate": (
        Metric("rx_pps", "throughput at full throttle", "packets/s", True, _m("rx_pps"),
               throughput=True, column="rx pps"),
        Metric("rtt_us_median", "ping RTT, median", "µs", False, _m("rtt_us_median"),
               column="RTT us"),
        Metric("load_p50_us", "one-way latency p50 at full throttle", "µs", False,
               _m("latency_us", "p50")),
        _FW_CPU, _LOAD_TIME),
    "throughput": (
        Metric("ndr_pps", "NDR (0 % loss)", "packets/s", True, _m("ndr_pps"),
               throughput=True, column="NDR pps"),
        Metric("pdr_pps", "PDR", "packets/s", True, _m("pdr_pps"), column="PDR pps"),
        Metric("fw_cpu_ns_per_pkt", "firewall CPU per packet at NDR", "ns", False,
               _m("cpu_at_ndr", "fw_cpu_ns_per_pkt")),
        _LOAD_TIME),
    "latency": (
        Metric("ndr_pps", "NDR (0 % loss)", "packets/s", True, _m("ndr_pps"),
               throughput=True, column="NDR pps"),
        Metric("idle_p50_us", "one-way latency p50, idle", "µs", False,
               _m("latency_us", "idle", "p50"), column="idle p50 us"),
        Metric("idle_p99_us", "one-way latency p99, idle", "µs", False,
               _m("latency_us", "idle", "p99")),
        Metric("ndr_p99_us", "one-way latency p99 at NDR", "µs", False,
               _m("latency_us", "ndr", "p99")),
        _LOAD_TIME),
    "lossload": (
        Metric("lossless_pps", "highest lossless offered load", "packets/s", True,
               _m("max_lossless_offered_pps"), throughput=True, column="lossless pps"),
        Metric("loss_at_max_pct", "loss at full throttle", "%", False,
               lambda r: 100 * r.metrics["loss_ratio_at_max"], log_ok=False,
               column="loss at max %"),
        _LOAD_TIME),
    "fixedrate": (
        Metric("processed_pps", "processed packets/s at the fixed rate", "packets/s",
               True, _m("processed_pps"), throughput=True, column="processed pps"),
        Metric("loss_pct", "loss at the fixed rate", "%", False,
               lambda r: 100 * r.metrics["loss_ratio"], log_ok=False, column="loss %"),
        _FW_CPU, _LOAD_TIME),
    # The headline is the cost as a rate (packets one second of the firewall CPU would
    # carry at it), so the cost model's 1/pps is the measured ns per packet itself.
    "cpucost": (
        Metric("cpu_pps", "packets per second of firewall CPU", "packets/s", True,
               _per_cpu_second, throughput=True, column="pps per CPU s"),
        Metric("fw_busy_ns_per_pkt", "firewall CPU per packet at a fixed load", "ns", False,
               _m("fw_busy_ns_per_pkt"), column="ns/pkt"),
        Metric("bpf_ns_per_pkt", "eBPF program run time per packet", "ns", False,
               _m("bpf_ns_per_pkt"), column="prog ns/pkt"),
        Metric("fw_busy_pct", "firewall CPU busy at the fixed load", "%", False,
               lambda r: 100 * r.metrics["fw_busy_fraction"], log_ok=False),
        Metric("processed_pps", "processed packets/s at the fixed load", "packets/s", True,
               _m("processed_pps")),
        _FW_CPU, _LOAD_TIME),
    # Seed 002's drop positions: cells are (treatment, set size, frame size).
    "droprate": (
        Metric("disposed_pps", "flood packets disposed of per second", "packets/s", True,
               _m("disposed_pps"), throughput=True, column="disposed pps"),
        Metric("cpu_ns_per_pkt", "path CPU per packet", "ns", False, _m("cpu_ns_per_pkt"),
               column="ns/pkt"),
        Metric("softirq_ns_per_pkt", "softirq CPU per packet", "ns", False,
               _m("softirq_ns_per_pkt")),
        _LOAD_TIME),
    "loadlatency": (
        Metric("rtt_us_mean", "ping RTT, mean", "µs", False, _m("ping", "mean"),
               column="RTT mean us"),
        Metric("probe_p50_us", "one-way latency p50 (engine probes)", "µs", False,
               _m("probes", "p50"), column="one-way p50 us"),
        Metric("rtt_us_median", "ping RTT, median", "µs", False, _m("ping", "median")),
        Metric("rtt_us_p99", "ping RTT, p99", "µs", False, _m("ping", "p99")),
        Metric("probe_p99_us", "one-way latency p99 (engine probes)", "µs", False,
               _m("probes", "p99")),
        Metric("load_up_gbps", "TCP load client to server", "Gbit/s", True,
               lambda r: r.metrics["load"]["up_bps"] / 1e9),
        Metric("load_down_gbps", "TCP load server to client", "Gbit/s", True,
               lambda r: r.metrics["load"]["down_bps"] / 1e9),
        Metric("conntrack_entries", "connection-table entries", "entries", False,
               _m("conntrack", "count"), log_ok=False),
        _LOAD_TIME),
    # Seed 001's echo: cells are (clients, protocol, family, frame, server, F, backend,
    # transaction, entries); throughput is message bytes one way.
    "echo": (
        Metric("client_mean_mbps", "throughput per client, mean", "Mbit/s", True,
               lambda r: r.metrics["throughput"]["client_mean_bps"] / 1e6,
               column="per client Mbit/s"),
        Metric("rtt_us_p50", "round trip p50", "µs", False, _m("rtt_us", "p50"),
               column="RTT p50 us"),
        Metric("client_p5_mbps", "throughput per client, 5th percentile", "Mbit/s", True,
               lambda r: r.metrics["throughput"]["client_p5_bps"] / 1e6),
        Metric("aggregate_mbps", "throughput, all clients", "Mbit/s", True,
               lambda r: r.metrics["throughput"]["aggregate_bps"] / 1e6),
        Metric("jain", "fairness (Jain's index)", "", True, _m("throughput", "jain"),
               log_ok=False),
        Metric("rtt_us_p99", "round trip p99", "µs", False, _m("rtt_us", "p99")),
        Metric("server_cs_per_msg", "server context switches per message", "", False,
               _m("context_switches", "server_per_msg"), log_ok=False),
        _LOAD_TIME),
    # Rule-set updates under traffic: cells are (backend, rules, kind, mechanism).
    "update": (
        Metric("update_ms", "time until the kernel held the new rule set", "ms", False,
               lambda r: 1e3 * r.metrics["update_s"], column="in effect ms"),
        Metric("command_ms", "update command time", "ms", False,
               lambda r: 1e3 * r.metrics["command_s"], column="command ms"),
        Metric("kept_lost", "kept flow: packets lost", "packets", False,
               _m("kept", "lost"), log_ok=False),
        Metric("kept_gap_ms", "kept flow: longest gap between arrivals", "ms", False,
               lambda r: 1e3 * r.metrics["kept"]["max_gap_s"]),
        Metric("kept_peak_us", "kept flow: latency peak", "µs", False,
               _m("kept", "peak_latency_us")),
        Metric("kept_recovery_ms", "kept flow: time until back to its baseline", "ms",
               False, lambda r: 1e3 * r.metrics["kept"]["recovery_s"], log_ok=False),
        _LOAD_TIME),
}

# What each method's headline means, for the title of the table that ends a run.
TITLES: dict[str, str] = {
    "maxrate": "pps = packets reaching the server per second, sender at full throttle",
    "throughput": "NDR: highest load with 0 loss; PDR: with <= 0.5 % loss (MLRsearch)",
    "latency": "one-way latency, engine stamp to XDP sink; NDR from the same search",
    "lossload": "highest offered load without loss (RFC 2544 frame loss rate)",
    "fixedrate": "seed 003 flows: 128 B @ 15, 512 B @ 30, 1280 B @ 45 Mbit/s",
    "cpucost": "busy time of the firewall's CPU per forwarded packet, one fixed load",
    "droprate": "a UDP flood disposed of per second, sender and firewall on one CPU",
    "loadlatency": "ping RTT through the firewall, with and without TCP load both ways",
    "echo": "seed 001: n clients echoing messages through the firewall, bytes one way",
    "update": "a rule-set update under traffic: when it took effect, what a kept flow saw",
}


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
    """The method's TITLES entry, for a run of `records`."""
    t = TITLES[method]
    return t.replace("one-way latency", "round-trip latency") if round_trips(records) else t


def of(method: str) -> tuple[Metric, ...]:
    """The method's metrics, headline first."""
    try:
        return METRICS[method]
    except KeyError:
        raise ValueError(f"method {method} records no metrics fwbench knows") from None


def headline(method: str) -> Metric:
    return of(method)[0]
