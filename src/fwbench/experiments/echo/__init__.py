"""Seed 001: many clients echoing messages through the firewall. This module is its
declaration (fwbench.experiments.room)."""
from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fwbench.experiments.room import Room, Study
from fwbench.findings import claims, direction
from fwbench.metrics import LOAD_TIME, Metric, at

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
ECHO_PROTOCOLS = ("tcp", "udp", "sctp")
ECHO_SERVERS = ("threads", "epoll")
ECHO_TRANSACTIONS = ("echo", "crr")
_FRAME = re.compile(r"^(\d+)(?:-(\d+))?$")


def echo_frame(v: int | str) -> str:
    """A frame of the echo experiment as text: "64" (fixed) or "64-1024" (a size drawn
    per cycle from the range)."""
    m = _FRAME.match(str(v))
    if not m or (m.group(2) and int(m.group(2)) <= int(m.group(1))):
        raise ValueError(f"frame {v!r}: a size (64) or a range LO-HI (64-1024)")
    return str(v)


class EchoDesign(BaseModel):
    """One cross product of the echo experiment's factors; a list left out takes the
    [echo] section's (backends: the scenario's)."""
    model_config = _STRICT
    name: str
    clients: list[Annotated[int, Field(ge=1, le=4096)]] | None = None
    protocols: list[Literal["tcp", "udp", "sctp"]] | None = None
    families: list[Literal["ipv4", "ipv6"]] | None = None
    frames: list[int | str] | None = None
    servers: list[Literal["threads", "epoll"]] | None = None
    rules_per_client: list[Literal[0, 2, 4]] | None = None
    backends: list[str] | None = None
    transactions: list[Literal["echo", "crr"]] | None = None
    conntrack_entries: list[Annotated[int, Field(ge=0, le=1_000_000)]] | None = None

    @field_validator("frames")
    @classmethod
    def _frames(cls, v):
        return None if v is None else [echo_frame(x) for x in v]


class EchoSettings(BaseModel):
    """Seed 001's experiment: n clients echoing messages through the firewall. The
    lists are the seed's full design; `designs` (cross products of subsets) are what
    a run plans unless `full` is set."""
    model_config = _STRICT
    clients: list[Annotated[int, Field(ge=1, le=4096)]] = [5, 10, 20, 40, 80, 160, 320]
    protocols: list[Literal["tcp", "udp", "sctp"]] = list(ECHO_PROTOCOLS)
    families: list[Literal["ipv4", "ipv6"]] = ["ipv4", "ipv6"]
    frames: list[int | str] = Field(
        ["64", "128", "256", "512", "1024", "64-1024"],
        description="message sizes in bytes: fixed, or LO-HI drawn per cycle")
    servers: list[Literal["threads", "epoll"]] = list(ECHO_SERVERS)
    rules_per_client: list[Literal[0, 2, 4]] = Field(
        [0, 2, 4], description="seed 001's F: 0 plain forwarding, 2 up/down accept, "
                               "4 plus MARK")
    transactions: list[Literal["echo", "crr"]] = Field(
        ["echo"], description="echo: one connection per client; crr: a new TCP "
                              "connection per message through a stateful firewall")
    conntrack_entries: list[Annotated[int, Field(ge=0, le=1_000_000)]] = Field(
        [0], description="background connection-tracking entries (crr cells only)")
    designs: list[EchoDesign] = Field([], description="the default subset; empty: all")
    full: bool = Field(False, description="run the full cross product, not `designs`")
    warmup_s: Annotated[float, Field(ge=0, le=60)] = 0.5
    client_threads: Annotated[int, Field(ge=1, le=64)] = 2
    verify_cycles: Annotated[int, Field(ge=1, le=1000)] = 3
    send_timeout_ms: Annotated[int, Field(ge=1, le=60_000)] = 500
    echo_timeout_ms: Annotated[int, Field(ge=1, le=60_000)] = 500
    port: Annotated[int, Field(ge=1024, le=65535)] = 7007

    @field_validator("frames")
    @classmethod
    def _frames(cls, v):
        return [echo_frame(x) for x in v]

    @model_validator(mode="after")
    def _distinct_designs(self) -> "EchoSettings":
        names = [d.name for d in self.designs]
        if len(set(names)) != len(names):
            raise ValueError("two designs share a name")
        return self


