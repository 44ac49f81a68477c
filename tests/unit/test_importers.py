"""Importers: iptables-save and nft JSON into the model, the remapping onto the
testbed, and load_file's format detection and one-line errors.

The fixtures under tests/data/rulesets are real kernel output: gateway.rules and
gateway.ipset came from iptables-legacy-save -c / ipset save in a throwaway
namespace, gateway.json from `nft -j list ruleset` after `nft -f gateway.nft`.
"""
import ipaddress
import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

from fwbench.ruleset.importers import iptables_save, nft_json
from fwbench.ruleset.importers.load import detect, load_file, parse_iface_map
from fwbench.ruleset.importers.remap import remap, reverse
from fwbench.ruleset.model import (CLIENT, SERVER, Chain, Iface, Limit, Match, Packet,
                                   Ports, Prefix, Probe, Rule, RuleSet, RuleSetError, Set,
                                   SetRef, Table, validate)

DATA = Path(__file__).parent.parent / "data" / "rulesets"
GW_RULES = DATA / "gateway.rules"
GW_IPSET = DATA / "gateway.ipset"
GW_JSON = DATA / "gateway.json"
GW_NFT = DATA / "gateway.nft"
IFMAP = {"eth0": "client", "eth1": "server"}
BENCH4 = ipaddress.ip_network("198.18.0.0/15")
BENCH6 = ipaddress.ip_network("2001:2::/48")
LINKS = [ipaddress.ip_network(n) for n in
         ("198.18.0.0/24", "198.19.0.0/24", "2001:2:0:1::/64", "2001:2:0:2::/64")]


def gateway_ipt() -> RuleSet:
    return iptables_save.parse(GW_RULES.read_text(), "gateway.rules",
                               ipsets=GW_IPSET.read_text())


def gateway_nft() -> RuleSet:
    return nft_json.parse(GW_JSON.read_text(), "gateway.json")


def by_id(rs: RuleSet) -> dict[str, tuple[Table, Chain, Rule]]:
    return {r.id: (t, c, r) for t, c, r in rs.rules()}


# --- iptables-save -------------------------------------------------------------------

def test_iptables_tables_and_chains():
    rs = validate(gateway_ipt())
    assert [(t.family, t.name) for t in rs.tables] == \
        [("ip", "filter"), ("ip", "nat"), ("ip", "mangle"), ("ip", "raw")]
    chains = {(t.name, c.name): c for t in rs.tables for c in t.chains}
    fwd = chains[("filter", "FORWARD")]
    assert (fwd.hook, fwd.type, fwd.priority, fwd.policy) == ("forward", "filter", 0, "drop")
    assert chains[("filter", "INPUT")].policy == "drop"
    pre, post = chains[("nat", "PREROUTING")], chains[("nat", "POSTROUTING")]
    assert (pre.hook, pre.type, pre.priority) == ("prerouting", "nat", -100)
    assert (post.hook, post.type, post.priority) == ("postrouting", "nat", 100)
    assert chains[("mangle", "PREROUTING")].priority == -150
    assert chains[("raw", "PREROUTING")].priority == -300
    for user in ("from_lan", "from_wan", "icmp_ok"):
        assert not chains[("filter", user)].base
    # Empty built-in chains with policy ACCEPT change nothing and are left out, said so.
    assert ("filter", "OUTPUT") not in chains
    assert any("OUTPUT" in n and "left out" in n for n in rs.notes)
    assert rs.size == rs.rule_count == 35


def test_iptables_rule_ids():
    rs = gateway_ipt()
    ids = [r.id for t, _, r in rs.rules() if t.name == "filter"]
    # the fwb: comment names the third rule; the numbering counts it all the same
    assert ids[:5] == ["filter-1", "filter-2", "ssh-in", "filter-4", "filter-5"]
    assert ids[-1] == "filter-26"
    _, chain, nat3 = by_id(rs)["nat-3"]
    assert chain.name == "PREROUTING"
    assert (nat3.action.kind, nat3.action.addr, nat3.action.port) == ("dnat", "192.168.1.20", 53)
    assert [r.id for t, _, r in rs.rules() if t.name == "mangle"] == \
        ["mangle-1", "mangle-2", "mangle-3"]


