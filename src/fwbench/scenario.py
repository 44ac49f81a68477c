"""The scenario: what a run measures, with defaults, validated before anything runs.

A scenario is a TOML file, command-line flags, or both (flags win). Unknown keys
and wrong types are errors that name the key. See scenarios/quick.toml for a
commented example.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, \
    field_validator, model_validator

from fwbench import backends, tomlfile
from fwbench.catalog import EXPERIMENTS
from fwbench.ruleset.templates import TEMPLATES
from fwbench.ruleset.templates import droprate as drop
from fwbench.errors import FwbenchError
from fwbench.findings import METHOD_OF_STUDY, STUDY_IDS, study_of
from fwbench.frames import check_frame
from fwbench.ruleset.templates.seed000 import MAX_ENTRIES
from fwbench.ruleset.templates.updates import KINDS as UPDATE_KINDS
from fwbench.testbed.topology import TestbedSettings
from fwbench.traffic.engine import EngineSettings

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
    chains: list[Literal["forward", "input"]] = Field(
        ["forward"], min_length=1, description="factor: where the rules sit and where "
        "the flow goes. forward: between client and server (FORWARD, the flow to the "
        "server); input: the firewall as the endpoint (INPUT, the flow to its own "
        "address, received by a socket there)")
    cpus: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        [1], min_length=1, description="factor: CPUs RPS spreads the firewall's "
        "receive processing over (the firewall CPU first, then the lowest others); "
        "more than one spreads only several flows ([engine] flows)")


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


class UpdateSettings(BaseModel):
    """Rule-set updates under traffic (fwbench.update): every backend changes its
    loaded rule set by each kind of update with each mechanism it has, while a
    fixed-rate flow the update leaves alone runs through the firewall."""
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
    throughput: ThroughputSettings = ThroughputSettings()
    latency: LatencySettings = LatencySettings()
    lossload: LossLoadSettings = LossLoadSettings()
    fixedrate: FixedRateSettings = FixedRateSettings()
    cpucost: CpuCostSettings = CpuCostSettings()
    droprate: DropRateSettings = DropRateSettings()
    loadlatency: LoadLatencySettings = LoadLatencySettings()
    echo: EchoSettings = EchoSettings()
    update: UpdateSettings = UpdateSettings()
    adaptive: AdaptiveSettings = AdaptiveSettings()

    @property
    def version(self) -> int:
        return 4 if self.family == "ipv4" else 6

    @model_validator(mode="before")
    @classmethod
    def _droprate_frame(cls, data):
        # Seed 002's 128-byte frames, unless the scenario says otherwise.
        if isinstance(data, dict) and data.get("method") == "droprate" \
                and "frame_sizes" not in data:
            data = {**data, "frame_sizes": [128]}
        return data

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str) -> str:
        if v not in EXPERIMENTS:
            raise ValueError(f"unknown method {v!r} (known: {', '.join(EXPERIMENTS)})")
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
                check_frame(f, self.testbed.mtu, self.version)
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
        if self.method == "droprate":
            if len(self.frame_sizes) != 1:
                raise ValueError("droprate measures one frame size per run")
            room = self.frame_sizes[0] - 64  # after headers, FCS and the 18-byte stamp
            if "string-bm" in self.droprate.treatments or \
                    "string-kmp" in self.droprate.treatments:
                if len(self.droprate.payload_text) > room:
                    raise ValueError(f"droprate.payload_text: {len(self.droprate.payload_text)}"
                                     f" characters do not fit a {self.frame_sizes[0]}-byte "
                                     f"frame after the stamp (room for {max(room, 0)})")
        if self.echo.full and self.method != "echo":
            raise ValueError("echo.full (--full) applies to method echo only")
        if self.keep_loaded and EXPERIMENTS[self.method] != EXPERIMENTS["maxrate"]:
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
        t = self.throughput
        if len(set(t.loss_ratios)) != len(t.loss_ratios):
            raise ValueError("throughput.loss_ratios has duplicates")
        if t.max_load_pps is not None and t.min_load_pps >= t.max_load_pps:
            raise ValueError("throughput.min_load_pps must be below max_load_pps")
        return self

    def dump(self) -> dict:
        return self.model_dump()


# What a droprate scenario must not set: it has treatments instead of backends and
# rule sets, its own engine flood and one CPU for the whole path.
_NOT_FOR_DROPRATE = ("backends", "rules", "policy", "engine", "instrument", "throughput",
                     "latency", "lossload", "fixedrate", "cpucost")
_NOT_FOR_DROPRATE_TESTBED = ("sender_cpu", "firewall_cpu", "server_cpu")


def _check_droprate_keys(data: dict, origin: str) -> None:
    if data.get("method") != "droprate":
        if "droprate" in data:
            raise FwbenchError(f"{origin}: droprate: applies to method droprate only")
        return
    for key in _NOT_FOR_DROPRATE:
        if key in data:
            raise FwbenchError(f"{origin}: {key}: does not apply to method droprate "
                               f"(its treatments are set in [droprate])")
    for key in _NOT_FOR_DROPRATE_TESTBED:
        if key in (data.get("testbed") or {}):
            raise FwbenchError(f"{origin}: testbed.{key}: does not apply to method "
                               f"droprate (the whole path runs on droprate.cpu)")


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
    _check_droprate_keys(data, origin)
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise FwbenchError(tomlfile.one_line(e, origin)) from None


def from_dict(data: dict, origin: str = "run.json") -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise FwbenchError(tomlfile.one_line(e, origin)) from None
