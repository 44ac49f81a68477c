"""Kernel memory a rule set holds, from the kernel's own accounting in
/proc/meminfo: slab (rules, set elements and nf_tables objects are kmalloc'd),
vmalloc (x_tables' rule blob, large BPF maps, ipset's hash buckets) and per-CPU
(x_tables' and BPF's per-CPU counters).

/proc/meminfo is the whole machine's, so a reading moves with everything else
the machine does: a delta is the rule set's only to within that noise, which is
why the report gives intervals over trials. A sampler catches the peak while an
update runs (a reload holds the old rule set and the new one at once).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

MEMINFO = Path("/proc/meminfo")
# The fields counted, each in bytes; `kernel` is their sum.
FIELDS = ("Slab", "VmallocUsed", "Percpu")
SAMPLE_S = 0.002


def read(path: Path = MEMINFO) -> dict[str, int]:
    """FIELDS and their sum `kernel`, bytes."""
    return parse(path.read_text())


def parse(text: str) -> dict[str, int]:
    """FIELDS and their sum `kernel`, bytes, from /proc/meminfo's text."""
    got: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in FIELDS:
            value, *unit = rest.split()
            got[name] = int(value) * (1024 if unit == ["kB"] else 1)
    got["kernel"] = sum(got.get(f, 0) for f in FIELDS)
    return got


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


class Peak:
    """The largest `kernel` reading while the `with` block runs, sampled every
    SAMPLE_S seconds in a thread (and once at each end)."""

    def __init__(self, path: Path = MEMINFO):
        self.path = path
        self.peak: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _take(self) -> None:
        now = read(self.path)
        self.samples += 1
        if not self.peak or now["kernel"] > self.peak["kernel"]:
            self.peak = now

    def _run(self) -> None:
        while not self._stop.is_set():
            self._take()
            time.sleep(SAMPLE_S)

    def __enter__(self) -> "Peak":
        self._take()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._take()
