"""The everyday matches of hosts and routers: TCP flags, ICMP codes and type sets,
address and packet types, TTL / hop limit, length, IPv6 extension headers,
anonymous sets of any key, dual-stack restore files and rules only the firewall's
own packets reach. Each from both importers into the model, out of the renderers,
through the reference evaluator, the corpus and the injector's frames."""
from dataclasses import replace
from pathlib import Path

import pytest

from fwbench.backends.base import as_tracked
from fwbench.ruleset import corpus
from fwbench.ruleset.evaluate import Evaluator, packet_length
from fwbench.ruleset.importers import iptables_save, nft_json
from fwbench.ruleset.importers.load import detect, load_file
from fwbench.ruleset.model import (Action, AddrType, Chain, Interfaces, Match, Packet, Range, Rule,
                                   RuleSet, RuleSetError, Table, TcpFlags, Unsupported,
                                   validate)
from fwbench.ruleset.render import bpf, iptables as ipt_render, nft as nft_render
from fwbench.testbed.packets import build_frame, parse_frame

HEAD = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n"
EXAMPLES = Path(__file__).parent.parent / "data" / "constructs" / "everyday"
IFS = Interfaces("veth-c", "veth-s")


def ipt(body: str, version: int = 4, head: str = HEAD) -> RuleSet:
    return iptables_save.parse(head + body + "COMMIT\n", "h.rules", version)


def matches(rs: RuleSet) -> list[Match]:
    return [r.match for _, _, r in rs.rules()]


def nft_rs(*exprs, family: str = "inet") -> RuleSet:
    items = [{"table": {"family": family, "name": "t", "handle": 1}},
             {"chain": {"family": family, "table": "t", "name": "c", "handle": 2,
                        "type": "filter", "hook": "forward", "prio": 0, "policy": "drop"}}]
    items += [{"rule": {"family": family, "table": "t", "chain": "c", "handle": 10 + i,
                        "expr": list(e) + [{"accept": None}]}} for i, e in enumerate(exprs)]
    return nft_json.parse({"nftables": items}, "t.json")


def m(left, right, op="=="):
    return {"match": {"op": op, "left": left, "right": right}}


FLAGS = {"payload": {"protocol": "tcp", "field": "flags"}}


def forward(*rules: Rule, family: str = "ip", policy: str = "drop") -> RuleSet:
    return validate(RuleSet("t", (Table(family, "t", (
        Chain("fw_forward", rules, hook="forward", policy=policy),)),)))


def pkt(**kw) -> Packet:
    base = dict(version=4, iif="client", saddr="198.18.0.2", daddr="198.19.0.2",
                proto="tcp", sport=40000, dport=80)
    base.update(kw)
    return Packet(**base)


# --- iptables-save in -------------------------------------------------------------

def test_iptables_tcp_flags_forms():
    ms = matches(ipt("-A FORWARD -p tcp -m tcp --syn -j ACCEPT\n"
                     "-A FORWARD -p tcp -m tcp ! --syn -j DROP\n"
                     "-A FORWARD -p tcp -m tcp --tcp-flags FIN,SYN FIN,SYN -j DROP\n"
                     "-A FORWARD -p tcp -m tcp ! --tcp-flags ALL NONE -j ACCEPT\n"))
    assert [x.tcp_flags for x in ms] == [
        TcpFlags(0x17, frozenset({0x02})), TcpFlags(0x17, frozenset({0x02}), True),
        TcpFlags(0x03, frozenset({0x03})), TcpFlags(0x3F, frozenset({0}), True)]


@pytest.mark.parametrize("body, message", [
    ("-A FORWARD -m tcp --syn -j DROP\n", "h.rules:5: --syn needs -p tcp"),
    ("-A FORWARD -p tcp -m tcpmss --mss 1000:1500 -j DROP\n",
     "h.rules:5: unsupported match -m tcpmss"),
    ("-A FORWARD -p tcp -m tcp --tcp-flags SYN,BOGUS SYN -j DROP\n",
     "h.rules:5: --tcp-flags: unknown flag 'BOGUS'"),
    ("-A FORWARD -m ttl --ttl-lt 0 -j DROP\n",
     "h.rules:5: unsupported: --ttl-lt 0 (matches no packet)"),
    ("-A FORWARD -m hl --hl-eq 255 -j DROP\n", "h.rules:5: -m hl in an IPv4 rule set"),
    ("-A FORWARD ! -f -j DROP\n",
     "h.rules:5: unsupported match ! -f (every packet but non-first fragments)"),
    ("-A FORWARD -m connlimit --connlimit-above 2 -j DROP\n",
     "h.rules:5: unsupported match -m connlimit"),
])
def test_iptables_everyday_errors_are_one_line(body, message):
    with pytest.raises(RuleSetError) as e:
        ipt(body)
    assert str(e.value) == message


