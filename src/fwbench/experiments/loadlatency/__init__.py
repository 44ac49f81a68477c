"""Seed 004's experiment: latency through the firewall with and without
bidirectional TCP load, for forwarding and NAT rule sets (`method = "loadlatency"`).
This module is its declaration (fwbench.experiments.room)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fwbench.claims import Rule
from fwbench.experiments.room import Room, Study
from fwbench.findings import about, claims, direction
from fwbench.metrics import LOAD_TIME, Metric, at
from fwbench.ruleset.templates import TEMPLATES

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
LOADS = ("none", "tcp-bidir")


class LoadLatencySettings(BaseModel):
    """Seed 004's experiment: latency through the firewall with and without
    bidirectional TCP load, for forwarding and NAT rule sets."""
    model_config = _STRICT
    rulesets: Annotated[list[str], Field(min_length=1)] = Field(
        ["seed004-forward", "seed004-nat"], description="rule-set templates to compare")
    loads: Annotated[list[Literal["none", "tcp-bidir"]], Field(min_length=1)] = Field(
        list(LOADS), description="none, or TCP bulk transfer both ways (iperf3 --bidir)")
    conntrack_entries: Annotated[list[Annotated[int, Field(ge=0, le=1_000_000)]],
                                 Field(min_length=1)] = Field(
        [0], description="background connection-tracking entries held during the trial")
    streams: Annotated[int, Field(ge=1, le=64)] = Field(
        4, description="parallel TCP streams each way")
    ping_interval_s: Annotated[float, Field(ge=0.002, le=1)] = 0.01
    probe_pps: Annotated[float, Field(gt=0, le=100_000)] = Field(
        1000.0, description="the engine's stamped probes, packets per second")
    warmup_s: Annotated[float, Field(ge=0, le=60)] = Field(
        1.0, description="load running before the probes start")
    min_load_fraction: Annotated[float, Field(gt=0, le=1)] = Field(
        0.5, description="a trial whose load, both ways together, is below this "
                         "fraction of the no-firewall load is flagged (a stateful, "
                         "NATing firewall lowers it by itself: 0.55-0.7 measured)")

    @field_validator("rulesets", "loads", "conntrack_entries")
    @classmethod
    def _distinct(cls, v: list) -> list:
        if len(set(v)) != len(v):
            raise ValueError("a value is listed twice")
        return v

    @field_validator("rulesets")
    @classmethod
    def _known_rulesets(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in TEMPLATES:
                raise ValueError(f"unknown rule set {name!r} (templates: "
                                 f"{', '.join(TEMPLATES)})")
        return v


# Study 004's headline claims, each decided on a run's trials by `findings` below.
CLAIMS = claims(
    "004",
    ("load-triples-latency", "bidirectional TCP load makes latency about 3x",
     "~1,108 vs ~380 µs mean RTT (2.9x)",
     "mean RTT under load / without, the mean log ratio (each paired by round) over "
     "every backend and rule set", about(3.0)),
    ("nat-equals-forward", "NAT costs about the same latency as plain forwarding",
     "within 1 µs in every configuration",
     "mean RTT NAT / forwarding, the mean log ratio over every backend and load",
     Rule("equal", 0.05)),
    ("nft-lower-under-load", "nftables has slightly lower latency than iptables "
     "under load", "1,106.56 vs 1,108.42 µs (NAT), significant one-tailed on pooled "
     "replies", "mean RTT nftables / iptables-legacy under load, the mean log ratio "
     "over the rule sets", direction(1106.56 / 1108.42)),
)


ROOM = Room(
    "loadlatency", "fwbench.experiments.loadlatency.experiment:LoadLatency",
    "seed 004's ping RTT with and without TCP load both ways, forwarding and NAT "
    "rule sets ([loadlatency])",
    "ping RTT through the firewall, with and without TCP load both ways",
    (
    Metric("rtt_us_mean", "ping RTT, mean", "µs", False, at("ping", "mean"),
           column="RTT mean us"),
    Metric("probe_p50_us", "one-way latency p50 (engine probes)", "µs", False,
           at("probes", "p50"), column="one-way p50 us"),
    Metric("rtt_us_median", "ping RTT, median", "µs", False, at("ping", "median")),
    Metric("rtt_us_p99", "ping RTT, p99", "µs", False, at("ping", "p99")),
    Metric("probe_p99_us", "one-way latency p99 (engine probes)", "µs", False,
           at("probes", "p99")),
    Metric("load_up_gbps", "TCP load client to server", "Gbit/s", True,
           lambda r: r.metrics["load"]["up_bps"] / 1e9),
    Metric("load_down_gbps", "TCP load server to client", "Gbit/s", True,
           lambda r: r.metrics["load"]["down_bps"] / 1e9),
    Metric("conntrack_entries", "connection-table entries", "entries", False,
           at("conntrack", "count"), log_ok=False),
    LOAD_TIME),
    settings={"loadlatency": LoadLatencySettings},
    report="fwbench.experiments.loadlatency.section:report",
    study=Study("004", "NFtables and IPtables, a comparison in latency (2017)",
                "seed004-latency.toml",
                "ping RTT with and without bidirectional TCP load, forwarding against NAT",
                "6 rounds of 5 s a configuration, then the open claims' up to 18 in steps "
                "of 6 within 22 minutes of trials (the seed: 10 x 15 min)", 18),
    claims=CLAIMS, findings="fwbench.experiments.loadlatency.section:findings")
