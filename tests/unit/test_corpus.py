"""The packet corpus: deterministic, inside the benchmarking ranges, of the asked
size, and every rule a forwarded packet can reach is matched by some packet."""
import ipaddress

import pytest

from fwbench.ruleset import corpus
from fwbench.ruleset.evaluate import Evaluator
from fwbench.ruleset.model import (ACCEPT, CLIENT, DROP, RETURN, SERVER, Action, Chain,
                                   Iface, Match, Ports, Prefix, Rule, RuleSet, RuleSetError,
                                   Set, SetRef, Table, jump, validate)
from fwbench.ruleset.templates.seed000 import seed000

FIREWALL = {"198.18.0.1", "198.19.0.1", "2001:2:0:1::1", "2001:2:0:2::1"}
# Rules no forwarded packet can match, in `awkward()`.
UNMATCHABLE = {"literal-iif", "input-only", "pre-oif"}


def tcp(*ports, **kw) -> Match:
    return Match(proto="tcp", dport=Ports.of(*ports), **kw)


def awkward() -> RuleSet:
    """Most of what the model can say, in one rule set of three tables."""
    svc = Set("svc", ("addr", "proto", "port"),
              (("198.19.0.10", "tcp", 443), ("198.19.3.0/24", "udp", (5000, 5100))),
              version=4, interval=True)
    nets6 = Set("nets6", ("addr",), (("2001:2:0:2:1::/80",), ("2001:2:0:2::99",)),
                version=6, interval=True)
    inet = Table("inet", "fw", (
        Chain("raw", (Rule("notrack-dns", Match(proto="udp", dport=Ports.of(53)),
                           Action("notrack")),
                      Rule("pre-oif", Match(oif=Iface(SERVER)), DROP)),
              hook="prerouting", priority=-300),
        Chain("mangle", (Rule("mark-8443", tcp(8443), Action("mark", mark=5)),),
              hook="prerouting", priority=-150),
        Chain("dnat", (Rule("dnat-80", tcp(80, dst=Prefix.of("198.19.0.50")),
                            Action("dnat", addr="198.19.0.2", port=8080)),),
              hook="prerouting", priority=-100, type="nat"),
        Chain("forward", (
            Rule("established", Match(ct_state=frozenset({"established", "related"})),
                 ACCEPT),
            Rule("untracked", Match(ct_state=frozenset({"untracked"})), ACCEPT),
            Rule("to-web", Match(iif=Iface(CLIENT), proto="tcp"), jump("web")),
            Rule("marked", Match(mark=(5, 0xFF)), ACCEPT),
            Rule("dnatted", tcp(8080, dst=Prefix.of("198.19.0.2")), ACCEPT),
            Rule("echo", Match(proto="icmp", icmp_type=8), ACCEPT),
            Rule("echo6", Match(proto="icmpv6", icmp_type=128,
                                dst=Prefix.of("2001:2:0:2::/64")), ACCEPT),
            Rule("from-server", Match(iif=Iface(SERVER), src=Prefix.of("198.19.0.0/16")),
                 Action("goto", chain="back")),
            Rule("svc", Match(sets=(SetRef("svc", ("daddr", "proto", "dport")),)), ACCEPT),
            Rule("nets6", Match(sets=(SetRef("nets6", ("daddr",)),)), Action("counter")),
            Rule("not-ours", Match(src=Prefix.of("198.18.0.0/24", negate=True), proto="udp",
                                   dport=Ports.of((1000, 2000))), DROP),
            Rule("literal-iif", Match(iif=Iface("eth0")), ACCEPT),
            Rule("telnet", tcp(23), Action("reject")),
            Rule("to-server-v6", Match(oif=Iface(SERVER), proto="udp",
                                       src=Prefix.of("2001:2:0:1::/64")), ACCEPT),
        ), hook="forward", priority=0, policy="accept"),
        Chain("web", (
            Rule("web-ok", tcp(80, 443), ACCEPT),
            Rule("web-range", Match(proto="tcp", dport=Ports.of((8000, 8099)),
                                    sport=Ports.of((1, 1023), negate=True)), ACCEPT),
            Rule("web-back", tcp(3000), RETURN),
            Rule("web-deny", tcp((6000, 6063)), DROP),
        )),
        Chain("back", (Rule("back-dns", Match(proto="udp", sport=Ports.of(53)), ACCEPT),)),
        Chain("masq", (Rule("masq", Match(oif=Iface(SERVER), src=Prefix.of("198.18.0.0/24")),
                            Action("masquerade")),),
              hook="postrouting", priority=100, type="nat"),
        Chain("input", (Rule("input-only", Match(), ACCEPT),), hook="input"),
    ), (svc, nets6))
    legacy = Table("ip", "filter", (
        Chain("FORWARD", (Rule("ssh-deny", tcp(22), DROP),), hook="forward", priority=10),))
    dev = Table("netdev", "dev", (
        Chain("ingress", (Rule("discard", Match(iif=Iface(CLIENT), proto="udp",
                                               dport=Ports.of(9)), DROP),),
              hook="ingress", priority=0),))
    return validate(RuleSet("awkward", (inet, legacy, dev)))


