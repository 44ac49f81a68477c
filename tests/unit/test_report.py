"""`fwbench report` and `fwbench compare` on runs made of known numbers: every figure in
the tables is recomputed here from trials.jsonl with numpy/scipy directly, the
conclusions must follow the planted differences and claim nothing else. The HTML in
headless Chromium: test_report_layout.py."""
from __future__ import annotations

import csv
import functools
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from fwbench import stats
from fwbench.plan import interleave, sweep_cells
from fwbench.report import analysis as an
from fwbench.report import build
from fwbench.report.data import RunData
from fwbench.report.data import load as build_data
from fwbench.report.compare import compare_runs
from fwbench.results import SCHEMA_VERSION, SWEEP_FACTORS, RunDir, TrialRecord
from fwbench.scenario import from_dict

# ns per packet: base a, per rule b (the relative noise is 2 %).
MODEL = {"none": (1000.0, 0.0), "iptables-legacy": (1050.0, 4.0), "nftables": (1100.0, 9.6),
         "ipset": (1400.0, 0.0), "nftset": (1400.0, 0.0)}
RULES = [20, 1000, 10000]
FRAMES = [64, 1518]


def make_records(model=MODEL, repeat=5, seed=1, noise=0.02, slower=None, machine=1.0):
    """(scenario, plan, records) of a maxrate run whose rx_pps follow `model`;
    `slower` = (backend, rules, factor) plants a slowdown in one cell, `machine` one
    in every cell (a slower machine state)."""
    sc = from_dict({"name": "synthetic", "backends": list(model), "rules": RULES,
                    "frame_sizes": FRAMES, "repeat": repeat, "duration_s": 0.5})
    plan = interleave(sweep_cells(list(model), RULES, FRAMES), repeat, seed)
    rng = np.random.default_rng(seed)
    records = []
    for i, k in enumerate(plan):
        backend, rules, frame_size = k.cell
        a, b = model[backend]
        ns = (a + b * rules) * (1 + noise * rng.standard_normal())
        if slower and (backend, rules) == slower[:2]:
            ns *= slower[2]
        ns *= machine
        pps = 1e9 / ns
        metrics = {"rx_pps": pps, "tx_pps": 1.2e6, "rtt_us_median": 50 + rules / 1000,
                   "latency_us": {"p50": 20.0 + ns / 1000, "p90": 30.0, "p99": 60.0,
                                  "p99_9": 120.0, "max": 300.0},
                   "cpu": {"fw_cpu_ns_per_pkt": ns}}
        records.append(TrialRecord(
            schema_version=SCHEMA_VERSION, run_id="t", trial=i,
            factors=dict(zip(SWEEP_FACTORS, k.cell)), method="maxrate", traffic="engine+ping",
            repetition=k.repetition, status="ok", reason=None,
            verification={"ok": True, "rules_loaded": rules, "reason": None},
            load_time_s=0.001 * (1 + rules / 1000), metrics=metrics,
            started_at="2026-01-01T00:00:00Z", duration_s=1.0, ruleset_sha256=None))
    return sc, plan, records


def make_run(path: Path, **kw) -> Path:
    sc, plan, records = make_records(**kw)
    rd = RunDir.create(path, {
        "scenario": sc.dump(), "skipped_backends": {}, "factors": list(SWEEP_FACTORS),
        "plan": [k.as_dict(SWEEP_FACTORS) for k in plan],
        "environment": {"kernel": "Linux test", "cpu_model": "test CPU", "cpus": 2,
                        "tools": {"iptables": "iptables v1.8.9 (legacy)"}},
        "sessions": []})
    with rd.trials.open("a") as f:
        f.writelines(r.to_json() + "\n" for r in records)
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = make_run(tmp_path_factory.mktemp("run") / "r", seed=3)
    return d, build(d)


def _trials(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "trials.jsonl").read_text().splitlines()]


