"""The rule-count sweeps: every backend at every rule-set size and frame size, one
method each (maxrate, throughput, latency, lossload, cpucost) in one experiment
(`experiment`). This module is their declaration (fwbench.experiments.room): the
scenario sections they read, their metrics, titles and study 000."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from fwbench.claims import Rule
from fwbench.experiments.room import Room, Study
from fwbench.findings import EQUAL, PER_FRAME, claims, direction
from fwbench.metrics import FW_CPU, LOAD_TIME, Metric, at
from fwbench.results import TrialRecord

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
Ratio = Annotated[float, Field(ge=0, lt=1)]
EXPERIMENT = "fwbench.experiments.sweep.experiment:Sweep"


class ThroughputSettings(BaseModel):
    """The MLRsearch used by `throughput` and `latency`. The trial duration is the
    scenario's `duration_s`."""
    model_config = _STRICT
    preset: Literal["mlrsearch", "rfc2544-strict"] = "mlrsearch"
    loss_ratios: Annotated[list[Ratio], Field(min_length=1)] = [0.0, 0.005]
    exceed_ratio: Ratio = 0.5
    initial_trial_duration_s: Annotated[float, Field(gt=0)] = 0.2
    duration_sum_s: Annotated[float, Field(gt=0)] | None = None
    relative_width: Annotated[float, Field(gt=0, lt=1)] = 0.01
    min_load_pps: Annotated[float, Field(gt=0)] = 1000.0
    max_load_pps: Annotated[float, Field(gt=0)] | None = Field(
        None, description="top of the search; default: the sender's measured ceiling")
    warmup_duration_s: Annotated[float, Field(ge=0)] = 0.5
    max_trials: Annotated[int, Field(ge=1, le=10_000)] = 60


class LatencySettings(BaseModel):
    model_config = _STRICT
    idle_pps: Annotated[float, Field(gt=0)] = 1000.0
    pdr_fractions: list[Annotated[float, Field(gt=0, le=1)]] = [0.1, 0.5, 0.9]
    at_ndr: bool = True


class LossLoadSettings(BaseModel):
    model_config = _STRICT
    step: Annotated[float, Field(gt=0, le=0.5)] = 0.1
    full_range: bool = False
    max_load_pps: Annotated[float, Field(gt=0)] | None = None


class CpuCostSettings(BaseModel):
    """`cpucost`: one offered rate for every cell, below every backend's capacity, and
    the firewall CPU's busy time per forwarded packet at it (fwbench.soaker)."""
    model_config = _STRICT
    rate_pps: Annotated[float, Field(gt=0, le=10_000_000)] = Field(
        50_000.0, description="the fixed offered load; a cell that loses more than "
        "max_loss of it is marked over capacity")
    calibrate_s: Annotated[float, Field(gt=0, le=60)] = Field(
        0.3, description="the soaker's idle windows, one before and one after every trial")
    max_loss: Annotated[float, Field(ge=0, lt=1)] = 0.001
    max_drift: Annotated[float, Field(gt=0, lt=1)] = Field(
        0.05, description="a trial whose idle rates before and after differ by more "
        "is disturbed (another tenant, steal) and is measured again")
    redo: Annotated[int, Field(ge=0, le=10)] = Field(
        2, description="disturbed trials measured again at most this often (each kept "
        "in the record)")


def _search_bounds(sc) -> None:
    t = sc.throughput
    if len(set(t.loss_ratios)) != len(t.loss_ratios):
        raise ValueError("throughput.loss_ratios has duplicates")
    if t.max_load_pps is not None and t.min_load_pps >= t.max_load_pps:
        raise ValueError("throughput.min_load_pps must be below max_load_pps")


def _per_cpu_second(rec: TrialRecord) -> float | None:
    ns = rec.metrics.get("fw_busy_ns_per_pkt")
    return 1e9 / ns if isinstance(ns, (int, float)) and ns > 0 else None


# Study 000's headline claims, each decided on a run's trials by `findings` below.
CLAIMS = claims(
    "000",
    ("nft-slower-throughput",
     "nftables (linear) forwards less than iptables once rule sets reach 1,000 rules, "
     "at every frame size",
     "significantly worse at >= 1,000 rules regardless of frame size",
     f"rx pps nftables / iptables-legacy {PER_FRAME}; the seed's ratio over its "
     "cells at >= 1,000 rules 0.43x", direction(0.43)),
    ("nft-slower-latency",
     "nftables (linear) has a longer round trip than iptables once rule sets reach "
     "1,000 rules",
     "significantly worse at >= 1,000 rules regardless of frame size",
     f"ping RTT nftables / iptables-legacy {PER_FRAME}; the seed's ratio over its "
     "cells at >= 1,000 rules 2.6x", direction(2.6)),
    ("small-frames-worse",
     "nftables falls further behind iptables with small frames",
     "falls behind at 40 rules for small frames; at >= 1,024 B and <= 100 rules "
     "virtually identical",
     "the nftables / iptables-legacy rx pps ratio at the smallest frame over the "
     "same ratio at the largest, the mean over every rule count both measured (the "
     "seed's: 1.00x at 20 rules, 0.60x at 100, 0.50x at 1,000, 1.01x from 2,500 on; "
     "0.82x over its 10)", direction(0.82)),
    ("sets-flat",
     "with indexed sets (ipset, nft set) the rate does not depend on the rule count",
     "performance 'overall very close in all cases' from 20 to 10,000 entries",
     "rx pps at the largest rule count over the smallest, per set backend the mean "
     "over frame sizes; holds for both backends (intersection-union)",
     Rule("equal", EQUAL)),
    ("sets-equal",
     "ipset and nft sets perform about the same",
     "minor differences either way; 'can be considered identical'",
     "ipset / nftset rx pps, the mean log ratio over every rule count and frame size",
     Rule("equal", EQUAL)),
)


