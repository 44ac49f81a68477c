"""The kube-proxy template checked for real, both modes in one testbed built as
the rule set asks (the pods routed to the server, which holds them): every
backend gives every packet a verdict the reference allows, service packets are
DNATed to one of their endpoints, and the endpoint shares pass the chi-square
test."""
import pytest

from fwbench import backends, check
from fwbench.ruleset import templates
from fwbench.ruleset.templates.kubeproxy import POD_CIDR
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology

BACKENDS = ("iptables-legacy", "iptables-nft", "nftables")


@pytest.fixture(scope="module")
def kube_testbed():
    with NetnsTestbed(Topology.new().serving((POD_CIDR,))) as tb:
        yield tb


def test_the_testbed_routes_the_pods_to_the_server_which_holds_them(kube_testbed):
    tb = kube_testbed
    fw = tb.run("fw", ["ip", "-4", "route", "show", POD_CIDR]).stdout
    assert f"via {tb.topo.server.ip4}" in fw, fw
    local = tb.run("server", ["ip", "-4", "route", "show", "table", "local",
                              POD_CIDR]).stdout
    assert local.startswith(f"local {POD_CIDR}"), local


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_both_modes_pass_on_three_backends(kube_testbed, mode):
    rs = templates.build("kube-proxy", {"services": "100", "endpoints": "3", "mode": mode})
    chosen = [backends.get(b) for b in BACKENDS]
    for b in chosen:
        if b.unavailable():
            pytest.skip(f"{b.name}: {b.unavailable()}")
    rep = check.check(rs, chosen, corpus_size=300, tb=kube_testbed)
    assert rep.ok, [r.as_dict() for r in rep.results]
    for r in rep.results:
        d = r.as_dict()
        assert d["disagreements"] == 0 and 0 < d["forwarded"] < d["packets"], d
        tested = [g for g in r.chances.groups if "p_value" in g]
        assert tested and r.chances.failed == [], r.chances


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_verification_sees_the_service_dnated_to_an_endpoint(kube_testbed, mode):
    rs = templates.build("kube-proxy", {"services": "50", "endpoints": "3", "mode": mode})
    b = backends.get("nftables")
    b.apply(kube_testbed, rs)
    v = b.verify(kube_testbed, rs)
    assert v.ok, v.reason
    probes = v.details["probes"]
    assert probes["service"]["forwarded"] == probes["service"]["sent"] > 0
    assert probes["not a service"]["forwarded"] == 0