def test_iptables_matches_and_actions():
    rules = {k: v[2] for k, v in by_id(gateway_ipt()).items()}
    m = rules["ssh-in"].match
    assert (m.iif, m.proto, m.dport) == (Iface("eth0"), "tcp", Ports.of(22))
    dns = rules["filter-5"]
    assert dns.match.dport == Ports.of(53, (67, 68))
    assert dns.match.ct_state == {"new"}
    assert dns.comment == "dns and dhcp from the LAN"
    assert rules["filter-2"].match.ct_state == {"established", "related"}
    assert rules["filter-8"].match.iif == Iface("eth0") and \
        rules["filter-8"].match.oif == Iface("eth1")
    assert (rules["filter-8"].action.kind, rules["filter-8"].action.chain) == \
        ("jump", "from_lan")
    assert rules["filter-10"].action.log_prefix == "fwd drop: "
    assert rules["filter-11"].action.reject_with == "icmp-host-prohibited"
    assert rules["filter-12"].match.sets == (SetRef("blocklist", ("daddr",)),)
    assert rules["filter-13"].match.dport == Ports.of(80, 443, (8000, 8080))
    assert rules["filter-15"].match.sport == Ports.of((1024, 65535))
    assert rules["filter-16"].match.src == Prefix("192.168.1.0/24", negate=True)
    assert rules["filter-18"].match.limit == Limit(10, "second", 20)
    svc = rules["filter-19"].match
    assert svc.sets == (SetRef("services", ("daddr", "proto", "dport")),)
    assert svc.ct_state == {"new"}
    assert rules["filter-21"].action.reject_with == "tcp-reset"
    ret = rules["filter-22"]
    assert ret.match.iif == Iface("eth+") and ret.match.mark == (1, 0xFFFFFFFF)
    assert ret.match.mark_negate and ret.action.kind == "return"
    echo = rules["filter-23"].match
    assert (echo.proto, echo.icmp_type, echo.limit) == ("icmp", 8, Limit(5, "second", 5))
    assert rules["filter-25"].match == Match(proto="icmp")
    assert (rules["filter-26"].action.kind, rules["filter-26"].action.chain) == \
        ("goto", "from_wan")
    assert rules["nat-1"].match.dst == Prefix("203.0.113.10/32")
    assert rules["nat-2"].action.port is None
    assert (rules["nat-4"].action.kind, rules["nat-4"].action.addr) == ("snat", "203.0.113.10")
    assert rules["nat-5"].action.kind == "masquerade"
    assert (rules["mangle-1"].action.mark, rules["mangle-1"].action.mark_mask) == \
        (2, 0xFFFFFFFF)
    assert (rules["mangle-2"].action.mark, rules["mangle-2"].action.mark_mask) == (1, 0xFF)
    assert rules["mangle-3"].match.mark == (2, 0xFF)
    assert rules["mangle-3"].comment == "guests"
    assert rules["raw-1"].action.kind == "notrack"
    assert all(r.counter for r in rules.values())


def test_iptables_sets_from_ipset_save():
    filt = gateway_ipt().table("ip", "filter")
    block = filt.set("blocklist")
    assert (block.keys, block.version, block.interval) == (("addr",), 4, True)
    assert sorted(block.elements) == [("198.51.100.7",), ("203.0.113.0/24",)]
    svc = filt.set("services")
    assert svc.keys == ("addr", "proto", "port") and not svc.interval
    assert set(svc.elements) == {("192.168.1.10", "tcp", 22), ("192.168.1.10", "tcp", 443),
                                 ("192.168.1.20", "udp", 53)}
    # only the tables that use a set get it
    assert gateway_ipt().table("ip", "nat").sets == ()


HEAD = ("# Generated by iptables-save v1.8.9\n*filter\n:INPUT ACCEPT [0:0]\n"
        ":FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:a - [0:0]\n:b - [0:0]\n")


def ipt(body: str, **kw) -> RuleSet:
    return iptables_save.parse(HEAD + body + "COMMIT\n", "gw.rules", **kw)


