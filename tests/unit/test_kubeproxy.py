"""The kube-proxy template: its shape in both modes, kube-proxy's names and
probabilities, the seeded order, the address plan, the refusals, and that it is
what the iptables-save importer makes of kube-proxy's own text."""
import base64
import hashlib
import ipaddress

import pytest

from fwbench import addresses as ad
from fwbench.errors import FwbenchError
from fwbench.ruleset import templates
from fwbench.ruleset.importers import iptables_save
from fwbench.ruleset.render import iptables as ipt_render, nft as nft_render
from fwbench.ruleset.model import Interfaces
from fwbench.ruleset.templates import kubeproxy as kp


def _build(**kw):
    return templates.build("kube-proxy", {k: str(v) for k, v in kw.items()})


def _b32(text):
    return base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()


@pytest.mark.parametrize("n, m", [(1, 1), (7, 3), (20, 5)])
def test_iptables_mode_has_2n_plus_3nm_service_rules_in_n_plus_nm_chains(n, m):
    rs = _build(services=n, endpoints=m)
    nat, filt = rs.table("ip", "nat"), rs.table("ip", "filter")
    svc = [c for c in nat.chains if c.name.startswith("KUBE-SVC-")]
    sep = [c for c in nat.chains if c.name.startswith("KUBE-SEP-")]
    assert (len(svc), len(sep)) == (n, n * m)
    # Per service: its KUBE-SERVICES rule, the mark, M picks; per endpoint 2.
    per = sum(len(c.rules) for c in svc + sep) + n
    assert per == 2 * n + 3 * n * m
    # Besides them: 3 hook jumps, MARK-MASQ's 1, POSTROUTING's 3, the nodeports jump.
    assert sum(len(c.rules) for c in nat.chains) == per + 8
    assert [c.name for c in filt.chains] == ["FORWARD", "KUBE-FORWARD"]
    assert rs.rule_count == per + 8 + 4 and rs.size == n
    last = nat.chains[[c.name for c in nat.chains].index("KUBE-SERVICES")].rules[-1]
    assert last.match.addrtype.dst == {"local"} and last.action.chain == "KUBE-NODEPORTS"


@pytest.mark.parametrize("n, m", [(1, 1), (7, 3)])
def test_nftables_mode_has_2n_plus_2nm_service_rules_and_n_map_elements(n, m):
    rs = _build(services=n, endpoints=m, mode="nftables")
    (t,) = rs.tables
    assert (t.family, t.name) == ("ip", "kube-proxy")
    svc = [c for c in t.chains if c.name.startswith("service-")]
    eps = [c for c in t.chains if c.name.startswith("endpoint-")]
    assert (len(svc), len(eps)) == (n, n * m)
    assert sum(len(c.rules) for c in svc + eps) == 2 * n + 2 * n * m
    assert rs.rule_count == 2 * n + 2 * n * m + 12
    ips = next(s for s in t.sets if s.name == "service-ips")
    assert len(ips.elements) == n and ips.keys == ("addr", "proto", "port")
    assert {a.chain for a in ips.verdicts} == {c.name for c in svc}
    pick = svc[0].rules[1].action
    assert pick.kind == "vmap" and pick.numgen == (m, 0)
    assert all(not r.counter for _, _, r in rs.rules())   # kube-proxy counts nothing


def test_names_are_kube_proxys_hashes():
    (s,) = kp.services(1, 2)
    assert s.port_name == "default/svc-0:p80"
    assert s.svc_chain() == "KUBE-SVC-" + _b32("default/svc-0:p80tcp")[:16]
    addr, port = s.endpoints[1]
    assert s.sep_chain(1) == "KUBE-SEP-" + _b32(f"default/svc-0:p80tcp{addr}:{port}")[:16]
    name = "default/svc-0/tcp/p80"
    assert s.nft_base() == _b32(name)[:8] + "-" + name
    ep = f"{name}__{addr}/{port}"
    assert s.nft_endpoint_base(1) == _b32(ep)[:8] + "-" + ep
    rs = _build(services=1, endpoints=2)
    names = {c.name for t in rs.tables for c in t.chains}
    assert {s.svc_chain(), s.sep_chain(0), s.sep_chain(1)} <= names
    assert max(len(n) for n in names) <= 28


def test_probabilities_are_printed_as_kube_proxy_prints_them_and_held_as_iptables_holds_them():
    assert [kp.probability(i, 3) for i in range(2)] == ["0.3333333333", "0.5000000000"]
    assert kp.probability(0, 7) == "0.1428571429"
    for i, m in ((0, 3), (1, 3), (0, 7), (5, 7)):
        text = kp.probability(i, m)
        assert kp.threshold(text) == iptables_save._probability(text, False)
    rs = _build(services=1, endpoints=3)
    ipt = ipt_render.render(rs, Interfaces("c", "s"), 4)
    # What iptables-save prints back for kube-proxy's 0.3333333333 and 0.5.
    assert "--probability 0.33333333349 " in ipt and "--probability 0.50000000000 " in ipt


