"""statecheck against the real kernel: seed 004's NAT and forwarding rule sets are
proven on every netfilter backend, a NAT the kernel does not hold and a DNAT
to another address are not (with a reason naming what failed), and conntrack fills
to 1,000 and 100,000 background entries with the memory recorded."""
import json
from dataclasses import replace

import pytest

from fwbench import engine, proc, statecheck
from fwbench.errors import FwbenchError, MeasurementInvalid
from fwbench.ruleset.model import validate
from fwbench.ruleset.templates.seed004 import SERVICE4, seed004_forward, seed004_nat


NETFILTER = ["iptables-legacy", "iptables-nft", "nftables"]
SERVER, CLIENT = "198.19.0.2", "198.18.0.2"
ELSEWHERE = "198.19.0.3"     # on the server's link, held by nobody
FAIL_TIMEOUT_S = 1.0         # the connection cannot succeed; do not wait long


@pytest.fixture
def testbed(firewall):
    """One testbed for the module, every firewall emptied around each test."""
    if not proc.have("conntrack"):
        pytest.skip("conntrack (conntrack-tools) not found")
    return firewall


def without_nat(rs):
    """The rule set's filter table alone: loaded, it leaves the kernel without the
    NAT the rule set (and its proof) expects."""
    return replace(rs, tables=tuple(t for t in rs.tables if t.name != "nat"),
                   name=rs.name + "-without-nat")


def dnat_elsewhere(rs, addr=ELSEWHERE):
    """The rule set with every DNAT, and the probes' expectations, pointing at addr."""
    tables = tuple(replace(t, chains=tuple(
        replace(c, rules=tuple(replace(r, action=replace(r.action, addr=addr))
                               if r.action.kind == "dnat" else r for r in c.rules))
        for c in t.chains)) for t in rs.tables)
    probes = tuple(replace(p, translated=replace(p.translated, daddr=addr))
                   if p.translated is not None and p.translated.daddr == SERVER else p
                   for p in rs.probes)
    return validate(replace(rs, tables=tables, probes=probes, name=rs.name + "-elsewhere"))


def applied(b, tb, rs):
    b.apply(tb, rs)
    try:
        v = b.verify(tb, rs)
    except MeasurementInvalid:   # the capture lost a packet: repeat, as it asks
        v = b.verify(tb, rs)
    assert v.ok, v.reason
    return rs


@pytest.mark.parametrize("backend", NETFILTER, indirect=True)
def test_nat_is_proven(testbed, backend):
    rs = applied(backend, testbed, seed004_nat())
    p = statecheck.prove(testbed, backend, rs)
    assert p.ok, p.reason
    d = p.details
    assert d["server_saw"]["local"] == f"{SERVER}:5001"
    # The SNAT rule applies to connections the server opens, not to replies.
    assert d["server_saw"]["peer"].startswith(f"{CLIENT}:")
    assert d["client_saw"] == {"local": d["server_saw"]["peer"],
                               "peer": f"{SERVICE4}:5001", "echoed": True}
    assert d["nat_rules"]["counted"] == {"nat-1": 1}
    assert d["conntrack"]["state"] == "ESTABLISHED"
    assert f"dst={SERVICE4} " in d["conntrack"]["entry"]
    assert d["conntrack"]["after_close"] == "TIME_WAIT"
    json.dumps(p.as_dict())


@pytest.mark.parametrize("backend", NETFILTER, indirect=True)
def test_nat_missing_from_the_kernel_fails(testbed, backend):
    rs = seed004_nat()
    backend.apply(testbed, without_nat(rs))
    p = statecheck.prove(testbed, backend, rs, timeout_s=FAIL_TIMEOUT_S)
    assert not p.ok
    assert p.reason.startswith(f"(a) tcp {CLIENT} -> {SERVICE4}:5001: no connection")
    assert "(c) NAT rule nat-1 counted 0 packets" in p.reason


@pytest.mark.parametrize("backend", NETFILTER, indirect=True)
def test_dnat_elsewhere_verifies_but_is_not_proven(testbed, backend):
    """Crafted packets leave translated as the rule set says, so verification
    passes; no real connection reaches the server."""
    rs = applied(backend, testbed, dnat_elsewhere(seed004_nat()))
    p = statecheck.prove(testbed, backend, rs, timeout_s=FAIL_TIMEOUT_S)
    assert not p.ok
    assert "no connection" in p.reason
    assert f"to {ELSEWHERE}:5001, not to the server {SERVER}" in p.reason
    assert "\n" not in p.reason


@pytest.mark.parametrize("backend", NETFILTER, indirect=True)
def test_forward_is_proven(testbed, backend):
    rs = applied(backend, testbed, seed004_forward())
    p = statecheck.prove(testbed, backend, rs)
    assert p.ok, p.reason
    d = p.details
    assert d["target"] == d["server"] == f"{SERVER}:5001"
    assert d["client_saw"]["peer"] == f"{SERVER}:5001"
    assert d["server_saw"]["peer"].startswith(f"{CLIENT}:")
    assert d["nat_rules"] == {"expected": [], "counted": {}}
    assert d["conntrack"]["state"] == "ESTABLISHED"


@pytest.fixture
def forwarding(testbed, backend_named):
    """seed004-forward loaded by nftables (the fill goes through it)."""
    if engine.version() is None:
        pytest.skip("the traffic engine is not built (./scripts/setup.sh)")
    b = backend_named("nftables")
    b.apply(testbed, seed004_forward())
    return testbed


@pytest.mark.parametrize("entries", [1_000, 100_000])
def test_fill(forwarding, entries):
    tb = forwarding
    f = statecheck.fill(tb, entries)
    try:
        assert f.reached
        assert abs(f.created - entries) <= 0.03 * entries, f.as_dict()
        assert f.after["count"] >= f.before["count"] + 0.97 * entries
        assert f.after["udp_timeout_s"] == 3600
        rec = f.as_dict()
        json.dumps(rec)
        assert rec["slab_delta"]["scope"].startswith("global")
        if entries >= 100_000:
            # Global, so other work moves it too; 100,000 entries of 256 bytes
            # stand well above that.
            assert rec["slab_delta"]["bytes"] >= 0.5 * entries * f.after["slab"]["objsize"]
        assert f.fill_s < 30
    finally:
        after = statecheck.release(tb, f)
    assert after["udp_timeout_s"] == f.previous_udp_timeout_s
    assert after["count"] <= f.before["count"] + 0.01 * entries


def test_fill_of_flows_the_rule_set_drops_stays_short(forwarding):
    f = statecheck.fill(forwarding, 1_000, dport=5002)   # seed004 forwards only 5001
    statecheck.release(forwarding, f)
    assert not f.reached
    assert f.created < 10


def test_fill_past_the_limit_is_refused(forwarding):
    with pytest.raises(FwbenchError, match="nf_conntrack_max"):
        statecheck.fill(forwarding, 10_000_000)
