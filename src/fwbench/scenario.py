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
    method: Literal["maxrate"] = "maxrate"
    traffic: Literal["iperf3"] = "iperf3"
    policy: PolicySettings = PolicySettings()
    testbed: TestbedSettings = TestbedSettings()
    instrument: InstrumentSettings = InstrumentSettings()

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
