"""Result records and the run directory that holds them.

A run directory has `run.json` (the resolved scenario, the plan and the environment,
written once, atomically) and `trials.jsonl` (one record per finished trial, appended
and fsync'd the moment the trial ends). An interrupted run therefore loses at most
the trial in progress, and `--resume` finishes the plan without repeating a trial.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fwbench.errors import FwbenchError
from fwbench.plan import TrialKey

SCHEMA_VERSION = 2  # 2: `trials` (a method's sub-trials), engine metrics
RUN_KIND = "fwbench-run"


@dataclass(frozen=True)
class TrialRecord:
    """One trial: one backend, rule set, frame size, method and repetition."""
    schema_version: int
    run_id: str
    trial: int                   # position in the plan
    backend: str
    rules: int                   # rule-set size asked for (0 for `none`)
    frame_size: int              # Ethernet frame incl. FCS, bytes (RFC 2544)
    method: str
    traffic: str                 # the instruments, e.g. "iperf3+ping"
    repetition: int
    status: str                  # "ok" | "failed" | "invalid"
    reason: str | None           # why, when status is not "ok"
    verification: dict           # {"ok", "rules_loaded", "reason", "details"}
    load_time_s: float | None    # the one atomic load, seconds
    metrics: dict                # units in key names: rx_pps, rtt_us_median, ...
    started_at: str              # ISO 8601, UTC
    duration_s: float            # wall time of the whole trial
    ruleset_sha256: str | None
    conditions: dict = field(default_factory=dict)
    trials: list = field(default_factory=list)  # every search step / load point

    @property
    def key(self) -> TrialKey:
        return TrialKey(self.backend, self.rules, self.frame_size, self.repetition)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_dict(d: dict) -> "TrialRecord":
        return TrialRecord(**d)


STATUSES = ("ok", "failed", "invalid")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RunDir:
    def __init__(self, path: Path):
        self.path = path
        self.run_json = path / "run.json"
        self.trials = path / "trials.jsonl"

    @staticmethod
    def create(path: str | Path, run: dict) -> "RunDir":
        p = Path(path)
        if (p / "run.json").exists():
            raise FwbenchError(f"{p} already holds a run; finish it with "
                               f"`fwbench run --resume {p}` or choose another --out")
        try:
            p.mkdir(parents=True, exist_ok=True)
            probe = p / ".fwbench-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise FwbenchError(f"cannot write to output directory {p}: {e.strerror}") from None
        rd = RunDir(p)
        rd._write_run_json({"kind": RUN_KIND, "schema_version": SCHEMA_VERSION, **run})
        rd.trials.touch()
        return rd

    @staticmethod
    def open(path: str | Path) -> "RunDir":
        p = Path(path)
        rd = RunDir(p)
        try:
            meta = json.loads(rd.run_json.read_text())
        except FileNotFoundError:
            raise FwbenchError(f"{p} is not an fwbench run (no run.json)") from None
        except (OSError, json.JSONDecodeError) as e:
            raise FwbenchError(f"{p}/run.json is unreadable: {e}") from None
        if not isinstance(meta, dict) or meta.get("kind") != RUN_KIND:
            raise FwbenchError(f"{p} is not an fwbench run (run.json is not one of ours)")
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise FwbenchError(f"{p}: run schema {meta.get('schema_version')} is not "
                               f"{SCHEMA_VERSION}, which this fwbench writes")
        return rd

    def meta(self) -> dict:
        return json.loads(self.run_json.read_text())

    def _write_run_json(self, meta: dict) -> None:
        tmp = self.run_json.with_suffix(".json.tmp")
        with tmp.open("w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.run_json)
        _fsync_dir(self.path)

    def update_meta(self, **changes) -> None:
        self._write_run_json({**self.meta(), **changes})

    def records(self) -> list[TrialRecord]:
        """Every complete record. A torn last line (the process died mid-write) is
        cut off, so the next append starts on a clean line."""
        if not self.trials.exists():
            return []
        raw = self.trials.read_bytes()
        keep = raw if raw.endswith(b"\n") or not raw else raw[: raw.rfind(b"\n") + 1]
        if keep != raw:
            with self.trials.open("r+b") as f:
                f.truncate(len(keep))
                os.fsync(f.fileno())
        out = []
        for n, line in enumerate(keep.decode().splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(TrialRecord.from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError) as e:
                raise FwbenchError(f"{self.trials}:{n}: not a trial record ({e})") from None
        return out

    def append(self, rec: TrialRecord) -> None:
        with self.trials.open("a") as f:
            f.write(rec.to_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
