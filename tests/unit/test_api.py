"""fwbench.api's readers on runs of known content: the stored schema-2 runs in
tests/data/runs and a synthetic maxrate sweep (test_report's); every figure is
checked against trials.jsonl or the report's own CSV tables, not against the code
that made it. run() is only checked for what it refuses here (running is
tests/privileged/test_docs_api.py's)."""
from __future__ import annotations

import json
import math
import os
import shutil
import statistics
from pathlib import Path

import pandas as pd
import pytest

import fwbench.api as fw
from fwbench import findings as fd
from fwbench.report.build import Report
from fwbench.report.data import load
from fwbench.results import RunDir

from test_report import MODEL, make_run  # tests/unit is on sys.path under pytest

RUNS = Path(__file__).parent.parent / "data" / "runs"


@pytest.fixture
def sweep2(tmp_path):
    return shutil.copytree(RUNS / "schema2-maxrate", tmp_path / "sweep")


@pytest.fixture
def drop2(tmp_path):
    return shutil.copytree(RUNS / "schema2-droprate", tmp_path / "drop")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A maxrate sweep of test_report's MODEL (5 backends x 3 rule counts x 2 frame
    sizes x 5 repetitions) and the report's CSV tables of it, as dicts by column
    (the tables `fwbench report` writes, without the figures)."""
    d = make_run(tmp_path_factory.mktemp("api") / "run", seed=3)
    tables = {name: [dict(zip(head, ("" if v is None else v for v in row)))
                     for row in rows]
              for name, (head, rows) in Report(load(d)).csv_tables().items()}
    return d, tables


def _lines(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "trials.jsonl").read_text().splitlines() if x.strip()]


def _close(a, b) -> bool:
    if a in ("", None) or (isinstance(a, float) and math.isnan(a)):
        return b in ("", None) or (isinstance(b, float) and math.isnan(b))
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def test_trials_of_a_sweep_have_its_factors_status_and_metrics(sweep2):
    df = fw.trials(sweep2)
    lines = _lines(sweep2)
    assert isinstance(df, pd.DataFrame) and len(df) == len(lines) == 15
    assert list(df.columns[:9]) == ["trial", "backend", "rules", "frame_size", "repetition",
                                   "status", "reason", "started_at", "verified"]
    # every maxrate metric of the registry, by its key
    assert {"rx_pps", "rtt_us_median", "load_p50_us", "fw_cpu_ns_per_pkt",
            "load_time_ms"} <= set(df.columns)
    for c in ("trial", "rules", "frame_size", "repetition"):
        assert df[c].dtype == "int64", c
    assert df["rx_pps"].dtype == "float64" and df["verified"].dtype == bool
    assert str(df["started_at"].dtype).startswith("datetime64")
    for row, raw in zip(df.itertuples(), lines):   # schema 2: backend/rules/frame_size
        assert (row.backend, row.rules, row.frame_size, row.repetition) == \
            (raw["backend"], raw["rules"], raw["frame_size"], raw["repetition"])
        assert row.status == raw["status"] and row.verified == raw["verification"]["ok"]
        assert row.rx_pps == raw["metrics"]["rx_pps"]
        assert row.rtt_us_median == raw["metrics"]["rtt_us_median"]
        assert row.load_time_ms == pytest.approx(raw["load_time_s"] * 1e3)
    assert set(df.loc[df.backend == "none", "rules"]) == {0}


def test_trials_of_droprate_are_named_by_its_factors(drop2):
    df = fw.trials(drop2)
    assert list(df.columns[1:4]) == ["treatment", "set_size", "frame_size"]
    assert "backend" not in df.columns and "rules" not in df.columns
    assert df["set_size"].dtype == "int64"
    assert set(df["treatment"]) == {"notrack", "xdp", "raw", "ipset"}
    for row, raw in zip(df.itertuples(), _lines(drop2)):
        assert row.treatment == raw["backend"] and row.set_size == raw["rules"]
        assert row.disposed_pps == raw["metrics"]["disposed_pps"]


def test_a_failed_trial_has_its_reason_and_no_metric(tmp_path):
    d = shutil.copytree(RUNS / "schema2-maxrate", tmp_path / "r")
    lines = _lines(d)
    lines[4].update(status="failed", reason="verification: 1 rule missing", metrics={},
                    verification={"ok": False, "rules_loaded": 0, "reason": "x"})
    (d / "trials.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    row = fw.trials(d).iloc[4]
    assert row.status == "failed" and row.reason == "verification: 1 rule missing"
    assert not row.verified and math.isnan(row.rx_pps)


def test_a_run_with_no_trial_yet_gives_typed_empty_columns(tmp_path, synthetic):
    meta = json.loads((synthetic[0] / "run.json").read_text())
    meta = {k: v for k, v in meta.items() if k not in ("kind", "schema_version")}
    RunDir.create(tmp_path / "empty", meta)
    df = fw.trials(tmp_path / "empty")
    assert len(df) == 0 and df["rules"].dtype == "int64" and "rx_pps" in df.columns


def test_cells_equal_the_reports_cells_csv(synthetic):
    d, tables = synthetic
    df = fw.cells(d)
    rows = tables["cells"]
    assert len(df) == len(rows) and set(df["metric"]) == {r["metric"] for r in rows}
    got = {(r.metric, r.backend, r.rules, r.frame_size): r for r in df.itertuples()}
    for r in rows:
        mine = got[(r["metric"], r["backend"], int(r["rules"]), int(r["frame_size"]))]
        assert mine.n == int(r["n"])
        for col in ("mean", "sd", "median", "median_ci_low", "median_ci_high"):
            assert _close(r[col], getattr(mine, col)), (r, col)


def test_cells_of_one_metric_recomputed_from_the_trials(sweep2):
    df = fw.cells(sweep2, "rx_pps")
    assert set(df["metric"]) == {"rx_pps"} and df["rules"].dtype == "int64"
    for r in df.itertuples():
        values = [t["metrics"]["rx_pps"] for t in _lines(sweep2) if t["status"] == "ok"
                  and (t["backend"], t["rules"], t["frame_size"]) ==
                  (r.backend, r.rules, r.frame_size)]
        assert r.n == len(values) == 3
        assert r.median == statistics.median(values)
        assert r.mean == pytest.approx(statistics.fmean(values))
        assert min(values) <= r.median_ci_low <= r.median <= r.median_ci_high <= max(values)


def test_cells_name_the_metrics_there_are(sweep2):
    with pytest.raises(fw.FwbenchError, match="no metric 'ndr_pps' .*rx_pps"):
        fw.cells(sweep2, "ndr_pps")


def test_cost_model_equals_the_reports_cost_table(synthetic):
    d, tables = synthetic
    df = fw.cost_model(d)
    rows = tables["cost_per_rule"]
    fitted = df[df["b_ns_per_rule"].notna()]
    assert len(fitted) == len(rows) > 0
    for r, mine in zip(rows, fitted.to_dict("records")):
        for col, v in r.items():
            if col in ("backend", "reference"):
                assert (mine[col] or "") == v, col
            else:
                assert _close(v, mine[col]), (r["backend"], col, v, mine[col])
    # and they are the planted per-rule costs
    for b in ("iptables-legacy", "nftables"):
        for f in (64, 1518):
            (row,) = df[(df.backend == b) & (df.frame_size == f)].itertuples()
            assert row.b_ns_per_rule == pytest.approx(MODEL[b][1], rel=0.1)
            assert row.b_ci_low < row.b_ns_per_rule < row.b_ci_high
    assert df["points"].dtype == "int64" and df["frame_size"].dtype == "int64"


def test_cost_model_of_a_stored_run_has_its_reference(sweep2):
    df = fw.cost_model(sweep2)
    assert list(df["backend"]) == ["iptables-legacy", "nftables"]
    assert set(df["reference"]) == {"iptables-legacy"}
    ref = df.set_index("backend").loc["iptables-legacy"]
    assert ref.b_over_reference == 1.0


def test_cost_model_is_refused_for_a_run_that_is_no_sweep(drop2):
    with pytest.raises(fw.FwbenchError, match="droprate run .* has no cost per rule"):
        fw.cost_model(drop2)


def test_not_a_run_is_one_error(tmp_path):
    for f in (fw.trials, fw.cells, fw.cost_model, fw.findings):
        with pytest.raises(fw.FwbenchError, match="not an fwbench run"):
            f(tmp_path)


FINDING_COLUMNS = ["study", "key", "claim", "seed", "test", "margin", "ours", "verdict", "why"]


def test_a_run_of_no_study_has_no_findings(sweep2):
    df = fw.findings(sweep2)
    assert len(df) == 0 and list(df.columns) == FINDING_COLUMNS


def test_a_study_runs_findings_are_its_claims_decided(sweep2):
    meta = json.loads((sweep2 / "run.json").read_text())
    meta["scenario"]["study"] = "000"
    (sweep2 / "run.json").write_text(json.dumps(meta))
    df = fw.findings(sweep2)
    assert list(df.columns) == FINDING_COLUMNS
    assert list(df["key"]) == [c.key for c in fd.CLAIMS["000"]]
    assert set(df["study"]) == {"000"} and set(df["verdict"]) <= set(fd.VERDICTS)
    assert all(df["why"])     # every verdict says why, "not shown" too


def test_report_is_fwbench_reports(sweep2, tmp_path, monkeypatch):
    import fwbench.report
    calls = []

    def build(run_dir, out=None):
        calls.append((run_dir, out))
        return type("Files", (), {"html": Path(out) / "report.html"})()
    monkeypatch.setattr(fwbench.report, "build", build)   # the real one: test_report.py
    assert fw.report(sweep2, tmp_path) == tmp_path / "report.html"
    assert calls == [(sweep2, tmp_path)]


def test_readers_take_loaded_run_data_too(sweep2):
    from fwbench.report.data import load
    data = load(sweep2)
    pd.testing.assert_frame_equal(fw.trials(data), fw.trials(sweep2))


@pytest.mark.parametrize("kw, want", [
    ({"rules": 1000}, {"rules": [1000]}),
    ({"rules": "20,1_000"}, {"rules": [20, 1000]}),
    ({"backends": "none, nftables"}, {"backends": ["none", "nftables"]}),
    ({"frame_sizes": (64, 1518)}, {"frame_sizes": [64, 1518]}),
    ({"duration": 0.5, "max_repeat": 5}, {"duration_s": 0.5, "adaptive.max_repeat": 5}),
    ({"ruleset": "gw.rules", "iface": "eth0=client"},
     {"policy.file": "gw.rules", "policy.iface": "eth0=client"}),
    ({"throughput": {"preset": "rfc2544-strict"}}, {"throughput.preset": "rfc2544-strict"}),
])
def test_run_keywords_are_the_clis_flags(kw, want):
    assert fw._overrides(kw) == want


def test_run_checks_the_scenario_then_refuses_without_root(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(fw.FwbenchError, match="rules"):
        fw.run(None, tmp_path / "r", rules=[0])
    with pytest.raises(fw.FwbenchError, match="no_such_key"):
        fw.run(None, tmp_path / "r", no_such_key=1)
    with pytest.raises(fw.FwbenchError, match="must run as root"):
        fw.run("scenarios/quick.toml" if Path("scenarios/quick.toml").exists() else None,
               tmp_path / "r", backends=["none"], rules=[20])
    with pytest.raises(fw.FwbenchError, match="must run as root"):
        fw.resume(tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_studies_lists_the_five_and_study_refuses_what_it_cannot_run(monkeypatch):
    df = fw.studies()
    assert list(df["id"]) == ["000", "001", "002", "003", "004"]
    assert {"title", "scenario", "scale", "minutes", "claims"} <= set(df.columns)
    with pytest.raises(fw.FwbenchError, match="unknown study"):
        fw.study("9")
    with pytest.raises(fw.FwbenchError, match="fwbench study all"):
        fw.study("all")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(fw.FwbenchError, match="must run as root"):
        fw.study("002")
