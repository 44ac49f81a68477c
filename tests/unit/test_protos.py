"""Issue 34's constructs, unit by unit, with literal expected values: ESP, AH and
GRE (by name and by number), NFLOG, quota, redirect and masquerade to a port, set
element timeouts, iprange, and the one-line refusals of what the model does not
hold (SCTP, ESP/AH SPIs, conntrack beyond the state, sets the packet path
updates, ipset types and nomatch), from the importers through the renderers and
the reference evaluator to the injector's frames and the corpus. The files under
tests/data/constructs/protos go through the real `check` in
tests/privileged/test_protos_check.py."""
import struct

import pytest

from fwbench.errors import FwbenchError
from fwbench.ruleset import corpus
from fwbench.ruleset.evaluate import Evaluator, RateLimits
from fwbench.ruleset.importers import iptables_save, nft_json
from fwbench.ruleset.model import (ACCEPT, Action, Chain, Interfaces, Match, Packet, Ports,
                                   Prefix, Quota, Rule, RuleSet, RuleSetError, Set, SetRef, Table,
                                   Unsupported, rule_features, validate)
from fwbench.ruleset.render import bpf
from fwbench.ruleset.render import iptables as ipt
from fwbench.ruleset.render import nft
from fwbench.testbed import packets

IFS = Interfaces("veth-c", "veth-s")


def ipt_rules(*lines: str, version: int = 4) -> RuleSet:
    text = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n" + \
        "".join(f"{ln}\n" for ln in lines) + "COMMIT\n"
    return iptables_save.parse(text, "f.rules", version)


def nft_doc(*exprs) -> dict:
    items = [{"metainfo": {"json_schema_version": 1}},
             {"table": {"family": "ip", "name": "t", "handle": 1}},
             {"chain": {"family": "ip", "table": "t", "name": "c", "handle": 1,
                        "type": "filter", "hook": "forward", "prio": 0, "policy": "drop"}}]
    items += [{"rule": {"family": "ip", "table": "t", "chain": "c", "handle": 10 + i,
                        "expr": e}} for i, e in enumerate(exprs)]
    return {"nftables": items}


def l4proto(value, key="l4proto") -> dict:
    left = {"meta": {"key": "l4proto"}} if key == "l4proto" else \
        {"payload": {"protocol": "ip", "field": "protocol"}}
    return {"match": {"op": "==", "left": left, "right": value}}


def one_rule(match: Match, family: str = "ip") -> RuleSet:
    return validate(RuleSet("t", (Table(family, "t", (
        Chain("FORWARD", (Rule("r", match, ACCEPT),), hook="forward", policy="drop"),)),)))


# --- ESP, AH, GRE ---------------------------------------------------------------------

@pytest.mark.parametrize("opt, proto", [
    ("-p esp", "esp"), ("-p 50", "esp"), ("-p ah", "ah"), ("-p 51", "ah"),
    ("-p gre", "gre"), ("-p 47", "gre"), ("-p GRE", "gre"), ("-p all", None), ("-p 0", None),
])
def test_iptables_protocols_by_name_and_number(opt, proto):
    rs = ipt_rules(f"-A FORWARD {opt} -j ACCEPT")
    assert rs.rule("filter-1").match.proto == proto


@pytest.mark.parametrize("right, key, proto", [
    ("esp", "l4proto", "esp"), (50, "l4proto", "esp"), ("ah", "l4proto", "ah"),
    (51, "l4proto", "ah"), ("gre", "protocol", "gre"), (47, "protocol", "gre"),
])
def test_nft_protocols_by_name_and_number(right, key, proto):
    rs = nft_json.parse(nft_doc([l4proto(right, key), {"accept": None}]), "f.json")
    assert rs.rule("t-1").match.proto == proto


def test_sctp_is_refused_in_one_line_naming_the_line():
    with pytest.raises(RuleSetError) as e:
        ipt_rules("-A FORWARD -p udp -j ACCEPT", "-A FORWARD -p sctp -j ACCEPT")
    assert str(e.value) == ("f.rules:6: unsupported protocol -p sctp: conntrack's SCTP "
                            "tracker reads a packet's chunks, which the model does not hold")
    with pytest.raises(RuleSetError, match=r"^f.rules:5: unsupported protocol -p 132: "):
        ipt_rules("-A FORWARD -p 132 -j ACCEPT")
    with pytest.raises(RuleSetError, match=r'rule 1 \(handle 10\): unsupported protocol '
                                           r'"sctp": conntrack\'s SCTP tracker reads'):
        nft_json.parse(nft_doc([l4proto("sctp"), {"accept": None}]), "f.json")