def _values(d, backend, rules, frame, key="rx_pps"):
    return [t["metrics"][key] for t in sorted(_trials(d), key=lambda t: t["repetition"])
            if tuple(t["factors"][k] for k in ("backend", "rules", "frame_size")) == (backend, rules, frame)
            and t["status"] == "ok"]


def _csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _holm(ps):
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def test_files_are_written(report):
    d, files = report
    assert files.html == d / "report.html" and files.markdown.exists()
    assert {p.name for p in files.csvs} == {"cells.csv", "comparisons.csv", "cost_per_rule.csv",
                                           "crossovers.csv", "trials.csv", "against_best.csv"}
    html = files.html.read_text()
    # self-contained: no link, script or URL that would need the network
    assert "http://" not in html and "https://" not in html and "<script" not in html
    for f in FRAMES:
        assert f'id="fig-rx_pps-{f}"' in html and f'id="fig-cost-{f}"' in html
    assert html.count("<figure") == files.figures
    assert len(list((d / "figures").glob("*.svg"))) == files.figures


def test_comparison_csv_equals_a_recomputation(report):
    d, _ = report
    rows = [r for r in _csv(d / "comparisons.csv") if r["metric"] == "rx_pps"]
    pairs = an.default_pairs(build_data(d))   # those of analysis.DEFAULT_PAIRS it has
    assert pairs == [("iptables-legacy", "nftables"), ("ipset", "nftset"),
                     ("iptables-legacy", "ipset"), ("nftables", "nftset")]
    assert len(rows) == len(pairs) * len(FRAMES) * len(RULES)
    for pair in (("iptables-legacy", "nftables"), ("ipset", "nftset")):
        mine = [r for r in rows if (r["a"], r["b"]) == pair]
        ps = []
        for r in mine:
            a = _values(d, pair[0], int(r["rules"]), int(r["frame_size"]))
            b = _values(d, pair[1], int(r["rules"]), int(r["frame_size"]))
            # Every cell ran once a round (repetition = round): paired, by hand.
            diffs = np.log(a) - np.log(b)
            ref = sps.ttest_1samp(diffs, 0.0)
            ps.append(ref.pvalue)
            assert r["test"] == "paired t on log ratios, 5 rounds" and r["paired"] == "True"
            assert float(r["ratio"]) == pytest.approx(np.exp(np.mean(diffs)), rel=1e-12)
            assert float(r["p"]) == pytest.approx(ref.pvalue, rel=1e-9)
            assert float(r["mean_a"]) == pytest.approx(np.mean(a), rel=1e-12)
            assert float(r["median_b"]) == pytest.approx(np.median(b), rel=1e-12)
            assert float(r["seed_welch_p"]) == pytest.approx(
                sps.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-9)
            assert float(r["seed_mwu_p_two_sided"]) == pytest.approx(
                sps.mannwhitneyu(a, b).pvalue, rel=1e-9)
        for r, p in zip(mine, _holm(ps)):
            assert float(r["p_holm"]) == pytest.approx(p, rel=1e-9)
            # The interval is at the level Holm tested the cell at, so it excludes 1
            # exactly where the verdict is a difference.
            lo, hi = float(r["ratio_ci_low"]), float(r["ratio_ci_high"])
            assert (lo > 1 or hi < 1) == (r["verdict"] in ("better", "worse"))
            assert float(r["ci_level"]) >= 0.95


def _md_table(md: str, caption_start: str) -> list[list[str]]:
    block = md.split(f"*{caption_start}", 1)[1].split("\n\n", 2)[1]
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()]


