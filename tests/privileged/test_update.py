"""Rule-set updates under traffic in a real testbed: the sink's time series counts
exactly what the senders scheduled, stream by stream; every backend's update
mechanisms make the change the kernel then holds, and the probe flow says when;
a mechanism a backend lacks is one line and a non-zero exit."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from fwbench import engine
from fwbench.errors import FwbenchError
from fwbench.experiments.update import experiment as update_experiment
from fwbench.experiments.update import series
from fwbench.traffic import accounting
from fwbench.traffic.native import PacedStreams

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from tests.runrecords import records  # noqa: E402


@pytest.fixture
def testbed(firewall):
    """The module's tests share one testbed, every firewall emptied around each test
    (conftest's `firewall`): building one per test cost ~1.5 s."""
    return firewall


def paced_streams_once(tb):
    """The update experiment's instrument (traffic.native.PacedStreams), as it runs
    for a second, and what the path's counters show dropped meanwhile."""
    before = accounting.path_counters(tb)
    with PacedStreams(tb, ((5201, 2000), (5202, 500)), frame_size=64,
                      slot_ns=1_000_000, limit_s=60) as flows:
        time.sleep(1.0)
        reports = flows.stop()
        time.sleep(0.05)
        got, sr = flows.read()
        read_ns = time.monotonic_ns()
    drops = update_experiment.path_drops(before, accounting.path_counters(tb))
    return reports, got, sr, read_ns, drops


def test_the_sink_series_counts_each_stream_as_scheduled(testbed):
    # Every packet sent must arrive. A busy machine's full input queue may drop
    # some, which the path's counters show: then it is measured again (3 times
    # at most), saying so; a loss they do not show fails at once.
    for attempt in range(3):
        reports, got, sr, read_ns, drops = paced_streams_once(testbed)
        short = sum(r["sent"] for r in reports) - got["received"]
        if not short or not any(drops.values()):
            break
        print(f"attempt {attempt + 1}: {short} packets short, the path dropped {drops}; "
              f"measuring again")
    base = sr["base_ns"]
    assert sr["slot_ns"] == 1_000_000 and base <= reports[0]["t0_ns"]
    assert all(r["stopped"] for r in reports)
    assert [r["streams"][0]["stream"] for r in reports] == [0, 1]
    assert got["received"] == sum(r["sent"] for r in reports) and got["duplicated"] == 0
    assert got["early"] == 0, got
    for rep, d in zip(reports, sr["streams"]):
        s = series.Stream.of(d)
        sched = series.Schedule(rep["t0_ns"], rep["offered_pps"], rep["sent"])
        # Never ahead of its schedule over the time it sent (a busy machine may
        # leave it behind: the series below is held to what it sent).
        assert 0 < rep["sent"] <= rep["offered_pps"] * rep["active_s"] + 1, rep
        assert s.received == rep["sent"] and s.outside == 0
        assert s.first_sched_ns == rep["t0_ns"]
        # The sink's latency is arrival minus the time the packet was due, both on
        # this machine's monotonic clock; the bounds below follow from what it
        # measured, however late a busy machine made the packets. The first
        # arrival came after its packet was due and before the series was read
        # (another clock is seconds off), and no later than the first packet's
        # latency allows.
        lat_max = int(s.lat_max_ns.max())
        assert rep["t0_ns"] < s.first_arrival_ns < read_ns
        assert s.first_arrival_ns <= rep["t0_ns"] + int(s.lat_max_ns[0])
        assert 0 < lat_max < read_ns - rep["t0_ns"]
        assert s.last_sched_ns == sched.due()[-1]
        want = sched.per_slot(base, 1_000_000, s.first_slot + len(s.packets))
        assert s.packets.tolist() == want[s.first_slot:].tolist()
        # Between two arrivals: at most the next packet's interval after the
        # earlier was due, plus its latency (every packet arrived, none early).
        assert 0 < s.max_gap_ns <= math.ceil(sched.interval_ns) + lat_max, \
            (s.max_gap_ns, lat_max)


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
        # An atomic update loses none of the kept flow. A busy machine may: where
        # the path's counters show it (a full input queue) that is not the rules',
        # and what they do not explain is measured again.
        if r["conditions"]["atomic"] and m["kept"]["lost_in_firewall_at_least"]:
            kept_flow_spared_when_measured_again(tmp_path, r)
    assert cp.returncode == 0, cp.stderr
    assert own_netns(d) == []


def kept_flow_spared_when_measured_again(tmp_path, r) -> None:
    """An atomic update spares the kept flow; a loss can also be the instrument's on
    a busy machine (84 kept packets once, the senders and the sink sharing its
    CPUs). The trial's cell is run again alone, twice at most, saying what each
    run lost beyond what the path's counters explain; one must lose nothing more."""
    f = r["factors"]
    lost = [r["metrics"]["kept"]["lost_in_firewall_at_least"]]
    for attempt in range(2):
        d = tmp_path / f"again-{f['backend']}-{f['kind']}-{f['mechanism']}-{attempt}"
        d.mkdir()
        cp, out = run(d, [f["backend"]], [f["kind"]], [f["mechanism"]])
        (again,) = records(out)
        lost.append(check_trial(again)["kept"]["lost_in_firewall_at_least"])
        print(f"{f}: the kept flow lost {lost[-2]}; measured again: lost {lost[-1]}")
        if not lost[-1]:
            return
    raise AssertionError(f"{f}: an atomic update's kept flow lost packets each run: {lost}")


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