@pytest.mark.parametrize("line, what", [
    ("-A FORWARD -p esp -m ah --ahspi 5 -j ACCEPT", "--ahspi needs -p ah -m ah"),
    ("-A FORWARD -p esp -m esp --espspi 5:4 -j ACCEPT", "--espspi 5:4: a range of 32-bit SPIs"),
    ("-A FORWARD -p 112 -j ACCEPT", "unsupported protocol -p 112"),
    ("-A FORWARD ! -p esp -j ACCEPT", "unsupported: negated protocol ! -p esp"),
])
def test_what_the_model_does_not_hold_is_refused(line, what):
    with pytest.raises(RuleSetError) as e:
        ipt_rules(line)
    assert str(e.value) == f"f.rules:5: {what}"


def test_ah_is_ipv4_s_only_protocol_match():
    """In IPv6, AH is an extension header: ip6tables' -p and nft's meta l4proto
    skip it (measured: they never match an IPv6 AH packet)."""
    with pytest.raises(RuleSetError) as e:
        ipt_rules("-A FORWARD -p ah -j ACCEPT", version=6)
    assert str(e.value) == ("f.rules:5: unsupported: -p ah in an IPv6 rule set (AH is an "
                            "extension header there, which -p skips)")
    doc = nft_doc([l4proto("ah"), {"accept": None}])
    for item in doc["nftables"][1:]:
        (obj,) = item.values()
        obj["family"] = "ip6"
    with pytest.raises(RuleSetError, match=r"rule 1 \(handle 10\): unsupported: ah in table "
                                           r"ip6 \(AH is an extension header in IPv6"):
        nft_json.parse(doc, "f.json")
    assert Match(proto="ah").version == 4
    # In inet, AH (an IPv4 protocol match) pins the rule to IPv4; `ip6 nexthdr`
    # is refused (test_import_exact.py): it reads an extension header as readily.
    for item in doc["nftables"][1:]:
        (obj,) = item.values()
        obj["family"] = "inet"
    assert nft_json.parse(doc, "f.json").rule("t-1").match.version == 4


def test_nft_esp_fields_outside_their_width_are_refused():
    spi = {"match": {"op": "==", "left": {"payload": {"protocol": "ah", "field": "reserved"}},
                     "right": 70000}}
    with pytest.raises(RuleSetError, match=r"unsupported: ah reserved == 70000$"):
        nft_json.parse(nft_doc([spi, {"accept": None}]), "f.json")


@pytest.mark.parametrize("proto, ipt_text, nft_text", [
    ("esp", "-p esp", "meta l4proto esp"),
    ("ah", "-p ah", "meta l4proto ah"),
    ("gre", "-p gre", "meta l4proto gre"),
])
def test_renderers_write_portless_protocols_as_the_tools_print_them(proto, ipt_text,
                                                                     nft_text):
    rs = one_rule(Match(proto=proto, src=Prefix("198.18.0.0/24")))
    assert ipt.render(rs, IFS, 4).splitlines()[4] == \
        f'-A FORWARD -s 198.18.0.0/24 {ipt_text} -m comment --comment "fwb:r" -j ACCEPT'
    assert nft.strip_ids(nft.render(rs, IFS).splitlines()[3].strip()) == \
        f"ip saddr 198.18.0.0/24 {nft_text} counter accept"
    assert f"proto {proto}" in rule_features(rs.rule("r"))
    assert f"proto {proto}" in ipt.SUPPORTS and f"proto {proto}" in nft.SUPPORTS
    with pytest.raises(Unsupported, match=f"unsupported: (saddr|proto {proto})"):
        bpf.refuse_unsupported(rs)


def test_the_evaluator_tells_portless_protocols_apart():
    rs = one_rule(Match(proto="gre"))
    ev = Evaluator(rs)
    base = Packet(4, "client", "198.18.0.2", "198.19.0.2", "gre")
    assert ev.evaluate(base).forward is True
    assert ev.evaluate(Packet(4, "client", "198.18.0.2", "198.19.0.2", "esp")).forward \
        is False
    assert ev.evaluate(Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2)) \
        .forward is False


@pytest.mark.parametrize("proto, head", [
    # SPI 0x100 and sequence 1 in every packet (model.TESTBED_IPSEC).
    ("esp", struct.pack("!II", 0x100, 1)),
    ("ah", struct.pack("!BBHII", 59, 1, 0, 0x100, 1)),
    ("gre", struct.pack("!HH", 0, 0x88B5)),
    ("igmp", struct.pack("!BBHI", 0x16, 0, 0, 0)),
])
@pytest.mark.parametrize("version, saddr, daddr", [
    (4, "198.18.0.2", "198.19.0.2"), (6, "2001:2:0:1::2", "2001:2:0:2::2")])