def test_markdown_pair_table_equals_a_recomputation(report):
    """Seed 000's shape: rule-set sizes across, the two treatments' means, p-values."""
    d, files = report
    md = files.markdown.read_text()
    for f in FRAMES:
        t = _md_table(md, f"throughput at full throttle (packets/s), {f}-byte frames: mean")
        assert t[0][1:] == [f"{n:,}" for n in RULES]
        legacy = dict(zip(RULES, t[2][1:]))
        nft = dict(zip(RULES, t[3][1:]))
        assert t[5][0] == "p-value (t on the log ratio)"
        assert t[7][0] == "seed's test: Welch, p"
        paired, welch = dict(zip(RULES, t[5][1:])), dict(zip(RULES, t[7][1:]))
        for n in RULES:
            a, b = _values(d, "iptables-legacy", n, f), _values(d, "nftables", n, f)
            assert legacy[n] == f"{np.mean(a):,.0f}" and nft[n] == f"{np.mean(b):,.0f}"
            p = sps.ttest_1samp(np.log(a) - np.log(b), 0.0).pvalue
            assert float(paired[n].lstrip("<")) == pytest.approx(p, rel=0.06, abs=0.0006)
            p = sps.ttest_ind(a, b, equal_var=False).pvalue
            assert float(welch[n].lstrip("<")) == pytest.approx(p, rel=0.06, abs=0.0006)


def test_cells_csv_equals_a_recomputation(report):
    d, _ = report
    # Five values a cell: a resample's median is the smallest value with probability
    # P(Bin(5, 1/5) >= 3) = 5.8 %, above 2.5 % by far more than 9,999 resamples could
    # miss, so the 95 % percentile-bootstrap interval is min..max.
    assert sps.binom.sf(2, 5, 1 / 5) == pytest.approx(0.05792)
    rows = [r for r in _csv(d / "cells.csv") if r["metric"] == "rx_pps"]
    assert len(rows) == len(FRAMES) * (1 + (len(MODEL) - 1) * len(RULES))  # none: no rules
    for r in rows:
        xs = _values(d, r["backend"], int(r["rules"]), int(r["frame_size"]))
        assert int(r["n"]) == len(xs) == 5
        assert float(r["median"]) == pytest.approx(statistics.median(xs), rel=1e-12)
        assert float(r["sd"]) == pytest.approx(statistics.stdev(xs), rel=1e-9)
        assert float(r["median_ci_low"]) == pytest.approx(min(xs), rel=1e-12)
        assert float(r["median_ci_high"]) == pytest.approx(max(xs), rel=1e-12)


def test_cost_per_rule_recovers_the_model_with_intervals(report):
    d, files = report
    rows = {(r["backend"], int(r["frame_size"])): r for r in _csv(d / "cost_per_rule.csv")}
    for f in FRAMES:
        # (interval coverage itself is measured in test_stats.py)
        for backend in ("iptables-legacy", "nftables"):
            r = rows[(backend, f)]
            b, lo, hi = float(r["b_ns_per_rule"]), float(r["b_ci_low"]), float(r["b_ci_high"])
            assert b == pytest.approx(MODEL[backend][1], rel=0.03)
            assert lo < b < hi and hi - lo < 0.1 * b
        assert abs(float(rows[("ipset", f)]["b_ns_per_rule"])) < 0.05
        assert float(rows[("nftables", f)]["b_ci_low"]) > \
            float(rows[("iptables-legacy", f)]["b_ci_high"])
    md = files.markdown.read_text()
    assert re.search(r"nftables, 64 B: each rule adds 9\.\d+ ns per packet \(95 % interval", md)
    assert "ipset, 64 B: no cost per rule shown" in md


def test_crossover_of_legacy_and_ipset(report):
    """1050 + 4 N = 1400: N = 87.5, inside 20..10,000."""
    d, _ = report
    rows = [r for r in _csv(d / "crossovers.csv")
            if {r["a"], r["b"]} == {"iptables-legacy", "ipset"} and r["frame_size"] == "64"]
    assert len(rows) == 1
    r = rows[0]
    assert float(r["ci_low"]) < 87.5 < float(r["ci_high"]) and r["cheaper_below"] == \
        "iptables-legacy"


def test_conclusions_claim_the_planted_difference_and_nothing_else(report):
    _, files = report
    md = files.markdown.read_text()
    assert "iptables-legacy is faster than nftables (throughput at full throttle) at every " \
           "rule-set size measured for 64-byte frames, p < 0.001" in md
    assert "No difference in throughput at full throttle between ipset and nftset" in md


