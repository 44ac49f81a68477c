"""kube-proxy's rule sets as a node lists them (tests/data/realworld/kube-proxy):
each imports whole, and the model holds what kube-proxy, kubelet and flannel put
there, value by value; what a backend cannot hold is refused in one line.
`tests/privileged/test_kube_dumps.py` checks both against the files themselves."""
import os
import shutil
from pathlib import Path

import pytest

from fwbench.backends import registry
from fwbench.ruleset.importers import iptables_save, nft_json
from fwbench.ruleset.importers.load import load_file
from fwbench.ruleset.importers.remap import reverse
from fwbench.ruleset.model import RANDOM_SCALE, Interfaces, Unsupported
from fwbench.ruleset.render import iptables as ipt_render
from fwbench.ruleset.render import nft as nft_render

DUMPS = Path(__file__).parent.parent / "data" / "realworld" / "kube-proxy"
RULES, NFT, JSON = DUMPS / "iptables-save.rules", DUMPS / "nft-list.nft", DUMPS / "nft-list.json"
IFS = Interfaces("c0", "s0")
WEB = "shop/web:http"


def _by_comment(rs, text):
    return [r for _, _, r in rs.rules() if r.comment == text]


def _chain(rs, table, name):
    t = next(t for t in rs.tables if t.name == table)
    return next(c for c in t.chains if c.name == name)


# --- iptables mode ---------------------------------------------------------------

@pytest.fixture(scope="module")
def ipt():
    return iptables_save.parse(RULES.read_text(), "iptables-save.rules")


def test_the_iptables_dump_has_kube_proxys_kubelets_and_flannels_chains(ipt):
    assert [t.name for t in ipt.tables] == ["mangle", "filter", "nat"]
    # mangle: kubelet's hint and the two canaries, empty; its built-in chains are
    # empty with policy ACCEPT, left out with a note.
    assert [c.name for c in ipt.tables[0].chains] == [
        "KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY", "KUBE-PROXY-CANARY"]
    nat = {c.name for c in ipt.tables[2].chains}
    assert {"KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-MARK-MASQ", "KUBE-POSTROUTING",
            "FLANNEL-POSTRTG", "KUBE-EXT-67NZLRHBNDSAWJRO", "KUBE-SVC-67NZLRHBNDSAWJRO",
            "KUBE-SVC-TCOU7JCQXEZGVUNU", "KUBE-SEP-6E7XQMQ4RAYOWTTM"} <= nat
    assert sum(n.startswith("KUBE-SEP-") for n in nat) == 11
    filt = {c.name for c in ipt.tables[1].chains}
    assert {"KUBE-FIREWALL", "KUBE-FORWARD", "KUBE-EXTERNAL-SERVICES",
            "KUBE-PROXY-FIREWALL", "FLANNEL-FWD"} <= filt
    assert ipt.size == sum(1 for _ in ipt.rules()) == 82