def test_frames_of_portless_protocols_carry_the_marker_after_their_header(
        proto, head, version, saddr, daddr):
    nonce = b"\1\2\3\4"
    p = Packet(version, "client", saddr, daddr, proto)
    if (proto, version) == ("ah", 6):
        with pytest.raises(FwbenchError, match="^packets: packet 7: ah in an IPv6 packet$"):
            packets.build_frame(p, 7, nonce, "02:00:00:00:00:01", "02:00:00:00:00:02")
        return
    frame = packets.build_frame(p, 7, nonce, "02:00:00:00:00:01", "02:00:00:00:00:02")
    ip_len = 20 if version == 4 else 40
    l4 = frame[14 + ip_len:]
    assert l4 == head + packets.MAGIC + nonce + struct.pack("!I", 7)
    assert frame[14 + 9 if version == 4 else 14 + 6] == {"esp": 50, "ah": 51, "gre": 47,
                                                         "igmp": 2}[proto]
    got = packets.parse_frame(frame, nonce)
    assert (got.index, got.proto, got.saddr, got.daddr, got.sport, got.dport,
            got.icmp_type, got.checksum_ok) == (7, proto, saddr, daddr, None, None, None,
                                                 True)
    assert packets.parse_frame(frame, b"\0\0\0\0") is None


def test_the_corpus_sends_each_portless_protocol_a_rule_names_and_near_misses():
    rs = validate(ipt_rules("-A FORWARD -p esp -j ACCEPT", "-A FORWARD -p gre -j DROP",
                            "-A FORWARD -p udp -j ACCEPT"))
    pkts = corpus.build(rs, size=120)
    protos = {p.proto for p in pkts}
    assert {"esp", "gre", "ah", "udp"} <= protos
    assert not [p for p in pkts if p.proto == "ah" and p.version == 6]
    ev = Evaluator(rs)
    assert any(p.proto == "esp" and ev.evaluate(p).forward for p in pkts)
    assert any(p.proto == "ah" and not ev.evaluate(p).forward for p in pkts)
    assert all(p.sport is None and p.dport is None and p.icmp_type is None
               for p in pkts if p.proto in ("esp", "ah", "gre"))


# --- NFLOG ----------------------------------------------------------------------------

def test_iptables_nflog_is_a_counting_rule_with_a_note_naming_the_line():
    """NFLOG decides no verdict: held as a rule that only counts (a LOG to the
    kernel's ring in its place would cost what NFLOG does not)."""
    rs = ipt_rules('-A FORWARD -j NFLOG --nflog-group 5 --nflog-prefix "ssh in"',
                   "-A FORWARD -j NFLOG", "-A FORWARD -j ACCEPT")
    assert rs.rule("filter-1").action == Action("counter")
    assert rs.rule("filter-2").action == Action("counter")
    assert rs.notes[:2] == (
        "f.rules:5: -j NFLOG left out (the rule only counts; no verdict depends on it)",
        "f.rules:6: -j NFLOG left out (the rule only counts; no verdict depends on it)")
    with pytest.raises(RuleSetError, match=r"^f.rules:5: unsupported option --nflog-x of "
                                           r"-j NFLOG$"):
        ipt_rules("-A FORWARD -j NFLOG --nflog-x 1")


def test_nft_log_group_is_a_counting_rule_with_a_note_naming_the_rule():
    rs = nft_json.parse(nft_doc([{"log": {"prefix": "a", "group": 3}}],
                                [{"accept": None}]), "f.json")
    assert rs.rule("t-1").action == Action("counter")
    assert rs.notes == ("f.json: table ip t chain c rule 1 (handle 10): log group 3 left "
                        "out (the rule only counts; no verdict depends on it)",)
    assert Evaluator(rs).evaluate(Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp",
                                         1, 2)).counted == ("t-1", "t-2")


# --- quota ------------------------------------------------------------------------------

@pytest.mark.parametrize("line, quota", [
    ("-A FORWARD -m quota --quota 2000 -j ACCEPT", Quota(2000)),
    ("-A FORWARD -m quota ! --quota 1000 -j DROP", Quota(1000, over=True)),
    ("-A FORWARD -s 10.0.0.0/8 -p udp -m udp --dport 53 -m quota --quota 5 -m comment "
     '--comment "x" -j ACCEPT', Quota(5)),
])
def test_iptables_quota(line, quota):
    assert ipt_rules(line).rule("filter-1").match.quota == quota


