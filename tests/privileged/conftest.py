"""Privileged tests: root, real namespaces, real iptables/nft/ipset.

Testbeds come in layers, each always removed or emptied however the test ends:
`testbed` is a fresh, uniquely named one per test; `module_testbed` one per test
module, and `firewall` that one with every firewall emptied before and after each
test (checked empty after); `backend` is a backend by a test's parameter, skipped
with its reason where this machine cannot run it. Each checks that its own
namespaces are gone (`own_netns`, `netns_of`): only its own, since another fwbench
run or test process on the machine may hold namespaces of its own at any time. The session checks that it did not change the root namespace's firewall or
links: the state is read before the first privileged test and compared after the
last, whatever order the files run in. `finished_sweep` is one `fwbench run` of a
small maxrate sweep, made once for the session, for the tests that read a finished run.
"""
import difflib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fwbench import backends
from fwbench.backends.kernel import flush_all, ruleset_state
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: network namespaces and firewall rules")
    for item in items:
        if "privileged" in str(item.fspath):
            item.add_marker(skip)


def root_namespace_state() -> dict[str, str]:
    """The root namespace's firewalls and links, as text to compare."""
    def out(argv):
        cp = subprocess.run(argv, capture_output=True, text=True)
        return cp.stdout if cp.returncode == 0 else f"<{argv[0]} exited {cp.returncode}>"
    # A chain's packet counts (`:INPUT ACCEPT [4118:65354082]`) move with the root
    # namespace's own traffic: they are not its firewall's state.
    lines = lambda t: "\n".join(re.sub(r" \[\d+:\d+\]$", "", l)  # noqa: E731
                                for l in t.splitlines() if not l.startswith("#"))
    return {
        "iptables-legacy-save": lines(out(["iptables-legacy-save"])),
        "iptables-nft-save": lines(out(["iptables-nft-save"])),
        "nft list ruleset": out(["nft", "list", "ruleset"]),
        "ip link": out(["ip", "-o", "link", "show"]),
        "ipset list": out(["ipset", "list", "-n"]),
    }


def _changes(before: dict[str, str], after: dict[str, str]) -> str:
    return "\n".join(
        "\n".join(difflib.unified_diff(before[k].splitlines(), after[k].splitlines(),
                                       f"{k} before", f"{k} after", lineterm=""))
        for k in before if before[k] != after[k])


@pytest.fixture(scope="session", autouse=True)
def root_namespace_unchanged():
    """Read before the first privileged test; compared at session teardown, after
    every test of the session. A difference is an error in that teardown, which
    makes pytest exit non-zero."""
    if os.geteuid() != 0:  # every privileged test is skipped; nothing to compare
        yield
        return
    before = root_namespace_state()
    yield
    after = root_namespace_state()
    if after != before:
        pytest.fail("the root namespace changed during the session:\n" +
                    _changes(before, after), pytrace=False)


def netns_carrying(*testbed_ids: str) -> list[str]:
    """The namespaces on this machine whose names carry one of these testbed ids
    (`fwb-<id>-<role>`: topology.py puts the id in every name), sorted. Read from
    `ip netns list` itself rather than through fwbench's own name filter, so a
    namespace of ours with a malformed name is still found."""
    assert testbed_ids and all(testbed_ids), testbed_ids
    cp = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    names = [ln.split()[0] for ln in cp.stdout.splitlines() if ln.strip()]
    return sorted(n for n in names if any(i in n for i in testbed_ids))


@pytest.fixture(scope="session")
def netns_of():
    """`netns_of(testbed_id, ...)`: `netns_carrying`, for tests that build a testbed
    themselves."""
    return netns_carrying


@pytest.fixture(scope="session")
def own_netns():
    """`own_netns(run_dir)`: the namespaces of that run's testbeds still on the
    machine; run.json's `sessions[].testbed_id` names them, one per session. A run
    with no session built no testbed, so there would be nothing to look for: that
    is a test error, not a pass."""
    def check(run_dir: Path) -> list[str]:
        sessions = json.loads((Path(run_dir) / "run.json").read_text())["sessions"]
        ids = [s["testbed_id"] for s in sessions]
        assert ids, f"{run_dir}/run.json records no session: no testbed id to look for"
        return netns_carrying(*ids)
    return check


@pytest.fixture
def testbed():
    with NetnsTestbed(Topology.new()) as tb:
        yield tb
    assert netns_carrying(tb.topo.run_id) == [], "the testbed left its namespaces"


@pytest.fixture(scope="module")
def module_testbed():
    """One testbed for a whole test module, removed after its last test."""
    with NetnsTestbed(Topology.new()) as tb:
        yield tb
    assert netns_carrying(tb.topo.run_id) == [], "the testbed left its namespaces"


@pytest.fixture(scope="module")
def check_file(module_testbed):
    """`fwbench check FILE` in-process in the module's testbed (checkrun.check_in
    bound to it): a module that checks many files builds one testbed, not one each."""
    from functools import partial

    from checkrun import check_in
    return partial(check_in, module_testbed)


@pytest.fixture
def firewall(module_testbed):
    """The module's testbed with every firewall empty: flushed before the test and
    after it, however it ends, and checked to hold nothing afterwards."""
    flush_all(module_testbed)
    yield module_testbed
    flush_all(module_testbed)
    left = {k: n for k, n in ruleset_state(module_testbed).items() if n}
    assert not left, f"the test left rules behind after a flush: {left}"


def backend_or_skip(name: str):
    b = backends.get(name)
    if why := b.unavailable():
        pytest.skip(f"{name} cannot run here: {why}")
    return b


@pytest.fixture(scope="session")
def backend_named():
    """`backend_named(name)`: the backend, or the test skipped with the reason this
    machine cannot run it (conftest modules are not imported by tests)."""
    return backend_or_skip


@pytest.fixture
def backend(request):
    """`@pytest.mark.parametrize("backend", NAMES, indirect=True)`: the backend of
    that name, or the test skipped with the reason this machine cannot run it."""
    return backend_or_skip(request.param)


# A maxrate sweep as a user runs it: `fwbench run` with its default instruments and
# its report. Several tests read a finished run of this kind (its records, its report,
# resuming it, a second run into it); each made its own before, at 10-45 s a run here.
# Ping sends 5 echoes a trial, not its default 50 (0.5 s a trial, 18 trials): the tests
# read that it measured an RTT, not how precisely.
SWEEP_SCENARIO = """name = "sweep-test"
[instrument]
ping_count = 5
"""
SWEEP = ("--backends", "none,iptables-legacy,nftables", "--rules", "20,2000",
         "--frame-sizes", "64", "--repeat", "3", "--duration", "0.3")


@dataclass(frozen=True)
class FinishedRun:
    args: tuple[str, ...]              # `fwbench run` took these, and --out path
    cp: subprocess.CompletedProcess
    path: Path


@pytest.fixture(scope="session")
def finished_sweep(tmp_path_factory) -> FinishedRun:
    """`fwbench run SCENARIO SWEEP --out DIR`, run once for the session. Read it as it
    is; a test that changes a run copies it first."""
    top = tmp_path_factory.mktemp("sweep")
    (top / "sweep.toml").write_text(SWEEP_SCENARIO)
    args = (str(top / "sweep.toml"), *SWEEP)
    d = top / "run"
    cp = subprocess.run([sys.executable, "-m", "fwbench", "run", *args, "--out", str(d)],
                        capture_output=True, text=True, timeout=600)
    return FinishedRun(args, cp, d)