def test_iptables_icmp_codes_addrtype_pkttype_ttl_length():
    ms = matches(ipt("-A FORWARD -p icmp -m icmp --icmp-type port-unreachable -j ACCEPT\n"
                     "-A FORWARD -p icmp -m icmp --icmp-type 3/13 -j DROP\n"
                     "-A FORWARD -p icmp -m icmp --icmp-type time-exceeded -j ACCEPT\n"
                     "-A FORWARD -m addrtype --src-type LOCAL ! --dst-type UNICAST,LOCAL "
                     "-j DROP\n"
                     "-A FORWARD -m pkttype ! --pkt-type unicast -j DROP\n"
                     "-A FORWARD -m ttl --ttl-gt 100 -j DROP\n"
                     "-A FORWARD -m length --length :200 -j ACCEPT\n"))
    assert [(x.icmp_type, x.icmp_code) for x in ms[:3]] == [(3, 3), (3, 13), (11, None)]
    assert ms[3].addrtype == AddrType(frozenset({"local"}), frozenset({"unicast", "local"}),
                                      False, True)
    assert (ms[4].pkttype, ms[4].pkttype_negate) == (frozenset({"host"}), True)
    assert ms[5].ttl == Range(101, 255)
    assert ms[6].length == Range(0, 200)


def test_ip6tables_hop_limit_icmpv6_codes_and_headers_set_aside():
    rs = ipt("-A FORWARD -m rt --rt-type 0 -j DROP\n"
             "-A FORWARD -m frag --fragmore -j DROP\n"
             "-A FORWARD -p ipv6-icmp -m icmp6 --icmpv6-type 1/4 -m hl --hl-eq 255 "
             "-j ACCEPT\n", version=6)
    (r,) = [r for _, _, r in rs.rules()]
    assert (r.id, r.match.icmp_type, r.match.icmp_code, r.match.ttl) == \
        ("filter-3", 1, 4, Range(255, 255))
    assert [n for n in rs.notes if "set aside" in n] == [
        "h.rules:5: rule set aside: -m rt matches only packets with a routing header, "
        "which the testbed never sends",
        "h.rules:6: rule set aside: -m frag matches only packets with a fragment header, "
        "which the testbed never sends"]
    with pytest.raises(RuleSetError, match=r"^h.rules:5: unsupported: -m addrtype in an "
                                           r"IPv6 rule set"):
        ipt("-A FORWARD -m addrtype --dst-type LOCAL -j DROP\n", version=6)


def test_rules_only_output_reaches_are_set_aside_and_others_refused():
    head = HEAD + ":mine - [0:0]\n"
    rs = ipt("-A OUTPUT -m connlimit --connlimit-above 2 -j ACCEPT\n"
             "-A OUTPUT -j mine\n"
             "-A mine -m recent --set -j ACCEPT\n"
             "-A FORWARD -p tcp -j ACCEPT\n", head=head)
    assert [r.id for _, _, r in rs.rules()] == ["filter-4", "filter-2"]
    assert [n for n in rs.notes if "set aside" in n] == [
        "h.rules:6: rule set aside, only the firewall's own packets reach chain OUTPUT: "
        "unsupported match -m connlimit",
        "h.rules:8: rule set aside, only the firewall's own packets reach chain mine: "
        "unsupported match -m recent"]
    # The same user chain reached from INPUT too: refused, with the rule's line.
    with pytest.raises(RuleSetError, match=r"^h.rules:8: unsupported match -m recent$"):
        ipt("-A OUTPUT -j mine\n-A INPUT -j mine\n-A mine -m recent --set -j ACCEPT\n",
            head=head)