@pytest.mark.parametrize("line, what", [
    ("-A FORWARD -m quota --quota 5 -m mark --mark 1 -j ACCEPT",
     "unsupported: -m after -m quota"),
    ("-A FORWARD -p tcp -m quota --quota 5 --dport 22 -j ACCEPT",
     "unsupported: --dport after -m quota"),
    ("-A FORWARD --quota 5 -j ACCEPT", "--quota needs -m quota"),
])
def test_iptables_quota_refusals(line, what):
    with pytest.raises(RuleSetError) as e:
        ipt_rules(line)
    assert str(e.value) == f"f.rules:5: {what}"


@pytest.mark.parametrize("quota, want", [
    ({"val": 2000, "val_unit": "bytes"}, Quota(2000)),
    ({"val": 10, "val_unit": "kbytes", "inv": True}, Quota(10240, over=True)),
    ({"val": 1, "val_unit": "mbytes", "used": 300, "used_unit": "bytes"},
     Quota(1 << 20, used=300)),
])
def test_nft_quota(quota, want):
    rs = nft_json.parse(nft_doc([{"quota": quota}, {"accept": None}]), "f.json")
    assert rs.rule("t-1").match.quota == want


@pytest.mark.parametrize("exprs, what", [
    ([{"quota": "q"}, {"accept": None}], 'unsupported: named quota "q"'),
    ([{"quota": {"val": 1, "val_unit": "bytes"}}, l4proto("esp"), {"accept": None}],
     "unsupported: a match after a quota"),
    ([{"quota": {"val": 1, "val_unit": "gbytes"}}, {"accept": None}],
     'unsupported: quota {"val": 1, "val_unit": "gbytes"}'),
])
def test_nft_quota_refusals(exprs, what):
    with pytest.raises(RuleSetError) as e:
        nft_json.parse(nft_doc(exprs), "f.json")
    assert str(e.value) == f"f.json: table ip t chain c rule 1 (handle 10): {what}"


@pytest.mark.parametrize("quota, ipt_text, nft_text", [
    (Quota(2000), "-m quota --quota 2000", "quota 2000 bytes"),
    (Quota(10240, over=True), "-m quota ! --quota 10240", "quota over 10 kbytes"),
    (Quota(3 << 20, used=2048), None, "quota 3 mbytes used 2 kbytes"),
    (Quota(5 << 30), "-m quota --quota 5368709120", "quota 5120 mbytes"),
])
def test_renderers_write_quota_as_the_tools_print_it(quota, ipt_text, nft_text):
    rs = one_rule(Match(proto="udp", quota=quota))
    assert nft.strip_ids(nft.render(rs, IFS).splitlines()[3].strip()) == \
        f"meta l4proto udp {nft_text} counter accept"
    if ipt_text is None:
        with pytest.raises(Unsupported, match=r"^unsupported: quota already partly used "
                                              r"\(rule r\)$"):
            ipt.render(rs, IFS, 4)
    else:
        assert ipt.render(rs, IFS, 4).splitlines()[4] == \
            f'-A FORWARD -p udp {ipt_text} -m comment --comment "fwb:r" -j ACCEPT'
    assert "quota" in rule_features(rs.rule("r"))
    with pytest.raises(Unsupported, match="unsupported: quota"):
        bpf.refuse_unsupported(one_rule(Match(quota=quota)))


def test_a_quota_leaves_the_packets_that_reach_it_unjudged():
    rs = validate(ipt_rules("-A FORWARD -p tcp -j ACCEPT",
                            "-A FORWARD -s 10.1.0.0/16 -m quota --quota 100 -j ACCEPT",
                            "-A FORWARD -s 10.2.0.0/16 -m quota ! --quota 100 -j DROP",
                            "-A FORWARD -s 10.2.0.0/16 -j ACCEPT"))
    ev, limits = Evaluator(rs), RateLimits(rs)
    assert limits.ids == {"filter-2", "filter-3"}
    tcp = Packet(4, "client", "10.1.0.1", "10.9.0.1", "tcp", 1, 2)
    lan = Packet(4, "client", "10.1.0.1", "10.9.0.1", "udp", 1, 2)
    over = Packet(4, "client", "10.2.0.1", "10.9.0.1", "udp", 1, 2)
    # The reference is a firewall's first packets: bytes left, `over` not yet.
    assert [ev.evaluate(p).forward for p in (tcp, lan, over)] == [True, True, True]
    assert ev.evaluate(over).decided_by == "filter-4"
    assert [limits.reached(p) for p in (tcp, lan, over)] == [(), ("filter-2",),
                                                               ("filter-3",)]
    # Once spent, filter-2 stops matching (policy drop) and filter-3 starts (drop):
    # the counters of both rules, and of filter-4 and the policy's, are unsure.
    assert limits.unsure_rules([lan, over]) == {"filter-2", "filter-3", "filter-4"}


