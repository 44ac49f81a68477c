"""The update runner: the commands of an update, run and timed where the firewall is."""
import json
import subprocess
import sys

from fwbench.update import runner


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
    cp = subprocess.run([sys.executable, "-m", "fwbench.update.runner"], text=True,
                        capture_output=True, check=True, input=json.dumps(
                            {"cpu": 0, "timeout_s": 5, "steps": [{"argv": ["true"]}]}))
    assert json.loads(cp.stdout)["problem"] is None
