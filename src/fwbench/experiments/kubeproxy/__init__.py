"""Kubernetes service proxying (`method = "kubeproxy"`): kube-proxy's rule sets at
1,000 to 30,000 services, in its iptables mode and its nftables mode, measured as
a cluster operator meets them: the first packet of new connections to services
(SYN to SYN-ACK through DNAT), the highest connection rate held without a failed
or slow connect, how evenly the endpoints are chosen, and the control plane's full
sync and its one-service updates, established flows' message rate with the rest present, the time to list the rule
set and the kernel memory it holds. This module is its declaration
(fwbench.experiments.room)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fwbench.experiments.room import Room
from fwbench.metrics import LOAD_TIME, Metric, at

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
MODES = ("iptables", "nftables")
DIRECT = "direct"     # the cell without rules: connections go to the endpoints themselves
# kube-proxy's iptables mode runs on either iptables (the node's choice); its
# nftables mode on nft.
CONFIGS = ("iptables-legacy:iptables", "iptables-nft:iptables", "nftables:nftables")
# The template's limits (fwbench.ruleset.templates.kubeproxy), kept here as numbers
# so the declaration imports no rule-set code.
MAX_SERVICES, MAX_ENDPOINTS = 32_000, 1000
# How the control plane can change one service: kube-proxy's partial sync, the
# smallest change in one transaction, one command each, or the whole rule set
# (fwbench.backends.base.Backend.mechanisms).
CONTROL_MECHANISMS = ("sync", "batch", "commands", "reload")


class KubeProxySettings(BaseModel):
    """Kubernetes service proxying: kube-proxy's rule sets (the `kube-proxy`
    template) at each number of services, per backend and mode; new TCP connections
    to services chosen at random."""
    model_config = _STRICT
    services: Annotated[list[Annotated[int, Field(ge=1, le=MAX_SERVICES)]],
                        Field(min_length=1)] = Field(
        [1000, 5000, 10000, 30000], description="ClusterIP services, one port each")
    endpoints: Annotated[int, Field(ge=1, le=MAX_ENDPOINTS)] = Field(
        3, description="endpoints (pods) of each service")
    configs: Annotated[list[str], Field(min_length=1)] = Field(
        list(CONFIGS), description="BACKEND:MODE pairs: which backend loads which "
                                   "kube-proxy mode's rule set")
    direct: bool = Field(True, description="also measure without rules, connecting to "
                                           "the endpoints directly (the floor)")
    latency_rate: Annotated[float, Field(gt=0, le=20_000)] = Field(
        500.0, description="connections a second while first-packet latency is measured "
                           "(for duration_s): low enough that none waits for another")
    spread_connections: Annotated[int, Field(ge=0, le=100_000)] = Field(
        600, description="connections to one service, for its endpoint spread "
                         "(chi-square); 0: none")
    flows: Annotated[int, Field(ge=0, le=1024)] = Field(
        16, description="established TCP flows to one service, each echoing one message "
                        "at a time for flow_s: their message rate through the connection "
                        "table's fast path; 0: none")
    flow_s: Annotated[float, Field(gt=0, le=60)] = Field(
        2.0, description="how long the established flows echo, seconds")
    flow_bytes: Annotated[int, Field(ge=32, le=1400)] = Field(
        64, description="each echoed message's bytes (one segment)")
    search: bool = Field(True, description="search the highest connection rate held "
                                           "without a failed or slow connect")
    search_start: Annotated[float, Field(gt=0)] = Field(
        1000.0, description="the search's first rate, connections a second")
    search_max: Annotated[float, Field(gt=0)] = Field(
        64_000.0, description="the search stops doubling here")
    search_step_s: Annotated[float, Field(gt=0, le=60)] = Field(
        1.0, description="each step of the search, seconds")
    search_resolution: Annotated[float, Field(gt=1, le=2)] = Field(
        1.15, description="the search ends when its bracket (held, failed) is this narrow")
    slow_ms: Annotated[int, Field(ge=1, le=10_000)] = Field(
        50, description="a connect taking longer than this (or sending its SYN again) "
                        "is slow")
    threads: Annotated[int, Field(ge=1, le=16)] = Field(
        1, description="the connection generator's threads")
    control: list[Literal[CONTROL_MECHANISMS]] = Field(
        ["sync"], description="after the connections: one service added and removed by "
                              "each of these (sync: kube-proxy's partial sync; batch; "
                              "commands; reload), each change proved; []: none")
    control_memory: bool = Field(True, description="the kernel memory the rule set "
                                                   "holds, read on both sides of the "
                                                   "trial's load into an emptied firewall")
    listings: Annotated[int, Field(ge=0, le=20)] = Field(
        3, description="timed listings of the whole rule set (iptables-save, nft list "
                       "ruleset), the median kept; 0: none")

    @field_validator("services", "configs", "control")
    @classmethod
    def _distinct(cls, v: list) -> list:
        if len(set(v)) != len(v):
            raise ValueError("a value is listed twice")
        return v

    @field_validator("configs")
    @classmethod
    def _pairs(cls, v: list[str]) -> list[str]:
        for pair in v:
            backend, sep, mode = pair.partition(":")
            if not sep or not backend or mode not in MODES:
                raise ValueError(f"{pair!r} is not BACKEND:MODE with MODE iptables or "
                                 f"nftables (e.g. nftables:nftables)")
        return v

    @model_validator(mode="after")
    def _sizes(self) -> "KubeProxySettings":
        if max(self.services) * self.endpoints > 16 * 16384:
            raise ValueError(f"services x endpoints must be at most 262,144 (the pod "
                             f"addresses x 16 target ports), got "
                             f"{max(self.services) * self.endpoints:,}")
        if self.search_start > self.search_max:
            raise ValueError("search_start is above search_max")
        return self

    def pairs(self) -> list[tuple[str, str]]:
        return [tuple(p.split(":", 1)) for p in self.configs]


def _held_kib(rec) -> float | None:
    v = at("memory", "held_bytes")(rec)
    return None if v is None else v / 1024


_BACKENDS = ("the backends come with their modes: [kubeproxy] configs "
             "(BACKEND:MODE pairs)")
_REFUSES = {k: _BACKENDS for k in ("backends",)} | {
    k: "kubeproxy's rule sets are the kube-proxy template's, sized by [kubeproxy] "
       "services" for k in ("rules", "policy")} | {
    "frame_sizes": "kubeproxy opens TCP connections; it sends no frames of a set size"}


ROOM = Room(
    "kubeproxy", "fwbench.experiments.kubeproxy.experiment:KubeProxy",
    "kube-proxy's rule sets at 1,000 to 30,000 services: first-packet latency, "
    "connection rate, endpoint spread, full sync ([kubeproxy])",
    "new connections to Kubernetes services through kube-proxy's rules",
    (
    Metric("connect_p50_us", "first-packet round trip (SYN to SYN-ACK), p50", "µs",
           False, at("connect", "rtt", "p50"), column="p50 us"),
    Metric("connect_p99_us", "first-packet round trip, p99", "µs", False,
           at("connect", "rtt", "p99"), column="p99 us"),
    Metric("connect_p01_us", "first-packet round trip, p01", "µs", False,
           at("connect", "rtt", "p01")),
    Metric("connect_p90_us", "first-packet round trip, p90", "µs", False,
           at("connect", "rtt", "p90")),
    Metric("conn_rate_held", "connections a second held without a failed or slow one",
           "conn/s", True, at("search", "held")),
    Metric("spread_p", "endpoint spread: chi-square p (uniform)", "p", True,
           at("spread", "service", "p"), log_ok=False),
    Metric("flow_msgs_per_s", "established flows: messages echoed a second", "msg/s", True,
           at("flows", "msgs_per_s")),
    Metric("sync_add_s", "one service added by kube-proxy's partial sync", "s", False,
           at("control", "mechanisms", "sync", "add", "command_s")),
    Metric("sync_remove_s", "one service removed by kube-proxy's partial sync", "s",
           False, at("control", "mechanisms", "sync", "remove", "command_s")),
    Metric("listing_s", "the whole rule set listed by its own tool", "s", False,
           at("control", "listing", "s")),
    Metric("held_kib", "kernel memory the rule set holds", "KiB", False, _held_kib),
    LOAD_TIME),
    settings={"kubeproxy": KubeProxySettings},
    defaults={"duration_s": 4.0, "repeat": 2},
    refuses=_REFUSES, exclusive=True,
    report="fwbench.experiments.kubeproxy.section:report")
