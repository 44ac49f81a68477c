"""What every experiment's run shares: SIGTERM as an exception (so every cleanup
path runs), the phases a trial's time went to, the outcome of a run, the progress
bar and timestamps. Below the runner and every experiment, which all import it.
"""
from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from fwbench.results import TrialRecord


class Interrupted(Exception):
    """SIGTERM, turned into an exception so every cleanup path runs."""


@contextmanager
def sigterm_raises():
    def handler(signum, frame):
        raise Interrupted(signal.Signals(signum).name)
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class Phases(dict):
    """Wall time of each phase of a trial, seconds (recorded in its conditions)."""

    def timed(self, name: str, fn, *args):
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self[name] = round(time.perf_counter() - t, 4)


@dataclass
class RunOutcome:
    path: Path
    records: list[TrialRecord]
    planned: int
    skipped_backends: dict[str, str]
    method: str = "maxrate"


def progress_bar(console: Console) -> Progress:
    """The bar every run shows: the current cell, done/total, time spent and left."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                    console=console, transient=False)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