# --- set timeouts -------------------------------------------------------------------------

IPSET_RULES = "-A FORWARD -m set --match-set s src -j DROP"


@pytest.mark.parametrize("ipsets, note", [
    ("create s hash:ip timeout 7200\nadd s 198.18.0.1 timeout 7000\nadd s 198.18.0.2\n",
     "ipsets:2: set s: element timeouts left out (the shortest 7000 s): none expires "
     "within 3600 s, longer than a check takes"),
    ("create s hash:ip timeout 4000\nadd s 198.18.0.1 timeout 0\nadd s 198.18.0.2\n",
     "ipsets:3: set s: element timeouts left out (the shortest 4000 s): none expires "
     "within 3600 s, longer than a check takes"),
    ("create s hash:ip timeout 0\nadd s 198.18.0.1 timeout 0\n", None),
])
def test_ipset_timeouts_that_outlast_a_check_are_left_out_with_a_note(ipsets, note):
    text = "*filter\n:FORWARD ACCEPT [0:0]\n" + IPSET_RULES + "\nCOMMIT\n"
    rs = iptables_save.parse(text, "f.rules", ipsets=ipsets)
    assert rs.tables[0].set("s").elements[0] == ("198.18.0.1",)
    assert [n for n in rs.notes if "timeout" in n] == ([note] if note else [])


def test_an_ipset_timeout_a_check_could_outlive_is_refused():
    text = "*filter\n:FORWARD ACCEPT [0:0]\n" + IPSET_RULES + "\nCOMMIT\n"
    with pytest.raises(RuleSetError) as e:
        iptables_save.parse(text, "f.rules", ipsets="create s hash:ip timeout 7200\n"
                            "add s 198.18.0.1\nadd s 198.18.0.2 timeout 600\n")
    assert str(e.value) == ("f.rules:3: ipsets:3: set s: unsupported: an element that "
                            "expires in 600 s (under 3600 s, it could expire during a "
                            "check)")


def nft_set(*elem, timeout=None) -> dict:
    s = {"family": "ip", "name": "s", "table": "t", "type": "ipv4_addr",
         "flags": ["timeout"], "elem": list(elem)}
    if timeout is not None:
        s["timeout"] = timeout
    doc = nft_doc([{"match": {"op": "==", "left": {"payload": {"protocol": "ip",
                                                                "field": "saddr"}},
                              "right": "@s"}}, {"drop": None}])
    doc["nftables"].insert(3, {"set": s})
    return doc


def test_nft_timeouts_that_outlast_a_check_are_left_out_with_a_note():
    rs = nft_json.parse(nft_set({"elem": {"val": "10.0.0.1", "expires": 7199}},
                                {"elem": {"val": "10.0.0.2", "timeout": 5400,
                                          "expires": 5399}}, timeout=7200), "f.json")
    assert rs.tables[0].set("s").elements == (("10.0.0.1",), ("10.0.0.2",))
    assert rs.notes == ("f.json: table ip t set s: element timeouts left out (the "
                        "shortest 5399 s): none expires within 3600 s, longer than a "
                        "check takes",)
    assert nft_json.parse(nft_set("10.0.0.1"), "f.json").notes == ()


@pytest.mark.parametrize("elem, timeout", [
    ({"elem": {"val": "10.0.0.2", "timeout": 1800, "expires": 1799}}, 7200),
    ("10.0.0.2", 60),
])
def test_an_nft_timeout_a_check_could_outlive_is_refused(elem, timeout):
    with pytest.raises(RuleSetError, match=r"^f.json: table ip t set s: unsupported: an "
                                           r"element that expires in (1799|60) s "):
        nft_json.parse(nft_set(elem, timeout=timeout), "f.json")


# --- redirect, and masquerade's options -----------------------------------------------------

def ipt_nat(*lines: str) -> RuleSet:
    text = ("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
            ":POSTROUTING ACCEPT [0:0]\n" + "".join(f"{ln}\n" for ln in lines) + "COMMIT\n")
    return iptables_save.parse(text, "f.rules")


@pytest.mark.parametrize("line, action", [
    ("-A PREROUTING -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 3128",
     Action("redirect", port=3128)),
    ("-A PREROUTING -p udp -j REDIRECT", Action("redirect")),
])
def test_iptables_redirect(line, action):
    assert ipt_nat(line).rule("nat-1").action == action