def rule_ids(rs: RuleSet) -> set[str]:
    return {r.id for _, _, r in rs.rules()}


def hit(rs: RuleSet, packets) -> set[str]:
    out = set()
    for v in Evaluator(rs).evaluate_all(packets):
        out.update(v.counted)
        if v.decided_by:
            out.add(v.decided_by)
    return out


CASES = {
    "awkward": awkward,
    "seed000-linear": lambda: seed000(200),
    "seed000-set6": lambda: seed000(200, version=6, layout="set"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_matchable_rule_is_hit(name):
    rs = CASES[name]()
    packets = corpus.build(rs, 2000)
    unmatchable = UNMATCHABLE if name == "awkward" else set()
    got = hit(rs, packets)
    assert rule_ids(rs) - unmatchable - got == set()
    assert not got & unmatchable


def test_deterministic_and_seeded(elsewhere):
    rs = awkward()
    a = corpus.build(rs, 1500, seed=3)
    assert [repr(a)] == elsewhere("from test_corpus import awkward, corpus",
                                  "repr(corpus.build(awkward(), 1500, seed=3))")
    b = corpus.build(rs, 1500, seed=4)
    assert a != b
    assert len(set(a)) == len(a) == 1500 == len(b)


def test_addresses_stay_in_the_benchmarking_ranges():
    for rs in (awkward(), seed000(50, version=6)):
        for p in corpus.build(rs, 3000):
            for text in (p.saddr, p.daddr):
                a = ipaddress.ip_address(text)
                assert a in corpus.RANGES[a.version] and a.version == p.version
                assert not a.is_multicast and text not in FIREWALL
                assert int(a) not in corpus.RESERVED[a.version]
            assert p.saddr != p.daddr


def test_mix_of_versions_protocols_and_sides():
    packets = corpus.build(awkward(), 3000)
    assert {p.version for p in packets} == {4, 6}
    assert {p.proto for p in packets} == {"tcp", "udp", "icmp", "icmpv6"}
    assert {p.iif for p in packets} == {"client", "server"}
    for p in packets:
        if p.proto in ("tcp", "udp"):
            assert 1 <= p.sport <= 65535 and 1 <= p.dport <= 65535 and p.icmp_type is None
        else:
            assert p.sport is None and p.dport is None and p.icmp_type is not None
    # An IPv4-only rule set gets IPv4 packets only.
    assert {p.version for p in corpus.build(seed000(20), 500)} == {4}


def test_edges_and_near_misses_are_there():
    rs = awkward()
    packets = corpus.build(rs, 5000)
    web = [p for p in packets if p.proto == "tcp" and p.iif == "client"]
    ports = {p.dport for p in web}
    assert {7999, 8000, 8099, 8100} <= ports                       # a range's edges
    assert {6063, 6064} <= ports
    daddrs = {p.daddr for p in packets if p.version == 4}
    assert {"198.19.3.0", "198.19.3.255", "198.19.4.0", "198.19.2.255"} <= daddrs


def test_size_is_respected_and_small_corpora_keep_one_packet_per_rule():
    rs = seed000(300)
    assert len(corpus.build(rs, 100)) == 100
    assert len(corpus.build(rs, 1)) == 1
    full = corpus.build(rs, 5000)
    assert len(full) == 5000
    # Room for the rules' own packets: every rule is still hit.
    small = corpus.build(rs, rs.rule_count + 10)
    assert rule_ids(rs) <= hit(rs, small)
    with pytest.raises(RuleSetError):
        corpus.build(rs, 0)


def test_addresses_outside_the_ranges_must_be_remapped_first():
    rs = validate(RuleSet("x", (Table("ip", "t", (
        Chain("f", (Rule("lan", Match(src=Prefix.of("10.0.0.0/8")), ACCEPT),),
              hook="forward"),)),)))
    with pytest.raises(RuleSetError, match="rule lan: address 10.0.0.0/8 is outside .*remap"):
        corpus.build(rs)
    everything = validate(RuleSet("x", (Table("ip", "t", (
        Chain("f", (Rule("all", Match(src=Prefix.of("0.0.0.0/0")), ACCEPT),),
              hook="forward"),)),)))
    assert corpus.build(everything, 50)


def test_sample_keeps_the_index():
    packets = corpus.build(seed000(30), 400)
    s = corpus.sample(packets, 25, seed=1)
    assert s == corpus.sample(packets, 25, seed=1) != corpus.sample(packets, 25, seed=2)
    assert len(s) == 25 and [i for i, _ in s] == sorted(i for i, _ in s)
    assert all(packets[i] == p for i, p in s)
    assert corpus.sample(packets, 1000) == list(enumerate(packets))
