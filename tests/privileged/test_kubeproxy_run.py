"""`fwbench run` of the kubeproxy experiment in a real testbed: each trial loads
kube-proxy's rule set of one mode, verifies it, proves DNAT with real connections,
and measures first-packet latency, one service's endpoint spread, the
connection rate and the control plane (one service added and removed by
kube-proxy's partial sync and by the smallest batch, each change proved); every
connection is counted at the endpoint it reached; the
report holds the operator's tables and the published claims."""
from __future__ import annotations

import json
import subprocess
import sys

SMALL = """name = "kp-test"
method = "kubeproxy"
duration_s = 1.0
repeat = 1
seed = 5
[kubeproxy]
services = [100]
endpoints = 3
configs = ["iptables-legacy:iptables", "nftables:nftables"]
latency_rate = 400.0
spread_connections = 150
search_start = 1000.0
search_max = 2000.0
search_step_s = 0.5
flows = 4
flow_s = 0.5
control = ["sync", "batch"]
listings = 2
"""


def test_a_small_run_measures_every_connection_and_reports(tmp_path, own_netns):
    sc = tmp_path / "s.toml"
    sc.write_text(SMALL)
    d = tmp_path / "run"
    cp = subprocess.run([sys.executable, "-m", "fwbench", "run", str(sc), "--out", str(d)],
                        capture_output=True, text=True, timeout=300)
    recs = [json.loads(x) for x in (d / "trials.jsonl").read_text().splitlines()]
    assert sorted(tuple(r["factors"].values()) for r in recs) == [
        ("iptables-legacy", "iptables", 100), ("nftables", "nftables", 100),
        ("none", "direct", 0)], cp.stderr
    for r in recs:
        assert r["status"] == "ok", r["reason"]
        m, direct = r["metrics"], r["factors"]["mode"] == "direct"
        if not direct:
            assert r["verification"]["ok"], r["verification"]
        proof = m["proof"]
        assert proof["connected"] == proof["accepted"] == proof["sent"]
        # the burst to the first service reached its endpoints (direct: one)
        assert len(proof["endpoints"]) == (1 if direct else 3), proof
        c = m["connect"]
        assert c["scheduled"] == 400 and c["connected"] == 400, c
        assert 0 < c["rtt"]["p01"] <= c["rtt"]["p50"] <= c["rtt"]["p99"]
        lo, hi = c["rtt_interval"]["p50"]
        assert lo <= c["rtt"]["p50"] <= hi
        if not direct:
            # every connection of the latency phase ended at an endpoint of a service
            assert m["position"]["total"] == 400 and m["position"]["p"] is not None
        sp = m["spread"]
        assert sp["connected"] == 150 and sum(sp["service"]["counts"]) == 150
        assert sp["service"]["p"] is not None
        fl = m["flows"]
        # every flow connected through DNAT (direct: to the endpoint) and echoed
        assert fl["totals"]["connects"] == 4 and fl["totals"]["connect_failed"] == 0, fl
        assert fl["msgs"] > 0 and fl["msgs_per_s"] > 0 and fl["rtt"]["p50"] > 0, fl
        s = m["search"]
        assert s["steps"] and s["steps"][0]["rate"] == 1000.0
        assert s["held"] is not None or s["failed_at"] is not None, s
        if s["held"] == 2000.0:
            assert s["limited_by"] == "search_max"
        if not direct:
            assert r["load_time_s"] > 0
            control = m["control"]
            assert control["services"] == 100 and control["added"]["service"] == "svc-100"
            for mech in ("sync", "batch"):
                for what in ("add", "remove"):
                    step = control["mechanisms"][mech][what]
                    # proved: the kernel held the rule set with the service, then without
                    assert step["command_s"] > 0 and step["steps"] >= 1, step
                    assert step["entries"] > 0, step
                assert control["mechanisms"][mech]["add"]["entries"] > \
                    control["mechanisms"][mech]["remove"]["entries"]
            assert len(control["listing"]["all_s"]) == 2 and control["listing"]["s"] > 0
            mem = m["memory"]
            assert mem["meminfo"]["resolution_bytes"] == 1024
            # 100 services hold less than the charge caches' slack (64 pages a
            # CPU): only that the reading was taken
            assert isinstance(mem["held_bytes"], int), mem
        else:
            assert "control" not in m and "memory" not in m
    assert cp.returncode == 0, cp.stderr
    md = (d / "report.md").read_text()
    for part in ("## Kubernetes service proxying", "### The published claims",
                 "nftables mode's median first packet is about", "### First-packet latency",
                 "### Connection rate", "### Full sync", "no rules (direct)",
                 "### Control plane: one service at a time", "sync add ms",
                 "### Established flows"):
        assert part in md, part
    assert own_netns(d) == []
