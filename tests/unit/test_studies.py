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