@pytest.mark.parametrize("line, what", [
    ("-A PREROUTING -p tcp -j REDIRECT --to-ports 3128-3130",
     "unsupported: -j REDIRECT --to-ports 3128-3130 (one port)"),
    ("-A PREROUTING -p tcp -j REDIRECT --random",
     "unsupported option --random of -j REDIRECT"),
    ("-A POSTROUTING -p udp -j MASQUERADE --to-ports 1024-x",
     "unsupported: -j MASQUERADE --to-ports 1024-x (one port, or a range)"),
    ("-A POSTROUTING -j MASQUERADE --random", "unsupported option --random of -j MASQUERADE"),
])
def test_iptables_nat_options_the_model_does_not_hold_are_refused(line, what):
    with pytest.raises(RuleSetError) as e:
        ipt_nat(line)
    assert str(e.value) == f"f.rules:6: {what}"


def test_redirect_outside_the_nat_table_is_refused():
    with pytest.raises(RuleSetError, match=r"^f.rules:5: -j REDIRECT outside the nat table$"):
        ipt_rules("-A FORWARD -j REDIRECT")


@pytest.mark.parametrize("stmt, want", [
    ({"redirect": None}, Action("redirect")),
    ({"redirect": {"port": 3128}}, Action("redirect", port=3128)),
])
def test_nft_redirect(stmt, want):
    assert nft_json.parse(nft_doc([stmt]), "f.json").rule("t-1").action == want


@pytest.mark.parametrize("stmt, what", [
    ({"redirect": {"port": {"range": [1, 2]}}}, 'unsupported: redirect to port {"range": '
                                                '[1, 2]}'),
    ({"redirect": {"flags": "random"}}, "unsupported: redirect flags"),
    ({"masquerade": {"flags": "persistent"}}, "unsupported: NAT flags persistent"),
])
def test_nft_nat_options_the_model_does_not_hold_are_refused(stmt, what):
    with pytest.raises(RuleSetError) as e:
        nft_json.parse(nft_doc([stmt]), "f.json")
    assert str(e.value) == f"f.json: table ip t chain c rule 1 (handle 10): {what}"


def nat_redirect(port: int | None, hook: str = "prerouting") -> RuleSet:
    return validate(RuleSet("t", (Table("ip", "t", (
        Chain("PREROUTING" if hook == "prerouting" else "POSTROUTING",
              (Rule("r", Match(proto="tcp", dport=Ports.of(80)),
                    Action("redirect", port=port)),),
              hook=hook, type="nat", priority=-100 if hook == "prerouting" else 100),
        Chain("FORWARD", (), hook="forward", policy="drop"))),)))


@pytest.mark.parametrize("port, ipt_text, nft_text", [
    (3128, "-j REDIRECT --to-ports 3128", "redirect to :3128"),
    (None, "-j REDIRECT", "redirect"),
])
def test_renderers_write_redirect_as_the_tools_print_it(port, ipt_text, nft_text):
    rs = nat_redirect(port)
    lines = ipt.render(rs, IFS, 4).splitlines()
    assert f'-A PREROUTING -p tcp -m tcp --dport 80 -m comment --comment "fwb:r" {ipt_text}' \
        in lines
    assert f"tcp dport 80 counter {nft_text} comment \"fwb:r\"" in nft.render(rs, IFS)
    assert "redirect" in ipt.SUPPORTS and "redirect" in nft.SUPPORTS
    with pytest.raises(Unsupported, match=r"unsupported: (redirect|chain type nat)"):
        bpf.refuse_unsupported(rs)


def test_redirect_after_routing_is_refused_by_both_renderers():
    rs = nat_redirect(None, "postrouting")
    with pytest.raises(Unsupported, match=r"^unsupported: redirect in hook postrouting "
                                          r"\(rule r\)$"):
        ipt.refuse_unsupported(rs)
    with pytest.raises(RuleSetError, match=r"rule r: redirect in a nat chain at hook "
                                           r"postrouting"):
        nft.refuse_unsupported(rs)


def test_a_redirected_packet_is_delivered_to_the_firewall_on_its_input_side():
    ev = Evaluator(nat_redirect(3128), local={"client": "198.18.0.1", "server": "198.19.0.1"})
    p = Packet(4, "client", "198.18.0.2", "198.19.0.2", "tcp", 40000, 80)
    v = ev.evaluate(p)
    assert (v.forward, v.local, v.decided_by, v.counted) == (False, True, "r", ("r",))
    assert (v.translated.daddr, v.translated.dport) == ("198.18.0.1", 3128)
    back = ev.evaluate(Packet(4, "server", "198.19.0.2", "198.18.0.2", "tcp", 40000, 80))
    assert (back.local, back.translated.daddr, back.translated.dport) == \
        (True, "198.19.0.1", 3128)
    other = ev.evaluate(Packet(4, "client", "198.18.0.2", "198.19.0.2", "tcp", 40000, 81))
    assert (other.forward, other.local) == (False, False)