@pytest.fixture
def fewer_resamples(monkeypatch):
    """999 bootstrap resamples instead of 9,999, for a test that reads only the
    verdicts: those come from the t test on the log ratios and Holm's correction,
    never from a bootstrap interval, so not one of them changes."""
    for name in ("ratio_interval", "median_ci"):
        monkeypatch.setattr(stats, name, functools.partial(getattr(stats, name),
                                                           resamples=999))


def test_claims_without_a_difference_are_as_rare_as_holm_promises(fewer_resamples):
    """ipset and nftset follow the same model: over 200 runs, the chance that any
    cell of the pair is claimed different must stay near the 5 % family-wise level."""
    false_claims = 0
    for seed in range(200):
        sc, _, records = make_records(
            model={"ipset": MODEL["ipset"], "nftset": MODEL["nftset"]}, seed=seed)
        data = RunData(Path("x"), {"scenario": sc.dump(), "factors": list(SWEEP_FACTORS)}, records)
        rx = data.headline()
        tables = an.pair_tables(data, rx, an.summaries(data, rx), [("ipset", "nftset")])
        false_claims += any(c.kind in ("worse", "better")
                            for t in tables for c in an.conclusions(t))
    assert false_claims / 200 <= 0.08


def test_compare_finds_a_planted_slowdown_only(tmp_path):
    a = make_run(tmp_path / "a", seed=1)
    b = make_run(tmp_path / "b", seed=2, slower=("nftables", 10000, 1.5))
    files = compare_runs(a, b)
    hits = [s for s in files.sentences if "throughput" in s]
    assert hits and all(s.startswith("nftables N=10,000 ") for s in hits)
    assert all("worse in B" in s for s in hits)
    assert files.html.exists() and files.csv.exists()
    rows = [r for r in _csv(files.csv) if r["metric"] == "rx_pps" and
            r["backend"] == "nftables" and r["rules"] == "10000"]
    for r in rows:
        vb = _values(b, "nftables", 10000, int(r["frame_size"]))
        va = _values(a, "nftables", 10000, int(r["frame_size"]))
        # Two runs share no rounds: unpaired, the ratio of geometric means.
        assert r["test"].startswith("Welch t on logs")
        assert float(r["ratio_b_vs_a"]) == pytest.approx(
            np.exp(np.mean(np.log(vb)) - np.mean(np.log(va))), rel=1e-9)
        assert float(r["ratio_b_vs_a"]) == pytest.approx(1 / 1.5, abs=0.05)


def test_compare_normalised_sees_the_cell_not_the_machine(tmp_path):
    """B ran on a machine 1.6x slower, and nftables at 10,000 rules 1.5x slower still:
    raw rates differ everywhere; as fractions of each run's none, only that cell."""
    a = make_run(tmp_path / "a", seed=1)
    b = make_run(tmp_path / "b", seed=2, machine=1.6, slower=("nftables", 10000, 1.5))
    raw = [s for s in compare_runs(a, b, tmp_path / "raw").sentences if "throughput" in s]
    assert len(raw) > 4
    files = compare_runs(a, b, tmp_path / "norm", normalise=True)
    assert files.sentences and all(s.startswith("nftables N=10,000 ") and "worse in B" in s
                                   for s in files.sentences)
    assert "fraction of its run's own none backend" in files.markdown.read_text()


def test_cost_table_gives_each_cost_per_rule_against_the_reference(report):
    d, files = report
    (path,) = [p for p in files.csvs if p.name == "cost_per_rule.csv"]
    rows = {r["backend"]: r for r in _csv(path) if r["frame_size"] == "64"}
    ratio = float(rows["nftables"]["b_over_reference"])
    assert rows["nftables"]["reference"] == "iptables-legacy"
    assert ratio == pytest.approx(float(rows["nftables"]["b_ns_per_rule"]) /
                                  float(rows["iptables-legacy"]["b_ns_per_rule"]))
    assert float(rows["nftables"]["b_over_reference_low"]) < 9.6 / 4.0 < \
        float(rows["nftables"]["b_over_reference_high"])


