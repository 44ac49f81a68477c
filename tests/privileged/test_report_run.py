"""The report of a real run: `fwbench run` ends by writing report.html and printing
its path; the cost per rule of iptables-legacy and nftables comes with intervals and
nftables' is the larger (seeds 000 and 003); the page renders in headless Chromium."""
import csv
import json
import math
import sys
from pathlib import Path

import pytest
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.browser import chromium_path, render  # noqa: E402


def test_a_real_run_ends_with_a_report(finished_sweep, own_netns):
    """The run is conftest's `finished_sweep` (none, iptables-legacy and nftables at
    20 and 2,000 rules, 64 B, three repetitions of 0.3 s, five pings each), which
    test_run reads too."""
    cp, d = finished_sweep.cp, finished_sweep.path
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip().splitlines()[-1] == f"report: {d / 'report.html'}"
    assert own_netns(d) == []

    with (d / "cost_per_rule.csv").open() as f:
        cost = {r["backend"]: r for r in csv.DictReader(f)}
    for b in ("iptables-legacy", "nftables"):
        lo, mid, hi = (float(cost[b][k]) for k in ("b_ci_low", "b_ns_per_rule", "b_ci_high"))
        assert 0 < lo < mid < hi, (b, lo, mid, hi)
    assert float(cost["nftables"]["b_ns_per_rule"]) > float(cost["iptables-legacy"]["b_ns_per_rule"])

    # the pair table's p-values are recomputed from trials.jsonl: the log ratios of
    # the rounds both cells have an ok trial in (a round = a repetition here)
    trials = [json.loads(x) for x in (d / "trials.jsonl").read_text().splitlines()]
    with (d / "comparisons.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["metric"] == "rx_pps"]
    assert {int(r["rules"]) for r in rows} == {20, 2000}
    for r in rows:
        a, b = ({t["repetition"]: t["metrics"]["rx_pps"] for t in trials
                 if t["factors"]["backend"] == x and t["status"] == "ok"
                 and t["factors"]["rules"] == int(r["rules"])
                 and t["factors"]["frame_size"] == int(r["frame_size"])}
                for x in (r["a"], r["b"]))
        shared = sorted(set(a) & set(b))
        diffs = [math.log(a[k]) - math.log(b[k]) for k in shared]
        assert r["test"] == f"paired t on log ratios, {len(shared)} rounds"
        assert float(r["p"]) == pytest.approx(sps.ttest_1samp(diffs, 0.0).pvalue, rel=1e-9)
        assert float(r["seed_welch_p"]) == pytest.approx(
            sps.ttest_ind(list(a.values()), list(b.values()), equal_var=False).pvalue,
            rel=1e-9)

    if chromium_path() is None:
        pytest.skip("chromium is not installed (./test.sh installs it)")
    page = render(d / "report.html")
    assert page.console_errors == [] and page.exceptions == [] and page.external_requests == []
    assert page.images_broken == [] and page.figures >= 5  # 4 metrics + the cost model
    assert "iptables-legacy vs nftables" in page.text
