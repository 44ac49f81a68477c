"""Runs written before the record format changes must keep reporting.

tests/data/runs holds two real run directories recorded at schema 2 with the code
of 2026-11-23 (a maxrate sweep: none, iptables-legacy and nftables at 20 and 1,000
rules, 3 rounds; and a droprate run: notrack, xdp, raw and ipset, 3 rounds). They
are kept as they were written, never regenerated: when schema 3 comes, these are
what read-time migration is tested on.
"""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from fwbench.experiments.droprate import report as drop_report
from fwbench.results import RunDir

RUNS = Path(__file__).parent.parent / "data" / "runs"
SWEEP = RUNS / "schema2-maxrate"
DROP = RUNS / "schema2-droprate"


def _fwbench(*args):
    return subprocess.run([sys.executable, "-m", "fwbench", *args], capture_output=True,
                          text=True, timeout=120)


def test_the_fixtures_are_schema_2():
    for d in (SWEEP, DROP):
        lines = (d / "trials.jsonl").read_text().splitlines()
        assert lines and {json.loads(x)["schema_version"] for x in lines} == {2}


def test_a_schema_2_sweep_reports_and_compares(tmp_path):
    run = shutil.copytree(SWEEP, tmp_path / "run")   # nothing a test does may touch a fixture
    cp = _fwbench("report", str(run), "--out", str(tmp_path / "rep"))
    assert cp.returncode == 0, cp.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "iptables-legacy" in md and "nftables" in md
    cp = _fwbench("compare", str(run), str(run), "--out", str(tmp_path / "cmp"))
    assert cp.returncode == 0 and "no cell differs" in cp.stdout, cp.stderr


def test_a_schema_2_droprate_run_renders_its_table():
    rd = RunDir.open(DROP)
    records = rd.records()
    assert len(records) == 12 and all(r.status == "ok" for r in records)
    out = io.StringIO()
    Console(file=out, width=200).print(drop_report.render(records, rd.meta()))
    text = out.getvalue()
    for label in ("XDP drop", "raw table", "ipset hash:ip, 1 entry"):
        assert label in text


def test_schema_2_records_are_migrated_to_named_factors():
    rd = RunDir.open(DROP)
    assert rd.schema_version == 2 and rd.factors == ("treatment", "set_size", "frame_size")
    raw = [json.loads(x) for x in (DROP / "trials.jsonl").read_text().splitlines()]
    for r, old in zip(rd.records(), raw):
        assert r.factors == {"treatment": old["backend"], "set_size": old["rules"],
                             "frame_size": old["frame_size"]}
    plan = rd.meta()["plan"]
    assert len(plan) == 12 and set(plan[0]) == {"treatment", "set_size", "frame_size",
                                                "repetition"}
    sweep = RunDir.open(SWEEP)
    assert sweep.factors == ("backend", "rules", "frame_size")
    assert {r.factors["backend"] for r in sweep.records()} == {
        "none", "iptables-legacy", "nftables"}


def test_a_schema_2_droprate_run_reports_and_compares(tmp_path):
    run = shutil.copytree(DROP, tmp_path / "run")
    cp = _fwbench("report", str(run), "--out", str(tmp_path / "rep"))
    assert cp.returncode == 0, cp.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Where to drop (seed 002's table)" in md and "XDP drop (native, veth)" in md
    assert "p Holm" in md and "fig-disposed_pps-cells.svg" in md
    assert (tmp_path / "rep" / "figures" / "fig-disposed_pps-cells.svg").stat().st_size > 0
    header = (tmp_path / "rep" / "cells.csv").read_text().splitlines()[0]
    assert header.startswith("metric,treatment,set_size,frame_size,")
    cp = _fwbench("compare", str(run), str(run), "--out", str(tmp_path / "cmp"))
    assert cp.returncode == 0 and "no cell differs" in cp.stdout, cp.stderr
    assert "| treatment | set_size | frame_size |" in (tmp_path / "cmp" / "compare.md").read_text()
    cp = _fwbench("compare", str(run), str(SWEEP), "--out", str(tmp_path / "x"))
    assert cp.returncode == 2 and "different experiments" in cp.stderr
    assert "Traceback" not in cp.stderr


def test_a_schema_2_run_is_not_resumed(tmp_path):
    run = shutil.copytree(SWEEP, tmp_path / "run")
    before = (run / "trials.jsonl").read_bytes()
    cp = _fwbench("run", "--resume", str(run))
    assert cp.returncode != 0 and "schema 2" in cp.stderr and "Traceback" not in cp.stderr
    assert (run / "trials.jsonl").read_bytes() == before