@pytest.mark.parametrize("body, message", [
    ("-A FORWARD -m recent --name x --rcheck -j DROP\n",
     "gw.rules:8: unsupported match -m recent"),
    ("-A FORWARD -p tcp -m tcpmss --mss 1000:1500 -j DROP\n",
     "gw.rules:8: unsupported match -m tcpmss"),
    ("-A FORWARD -j TEE --gateway 198.18.0.9\n", "gw.rules:8: unsupported target -j TEE"),
    ("-A FORWARD -j nowhere\n", "gw.rules:8: -j nowhere: jump to a missing chain"),
    ("-A FORWARD -j ACCEPT\n-A a -j b\n-A b -j a\n", "gw.rules:10: jump loop a -> b -> a"),
    ("-A a -g a\n", "gw.rules:8: jump loop a -> a"),
    ('-A FORWARD -m comment --comment "open -j ACCEPT\n',
     "gw.rules:8: syntax error: No closing quotation"),
    ("-A FORWARD -s\n", "gw.rules:8: -s needs a value"),
    ("-A nosuch -j ACCEPT\n", "gw.rules:8: -A to undeclared chain nosuch"),
    ("-I FORWARD -j ACCEPT\n", "gw.rules:8: syntax error: expected -A CHAIN, got "
                               "'-I FORWARD -j ACCEPT'"),
    ("-A FORWARD -s 10.0.0.300 -j DROP\n", "gw.rules:8: not an address or prefix: '10.0.0.300'"),
    ("-A FORWARD -s 2001:db8::1 -j DROP\n",
     "gw.rules:8: IPv6 address 2001:db8::1 in an IPv4 rule set"),
    ("-A FORWARD -m addrtype --dst-type LOCAL --limit-iface-in -j DROP\n",
     "gw.rules:8: unsupported: -m addrtype --limit-iface-in/out (address types on one "
     "interface)"),
    ("-A FORWARD -m conntrack --ctstate DNAT,NEW -j ACCEPT\n",
     "gw.rules:8: unsupported: --ctstate DNAT,NEW (DNAT or SNAT with other states, not "
     "negated)"),
    ("-A FORWARD -m multiport --dports 1,2 -j DROP\n",
     "gw.rules:8: a port match needs -p tcp or -p udp"),
    ("-A FORWARD -m statistic --mode nth --every 1 --packet 0 -j DROP\n",
     "gw.rules:8: unsupported: --every 1 --packet 0 (a rule that always matches, or a "
     "packet past every)"),
    ("-A FORWARD -m statistic --mode random --probability 0.0000000001 -j DROP\n",
     "gw.rules:8: unsupported: --probability 0.0000000001, a rule that always or never "
     "matches"),
    ("-A FORWARD -j DNAT --to-destination 10.0.0.1\n",
     "gw.rules:8: -j DNAT outside the nat table"),
    ('-A FORWARD -m comment --comment "fwb:x" -j ACCEPT\n'
     '-A FORWARD -m comment --comment "fwb:x" -j DROP\n',
     "gw.rules:9: rule id 'x' already used on line 8"),
    ("-A FORWARD -m set --match-set nosuch src -j DROP\n",
     "gw.rules:8: -m set --match-set nosuch: no ipset definitions given"),
    ("hello\n", "gw.rules:8: syntax error: 'hello'"),
])
def test_iptables_errors_name_file_and_line(body, message):
    with pytest.raises(RuleSetError) as e:
        ipt(body)
    assert str(e.value) == message
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("line", [
    '-A X -m comment --comment "fwb:r1" -j ACCEPT', '-A X --comment "a b"',
    '-A X --comment ""', '-A X --comment "a"b', '-A X --comment "a \\"q\\" b" -j A',
    "-A X --comment 'x y'", '-A X --comment "a""b"', '-A X --comment "x"',
    '-A X -m comment --comment "a" -m comment --comment "b c" -j X',
])
def test_iptables_split_agrees_with_shlex(line):
    assert iptables_save._split(line) == shlex.split(line)


def test_iptables_unknown_set_with_ipsets_given():
    with pytest.raises(RuleSetError, match=r"^gw.rules:8: -m set --match-set nosuch: no such "
                                           r"set in gateway.ipset$"):
        ipt("-A FORWARD -m set --match-set nosuch src -j DROP\n",
            ipsets=GW_IPSET.read_text(), ipsets_source="gateway.ipset")
    with pytest.raises(RuleSetError, match=r"^gw.rules:8: -m set --match-set services dst: "):
        ipt("-A FORWARD -m set --match-set services dst -j DROP\n",
            ipsets=GW_IPSET.read_text())


@pytest.mark.parametrize("text, message", [
    ("", "x.rules: not an iptables-save rule set (no *table)"),
    ("# only a comment\n", "x.rules: not an iptables-save rule set (no *table)"),
    ('{"nftables": []}\n', "x.rules:1: not an iptables-save rule set"),
    ("*filter\n:INPUT ACCEPT [0:0]\n", "x.rules:2: table filter has no COMMIT"),
    ("*bogus\nCOMMIT\n", "x.rules:1: unknown table 'bogus'"),
])
def test_iptables_not_a_rule_set(text, message):
    with pytest.raises(RuleSetError) as e:
        iptables_save.parse(text, "x.rules")
    assert str(e.value) == message


def test_iptables_forms_iptables_save_does_not_print():
    rs = ipt('-A FORWARD -p tcp --dport 22 -j ACCEPT\n'          # -m tcp implied
             '-A FORWARD -s ! 10.0.0.0/8 -j DROP\n'               # the old negation
             '-A FORWARD -c 10 20 -d 10.1.2.3 -j DROP\n'           # counters in the rule
             '-A FORWARD -m conntrack ! --ctstate INVALID -j ACCEPT\n'
             '-A FORWARD -m comment --comment "a \\"quoted\\" word" -m comment '
             '--comment "fwb:q" -j ACCEPT\n'
             '-A FORWARD -p icmp -m icmp --icmp-type 8/0 -j ACCEPT\n'
             '-A FORWARD -m limit --limit 3/min -j LOG --log-prefix "x: " --log-level 4\n'
             '-A FORWARD -s 10.9.8.7\n'
             '-A FORWARD -j REJECT\n')
    r = [r for _, _, r in rs.rules()]
    assert r[0].match.dport == Ports.of(22) and r[0].match.proto == "tcp"
    assert r[1].match.src == Prefix("10.0.0.0/8", negate=True)
    assert r[2].match.dst == Prefix("10.1.2.3/32")
    assert r[3].match.ct_state == {"new", "established", "related", "untracked"}
    assert (r[4].id, r[4].comment) == ("q", 'a "quoted" word')
    assert (r[5].match.icmp_type, r[5].match.icmp_code) == (8, 0)
    assert r[6].match.limit == Limit(3, "minute", 5) and r[6].action.log_prefix == "x: "
    assert any("--log-level ignored" in n for n in rs.notes)
    assert r[7].action.kind == "counter" and r[7].counter
    assert r[8].action.reject_with == "icmp-port-unreachable"
    validate(rs)