def test_dual_stack_file_is_both_families():
    text = HEAD + ("-A FORWARD -p tcp -m tcp --dport 22 -j ACCEPT\n"
                   "-4 -A FORWARD -s 10.0.0.0/8 -j DROP\n"
                   "-A FORWARD -6 -s 2001:db8::/32 -j DROP\n") + "COMMIT\n"
    assert detect(text) == ("iptables", 0)
    v4 = iptables_save.parse(text, "d.rules", 4)
    v6 = iptables_save.parse(text, "d.rules", 6)
    assert [r.id for _, _, r in v4.rules()] == ["filter-1", "filter-2"]
    assert [r.id for _, _, r in v6.rules()] == ["filter-1", "filter-2"]
    rs = load_file(str(EXAMPLES / "dualstack.rules"), {"eth0": "client"})
    assert [(t.family, t.name) for t in rs.tables] == [("ip", "filter"), ("ip6", "filter")]
    ids = [r.id for _, _, r in rs.rules()]
    assert ids == ["filter-1", "filter-2", "filter-3", "filter-4",
                   "ip6-filter-1", "ip6-filter-2", "ip6-filter-3", "ip6-filter-4"]
    assert rs.origin("ip6-filter-2").endswith("dualstack.rules:9")


@pytest.mark.parametrize("line", ["-A FORWARD -p ipv6-icmp -j ACCEPT",
                                  "-A FORWARD -p icmpv6 -j ACCEPT",
                                  "-A FORWARD -m rt --rt-type 0 -j DROP",
                                  "-A FORWARD -m hl --hl-eq 255 -j ACCEPT",
                                  "-A FORWARD -j REJECT --reject-with icmp6-adm-prohibited"])
def test_ip6tables_file_without_header_or_addresses_is_told_apart(line):
    assert detect(HEAD + line + "\nCOMMIT\n") == ("iptables", 6)
    assert detect(HEAD + "-A FORWARD -p icmp -j ACCEPT\nCOMMIT\n") == ("iptables", 4)


# --- nft JSON in ------------------------------------------------------------------

def test_nft_tcp_flags_forms():
    rs = nft_rs([m({"&": [FLAGS, ["fin", "syn", "rst", "ack"]]}, "syn")],
                [m({"&": [FLAGS, ["fin", "syn", "rst", "ack"]]}, "syn", "!=")],
                [m(FLAGS, "syn", "in")],
                [m(FLAGS, ["fin", "syn", "rst", "psh", "ack", "urg"], "!")],
                [m(FLAGS, "syn", "!=")],
                [m(FLAGS, {"set": [{"|": ["syn", "ack"]}, "syn"]})])
    assert [x.tcp_flags for x in matches(rs)] == [
        TcpFlags(0x17, frozenset({2})), TcpFlags(0x17, frozenset({2}), True),
        TcpFlags(0x02, frozenset({0}), True), TcpFlags(0x3F, frozenset({0})),
        TcpFlags(0xFF, frozenset({2}), True), TcpFlags(0xFF, frozenset({0x12, 0x02}))]
    assert {x.proto for x in matches(rs)} == {"tcp"}


def test_nft_icmp_sets_codes_ttl_length_pkttype():
    icmp6 = {"payload": {"protocol": "icmpv6", "field": "type"}}
    code = {"payload": {"protocol": "icmp", "field": "code"}}
    ttl = {"payload": {"protocol": "ip", "field": "ttl"}}
    rs = nft_rs([m(icmp6, {"set": ["nd-neighbor-solicit", "echo-request"]})],
                [m(code, "port-unreachable")],
                [m(ttl, 10, "<")],
                [m({"payload": {"protocol": "ip6", "field": "hoplimit"}}, {"range": [1, 5]},
                   "!=")],
                [m({"meta": {"key": "length"}}, 999, ">")],
                [m({"meta": {"key": "pkttype"}}, {"set": ["broadcast", "multicast"]})])
    ms = matches(rs)
    assert (ms[0].proto, ms[0].icmp_types) == ("icmpv6", frozenset({135, 128}))
    assert (ms[1].proto, ms[1].icmp_type, ms[1].icmp_code) == ("icmp", None, 3)
    # ip ttl / ip6 hoplimit in an inet table carry their IP version.
    assert (ms[2].ttl, ms[2].ip_version) == (Range(0, 9), 4)
    assert (ms[3].ttl, ms[3].ip_version) == (Range(1, 5, True), 6)
    assert ms[4].length == Range(1000, 65535)
    assert ms[5].pkttype == frozenset({"broadcast", "multicast"})