def _full_is_ours(sc) -> None:
    if sc.echo.full and sc.method != "echo":
        raise ValueError("echo.full (--full) applies to method echo only")


# Study 001's headline claims, each decided on a run's trials by `findings` below.
CLAIMS = claims(
    "001",
    ("per-rule-ipv4", "throughput loss grows linearly with the rules, about 0.05 % "
     "per IPv4 rule", "0.05 %/rule",
     "a line through the origin of every trial's decrease against its F = 0 cell "
     "(iptables-legacy), bootstrap interval", "above 0 and 0.025..0.075 %/rule"),
    ("per-rule-ipv6", "about 0.03 % per IPv6 rule", "0.03 %/rule", "as for IPv4",
     "above 0 and 0.015..0.045 %/rule"),
    ("threads-vs-epoll", "threads beat epoll below about 40 clients and lose above",
     "turning point ~40 clients",
     "per client count, the log ratio of mean throughput per client, Holm across "
     "client counts", "the turning point, between the largest count threads win and "
     "the smallest epoll wins (each significant), within 20..60 clients"),
    ("tcp-vs-udp", "TCP is slower than UDP", "8.42 % (5.18..10.64)",
     "TCP / UDP mean throughput per client, the mean log ratio over matched pairs of "
     "cells", direction(1 - 0.0842)),
    ("ipv6-vs-ipv4", "IPv6 is slower than IPv4", "9.22 % (4.59..13.8)",
     "IPv6 / IPv4, as above", direction(1 - 0.0922)),
    ("sctp-vs-tcp", "SCTP is slower than TCP", "32.65 % (9.28..48.23)",
     "SCTP / TCP, as above", direction(1 - 0.3265)),
)


# Seed 001's echo: cells are (clients, protocol, family, frame, server, F, backend,
# transaction, entries); throughput is message bytes one way.
ROOM = Room(
    "echo", "fwbench.experiments.echo.experiment:Echo",
    "seed 001's n clients echoing messages through the firewall ([echo]; --full for "
    "the whole design)",
    "seed 001: n clients echoing messages through the firewall, bytes one way",
    (
    Metric("client_mean_mbps", "throughput per client, mean", "Mbit/s", True,
           lambda r: r.metrics["throughput"]["client_mean_bps"] / 1e6,
           column="per client Mbit/s"),
    Metric("rtt_us_p50", "round trip p50", "µs", False, at("rtt_us", "p50"),
           column="RTT p50 us"),
    Metric("client_p5_mbps", "throughput per client, 5th percentile", "Mbit/s", True,
           lambda r: r.metrics["throughput"]["client_p5_bps"] / 1e6),
    Metric("aggregate_mbps", "throughput, all clients", "Mbit/s", True,
           lambda r: r.metrics["throughput"]["aggregate_bps"] / 1e6),
    Metric("jain", "fairness (Jain's index)", "", True, at("throughput", "jain"),
           log_ok=False),
    Metric("rtt_us_p99", "round trip p99", "µs", False, at("rtt_us", "p99")),
    Metric("server_cs_per_msg", "server context switches per message", "", False,
           at("context_switches", "server_per_msg"), log_ok=False),
    LOAD_TIME),
    settings={"echo": EchoSettings}, validate_any=_full_is_ours,
    report="fwbench.experiments.echo.section:report",
    study=Study("001", "Performance evaluation of netfilter (2015)", "seed001-echo.toml",
                "n clients echoing through the gateway: TCP/UDP, IPv4/IPv6, "
                "threads/epoll, F = 0/2/4 rules per client",
                "the seed's questions on 63 of its cells, 4 trials of 2 s (the seed: 100 "
                "s x 3 on every cell; --full in `fwbench run` runs all of them, hours), "
                "then the open claims' cells up to 12 in steps of 4 within 25 minutes of "
                "trials", 25),
    claims=CLAIMS, findings="fwbench.experiments.echo.section:seed_findings")
