"""The one interface every method is written against: `measure(duration, load)`.

A measurer offers `offered_pps` packets per second for `duration_s` seconds and
reports what happened as a `TrialResult`. The real measurer drives the native
engine through the testbed; the simulated firewall (`methods.simulated`) answers
the same call from a response curve, so every search is unit-tested without root.
It sits below both the methods, which call it, and the traffic instruments, which
implement it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol

from fwbench.errors import MeasurementInvalid

# A sender that got out less than this share of its offered load was the bottleneck,
# not the firewall: its trial is flagged and never used as an upper bound.
SHORT_TOLERANCE = 0.02


@dataclass(frozen=True)
class TrialResult:
    """What one trial at one offered load produced. Counts are packets."""

    offered_pps: float
    """The load asked for, packets per second (the schedule the sender paced against)."""
    duration_s: float
    """The trial duration asked for, seconds."""
    sent: int
    """Packets the sender put on the wire."""
    received: int
    """Distinct packets of this trial that reached the receiver (duplicates excluded)."""
    achieved_pps: float
    """The sender's achieved rate: `sent` over its actual send time."""
    reordered: int = 0
    """Packets that arrived after a packet of the same stream with a higher number."""
    duplicated: int = 0
    """Copies beyond the first of a packet already received."""
    late: int = 0
    """Packets received with a one-way latency above the late threshold."""
    out_of_window: int = 0
    """Packets that arrived so far behind their stream (beyond the receiver's window
    of 262,144 sequence numbers) that a copy cannot be told from a first arrival:
    not in `received`, so they count as lost."""
    latency_us: dict[str, float] | None = None
    """Per-packet latency against the scheduled send time: p50, p90, p99, p99_9, max,
    mean, min (microseconds); None when the measurer has no latency."""
    cpu: dict | None = None
    """CPU time spent during the trial (per CPU softirq/system ns, ns per packet)."""
    extra: dict = field(default_factory=dict)
    """Measurer-specific figures (e.g. the engine's raw reports)."""

    def __post_init__(self) -> None:
        # Nothing sent means nothing measured: a loss ratio of 0/0 read as 0 would
        # make a broken sender look like a lossless load.
        if self.sent <= 0:
            raise MeasurementInvalid(
                f"the sender sent nothing at {self.offered_pps:,.0f} pps offered for "
                f"{self.duration_s:g} s")

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.received)

    @property
    def loss_ratio(self) -> float:
        return self.lost / self.sent

    @property
    def forwarded_pps(self) -> float:
        """Packets received per second of trial duration."""
        return self.received / self.duration_s if self.duration_s else 0.0

    @property
    def sender_short(self) -> bool:
        """True when the sender did not reach its offered load: the generator, not the
        firewall, limited this trial."""
        return self.achieved_pps < self.offered_pps * (1 - SHORT_TOLERANCE)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(lost=self.lost, loss_ratio=self.loss_ratio,
                 forwarded_pps=self.forwarded_pps, sender_short=self.sender_short)
        return d


class Measurer(Protocol):
    def measure(self, duration_s: float, offered_pps: float) -> TrialResult: ...
