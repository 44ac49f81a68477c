"""fwbench-bpf's input checks, without root: every bad input is one line on stderr
starting `fwbench-bpf:` and exit 2, before anything reaches the kernel."""
import subprocess

import pytest

from fwbench import bpf


def run(*args, stdin=""):
    return subprocess.run([str(bpf.binary()), *args], input=stdin, capture_output=True,
                          text=True, timeout=10)


@pytest.mark.parametrize("args, stdin, says", [
    ([], "", "no command: load, dump, update or test-run"),
    (["fly"], "", "unknown command fly"),
    (["load", "--hook", "xdp"], "", "load needs --mode and --ifname"),
    (["load", "--hook", "nic", "--mode", "set", "--ifname", "lo"], "", "--hook: xdp or tc"),
    (["load", "--hook", "tc", "--mode", "tree", "--ifname", "lo"], "",
     "--mode: linear or set, not tree"),
    (["load", "--hook", "xdp", "--mode", "set", "--ifname", "lo", "--xdp-mode", "fast"], "",
     "--xdp-mode: native or generic"),
    (["load", "--hook", "xdp", "--mode", "set", "--ifname", "lo", "--local", "x"], "",
     "--local: not an IPv4 address: x"),
    (["load", "--hook", "xdp", "--mode", "set", "--ifname", "nosuch0"], "",
     "no interface nosuch0"),
    (["load", "--hook", "xdp", "--mode", "set", "--ifname", "lo", "--bogus"], "",
     "unknown or incomplete option --bogus"),
    (["test-run", "--hook", "xdp", "--mode", "set", "--rules", "/nonexistent"], "",
     "cannot open /nonexistent"),
    (["test-run", "--hook", "xdp", "--mode", "linear", "--rules", "/dev/stdin"],
     "rule 198.18.0.1 tcp 80\n", "rules line 1: expected `set|rule DADDR PROTO PORT`"),
    (["test-run", "--hook", "xdp", "--mode", "linear", "--rules", "/dev/stdin"],
     "set 198.18.0.1 6 80\n", "rules line 1: `set` needs --mode set"),
])
def test_bad_input_is_one_line(args, stdin, says):
    cp = run(*args, stdin=stdin)
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1, cp.stderr
    assert lines[0].startswith("fwbench-bpf: ") and says in lines[0]


def test_version_names_libbpf():
    cp = run("--version")
    assert cp.returncode == 0 and cp.stdout.startswith("libbpf v")
