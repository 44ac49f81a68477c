"""Rule-set updates under traffic: how long a change takes to reach the kernel,
and what a fixed-rate flow sees while it happens (the `update` experiment). This
module is its declaration (fwbench.experiments.room)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fwbench.experiments.room import Room
from fwbench.metrics import LOAD_TIME, Metric, at
from fwbench.ruleset.templates.updates import KINDS as UPDATE_KINDS

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class UpdateSettings(BaseModel):
    """Rule-set updates under traffic (fwbench.experiments.update): every backend
    changes its loaded rule set by each kind of update with each mechanism it has,
    while a fixed-rate flow the update leaves alone runs through the firewall."""
    model_config = _STRICT
    kinds: Annotated[list[str], Field(min_length=1)] = Field(
        ["add-end", "delete", "element-add", "element-delete", "replace-all"],
        description="updates (fwbench.ruleset.templates.updates.KINDS); each backend "
                    "runs those that change what it holds (rules or set elements)")
    mechanisms: Annotated[list[Literal["reload", "batch", "commands", "map"]],
                          Field(min_length=1)] = Field(
        ["reload", "batch", "commands", "map"],
        description="how the change is made: reload (the whole new rule set in one "
                    "step), batch (the changes in one command), commands (one command a "
                    "change), map (eBPF set filters: their hash map changed in place); "
                    "each backend runs those it has (`fwbench backends`)")
    commands_max_work: Annotated[int, Field(gt=0)] = Field(
        10_000_000,
        description="a `commands` cell changing rules is left out when its changes x "
                    "rules exceed this: each change is one process that reads the whole "
                    "rule set (iptables rewrites it; ~0.5 s at 100,000 rules here), so "
                    "1 % of 100,000 rules would take ~8 min a trial")
    reload_kinds: Literal["all", "replace-all"] = Field(
        "all", description="which kinds a reload makes: every kind, or replace-all "
                           "and the others only on a backend whose one mechanism is reload "
                           "(the eBPF linear filters)")
    flow_pps: Annotated[int, Field(gt=0, le=999_999)] = Field(
        10_000, description="the kept flow, which no update touches: packets per second")
    probe_pps: Annotated[int, Field(gt=0, le=999_999)] = Field(
        5_000, description="the probe flow, which the update starts or stops, at most: "
                             "packets per second (its interval is the timing's resolution)")
    probe_rule_checks_pps: Annotated[float, Field(gt=0)] = Field(
        5e6, description="a linear rule set's probe rate is held to this many rule "
                         "checks per second (rules it crosses x rate), so the probe's own "
                         "cost stays a small part of the firewall CPU")
    before_s: Annotated[float, Field(gt=0, le=60)] = Field(
        0.5, description="traffic before the update: the kept flow's baseline")
    after_s: Annotated[float, Field(gt=0, le=60)] = Field(
        0.5, description="traffic after the update's last command ends")
    slot_ms: Annotated[float, Field(ge=0.01, le=1000)] = Field(
        1.0, description="the time series' slot (by scheduled send time)")

    @field_validator("kinds", "mechanisms")
    @classmethod
    def _distinct(cls, v: list) -> list:
        if len(set(v)) != len(v):
            raise ValueError("a value is listed twice")
        return v

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in UPDATE_KINDS:
                raise ValueError(f"unknown update kind {name!r} "
                                 f"(known: {', '.join(UPDATE_KINDS)})")
        return v


# Rule-set updates under traffic: cells are (backend, rules, kind, mechanism).
ROOM = Room(
    "update", "fwbench.experiments.update.experiment:Update",
    "rule-set updates under traffic: when each took effect and what a kept flow saw "
    "([update])",
    "a rule-set update under traffic: when it took effect, what a kept flow saw",
    (
    Metric("update_ms", "time until the kernel held the new rule set", "ms", False,
           lambda r: 1e3 * r.metrics["update_s"], column="in effect ms"),
    Metric("command_ms", "update command time", "ms", False,
           lambda r: 1e3 * r.metrics["command_s"], column="command ms"),
    Metric("kept_lost", "kept flow: packets lost", "packets", False,
           at("kept", "lost"), log_ok=False),
    Metric("kept_gap_ms", "kept flow: longest gap between arrivals", "ms", False,
           lambda r: 1e3 * r.metrics["kept"]["max_gap_s"]),
    Metric("kept_peak_us", "kept flow: latency peak", "µs", False,
           at("kept", "peak_latency_us")),
    Metric("kept_recovery_ms", "kept flow: time until back to its baseline", "ms",
           False, lambda r: 1e3 * r.metrics["kept"]["recovery_s"], log_ok=False),
    LOAD_TIME),
    settings={"update": UpdateSettings},
    report="fwbench.experiments.update.section:report")
