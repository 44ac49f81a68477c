"""Trial records and the run directory: schema, fsync'd appends, torn lines, resume."""
import json

import pytest

from fwbench.errors import FwbenchError
from fwbench.plan import TrialKey
from fwbench.results import RUN_KIND, SCHEMA_VERSION, STATUSES, RunDir, TrialRecord

REQUIRED = {"schema_version", "factors", "method", "repetition",
            "status", "verification", "load_time_s", "metrics", "started_at"}


def record(i=0, **kw) -> TrialRecord:
    base = dict(schema_version=SCHEMA_VERSION, run_id="abc123", trial=i,
                factors={"backend": "nftables", "rules": 1000, "frame_size": 64},
                method="maxrate", traffic="iperf3+ping",
                repetition=i, status="ok", reason=None,
                verification={"ok": True, "rules_loaded": 1000, "reason": None},
                load_time_s=0.02, metrics={"rx_pps": 1000.0, "rtt_us_median": 100.0},
                started_at="2026-11-21T00:00:00.000+00:00", duration_s=2.0,
                ruleset_sha256="0" * 64)
    return TrialRecord(**{**base, **kw})


def test_record_has_the_required_fields_and_round_trips():
    d = json.loads(record().to_json())
    assert REQUIRED <= set(d)
    assert d["status"] in STATUSES
    assert {"ok", "rules_loaded", "reason"} <= set(d["verification"])
    assert TrialRecord.from_dict(d) == record()
    assert record().key(("backend", "rules", "frame_size")) == \
        TrialKey(("nftables", 1000, 64), 0)
    assert record().key(("frame_size", "backend", "rules")) == \
        TrialKey((64, "nftables", 1000), 0)


def test_create_append_read(tmp_path):
    rd = RunDir.create(tmp_path / "run", {"scenario": {}, "plan": []})
    assert json.loads((tmp_path / "run" / "run.json").read_text())["kind"] == RUN_KIND
    rd.append(record(0))
    rd.append(record(1))
    assert [r.trial for r in RunDir.open(tmp_path / "run").records()] == [0, 1]


def test_torn_last_line_is_cut_and_appends_continue(tmp_path):
    rd = RunDir.create(tmp_path / "run", {"plan": []})
    rd.append(record(0))
    with rd.trials.open("a") as f:
        f.write(record(1).to_json()[:40])  # killed mid-write, or being written now
    torn = rd.trials.read_bytes()
    assert [r.trial for r in rd.records()] == [0]
    assert rd.trials.read_bytes() == torn   # a reader (a report beside a live run) cuts nothing
    rd.append(record(2))
    assert [r.trial for r in rd.records()] == [0, 2]


def test_a_second_run_into_the_same_directory_is_refused(tmp_path):
    RunDir.create(tmp_path / "run", {"plan": []})
    with pytest.raises(FwbenchError, match="already holds a run"):
        RunDir.create(tmp_path / "run", {"plan": []})


@pytest.mark.parametrize("content, says", [
    (None, "is not an fwbench run (no run.json)"),
    ("not json", "run.json is unreadable: Expecting value"),
    (json.dumps({"kind": "other"}), "is not an fwbench run (run.json is not one of ours)"),
    (json.dumps({"kind": RUN_KIND, "schema_version": -1}),
     "run schema -1 is not one this fwbench reads (2, 3)"),
], ids=["missing", "not-json", "other-kind", "other-schema"])
def test_resume_on_something_that_is_not_a_run(tmp_path, content, says):
    d = tmp_path / "x"
    d.mkdir()
    if content is not None:
        (d / "run.json").write_text(content)
    with pytest.raises(FwbenchError) as e:
        RunDir.open(d)
    assert str(e.value).startswith(str(d)) and says in str(e.value)


def test_unwritable_output_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(FwbenchError, match="cannot write to output directory"):
        RunDir.create(blocker / "run", {"plan": []})