def test_the_seed_orders_the_services_and_nothing_else():
    def order(seed):
        rs = _build(services=30, endpoints=2, seed=seed)
        nat = rs.table("ip", "nat")
        chain = next(c for c in nat.chains if c.name == "KUBE-SERVICES")
        return [r.match.dst.net for r in chain.rules[:-1]]
    a, b = order(0), order(1)
    assert a == order(0) and a != b and sorted(a) == sorted(b)
    assert {s.name: s for s in kp.services(30, 2, 0)} == \
        {s.name: s for s in kp.services(30, 2, 1)}


def test_addresses_lie_in_the_benchmarking_plan():
    svcs = kp.services(kp.MAX_SERVICES, 3)
    taken = ipaddress.ip_network("198.19.254.0/23")
    cips = {ipaddress.ip_address(s.cluster_ip) for s in svcs}
    assert len(cips) == kp.MAX_SERVICES
    assert all(c in ad.KUBE_CLUSTER_IPS and c not in taken for c in cips)
    eps = [e for s in svcs for e in s.endpoints]
    assert len(set(eps)) == len(eps) == 3 * kp.MAX_SERVICES   # distinct address . port
    assert all(ipaddress.ip_address(a) in ad.KUBE_PODS for a, _ in eps)
    # 16,384 pod addresses: the next round of them takes the next target port.
    assert {p for _, p in eps} == set(range(8080, 8080 + 6))
    assert ad.KUBE_PODS == ipaddress.ip_network(kp.POD_CIDR)
    assert ad.KUBE_PODS.subnet_of(ad.SERVER_SIDE[4]) and \
        ad.KUBE_CLUSTER_IPS.subnet_of(ad.SERVER_SIDE[4])
    assert not ad.KUBE_PODS.overlaps(ad.SERVER_LINK[4])
    rs = _build(services=5, endpoints=2)
    assert rs.served == (kp.POD_CIDR,)


def test_probes_prove_the_dnat_to_an_endpoint_and_the_drop_of_the_rest():
    for mode in kp.MODES:
        rs = _build(services=4, endpoints=3, mode=mode)
        probes = {p.name: p for p in rs.probes}
        svc = probes["service"]
        assert svc.forward and len(svc.choices) == 3
        assert {c.saddr for c in svc.choices} == {ad.FW_SERVER_SIDE[4]}  # masqueraded
        assert all(ipaddress.ip_address(c.daddr) in ad.KUBE_PODS for c in svc.choices)
        assert not probes["other port"].forward and not probes["not a service"].forward
        assert (svc.rule is not None) == (mode == "iptables")


@pytest.mark.parametrize("params, message", [
    ({"services": "0"}, "template kube-proxy: services must be 1..32000, got 0"),
    ({"services": "32001"}, "template kube-proxy: services must be 1..32000, got 32001"),
    ({"endpoints": "0"}, "template kube-proxy: endpoints must be 1..1000, got 0"),
    ({"mode": "ipvs"}, "template kube-proxy: mode must be iptables or nftables, got 'ipvs'"),
    ({"seed": "-1"}, "template kube-proxy: seed must be 0 or more, got -1"),
    ({"services": "many"}, "template kube-proxy: setting services takes an integer, "
                           "got 'many'"),
    ({"services": "30000", "endpoints": "9"},
     "template kube-proxy: services x endpoints must be at most 262,144 (16 target ports "
     "of 16,384 pod addresses), got 270,000"),
])
def test_bad_settings_are_refused_in_one_line_naming_the_setting(params, message):
    with pytest.raises(FwbenchError) as e:
        templates.build("kube-proxy", params)
    assert str(e.value) == message and "\n" not in str(e.value)


def _shape(rs):
    """Tables as comparable data: chains with their rules' matches and actions."""
    return [(t.family, t.name, sorted(
        (c.name, c.hook, c.priority, c.type, c.policy,
         tuple((r.match, r.action) for r in c.rules)) for c in t.chains))
        for t in rs.tables]


def test_the_template_is_what_the_importer_makes_of_kube_proxys_text():
    svcs = kp.services(12, 3, seed=4)
    text = kp.iptables_save(svcs)
    imported = iptables_save.parse(text, "kube.rules")
    built = _build(services=12, endpoints=3, seed=4)
    assert _shape(imported) == _shape(built)


def test_nft_mode_renders_kube_proxys_statements():
    rs = _build(services=2, endpoints=2, mode="nftables")
    text = nft_render.render(rs, Interfaces("c", "s"))
    assert "ip daddr . meta l4proto . th dport vmap @service-ips" in text
    assert "numgen random mod 2 vmap { 0 : goto endpoint-" in text
    assert "fib daddr type local jump nodeports" in text
    assert "masquerade fully-random" in text
    # On iptables a name over 28 bytes is shortened, stable and unique.
    ipt = ipt_render.render(rs, Interfaces("c", "s"), 4)
    chains = [ln[1:].split()[0] for ln in ipt.splitlines() if ln.endswith(" - [0:0]")]
    assert len(chains) == len(set(chains)) and max(map(len, chains)) == 28
    # 2 service chains, 4 endpoint chains, and the 4 of every node.
    assert len(chains) == 2 + 2 * 2 + 4
