"""`fwbench check` of the everyday constructs' example files for real: the file
itself (the original row), the backends that can hold it and the reference
evaluator must give every packet the same verdict; and the realistic host files
(ufw, Docker, OpenWrt fw4) as far as the model holds them."""
import subprocess
import sys
from pathlib import Path

import pytest

from fwbench.ruleset.importers.load import load_file

EXAMPLES = Path(__file__).parent.parent / "data" / "constructs" / "everyday"
IFACE = "eth0=client,eth1=server"


def check(check_file, name: str, backends: str, iface: str = IFACE, corpus: int = 200):
    """`fwbench check` of one example file (in the module's testbed)."""
    return check_file(EXAMPLES / name, iface=iface, backends=backends, corpus=corpus)


# Each construct's file, and the backends that hold it (the others refuse it in one
# line: iptables has no sets of ICMP types or TCP flag values, nor ECE/CWR, nor a
# prerouting chain in its filter table).
BOTH = "iptables-legacy,nftables"
# An iptables-save file on iptables-legacy alone: its constructs' nft rendering is
# the same model's, checked with the .nft files (the suite's time is bounded).
IPT = "iptables-legacy"


@pytest.mark.parametrize("name, backends", [
    ("tcpflags.rules", IPT), ("tcpflags.nft", "nftables"),
    ("icmp.rules", IPT), ("icmp6.rules", IPT), ("icmp.nft", "nftables"),
    ("addrtype.rules", IPT), ("addrtype.nft", "nftables"),
    ("pkttype.rules", IPT), ("pkttype.nft", "nftables"),
    ("ttl.rules", IPT), ("ttl.nft", "nftables"),
    ("length.rules", IPT), ("length.nft", BOTH),
    ("ipv6headers.rules", IPT), ("ipv6headers.nft", BOTH), ("dualstack.rules", IPT),
    ("sets.nft", "nftables"), ("conntrack6.rules", IPT),
])
def test_construct_checks_equal_with_its_original(check_file, name, backends):
    cp, rep = check(check_file, name, backends)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "the original and all backends agree with the reference" in cp.stdout
    orig = rep["original"]
    assert orig["refused"] is None and orig["disagreements"] == 0
    assert 0 < orig["forwarded"] < orig["packets"]
    assert [b["backend"] for b in rep["backends"]] == backends.split(",")


def test_a_backend_that_cannot_hold_a_construct_is_refused_in_one_line(tmp_path):
    cp = subprocess.run([sys.executable, "-m", "fwbench", "check", str(EXAMPLES / "icmp.nft"),
                         "--iface", IFACE, "--backends", "iptables-legacy"],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode != 0
    assert cp.stderr.strip() == ("fwbench: error: iptables-legacy: unsupported: icmp type "
                                 "set (rule filter-3)")


@pytest.mark.parametrize("name, iface", [("ufw.rules", IFACE),
                                         ("docker.rules", "eth0=client,docker0=server")])
def test_realistic_hosts_import_whole_and_check_equal(check_file, name, iface):
    cp, rep = check(check_file, name, BOTH, iface)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "the original and all backends agree with the reference" in cp.stdout
    assert rep["original"]["disagreements"] == 0


@pytest.mark.parametrize("name", ["ufw6.rules", "output.rules", "output.nft"])
def test_verdicts_agree_where_the_firewall_sends_packets_of_its_own(check_file, name):
    """Every packet's verdict agrees, and rules set aside for the output hook
    changed none; the counters of rules only the firewall's own packets reach
    (the output hook's) are not judged, and the whole check agrees."""
    cp, rep = check(check_file, name, BOTH)
    assert cp.returncode == 0, cp.stdout
    assert rep["original"]["disagreements"] == 0
    assert all(b["disagreements"] == 0 and b["refused"] is None for b in rep["backends"])
    rs = load_file(str(EXAMPLES / name), {"eth0": "client", "eth1": "server"})
    output = {r.id for t in rs.tables for c in t.chains if c.hook == "output"
              for r in c.rules}
    assert output <= set(rep["counters_not_judged"]["rules"]) | set(
        rep["counters_at_least"]["rules"])


def test_fw4_imports_whole_and_checks_equal(check_file):
    """OpenWrt's fw4 dump: IGMP, ICMPv6 type . code pairs under one rate limit,
    REJECT through its handle_reject chain; its resets and ICMP errors reach the
    output chains (not judged) and srcnat (judged as at least the corpus's)."""
    cp, rep = check(check_file, "fw4.nft", "nftables", "br-lan=client,wan=server", corpus=300)
    assert cp.returncode == 0, cp.stdout
    assert "the original and all backends agree with the reference" in cp.stdout
    assert rep["original"]["disagreements"] == 0
    assert rep["counters_at_least"]["rules"] and rep["counters_not_judged"]["rules"]
