"""Adding an experiment is one package and one catalog line (fwbench.catalog): a toy
experiment written here into a package of its own, with its scenario section,
metrics, title and trial, runs through `fwbench run`, `fwbench report` and
`fwbench compare` as any other does. Nothing in fwbench names it: the catalog
line is added in the process that runs the command (the one a real experiment
adds to catalog.py), so the test shows that no other edit is needed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = '''"""A toy experiment: pings through an empty firewall, a few counts of them."""
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from fwbench.experiments.room import Room
from fwbench.metrics import Metric, at


class ToyPingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    counts: list[Annotated[int, Field(ge=1, le=20)]] = [2, 4]


ROOM = Room(
    "toyping", "toyping.experiment:ToyPing", "pings through the firewall",
    "ping RTT through an empty firewall",
    (Metric("rtt_ms", "ping RTT, mean", "ms", False, at("rtt_ms"), column="RTT ms"),
     Metric("answers", "ping answers", "packets", True, at("answers"), column="answers")),
    settings={"toyping": ToyPingSettings})
'''

EXPERIMENT = '''"""The toy's trials: `count` pings from the client to the server."""
import re

from fwbench.experiments.base import Experiment, Planned
from fwbench.testbed.topology import Topology

_RTT = re.compile(r"= [0-9.]+/([0-9.]+)/")


class ToyPing(Experiment):
    factors = ("count",)

    def preflight(self):
        pass

    def plan(self):
        return Planned(self.sc, [(c,) for c in self.sc.toyping.counts])

    def versions(self, planned):
        return {"toyping": "1"}

    def topology(self):
        return Topology.new()

    def open(self, tb, plan, console):
        return {}

    # The trial is Experiment.run_trial's pipeline; the toy loads no rule set
    # (no ruleset(), so nothing to load or verify) and supplies its measurement.

    def measure(self, tb, t, c, say):
        cp = tb.ping(tb.topo.server.ip4, c.count, 0.01, timeout_s=1.0)
        m = _RTT.search(cp.stdout)
        if cp.returncode or not m:
            t.fail(f"ping through the firewall: {cp.stdout.strip()[-80:]}")
        else:
            t.metrics = {"rtt_ms": float(m.group(1)),
                         "answers": int(re.search(r"(\\d+) received", cp.stdout).group(1))}

    def recorded_as(self, c):
        return "toyping", "ping"

    def line(self, rec):
        return f"{rec.metrics['rtt_ms']:.3f} ms"

    def summary(self, records, meta):
        return f"{sum(r.status == 'ok' for r in records)} of {len(records)} pings ok"
'''

# The one catalog line, in the process that runs the command.
BOOT = ("import sys; from fwbench import catalog; "
        "catalog.EXPERIMENTS['toyping'] = 'toyping:ROOM'; "
        "from fwbench.cli import main; raise SystemExit(main())")


@pytest.fixture
def fwbench(tmp_path):
    pkg = tmp_path / "pkgs" / "toyping"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PACKAGE)
    (pkg / "experiment.py").write_text(EXPERIMENT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path / "pkgs"), *filter(None, [os.environ.get("PYTHONPATH")])])}

    def run(*args: str) -> subprocess.CompletedProcess:
        cp = subprocess.run([sys.executable, "-c", BOOT, *args], capture_output=True,
                            text=True, env=env, timeout=300)
        assert cp.returncode == 0, cp.stderr[-2000:]
        return cp
    return run


def test_a_toy_experiment_is_one_package_and_one_catalog_line(fwbench, tmp_path,
                                                               own_netns):
    runs = []
    for name in ("a", "b"):
        d = tmp_path / name
        fwbench("run", "--method", "toyping", "--repeat", "2", "--seed", "4",
                "--out", str(d))
        runs.append(d)
        assert own_netns(d) == []
        meta = json.loads((d / "run.json").read_text())
        # its section is the scenario's, with the defaults its package declares
        assert meta["scenario"]["toyping"] == {"counts": [2, 4]}
        assert meta["factors"] == ["count"]
        recs = [json.loads(x) for x in (d / "trials.jsonl").read_text().splitlines()]
        assert sorted(r["factors"]["count"] for r in recs) == [2, 2, 4, 4]
        assert all(r["status"] == "ok" for r in recs), [r["reason"] for r in recs]
        assert sorted(r["metrics"]["answers"] for r in recs) == [2, 2, 4, 4]

    fwbench("report", str(runs[0]))
    md = (runs[0] / "report.md").read_text()
    # its metrics, by the labels its package gave them, in the report's cell tables
    assert "ping RTT, mean" in md and "ping answers" in md
    trials = (runs[0] / "trials.csv").read_text().splitlines()
    assert trials[0].split(",")[-2:] == ["rtt_ms", "answers"]
    assert len(trials) == 5

    fwbench("compare", str(runs[0]), str(runs[1]), "--out", str(tmp_path / "ab"))
    md = (tmp_path / "ab" / "compare.md").read_text()
    assert "## ping RTT, mean (ms)" in md and "## ping answers (packets)" in md
    rows = (tmp_path / "ab" / "compare.csv").read_text().splitlines()
    # every metric of the toy at every shared cell, by its factor
    assert rows[0].startswith("metric,count,n_a,n_b,")
    assert sorted(r.split(",")[:2] for r in rows[1:]) == [
        ["answers", "2"], ["answers", "4"], ["rtt_ms", "2"], ["rtt_ms", "4"]]
