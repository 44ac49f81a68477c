"""The update runner: the commands of an update, run and timed where the firewall is."""
import json
import subprocess
import sys

from fwbench.onhost import update_runner as runner


def test_steps_run_in_order_timed_by_the_hosts_clock_with_memory_sampled():
    got = runner.run({"cpu": 0, "timeout_s": 10, "steps": [
        {"argv": ["sh", "-c", "sleep 0.05"], "input": None},
        {"argv": ["sh", "-c", "cat > /dev/null"], "input": "rules\n"}]})
    assert got["problem"] is None
    assert got["end_ns"] - got["start_ns"] >= 50_000_000
    assert got["samples"] >= 2 and got["peak"]["kernel"] > 0 and got["pre"]["kernel"] > 0


def test_a_failing_step_stops_the_update_and_says_which():
    got = runner.run({"cpu": 0, "timeout_s": 10, "steps": [
        {"argv": ["true"]}, {"argv": ["sh", "-c", "echo no such table >&2; exit 3"]},
        {"argv": ["sh", "-c", "exit 9"]}]})
    assert got["problem"] == "update command 2 of 3 (sh) failed: no such table"
    got = runner.run({"cpu": 0, "timeout_s": 10, "steps": [{"argv": ["/no/such/tool"]}]})
    assert got["problem"].startswith("update command 1 of 1 (tool) failed:")


def test_it_runs_as_a_module_on_stdin_and_stdout():
    cp = subprocess.run([sys.executable, "-m", "fwbench.onhost.update_runner"], text=True,
                        capture_output=True, check=True, input=json.dumps(
                            {"cpu": 0, "timeout_s": 5, "steps": [{"argv": ["true"]}]}))
    assert json.loads(cp.stdout)["problem"] is None


def test_a_cpu_this_host_lacks_is_one_line_before_anything_runs(tmp_path):
    import os
    mark = tmp_path / "ran"
    cpu = os.cpu_count()          # one past the last CPU here
    spec = {"cpu": cpu, "timeout_s": 5, "steps": [{"argv": ["touch", str(mark)]}]}
    cp = subprocess.run([sys.executable, "-m", "fwbench.onhost.update_runner"], text=True,
                        capture_output=True, input=json.dumps(spec))
    assert cp.returncode == 2 and cp.stdout == "", cp.stderr
    assert cp.stderr.count("\n") == 1 and "Traceback" not in cp.stderr
    assert f"CPU {cpu} does not exist on this host (it has {cpu}: 0-{cpu - 1})" in cp.stderr
    assert not mark.exists()


# --- the experiment's side: which machine each CPU number is pinned on ----------------

def _fake_testbed(fw_cpus: int, firewall_cpu: int, sender_cpu: int = 0):
    """A testbed whose firewall host has `fw_cpus` CPUs; run() records the runner's
    spec and answers as the runner would."""
    import contextlib
    from types import SimpleNamespace as NS

    ran = []

    def run(role, argv, input=None, **kw):
        ran.append((role, argv, json.loads(input)))
        return subprocess.CompletedProcess(argv, 0, json.dumps(
            {"problem": None, "start_ns": 1, "end_ns": 2, "pre": {"kernel": 10},
             "peak": {"kernel": 20}, "samples": 3}), "")

    topo = NS(run_id="t", settings=NS(sender_cpu=sender_cpu, firewall_cpu=firewall_cpu),
              fw_client_side=NS(host="fw"), client=NS(host="client"))
    tb = NS(topo=topo, other_clocks=[], ran=ran, run=run,
            cpus=lambda role: fw_cpus if role == "fw" else 1,
            executor=NS(on_host=lambda host, argv: list(argv)),
            firewall_change=contextlib.nullcontext,
            machine_file=lambda role, path: open("/proc/meminfo").read())
    return tb


