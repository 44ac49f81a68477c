"""The drop-position experiment (seed 002, extended): how fast the firewall namespace
disposes of a UDP flood aimed at itself, depending on where and how it is dropped
(XDP, tc, nft ingress, iptables raw or filter, sets, string match, hashlimit) or
accepted (with and without connection tracking).

`treatments` says what each treatment loads and how it is read back, `measure` runs
the probe and the flood and reads where packets went, `experiment` runs the
interleaved plan and records every trial, `report` turns the records into the
seed's table (Method / PPS / Cost %) with intervals, `section` is its part of the
report. This module is its declaration (fwbench.experiments.room).
"""
from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fwbench.claims import Rule
from fwbench.experiments.room import Room, Study
from fwbench.findings import EQUAL, about, claims, direction
from fwbench.metrics import LOAD_TIME, Metric, at
from fwbench.ruleset.templates import droprate as drop

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
# Payload text for string matching: kept to characters iptables-save prints as they
# are, so what the kernel holds can be compared with what was loaded.
_TEXT = re.compile(r"^[A-Za-z0-9._:/@+=-]+$")


class DropRateSettings(BaseModel):
    """The drop-position experiment (seed 002): a UDP flood at the firewall's own
    address, disposed of under each treatment, on one CPU."""
    model_config = _STRICT
    treatments: Annotated[list[str], Field(min_length=1)] = Field(
        list(drop.TREATMENTS), description="which treatments; sets run once per set size")
    set_sizes: Annotated[list[Annotated[int, Field(ge=1, le=drop.MAX_SET_SIZE)]],
                         Field(min_length=1)] = Field(
        [1, 65_536, drop.MAX_SET_SIZE],
        description="entries in the ipset / nft set blacklists: the client's address "
                    "plus fillers from 198.18.0.0/15 outside the testbed's subnets")
    payload_text: Annotated[str, Field(min_length=1, max_length=64)] = "foo.com"
    nonmatching_rules: Annotated[int, Field(ge=1, le=100)] = 5
    hashlimit_above_pps: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    probe_packets: Annotated[int, Field(ge=100, le=100_000)] = 2000
    cpu: Annotated[int, Field(ge=0)] = Field(0, description="the one CPU of the path: "
                                                "sender and firewall ingress")
    min_cpu_share: Annotated[float, Field(gt=0, le=1)] = Field(
        0.95, description="a flood counts only if the sender (and ksoftirqd) had at "
                          "least this share of the path CPU")
    attempts: Annotated[int, Field(ge=1, le=10)] = Field(
        3, description="floods per trial while another process shares the path CPU")

    @field_validator("treatments")
    @classmethod
    def _known_treatments(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in drop.TREATMENTS:
                raise ValueError(f"unknown treatment {name!r} (known: {', '.join(drop.TREATMENTS)})")
        if len(set(v)) != len(v):
            raise ValueError("a treatment is listed twice")
        return v

    @field_validator("set_sizes")
    @classmethod
    def _distinct_sizes(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError("a set size is listed twice")
        return v

    @field_validator("payload_text")
    @classmethod
    def _plain_text(cls, v: str) -> str:
        if not _TEXT.match(v):
            raise ValueError("letters, digits and . _ : / @ + = - only")
        return v

    @field_validator("hashlimit_above_pps")
    @classmethod
    def _exact_rate(cls, v: int) -> int:
        # hashlimit keeps the interval between packets in whole microseconds.
        if 1_000_000 % v:
            raise ValueError(f"{v} does not divide 1,000,000: hashlimit would hold "
                             f"{1_000_000 // (1_000_000 // v):,}/sec instead")
        return v


def _one_frame(sc) -> None:
    if len(sc.frame_sizes) != 1:
        raise ValueError("droprate measures one frame size per run")
    room = sc.frame_sizes[0] - 64  # after headers, FCS and the 18-byte stamp
    if "string-bm" in sc.droprate.treatments or "string-kmp" in sc.droprate.treatments:
        if len(sc.droprate.payload_text) > room:
            raise ValueError(f"droprate.payload_text: {len(sc.droprate.payload_text)}"
                             f" characters do not fit a {sc.frame_sizes[0]}-byte "
                             f"frame after the stamp (room for {max(room, 0)})")


# What a droprate scenario must not set: it has treatments instead of backends and
# rule sets, its own engine flood and one CPU for the whole path.
_TREATMENTS = "its treatments are set in [droprate]"
_ONE_CPU = "the whole path runs on droprate.cpu"
_REFUSES = {**{k: _TREATMENTS for k in (
    "backends", "rules", "policy", "engine", "instrument", "throughput", "latency",
    "lossload", "fixedrate", "cpucost")},
    **{f"testbed.{k}": _ONE_CPU for k in ("sender_cpu", "firewall_cpu", "server_cpu")}}

# Study 002's headline claims, each decided on a run's trials by `findings` below.
CLAIMS = claims(
    "002",
    ("notrack-faster", "NOTRACK accepts a flood about 20 % faster than conntrack",
     "106k vs 87k pps (cost 20 %)",
     "notrack / conntrack accepted pps, paired t on the rounds' log ratios",
     about(1.20)),
    ("raw-cheaper", "dropping in raw PREROUTING is about 12 % cheaper than in filter "
     "INPUT", "280k vs 250k pps (cost 12 %)",
     "raw / filter-input disposal pps, as above", about(1.12)),
    ("ipset-flat", "an ipset blacklist costs about the same whatever its size",
     "255k pps with 265,000 entries (cost 10 % against raw)",
     "largest / smallest set size, as above", Rule("equal", EQUAL)),
    ("bm-cheaper", "string matching with bm is cheaper than with kmp",
     "255k vs 235k pps", "string-bm / string-kmp, as above", direction(255 / 235)),
)


# Seed 002's drop positions: cells are (treatment, set size, frame size).
ROOM = Room(
    "droprate", "fwbench.experiments.droprate.experiment:DropRate",
    "seed 002's where-to-drop table (treatments in the scenario's [droprate], e.g. "
    "scenarios/seed002-drop.toml)",
    "a UDP flood disposed of per second, sender and firewall on one CPU",
    (
    Metric("disposed_pps", "flood packets disposed of per second", "packets/s", True,
           at("disposed_pps"), throughput=True, column="disposed pps"),
    Metric("cpu_ns_per_pkt", "path CPU per packet", "ns", False, at("cpu_ns_per_pkt"),
           column="ns/pkt"),
    Metric("softirq_ns_per_pkt", "softirq CPU per packet", "ns", False,
           at("softirq_ns_per_pkt")),
    LOAD_TIME),
    settings={"droprate": DropRateSettings},
    defaults={"frame_sizes": [128]},     # seed 002's frames
    validate=_one_frame, refuses=_REFUSES, exclusive=True,
    report="fwbench.experiments.droprate.section:report",
    study=Study("002", "Testing the performance of the Linux firewall (Strongarm)",
                "seed002-drop.toml",
                "a UDP flood disposed of by drop position, conntrack against NOTRACK, "
                "ipset and string matching",
                "every treatment of the seed's table and more, 5 rounds of 1 s; "
                "blacklists to 130,561 entries (the seed: 265,000, beyond the "
                "benchmarking range)", 2),
    claims=CLAIMS, findings="fwbench.experiments.droprate.section:findings")
