"""The report of a real run: `fwbench run` ends by writing report.html and printing
its path; the cost per rule of iptables-legacy and nftables comes with intervals and
nftables' is the larger (seeds 000 and 003); the page renders in headless Chromium."""
import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.browser import chromium_path, render  # noqa: E402


def cost_per_rule(d: Path) -> dict[str, tuple[float, float, float]]:
    """cost_per_rule.csv's (low, estimate, high) ns a rule of the two backends; a
    backend the fit left out (its small cells within 5 % of the no-firewall rate,
    seen on a busy machine) is missing."""
    with (d / "cost_per_rule.csv").open() as f:
        cost = {r["backend"]: r for r in csv.DictReader(f)}
    return {b: tuple(float(cost[b][k]) for k in ("b_ci_low", "b_ns_per_rule", "b_ci_high"))
            for b in ("iptables-legacy", "nftables") if b in cost}


def cost_holds(cost: dict[str, tuple[float, float, float]]) -> bool:
    """Both costs fitted, each an interval around its estimate, above zero;
    nftables' the larger."""
    return len(cost) == 2 and all(0 < lo < mid < hi for lo, mid, hi in cost.values()) \
        and cost["nftables"][1] > cost["iptables-legacy"][1]


def test_a_real_run_ends_with_a_report(finished_sweep, own_netns, tmp_path):
    """The run is conftest's `finished_sweep` (none, iptables-legacy and nftables at
    20 and 2,000 rules, 64 B, three repetitions of 0.3 s, five pings each), which
    test_run reads too."""
    cp, d = finished_sweep.cp, finished_sweep.path
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip().splitlines()[-1] == f"report: {d / 'report.html'}"
    assert own_netns(d) == []

    costs = [cost_per_rule(d)]
    for attempt in range(2):
        # A rule costs something on both, and more on nftables: a claim about the
        # kernel that three 0.3 s trials a cell can miss when other work on the
        # machine slows the 20-rule cells (a negative cost, or the order turned).
        # The sweep is then run again, twice at most, and one of them must show it.
        if cost_holds(costs[-1]):
            break
        again = tmp_path / f"again{attempt}"
        cp2 = subprocess.run([sys.executable, "-m", "fwbench", "run",
                              *finished_sweep.args, "--out", str(again)],
                             capture_output=True, text=True, timeout=600)
        assert cp2.returncode == 0, cp2.stderr[-2000:]
        costs.append(cost_per_rule(again))
    assert cost_holds(costs[-1]), f"(lo, mid, hi) ns a rule, each sweep: {costs}"

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
