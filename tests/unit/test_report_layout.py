"""A rule-count sweep's report leads with the answer, and its page stays readable with
ten backends: the ranking at a glance, the pairs a reader asks about (each backend
against the best, eBPF against netfilter, linear against indexed) with their
tests, warnings as a table, and a layout check in headless Chromium at 1280 px
(no text box overlaps another, nothing reaches past the page, every figure wide
enough and its text at least 9 px), on a quick-sized run (10 backends x 3 rule
counts x 2 frame sizes) and a seed-000-sized one (10 x 10 x 7); inside each figure
too, no two texts overlap.

The runs are synthetic, time per packet a + b*N per backend with 2 % noise, so the
ranking and the factors are known."""
from __future__ import annotations

import csv
import functools
import json
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from fwbench import stats
from fwbench.plan import interleave, sweep_cells
from fwbench.report import analysis as an
from fwbench.report import build
from fwbench.report.build import Report
from fwbench.report.data import load
from fwbench.report.document import markdown
from fwbench.results import SCHEMA_VERSION, SWEEP_FACTORS, RunDir, TrialRecord
from fwbench.scenario import from_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.browser import chromium_path, render  # noqa: E402

# ns per packet: base a, per rule b; near what the quick scenario measured
MODEL = {"none": (1000.0, 0.0), "iptables-legacy": (1050.0, 7.0),
         "iptables-nft": (1100.0, 13.0), "nftables": (1100.0, 22.0),
         "ipset": (1400.0, 0.0), "nftset": (1450.0, 0.0), "xdp-linear": (1010.0, 0.6),
         "xdp-set": (1020.0, 0.0), "tc-linear": (1300.0, 0.65), "tc-set": (1350.0, 0.0)}
QUICK = ([20, 1000, 10000], [64, 1518])
SEED000 = ([1, 10, 50, 100, 500, 1000, 2000, 5000, 10000, 20000],
           [64, 128, 256, 512, 1024, 1280, 1518])
WIDTH = 1280
MIN_FIGURE_PX = 500
MIN_FONT_PX = 9.0


def make_run(path: Path, rules: list[int], frames: list[int], repeat: int = 4,
             seed: int = 5, full: bool = True, model: dict = MODEL) -> Path:
    """A maxrate run of `model`; `full`: every metric maxrate records, else the rate only."""
    sc = from_dict({"name": "synthetic-10", "backends": list(model), "rules": rules,
                    "frame_sizes": frames, "repeat": repeat, "duration_s": 0.5})
    plan = interleave(sweep_cells(list(model), rules, frames), repeat, seed)
    rng = np.random.default_rng(seed)
    rd = RunDir.create(path, {
        "scenario": sc.dump(), "skipped_backends": {}, "factors": list(SWEEP_FACTORS),
        "plan": [k.as_dict(SWEEP_FACTORS) for k in plan],
        "environment": {"kernel": "Linux test", "cpu_model": "test CPU", "cpus": 2},
        "sessions": []})
    with rd.trials.open("a") as f:
        for i, k in enumerate(plan):
            backend, n, frame = k.cell
            a, b = model[backend]
            ns = (a + b * n) * (1 + 0.02 * rng.standard_normal())
            metrics = {"rx_pps": 1e9 / ns, "tx_pps": 1.5e6}
            if full:
                metrics |= {"rtt_us_median": 50 + n / 1000,
                            "latency_us": {"p50": 20.0 + ns / 1000, "p90": 30.0,
                                           "p99": 60.0, "p99_9": 120.0, "max": 300.0},
                            "cpu": {"fw_cpu_ns_per_pkt": ns}}
            f.write(TrialRecord(
                schema_version=SCHEMA_VERSION, run_id="t", trial=i,
                factors=dict(zip(SWEEP_FACTORS, k.cell)), method="maxrate",
                traffic="engine", repetition=k.repetition, status="ok", reason=None,
                verification={"ok": True, "rules_loaded": n, "reason": None},
                load_time_s=0.001 * (1 + n / 1000) if full else None, metrics=metrics,
                started_at="2026-01-01T00:00:00Z", duration_s=1.0,
                ruleset_sha256=None).to_json() + "\n")
    return path