def _fwbench(*args):
    return subprocess.run([sys.executable, "-m", "fwbench", *args], capture_output=True,
                          text=True, timeout=120)


def test_cli_report_and_compare(tmp_path):
    a = make_run(tmp_path / "a", repeat=3)
    cp = _fwbench("report", str(a), "--out", str(tmp_path / "rep"), "--pair",
                  "nftables:nftset")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip().splitlines()[-1] == f"report: {tmp_path / 'rep' / 'report.html'}"
    assert "nftables vs nftset" in (tmp_path / "rep" / "report.md").read_text()
    cp = _fwbench("compare", str(a), str(a), "--out", str(tmp_path / "cmp"))
    assert cp.returncode == 0 and "no cell differs" in cp.stdout


@pytest.mark.parametrize("args,message", [
    (["report", "/nonexistent"], "is not an fwbench run"),
    (["report", "{run}", "--pair", "nftables"], "expected two different backends"),
    (["report", "{run}", "--pair", "nftables:xdp-set"], "has no backend xdp-set"),
    (["report", "{run}", "--link-gbps", "0"], "--link-gbps must be positive"),
    (["compare", "{run}", "/nonexistent"], "is not an fwbench run"),
])
def test_cli_errors_are_one_line(tmp_path, args, message):
    run = make_run(tmp_path / "r", repeat=2)
    cp = _fwbench(*[a.format(run=run) for a in args])
    assert cp.returncode == 2
    assert len(cp.stderr.strip().splitlines()) == 1 and message in cp.stderr


def test_a_run_without_ok_trials_is_refused(tmp_path):
    d = make_run(tmp_path / "r", repeat=1)
    lines = [json.loads(x) for x in (d / "trials.jsonl").read_text().splitlines()]
    (d / "trials.jsonl").write_text("".join(
        json.dumps({**t, "status": "failed", "reason": "verification: x"}) + "\n"
        for t in lines))
    cp = _fwbench("report", str(d))
    assert cp.returncode == 2 and "no ok trial" in cp.stderr


def test_noise_and_failures_are_warned_about(tmp_path):
    d = make_run(tmp_path / "r", repeat=3, noise=0.3)
    lines = [json.loads(x) for x in (d / "trials.jsonl").read_text().splitlines()]
    lines[0] = {**lines[0], "status": "failed", "reason": "verification: probe lost"}
    (d / "trials.jsonl").write_text("".join(json.dumps(t) + "\n" for t in lines))
    md = build(d).markdown.read_text()
    warn = md.split("## Warnings", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in warn.splitlines()
            if line.startswith("| ")]
    assert rows[0] == ["kind", "cells", "detail"]
    failed = [r for r in rows if r[0] == "failed verification"]
    assert len(failed) == 1 and failed[0][2] == "failed verification: verification: probe lost"
    assert " rep " in failed[0][1]
    noisy = [r for r in rows if r[0] == "too noisy"]
    assert noisy and "too noisy to conclude" in noisy[0][2]
    assert all(r[2] == "as above" for r in noisy[1:])
    # one row per backend, its noisy cells listed after its name
    backends = [r[1].split(":")[0] for r in noisy]
    assert len(set(backends)) == len(noisy) and set(backends) <= set(MODEL)


def test_a_negative_slope_is_not_reported_as_a_cost_or_a_gain():
    from fwbench.stats import fit_cost
    pts = [(n, 1e9 / (1000 - 0.02 * n + e)) for n in (20, 1000, 10000) for e in (-1, 0, 1)]
    s = an.cost_sentence(an.CostRow("xdp-set", 64, fit_cost(pts), 0, pts))
    assert "fell as rules were added" in s and "adds" not in s and "drift" in s