# --- conntrack beyond the state, sets the packet path updates, set types ----------------

@pytest.mark.parametrize("line, what", [
    ("-A FORWARD -m conntrack --ctstatus DNAT -j ACCEPT", "unsupported option --ctstatus"),
    ("-A FORWARD -m conntrack --ctproto 6 -j ACCEPT", "unsupported option --ctproto"),
    ("-A FORWARD -m conntrack --ctorigdst 10.0.0.1 -j ACCEPT",
     "unsupported option --ctorigdst"),
    ("-A FORWARD -m conntrack --ctstate NEW --ctdir ORIGINAL -j ACCEPT",
     "unsupported option --ctdir"),
    ("-A FORWARD -m conntrack --ctstate NEW --ctexpire 10:20 -j ACCEPT",
     "unsupported option --ctexpire"),
    ("-A FORWARD -j SET --add-set s src", "unsupported target -j SET"),
])
def test_iptables_refusals_name_the_line(line, what):
    with pytest.raises(RuleSetError) as e:
        ipt_rules(line)
    assert str(e.value) == f"f.rules:5: {what}"


@pytest.mark.parametrize("left, right, what", [
    ({"ct": {"key": "status"}}, "assured", "unsupported expression ct status"),
    ({"ct": {"key": "direction"}}, "original", "unsupported expression ct direction"),
    ({"ct": {"key": "ip daddr", "dir": "original"}}, "10.0.0.1",
     "unsupported expression ct original ip daddr"),
    ({"ct": {"key": "state", "dir": "reply"}}, "new",
     "unsupported expression ct reply state"),
])
def test_nft_conntrack_beyond_the_state_is_refused(left, right, what):
    with pytest.raises(RuleSetError) as e:
        nft_json.parse(nft_doc([{"match": {"op": "==", "left": left, "right": right}},
                                {"accept": None}]), "f.json")
    assert str(e.value) == f"f.json: table ip t chain c rule 1 (handle 10): {what}"


SADDR = {"payload": {"protocol": "ip", "field": "saddr"}}


@pytest.mark.parametrize("stmt, what", [
    ({"set": {"op": "add", "elem": SADDR, "set": "@d"}}, "add @d"),
    ({"set": {"op": "update", "elem": {"elem": {"val": SADDR, "timeout": 30}},
              "set": "@d"}}, "update @d"),
    ({"meter": {"key": SADDR, "stmt": {"limit": {"rate": 10, "per": "second"}},
                "size": 65535, "name": "m"}}, "meter m"),
])
def test_nft_sets_the_packet_path_updates_are_refused(stmt, what):
    with pytest.raises(RuleSetError) as e:
        nft_json.parse(nft_doc([stmt, {"accept": None}]), "f.json")
    assert str(e.value) == (f"f.json: table ip t chain c rule 1 (handle 10): unsupported: "
                            f"{what} (a set the packet path updates)")


@pytest.mark.parametrize("ipsets, what", [
    ("create s hash:net,iface family inet\n", "ipsets:1: unsupported set type hash:net,iface "
                                             "(set s)"),
    ("create s bitmap:ip range 198.18.0.0-198.18.0.255\n",
     "ipsets:1: unsupported set type bitmap:ip (set s)"),
    ("create s hash:net family inet\nadd s 198.18.0.0/24\nadd s 198.18.0.8/29 nomatch\n",
     "ipsets:3: unsupported element option nomatch (set s)"),
])
def test_ipset_types_and_nomatch_the_model_does_not_hold_are_refused(ipsets, what):
    text = "*filter\n:FORWARD ACCEPT [0:0]\n" + IPSET_RULES + "\nCOMMIT\n"
    with pytest.raises(RuleSetError) as e:
        iptables_save.parse(text, "f.rules", ipsets=ipsets)
    assert str(e.value) == f"f.rules:3: {what}"


def test_ipset_hash_ip_port_and_hash_net_are_held():
    text = ("*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -m set --match-set s dst,dst "
            "-j DROP\n-A FORWARD -m set --match-set n src -j DROP\nCOMMIT\n")
    rs = iptables_save.parse(text, "f.rules", ipsets=(
        "create s hash:ip,port family inet\nadd s 198.18.0.1,udp:53\n"
        "add s 198.18.0.2,8080\ncreate n hash:net family inet\nadd n 198.18.4.0/22\n"))
    t = rs.tables[0]
    assert (t.set("s").keys, t.set("s").elements) == (
        ("addr", "proto", "port"), (("198.18.0.1", "udp", 53), ("198.18.0.2", "tcp", 8080)))
    assert (t.set("n").interval, t.set("n").elements) == (True, (("198.18.4.0/22",),))
    assert rs.rule("filter-1").match.sets[0].fields == ("daddr", "proto", "dport")