@pytest.fixture(scope="module")
def fewer_resamples():
    """999 bootstrap resamples instead of 9,999: these tests read rankings, verdicts
    and layout, which that precision does not change, in a tenth of the time."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("ratio_interval", "median_ci"):
            mp.setattr(stats, name, functools.partial(getattr(stats, name), resamples=999))
        yield


@pytest.fixture(scope="module")
def quick(tmp_path_factory, fewer_resamples):
    d = make_run(tmp_path_factory.mktemp("quick") / "r", *QUICK)
    return d, build(d)


def _csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _truth(backend: str, n: int) -> float:
    a, b = MODEL[backend]
    return a + b * n


def test_the_report_leads_with_the_ranking(quick):
    d, files = quick
    md = files.markdown.read_text()
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert heads[:4] == ["## Ranking at a glance", "## Conclusions", "## Environment",
                         "## Warnings"]
    # where a caller's lead (the findings table) goes: after the title and the run's
    # line (this run names no study, so it has none)
    blocks = md.split("\n\n")
    assert Report.LEAD_AT == 2 and blocks[0].startswith("# fwbench report: ") and \
        blocks[Report.LEAD_AT] == "## Ranking at a glance"
    html = files.html.read_text()
    for f in QUICK[1]:
        assert f'id="fig-heat-{f}"' in html
    glance = (d / "figures" / "fig-glance-64.svg").read_text()
    for b in MODEL:   # every backend labelled at its line's end, as SVG text
        assert f">{b}  " in glance or (b == "none" and ">none (no firewall)" in glance)


def test_ranking_sentence_is_best_first_with_factors(quick):
    _, files = quick
    md = files.markdown.read_text()
    line = next(s for s in md.splitlines() if s.startswith("**At 10,000 rules, 64-byte"))
    expect = sorted((b for b in MODEL if b != "none"), key=lambda b: _truth(b, 10000))
    said = [part.split(" ")[0] for part in
            line.split("best first: ", 1)[1].split(" per packet")[0].split(", ")
            if part.split(" ")[0] in MODEL]
    assert said == expect
    # nftables: 221,100 ns, 221,100 / 1,020 = 217x the best's
    assert re.search(r"nftables 2\d\d,\d\d\d ns \(2\d\dx\)", line)


def test_each_backend_against_the_best_is_a_recomputation(quick):
    d, _ = quick
    rows = [r for r in _csv(d / "against_best.csv") if r["frame_size"] == "64"]
    trials = [json.loads(x) for x in (d / "trials.jsonl").read_text().splitlines()]

    def rates(b, n):
        return [t["metrics"]["rx_pps"] for t in sorted(trials, key=lambda t: t["repetition"])
                if (t["factors"]["backend"], t["factors"]["rules"],
                    t["factors"]["frame_size"]) == (b, n, 64)]
    assert {r["best"] for r in rows if r["rules"] == "10000"} == {"xdp-set"}
    for r in rows:
        n, b, best = int(r["rules"]), r["backend"], r["best"]
        # Each cell ran once a round: the log ratio, paired by round, by hand.
        d = np.log(rates(b, n)) - np.log(rates(best, n))
        assert r["test"].startswith("paired t on log ratios")
        assert float(r["p"]) == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue, rel=1e-9)
        factor = float(r["factor"])   # time per packet: the best's rate over b's
        assert factor == pytest.approx(np.exp(-np.mean(d)))
        lo, hi = float(r["factor_ci_low"]), float(r["factor_ci_high"])
        assert (lo > 1 or hi < 1) == (r["verdict"] in ("better", "worse"))
        if n == 10000 and b in ("nftables", "iptables-legacy", "xdp-linear"):
            truth = _truth(b, n) / _truth(best, n)
            assert float(r["factor_ci_low"]) < truth < float(r["factor_ci_high"])
            assert r["verdict"] == "worse"


def test_conclusions_cover_ebpf_against_netfilter_and_linear_against_indexed(quick):
    _, files = quick
    concl = files.markdown.read_text().split("## Conclusions", 1)[1].split("\n## ", 1)[0]
    for s in ("xdp-linear is faster than iptables-legacy (eBPF vs netfilter) at every rule "
              "count and frame size",
              "nftables is slower than nftset (linear vs indexed) at every rule count and "
              "frame size",
              "xdp-set is faster than ipset (eBPF vs netfilter) at every rule count and "
              "frame size",
              "iptables-legacy is faster than nftables (seed 000)"):
        assert s in concl
    # xdp-linear against xdp-set: 1,016 against 1,020 ns at 20 rules, 7,010 at 10,000
    line = next(x for x in concl.splitlines() if x.startswith("- xdp-linear is slower than "
                                                              "xdp-set"))
    assert "20 " not in line.split(":")[0] and "10,000" in line
    table = concl.split("| question |", 1)[1]
    assert "| linear vs indexed | iptables-legacy vs ipset | 64 | 20 |" in table
    assert "|  | nftables vs nftset | 64 | 20 |" in table
    assert "| xdp-set faster (generator-bound) |" in table   # 1,020 ns: within 5 % of none


def test_pair_flag_still_replaces_the_default_pairs(quick):
    d, _ = quick
    rep = Report(load(d), pairs=[("nftables", "iptables-nft")])
    assert rep.pairs == [("nftables", "iptables-nft")]
    text = markdown(rep.conclusions())
    assert "nftables is slower than iptables-nft (chosen)" in text
    assert " vs nftset" not in text and "than nftset" not in text


def test_default_pairs_are_the_ones_present():
    assert an.pair_kind("xdp-set", "ipset") == "eBPF vs netfilter"
    every = [p for _, pairs in an.pair_kinds() for p in pairs]
    assert ("ipset", "nftset") in every and len(set(every)) == len(every)
    assert [name for name, _ in an.groups(list(MODEL))] == [
        "netfilter, linear", "netfilter, indexed", "eBPF, linear", "eBPF, indexed"]


def test_without_none_the_heat_map_is_relative_to_the_best(tmp_path, fewer_resamples):
    model = {b: MODEL[b] for b in ("iptables-legacy", "nftables", "xdp-set")}
    d = make_run(tmp_path / "r", [100, 1000], [64], repeat=3, full=False, model=model)
    md = build(d).markdown.read_text()
    assert "coloured by its fraction of the best cell (the run has no `none`)" in md
    assert "| no none cell | - |" in md
    line = next(s for s in md.splitlines() if s.startswith("**At 1,000 rules, 64-byte"))
    assert line.split("best first: ")[1].startswith("xdp-set ") and "without a" not in line


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def assert_readable(html: Path, figures: int) -> None:
    """Render at 1280 px and check the page's layout; the screenshot stays beside it."""
    shot = html.with_name("report.1280px.png")
    # The bound catches a Chromium that hangs, not a slow one: with the machine's
    # two CPUs carrying four CPUs' work, one render took more than 90 s.
    page = render(html, timeout_s=300, width=WIDTH, screenshot=shot)
    assert page.console_errors == [] and page.exceptions == []
    assert page.external_requests == [] and page.failed_requests == []
    assert page.images_broken == [] and page.figures == figures
    lay = page.layout
    assert lay.text_boxes > 100
    assert lay.overlaps == []
    assert lay.overflows == [] and lay.page_width <= WIDTH
    assert len(lay.figures) == figures
    for f in lay.figures:
        assert f.width_px >= MIN_FIGURE_PX, f
        assert f.min_font_px is not None and f.min_font_px >= MIN_FONT_PX, f
        assert f.text_overlaps == [], f   # tick labels, line labels, titles
    assert _png_size(shot)[0] == WIDTH


def test_quick_report_is_readable_at_1280_px(quick):
    if chromium_path() is None:
        pytest.skip("chromium is not installed (scripts/setup.sh --with-browser)")
    _, files = quick
    assert_readable(files.html, files.figures)


def test_seed000_sized_report_is_readable_at_1280_px(tmp_path, fewer_resamples):
    if chromium_path() is None:
        pytest.skip("chromium is not installed (scripts/setup.sh --with-browser)")
    d = make_run(tmp_path / "r", *SEED000, repeat=3, full=False)
    files = build(d)
    assert files.figures >= 2 * len(SEED000[1])
    assert_readable(files.html, files.figures)
