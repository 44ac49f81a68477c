"""The scenario: what a run measures, with defaults, validated before anything runs.

A scenario is a TOML file, command-line flags, or both (flags win). Unknown keys
and wrong types are errors that name the key. See scenarios/quick.toml for a
commented example.
"""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, \
    model_validator

from fwbench import backends
from fwbench.errors import FwbenchError
from fwbench.frames import check_frame
from fwbench.ruleset import MAX_ENTRIES

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
ALL = "all"
# Seed 003's flows: frame size (bytes, incl. FCS) -> offered bits per second.
FIXED_FLOWS_BPS = {128: 15_000_000, 512: 30_000_000, 1280: 45_000_000}
Ratio = Annotated[float, Field(ge=0, lt=1)]


class PolicySettings(BaseModel):
    model_config = _STRICT
    template: Literal["seed000"] = "seed000"
    counters: bool = Field(True, description="a counter on every nftables linear rule, "
                           "as seed 000 kept for parity with iptables")


class TestbedSettings(BaseModel):
    model_config = _STRICT
    provider: Literal["netns"] = "netns"
    mtu: Annotated[int, Field(ge=1280, le=9000)] = 1500
    offloads: bool = False
    sender_cpu: Annotated[int, Field(ge=0)] = 0
    firewall_cpu: Annotated[int, Field(ge=0)] = 1
    server_cpu: Annotated[int, Field(ge=0)] = 0


class InstrumentSettings(BaseModel):
    model_config = _STRICT
    iperf3_streams: Annotated[int, Field(ge=1, le=128)] = 4
    ping_count: Annotated[int, Field(ge=1, le=100_000)] = 50
    ping_interval_s: Annotated[float, Field(ge=0.002, le=10)] = 0.01


class EngineSettings(BaseModel):
    model_config = _STRICT
    receiver: Literal["sink", "recv"] = Field(
        "sink", description="sink: count in XDP on the server's interface (off the "
        "measured path); recv: a user-space UDP socket")
    threads: Annotated[int, Field(ge=1, le=64)] = 1
    flows: Annotated[int, Field(ge=1, le=65535)] = Field(
        1, description="source ports, round robin (for RSS and conntrack-like traffic)")
    late_us: Annotated[int, Field(ge=1)] = 1_000_000


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


class FixedRateSettings(BaseModel):
    model_config = _STRICT
    find_degradation: bool = True
    rules_width: Annotated[float, Field(gt=0, lt=1)] = 0.1


class Scenario(BaseModel):
    model_config = _STRICT
    name: str = "custom"
    description: str = ""
    backends: Annotated[list[str], Field(min_length=1)] = [ALL]
    rules: Annotated[list[Annotated[int, Field(ge=1, le=MAX_ENTRIES)]],
                     Field(min_length=1)] = [20, 1000, 10000]
    frame_sizes: Annotated[list[int], Field(min_length=1)] = [64]
    repeat: Annotated[int, Field(ge=1, le=1000)] = 3
    duration_s: Annotated[float, Field(gt=0, le=3600)] = 1.0
    seed: int = 1
    method: Literal["maxrate", "throughput", "latency", "lossload", "fixedrate"] = "maxrate"
    traffic: Literal["engine", "iperf3"] = "engine"
    policy: PolicySettings = PolicySettings()
    testbed: TestbedSettings = TestbedSettings()
    instrument: InstrumentSettings = InstrumentSettings()
    engine: EngineSettings = EngineSettings()
    throughput: ThroughputSettings = ThroughputSettings()
    latency: LatencySettings = LatencySettings()
    lossload: LossLoadSettings = LossLoadSettings()
    fixedrate: FixedRateSettings = FixedRateSettings()

    @field_validator("backends")
    @classmethod
    def _known_backends(cls, v: list[str]) -> list[str]:
        for name in v:
            if name != ALL and name not in backends.REGISTRY:
                raise ValueError(f"unknown backend {name!r} "
                                 f"(known: {', '.join(backends.REGISTRY)}, or {ALL!r})")
        if len(set(v)) != len(v):
            raise ValueError("a backend is listed twice")
        return v

    @model_validator(mode="after")
    def _frames_fit_mtu(self) -> "Scenario":
        for f in self.frame_sizes:
            try:
                check_frame(f, self.testbed.mtu)
            except FwbenchError as e:
                raise ValueError(str(e)) from None
        return self

    @model_validator(mode="after")
    def _method_fits_traffic(self) -> "Scenario":
        if self.method != "maxrate" and self.traffic != "engine":
            raise ValueError(f"method {self.method} needs traffic = engine "
                             f"(iperf3 cannot pace an offered load)")
        if self.method == "fixedrate":
            bad = [f for f in self.frame_sizes if f not in FIXED_FLOWS_BPS]
            if bad:
                raise ValueError(f"fixedrate has seed-003 flows for "
                                 f"{', '.join(map(str, FIXED_FLOWS_BPS))} B frames only, "
                                 f"not {bad[0]}")
        t = self.throughput
        if len(set(t.loss_ratios)) != len(t.loss_ratios):
            raise ValueError("throughput.loss_ratios has duplicates")
        if t.max_load_pps is not None and t.min_load_pps >= t.max_load_pps:
            raise ValueError("throughput.min_load_pps must be below max_load_pps")
        return self

    def dump(self) -> dict:
        return self.model_dump()


def _one_line(e: ValidationError, origin: str) -> str:
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"]) or "scenario"
    msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
    msg = msg.removeprefix("Value error, ")
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"{origin}: {loc}: {msg}{more}"


def load(path: str | Path | None, overrides: dict | None = None) -> Scenario:
    """Read a scenario file (or start from defaults), lay the overrides on top and
    validate the result."""
    data: dict = {}
    origin = "command line"
    if path is not None:
        p = Path(path)
        origin = str(p)
        try:
            with p.open("rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            raise FwbenchError(f"{p}: no such scenario file") from None
        except tomllib.TOMLDecodeError as e:
            raise FwbenchError(f"{p}: malformed TOML: {e}") from None
        except OSError as e:
            raise FwbenchError(f"{p}: cannot read: {e.strerror}") from None
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise FwbenchError(_one_line(e, origin)) from None


def from_dict(data: dict, origin: str = "run.json") -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise FwbenchError(_one_line(e, origin)) from None
