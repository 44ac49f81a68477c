"""What the sweep experiment (experiments.sweep) needs from a method: prepare once per testbed, run one trial per
cell, and say in one line what the trial found.

A method's `run` returns the trial's metrics (units in key names); a `trials` key, if
present, holds every sub-trial (search steps, load points) and goes to the record's
`trials` field. `reload(n)` applies and verifies the same backend with n rules, for
methods that search over the rule count (fixedrate).

Every measurement a method takes through `measurer()` is taken again when it was
disturbed (fwbench.cpu.disturbed: other tasks took the firewall's CPU, or the
hypervisor a CPU) and the disturbance could have moved it: at open throttle (the
rate is the result), where packets were lost (the loss may be the disturbance's),
or always for a method whose result is latency (`remeasure_always`). At most REDO
times; the last is kept if every one was disturbed, and says so. The experiment
takes the count and every disturbed attempt into the trial's record
(`take_disturbed`: metrics["disturbed_measurements"]), and the report counts them.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from fwbench import cpu
from fwbench.measurer import Measurer, TrialResult
from fwbench.testbed.base import Testbed
from fwbench.traffic.native import EngineTraffic

Reload = Callable[[int], None]

REDO = 2


class Remeasuring:
    """A measurer that takes a disturbed measurement again (see the module's doc),
    noting each disturbed attempt in `log`."""

    def __init__(self, inner: Measurer, log: list[dict], always: bool = False):
        self.inner = inner
        self.log = log
        self.always = always

    def _matters(self, r: TrialResult) -> bool:
        return self.always or r.extra.get("open_throttle", False) or r.lost > 0

    def measure(self, duration_s: float, offered_pps: float) -> TrialResult:
        for attempt in range(REDO + 1):
            r = self.inner.measure(duration_s, offered_pps)
            why = cpu.disturbed(r.cpu)
            if why is None or not self._matters(r):
                return r
            kept = attempt == REDO
            self.log.append({"offered_pps": r.offered_pps, "sent": r.sent,
                             "received": r.received, "disturbed": why, "kept": kept})
        return replace(r, extra={**r.extra, "disturbed": why})


class Method:
    """One way the sweep measures a cell. Each method is a subclass; the sweep's
    METHODS lists them, and `for_scenario` makes one with its instruments."""
    name = "method"
    # True: every disturbed measurement is taken again (a latency result moves with
    # any disturbance); False: only those at open throttle or with loss.
    remeasure_always = False
    # False: the method judges disturbance itself (cpucost: its soaker is meant to
    # take the firewall's CPU).
    remeasure = True
    # True: it measures any rule set's flow (IPv6, an imported rule set); False:
    # seed 000's IPv4 flow only.
    any_flow = True

    def __init__(self, traffic: EngineTraffic):
        self.engine = traffic
        self._disturbed: list[dict] = []
        # frame size -> the sender's open-throttle rate, measured by the sweep with
        # no firewall loaded (experiments.sweep.calibrate); measured here only when missing.
        self.ceilings: dict[int, float] = {}
        # Called with one line per sub-trial, for progress output on long cells.
        self.on_step: Callable[[str], None] | None = None

    def step(self, index: int, trial: dict) -> None:
        """Report one search trial to whoever watches (the run loop's progress bar)."""
        if self.on_step is not None:
            self.on_step(f"trial {index}: {trial['offered_pps']:,.0f} pps offered, "
                         f"loss {trial['loss_ratio']:.3%}")

    @classmethod
    def for_scenario(cls, sc, engine: EngineTraffic, ping) -> "Method":
        """The method for scenario `sc`, sending through `engine` (the ping
        instrument for those that time round trips with it)."""
        raise NotImplementedError

    @property
    def traffic(self) -> str:
        return self.engine.name

    def versions(self) -> dict[str, str | None]:
        return self.engine.versions()

    def prepare(self, tb: Testbed) -> None:
        self.engine.start(tb)

    def restart(self, tb: Testbed) -> None:
        self.engine.restart(tb)

    def run(self, tb: Testbed, frame_size: int, duration_s: float, *,
            rules: int | None = None, reload: Reload | None = None) -> dict:
        raise NotImplementedError

    def line(self, metrics: dict) -> str:
        return ""

    def close(self) -> None:
        """After the session's last trial: stop what the method started itself."""

    def measurer(self, tb: Testbed, frame_size: int) -> Measurer:
        m = self.engine.measurer(tb, frame_size)
        return Remeasuring(m, self._disturbed, self.remeasure_always) if self.remeasure \
            else m

    def take_disturbed(self) -> dict:
        """What the measurements since the last call met, for the trial's record:
        {} when none was disturbed, else {"disturbed_measurements": {"retaken": n
        (taken again), "kept": k (disturbed every time, the last kept), "attempts":
        [each disturbed one]}}."""
        log, self._disturbed[:] = list(self._disturbed), []
        if not log:
            return {}
        kept = sum(1 for e in log if e["kept"])
        return {"disturbed_measurements": {"retaken": len(log) - kept, "kept": kept,
                                           "attempts": log}}

    def sender_ceiling(self, tb: Testbed, frame_size: int) -> float:
        """What the sender gets out at open throttle at this frame size: the top of
        every search range."""
        if frame_size not in self.ceilings:
            r = self.measurer(tb, frame_size).measure(0.5, 0)
            self.ceilings[frame_size] = r.achieved_pps
        return self.ceilings[frame_size]


def fmt_pps(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"