def test_nft_anonymous_sets_of_protocols_interfaces_and_icmp_pairs_split():
    th = {"payload": {"protocol": "th", "field": "dport"}}
    pairs = {"set": [{"concat": ["packet-too-big", "no-route"]},
                     {"concat": ["parameter-problem", "admin-prohibited"]}]}
    rs = nft_rs([m({"meta": {"key": "l4proto"}}, {"set": ["tcp", "udp"]}), m(th, 53)],
                [m({"meta": {"key": "iifname"}}, {"set": ["eth0", "eth1"]})],
                [m({"concat": [{"payload": {"protocol": "icmpv6", "field": "type"}},
                               {"payload": {"protocol": "icmpv6", "field": "code"}}]},
                   pairs)])
    got = [(r.id, r.match.proto, r.match.iif and r.match.iif.name,
            r.match.icmp_type, r.match.icmp_code) for _, _, r in rs.rules()]
    assert got == [("t-1", "tcp", None, None, None), ("t-1:2", "udp", None, None, None),
                   ("t-2", None, "eth0", None, None), ("t-2:2", None, "eth1", None, None),
                   ("t-3", "icmpv6", None, 2, 0), ("t-3:2", "icmpv6", None, 4, 1)]
    assert all(r.match.dport.single == 53 for r in list(rs.table("inet", "t")
                                                          .chain("c").rules)[:2])
    with pytest.raises(RuleSetError, match=r"rule 1 \(handle 10\): unsupported: meta "
                                           r"l4proto !="):
        nft_rs([m({"meta": {"key": "l4proto"}}, {"set": ["tcp", "udp"]}, "!=")])


def test_nft_fib_is_imported_on_ipv4_only():
    fib = {"fib": {"result": "type", "flags": ["daddr"]}}
    rs = nft_rs([m(fib, {"set": ["broadcast", "multicast"]})], family="ip")
    assert matches(rs)[0].addrtype == AddrType(dst=frozenset({"broadcast", "multicast"}))
    rs = nft_rs([m({"meta": {"key": "nfproto"}}, "ipv4"), m(fib, "local", "!=")])
    assert matches(rs)[0].addrtype == AddrType(dst=frozenset({"local"}), dst_negate=True)
    with pytest.raises(RuleSetError, match="unsupported: fib address type of IPv6 packets"):
        nft_rs([m(fib, "local")])


# --- renderers --------------------------------------------------------------------

def test_iptables_renders_as_iptables_save_prints():
    rs = load_file(str(EXAMPLES / "tcpflags.rules"), {"eth0": "client"})
    lines = [ln for ln in ipt_render.render(rs, IFS, 4).splitlines() if ln.startswith("-A")]
    assert lines[0] == ('-A FORWARD -p tcp -m tcp --tcp-flags FIN,SYN FIN,SYN '
                        '-m comment --comment "fwb:filter-1" -j DROP')
    assert lines[3] == ('-A FORWARD -p tcp -m tcp ! --tcp-flags FIN,SYN,RST,ACK SYN '
                        '-m conntrack --ctstate NEW -m comment --comment "fwb:filter-4" '
                        '-j DROP')
    rs = forward(Rule("a", Match(proto="icmp", icmp_type=3, icmp_code=3, ttl=Range(0, 9),
                                 length=Range(40, 40, True))),
                 Rule("b", Match(addrtype=AddrType(src=frozenset({"local"}),
                                                   dst=frozenset({"unicast", "broadcast"}),
                                                   dst_negate=True),
                                 pkttype=frozenset({"broadcast"}), ttl=Range(0, 99, True))))
    lines = [ln for ln in ipt_render.render(rs, IFS, 4).splitlines() if ln.startswith("-A")]
    assert lines == [
        '-A FORWARD -p icmp -m icmp --icmp-type 3/3 -m ttl --ttl-lt 10 -m length ! --length 40 '
        '-m comment --comment "fwb:a" -j ACCEPT',
        '-A FORWARD -m addrtype --src-type LOCAL ! --dst-type UNICAST,BROADCAST -m pkttype '
        '--pkt-type broadcast -m ttl --ttl-gt 99 -m comment --comment "fwb:b" -j ACCEPT']