def _under_traffic(monkeypatch, tb, controller: set[int]) -> list[set[int]]:
    """Update._under_traffic on `tb` (no traffic: fake sender and sink) from a
    controller that may use the CPUs `controller`; the affinities it set here."""
    import os
    from types import SimpleNamespace as NS

    from fwbench import engine
    from fwbench.experiments.update import experiment as ux

    class Sink:
        def __init__(self, *a, **kw): pass
        def series(self, *a): pass
        def arm(self, *a): pass
        def read(self): return {}
        def read_series(self): return {}
        def close(self): pass

    class Sender:
        def __init__(self, *a, **kw): pass
        def stop(self): return {}

    pinned = []

    def setaffinity(pid, cpus):
        if not set(cpus) <= controller:
            raise OSError(22, "Invalid argument")
        pinned.append(set(cpus))

    # The update sends through traffic/, which alone drives the engine's processes.
    monkeypatch.setattr(engine, "Receiver", Sink)
    monkeypatch.setattr(engine, "Sender", Sender)
    # The path's counters are the kernel's: none here.
    from fwbench.testbed.base import IfStats
    from fwbench.traffic import accounting
    monkeypatch.setattr(accounting, "path_counters", lambda tb: {
        p: IfStats(0, 0, 0, 0, 0.0) for p in ("sender", "fw_in", "fw_out", "receiver")})
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(controller))
    monkeypatch.setattr(os, "sched_setaffinity", setaffinity)
    me = NS(s=NS(slot_ms=1.0, before_s=0, after_s=0, flow_pps=1000),
            sc=NS(frame_sizes=[64]))
    ux.Update._under_traffic(me, tb, [NS(argv=["nft", "-f", "-"], input="x")], 100.0)
    return pinned


def test_a_controller_with_fewer_cpus_than_the_firewall_host_is_no_error(monkeypatch):
    # The firewall host has 4 CPUs and the update runs on its CPU 3; this machine
    # has one (CPU 0, the sender's too): it stays there, and CPU 3 goes to the runner.
    tb = _fake_testbed(fw_cpus=4, firewall_cpu=3)
    assert _under_traffic(monkeypatch, tb, {0}) == []
    [(role, argv, spec)] = tb.ran
    assert role == "fw" and argv[1:] == ["-m", "fwbench.onhost.update_runner"]
    assert spec["cpu"] == 3


def test_the_controller_leaves_the_senders_cpu_for_its_own_others(monkeypatch):
    tb = _fake_testbed(fw_cpus=8, firewall_cpu=6, sender_cpu=1)
    assert _under_traffic(monkeypatch, tb, {0, 1, 2, 3}) == [{0, 2, 3}, {0, 1, 2, 3}]


def test_a_firewall_cpu_its_host_lacks_stops_the_run_before_any_trial():
    import pytest
    from rich.console import Console

    from fwbench.errors import FwbenchError
    from fwbench.experiments.update import experiment as ux

    tb = _fake_testbed(fw_cpus=2, firewall_cpu=2)
    with pytest.raises(FwbenchError) as e:
        ux.Update.open(None, tb, [], Console())
    msg = str(e.value)
    assert "firewall's CPU 2" in msg and "fw's machine has 2 CPUs (0-1)" in msg
    assert "\n" not in msg and tb.ran == []


def test_paced_streams_to_ports_the_sink_cannot_count_together_is_one_line(monkeypatch):
    import pytest

    from fwbench import engine
    from fwbench.errors import FwbenchError
    from fwbench.traffic.native import PacedStreams

    def never(*a, **kw):
        raise AssertionError("started an engine process")
    monkeypatch.setattr(engine, "Receiver", never)
    monkeypatch.setattr(engine, "Sender", never)
    with pytest.raises(FwbenchError, match=r"ports \[5201, 5203\]: the sink counts "
                                           r"consecutive ports only"):
        PacedStreams(None, ((5201, 10.0), (5203, 10.0)), frame_size=64, slot_ns=1,
                     limit_s=1)


def test_send_only_gives_every_send_a_fresh_cookie_and_no_duration(monkeypatch):
    from fwbench import engine
    from fwbench.traffic.native import send_only

    sent = []
    monkeypatch.setattr(engine, "send", lambda tb, **kw: sent.append(kw) or {"sent": 1})
    for _ in range(2):
        send_only("tb", frame_size=64, count=7, dst="198.18.0.1", dport=9)
    a, b = sent
    assert a["cookie"] != b["cookie"] and 1 <= a["cookie"] < 2**32
    del a["cookie"]
    assert a == {"frame_size": 64, "rate_pps": 0, "duration_s": 0, "count": 7,
                 "dst": "198.18.0.1", "dport": 9}
