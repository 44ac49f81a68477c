"""The netns testbed: names, addresses, settings, and that it always goes away."""
import subprocess
import time

import pytest

from fwbench.errors import FwbenchError
from fwbench.testbed.netns import NetnsTestbed, clean_leftovers
from fwbench.testbed.topology import TestbedSettings, Topology


@pytest.fixture
def testbed(module_testbed):
    """The tests that only read a testbed share the module's (conftest's
    `module_testbed`, checked gone after the last): building one per test cost ~1.5 s,
    more than any of them takes. The tests of building and removing one make their own."""
    return module_testbed


def test_names_carry_the_run_suffix_and_addresses_are_benchmarking_ranges(testbed):
    t = testbed.topo
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for role in t.roles:
        assert t.netns(role) in names and t.run_id in t.netns(role)
    for a, b in t.links:
        for p in (a, b):
            assert t.run_id in p.ifname
            assert p.ip4.startswith(("198.18.", "198.19.")) and p.ip6.startswith("2001:2:")


def test_forwarding_only_in_the_firewall(testbed):
    for role, want in (("client", "0"), ("fw", "1"), ("server", "0")):
        got = testbed.exec(role, ["sysctl", "-n", "net.ipv4.ip_forward"]).strip()
        assert got == want, role


def test_static_neighbours_and_recorded_settings(testbed):
    t = testbed.topo
    neigh = testbed.ip("client", "neigh", "show", "dev", t.client.ifname)
    assert t.fw_client_side.mac in neigh and "PERMANENT" in neigh
    assert testbed.recorded["rps_cpus"][t.fw_client_side.ifname] == "2"
    assert all(v == {"gro": "off", "gso": "off", "tso": "off"}
               for v in testbed.recorded["offloads"].values())


def test_ipv6_forwards_through_the_firewall(testbed):
    cp = testbed.run("client", ["ping", "-6", "-c", "2", "-i", "0.01", "-W", "1",
                                testbed.topo.server.ip6], check=False)
    assert cp.returncode == 0, cp.stdout


def _link_change_and_sent(tb, wait_s: float) -> dict[str, int]:
    """Change every test link (`xdp off`, with no program attached), then how many
    frames each port sent within wait_s: a link change makes IPv6 report its
    multicast groups at once and again within a second."""
    before = {p.ifname: tb.stats(p).tx_packets for p in tb.topo.ports}
    for p in tb.topo.ports:
        tb.ip(p.host, "link", "set", "dev", p.ifname, "xdp", "off")
    time.sleep(wait_s)
    return {p.ifname: tb.stats(p).tx_packets - before[p.ifname] for p in tb.topo.ports}


def test_a_hushed_testbed_sends_nothing_of_its_own(testbed):
    # The kernel's reports, without the hush: what the hush has to stop.
    assert all(_link_change_and_sent(testbed, 0.3).values())
    testbed.hush(True)
    try:
        # Both reports' time, and the ones still due from the change above.
        assert _link_change_and_sent(testbed, 1.5) == {p.ifname: 0 for p in testbed.topo.ports}
    finally:
        testbed.hush(False)


def test_failed_build_leaves_nothing(netns_of):
    bad = Topology.new(TestbedSettings(firewall_cpu=4096))
    with pytest.raises(FwbenchError, match="CPU 4096 does not exist"):
        with NetnsTestbed(bad):
            pass
    assert netns_of(bad.run_id) == []


def test_processes_are_stopped_with_the_testbed(netns_of):
    with NetnsTestbed(Topology.new()) as tb:
        p = tb.spawn("server", ["sleep", "600"])
    assert p.poll() is not None
    assert netns_of(tb.topo.run_id) == []


def test_clean_leaves_a_live_testbed_alone(testbed, netns_of):
    """`fwbench clean` run beside a live testbed (another run, another test) must not
    pull its namespaces away; a killed run's are found by test_run's SIGKILL test."""
    gone = clean_leftovers()
    mine = sorted(f"fwb-{testbed.topo.run_id}-{role}" for role in ("client", "fw", "server"))
    assert not set(mine) & set(gone)
    assert netns_of(testbed.topo.run_id) == mine