def test_endpoint_choice_is_the_statistic_kube_proxy_wrote(ipt):
    svc = _chain(ipt, "nat", "KUBE-SVC-67NZLRHBNDSAWJRO").rules
    # The masquerade mark for off-cluster sources, then 1/3, 1/2 and the rest,
    # as `%0.10f` and libxt_statistic's lround(p * 2**31) hold them.
    assert svc[0].match.src.negate and svc[0].action.chain == "KUBE-MARK-MASQ"
    assert [r.match.random for r in svc[1:]] == [1431655766, RANDOM_SCALE // 2, None]
    assert [r.comment for r in svc[1:]] == [f"{WEB} -> 10.244.1.5:8080",
                                            f"{WEB} -> 10.244.1.6:8080",
                                            f"{WEB} -> 10.244.2.7:8080"]
    assert all(r.action.kind == "jump" and r.action.chain.startswith("KUBE-SEP-")
               for r in svc[1:])


def test_marks_dnat_and_masquerade_are_kube_proxys(ipt):
    (mark,) = _chain(ipt, "nat", "KUBE-MARK-MASQ").rules
    assert (mark.action.kind, mark.action.mark, mark.action.mark_mask) == ("mark", 0x4000, 0x4000)
    ret, xor, masq = _chain(ipt, "nat", "KUBE-POSTROUTING").rules
    assert ret.match.mark == (0x4000, 0x4000) and ret.match.mark_negate
    assert (xor.action.mark, xor.action.mark_mask) == (0x4000, 0)      # --xor-mark
    assert masq.action.kind == "masquerade" and masq.action.random_port
    sep = _chain(ipt, "nat", "KUBE-SEP-34ZZ2QFGO32YYXXO").rules
    assert sep[1].action.kind == "dnat" and (sep[1].action.addr, sep[1].action.port) == \
        ("10.244.1.5", 8080)
    last = _chain(ipt, "nat", "KUBE-SERVICES").rules[-1]
    assert last.match.addrtype.dst == frozenset({"local"}) and \
        last.action.chain == "KUBE-NODEPORTS"


def test_kubelets_localnet_rule_is_not_established_and_not_dnat(ipt):
    (rule,) = _chain(ipt, "filter", "KUBE-FIREWALL").rules
    m = rule.match
    # `! --ctstate RELATED,ESTABLISHED,DNAT`: none of the three.
    assert m.ct_state == frozenset({"new", "invalid", "untracked"})
    assert m.ct_status == frozenset({"dnat"}) and m.ct_status_negate
    assert m.src.negate and not m.dst.negate and m.dst.net == "127.0.0.0/8"
    assert rule.action.kind == "drop"
    # iptables renders it back as two conntrack matches, which iptables-save
    # prints as such: the same packets.
    line = next(ln for ln in ipt_render.render(ipt, IFS, 4).splitlines()
                if "KUBE-FIREWALL" in ln and "DROP" in ln)
    assert "-m conntrack --ctstate INVALID,NEW,UNTRACKED -m conntrack ! --ctstate DNAT" in line


def test_a_service_without_endpoints_is_rejected_in_filter(ipt):
    (rule,) = _chain(ipt, "filter", "KUBE-SERVICES").rules
    assert rule.comment == "shop/legacy-api:https has no endpoints"
    assert rule.action.kind == "reject" and rule.match.dport is not None


def test_the_import_moves_the_cluster_onto_the_testbed():
    rs = load_file(str(RULES))
    pairs = dict(rs.address_map)
    for net in ("10.244.0.0/16", "10.244.1.0/24", "127.0.0.0/8", "224.0.0.0/4",
                "10.96.0.10/32", "192.168.56.10/32"):
        assert net in pairs, net
    # Containment is kept: the node's pod subnet stays inside the pod CIDR.
    import ipaddress
    pods, node = (ipaddress.ip_network(pairs[x]) for x in ("10.244.0.0/16", "10.244.1.0/24"))
    assert node.subnet_of(pods) and pods.subnet_of(ipaddress.ip_network("198.18.0.0/15"))
    sep = _chain(rs, "nat", "KUBE-SEP-34ZZ2QFGO32YYXXO").rules[1]
    assert reverse(rs, sep.action.addr) == "10.244.1.5" and sep.action.port == 8080


def test_every_iptables_backend_renders_it_and_nft_says_why_not_in_one_line():
    rs = load_file(str(RULES))
    for name in ("iptables-legacy", "iptables-nft"):
        registry.get(name).refuse_unsupported(rs)
    # kubelet's mangle chains go to iptables' mangle table, not beside filter's own.
    text = ipt_render.render(rs, IFS, 4)
    assert text.count(":KUBE-KUBELET-CANARY - [0:0]") == 3
    with pytest.raises(Unsupported) as e:
        registry.get("nftables").refuse_unsupported(rs)
    assert "negated ct status" in str(e.value) and "\n" not in str(e.value)


# --- nftables mode ---------------------------------------------------------------

@pytest.fixture(scope="module")
def nft():
    return nft_json.parse(JSON.read_text(), "nft-list.json")


def test_the_nft_dump_has_kube_proxys_maps_sets_and_chains(nft):
    (t,) = nft.tables
    assert (t.family, t.name) == ("ip", "kube-proxy")
    ips = t.set("service-ips")
    assert ips.keys == ("addr", "proto", "port") and len(ips.elements) == 6
    assert ("10.104.83.17", "tcp", 80) in ips.elements
    verdict = ips.verdicts[ips.elements.index(("10.104.83.17", "tcp", 80))]
    assert (verdict.kind, verdict.chain) == ("goto", "service-KHN6ECMT-shop/web/tcp/http")
    noep = t.set("no-endpoint-services")
    assert noep.elements == (("10.99.201.44", "tcp", 443),)
    assert noep.verdicts[0].chain == "reject-chain"
    ports = t.set("service-nodeports")
    assert ports.elements == (("tcp", 30080),)
    assert ports.verdicts[0].chain == "external-KHN6ECMT-shop/web/tcp/http"
    assert len(t.set("cluster-ips").elements) == 5
    assert t.set("firewall-ips").elements == () and t.set("no-endpoint-nodeports").elements == ()
    hooks = {c.name: (c.hook, c.priority, c.type) for c in t.chains if c.hook}
    assert hooks == {
        "filter-prerouting": ("prerouting", -110, "filter"),
        "filter-input": ("input", -110, "filter"),
        "filter-forward": ("forward", -110, "filter"),
        "filter-output": ("output", -110, "filter"),
        "filter-output-post-dnat": ("output", -90, "filter"),
        "nat-prerouting": ("prerouting", -100, "nat"),
        "nat-output": ("output", -100, "nat"),
        "nat-postrouting": ("postrouting", 100, "nat")}


def test_endpoint_choice_is_numgen_over_an_inline_map(nft):
    c = _chain(nft, "kube-proxy", "service-KHN6ECMT-shop/web/tcp/http")
    masq, pick = c.rules
    assert masq.match.src.negate and masq.action.chain == "mark-for-masquerade"
    assert pick.action.kind == "vmap" and pick.action.numgen == (3, 0)
    (t,) = nft.tables
    m = t.set(pick.action.vmap.name)
    assert m.inline and m.elements == ((0,), (1,), (2,))
    assert [v.chain for v in m.verdicts] == [
        "endpoint-FDH7QP7U-shop/web/tcp/http__10.244.1.5/8080",
        "endpoint-SH75W6A6-shop/web/tcp/http__10.244.1.6/8080",
        "endpoint-W7KABZCH-shop/web/tcp/http__10.244.2.7/8080"]


def test_nodeports_are_fib_local_and_marks_are_kube_proxys(nft):
    lookup, nodeports = _chain(nft, "kube-proxy", "services").rules
    assert lookup.action.vmap.fields == ("daddr", "proto", "dport")
    assert nodeports.match.addrtype.dst == frozenset({"local"})
    assert nodeports.match.dst.negate and nodeports.match.dst.net == "127.0.0.0/8"
    (mark,) = _chain(nft, "kube-proxy", "mark-for-masquerade").rules
    assert (mark.action.mark, mark.action.mark_mask) == (0x4000, 0x4000)
    ret, xor, masq = _chain(nft, "kube-proxy", "masquerading").rules
    assert ret.match.mark == (0, 0x4000) and ret.action.kind == "return"
    assert (xor.action.mark, xor.action.mark_mask) == (0x4000, 0)
    assert masq.action.kind == "masquerade" and masq.action.random_port
    rej, drop = _chain(nft, "kube-proxy", "cluster-ips-check").rules
    assert rej.action.kind == "reject" and rej.comment == \
        "Reject traffic to invalid ports of ClusterIPs"
    assert drop.match.dst.net == "10.96.0.0/12" and drop.action.kind == "drop"


def test_nft_holds_it_and_iptables_says_why_not_in_one_line(nft):
    registry.get("nftables").refuse_unsupported(nft)
    nft_render.render(nft, IFS)
    with pytest.raises(Unsupported) as e:
        registry.get("iptables-legacy").refuse_unsupported(nft)
    # kube-proxy's filter chains run at dstnat - 10, which no iptables table does.
    assert "priority -110" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("unshare"),
                    reason="nft text is read by nft itself, in a namespace: needs root and nft")