def test_iptables_deep_user_chains_and_a_long_loop():
    n = 3000   # deeper than Python's recursion limit
    lines = ["*filter", ":FORWARD DROP [0:0]"] + [f":c{i} - [0:0]" for i in range(n)]
    lines += ["-A FORWARD -j c0"] + [f"-A c{i} -j c{i + 1}" for i in range(n - 1)]
    assert iptables_save.parse("\n".join(lines + ["COMMIT"]), "deep").rule_count == n
    lines.append(f"-A c{n - 1} -j c10")
    with pytest.raises(RuleSetError) as e:
        iptables_save.parse("\n".join(lines + ["COMMIT"]), "deep")
    assert str(e.value) == (f"deep:{len(lines)}: jump loop c10 -> c11 -> c12 -> "
                            f"... ({n - 10 - 5} more) -> c{n - 2} -> c{n - 1} -> c10")


def test_ip6tables():
    text = ("*filter\n:FORWARD DROP [0:0]\n"
            "-A FORWARD -p ipv6-icmp -m icmp6 --icmpv6-type 128 -j ACCEPT\n"
            "-A FORWARD -p icmpv6 -m icmp6 --icmpv6-type neighbour-solicitation -j ACCEPT\n"
            "-A FORWARD -s 2001:db8::/32 -d 2001:db8:1::1/128 -p tcp -m tcp --dport 22 "
            "-j REJECT --reject-with icmp6-adm-prohibited\n"
            "-A FORWARD -j REJECT\n"
            "COMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n"
            "-A PREROUTING -p tcp -m tcp --dport 80 -j DNAT --to-destination [2001:db8::5]:8080\n"
            "-A PREROUTING -p tcp -m tcp --dport 81 -j DNAT --to-destination 2001:db8::5\n"
            "COMMIT\n")
    rs = validate(iptables_save.parse(text, "v6.rules", version=6))
    r = {k: v[2] for k, v in by_id(rs).items()}
    assert [t.family for t in rs.tables] == ["ip6", "ip6"]
    assert (r["filter-1"].match.proto, r["filter-1"].match.icmp_type) == ("icmpv6", 128)
    assert r["filter-2"].match.icmp_type == 135
    assert r["filter-3"].match.src == Prefix("2001:db8::/32")
    assert r["filter-4"].action.reject_with == "icmp6-port-unreachable"
    assert (r["nat-1"].action.addr, r["nat-1"].action.port) == ("2001:db8::5", 8080)
    assert (r["nat-2"].action.addr, r["nat-2"].action.port) == ("2001:db8::5", None)
    with pytest.raises(RuleSetError, match=r"^v6.rules:3: -p icmp in an IPv6 rule set$"):
        iptables_save.parse("*filter\n:FORWARD DROP [0:0]\n-A FORWARD -p icmp -j DROP\n",
                            "v6.rules", version=6)


# --- nft JSON -----------------------------------------------------------------------

def test_nft_tables_chains_sets():
    rs = gateway_nft()
    assert [(t.family, t.name) for t in rs.tables] == \
        [("inet", "filter"), ("ip", "nat"), ("ip", "raw")]
    filt = rs.table("inet", "filter")
    fwd = filt.chain("forward")
    assert (fwd.hook, fwd.type, fwd.priority, fwd.policy) == ("forward", "filter", 0, "drop")
    assert filt.chain("mangle_pre").priority == -150
    assert not filt.chain("from_lan").base
    pre = rs.table("ip", "nat").chain("prerouting")
    assert (pre.type, pre.priority) == ("nat", -100)
    assert rs.table("ip", "raw").chain("prerouting").priority == -300
    block = filt.set("blocklist")
    assert block.interval and block.version == 4
    # 198.51.100.100-198.51.100.120 as the prefixes that cover it exactly
    assert block.elements == (("198.51.100.7",), ("198.51.100.100/30",),
                              ("198.51.100.104/29",), ("198.51.100.112/29",),
                              ("198.51.100.120",), ("203.0.113.0/24",))
    svc = filt.set("services")
    assert svc.keys == ("addr", "proto", "port")
    assert set(svc.elements) == {("192.168.1.10", "tcp", 22), ("192.168.1.10", "tcp", 443),
                                 ("192.168.1.20", "udp", 53)}


