"""The `cpucost` method and its soaker, on the real machine: the soaker sees a known
load on its CPU, and a run measures every backend's cost per packet at one fixed load,
with the kernel's own run time for the eBPF program and the soaker gone afterwards."""
import json
import subprocess
import sys
import time

from fwbench.soaker import Soaker, busy_ns

CPU = 1


def test_the_soaker_sees_a_known_load_on_its_cpu():
    with Soaker(CPU) as s:
        idle = s.idle_rate(0.3)
        a = s.read()
        t0 = time.monotonic()
        hog = subprocess.Popen(["taskset", "-c", str(CPU), "sh", "-c", "while :; do :; done"])
        time.sleep(0.3)
        hog.kill()
        hog.wait()
        hogged = time.monotonic() - t0
        b = s.read()
    busy = busy_ns(a, b, idle) / 1e9
    # The hog had the CPU (the soaker runs at SCHED_IDLE) from its start to its end.
    assert abs(busy - hogged) < 0.25 * hogged, (busy, hogged)


def test_cpucost_run_ranks_backends_at_one_load(tmp_path, own_netns):
    d = tmp_path / "run"
    cp = subprocess.run(
        [sys.executable, "-m", "fwbench", "run", "--method", "cpucost",
         "--backends", "none,iptables-legacy,xdp-set", "--rules", "100",
         "--frame-sizes", "64", "--repeat", "1", "--duration", "0.5", "--out", str(d),
         "--no-report"], capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    recs = {r["factors"]["backend"]: r for r in map(json.loads, (d / "trials.jsonl")
                                                    .read_text().splitlines())}
    assert set(recs) == {"none", "iptables-legacy", "xdp-set"}
    for name, r in recs.items():
        m = r["metrics"]
        assert r["status"] == "ok", r
        assert m["offered_pps"] == 50_000 and not m["over_capacity"], m
        assert m["fw_busy_ns_per_pkt"] > 0 and 0 < m["fw_busy_fraction"] <= 1.05
        assert m["soaker"]["idle_rounds_per_s"] > 0
        # Only the eBPF backend has a program on the firewall's ingress, and the
        # kernel ran it for every packet that came through.
        assert ("bpf" in m) == (name == "xdp-set")
    prog = recs["xdp-set"]["metrics"]["bpf"]["xdp"]
    assert prog["run_cnt"] >= 0.99 * 50_000 * 0.5 and 0 < prog["ns_per_run"] < 5_000
    # A paced method sends with the packet socket under `auto`: the XDP sender's
    # paced runs start late and catch up in bursts.
    engine = json.loads((d / "run.json").read_text())["sessions"][0]["engine"]
    assert engine["sender"] == "packet" and engine["asked"] == "auto", engine
    assert "paces" in engine["why"]
    assert own_netns(d) == []
