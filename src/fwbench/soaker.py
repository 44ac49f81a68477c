"""What a CPU had left over, to the microsecond: `fwbench-engine spin` soaks one CPU
at SCHED_IDLE with rounds of fixed work and publishes its count in a mapped file.

Everything else on that CPU (softirq forwarding, netfilter, XDP, other tasks) takes
the CPU from it, so over a window

    busy = window - rounds / idle_rate

where `idle_rate` is its rounds per second on the same CPU with no traffic, measured
just before (`idle_rate()`). This kernel accounts CPU time by ticks and cannot charge
softirq time apart (no IRQ time accounting), so /proc/stat resolves a 1 s trial to
about 1 % of a CPU; the soaker resolves microseconds. Its idle rate is also a fixed
calibration workload: how it moves from round to round is the machine's drift
(steal, frequency, other tenants).

The soaker changes what it measures in one known way: the CPU never halts, so work
arriving there (an RPS interrupt) finds it awake. Methods that use it say so.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass

from fwbench import engine
from fwbench.errors import FwbenchError

_MAGIC = 0x4E495053424D5746
_START_S = 5.0


@dataclass(frozen=True)
class Reading:
    rounds: int
    t_ns: int       # CLOCK_MONOTONIC


class Soaker:
    """A running soaker on `cpu`; a context manager (it ends with the block)."""

    def __init__(self, cpu: int):
        self.cpu = cpu
        fd, self._path = tempfile.mkstemp(prefix="fwbench-spin-")
        os.close(fd)
        self._p = subprocess.Popen(
            [str(engine.binary()), "spin", "--cpu", str(cpu), "--file", self._path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = self._first_line()
            self.info = json.loads(line)
            with open(self._path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 64, prot=mmap.PROT_READ)
            if struct.unpack_from("<Q", self._map, 0)[0] != _MAGIC:
                raise FwbenchError(f"CPU soaker on CPU {cpu}: its count file is not its own")
        except BaseException:
            self.close()
            raise

    def _first_line(self) -> str:
        assert self._p.stdout is not None
        deadline = time.monotonic() + _START_S
        while time.monotonic() < deadline:
            if self._p.poll() is not None:
                err = (self._p.stderr.read() if self._p.stderr else "").strip()
                raise FwbenchError(f"CPU soaker on CPU {self.cpu}: "
                                   f"{err.splitlines()[-1] if err else 'ended at start'}")
            os.set_blocking(self._p.stdout.fileno(), False)
            line = self._p.stdout.readline()
            if line:
                return line
            time.sleep(0.01)
        raise FwbenchError(f"CPU soaker on CPU {self.cpu}: no start line in {_START_S:g} s")

    def read(self) -> Reading:
        return Reading(struct.unpack_from("<Q", self._map, 24)[0], time.monotonic_ns())

    def idle_rate(self, window_s: float) -> float:
        """Rounds per second over `window_s` of nothing but what the machine does anyway."""
        a = self.read()
        time.sleep(window_s)
        b = self.read()
        if b.rounds <= a.rounds:
            raise FwbenchError(f"CPU soaker on CPU {self.cpu} got no CPU in {window_s:g} s: "
                               f"the CPU is fully taken by something else")
        return (b.rounds - a.rounds) / ((b.t_ns - a.t_ns) / 1e9)

    def close(self) -> None:
        if self._p.poll() is None:
            self._p.kill()
        self._p.wait()
        for s in (self._p.stdout, self._p.stderr):
            if s:
                s.close()
        if getattr(self, "_map", None) is not None:
            self._map.close()
            self._map = None
        try:
            os.unlink(self._path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> "Soaker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def busy_ns(a: Reading, b: Reading, idle_rate: float) -> float:
    """CPU time taken from the soaker between two readings, given its idle rate.
    Negative values (the CPU freer than in the calibration) are kept: clipping them
    would bias small costs upwards."""
    return (b.t_ns - a.t_ns) - (b.rounds - a.rounds) / idle_rate * 1e9