def test_nft_rules():
    rs = gateway_nft()
    r = {k: v[2] for k, v in by_id(rs).items()}
    assert [x.id for _, c, x in rs.rules() if c.name == "input"] == \
        ["filter-1", "filter-2", "ssh-in", "filter-4", "filter-5"]
    assert r["ssh-in"].counter and not r["filter-1"].counter
    assert r["filter-4"].comment == "dns and dhcp from the LAN"
    assert r["filter-4"].match.dport == Ports.of(53, (67, 68))
    assert r["filter-5"].match == Match(proto="icmp", icmp_type=8, limit=Limit(5, "second", 5))
    assert r["filter-8"].action.chain == "from_lan"
    # `log ... reject` is two actions: two rules with the same match, the last keeps the id
    assert (r["filter-10.1"].action.kind, r["filter-10.1"].action.log_prefix) == \
        ("log", "fwd drop: ")
    assert r["filter-10"].action.reject_with == "icmp-host-prohibited"
    # nft's implicit `meta nfproto ipv4` for the ICMP reject pins the rule to IPv4
    assert r["filter-10"].match == Match(ip_version=4)
    assert r["filter-11"].match.sets == (SetRef("blocklist", ("daddr",)),)
    assert r["filter-12"].match.dport == Ports.of(80, 443, (8000, 8080))
    assert r["filter-14"].match.src == Prefix("192.168.1.0/24", negate=True)
    assert r["filter-15"].match.limit == Limit(10, "second", 20)
    assert r["filter-16"].match.sets == (SetRef("services", ("daddr", "proto", "dport")),)
    assert r["filter-18"].match.mark == (1, 0xFFFFFFFF) and r["filter-18"].match.mark_negate
    assert (r["filter-20"].action.mark, r["filter-20"].action.mark_mask) == (1, 0xFF)
    assert (r["nat-3"].action.kind, r["nat-3"].action.addr, r["nat-3"].action.port) == \
        ("dnat", "192.168.1.20", 53)
    assert r["nat-4"].match.proto == "udp" and r["nat-4"].action.addr == "203.0.113.10"
    assert r["nat-5"].action.kind == "masquerade"
    assert r["raw-1"].action.kind == "notrack"


def nft_doc(*exprs, chains=("c",), extra=()) -> dict:
    items = [{"metainfo": {"json_schema_version": 1}},
             {"table": {"family": "inet", "name": "t", "handle": 1}}]
    items += [{"chain": {"family": "inet", "table": "t", "name": c, "handle": i + 1}}
              for i, c in enumerate(chains)]
    items[2]["chain"].update(type="filter", hook="forward", prio=0, policy="accept")
    items += list(extra)
    items += [{"rule": {"family": "inet", "table": "t", "chain": chains[0], "handle": 10 + i,
                        "expr": e}} for i, e in enumerate(exprs)]
    return {"nftables": items}


def test_nft_netdev_device_and_set_size():
    doc = {"nftables": [
        {"metainfo": {"json_schema_version": 1}},
        {"table": {"family": "netdev", "name": "n", "handle": 1}},
        {"chain": {"family": "netdev", "table": "n", "name": "one", "handle": 1,
                   "type": "filter", "hook": "ingress", "prio": 0, "policy": "accept",
                   "dev": "eth0"}},
        {"set": {"family": "netdev", "table": "n", "name": "s", "handle": 3,
                 "type": "ipv4_addr", "size": 16, "elem": ["198.18.1.1"]}},
    ]}
    rs = nft_json.parse(doc, "dev.json")
    t = rs.table("netdev", "n")
    assert t.chain("one").device == "eth0"
    # A chain on several devices is refused (test_original.py): on none of them,
    # it would see other packets.
    assert t.set("s").size == 16


def test_nft_errors_name_table_chain_rule_handle():
    vmap = [{"vmap": {"key": {"meta": {"key": "mark"}},
                      "data": {"set": [[22, {"accept": None}]]}}}]
    with pytest.raises(RuleSetError) as e:
        nft_json.parse(nft_doc([{"accept": None}], vmap), "gw.json")
    assert str(e.value) == ("gw.json: table inet t chain c rule 2 (handle 11): "
                            'unsupported expression {"meta": {"key": "mark"}} in a '
                            "concatenation")
    option = [{"match": {"op": "==", "left": {"tcp option": {"name": "mptcp",
                                                             "field": "subtype"}},
                         "right": 1}}, {"drop": None}]
    with pytest.raises(RuleSetError, match=r"^gw.json: table inet t chain c rule 1 \(handle "
                                           r"10\): unsupported: tcp option mptcp subtype$"):
        nft_json.parse(nft_doc(option), "gw.json")
    with pytest.raises(RuleSetError, match=r"jump to a missing chain 'x'$"):
        nft_json.parse(nft_doc([{"jump": {"target": "x"}}]), "gw.json")


