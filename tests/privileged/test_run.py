"""`fwbench run` end to end, as a user runs it: records, interruption, SIGKILL,
`fwbench clean`, `--resume`, and no namespace of a run left behind (the root
namespace is checked for the whole session in conftest.py)."""
import io
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from rich.console import Console

from fwbench import scenario
from fwbench.experiments import loop
from fwbench.experiments.sweep import experiment as sweep

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from tests.runrecords import records  # noqa: E402

# The runs that are interrupted: four trials, so a SIGKILL after the second leaves
# trials for `--resume` to run on a testbed of its own.
SMALL = ["--backends", "none,iptables-legacy", "--rules", "100", "--frame-sizes", "64",
         "--repeat", "2", "--duration", "0.2", "--seed", "3"]


def fwbench(*args, **kw):
    return subprocess.run([sys.executable, "-m", "fwbench", *args], capture_output=True,
                          text=True, timeout=600, **kw)


def start(*args):
    return subprocess.Popen([sys.executable, "-m", "fwbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_records(d, n, p, limit_s=120):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if (d / "trials.jsonl").exists() and len(records(d)) >= n:
            return
        assert p.poll() is None, p.communicate()
        time.sleep(0.02)
    raise AssertionError(f"no {n} records within {limit_s} s")


def interrupt(d, after_records, sig, attempts=3):
    """Start a SMALL run into d and, once `after_records` trials are on disk, hold it
    (SIGSTOP) and send `sig` while it is held with trials left, then let it go on
    (SIGCONT): the signal arrives at that point however busy the machine. A run that
    finished all its trials before it could be held (the test starved of CPU) is no
    test of the signal: it is started again, at most `attempts` times in all."""
    for _ in range(attempts):
        if d.exists():
            shutil.rmtree(d)
        p = start("run", *SMALL, "--out", str(d))
        wait_for_records(d, after_records, p)
        p.send_signal(signal.SIGSTOP)
        left = sum(planned_keys(d).values()) - len(records(d))
        if p.poll() is None and left > 0:
            p.send_signal(sig)
            p.send_signal(signal.SIGCONT)
            return p
        p.send_signal(signal.SIGCONT)
        p.communicate(timeout=60)
        print(f"the run finished before it could be held ({left} trials left): "
              "started again")
    raise AssertionError(f"the run finished before the signal in {attempts} attempts")


def planned_keys(d):
    plan = json.loads((d / "run.json").read_text())["plan"]
    return Counter((k["backend"], k["rules"], k["frame_size"], k["repetition"]) for k in plan)


def record_keys(d):
    return Counter((*map(r["factors"].get, ("backend", "rules", "frame_size")), r["repetition"])
                   for r in records(d))


def built_testbeds(d):
    return [s["testbed_id"] for s in json.loads((d / "run.json").read_text())["sessions"]]


def test_run_records_every_trial(finished_sweep, own_netns):
    """The default instruments: the engine (open throttle, XDP sink) and ping. The run
    is conftest's `finished_sweep` (none, iptables-legacy, nftables; 20 and 2,000
    rules), whose report test_report_run reads."""
    cp, d = finished_sweep.cp, finished_sweep.path
    assert cp.returncode == 0, cp.stderr
    assert "results:" in cp.stdout and "x none" in cp.stdout
    assert record_keys(d) == planned_keys(d)
    for r in records(d):
        assert r["status"] == "ok", r["reason"]
        assert r["verification"]["ok"] is True
        # Rules and set elements held: the N entries plus the skeleton and aux rules.
        assert r["verification"]["rules_loaded"] == (
            0 if r["factors"]["backend"] == "none" else r["factors"]["rules"] + 5)
        assert r["metrics"]["rx_pps"] > 0 and r["metrics"]["rtt_us_median"] > 0
        assert r["traffic"] == "engine+ping" and r["metrics"]["sent"] >= r["metrics"]["received"]
    meta = json.loads((d / "run.json").read_text())
    env = meta["environment"]
    assert env["kernel"] and env["tools"]["fwbench-engine"]
    assert env["engine_bias"]["one_way_us"]["p50"] > 0  # measured, in every run's record
    assert meta["sessions"][0]["testbed"]["rps_cpus"]
    # maxrate sends at open throttle: `auto` takes the XDP sender where it works,
    # with GRO on at the firewall's ingress, or says why not.
    engine = meta["sessions"][0]["engine"]
    assert engine["sender"] == "xdp" or engine.get("xdp_unavailable"), engine
    assert {r["metrics"]["sender"] for r in records(d)} == {engine["sender"]}
    assert own_netns(d) == []


def test_seed_faithful_iperf3_run(tmp_path, own_netns):
    d = tmp_path / "run"
    cp = fwbench("run", "--backends", "none", "--frame-sizes", "64", "--repeat", "1",
                 "--duration", "0.5", "--traffic", "iperf3", "--out", str(d))
    assert cp.returncode == 0, cp.stderr
    (r,) = records(d)
    assert r["traffic"] == "iperf3+ping" and r["metrics"]["rx_pps"] > 0
    m = r["metrics"]
    # Both rates are read over one window; in-flight packets may shift a few.
    assert m["iperf3_streams"] == 4 and 0 < m["rx_pps"] <= 1.05 * m["tx_pps"]
    assert own_netns(d) == []


def test_throughput_records_ndr_pdr_bounds_and_trials(tmp_path, own_netns):
    """Acceptance: NDR and PDR with bounds and every search trial; the firewall's NDR
    at 5,000 rules well below the no-firewall path's."""
    # A busy machine's noise can keep 0.3 s trials from narrowing the NDR bounds
    # within the search's trials (max_trials reached, the search says so): measured
    # again then, saying so, at most three runs in all.
    for attempt in range(3):
        d = tmp_path / f"run{attempt}"
        cp = fwbench("run", "--backends", "none,iptables-legacy", "--rules", "5000",
                     "--frame-sizes", "64", "--repeat", "1", "--duration", "0.3",
                     "--method", "throughput", "--out", str(d))
        assert cp.returncode == 0, cp.stderr
        got = {r["factors"]["backend"]: r for r in records(d)}
        search = got["iptables-legacy"]["metrics"]["search"]
        if got["iptables-legacy"]["metrics"]["ndr_finished"] or attempt == 2:
            break
        print(f"the NDR search did not finish ({search['goals'][0]['reason']}): "
              "measured again")
    for r in got.values():
        m = r["metrics"]
        assert r["status"] == "ok", r["reason"]
        assert m["ndr_bounds_pps"][0] == m["ndr_pps"] and m["pdr_pps"] >= m["ndr_pps"]
        assert len(r["trials"]) >= 3 and r["trials"][0]["phase"] == "warmup"
        assert {"offered_pps", "sent", "received", "loss_ratio", "cpu"} <= set(r["trials"][1])
        assert m["cpu_at_ndr"]["fw_cpu_ns_per_pkt"] > 0
    legacy = got["iptables-legacy"]["metrics"]
    assert legacy["ndr_finished"] and legacy["ndr_bounds_pps"][1] is not None
    assert legacy["ndr_pps"] < 0.5 * got["none"]["metrics"]["ndr_pps"]
    assert own_netns(d) == []


def test_fixedrate_searches_the_degradation_point(tmp_path, own_netns):
    d = tmp_path / "run"
    cp = fwbench("run", "--backends", "iptables-legacy", "--rules", "20000",
                 "--frame-sizes", "128", "--repeat", "1", "--duration", "0.3",
                 "--method", "fixedrate", "--out", str(d))
    assert cp.returncode == 0, cp.stderr
    (r,) = records(d)
    m = r["metrics"]
    assert abs(m["offered_pps"] - 15e6 / 1024) < 1
    # 14.6k pps cannot pass 20,000 linear rules here (~10k pps at 10,000): loss, so
    # the method bisected the rule count and every step was verified and measured.
    assert m["loss_ratio"] > 0
    lo, hi = m["degradation_bounds"]
    assert 1 <= lo < hi <= 20000 and (hi - lo) / hi <= 0.1
    assert all(t["rules"] in range(1, 20001) for t in r["trials"])
    assert own_netns(d) == []


def test_sigkill_then_clean_then_resume(tmp_path, own_netns):
    d = tmp_path / "run"
    interrupt(d, 2, signal.SIGKILL).wait()
    (killed,) = built_testbeds(d)
    ours = sorted(f"fwb-{killed}-{role}" for role in ("client", "fw", "server"))
    assert own_netns(d) == ours, "a SIGKILLed run leaves its namespaces; clean must find them"
    cp = fwbench("clean")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    # Another run's dead testbed may be removed too (that is clean's job); of this
    # run's, exactly its three.
    removed = re.findall(r"fwb-[0-9a-f]{6}-(?:client|fw|server)", cp.stdout)
    assert f"removed {len(removed)} namespace(s): " in cp.stdout, cp.stdout
    assert sorted(n for n in removed if killed in n) == ours, cp.stdout
    assert own_netns(d) == []
    done_before = record_keys(d)
    cp = fwbench("run", "--resume", str(d))
    assert cp.returncode == 0, cp.stderr
    after = record_keys(d)
    assert after == planned_keys(d), "each planned trial exactly once"
    assert all(after[k] == 1 for k in done_before)
    assert len(built_testbeds(d)) == 2 and own_netns(d) == []


def test_sigterm_cleans_up_and_says_how_to_resume(tmp_path, own_netns):
    d = tmp_path / "run"
    p = interrupt(d, 1, signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert f"fwbench run --resume {d}" in err
    assert own_netns(d) == []
    assert len(records(d)) < sum(planned_keys(d).values())   # it stopped mid-run


def finished_copy(finished_sweep, tmp_path):
    """A copy of conftest's finished sweep, for a test that may change it."""
    assert finished_sweep.cp.returncode == 0, finished_sweep.cp.stderr
    d = tmp_path / "run"
    shutil.copytree(finished_sweep.path, d)
    return d


def test_resume_of_a_finished_run_adds_nothing(finished_sweep, tmp_path, own_netns):
    d = finished_copy(finished_sweep, tmp_path)
    before = (d / "trials.jsonl").read_text()
    assert fwbench("run", "--resume", str(d)).returncode == 0
    assert (d / "trials.jsonl").read_text() == before
    assert own_netns(d) == []


def test_a_second_run_into_a_run_directory_is_refused(finished_sweep, tmp_path, own_netns):
    d = finished_copy(finished_sweep, tmp_path)
    before = (d / "trials.jsonl").read_text()
    cp = fwbench("run", *finished_sweep.args, "--out", str(d))
    assert cp.returncode == 2 and "already holds a run" in cp.stderr
    assert (d / "trials.jsonl").read_text() == before
    assert own_netns(d) == []


def test_adaptive_rounds_reach_the_cap_and_resume_mid_round(tmp_path, monkeypatch, own_netns):
    """With a width no cell can reach, every cell gets exactly max_repeat trials. The
    run is interrupted inside adaptive round 1 (the round already in run.json's plan),
    and `--resume` finishes that round and goes on with round 2."""
    sc = scenario.load(None, {"backends": ["none", "iptables-legacy"], "rules": [20],
                              "frame_sizes": [64], "repeat": 2, "duration_s": 0.2,
                              "seed": 3, "instrument.ping_count": 10,
                              "adaptive.max_repeat": 4, "adaptive.rel_width": 1e-6})
    d = tmp_path / "run"
    text = io.StringIO()
    console = Console(file=text, width=200)
    real, calls = sweep.Sweep.run_trial, []

    def stopped_at_the_sixth(*args, **kw):  # 4 planned, then round 1's second trial
        calls.append(1)
        if len(calls) == 6:
            raise loop.Interrupted("SIGTERM")
        return real(*args, **kw)

    monkeypatch.setattr(sweep.Sweep, "run_trial", stopped_at_the_sixth)
    with pytest.raises(loop.Interrupted):
        loop.start(sc, d, console)
    meta = json.loads((d / "run.json").read_text())
    assert len(meta["plan"]) == 6 and len(records(d)) == 5
    assert [r["round"] for r in meta["adaptive"]["rounds"]] == [1]

    monkeypatch.setattr(sweep.Sweep, "run_trial", real)
    outcome = loop.resume(d, console)
    assert outcome.planned == len(outcome.records) == 8
    assert record_keys(d) == planned_keys(d)
    reps = {}
    for r in records(d):
        assert r["status"] == "ok", r["reason"]
        reps.setdefault((r["factors"]["backend"], r["factors"]["rules"]), []).append(r["repetition"])
    assert {k: sorted(v) for k, v in reps.items()} == {
        ("none", 0): [0, 1, 2, 3], ("iptables-legacy", 20): [0, 1, 2, 3]}
    meta = json.loads((d / "run.json").read_text())
    assert [r["round"] for r in meta["adaptive"]["rounds"]] == [1, 2]
    for rnd in meta["adaptive"]["rounds"]:
        assert sorted(map(tuple, rnd["cells"])) == [("iptables-legacy", 20, 64), ("none", 0, 64)]
        assert all(w > 1e-6 for w in rnd["widths"].values())
    # Each record's place in the plan is its trial number.
    assert all(meta["plan"][r["trial"]] == {**r["factors"], "repetition": r["repetition"]}
               for r in records(d))
    assert "adaptive round 2: 2 cells above 0.0001 % width" in text.getvalue()
    assert len(set(built_testbeds(d))) == 2 and own_netns(d) == []


def test_keep_loaded_loads_and_verifies_once_per_block(tmp_path, own_netns):
    """keep_loaded: each backend's rule set runs at every frame size back to back,
    loaded and verified by the block's first trial; the others measure it as it
    stands and say which trial proved it (no load time of their own)."""
    sc = scenario.load(None, {"backends": ["none", "iptables-legacy"], "rules": [20, 100],
                              "frame_sizes": [64, 256, 1518], "repeat": 1,
                              "duration_s": 0.2, "seed": 4, "keep_loaded": True,
                              "instrument.ping_count": 5})
    d = tmp_path / "run"
    outcome = loop.start(sc, d, Console(file=io.StringIO(), width=200))
    recs = sorted(records(d), key=lambda r: r["trial"])
    assert len(recs) == outcome.planned == 9 and all(r["status"] == "ok" for r in recs)
    blocks = {}
    for r in recs:
        blocks.setdefault((r["factors"]["backend"], r["factors"]["rules"]), []).append(r)
    assert len(blocks) == 3
    for block in blocks.values():
        first, *rest = block
        assert [r["trial"] for r in block] == list(range(first["trial"], first["trial"] + 3))
        assert "kept_from" not in first["verification"] and first["verification"]["ok"]
        assert {"apply_s", "verify_s"} <= first["conditions"]["phases"].keys()
        for r in rest:
            assert r["verification"]["kept_from"] == first["trial"]
            assert r["verification"]["ok"] and r["load_time_s"] is None
            assert "apply_s" not in r["conditions"]["phases"]
            assert r["metrics"]["received"] > 0
        assert sorted(r["factors"]["frame_size"] for r in block) == [64, 256, 1518]