@pytest.mark.parametrize("match, feature", [
    (Match(proto="tcp", tcp_flags=TcpFlags(0xFF, frozenset({2}))), "tcp flags ECE or CWR"),
    (Match(proto="tcp", tcp_flags=TcpFlags(0x12, frozenset({2, 0x10}))), "tcp flags set"),
    (Match(proto="icmp", icmp_types=frozenset({0, 8})), "icmp type set"),
    (Match(proto="icmp", icmp_code=3), "icmp code without a type"),
    (Match(ttl=Range(5, 9)), "ttl range 5-9"),
])
def test_iptables_refuses_what_it_cannot_say_in_one_line(match, feature):
    with pytest.raises(Unsupported) as e:
        ipt_render.render(forward(Rule("x", match)), IFS, 4)
    assert str(e.value) == f"unsupported: {feature} (rule x)"


def test_nft_renders_as_nft_lists():
    rs = forward(Rule("a", Match(proto="tcp", tcp_flags=TcpFlags(0x17, frozenset({2}), True))),
                 Rule("b", Match(proto="tcp", tcp_flags=TcpFlags(0x3F, frozenset({0})))),
                 Rule("c", Match(proto="icmp", icmp_types=frozenset({8, 3}), icmp_code=3)),
                 Rule("d", Match(ttl=Range(0, 9), length=Range(100, 200, True),
                                 pkttype=frozenset({"host"}), pkttype_negate=True)),
                 Rule("e", Match(addrtype=AddrType(dst=frozenset({"local", "broadcast"})))))
    body = [ln.strip() for ln in nft_render.render(rs, IFS).splitlines() if "fwb:" in ln]
    assert body == [
        'tcp flags != syn / fin,syn,rst,ack counter accept comment "fwb:a"',
        'tcp flags ! fin,syn,rst,psh,ack,urg counter accept comment "fwb:b"',
        'icmp code port-unreachable icmp type { destination-unreachable, echo-request } '
        'counter accept comment "fwb:c"',
        'ip ttl 0-9 meta length != 100-200 meta pkttype != host counter accept '
        'comment "fwb:d"',
        'fib daddr type { local, broadcast } counter accept comment "fwb:e"']
    six = forward(Rule("x", Match(addrtype=AddrType(dst=frozenset({"local"})))), family="ip6")
    with pytest.raises(Unsupported, match=r"^unsupported: addrtype of IPv6 addresses"):
        nft_render.render(six, IFS)


def test_ebpf_refuses_the_everyday_matches():
    rs = forward(Rule("x", Match(proto="tcp", tcp_flags=TcpFlags(0x17, frozenset({2})))))
    with pytest.raises(Unsupported, match=r"^unsupported: tcp flags \(rule x\)$"):
        bpf.refuse_unsupported(rs)


# --- the reference evaluator ------------------------------------------------------

def test_forward_sees_the_ttl_forwarding_took_one_off():
    pre = Chain("pre", (Rule("p", Match(ttl=Range(64, 64)), Action("counter")),),
                hook="prerouting", policy="accept")
    fwd = Chain("fwd", (Rule("f", Match(ttl=Range(63, 63))),), hook="forward", policy="drop")
    ev = Evaluator(validate(RuleSet("t", (Table("ip", "t", (pre, fwd)),))))
    v = ev.evaluate(pkt())
    assert (v.forward, v.counted) == (True, ("p", "f"))
    assert ev.evaluate(pkt(ttl=65)).forward is False
    v = ev.evaluate(pkt(ttl=1))
    assert (v.forward, v.reason) == (False, "TTL 1 expired in forwarding")


