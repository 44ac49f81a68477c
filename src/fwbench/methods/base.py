"""What the sweep experiment (experiments.sweep) needs from a method: prepare once per testbed, run one trial per
cell, and say in one line what the trial found.

A method's `run` returns the trial's metrics (units in key names); a `trials` key, if
present, holds every sub-trial (search steps, load points) and goes to the record's
`trials` field. `reload(n)` applies and verifies the same backend with n rules, for
methods that search over the rule count (fixedrate).
"""
from __future__ import annotations

from typing import Callable

from fwbench.testbed.base import Testbed
from fwbench.traffic.engine import EngineMeasurer, EngineTraffic

Reload = Callable[[int], None]


class Method:
    name = "method"

    def __init__(self, traffic: EngineTraffic):
        self.engine = traffic
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

    def measurer(self, tb: Testbed, frame_size: int) -> EngineMeasurer:
        return self.engine.measurer(tb, frame_size)

    def sender_ceiling(self, tb: Testbed, frame_size: int) -> float:
        """What the sender gets out at open throttle at this frame size: the top of
        every search range."""
        if frame_size not in self.ceilings:
            r = self.measurer(tb, frame_size).measure(0.5, 0)
            self.ceilings[frame_size] = r.achieved_pps
        return self.ceilings[frame_size]


def fmt_pps(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"
