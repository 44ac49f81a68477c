"""`fwbench run` of the echo experiment (seed 001) in a real testbed: every trial loads
the per-client rule set, verifies it, proves every client's own rules count that
client's messages, and measures the clients' echoes; a crr trial through the stateful
variant counts its connections; the report opens with the seed's findings and says
what was left out (SCTP on this kernel) and why."""
from __future__ import annotations

import json
import subprocess
import sys

SMALL = """name = "echo-test"
method = "echo"
backends = ["nftables"]
duration_s = 0.5
repeat = 1
seed = 3
[echo]
clients = [4]
protocols = ["udp", "sctp"]
families = ["ipv4"]
frames = [64]
servers = ["epoll"]
rules_per_client = [0, 4]
warmup_s = 0.2
[[echo.designs]]
name = "rules"
[[echo.designs]]
name = "crr"
protocols = ["tcp"]
families = ["ipv4"]
rules_per_client = [2]
transactions = ["crr"]
"""


def test_a_small_run_proves_every_clients_rules_and_reports(tmp_path, own_netns):
    sc = tmp_path / "s.toml"
    sc.write_text(SMALL)
    d = tmp_path / "run"
    cp = subprocess.run([sys.executable, "-m", "fwbench", "run", str(sc), "--out", str(d)],
                        capture_output=True, text=True, timeout=300)
    assert "left out" in cp.stderr and "SCTP" in cp.stderr, cp.stderr
    recs = [json.loads(x) for x in (d / "trials.jsonl").read_text().splitlines()]
    assert len(recs) == 2 + 1, cp.stderr
    for r in recs:
        assert r["status"] == "ok", r["reason"]
        f = r["factors"]
        proof, m = r["metrics"]["proof"], r["metrics"]
        assert r["verification"]["ok"] and proof["ok"]
        if f["rules_per_client"]:
            assert proof["rules_checked"] == 4 * f["rules_per_client"]
        if f["protocol"] == "udp" and f["rules_per_client"] == 4:
            # every client's four rules counted exactly its three messages (+ END up)
            assert proof["min_counted"] == {"up": 4, "down": 3, "mark_up": 4, "mark_down": 3}
        th = m["throughput"]
        assert th["msgs"] > 0 and 0 < th["jain"] <= 1 and len(m["per_client"]) == 4
        assert th["client_min_bps"] > 0 and m["rtt_us"]["p50"] > 0
        assert m["context_switches"]["server_voluntary"] + \
            m["context_switches"]["server_involuntary"] > 0
        assert m["client"]["totals"]["foreign"] == 0
        if f["transaction"] == "crr":
            assert m["client"]["totals"]["connects"] >= th["msgs"]
            assert m["server"]["connections"] >= th["msgs"]
    assert cp.returncode == 0, cp.stderr
    meta = json.loads((d / "run.json").read_text())
    assert any(why.startswith("sctp: this kernel has no SCTP") for why in meta["left_out"])
    md = (d / "report.md").read_text()
    for part in ("Seed 001's findings", "SCTP is slower than TCP", "this kernel has no SCTP",
                 "Loss per rule", "Decrease against plain forwarding", "fig-decrease-vs-rules"):
        assert part in md, part
    assert own_netns(d) == []