def test_evaluator_tcp_flags_codes_length_pkttype_addrtype():
    rs = forward(Rule("syn", Match(proto="tcp", tcp_flags=TcpFlags(0x17, frozenset({2})))),
                 Rule("code", Match(proto="icmp", icmp_type=3, icmp_code=3)),
                 Rule("long", Match(length=Range(1000, 65535))),
                 Rule("bcast", Match(pkttype=frozenset({"broadcast"}))),
                 Rule("local", Match(proto="udp", addrtype=AddrType(dst=frozenset({"local"})))),
                 Rule("uni", Match(proto="udp", addrtype=AddrType(dst=frozenset({"unicast"})))))
    ev = Evaluator(rs)
    assert ev.evaluate(pkt(tcp_flags=0x02 | 0x08)).decided_by == "syn"   # PSH is outside
    assert ev.evaluate(pkt(tcp_flags=0x12)).decided_by is None
    icmp = pkt(proto="icmp", sport=None, dport=None, icmp_type=3, icmp_code=3)
    assert ev.evaluate(icmp).decided_by == "code"
    assert ev.evaluate(replace(icmp, icmp_code=1)).decided_by is None
    udp = pkt(proto="udp")
    assert packet_length(udp) == 20 + 8 + 12
    assert ev.evaluate(replace(udp, pad=1000 - 40)).decided_by == "long"
    assert ev.evaluate(replace(udp, pad=1000 - 41)).decided_by == "uni"
    # The firewall's own address is local (delivered, not forwarded: input has no
    # chain here); a link's broadcast address is broadcast, neither matches.
    assert ev.addr_type4(int.from_bytes(bytes([198, 19, 0, 1]), "big")) == "local"
    assert ev.addr_type4(int.from_bytes(bytes([198, 19, 0, 255]), "big")) == "broadcast"
    assert ev.addr_type4(int.from_bytes(bytes([239, 1, 1, 1]), "big")) == "multicast"


def test_nat_in_a_user_chain_translates_only_under_a_nat_chain():
    nat = Chain("post", (Rule("j", action=Action("jump", chain="masq")),), hook="postrouting",
                priority=100, type="nat")
    masq = Chain("masq", (Rule("m", action=Action("masquerade")),))
    ev = Evaluator(validate(RuleSet("t", (Table("inet", "t", (nat, masq)),))))
    assert ev.evaluate(pkt()).translated.saddr == "198.19.0.1"
    filt = Chain("fwd", (Rule("j", action=Action("jump", chain="masq")),), hook="forward")
    ev = Evaluator(validate(RuleSet("t", (Table("inet", "t", (filt, masq)),))))
    v = ev.evaluate(pkt())
    assert (v.forward, v.decided_by, v.translated.saddr) == (True, "m", "198.18.0.2")


# --- conntrack of packets sent alone, the corpus, the frames -------------------------

@pytest.mark.parametrize("flags, state", [
    (0x02, "new"), (0x02 | 0x08 | 0x40 | 0x80, "new"), (0x22, "new"), (0x10, "new"),
    (0x18, "new"), (0x12, "invalid"), (0x11, "invalid"), (0x04, "invalid"),
    (0x14, "invalid"), (0x00, "invalid"), (0x03, "invalid")])
def test_tcp_packets_alone_get_the_state_conntrack_gives_them(flags, state):
    assert as_tracked(pkt(tcp_flags=flags)).ct_state == state


def test_icmpv6_neighbour_discovery_is_untracked():
    nd = Packet(6, "client", "2001:2:0:1::2", "2001:2:0:2::2", "icmpv6", icmp_type=135)
    assert as_tracked(nd).ct_state == "untracked"
    assert as_tracked(replace(nd, icmp_type=128)).ct_state == "new"
    assert as_tracked(replace(nd, icmp_type=129)).ct_state == "invalid"


def test_corpus_sends_both_sides_of_each_everyday_condition():
    rs = load_file(str(EXAMPLES / "tcpflags.rules"), {"eth0": "client", "eth1": "server"})
    flags = {p.tcp_flags for p in corpus.build(rs, 300) if p.proto == "tcp"}
    assert {0x02, 0x10, 0x03, 0x06, 0x00} <= flags
    rs = load_file(str(EXAMPLES / "ttl.rules"), {"eth0": "client", "eth1": "server"})
    ttls = {p.ttl for p in corpus.build(rs, 300)}
    assert {2, 3, 63, 64, 65, 100, 101, 102, 9, 10} <= ttls
    rs = load_file(str(EXAMPLES / "length.rules"), {"eth0": "client", "eth1": "server"})
    lengths = {packet_length(p) for p in corpus.build(rs, 300)}
    assert {40, 41, 100, 101, 200, 201, 999, 1000} <= lengths


