"""An update's commands, run on the firewall's host itself: `python -m
fwbench.onhost.update_runner` reads one JSON object on stdin

    {"cpu": N, "timeout_s": S, "steps": [{"argv": [...], "input": "..." | null}, ...]}

runs the steps one after another pinned to CPU N (the firewall's, as its own control
plane would run: on the sender's CPU an update would delay the sending and pass for
the firewall's delay), sampling the kernel's memory meanwhile (memory.Peak), and
prints one JSON line:

    {"start_ns", "end_ns", "problem": null | "...", "pre": {...}, "peak": {...},
     "samples": n}

A CPU N this host does not have (or will not give it) is refused before anything
runs: one line on standard error, exit 2 (fwbench's error then names the host).

The times are the host's CLOCK_MONOTONIC, taken around the commands themselves: run
from fwbench's machine over SSH, every command would carry the session's round trip,
and the memory read would be another machine's. In namespaces it runs the same way.
Only the standard library and fwbench.onhost.memory: hosts have no more.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from fwbench.onhost import memory


class Refused(Exception):
    """The spec cannot run on this host; the message is one line."""


def pin(cpu) -> None:
    """Pin this process, and so the commands it starts, to CPU `cpu` of this host."""
    n = os.cpu_count() or 1
    if type(cpu) is not int or not 0 <= cpu < n:
        raise Refused(f"update runner: CPU {cpu!r} does not exist on this host (it has "
                      f"{n}: 0-{n - 1})")
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as e:   # there, but not this process's to use (a cpuset)
        raise Refused(f"update runner: cannot run on CPU {cpu} of this host: "
                      f"{e.strerror or e}") from None


def run(spec: dict) -> dict:
    pin(spec["cpu"])
    steps = spec["steps"]
    out: dict = {"problem": None, "pre": memory.read()}
    with memory.Peak() as peak:
        start = time.monotonic_ns()
        for i, st in enumerate(steps):
            try:
                cp = subprocess.run(st["argv"], input=st.get("input"), text=True,
                                    capture_output=True, timeout=spec["timeout_s"])
            except (OSError, subprocess.TimeoutExpired) as e:
                cp = subprocess.CompletedProcess(st["argv"], -1, "", str(e))
            if cp.returncode != 0:
                err = (cp.stderr or "").strip().splitlines()
                out["problem"] = (f"update command {i + 1} of {len(steps)} "
                                  f"({st['argv'][0].rsplit('/', 1)[-1]}) failed: "
                                  f"{err[-1] if err else 'exit ' + str(cp.returncode)}")
                break
        end = time.monotonic_ns()
    out.update(start_ns=start, end_ns=end, peak=peak.peak, samples=peak.samples)
    return out


def main() -> None:
    try:
        got = run(json.loads(sys.stdin.read()))
    except Refused as e:
        sys.stderr.write(f"{e}\n")
        sys.exit(2)
    json.dump(got, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