# --- iprange -------------------------------------------------------------------------------

def test_iprange_is_a_prefix_or_an_interval_set_of_the_prefixes_covering_it():
    rs = ipt_rules("-A FORWARD -m iprange --src-range 10.1.0.0-10.1.0.255 -j ACCEPT",
                   "-A FORWARD -m iprange --src-range 10.2.0.5-10.2.0.9 "
                   "! --dst-range 10.3.0.1-10.3.0.2 -j ACCEPT",
                   "-A FORWARD -s 10.4.0.0/16 -m iprange --src-range 10.4.0.0-10.4.0.255 "
                   "-j DROP")
    assert rs.rule("filter-1").match.src == Prefix("10.1.0.0/24")
    m2, m3 = rs.rule("filter-2").match, rs.rule("filter-3").match
    assert m2.sets == (SetRef("iprange1", ("saddr",)), SetRef("iprange2", ("daddr",), True))
    # -s already holds the rule's source prefix: the range is a set of one.
    assert (m3.src, m3.sets) == (Prefix("10.4.0.0/16"), (SetRef("iprange3", ("saddr",)),))
    t = rs.tables[0]
    assert t.set("iprange1") == Set("iprange1", ("addr",), (("10.2.0.5",), ("10.2.0.6/31",),
                                                           ("10.2.0.8/31",)), 4, True)
    assert t.set("iprange2").elements == (("10.3.0.1",), ("10.3.0.2",))
    assert rs.notes[:2] == ("f.rules:6: address range 10.2.0.5-10.2.0.9 became set iprange1",
                            "f.rules:6: address range 10.3.0.1-10.3.0.2 became set iprange2")


@pytest.mark.parametrize("line, what", [
    ("-A FORWARD --src-range 10.0.0.1-10.0.0.2 -j ACCEPT", "--src-range needs -m iprange"),
    ("-A FORWARD -m iprange --dst-range 10.0.0.9-10.0.0.2 -j ACCEPT",
     "an empty address range 10.0.0.9-10.0.0.2"),
    ("-A FORWARD -m iprange --dst-range 10.0.0.1-2001:2::1 -j ACCEPT",
     "not an IPv4 address range: 10.0.0.1-2001:2::1"),
    ("-A FORWARD -m iprange --dst-range 10.0.0.x -j ACCEPT",
     "not an address range: '10.0.0.x'"),
])
def test_iprange_refusals(line, what):
    with pytest.raises(RuleSetError) as e:
        ipt_rules(line)
    assert str(e.value) == f"f.rules:5: {what}"


def test_a_quota_keeps_nft_from_folding_the_protocol_into_a_tcp_reset():
    """Measured: nft lists `meta l4proto tcp quota 100 bytes reject with tcp
    reset` as loaded; without the quota it folds the protocol into the reject."""
    rs = validate(RuleSet("t", (Table("ip", "t", (Chain("c", (
        Rule("r", Match(proto="tcp", quota=Quota(100)), Action("reject",
                                                              reject_with="tcp-reset"),
             False),), hook="forward"),)),)))
    assert nft.strip_ids(nft.render(rs, IFS).splitlines()[3].strip()) == \
        "meta l4proto tcp quota 100 bytes reject with tcp reset"


def test_masquerade_to_one_port_is_held_rendered_and_judged():
    rs = ipt_nat("-A POSTROUTING -o eth1 -p udp -j MASQUERADE --to-ports 2000")
    assert rs.rule("nat-1").action == Action("masquerade", port=2000)
    assert nft_json.parse(nft_doc([{"masquerade": {"port": 2000}}]), "f.json") \
        .rule("t-1").action == Action("masquerade", port=2000)
    masq = validate(RuleSet("t", (Table("ip", "t", (
        Chain("POSTROUTING", (Rule("r", Match(proto="udp"), Action("masquerade", port=2000)),),
              hook="postrouting", type="nat", priority=100),)),)))
    assert '-A POSTROUTING -p udp -m comment --comment "fwb:r" -j MASQUERADE --to-ports 2000' \
        in ipt.render(masq, IFS, 4).splitlines()
    assert 'meta l4proto udp counter masquerade to :2000 comment "fwb:r"' in \
        nft.render(masq, IFS)
    v = Evaluator(masq, local={"client": "198.18.0.1", "server": "198.19.0.1"}).evaluate(
        Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 40000, 53))
    assert (v.forward, v.translated.saddr, v.translated.sport, v.translated.dport) == \
        (True, "198.19.0.1", 2000, 53)