def test_frames_carry_flags_code_ttl_and_padding():
    nonce = b"\x01\x02\x03\x04"
    frame = build_frame(pkt(tcp_flags=0x11, ttl=7, pad=5), 3, nonce, "02:00:00:00:00:01",
                        "02:00:00:00:00:02")
    ip = frame[14:]
    # TCP with the testbed's 20 bytes of options (a Linux SYN's).
    assert (ip[8], ip[20 + 13], len(ip)) == (7, 0x11, 20 + 40 + 12 + 5)
    assert parse_frame(frame, nonce).checksum_ok
    icmp = build_frame(pkt(proto="icmp", sport=None, dport=None, icmp_type=3, icmp_code=13),
                       4, nonce, "02:00:00:00:00:01", "02:00:00:00:00:02")
    assert icmp[14 + 20:14 + 22] == bytes([3, 13])
    assert parse_frame(icmp, nonce).icmp_type == 3


def test_corpus_sends_to_the_firewall_where_an_address_type_asks_for_a_local_one():
    rs = load_file(str(EXAMPLES / "docker.rules"), {"eth0": "client", "docker0": "server"})
    ev = Evaluator(rs)
    published = [p for p in corpus.build(rs, 300) if p.daddr == "198.19.0.1"
                 and p.dport == 8080 and p.proto == "tcp"]
    assert published, "no packet to the firewall's own address on the published port"
    v = ev.evaluate(published[0])
    assert "nat-6" in v.counted and v.translated.dport == 80


def test_nft_rules_only_output_reaches_are_set_aside_and_others_refused():
    skuid = m({"meta": {"key": "cpu"}}, 0)
    items = [{"table": {"family": "inet", "name": "t", "handle": 1}},
             {"chain": {"family": "inet", "table": "t", "name": "out", "handle": 2,
                        "type": "filter", "hook": "output", "prio": 0, "policy": "accept"}},
             {"chain": {"family": "inet", "table": "t", "name": "mine", "handle": 3}},
             {"rule": {"family": "inet", "table": "t", "chain": "out", "handle": 10,
                       "expr": [skuid, {"accept": None}]}},
             {"rule": {"family": "inet", "table": "t", "chain": "out", "handle": 11,
                       "expr": [{"jump": {"target": "mine"}}]}},
             {"rule": {"family": "inet", "table": "t", "chain": "mine", "handle": 12,
                       "expr": [skuid, {"drop": None}]}}]
    rs = nft_json.parse({"nftables": items}, "o.json")
    assert [r.id for _, _, r in rs.rules()] == ["t-2"]
    assert rs.notes == (
        "o.json: table inet t chain out rule 1 (handle 10): unsupported expression meta "
        "cpu: set aside, only the firewall's own packets reach chain out",
        "o.json: table inet t chain mine rule 1 (handle 12): unsupported expression meta "
        "cpu: set aside, only the firewall's own packets reach chain mine")
    items[1]["chain"]["hook"] = "input"
    with pytest.raises(RuleSetError, match=r"^o.json: table inet t chain out rule 1 \(handle "
                                           r"10\): unsupported expression meta cpu$"):
        nft_json.parse({"nftables": items}, "o.json")


def test_nft_extension_header_rules_are_set_aside_and_missing_is_refused():
    rt = {"exthdr": {"name": "rt", "field": "type"}}
    frag = {"exthdr": {"name": "frag"}}
    rs = nft_rs([m(rt, 0)], [m(frag, True)], [m({"meta": {"key": "l4proto"}}, "tcp")],
                family="ip6")
    assert [r.id for _, _, r in rs.rules()] == ["t-3"]
    assert rs.notes[0] == ("t.json: table ip6 t chain c rule 1 (handle 10): rule set aside: "
                           "exthdr rt matches only packets with that IPv6 extension header, "
                           "which the testbed never sends")
    with pytest.raises(RuleSetError, match=r"rule 1 \(handle 10\): unsupported expression "
                                           r"exthdr$"):
        nft_rs([m(frag, False)], family="ip6")


def test_nft_set_split_refused_where_a_limit_would_be_split_too():
    with pytest.raises(RuleSetError, match=r"unsupported: a limit in a rule with an "
                                           r"anonymous set of l4proto \(one budget for "
                                           r"every element\)$"):
        nft_rs([m({"meta": {"key": "l4proto"}}, {"set": ["tcp", "udp"]}),
                {"limit": {"rate": 10, "per": "second"}}])
