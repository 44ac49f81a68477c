"""`fwbench run` of the loadlatency experiment in a real testbed: every trial loads
a seed 004 rule set, verifies it, proves NAT and state with a real connection, and
measures ping and the engine's probes with and without iperf3's bidirectional load;
the report holds the seed's tables and figures."""
from __future__ import annotations

import json
import subprocess
import sys

SMALL = """name = "ll-test"
method = "loadlatency"
backends = ["iptables-legacy"]
duration_s = 1.0
repeat = 1
seed = 3
[loadlatency]
rulesets = ["seed004-nat"]
loads = ["none", "tcp-bidir"]
"""


def test_a_small_run_measures_proves_and_reports(tmp_path, own_netns):
    sc = tmp_path / "s.toml"
    sc.write_text(SMALL)
    d = tmp_path / "run"
    cp = subprocess.run([sys.executable, "-m", "fwbench", "run", str(sc), "--out", str(d)],
                        capture_output=True, text=True, timeout=300)
    recs = [json.loads(x) for x in (d / "trials.jsonl").read_text().splitlines()]
    assert len(recs) == 2, cp.stderr
    for r in recs:
        assert r["status"] == "ok", r["reason"]
        assert r["verification"]["ok"] and r["metrics"]["proof"]["ok"]
        m = r["metrics"]
        assert m["ping"]["count"] > 0 and m["ping"]["mean"] > 0
        assert len(m["series"]["ping"]) == 1 and len(m["series"]["probes"]) == 1
        assert m["ping_replies"] and m["probes"]["received"] > 0
        # the ping and the probes just measured through the stateful NAT left
        # their entries in the table
        assert m["conntrack"]["count"] > 0 and m["conntrack"]["max"] > 0, m["conntrack"]
        if r["factors"]["load"] == "tcp-bidir":
            assert m["load"]["up_bps"] > 0 and m["load"]["down_bps"] > 0
        else:
            assert "load" not in m
    assert cp.returncode == 0, cp.stderr
    meta = json.loads((d / "run.json").read_text())
    assert meta["factors"] == ["ruleset", "backend", "load", "entries"]
    assert meta["sessions"][0]["load_reference"]["up_bps"] > 0
    md = (d / "report.md").read_text()
    for part in ("Seed 004's questions", "the seed's Tables 2 and 3", "NAT against",
                 "fig-rtt-cdf-tcp-bidir.svg", "fig-rtt-series-p99-none.svg"):
        assert part in md, part
    assert own_netns(d) == []
