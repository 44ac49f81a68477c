"""Seed 003 in full: its fixed-rate flows through the firewall forwarding (FORWARD)
and as the endpoint (INPUT), on one CPU and on two (`experiment`, `method`), the
figures its findings are checked against (`stats`: degradation points, the
iptables advantage at 6,000 rules, INPUT against FORWARD; `seed003`), and its
report (`section`). This module is its declaration (fwbench.experiments.room)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from fwbench.claims import Rule
from fwbench.experiments.room import Room, Study
from fwbench.findings import EQUAL, about, claims, direction
from fwbench.metrics import FW_CPU, LOAD_TIME, Metric, at

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
# Seed 003's flows: frame size (bytes, incl. FCS) -> offered bits per second.
FIXED_FLOWS_BPS = {128: 15_000_000, 512: 30_000_000, 1280: 45_000_000}


class FixedRateSettings(BaseModel):
    model_config = _STRICT
    find_degradation: bool = True
    rules_width: Annotated[float, Field(gt=0, lt=1)] = 0.1
    chains: list[Literal["forward", "input"]] = Field(
        ["forward"], min_length=1, description="factor: where the rules sit and where "
        "the flow goes. forward: between client and server (FORWARD, the flow to the "
        "server); input: the firewall as the endpoint (INPUT, the flow to its own "
        "address, received by a socket there)")
    cpus: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        [1], min_length=1, description="factor: CPUs RPS spreads the firewall's "
        "receive processing over (the firewall CPU first, then the lowest others); "
        "more than one spreads only several flows ([engine] flows)")


def _seed_flows(sc) -> None:
    bad = [f for f in sc.frame_sizes if f not in FIXED_FLOWS_BPS]
    if bad:
        raise ValueError(f"fixedrate has seed-003 flows for "
                         f"{', '.join(map(str, FIXED_FLOWS_BPS))} B frames only, "
                         f"not {bad[0]}")


# Study 003's headline claims, each decided on a run's trials by `findings` below.
CLAIMS = claims(
    "003",
    ("nft-degrades-earlier", "nftables starts losing packets at about a fifth of the "
     "rules iptables does", "1k / 2k / 3.5k against 5k / 11k / 20k rules (128 / 512 / "
     "1280 B flows)",
     "where iptables-legacy begins to lose over where nftables does, the range the "
     "degradation brackets allow (open brackets kept: 0 or inf), in every flow",
     about(5.0)),
    ("advantage-small-packets", "iptables' advantage is largest for small packets",
     "at 6,000 rules iptables processes 5.2x / 2.9x / 1.7x what nftables does",
     "processed pps iptables-legacy / nftables at 6,000 rules, the 128 B flow's ratio "
     "over the 1280 B flow's (Welch on logs), in every chain and CPU count; the "
     "seed's 5.2x / 1.7x = 3.1x", direction(5.2 / 1.7)),
    ("input-equals-forward", "filtering in INPUT costs the same as in FORWARD",
     "'the same' for both tools",
     "processed pps INPUT / FORWARD on 1 CPU, per backend the mean log ratio over "
     "the flows; holds for every backend (intersection-union)", Rule("equal", EQUAL)),
)


ROOM = Room(
    "fixedrate", "fwbench.experiments.fixedrate.experiment:FixedRateSweep",
    "seed 003's flows (frame sizes 128, 512, 1280)",
    "seed 003 flows: 128 B @ 15, 512 B @ 30, 1280 B @ 45 Mbit/s",
    (
    Metric("processed_pps", "processed packets/s at the fixed rate", "packets/s",
           True, at("processed_pps"), throughput=True, column="processed pps"),
    Metric("loss_pct", "loss at the fixed rate", "%", False,
           lambda r: 100 * r.metrics["loss_ratio"], log_ok=False, column="loss %"),
    FW_CPU, LOAD_TIME),
    settings={"fixedrate": FixedRateSettings}, validate=_seed_flows,
    report="fwbench.experiments.fixedrate.section:report",
    study=Study("003", "Linux OS packet filters analysis (2021)", "seed003-full.toml",
                "fixed-rate flows (128 B @ 15, 512 B @ 30, 1280 B @ 45 Mbit/s) against "
                "rule count; FORWARD and INPUT; 1 and 2 CPUs; where loss begins",
                "the seed's flows and chains, iptables-legacy and nftables at 1,000 to "
                "20,000 rules, 3 trials of 0.5 s, degradation as grid brackets; 1 and 2 "
                "CPUs of a 2-core machine shared with the sender (the seed: 1, 2, 4 "
                "dedicated vCPUs)", 16),
    claims=CLAIMS, findings="fwbench.experiments.fixedrate.seed003:findings")