def test_nft_loop_and_not_a_rule_set():
    loop = nft_doc([{"jump": {"target": "a"}}], chains=("c", "a", "b"))
    loop["nftables"] += [
        {"rule": {"family": "inet", "table": "t", "chain": "a", "handle": 20,
                  "expr": [{"jump": {"target": "b"}}]}},
        {"rule": {"family": "inet", "table": "t", "chain": "b", "handle": 21,
                  "expr": [{"goto": {"target": "a"}}]}}]
    with pytest.raises(RuleSetError, match=r"^gw.json: table inet t: jump loop a -> b -> a$"):
        nft_json.parse(loop, "gw.json")
    with pytest.raises(RuleSetError, match=r"^gw.json: not JSON"):
        nft_json.parse("{nope", "gw.json")
    with pytest.raises(RuleSetError, match=r"^gw.json: not an nft JSON rule set"):
        nft_json.parse({"tables": []}, "gw.json")
    with pytest.raises(RuleSetError, match=r"^gw.json: no tables$"):
        nft_json.parse({"nftables": [{"metainfo": {}}]}, "gw.json")


def test_nft_comment_with_user_text_and_id():
    rs = nft_json.parse(nft_doc([{"accept": None}]), "x.json")
    assert [r.id for _, _, r in rs.rules()] == ["t-1"]
    doc = nft_doc([{"accept": None}])
    doc["nftables"][-1]["rule"]["comment"] = "allow web fwb:web"
    (r,) = [r for _, _, r in nft_json.parse(doc, "x.json").rules()]
    assert (r.id, r.comment) == ("web", "allow web")


def test_nft_anonymous_address_set_becomes_named():
    anon = [{"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                       "right": {"set": ["1.2.3.4", {"prefix": {"addr": "5.6.7.0", "len": 24}}]}}},
            {"drop": None}]
    rs = nft_json.parse(nft_doc(anon), "x.json")
    t = rs.table("inet", "t")
    assert t.set("anon1") == Set("anon1", ("addr",), (("1.2.3.4",), ("5.6.7.0/24",)), 4, True)
    (r,) = [r for _, _, r in rs.rules()]
    assert r.match.sets == (SetRef("anon1", ("saddr",), negate=True),)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("unshare"),
                    reason="nft text is read by nft itself, in a namespace: needs root and nft")
def test_nft_text_reads_as_its_json():
    text = nft_json.parse_file(str(GW_NFT))
    assert text.tables == gateway_nft().tables
    with pytest.raises(RuleSetError, match=r"^bad.nft:3:\d+-\d+: Error: "):
        nft_json.parse_text("table ip t {\n chain c {\n  bogus thing\n }\n}\n", "bad.nft")


# --- remap ---------------------------------------------------------------------------

def addresses(rs: RuleSet) -> list[str]:
    out = []
    for t, c, r in rs.rules():
        out += [p.net for p in (r.match.src, r.match.dst) if p]
        out += [r.action.addr] if r.action.addr else []
    for t in rs.tables:
        for s in t.sets:
            out += [str(e[i]) for e in s.elements for i, k in enumerate(s.keys) if k == "addr"]
    return out


def test_remap_gateway_inside_ranges_and_reversible():
    rs = gateway_ipt()
    moved = validate(remap(rs, IFMAP))
    for a in addresses(moved):
        net = ipaddress.ip_network(a)
        assert net.subnet_of(BENCH4)
        assert not any(net.overlaps(link) for link in LINKS)
    pairs = dict(moved.address_map)
    # prefix lengths and host bits kept
    assert pairs["192.168.1.0/24"].endswith(".1.0/24")
    lan = ipaddress.ip_network(pairs["192.168.1.0/24"])
    assert ipaddress.ip_network(pairs["192.168.1.10/32"]).network_address == lan[10]
    assert ipaddress.ip_network(pairs["192.168.1.128/25"]).subnet_of(lan)
    for orig, mapped in moved.address_map:
        assert reverse(moved, mapped) == orig
    assert reverse(moved, str(lan[77])) == "192.168.1.77"
    assert reverse(moved, "198.19.0.2") == "198.19.0.2"   # never moved
    nat3 = moved.rule("nat-3")
    assert reverse(moved, nat3.action.addr) == "192.168.1.20"
    assert reverse(moved, nat3.match.dst.net) == "203.0.113.10/32"


def test_remap_interfaces():
    moved = remap(gateway_ipt(), IFMAP)
    r = {x.id: x for _, _, x in moved.rules()}
    assert (r["filter-8"].match.iif, r["filter-8"].match.oif) == (Iface(CLIENT), Iface(SERVER))
    assert r["filter-1"].match.iif == Iface("lo")          # no role: stays literal
    assert any("eth+, lo" in n and "never match" in n for n in moved.notes)
    assert dict(moved.iface_map) == {"eth0": CLIENT, "eth1": SERVER}
    with pytest.raises(RuleSetError, match="the role must be client or server"):
        remap(gateway_ipt(), {"eth0": "dmz"})


