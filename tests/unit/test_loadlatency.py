"""The loadlatency experiment's refusals, each one line and a non-zero exit before
any testbed is built: a NAT rule set on a backend that cannot hold it, a missing
load tool, a scenario it cannot run."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from fwbench import experiments, scenario
from fwbench.errors import FwbenchError


def fwbench(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fwbench", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def one_line_error(cp) -> str:
    assert cp.returncode != 0 and "Traceback" not in cp.stderr, cp.stderr
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    return lines[0]


@pytest.mark.parametrize("backend", ["xdp-linear", "tc-set"])
def test_a_nat_rule_set_on_an_ebpf_backend_is_refused(tmp_path, backend):
    sc = tmp_path / "nat.toml"
    sc.write_text(f'method = "loadlatency"\nbackends = ["{backend}"]\n'
                  f'[loadlatency]\nrulesets = ["seed004-nat"]\n')
    cp = fwbench("run", str(sc), "--out", str(tmp_path / "run"))
    line = one_line_error(cp)
    # the first feature it lacks, by rule id: the stateful filter's, before the nat's
    assert line.startswith(f"fwbench: error: {backend}: unsupported: "), line
    assert not (tmp_path / "run").exists()


def test_all_backends_means_the_ones_that_hold_the_rule_sets():
    exp = experiments.get(scenario.load(None, {"method": "loadlatency"}))
    names, skipped = exp._resolve()
    assert set(names) <= {"iptables-legacy", "iptables-nft", "nftables"} and names
    planned = exp.plan()
    assert planned.cells[0] == ("seed004-forward", names[0], "none", 0)
    assert len(planned.cells) == 2 * len(names) * 2


def test_a_missing_load_tool_is_named(tmp_path):
    """PATH with every tool loadlatency needs but iperf3."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ip", "ping", "conntrack", "taskset", "ss", "nft", "iptables-legacy",
                 "iptables-legacy-save", "iptables-legacy-restore", "iptables-nft",
                 "iptables-nft-save", "iptables-nft-restore", "ipset"):
        if where := shutil.which(tool):
            os.symlink(where, bin_dir / tool)
    cp = fwbench("run", "--method", "loadlatency", "--backends", "nftables",
                 "--out", str(tmp_path / "run"), env={**os.environ, "PATH": str(bin_dir)})
    line = one_line_error(cp)
    assert line.endswith("iperf3 not found: install the Debian package iperf3 "
                         "(./scripts/setup.sh installs everything)"), line


def test_fractional_seconds_and_unknown_rule_sets_are_refused():
    sc = scenario.load(None, {"method": "loadlatency", "duration_s": 2.5,
                              "backends": ["nftables"]})
    with pytest.raises(FwbenchError, match="whole seconds"):
        experiments.get(sc).preflight()
    with pytest.raises(FwbenchError, match="unknown rule set 'seed005'"):
        scenario.load(None, {"method": "loadlatency",
                             "loadlatency.rulesets": ["seed005"]})
