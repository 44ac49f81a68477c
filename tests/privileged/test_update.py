"""Rule-set updates under traffic in a real testbed: the sink's time series counts
exactly what the senders scheduled, stream by stream; every backend's update
mechanisms make the change the kernel then holds, and the probe flow says when;
a mechanism a backend lacks is one line and a non-zero exit."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from fwbench import engine
from fwbench.errors import FwbenchError
from fwbench.experiments.update import series
from fwbench.traffic.native import PacedStreams


@pytest.fixture
def testbed(firewall):
    """The module's tests share one testbed, every firewall emptied around each test
    (conftest's `firewall`): building one per test cost ~1.5 s."""
    return firewall


def test_the_sink_series_counts_each_stream_as_scheduled(testbed):
    # The update experiment's instrument (traffic.native.PacedStreams), as it runs.
    with PacedStreams(testbed, ((5201, 2000), (5202, 500)), frame_size=64,
                      slot_ns=1_000_000, limit_s=60) as flows:
        time.sleep(1.0)
        reports = flows.stop()
        time.sleep(0.05)
        got, sr = flows.read()
    base = sr["base_ns"]
    assert sr["slot_ns"] == 1_000_000 and base <= reports[0]["t0_ns"]
    assert all(r["stopped"] for r in reports)
    assert [r["streams"][0]["stream"] for r in reports] == [0, 1]
    assert got["received"] == sum(r["sent"] for r in reports) and got["duplicated"] == 0
    for rep, d in zip(reports, sr["streams"]):
        s = series.Stream.of(d)
        sched = series.Schedule(rep["t0_ns"], rep["offered_pps"], rep["sent"])
        # Never ahead of its schedule over the time it sent (a busy machine may
        # leave it behind: the series below is held to what it sent).
        assert 0 < rep["sent"] <= rep["offered_pps"] * rep["active_s"] + 1, rep
        assert s.received == rep["sent"] and s.outside == 0
        assert s.first_sched_ns == rep["t0_ns"]
        # The first packet arrives after it was due, on the same clock: within the
        # sender's own worst lag and a path's 100 ms (another clock is seconds off).
        lag = rep["send_lag_ns"]["max"]
        assert rep["t0_ns"] < s.first_arrival_ns < rep["t0_ns"] + lag + 100_000_000
        assert s.last_sched_ns == sched.due()[-1]
        want = sched.per_slot(base, 1_000_000, s.first_slot + len(s.packets))
        assert s.packets.tolist() == want[s.first_slot:].tolist()
        assert 0 < s.max_gap_ns < lag + 200_000_000


def test_a_stream_past_the_receivers_is_one_line(testbed):
    with pytest.raises(FwbenchError, match="--stream: streams 63..64 run past"):
        engine.send(testbed, frame_size=64, rate_pps=100, duration_s=0.1, cookie=1,
                    threads=2, stream=63)


SMALL = """name = "update-test"
method = "update"
backends = [{backends}]
rules = [300]
repeat = 1
seed = 5
[update]
kinds = [{kinds}]
mechanisms = [{mechanisms}]
flow_pps = 5000
before_s = 0.3
after_s = 0.3
"""


def run(tmp_path, backends, kinds, mechanisms, timeout=600):
    q = lambda xs: ", ".join(f'"{x}"' for x in xs)  # noqa: E731
    sc = tmp_path / "s.toml"
    sc.write_text(SMALL.format(backends=q(backends), kinds=q(kinds),
                               mechanisms=q(mechanisms)))
    d = tmp_path / "run"
    cp = subprocess.run([sys.executable, "-m", "fwbench", "run", str(sc), "--out", str(d)],
                        capture_output=True, text=True, timeout=timeout)
    return cp, d


def records(d):
    return [json.loads(x) for x in (d / "trials.jsonl").read_text().splitlines()]


def check_trial(r):
    assert r["status"] == "ok", (r["factors"], r["reason"])
    m = r["metrics"]
    assert m["after"]["ok"]
    # In effect after the first command began, and not long after the last ended.
    assert -m["update_resolution_s"] <= m["update_s"] <= m["command_s"] + 0.2
    kept = m["kept"]
    assert kept["sent"] > 0 and kept["received"] > 0 and kept["baseline_latency_us"] > 0
    return m


NETFILTER = {("iptables-legacy", "nftables"): ("add-front", "delete"),
             ("ipset", "nftset"): ("elements-delete-10pct",)}
MECHANISMS = ("reload", "batch", "commands")


def test_netfilter_updates_take_effect_and_spare_the_kept_flow(tmp_path, own_netns):
    """The linear backends add at the front and delete, the set backends delete 10 %
    of their elements, by every mechanism: one run (one testbed, one report) for all
    four, as a kind that changes rules is left out for a set backend and one that
    changes elements for a linear one."""
    backends = [b for bs in NETFILTER for b in bs]
    kinds = [k for ks in NETFILTER.values() for k in ks]
    cp, d = run(tmp_path, backends, kinds, list(MECHANISMS))
    recs = records(d)
    assert sorted((r["factors"]["backend"], r["factors"]["kind"], r["factors"]["mechanism"])
                  for r in recs) == sorted((b, k, m) for bs, ks in NETFILTER.items()
                                           for b in bs for k in ks for m in MECHANISMS), \
        cp.stderr
    for r in recs:
        m = check_trial(r)
        if r["conditions"]["atomic"]:
            # An atomic update loses none of the kept flow; a busy machine may,
            # where the path's counters show it (a full input queue), not in the rules.
            assert m["kept"]["lost_in_firewall_at_least"] == 0, (r["factors"], m["kept"],
                                                                 m["path_drops"])
    assert cp.returncode == 0, cp.stderr
    assert own_netns(d) == []


def test_ebpf_reloads_and_map_updates_take_effect(tmp_path, own_netns, backend_named):
    backend_named("xdp-set")
    backend_named("tc-linear")
    cp, d = run(tmp_path, ["xdp-set", "tc-linear"], ["add-end", "elements-add-1pct"],
                ["reload", "map"])
    recs = records(d)
    assert sorted((r["factors"]["backend"], r["factors"]["kind"], r["factors"]["mechanism"])
                  for r in recs) == [("tc-linear", "add-end", "reload"),
                                     ("xdp-set", "elements-add-1pct", "map"),
                                     ("xdp-set", "elements-add-1pct", "reload")], cp.stderr
    for r in recs:
        check_trial(r)
    assert cp.returncode == 0, cp.stderr
    assert own_netns(d) == []


def test_a_mechanism_the_backend_lacks_is_one_line(tmp_path):
    cp, d = run(tmp_path, ["xdp-linear"], ["add-end"], ["batch"], timeout=60)
    assert cp.returncode != 0
    err = cp.stderr.strip().splitlines()
    assert len(err) == 1 and "xdp-linear" in err[0] and "no such update mechanism" in err[0]
    assert "Traceback" not in cp.stderr
    assert not (d / "trials.jsonl").exists()