MAXRATE = Room(
    "maxrate", EXPERIMENT, "open-throttle rate + ping RTT",
    "pps = packets reaching the server per second, sender at full throttle",
    (
    Metric("rx_pps", "throughput at full throttle", "packets/s", True, at("rx_pps"),
           throughput=True, column="rx pps"),
    Metric("rtt_us_median", "ping RTT, median", "µs", False, at("rtt_us_median"),
           column="RTT us"),
    Metric("load_p50_us", "one-way latency p50 at full throttle", "µs", False,
           at("latency_us", "p50")),
    FW_CPU, LOAD_TIME),
    traffics=("engine", "iperf3"), keep_loaded=True,
    study=Study("000", "iptables vs nftables, latency and throughput (2018)",
                "seed000-full.toml",
                "10 rule-set sizes x 7 frame sizes; iptables, nftables, ipset, nft set, "
                "plus iptables-nft and 4 eBPF filters; rate at full throttle and ping RTT",
                "the seed's full matrix; 3 trials of 0.5 s a cell, then the open claims' "
                "cells up to 6 within a 50-minute budget (the seed: 20 x 120 s, about "
                "eight days)", 37),
    study_always=False, claims=CLAIMS,
    findings="fwbench.experiments.sweep.seed000:findings")

THROUGHPUT = Room(
    "throughput", EXPERIMENT, "NDR/PDR by MLRsearch",
    "NDR: highest load with 0 loss; PDR: with <= 0.5 % loss (MLRsearch)",
    (
    Metric("ndr_pps", "NDR (0 % loss)", "packets/s", True, at("ndr_pps"),
           throughput=True, column="NDR pps"),
    Metric("pdr_pps", "PDR", "packets/s", True, at("pdr_pps"), column="PDR pps"),
    Metric("fw_cpu_ns_per_pkt", "firewall CPU per packet at NDR", "ns", False,
           at("cpu_at_ndr", "fw_cpu_ns_per_pkt")),
    LOAD_TIME),
    settings={"throughput": ThroughputSettings}, validate_any=_search_bounds,
    keep_loaded=True)

LATENCY = Room(
    "latency", EXPERIMENT, "percentiles at no load, fractions of PDR and NDR",
    "one-way latency, engine stamp to XDP sink; NDR from the same search",
    (
    Metric("ndr_pps", "NDR (0 % loss)", "packets/s", True, at("ndr_pps"),
           throughput=True, column="NDR pps"),
    Metric("idle_p50_us", "one-way latency p50, idle", "µs", False,
           at("latency_us", "idle", "p50"), column="idle p50 us"),
    Metric("idle_p99_us", "one-way latency p99, idle", "µs", False,
           at("latency_us", "idle", "p99")),
    Metric("ndr_p99_us", "one-way latency p99 at NDR", "µs", False,
           at("latency_us", "ndr", "p99")),
    LOAD_TIME),
    settings={"throughput": ThroughputSettings, "latency": LatencySettings},
    keep_loaded=True)

LOSSLOAD = Room(
    "lossload", EXPERIMENT, "RFC 2544 frame-loss curve",
    "highest offered load without loss (RFC 2544 frame loss rate)",
    (
    Metric("lossless_pps", "highest lossless offered load", "packets/s", True,
           at("max_lossless_offered_pps"), throughput=True, column="lossless pps"),
    Metric("loss_at_max_pct", "loss at full throttle", "%", False,
           lambda r: 100 * r.metrics["loss_ratio_at_max"], log_ok=False,
           column="loss at max %"),
    LOAD_TIME),
    settings={"lossload": LossLoadSettings}, keep_loaded=True)

# The headline is the cost as a rate (packets one second of the firewall CPU would
# carry at it), so the cost model's 1/pps is the measured ns per packet itself.
CPUCOST = Room(
    "cpucost", EXPERIMENT, "firewall CPU per packet at one fixed load ([cpucost] rate_pps)",
    "busy time of the firewall's CPU per forwarded packet, one fixed load",
    (
    Metric("cpu_pps", "packets per second of firewall CPU", "packets/s", True,
           _per_cpu_second, throughput=True, column="pps per CPU s"),
    Metric("fw_busy_ns_per_pkt", "firewall CPU per packet at a fixed load", "ns", False,
           at("fw_busy_ns_per_pkt"), column="ns/pkt"),
    Metric("bpf_ns_per_pkt", "eBPF program run time per packet", "ns", False,
           at("bpf_ns_per_pkt"), column="prog ns/pkt"),
    Metric("fw_busy_pct", "firewall CPU busy at the fixed load", "%", False,
           lambda r: 100 * r.metrics["fw_busy_fraction"], log_ok=False),
    Metric("processed_pps", "processed packets/s at the fixed load", "packets/s", True,
           at("processed_pps")),
    FW_CPU, LOAD_TIME),
    settings={"cpucost": CpuCostSettings}, keep_loaded=True)
