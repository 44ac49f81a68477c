"""A toy backend, one module plus one registry line (tests/toys/toy_backend.py),
loaded and verified in a testbed, emptied by flush_all, and run by `fwbench run`
beside `none` into a report that groups it. The registry is put back after each
test (monkeypatch)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fwbench import backends as registry
from fwbench.backends.kernel import flush_all, nft_list, ruleset_state
from fwbench.cli import main
from fwbench.report import analysis as an
from fwbench.report import data as report_data
from fwbench.ruleset.templates.seed000 import seed000

TOYS = Path(__file__).resolve().parents[1] / "toys"


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.syspath_prepend(str(TOYS))
    import toy_backend
    monkeypatch.setitem(registry.REGISTRY, toy_backend.NAME, toy_backend.TARGET)
    b = registry.get(toy_backend.NAME)
    if why := b.unavailable():
        pytest.skip(f"{toy_backend.NAME} cannot run here: {why}")
    return toy_backend


def test_the_toy_loads_verifies_and_flush_all_empties_it(toy, testbed):
    b = registry.get(toy.NAME)
    rs = seed000(20)
    b.apply(testbed, rs)
    assert "table ip toy_fwbench {" in nft_list(testbed)
    v = b.verify(testbed, rs)
    assert v.ok, v.reason
    assert v.rules_loaded == b.expected_entries(rs) > 0
    assert ruleset_state(testbed)["nftables_tables"] == 1
    flush_all(testbed)
    assert {k: n for k, n in ruleset_state(testbed).items() if n} == {}


def test_fwbench_run_measures_the_toy_and_reports_it_in_its_group(toy, tmp_path, own_netns,
                                                                  capsys):
    d = tmp_path / "run"
    code = main(["run", "--backends", f"none,{toy.NAME}", "--rules", "20",
                 "--frame-sizes", "64", "--repeat", "1", "--duration", "0.2",
                 "--seed", "3", "--out", str(d)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert own_netns(d) == []
    trials = [json.loads(x) for x in (d / "trials.jsonl").read_text().splitlines()]
    assert {(t["factors"]["backend"], t["status"]) for t in trials} == {
        ("none", "ok"), (toy.NAME, "ok")}
    toy_trial = next(t for t in trials if t["factors"]["backend"] == toy.NAME)
    assert toy_trial["verification"]["ok"]
    data = report_data.load(d)
    assert an.groups(data.backends()) == [("netfilter, linear", [toy.NAME])]
    assert toy.NAME in (d / "report.html").read_text()