def test_the_nft_text_reads_as_its_json(nft):
    text = nft_json.parse_file(str(NFT))
    assert text.tables == nft.tables


# --- nftables mode at scale: named numgen maps ------------------------------------

def test_from_a_thousand_numgen_maps_on_the_renderer_names_them():
    from fwbench.backends.nftables import NftLinear
    from fwbench.ruleset.templates.kubeproxy import kube_proxy
    small = kube_proxy(services=nft_render.NAMED_NUMGEN_MAPS - 1, endpoints=3, mode="nftables")
    assert nft_render.named_numgen_maps(small) == 0 and NftLinear().load_form(small) is None
    text = nft_render.render(small, IFS)
    assert "numgen random mod 3 vmap { 0 : goto endpoint-" in text
    big = kube_proxy(services=nft_render.NAMED_NUMGEN_MAPS, endpoints=3, mode="nftables")
    assert nft_render.named_numgen_maps(big) == nft_render.NAMED_NUMGEN_MAPS
    text = nft_render.render(big, IFS)
    assert "vmap { 0 :" not in text
    assert text.count("\t\ttypeof numgen random mod 3 : verdict\n") == \
        nft_render.NAMED_NUMGEN_MAPS
    assert "\t\tnumgen random mod 3 vmap @vmap1 comment \"fwb:" in text
    assert "numgen maps named" in NftLinear().load_form(big)
