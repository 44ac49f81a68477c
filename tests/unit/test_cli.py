"""The command line's bad-input paths: one line on stderr, non-zero exit."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fwbench.cli import main


def run_cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "fwbench", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.mark.parametrize("args, needle", [
    (["run", "--backends", "pf"], "unknown backend 'pf'"),
    (["run", "--rules", "0"], "rules.0"),
    (["run", "--rules", "ten"], "expected comma-separated integers"),
    (["run", "--frame-sizes", "32"], "frame size 32"),
    (["run", "--frame-sizes", "2000"], "frame size 2000"),
    (["run", "/nonexistent/s.toml"], "no such scenario file"),
    (["run", "--resume", "/tmp", "--rules", "5"], "--resume"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_and_nonzero(args, needle):
    cp = run_cli(*args)
    assert cp.returncode == 2  # a user error, from argparse or FwbenchError alike
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    assert needle in lines[0] and "Traceback" not in cp.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the not-root path")
def test_not_root():
    cp = run_cli("run", "--rules", "5")
    assert cp.returncode == 2 and "must run as root" in cp.stderr


def test_resume_on_a_directory_that_is_not_a_run(tmp_path, capsys):
    if os.geteuid() != 0:
        pytest.skip("the not-root check comes first")
    assert main(["run", "--resume", str(tmp_path)]) == 2
    assert "not an fwbench run" in capsys.readouterr().err


def test_help_explains_frame_sizes():
    cp = run_cli("run", "--help")
    assert cp.returncode == 0 and "18 bytes of UDP payload" in cp.stdout.replace("\n", " ").replace("  ", " ")


def test_missing_tool_is_one_line(monkeypatch):
    from fwbench import experiments, proc
    from fwbench.errors import FwbenchError
    from fwbench.scenario import from_dict

    monkeypatch.setattr(proc, "have", lambda tool: tool != "iperf3")
    with pytest.raises(FwbenchError, match="iperf3 not found: install the Debian package iperf3"):
        experiments.get(from_dict({"method": "maxrate"})).require_tools()


@pytest.mark.parametrize("args, needle", [
    (["run", str(Path(__file__).parents[2] / "scenarios" / "seed002-drop.toml"), "--rules", "5"],
     "rules: does not apply to method droprate"),
    (["run", "--method", "droprate", "--frame-sizes", "64"], "do not fit a 64-byte frame"),
])
def test_droprate_input_errors_are_one_line(args, needle):
    cp = run_cli(*args)
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1 and needle in lines[0], cp.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the not-root check comes first")
def test_droprate_cpu_that_does_not_exist_stops_before_anything(tmp_path):
    sc = tmp_path / "s.toml"
    sc.write_text(f"method = 'droprate'\n[droprate]\ncpu = {os.cpu_count()}\n")
    cp = run_cli("run", str(sc), "--out", str(tmp_path / "out"))
    assert cp.returncode == 2 and "droprate.cpu: CPU" in cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


# --- fwbench check: every bad input is one line, before any testbed ----------------

RULESETS = Path(__file__).parent.parent / "data" / "rulesets"


@pytest.mark.parametrize("text, needle", [
    ("*filter\n:FORWARD DROP [0:0]\n-A FORWARD -p tcp --dport\nCOMMIT\n",
     "bad.rules:3: --dport needs a value"),
    ("*filter\n:FORWARD DROP [0:0]\n-A FORWARD -m frobnicate -j DROP\nCOMMIT\n",
     "bad.rules:3: unsupported match -m frobnicate"),
    ("*filter\n:FORWARD DROP [0:0]\n-A FORWARD -j nowhere\nCOMMIT\n",
     "bad.rules:3: -j nowhere: jump to a missing chain"),
    ("*filter\n:FORWARD DROP [0:0]\n:a - [0:0]\n:b - [0:0]\n-A FORWARD -j a\n"
     "-A a -j b\n-A b -j a\nCOMMIT\n", "jump loop a -> b -> a"),
    pytest.param(
        "table inet t {\n\tchain c {\n\t\ttype filter hook forward priority 0;\n"
        "\t\tjump nowhere\n\t}\n}\n",
        "bad.rules:4:8-14: Error: Could not process rule: No such file or directory: "
        "jump nowhere",
        marks=pytest.mark.skipif(os.geteuid() != 0, reason="nft text is read by nft, "
                                 "in a namespace of its own: root")),
    ("hello, I am not a rule set\n", "bad.rules: not a rule set"),
    ('{"nftables": 3}', "bad.rules"),
    ("", "bad.rules: not a rule set"),
])
def test_check_refuses_bad_rule_set_files_in_one_line(tmp_path, text, needle):
    f = tmp_path / "bad.rules"
    f.write_text(text)
    cp = run_cli("check", str(f), cwd=tmp_path)
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1, cp.stderr
    assert needle in lines[0] and "Traceback" not in cp.stderr, lines[0]


@pytest.mark.parametrize("args, needle", [
    (["/nonexistent.rules"], "/nonexistent.rules: no such file"),
    ([], "give a rule-set file or --template NAME"),
    (["--template", "seed999"], "unknown template 'seed999'"),
    (["--template", "seed000", "--param", "n=0"], "rule count must be 1.."),
    (["--template", "seed000", "--param", "bogus=1"],
     "template seed000 has no setting 'bogus' (its settings: n=20, version=4,"),
    (["--template", "seed000", "--param", "n=many"],
     "template seed000: setting n takes an integer, got 'many'"),
    (["--template", "seed000", "--param", "counters=maybe"],
     "setting counters takes true or false"),
    (["--template", "seed001", "--param", "f=3"], "template seed001: F must be 0, 2 or 4"),
    (["--template", "seed000", "--param", "n"], "expected KEY=VALUE"),
    (["--template", "seed000", "--param", "n=5", "--corpus", "0"],
     "--corpus must be at least 1"),
    (["--template", "seed004-nat", "--backends", "xdp-set"],
     "xdp-set: unsupported: dnat (rule nat-1)"),
    (["--template", "seed004-nat", "--backends", "tc-linear"],
     "tc-linear: unsupported: dnat (rule nat-1)"),
    ([str(RULESETS / "gateway.rules")], "-m set --match-set blocklist"),
    ([str(RULESETS / "gateway.rules"), "--ipsets", str(RULESETS / "gateway.nft")],
     "ipset"),
    ([str(RULESETS / "gateway.nft"), "--iface", "eth0=router"],
     "interface map: 'eth0=router' is not NAME=client or NAME=server"),
])
def test_check_refuses_bad_arguments_in_one_line(args, needle):
    cp = run_cli("check", *args)
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1, cp.stderr
    assert needle in lines[0] and "Traceback" not in cp.stderr, lines[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="the not-root check comes first")
@pytest.mark.parametrize("text, needle", [
    ("method = 'cpucost'\n", "reflected packets' way back would be in it"),
    ("traffic = 'iperf3'\n", "traffic iperf3 has no round-trip mode"),
    ("method = 'update'\n", "method update times packets one way only"),
])
def test_round_trips_are_refused_where_they_would_mislead(tmp_path, text, needle):
    """latency = "round-trip" asks the engine to reflect packets; a method whose figure
    the returns would change, or that times packets otherwise, says so before anything."""
    sc = tmp_path / "s.toml"
    sc.write_text(text + "[testbed]\nlatency = 'round-trip'\n")
    cp = run_cli("run", str(sc), "--out", str(tmp_path / "out"))
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1 and needle in lines[0], cp.stderr
    assert not (tmp_path / "out").exists()
