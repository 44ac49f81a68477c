"""Privileged tests: root, real namespaces, real iptables/nft/ipset.

Each test that needs a testbed gets a fresh, uniquely named one and it is always
removed. The whole session also checks that it left no namespace behind and did
not change the root namespace's firewall or links.
"""
import os
import subprocess

import pytest

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
    lines = lambda t: "\n".join(l for l in t.splitlines() if not l.startswith("#"))  # noqa: E731
    return {
        "iptables-legacy-save": lines(out(["iptables-legacy-save"])),
        "iptables-nft-save": lines(out(["iptables-nft-save"])),
        "nft list ruleset": out(["nft", "list", "ruleset"]),
        "ip link": out(["ip", "-o", "link", "show"]),
        "ipset list": out(["ipset", "list", "-n"]),
    }


@pytest.fixture(scope="session")
def root_state_now():
    return root_namespace_state


@pytest.fixture(scope="session")
def root_state_before():
    return root_namespace_state()


@pytest.fixture
def testbed(root_state_before):
    with NetnsTestbed(Topology.new()) as tb:
        yield tb
