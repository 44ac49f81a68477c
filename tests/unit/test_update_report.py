"""`fwbench report` of an update run made of known numbers: the latency table's
means and intervals, the cost per entry recovering the planted slope, which
mechanisms spared the kept flow, and the figures."""
from __future__ import annotations

import statistics

import numpy as np
import pytest
from scipy import stats as sps

from fwbench.report import build
from fwbench.experiments.update import section as rep
from fwbench.report.data import load
from fwbench.results import SCHEMA_VERSION, RunDir, TrialRecord
from fwbench.scenario import from_dict
from fwbench.experiments.update.experiment import FACTORS

# update latency in s = a + b * rules, per (backend, mechanism)
MODEL = {("iptables-legacy", "batch"): (0.004, 2e-6), ("nftables", "batch"): (0.002, 1e-8),
         ("nftables", "reload"): (0.010, 4e-6)}
RULES = [1000, 10000, 100000]


def record(i, backend, rules, mech, rep_, latency, lost=0):
    series = {"t0_s": -0.5, "slot_s": 0.001, "kept_due": [10] * 1500,
              "kept_received": [10] * 1500, "kept_mean_us": [40.0] * 1500,
              "kept_max_us": [60.0] * 1500, "probe_received": [0] * 750 + [5] * 750}
    return TrialRecord(
        schema_version=SCHEMA_VERSION, run_id="abc", trial=i,
        factors=dict(zip(FACTORS, (backend, rules, "add-end", mech))), method="update",
        traffic="engine", repetition=rep_, status="ok", reason=None,
        verification={"ok": True}, load_time_s=0.1,
        metrics={"update_s": latency, "update_resolution_s": 0.0001,
                 "command_s": latency + 0.001, "effect_minus_exit_s": -0.001,
                 "kept": {"sent": 10000, "received": 10000 - lost, "lost": lost,
                          "lost_during": lost, "max_gap_s": 0.0002, "max_gap_end_s": 0.1,
                          "baseline_latency_us": 40.0, "baseline_p99_slot_max_us": 60.0,
                          "peak_latency_us": 80.0, "recovery_s": 0.0},
                 "series": series, "after": {"ok": True},
                 "memory": {"held_bytes": 300 * rules, "update_peak_bytes": 600 * rules,
                            "after_update_bytes": 0, "samples": 5}},
        started_at="2026-01-01T00:00:00Z", duration_s=2.0, ruleset_sha256=None,
        conditions={"atomic": mech != "commands"})


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    rng = np.random.default_rng(4)
    recs, plan, i = [], [], 0
    for r in range(4):
        for (b, mech), (a, slope) in MODEL.items():
            for n in RULES:
                lat = (a + slope * n) * (1 + 0.03 * rng.standard_normal())
                lost = 7 if (b, mech, n, r) == ("nftables", "reload", 100000, 2) else 0
                recs.append(record(i, b, n, mech, r, lat, lost))
                plan.append({"backend": b, "rules": n, "kind": "add-end", "mechanism": mech,
                             "repetition": r})
                i += 1
    sc = from_dict({"name": "upd", "method": "update", "backends": ["iptables-legacy",
                    "nftables"], "rules": RULES, "repeat": 4})
    d = tmp_path_factory.mktemp("run") / "r"
    rd = RunDir.create(d, {"scenario": sc.dump(), "skipped_backends": {},
                           "factors": list(FACTORS), "plan": plan,
                           "environment": {"kernel": "Linux test", "cpu_model": "test",
                                           "cpus": 2, "tools": {}}, "sessions": []})
    with rd.trials.open("a") as f:
        f.writelines(x.to_json() + "\n" for x in recs)
    return d, recs


def test_the_latency_table_gives_means_and_t_intervals(run):
    d, recs = run
    table = rep.latency_table(rep.cells(load(d)))
    row = next(r for r in table.rows if r[1] == "100,000" and r[2] == "nftables"
               and r[3].startswith("reload"))
    lat = [1e3 * x.metrics["update_s"] for x in recs
           if (x.factors["backend"], x.factors["rules"], x.factors["mechanism"])
           == ("nftables", 100000, "reload")]
    m = statistics.fmean(lat)
    half = sps.t.ppf(0.975, 3) * statistics.stdev(lat) / 2
    assert row[4] == f"{m:,.1f} [{m - half:,.1f}, {m + half:,.1f}]"
    assert row[3] == "reload (atomic)"


def test_the_cost_per_entry_recovers_the_planted_slope(run):
    d, _ = run
    table = rep.cost_table(rep.cells(load(d)))
    row = next(r for r in table.rows if r[1] == "iptables-legacy")
    per_k, iv = row[3].split(" [")
    lo, hi = (float(x) for x in iv.rstrip("]").split(", "))
    assert lo <= 2e-6 * 1e3 * 1e3 <= hi          # 2 ms per 1,000 entries
    assert float(per_k) == pytest.approx(2.0, rel=0.1)


def test_the_kept_flow_sentence_names_what_lost(run):
    d, _ = run
    text = rep.zero_loss(rep.cells(load(d))).text
    assert "lost no packet in any trial of iptables-legacy by batch, nftables by batch" in text
    assert "nftables by reload (7 in 1 of 12 trials, atomic)" in text


def test_the_whole_report_builds(run):
    d, _ = run
    build(d)
    md = (d / "report.md").read_text()
    for part in ("Rule-set updates under traffic", "Time until in effect",
                 "What the kept flow saw", "fig-update-latency-add-end.svg",
                 "fig-update-series-add-end.svg", "ms per 1,000 entries",
                 "MiB held [95 %]"):
        assert part in md, part


def test_memory_per_entry(run):
    d, _ = run
    held, peak = rep.memory_tables(rep.cells(load(d)))
    row = next(r for r in held.rows if r[:2] == ["nftables", "100,000"])
    assert row[3] == "300" and row[2].startswith("28.61 [28.61, 28.61]")
    assert any(r[4] == "57.22" for r in peak.rows)
