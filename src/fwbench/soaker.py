"""What a CPU had left over, to the microsecond: `fwbench-engine spin` soaks one CPU
at SCHED_IDLE with rounds of fixed work and tells its count when asked.

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
import select
import subprocess
import time
from dataclasses import dataclass

from fwbench import engine
from fwbench.errors import FwbenchError

_START_S = 5.0
_READ_S = 5.0


@dataclass(frozen=True)
class Reading:
    rounds: int
    t_ns: int       # CLOCK_MONOTONIC of the soaker's machine


class Soaker:
    """A running soaker on `cpu`; a context manager (it ends with the block).

    It runs on this machine, or with `tb` on the testbed's host `role` (the
    firewall's: over SSH on a real host). Either way it is read over its stdin
    (`spin --control`): it answers with its count and its own clock's time, taken
    together by a thread on the other CPUs, so a reading's time is the soaker
    machine's and an SSH round trip does not blur it. `bpf_stats`: the kernel
    counts BPF programs' run time there while the soaker runs."""

    def __init__(self, cpu: int, tb=None, role: str = "fw", bpf_stats: bool = False):
        self.cpu = cpu
        self._tb = tb
        argv = [str(engine.binary()), "spin", "--cpu", str(cpu), "--control"]
        if bpf_stats:
            argv.append("--bpf-stats")
        pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self._p = tb.spawn(role, argv, **pipes) if tb is not None else \
            subprocess.Popen(argv, **pipes)
        try:
            self.info = json.loads(self._line(_START_S, "no start line"))
        except BaseException:
            self.close()
            raise

    def _line(self, timeout_s: float, what: str) -> str:
        assert self._p.stdout is not None
        ready, _, _ = select.select([self._p.stdout], [], [], timeout_s)
        line = self._p.stdout.readline() if ready else ""
        if line:
            return line
        self._p.poll()
        err = ""
        if self._p.returncode is not None and self._p.stderr is not None:
            err = self._p.stderr.read().strip()
        raise FwbenchError(f"CPU soaker on CPU {self.cpu}: "
                           f"{err.splitlines()[-1] if err else what}")

    def read(self) -> Reading:
        try:
            self._p.stdin.write("read\n")
            self._p.stdin.flush()
        except (BrokenPipeError, OSError):
            raise FwbenchError(f"CPU soaker on CPU {self.cpu} has stopped") from None
        got = json.loads(self._line(_READ_S, f"no answer in {_READ_S:g} s"))
        return Reading(got["rounds"], got["t_ns"])

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
            try:
                self._p.stdin.write("quit\n")
                self._p.stdin.flush()
                self._p.wait(2)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        if self._tb is not None:
            self._tb.forget(self._p)
            return
        if self._p.poll() is None:
            self._p.kill()
        self._p.wait()
        for s in (self._p.stdin, self._p.stdout, self._p.stderr):
            if s:
                s.close()

    def __enter__(self) -> "Soaker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def busy_ns(a: Reading, b: Reading, idle_rate: float) -> float:
    """CPU time taken from the soaker between two readings, given its idle rate.
    Negative values (the CPU freer than in the calibration) are kept: clipping them
    would bias small costs upwards."""
    return (b.t_ns - a.t_ns) - (b.rounds - a.rounds) / idle_rate * 1e9
