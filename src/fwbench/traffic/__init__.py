"""Traffic instruments: what sends packets through the testbed and measures them.

A method asks an instrument for one measurement and gets back metrics with units in
their names. The seed-faithful instruments are iperf3 (packet rate) and ping
(round-trip time); fwbench's own traffic engine (`traffic.native`) fits the same
shapes and also offers the one-call `measure(duration, load)` interface the search
methods use.
"""
from __future__ import annotations

from typing import Protocol

from fwbench.testbed.base import Testbed


class RateInstrument(Protocol):
    name: str

    def start(self, tb: Testbed) -> None: ...
    def restart(self, tb: Testbed) -> None: ...
    def measure(self, tb: Testbed, frame_size: int, duration_s: float) -> dict: ...
    def versions(self) -> dict[str, str | None]: ...


class RttInstrument(Protocol):
    name: str

    def measure(self, tb: Testbed, frame_size: int) -> dict: ...
    def versions(self) -> dict[str, str | None]: ...