TRICKY = ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.3/32", "10.200.0.0/16",
          "172.16.0.0/12", "192.168.0.0/16", "192.168.1.0/24", "192.168.1.10/32",
          "0.0.0.0/8", "127.0.0.0/8", "224.0.0.0/4", "240.0.0.0/4", "100.64.0.0/10",
          "169.254.0.0/16", "8.8.8.8/32", "198.18.0.5/32", "198.19.5.0/24",
          "2001:db8::/32", "2001:db8:1::/48", "2001:db8:1::1/128", "fe80::/10",
          "2001:2:0:1::5/128"]


def tricky_ruleset(nets=TRICKY) -> RuleSet:
    rules = tuple(Rule(f"r{i}", Match(src=Prefix.of(n))) for i, n in enumerate(nets))
    probe = Probe("p", Packet(4, "client", "192.168.1.10", "8.8.8.8", "udp", 1, 2), True, "r0")
    return RuleSet("t", (Table("inet", "t", (Chain("c", rules, hook="forward"),)),),
                   probes=(probe,))


def test_remap_keeps_containment_order_and_the_ranges():
    rs = tricky_ruleset(TRICKY + ["0.0.0.0/0", "::/0"])
    moved = validate(remap(rs, {}))
    pairs = {ipaddress.ip_network(o): ipaddress.ip_network(m) for o, m in moved.address_map}
    assert len(set(pairs.values())) == len(pairs)   # one to one
    for o, m in pairs.items():
        assert m.subnet_of(BENCH4 if m.version == 4 else BENCH6)
        assert not any(m.overlaps(link) for link in LINKS if link.version == m.version)
    kept = [ipaddress.ip_network(x) for x in ("198.18.0.5/32", "198.19.5.0/24",
                                              "2001:2:0:1::5/128")]
    for k in kept:
        assert k not in pairs
        assert not any(m.overlaps(k) for m in pairs.values() if m.version == k.version)
    for a, b in ((a, b) for a in pairs for b in pairs if a != b and a.version == b.version):
        assert a.subnet_of(b) == pairs[a].subnet_of(pairs[b]), (a, b)
        if not a.overlaps(b):
            assert (a < b) == (pairs[a] < pairs[b]), (a, b)
    # networks holding the whole range stay, with a note
    assert any(x.startswith("0.0.0.0/0 holds") for x in moved.notes)
    srcs = {r.match.src.net for _, _, r in moved.rules()}
    assert {"0.0.0.0/0", "::/0", "198.18.0.5/32", "198.19.5.0/24"} <= srcs
    # probes move with the rules
    p = moved.probes[0].packet
    assert (reverse(moved, p.saddr), reverse(moved, p.daddr)) == ("192.168.1.10", "8.8.8.8")
    for orig, mapped in moved.address_map:
        assert reverse(moved, mapped) == orig


def test_remap_is_idempotent_and_deterministic(elsewhere):
    rs = remap(gateway_nft(), IFMAP)
    again = remap(rs, IFMAP)
    assert again.tables == rs.tables
    ipt = remap(gateway_ipt(), IFMAP)
    assert [rs.digest(), repr(rs.address_map), ipt.digest(), repr(ipt.address_map)] == \
        elsewhere("from test_importers import remap, gateway_ipt, gateway_nft, IFMAP\n"
                  "r = remap(gateway_nft(), IFMAP)\ni = remap(gateway_ipt(), IFMAP)",
                  "r.digest()", "repr(r.address_map)", "i.digest()", "repr(i.address_map)")


def test_parse_iface_map():
    assert parse_iface_map("eth0=client, eth1=server") == IFMAP
    assert parse_iface_map("") == {}
    for bad in ("eth0", "eth0=lan", "eth0=client,eth0=server"):
        with pytest.raises(RuleSetError, match="^interface map: "):
            parse_iface_map(bad)


# --- load_file -----------------------------------------------------------------------

def test_detect():
    assert detect(GW_RULES.read_text()) == ("iptables", 4)
    assert detect("# Generated by ip6tables-save v1.8.9\n*filter\n") == ("iptables", 6)
    assert detect("*filter\n-A FORWARD -s 2001:db8::1/128 -j DROP\n") == ("iptables", 6)
    assert detect(GW_JSON.read_text()) == ("nft JSON", 0)
    assert detect(GW_NFT.read_text()) == ("nft text", 0)
    assert detect(GW_IPSET.read_text()) == ("ipset", 0)
    assert detect("hello\n") == ("unknown", 0)


def test_load_file_gateway():
    rs = load_file(str(GW_RULES), IFMAP, ipsets=str(GW_IPSET))
    assert rs.name == str(GW_RULES)
    assert rs.rule("nat-3").action.kind == "dnat"
    assert all(ipaddress.ip_network(a).subnet_of(BENCH4) for a in addresses(rs))
    js = load_file(str(GW_JSON), IFMAP)
    assert js.rule("nat-3").match.iif == Iface(SERVER)
    assert json.loads(json.dumps([list(p) for p in js.address_map]))


