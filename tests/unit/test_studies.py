"""`fwbench study`: the registry of the five studies and its command line (no root:
nothing runs; tests/privileged/test_study.py runs one)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fwbench import scenario, studies
from fwbench.errors import FwbenchError
from fwbench.findings import CLAIMS
from fwbench.report.data import RunData
from fwbench.report.findings import study_of


def fwbench(*args):
    return subprocess.run([sys.executable, "-m", "fwbench", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("sid", list(studies.STUDIES))
def test_every_study_has_a_scenario_that_belongs_to_it(sid):
    st = studies.get(sid)
    sc = scenario.load(str(st.path()), {})
    data = RunData(st.path(), {"scenario": sc.dump(), "factors": []}, [])
    assert study_of(data) == sid, f"{st.scenario} would be reported as study {study_of(data)}"
    assert st.minutes > 0 and st.scale and st.runs


def test_the_registry_is_the_five_studies_of_the_claims():
    assert list(studies.STUDIES) == list(CLAIMS) == ["000", "001", "002", "003", "004"]


def test_an_unknown_study_is_one_line():
    with pytest.raises(FwbenchError, match="unknown study '7'"):
        studies.get("7")
    cp = fwbench("study", "7")
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "unknown study" in cp.stderr


def test_study_list_as_json_and_as_a_table():
    cp = fwbench("study", "list", "--json")
    assert cp.returncode == 0, cp.stderr
    got = json.loads(cp.stdout)
    assert [s["id"] for s in got] == list(studies.STUDIES)
    assert all(s["claims"] and s["scenario"].endswith(".toml") and s["minutes"] > 0
               for s in got)
    cp = fwbench("study", "list")
    assert cp.returncode == 0 and "all five: ~" in cp.stdout and "003" in cp.stdout


def test_json_is_for_the_list_only():
    cp = fwbench("study", "002", "--json")
    assert cp.returncode == 2 and "--json goes with `study list`" in cp.stderr


def test_each_studys_method_is_the_one_its_scenario_runs():
    from fwbench.findings import METHOD_OF_STUDY, STUDY_OF_METHOD
    assert {sid: scenario.load(str(st.path()), {}).method
            for sid, st in studies.STUDIES.items()} == METHOD_OF_STUDY
    assert all(METHOD_OF_STUDY[s] == m for m, s in STUDY_OF_METHOD.items())


# --- `fwbench study ID --out DIR` on a DIR that holds a run --------------------------

def a_run(path, **sc):
    """A run directory as `fwbench run` leaves it (nothing measured yet)."""
    from fwbench.results import RunDir
    RunDir.create(path, {"scenario": scenario.from_dict(sc).dump(), "factors": [],
                         "plan": []})
    return path


def contents(d):
    return {p.relative_to(d): p.read_bytes() if p.is_file() else None
            for p in sorted(d.rglob("*"))}


@pytest.fixture
def nothing_runs(monkeypatch):
    """loop.start and loop.resume only record what they were asked (this runs as
    root here: nothing may build a testbed)."""
    from pathlib import Path

    from fwbench.experiments import loop
    calls = []

    def resume(path, console, claims=None):
        calls.append(("resume", Path(path)))
        return loop.RunOutcome(Path(path), [], 0, {}, "x")

    def start(sc, path, console, claims=None):
        calls.append(("start", Path(path)))
        return loop.RunOutcome(Path(path), [], 0, {}, sc.method)
    monkeypatch.setattr(loop, "resume", resume)
    monkeypatch.setattr(loop, "start", start)
    return calls


def quiet():
    import io

    from rich.console import Console
    return Console(file=io.StringIO())


@pytest.mark.parametrize("sc, whose", [
    ({"study": "000"}, "study 000"),                       # a sweep naming its study
    ({}, "no study"),                                      # a sweep naming none
    ({"method": "fixedrate", "frame_sizes": [128]}, "study 003"),   # by its method
])
def test_a_study_refuses_a_run_of_another_study_in_one_line_touching_nothing(
        tmp_path, nothing_runs, capsys, sc, whose):
    from fwbench.cli import main
    d = a_run(tmp_path / "out", **sc)
    before = contents(d)
    assert main(["study", "001", "--out", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"holds a run of {whose}" in err and "not of study 001" in err
    with pytest.raises(FwbenchError, match=f"holds a run of {whose}"):
        studies.run("001", d, quiet())
    assert nothing_runs == [] and contents(d) == before


@pytest.mark.parametrize("sid, sc", [
    ("000", {"study": "000"}), ("001", {"method": "echo"}),
    ("003", {"method": "fixedrate", "frame_sizes": [128]})])
def test_a_study_still_finishes_its_own_run(tmp_path, nothing_runs, sid, sc):
    d = a_run(tmp_path / "out", **sc)
    o = studies.run(sid, d, quiet())
    assert nothing_runs == [("resume", d)] and o.study.id == sid


def test_study_all_checks_every_studys_directory_before_the_first_runs(
        tmp_path, nothing_runs, capsys):
    from fwbench.cli import main
    root = tmp_path / "all"
    a_run(root / "000", study="000")              # its own: would be finished
    a_run(root / "002", method="echo")            # study 001's run in 002's place
    before = contents(root)
    assert main(["study", "all", "--out", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{root / '002'} holds a run of study 001" in err
    with pytest.raises(FwbenchError, match="not of study 002"):
        studies.run_all(root, quiet())
    # One study into the directory of all five, and all five into one study's run.
    with pytest.raises(FwbenchError, match="holds the runs of `fwbench study all`"):
        studies.run("004", root, quiet())
    with pytest.raises(FwbenchError, match="writes each study into"):
        studies.run_all(root / "000", quiet())
    assert nothing_runs == [] and contents(root) == before
