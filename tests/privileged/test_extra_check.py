"""`fwbench check FILE` on the example files of the constructs added last
(tests/data/constructs/extra), with the original row: the file itself, loaded by
its own tool, must give the reference's verdict for every packet, as must every
backend that holds the rule set."""
from pathlib import Path

import pytest

EXTRA = Path(__file__).parent.parent / "data" / "constructs" / "extra"
IFACE = "eth0=client,eth1=server"


def agree(check_file, name: str, backends: str, corpus: int = 200) -> dict:
    cp, rep = check_file(EXTRA / name, iface=IFACE, backends=backends, corpus=corpus)
    assert cp.returncode == 0, cp.stdout
    assert "the original and all backends agree with the reference" in cp.stdout
    orig = rep["original"]
    assert orig["refused"] is None and orig["disagreements"] == 0
    assert 0 < orig["forwarded"] < orig["packets"]
    assert [b["backend"] for b in rep["backends"]] == backends.split(",")
    return rep


def test_netdev_egress_sees_forwarded_packets_as_nat_left_them(check_file):
    rep = agree(check_file, "egress.nft", "nftables")
    # The per-rule counters agreed with the reference's too: out-1 counts the
    # DNAT'd packets by their new address, out-2 (their old one) none.
    assert rep["backends"][0]["per_rule"] == []


def test_sets_of_ttl_length_and_mark_values_split_exactly(check_file):
    agree(check_file, "value-sets.nft", "nftables")


@pytest.mark.parametrize("name, backends, limited", [
    ("hashlimit.rules", "iptables-legacy,iptables-nft", ["filter-2", "filter-3", "filter-5"]),
    ("limit-over.nft", "nftables", ["filter-1", "filter-2", "filter-3", "filter-5"]),
])
def test_rate_limits_load_exactly_and_the_rest_is_judged(check_file, name, backends, limited):
    """hashlimit (upto, above, modes, masks, table tuning) and nft's `limit rate
    over` and limits in bytes: loaded as the file says (the backends' listings
    are compared with their rendering), the packets that reach them not judged
    and every other packet judged."""
    rep = agree(check_file, name, backends)
    assert rep["limit_rules"] == limited
    assert 0 < rep["not_judged_rate_limited"] < rep["corpus"]


@pytest.mark.parametrize("name, backends", [("sockets.rules", "iptables-legacy,nftables"),
                                            ("sockets.nft", "nftables")])
def test_socket_matches_set_aside_change_no_verdict(check_file, name, backends):
    """Owner, cgroup, skuid and skgid rules are set aside (no testbed packet has a
    local socket); the original keeps them and agrees on every packet."""
    rep = agree(check_file, name, backends)
    aside = [n for n in rep["notes"] if "matches only packets of a local socket" in n
             or "matches only packets whose bytes hold the string" in n]
    assert len(aside) == (6 if name.endswith(".rules") else 5)


def test_interface_groups_types_and_priority_take_the_testbed_s_values(check_file):
    """Group 0 ("default"), type Ethernet and priority 0 (none), which the
    reference assumes of the testbed, are what the kernel sees; and a forwarded
    packet's input interface is known at postrouting."""
    agree(check_file, "meta-attrs.nft", "nftables")


@pytest.mark.parametrize("name, backends", [
    ("tcp-options.nft", "nftables"),
    ("tcp-options.rules", "iptables-legacy,nftables")])
def test_tcp_options_are_judged_on_the_options_the_testbed_sends(check_file, name, backends):
    """Every TCP packet carries a Linux SYN's options; the rules on them (present,
    missing, a field's value) agree with the original on every packet."""
    agree(check_file, name, backends)


@pytest.mark.parametrize("name, backends", [
    ("igmp.rules", "iptables-legacy,nftables"), ("igmp.nft", "nftables")])
def test_igmp_and_icmp_type_code_pairs_under_one_limit(check_file, name, backends):
    rep = agree(check_file, name, backends)
    assert rep["limit_rules"] == ([] if name.endswith(".rules") else ["filter-3", "filter-4"])


@pytest.mark.parametrize("name, backends", [
    ("ipsec-fields.nft", "nftables"),
    ("ipsec-fields.rules", "iptables-legacy,iptables-nft")])
def test_esp_and_ah_header_fields_are_judged_on_the_testbed_s_values(check_file, name,
                                                                      backends):
    agree(check_file, name, backends)


def test_a_file_no_backend_can_hold_is_still_checked_against_its_original(check_file):
    cp, rep = check_file(EXTRA / "no-backend.nft", iface=IFACE)
    assert cp.returncode == 0, cp.stdout
    assert rep["backends"] == [] and rep["original"]["disagreements"] == 0
    assert "nftables" in rep["skipped"]