@pytest.mark.parametrize("make, message", [
    (lambda d: str(d / "missing.rules"), "missing.rules: no such file"),
    (lambda d: str(d), ": is a directory"),
    (lambda d: _write(d / "notes.txt", "hello\n"), "notes.txt: not a rule set (expected"),
    (lambda d: _write(d / "sets", GW_IPSET.read_text()), "sets: ipset definitions, not a "
                                                          "rule set"),
    (lambda d: _write(d / "bad.json", "{ nope"), "bad.json: not JSON"),
    (lambda d: _write(d / "bin", b"\xff\xfe\x00"), "bin: not a rule set (not UTF-8 text)"),
])
def test_load_file_errors_are_one_line(tmp_path, make, message):
    with pytest.raises(RuleSetError) as e:
        load_file(make(tmp_path))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_load_file_set_rule_needs_ipsets():
    with pytest.raises(RuleSetError, match=r"gateway.rules:20: -m set --match-set blocklist: "
                                           r"no ipset definitions given$"):
        load_file(str(GW_RULES))


V6_TEXT = ("*filter\n:FORWARD DROP [0:0]\n"
           "-A FORWARD -s 2001:db8::/32 -d 2001:db8:1::1/128 -i eth0 -p tcp -m tcp --dport 22 "
           "-j ACCEPT\n-A FORWARD ! -s 2001:2::9 -o eth1 -j DROP\nCOMMIT\n*nat\n"
           ":PREROUTING ACCEPT [0:0]\n-A PREROUTING -d 2001:db8:1::1/128 -p tcp -m tcp "
           "--dport 80 -j DNAT --to-destination [2001:db8::5]:8080\nCOMMIT\n")
ONE_PASS = [
    ("gateway", GW_RULES.read_text(), GW_IPSET.read_text(), True),
    ("ip6tables, NAT to [addr]:port", V6_TEXT, None, True),
    ("a comment that reads as an address", HEAD +
     '-A FORWARD -d 10.0.0.1/32 -m comment --comment "old: -s 172.16.9.9" -j ACCEPT\n'
     "COMMIT\n", None, False),
    ("an ipset element no rule uses", GW_RULES.read_text(),
     GW_IPSET.read_text() + "create unused hash:ip family inet\nadd unused 8.8.4.4\n", False),
    ("long options, a tab, addresses without length, inside the range",
     HEAD + "-A FORWARD --source 10.1.2.3 --destination\t198.18.7.7 "
     "! --in-interface eth+ -j DROP\n-A FORWARD -d 10.1.0.0/16 -o lo -j ACCEPT\nCOMMIT\n",
     None, True),
]


@pytest.mark.parametrize("name, text, ipsets, one_pass", ONE_PASS, ids=[c[0] for c in ONE_PASS])
def test_load_file_remaps_iptables_in_one_pass_as_remap_would(tmp_path, name, text, ipsets,
                                                             one_pass):
    """load_file plans the remap from the networks it reads by pattern and parses
    once; the rule set is the one parse-then-remap gives, also where the pattern
    guessed wrong (then it parses again)."""
    from fwbench.ruleset.importers.load import detect
    from fwbench.ruleset.importers.remap import Remapper
    path = _write(tmp_path / "r.rules", text)
    isp = _write(tmp_path / "r.ipset", ipsets) if ipsets else None
    version = detect(text)[1]
    got = load_file(path, IFMAP, ipsets=isp)
    want = validate(remap(iptables_save.parse(text, path, version, ipsets, isp or "ipsets"),
                          IFMAP))
    assert got == want and got.digest() == want.digest()
    assert got.address_map and got.address_map == want.address_map
    assert got.notes == want.notes and got.iface_map == want.iface_map
    mover = Remapper(IFMAP, iptables_save.networks(text, version, ipsets))
    iptables_save.parse(text, path, version, ipsets, "ipsets", mover)
    assert mover.complete == one_pass


def test_load_file_one_pass_keeps_the_parsers_errors(tmp_path):
    for body, message in (
            ("-A FORWARD -s 2001:db8::1 -j DROP\n", r"r.rules:8: IPv6 address 2001:db8::1 in "
                                                     r"an IPv4 rule set$"),
            ("-A FORWARD -s 10.0.0.300 -j DROP\n", r"r.rules:8: not an address or prefix"),
            ("-A FORWARD -s 10.0.0.1 -i eth0 -j DROP\n", r"the role must be client or server")):
        path = _write(tmp_path / "r.rules", HEAD + body + "COMMIT\n")
        with pytest.raises(RuleSetError, match=message):
            load_file(path, {"eth0": "dmz"} if "role" in message else IFMAP)


def _write(p: Path, content) -> str:
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    return str(p)
