"""The scenario: what a run measures, with defaults, validated before anything runs.

A scenario is a TOML file, command-line flags, or both (flags win). Unknown keys
and wrong types are errors that name the key. See scenarios/quick.toml for a
commented example. The keys every run has are here; each experiment's own section
and checks are its declaration's (fwbench.catalog), laid in at their place.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, \
    create_model, field_validator, model_validator

from fwbench import backends, catalog, tomlfile
from fwbench.errors import FwbenchError
from fwbench.findings import METHOD_OF_STUDY, STUDY_IDS, study_of
from fwbench.frames import validate_frame
from fwbench.ruleset.templates.seed000 import MAX_ENTRIES
from fwbench.testbed.topology import TestbedSettings
from fwbench.traffic.native import EngineSettings

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
ALL = "all"


class PolicySettings(BaseModel):
    model_config = _STRICT
    template: Literal["seed000"] = "seed000"
    counters: bool = Field(True, description="a counter on every nftables linear rule, "
                           "as seed 000 kept for parity with iptables")
    file: str | None = Field(None, description="benchmark this rule set (iptables-save "
                             "text, nft JSON or nft text) instead of the template")
    iface: str | None = Field(None, description="the file's interfaces on the testbed: "
                              "eth0=client,eth1=server")
    ipsets: str | None = Field(None, description="`ipset save` output of the file's sets")
    flow: str | None = Field(None, description="the measured flow: udp:PORT or a rule id "
                             "(default: the accepted flow that traverses the most rules)")


class InstrumentSettings(BaseModel):
    model_config = _STRICT
    iperf3_streams: Annotated[int, Field(ge=1, le=128)] = 4
    ping_count: Annotated[int, Field(ge=1, le=100_000)] = 50
    ping_interval_s: Annotated[float, Field(ge=0.002, le=10)] = 0.01


class AdaptiveSettings(BaseModel):
    """Adaptive repetitions: after the planned `repeat` rounds, repeat only the cells
    whose headline interval is still wide, one trial per cell per round, until every
    cell is narrow enough or has `max_repeat` trials."""
    model_config = _STRICT
    max_repeat: Annotated[int, Field(ge=0, le=1000)] = Field(
        0, description="trials per cell at most, every status counted; 0: off")
    rel_width: Annotated[float, Field(gt=0, le=1)] = Field(
        0.05, description="narrow enough: the interval of the cell's median of the "
        "method's primary metric, as a fraction of that median")
    level: Annotated[float, Field(gt=0.5, lt=1)] = Field(
        0.95, description="confidence level of the percentile-bootstrap interval")
    budget_min: Annotated[float, Field(gt=0)] | None = Field(
        None, description="minutes of trials the run may spend in all: an adaptive "
        "round is cut to the widest cells that fit, and none starts once it is spent")
    step: Annotated[int, Field(ge=1, le=100)] = Field(
        1, description="until = claims: rounds added between two looks at the claims "
        "(a look after the planned rounds, then after every `step` rounds), so a "
        "study may go far past its planned rounds with few looks, each look testing "
        "at 5 % / the most looks (1 + ceil((max_repeat - repeat) / step))")
    until: Literal["width", "claims"] = Field(
        "width", description="width: repeat the cells whose interval is wider than "
        "rel_width; claims (a study's run): repeat the cells that the study's claims "
        "not yet decided read, until each is decided, every look at the data then "
        "testing at 5 % / the most looks the run can take (see step)")


class _Common(BaseModel):
    """The keys of every scenario; Scenario adds each experiment's section."""
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
    method: str = Field("maxrate", description="the experiment: a method of fwbench.catalog")
    study: str | None = Field(None, description="the study (fwbench.studies) whose "
                              "findings the report checks, e.g. \"000\"; only with the "
                              "method that study runs (fwbench.findings.METHOD_OF_STUDY)")
    keep_loaded: bool = Field(
        False, description="sweeps: run each backend's rule set at every frame size "
        "back to back, loaded and verified once for them (each round still shuffles "
        "the blocks and the frame sizes within them)")
    traffic: Literal["engine", "iperf3"] = "engine"
    family: Literal["ipv4", "ipv6"] = Field(
        "ipv4", description="the IP version of the rule set and the measured flow")
    policy: PolicySettings = PolicySettings()
    testbed: TestbedSettings = TestbedSettings()
    instrument: InstrumentSettings = InstrumentSettings()
    engine: EngineSettings = EngineSettings()
    # here each experiment's section (_model), then:
    # adaptive: AdaptiveSettings

    @property
    def version(self) -> int:
        return 4 if self.family == "ipv4" else 6

    @model_validator(mode="before")
    @classmethod
    def _method_defaults(cls, data):
        # What the method's declaration sets otherwise (droprate: seed 002's 128-byte
        # frames), unless the scenario says.
        method = data.get("method") if isinstance(data, dict) else None
        room = catalog.room(method) if isinstance(method, str) else None
        if room is not None and room.defaults:
            data = {**data, **{k: v for k, v in room.defaults.items() if k not in data}}
        return data

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str) -> str:
        if v not in catalog.EXPERIMENTS:
            raise ValueError(f"unknown method {v!r} (known: "
                             f"{', '.join(catalog.EXPERIMENTS)})")
        return v

    @field_validator("study")
    @classmethod
    def _known_study(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and v not in STUDY_IDS:
            raise ValueError(f"unknown study {v!r} (known: {', '.join(STUDY_IDS)})")
        # `method` comes first, so it is here when it is valid (else its own error).
        method = info.data.get("method")
        if v is not None and method is not None and METHOD_OF_STUDY[v] != method:
            raise ValueError(f"study {v!r} runs method {METHOD_OF_STUDY[v]!r}, not "
                             f"{method!r}: its findings are decided on that method's "
                             f"trials")
        return v

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
                validate_frame(f, self.testbed.mtu, self.version)
            except FwbenchError as e:
                raise ValueError(str(e)) from None
        return self

    @model_validator(mode="after")
    def _fits_its_experiment(self) -> "Scenario":
        room = catalog.room(self.method)
        if self.traffic not in room.traffics:
            raise ValueError(f"method {self.method} needs traffic = engine "
                             f"(iperf3 cannot pace an offered load)")
        if room.validate is not None:
            room.validate(self)
        if self.keep_loaded and not room.keep_loaded:
            raise ValueError(f"keep_loaded applies to the rule-count sweeps, not to "
                             f"method {self.method}")
        a = self.adaptive
        if a.max_repeat and a.max_repeat <= self.repeat:
            raise ValueError(f"adaptive.max_repeat ({a.max_repeat}) must be above repeat "
                             f"({self.repeat}), or 0 for off")
        if a.step > 1 and a.until != "claims":
            raise ValueError("adaptive.step applies to until = \"claims\" only (a width "
                             "round adds one trial a cell)")
        if a.until == "claims" and a.max_repeat and \
                study_of({"method": self.method, "study": self.study}) is None:
            raise ValueError("adaptive.until = \"claims\" needs a study whose claims to "
                             "decide (the scenario's study key)")
        # Each experiment's checks of its own sections, whatever the method.
        for validate in dict.fromkeys(r.validate_any for r in catalog.rooms().values()):
            if validate is not None:
                validate(self)
        return self

    def dump(self) -> dict:
        return self.model_dump()


def _model(experiments: tuple) -> type[BaseModel]:
    """The scenario model of the catalog's experiments (`experiments`, the catalog's
    items): the common keys, each experiment's sections in the catalog's order (a
    section several methods read once), then `adaptive`."""
    sections: dict[str, type[BaseModel]] = {}
    for method, target in experiments:
        for name, model in catalog.resolve(target).settings.items():
            if sections.setdefault(name, model) is not model:
                raise TypeError(f"method {method}: section {name!r} is another "
                                f"experiment's")
    fields = {name: (model, model()) for name, model in sections.items()}
    return create_model("Scenario", __base__=_Common, __module__=__name__, **fields,
                        adaptive=(AdaptiveSettings, AdaptiveSettings()))


_MODELS: dict[tuple, type[BaseModel]] = {}


def model() -> type[BaseModel]:
    """The scenario model of the catalog as it is now (a line added to it at run
    time, as the tests' toy experiments do, takes its section with it)."""
    key = tuple(catalog.EXPERIMENTS.items())
    if key not in _MODELS:
        _MODELS[key] = _model(key)
    return _MODELS[key]


Scenario = model()


def _validate_keys(data: dict, origin: str) -> None:
    """Keys an experiment's declaration refuses, as given (before defaults fill
    them in): its own sections in another method's scenario, and the common keys
    that do not apply to it."""
    method = data.get("method")
    rooms = catalog.rooms()
    for m, r in rooms.items():
        if r.exclusive and method != m:
            for section in r.settings:
                if section in data:
                    raise FwbenchError(f"{origin}: {section}: applies to method {m} only")
    room = rooms.get(method) if isinstance(method, str) else None
    for key, why in (room.refuses if room is not None else {}).items():
        section, _, sub = key.partition(".")
        if (sub in (data.get(section) or {})) if sub else key in data:
            raise FwbenchError(f"{origin}: {key}: does not apply to method {method} "
                               f"({why})")


def load(path: str | Path | None, overrides: dict | None = None) -> Scenario:
    """Read a scenario file (or start from defaults), lay the overrides on top and
    validate the result. An override named `section.key` (e.g. `adaptive.max_repeat`)
    sets that key of the section and keeps the section's other keys."""
    data: dict = {}
    origin = "command line"
    if path is not None:
        origin = str(Path(path))
        data = tomlfile.read(path, "scenario")
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        section, _, key = k.partition(".")
        if not key:
            data[k] = v
        elif isinstance(data.get(section, {}), dict):
            data[section] = {**data.get(section, {}), key: v}
        # else: the file's section is not a table; validation names it
    _validate_keys(data, origin)
    try:
        return model().model_validate(data)
    except ValidationError as e:
        raise FwbenchError(tomlfile.one_line(e, origin)) from None


def from_dict(data: dict, origin: str = "run.json") -> Scenario:
    try:
        return model().model_validate(data)
    except ValidationError as e:
        raise FwbenchError(tomlfile.one_line(e, origin)) from None
