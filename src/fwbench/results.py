"""Result records and the run directory that holds them.

A run directory has `run.json` (the resolved scenario, the experiment's factors, the
plan and the environment, written once, atomically) and `trials.jsonl` (one record per
finished trial, appended and fsync'd the moment the trial ends). An interrupted run
therefore loses at most the trial in progress, and `--resume` finishes the plan
without repeating a trial.

Schema 3 names a trial's factors as what they are: a record's `factors` is
{"treatment": "raw", "set_size": 0, "frame_size": 64} for droprate and {"backend":
..., "rules": ..., "frame_size": ...} for the sweeps, and run.json's plan holds the
same plus the repetition. Schema 2 put every experiment's three factors in
`backend`, `rules` and `frame_size` (droprate: treatment id, set size, frame size);
such a run is migrated as it is read, so it still reports and compares, but it is
not resumed: records of two schemas in one file would be a trap for every reader.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fwbench import owned
from fwbench.errors import FwbenchError
from fwbench.plan import REPETITION, TrialKey, named_cell

# 2: `trials` (a method's sub-trials), engine metrics; 3: named factors
SCHEMA_VERSION = 3
READABLE = (2, 3)
RUN_KIND = "fwbench-run"
# What schema 2's backend / rules / frame_size meant, by method.
SCHEMA2_FACTORS = {"droprate": ("treatment", "set_size", "frame_size")}
SWEEP_FACTORS = ("backend", "rules", "frame_size")
# A sweep's cell, for building one by name: SweepCell(backend="none", rules=0, frame_size=64).
SweepCell = named_cell(SWEEP_FACTORS)


def schema2_factors(method: str) -> tuple[str, str, str]:
    return SCHEMA2_FACTORS.get(method, SWEEP_FACTORS)


@dataclass(frozen=True)
class TrialRecord:
    """One trial: one cell of the experiment's factors, one repetition."""
    schema_version: int
    run_id: str
    trial: int                   # position in the plan
    factors: dict                # name -> value, e.g. backend, rules, frame_size (bytes
                                 # incl. FCS, RFC 2544); rules is 0 for `none`
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

    def cell(self, factors: tuple[str, ...]) -> tuple:
        """The factors' values in the order `factors` names them."""
        return tuple(self.factors[f] for f in factors)

    def key(self, factors: tuple[str, ...]) -> TrialKey:
        return TrialKey(self.cell(factors), self.repetition)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_dict(d: dict) -> "TrialRecord":
        """A record as stored; a schema-2 record is migrated (`migrate_record`)."""
        return TrialRecord(**(migrate_record(d) if "factors" not in d else d))


def migrate_record(d: dict) -> dict:
    """A schema-2 record as schema 3 has it: backend / rules / frame_size under the
    names they stood for."""
    d = dict(d)
    names = schema2_factors(d.get("method", ""))
    values = (d.pop("backend"), d.pop("rules"), d.pop("frame_size"))
    return {**d, "factors": dict(zip(names, values))}


def migrate_meta(meta: dict) -> dict:
    """A schema-2 run.json as schema 3 has it: the factors named and the plan keyed
    by them. (Late schema-2 runs already list their factors.)"""
    names = tuple(meta.get("factors") or
                  schema2_factors(meta.get("scenario", {}).get("method", "")))
    plan = [{**dict(zip(names, (k["backend"], k["rules"], k["frame_size"]))),
             REPETITION: k[REPETITION]} for k in meta.get("plan", [])]
    return {**meta, "factors": list(names), "plan": plan}


STATUSES = ("ok", "failed", "invalid")
# What fwbench writes into a run's directory (its marker lists them): the run, the
# report and its tables, the comparison's and study all's pages.
RUN_FILES = ["run.json", "trials.jsonl", "report.html", "report.md", "*.csv", "index.html",
             "index.md", "*.tmp"]


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
        try:   # new or empty: a run's files never land among a user's
            owned.ready(str(p), "an fwbench run", RUN_FILES)
        except owned.NotOurs as e:
            raise FwbenchError(f"--out {e}; a run goes into a new or empty "
                               f"directory") from None
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
        if meta.get("schema_version") not in READABLE:
            raise FwbenchError(f"{p}: run schema {meta.get('schema_version')} is not one "
                               f"this fwbench reads ({', '.join(map(str, READABLE))})")
        rd.schema_version = meta["schema_version"]
        return rd

    schema_version = SCHEMA_VERSION

    def writable(self) -> None:
        """Raise unless trials may be added (the run is of the schema we write)."""
        if self.schema_version != SCHEMA_VERSION:
            raise FwbenchError(f"{self.path} was written at run schema "
                               f"{self.schema_version} by an older fwbench: it reports and "
                               f"compares, but resuming it would mix two schemas; start a "
                               f"new run")

    def meta(self) -> dict:
        """run.json, as schema 3 has it (a schema-2 run is migrated as it is read)."""
        meta = json.loads(self.run_json.read_text())
        return migrate_meta(meta) if meta.get("schema_version") == 2 else meta

    @property
    def factors(self) -> tuple[str, ...]:
        return tuple(self.meta()["factors"])

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
        self.writable()
        self._write_run_json({**self.meta(), **changes})

    def records(self) -> list[TrialRecord]:
        """Every complete record; a torn last line (a process died mid-write, or a
        live run is writing it now) is not one. Reading never changes the file:
        a report made beside a live run must not cut the record it is appending."""
        if not self.trials.exists():
            return []
        raw = self.trials.read_bytes()
        keep = raw if raw.endswith(b"\n") or not raw else raw[: raw.rfind(b"\n") + 1]
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
        """Add a record; a torn last line (the writer before this one died
        mid-write) is cut off first, so the record starts on a clean line. Only
        the run that owns the directory appends."""
        self.writable()
        with self.trials.open("r+b") as f:
            if f.seek(0, os.SEEK_END) and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                f.seek(0)
                f.truncate(f.read().rfind(b"\n") + 1)
                os.fsync(f.fileno())
        with self.trials.open("a") as f:
            f.write(rec.to_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
