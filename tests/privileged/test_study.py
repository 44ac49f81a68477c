"""`fwbench study` end to end on a study made small: its scenario runs, its report
opens with the study's findings, the page of all studies lists them with the time,
and running it again into the same directory finishes nothing twice."""
from __future__ import annotations

import io
import json

from rich.console import Console

from fwbench import studies

SMALL = """
name = "tiny-000"
study = "000"
backends = ["iptables-legacy", "nftables", "none"]
rules = [20, 1000]
frame_sizes = [64, 512]
repeat = 2
duration_s = 0.2
keep_loaded = true
[instrument]
ping_count = 5
"""


def test_a_small_study_runs_reports_its_findings_and_is_not_run_twice(
        tmp_path, monkeypatch, own_netns):
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "tiny.toml").write_text(SMALL)
    monkeypatch.setattr(studies, "SCENARIOS", tmp_path / "scenarios")
    st = studies.Study("000", "tiny", "tiny.toml", "two backends", "tiny", 1)
    monkeypatch.setattr(studies, "STUDIES", {"000": st})
    console = Console(file=io.StringIO(), width=200)
    done, page = studies.run_all(tmp_path / "all", console)
    (o,) = done
    assert o.trials == 20 and o.not_ok == 0 and own_netns(o.path) == []
    assert [f.claim.key for f in o.findings] == [c.key for c in studies.CLAIMS["000"]]
    first = o.findings[0]
    # per frame size, the mean over the rule counts >= 1,000, at the verdicts' level
    assert first.claim.key == "nft-slower-throughput" and "64 B " in first.ours
    assert "(90 %)" in first.ours or "(97.5 %)" in first.ours
    md = (o.path / "report.md").read_text()
    # the findings table comes right after the title and the run's line
    head = md[:md.index("## Seed 000's findings")].splitlines()
    assert not any(ln.startswith("#") for ln in head[1:]), head   # no heading between
    assert md.splitlines()[0] == "# fwbench report: tiny-000"
    assert (o.path / "findings.csv").read_text().count("\n") == 1 + len(o.findings)
    index = (tmp_path / "all" / "index.md").read_text()
    assert "Seed 000: tiny" in index and "1 of 1 studies" in index and "report: 000/" in index
    assert page.exists()
    # Again into the same directory: the run is complete, nothing runs twice.
    again = studies.run("000", o.path, console)
    assert again.trials == 20
    assert len((o.path / "trials.jsonl").read_text().splitlines()) == 20
    assert len(json.loads((o.path / "run.json").read_text())["sessions"]) == 1
