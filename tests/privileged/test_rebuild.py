"""A testbed that breaks mid-run is noticed and rebuilt (experiments.loop): here a
trial deletes the client's link in a real testbed, the ping through the firewall
fails, health() names what is gone, and the trial runs again on a new testbed."""
from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from fwbench import catalog
from fwbench.experiments import loop
from fwbench.experiments.base import Experiment, Planned
from fwbench.experiments.room import Room
from fwbench.metrics import Metric
from fwbench.scenario import from_dict
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology

CUT: list[int] = []    # plan positions whose first run cuts the client's link


class Pinger(Experiment):
    """Three cells, one ping each through the firewall."""
    factors = ("cell",)

    def preflight(self) -> None:
        pass

    def plan(self) -> Planned:
        return Planned(self.sc, [("a",), ("b",), ("c",)])

    def versions(self, planned):
        return {}

    def topology(self) -> Topology:
        return Topology.new()

    def open(self, tb, plan, console) -> dict:
        return {}

    def measure(self, tb, t, c, say):
        if t.idx in CUT:
            CUT.remove(t.idx)
            tb.ip("client", "link", "del", tb.topo.client.ifname)
        cp = tb.ping(tb.topo.server.ip4, 3, 0.01, timeout_s=0.5)
        if cp.returncode:
            t.fail("ping through the firewall: no answer")
        else:
            t.metrics = {"answers": 3}

    def recorded_as(self, c):
        return "pinger", "ping"

    def line(self, rec) -> str:
        return "answered"

    def summary(self, records, meta):
        return f"{len(records)} pings"


ROOM = Room("pinger", f"{__name__}:Pinger", "pings", "answers", (
    Metric("answers", "answers", "packets", True, lambda r: r.metrics["answers"],
           throughput=True, column="answers"),))


@pytest.fixture
def pinger(monkeypatch):
    monkeypatch.setitem(catalog.EXPERIMENTS, "pinger", f"{__name__}:ROOM")
    CUT.clear()
    yield
    CUT.clear()


def test_health_names_what_broke(testbed: NetnsTestbed):
    assert testbed.health() is None
    testbed.sysctl("fw", "net.ipv4.ip_forward=0")
    assert testbed.health() == "forwarding is off in fw"
    testbed.sysctl("fw", "net.ipv4.ip_forward=1")
    testbed.ip("server", "link", "set", testbed.topo.server.ifname, "down")
    assert "is down" in testbed.health()


def test_a_cut_link_is_noticed_and_the_testbed_rebuilt(pinger, tmp_path, own_netns):
    sc = from_dict({"name": "pinger", "method": "pinger", "repeat": 2, "seed": 3})
    CUT.append(2)
    out = io.StringIO()
    outcome = loop.start(sc, tmp_path / "run", Console(file=out, width=200))
    recs = outcome.records
    assert len(recs) == outcome.planned == 6
    assert all(r.status == "ok" for r in recs), [r.reason for r in recs]
    sessions = json.loads((tmp_path / "run" / "run.json").read_text())["sessions"]
    assert len(sessions) == 2 and "is gone" in sessions[1]["rebuilt_after"]
    assert "ping through the firewall: no answer" in sessions[1]["rebuilt_after"]
    assert sessions[0]["testbed_id"] != sessions[1]["testbed_id"]
    assert "the testbed broke" in out.getvalue()
    assert own_netns(tmp_path / "run") == []
