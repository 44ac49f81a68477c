"""The iptables and ipset renderers of the rule-set model, against golden files.

Golden files under tests/golden/model/ are what iptables-save prints back for each
rendering (tests/privileged/test_render_kernel.py loads them into a namespace and
compares). Regenerate them after an intended change with
FWBENCH_UPDATE_GOLDEN=1 pytest tests/unit/test_render_iptables.py, then review the
diff and run the privileged test.
"""
import sys
from pathlib import Path

import pytest

from fwbench.ruleset.model import (ACCEPT, CLIENT, DROP, RETURN, SERVER, Action, Chain,
                                   HashLimit, Iface, Interfaces, Limit, Match, Ports, Prefix,
                                   Rule, RuleSet, RuleSetError, Set, SetRef, StringMatch,
                                   Table, Unsupported, jump, validate)
from fwbench.ruleset.render import ipset
from fwbench.ruleset.render import iptables as ipt
from fwbench.ruleset.templates.seed000 import seed000

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.iptables_text import by_table  # noqa: E402

GOLDEN = Path(__file__).parent.parent / "golden"
IFS = Interfaces("fwb000000-f0", "fwb000000-f1")


# --- the old renderers' golden files: the new renderers write the same kernel state --

def test_seed000_linear_matches_the_old_golden_file_without_ids():
    text = ipt.render(seed000(5), IFS, 4)
    assert ipt.strip_ids(text) == (GOLDEN / "seed000-n5-iptables-linear.rules").read_text()
    assert '-m comment --comment "fwb:allow-5" -j ACCEPT' in text


def test_seed000_set_matches_the_old_golden_files_without_ids():
    rs = seed000(5, layout="set")
    assert ipt.strip_ids(ipt.render(rs, IFS, 4)) == \
        (GOLDEN / "seed000-n5-iptables-ipset.rules").read_text()
    assert ipset.render(rs) == (GOLDEN / "seed000-n5-ipset.restore").read_text()


def test_seed000_has_nothing_for_the_other_version():
    assert ipt.render(seed000(5), IFS, 6) == ""
    assert ipt.render(seed000(5, version=6), IFS, 4) == ""


def test_seed000_ipv6_set():
    rs = seed000(3, version=6, layout="set")
    assert ipset.render(rs).splitlines() == [
        "create fwb_allowed hash:ip,port family inet6 hashsize 1024 maxelem 65536",
        "add fwb_allowed 2001:2:0:2::2,tcp:40000",
        "add fwb_allowed 2001:2:0:2::2,tcp:40001",
        "add fwb_allowed 2001:2:0:2::2,udp:5201",
    ]
    assert "-A fwb_from_client -m set --match-set fwb_allowed dst,dst " \
        '-m comment --comment "fwb:allowed" -j ACCEPT' in ipt.render(rs, IFS, 6)


# --- a rich rule set: every construct the renderer writes ---------------------------

def _r(rid, action=ACCEPT, **match) -> Rule:
    comment = match.pop("comment", None)
    return Rule(rid, Match(**match), action, comment=comment)


def _one(rule=None, *, chain=None, family="ip", sets=(), extra=()) -> RuleSet:
    """A rule set of one table: `chain` (else a forward chain holding `rule`)."""
    chain = chain or Chain("forward", (rule,), hook="forward")
    return validate(RuleSet("t", (Table(family, "t", (chain, *extra), sets),),
                            ipt_prefix="fwb_"))


def rich() -> RuleSet:
    """Filter, nat, mangle and raw chains, user chains with jump, goto and return,
    conntrack, marks, negations, port ranges and lists, sets (sized, counting),
    limits, hashlimits, payload strings, `-j CT`, logging, and IPv6 through a family
    ip6 table and a family inet table."""
    tcp, udp = "tcp", "udp"
    main = Table("ip", "main", (
        Chain("raw_pre", (
            _r("notrack-dns", Action("notrack"), src=Prefix.of("198.18.0.0/24"),
               proto=udp, dport=Ports.of(53)),
            _r("ct-icmp", Action("ct"), proto="icmp"),
        ), hook="prerouting", priority=-300),
        Chain("mangle_fwd", (
            _r("mark-web", Action("mark", mark=0x1), iif=Iface(CLIENT), proto=tcp,
               dport=Ports.of(80)),
            _r("mark-bits", Action("mark", mark=0x20, mark_mask=0xF0), mark=(0x1, 0xFF)),
            _r("log-marked", Action("log", log_prefix="fwb marked: "),
               mark=(0x2, 0xFFFFFFFF), mark_negate=True),
            _r("count-all", Action("counter")),
        ), hook="forward", priority=-150),
        Chain("dnat", (
            _r("dnat-port", Action("dnat", addr="198.19.0.2", port=5001),
               dst=Prefix.of("198.19.0.1"), proto=tcp, dport=Ports.of(5000)),
            _r("dnat-addr", Action("dnat", addr="198.19.0.3"), dst=Prefix.of("198.19.0.4")),
        ), hook="prerouting", priority=-100, type="nat"),
        Chain("snat", (
            _r("snat-src", Action("snat", addr="198.19.0.1"), oif=Iface(SERVER),
               src=Prefix.of("198.18.0.0/15")),
            _r("masq", Action("masquerade"), oif=Iface("fwbx+")),
        ), hook="postrouting", priority=100, type="nat"),
        Chain("forward", (
            _r("established", ct_state=frozenset({"established", "related"})),
            _r("invalid", DROP, ct_state=frozenset({"invalid", "untracked", "new"}),
               iif=Iface(CLIENT, negate=True), oif=Iface(SERVER, negate=True)),
            _r("to-client", jump("from_client"), iif=Iface(CLIENT)),
            _r("to-server", Action("goto", chain="from_server"), iif=Iface(SERVER)),
        ), hook="forward", policy="drop"),
        Chain("from_client", (
            _r("not-ours", DROP, src=Prefix.of("198.18.0.0/24", negate=True)),
            _r("port-range", proto=tcp, sport=Ports.of((1024, 65535)),
               dport=Ports.of((8000, 8080))),
            _r("port-list", dst=Prefix.of("198.19.0.0/24"), proto=udp,
               dport=Ports.of(53, (60000, 60010), 123)),
            _r("port-lists", DROP, proto=tcp, sport=Ports.of(1, 2, negate=True),
               dport=Ports.of(3, (4, 5))),
            _r("not-port", DROP, proto=udp, dport=Ports.of(9, negate=True)),
            _r("set-allowed", sets=(SetRef("allowed", ("daddr", "proto", "dport")),)),
            _r("set-blocked", Action("reject", reject_with="icmp-admin-prohibited"),
               sets=(SetRef("blocked", ("saddr",), negate=True),)),
            _r("rate", limit=Limit(10), proto="icmp", icmp_type=8),
            _r("rate-burst", limit=Limit(60, "minute", 7), proto="icmp", icmp_type=0),
            _r("payload", DROP, proto=udp, string=StringMatch("foo.com")),
            _r("payload-quoted", DROP, string=StringMatch('say "hi" \\ it\'s', "kmp")),
            _r("flood-16", DROP, proto=udp, hashlimit=HashLimit("flood", 1000, src_prefix=16)),
            _r("flood-min", DROP, hashlimit=HashLimit("slow", 60, "minute", 9)),
            _r("commented", comment="web servers", dst=Prefix.of("198.19.1.0/24")),
            _r("quoted", comment='say "hi"', dst=Prefix.of("198.19.2.1")),
            _r("reset", Action("reject", reject_with="tcp-reset"), proto=tcp),
            _r("reject", Action("reject")),
        )),
        Chain("from_server", (
            _r("common", jump("common")),
            _r("back", RETURN, dst=Prefix.of("198.18.9.9")),
        )),
        Chain("common", (
            _r("common-return", RETURN, proto=udp),
            _r("common-log", Action("log")),
        )),
    ), (
        Set("allowed", ("addr", "proto", "port"),
            (("198.19.0.2", "tcp", 40000), ("198.19.0.2", "udp", 5201)), size=1000),
        Set("blocked", ("addr",), (("198.18.7.0/24",), ("198.18.8.1",)), interval=True,
            counters=True),
    ))
    v6 = Table("ip6", "six", (
        Chain("forward", (
            _r("ping6", proto="icmpv6", icmp_type=128),
            _r("web6", dst=Prefix.of("2001:2:0:2::/64"), proto=tcp, dport=Ports.of(443)),
            _r("set6", sets=(SetRef("allowed6", ("daddr", "proto", "dport")),)),
            _r("reject6", Action("reject", reject_with="icmp-admin-prohibited"),
               src=Prefix.of("2001:2:0:9::/64")),
            _r("flood6", DROP, proto=udp, hashlimit=HashLimit("flood6", 500, burst=10,
                                                              src_prefix=64)),
        ), hook="forward", policy="drop"),
        Chain("masq6", (
            _r("masq6", Action("masquerade"), oif=Iface(SERVER)),
            _r("snat6", Action("snat", addr="2001:2:0:2::1", port=4000), proto=udp),
        ), hook="postrouting", priority=100, type="nat"),
        Chain("dnat6", (
            _r("dnat6", Action("dnat", addr="2001:2:0:2::2", port=5001),
               dst=Prefix.of("2001:2:0:2::1"), proto=tcp, dport=Ports.of(5000)),
        ), hook="prerouting", priority=-100, type="nat"),
    ), (
        Set("allowed6", ("addr", "proto", "port"), (("2001:2:0:2::2", "udp", 5201),),
            version=6),
    ))
    both = Table("inet", "both", (
        Chain("input", (
            _r("in-v4", src=Prefix.of("198.18.0.2")),
            _r("in-v6", src=Prefix.of("2001:2:0:1::2")),
            _r("in-icmp", proto="icmp"),
            _r("in-icmpv6", proto="icmpv6"),
            _r("in-ssh", proto=tcp, dport=Ports.of(22)),
            _r("in-telnet", DROP, proto=tcp, dport=Ports.of(23),
               hashlimit=HashLimit("telnet", 3, "hour", 1)),
            _r("in-log", jump("log_drop")),
        ), hook="input"),
        Chain("log_drop", (
            _r("log-drop-log", Action("log", log_prefix="dropped")),
            _r("log-drop", DROP),
        )),
        Chain("raw_out", (
            _r("notrack-out", Action("notrack"), proto=udp, sport=Ports.of(123)),
        ), hook="output", priority=-300),
    ))
    return validate(RuleSet("rich", (main, v6, both), ipt_prefix="fwb_"))


GOLDEN_CASES = {"rich-ip4.rules": lambda: ipt.render(rich(), IFS, 4),
                "rich-ip6.rules": lambda: ipt.render(rich(), IFS, 6),
                "rich.ipset": lambda: ipset.render(rich())}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden(name, golden):
    golden(GOLDEN / "model" / name, GOLDEN_CASES[name]())


def test_rich_passes_refuse_unsupported():
    ipt.refuse_unsupported(rich())


def test_every_rule_is_rendered_once_per_version_it_applies_to():
    rs = rich()
    ids4 = [ipt.rule_id(ln) for ln in ipt.render(rs, IFS, 4).splitlines()]
    ids6 = [ipt.rule_id(ln) for ln in ipt.render(rs, IFS, 6).splitlines()]
    ids4, ids6 = [i for i in ids4 if i], [i for i in ids6 if i]
    family_of = {r.id: t.family for t, _, r in rs.rules()}
    assert len(set(ids4)) == len(ids4) and len(set(ids6)) == len(ids6)
    assert {i for i, f in family_of.items() if f == "ip"} <= set(ids4)
    assert {i for i, f in family_of.items() if f == "ip6"} <= set(ids6)
    # inet: rules pinned to one version appear only in that version's rendering.
    assert "in-v4" in ids4 and "in-v4" not in ids6
    assert "in-v6" in ids6 and "in-v6" not in ids4
    assert "in-icmp" in ids4 and "in-icmp" not in ids6
    assert "in-icmpv6" in ids6 and "in-icmpv6" not in ids4
    assert "in-ssh" in ids4 and "in-ssh" in ids6
    assert set(ids4) | set(ids6) == set(family_of)


def test_tables_in_restore_order_with_all_builtin_chains():
    text = ipt.render(rich(), IFS, 4)
    assert [ln for ln in text.splitlines() if ln.startswith("*")] == \
        ["*raw", "*mangle", "*nat", "*filter"]
    blocks = by_table(text)
    assert [ln for ln in blocks["raw"] if ln.startswith(":")] == \
        [":PREROUTING ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
    assert [ln for ln in blocks["filter"] if ln.startswith(":")] == [
        ":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT ACCEPT [0:0]",
        # user chains sorted by name, as iptables-save lists them
        ":fwb_common - [0:0]", ":fwb_from_client - [0:0]", ":fwb_from_server - [0:0]",
        ":fwb_log_drop - [0:0]"]
    assert text.count("COMMIT") == 4


@pytest.mark.parametrize("rule, text", [
    (_r("x", src=Prefix.of("198.18.0.0/24", negate=True), iif=Iface("eth0", negate=True),
        proto="tcp", dport=Ports.of((1000, 2000), negate=True)),
     '-A FORWARD ! -s 198.18.0.0/24 ! -i eth0 -p tcp -m tcp ! --dport 1000:2000 '
     '-m comment --comment "fwb:x" -j ACCEPT'),
    (_r("x", dst=Prefix.of("198.19.0.2"), oif=Iface("fwbx+"), proto="udp",
        sport=Ports.of(5), dport=Ports.of(1, (2, 5), 7)),
     '-A FORWARD -d 198.19.0.2/32 -o fwbx+ -p udp -m udp --sport 5 -m multiport '
     '--dports 1,2:5,7 -m comment --comment "fwb:x" -j ACCEPT'),
    (_r("x", proto="tcp", dport=Ports.of((0, 65535))),
     '-A FORWARD -p tcp -m comment --comment "fwb:x" -j ACCEPT'),
    (_r("x", dst=Prefix.of("0.0.0.0/0")), '-A FORWARD -m comment --comment "fwb:x" -j ACCEPT'),
    (_r("x", ct_state=frozenset({"established", "related"})),
     '-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "fwb:x" '
     '-j ACCEPT'),
    (_r("x", Action("mark", mark=1), mark=(1, 0xFF)),
     '-A FORWARD -m mark --mark 0x1/0xff -m comment --comment "fwb:x" '
     '-j MARK --set-xmark 0x1/0xffffffff'),
    (_r("x", limit=Limit(10, "second", 5)),
     '-A FORWARD -m limit --limit 10/sec -m comment --comment "fwb:x" -j ACCEPT'),
    (_r("x", limit=Limit(24, "day", 8)),
     '-A FORWARD -m limit --limit 1/hour --limit-burst 8 -m comment --comment "fwb:x" '
     '-j ACCEPT'),
    (_r("x", limit=Limit(25, "minute")),
     '-A FORWARD -m limit --limit 25/min -m comment --comment "fwb:x" -j ACCEPT'),
    (_r("x", limit=Limit(1, "day", 1)),
     '-A FORWARD -m limit --limit 1/day --limit-burst 1 -m comment --comment "fwb:x" '
     '-j ACCEPT'),
    (_r("x", Action("counter"), comment="plain_text-1"),
     '-A FORWARD -m comment --comment plain_text-1 -m comment --comment "fwb:x"'),
    (Rule('it\'s "q"\\', Match(), Action("log", log_prefix="a b")),
     '-A FORWARD -m comment --comment "fwb:it\\\'s \\"q\\"\\\\" -j LOG --log-prefix "a b"'),
    (_r("x", Action("reject")),
     '-A FORWARD -m comment --comment "fwb:x" -j REJECT --reject-with icmp-port-unreachable'),
])
def test_rule_lines(rule, text):
    lines = ipt.render(_one(rule), IFS, 4).splitlines()
    assert lines[4] == text
    assert ipt.rule_id(text) == rule.id
    assert " -m comment --comment \"fwb:" not in ipt.strip_ids(text)


def test_rule_id_and_strip_ids():
    assert ipt.rule_id('-A X -m comment --comment "fwb:a b" -j ACCEPT') == "a b"
    assert ipt.rule_id('-A X -m comment --comment "fwb:a\\"b" -j ACCEPT') == 'a"b'
    assert ipt.rule_id('-A X -m comment --comment "fwb:a\\\'b"') == "a'b"
    assert ipt.rule_id("-A X -m comment --comment user -j ACCEPT") is None
    assert ipt.rule_id(":X - [0:0]") is None
    line = '-A X -m comment --comment "user" -m comment --comment "fwb:a\\"b" -j ACCEPT'
    assert ipt.rule_id(line) == 'a"b'
    assert ipt.strip_ids(line) == '-A X -m comment --comment "user" -j ACCEPT'


def test_by_table_ignores_order_comments_and_chain_counters():
    save = ("# Generated by iptables-save\n*nat\n:PREROUTING ACCEPT [3:180]\nCOMMIT\n"
            "# Completed\n*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j ACCEPT\nCOMMIT\n")
    assert by_table(save) == {"nat": [":PREROUTING ACCEPT [0:0]"],
                                  "filter": [":INPUT ACCEPT [0:0]", "-A INPUT -j ACCEPT"]}


def test_quote_as_iptables_save():
    assert ipt.quote("abc_-9") == "abc_-9"
    assert ipt.quote("") == '""'
    assert ipt.quote("a b") == '"a b"'
    assert ipt.quote("it's \"x\" \\") == '"it\\\'s \\"x\\" \\\\"'


def test_reject_names_per_version():
    for w, four, six in [(None, "icmp-port-unreachable", "icmp6-port-unreachable"),
                         ("icmp-admin-prohibited", "icmp-admin-prohibited",
                          "icmp6-adm-prohibited"),
                         ("icmp6-no-route", "icmp-net-unreachable", "icmp6-no-route")]:
        rs = validate(RuleSet("t", (Table("inet", "t", (Chain("input", (
            Rule("x", action=Action("reject", reject_with=w)),), hook="input"),)),)))
        assert ipt.render(rs, IFS, 4).splitlines()[4].endswith(" --reject-with " + four)
        assert ipt.render(rs, IFS, 6).splitlines()[4].endswith(" --reject-with " + six)


def test_user_chain_goes_with_the_base_chains_that_reach_it():
    rs = validate(RuleSet("t", (Table("ip", "t", (
        Chain("orphan", (Rule("o"),)),
        Chain("pre", (Rule("p", action=jump("sub")),), hook="prerouting", priority=-150),
        Chain("sub", (Rule("s", action=Action("goto", chain="subsub")),)),
        Chain("subsub", (Rule("ss", action=Action("mark", mark=3)),)),
    )),), ipt_prefix="p_"))
    blocks = by_table(ipt.render(rs, IFS, 4))
    assert list(blocks) == ["mangle"]
    assert ":p_sub - [0:0]" in blocks["mangle"] and ":p_subsub - [0:0]" in blocks["mangle"]
    # Reached from nothing: the table of its model table's first base chain.
    assert ":p_orphan - [0:0]" in blocks["mangle"]


# --- what iptables cannot hold: Unsupported, naming the feature and where ------------

@pytest.mark.parametrize("rs, feature, where", [
    (_one(chain=Chain("ing", (Rule("x"),), hook="ingress"), family="netdev"),
     "family netdev", "table t"),
    (_one(chain=Chain("rt", (Rule("x"),), hook="output", type="route")),
     "chain type route", "chain rt"),
    (_one(chain=Chain("f", (Rule("x"),), hook="forward", priority=10)),
     "priority 10", "chain f"),
    (_one(chain=Chain("n", (Rule("x"),), hook="forward", type="nat")),
     "hook forward in table nat", "chain n"),
    (_one(chain=Chain("r", (Rule("x"),), hook="forward", priority=-300)),
     "hook forward in table raw", "chain r"),
    (_one(chain=Chain("n", (Rule("x"),), hook="prerouting", type="nat", policy="drop")),
     "policy drop in table nat", "chain n"),
    (_one(Rule("x"), extra=(Chain("f2", (Rule("y"),), hook="forward"),)),
     "two base chains at filter FORWARD", "chain f2"),
    (_one(Rule("x", action=Action("notrack"))), "notrack in table filter", "rule x"),
    (_one(chain=Chain("m", (Rule("x", action=Action("reject")),), hook="forward",
                      priority=-150)), "reject in table mangle", "rule x"),
    (_one(Rule("x", action=Action("dnat", addr="198.19.0.2"))), "dnat in table filter",
     "rule x"),
    (_one(chain=Chain("n", (Rule("x", action=Action("dnat", addr="198.19.0.2")),),
                      hook="postrouting", type="nat")), "dnat in hook postrouting", "rule x"),
    (_one(chain=Chain("n", (Rule("x", action=jump("u")),), hook="input", type="nat"),
          extra=(Chain("u", (Rule("y", action=Action("masquerade")),)),)),
     "masquerade in hook input", "rule y"),
    (_one(chain=Chain("n", (Rule("x", action=DROP),), hook="prerouting", type="nat")),
     "drop in table nat", "rule x"),
    (_one(chain=Chain("o", (Rule("x", Match(iif=Iface("eth0"))),), hook="output")),
     "iif in hook output", "rule x"),
    (_one(chain=Chain("p", (Rule("x", Match(oif=Iface("eth0"))),), hook="prerouting",
                      priority=-150)), "oif in hook prerouting", "rule x"),
    (_one(Rule("x", Match(proto="tcp", dport=Ports.of(*range(1, 17))))),
     "port list of more than 15 ports", "rule x"),
    (_one(Rule("x", Match(proto="tcp", dport=Ports.of((0, 65535), negate=True)))),
     "negated full port range", "rule x"),
    (_one(Rule("x", Match(dst=Prefix.of("0.0.0.0/0", negate=True)))),
     "negated daddr /0", "rule x"),
    (_one(Rule("x", Match(proto="icmp", icmp_type=255))), "icmp type 255", "rule x"),
    (_one(Rule("x", Match(limit=Limit(10001)))), "limit faster than 10000/second",
     "rule x"),
    # xt_limit holds a whole period of 1/10000 s: 10000/1023 is none (nft holds
    # 1023/second as it is).
    (_one(Rule("x", Match(limit=Limit(1023)))),
     "limit rate 1023/second (iptables holds a period of 1/10000 s units: 10000/1023 is "
     "not whole)", "rule x"),
    # A whole period, 192/10000 s, that save prints as 52/sec: iptables-nft holds
    # that, 52/second.
    (_one(Rule("x", Match(limit=Limit(3125, "minute")))),
     "limit rate 3125/minute (iptables-save prints it as 52/sec)", "rule x"),
    # xt_limit's 32-bit credits: a burst of two packets a day overflows them.
    (_one(Rule("x", Match(limit=Limit(1, "day", 2)))),
     "limit burst 2 at 1/day (xt_limit's credits overflow)", "rule x"),
    (_one(Rule("x", Match(limit=Limit(17, "minute")))),
     "limit rate 17/minute (iptables holds a period of 1/10000 s units: 600000/17 is "
     "not whole)", "rule x"),
    (_one(Rule("x", Match(hashlimit=HashLimit("h", 7, "hour")))),
     "hashlimit rate 7/hour (iptables holds a period of 1/1000000 s units: 3600000000/7 "
     "is not whole)", "rule x"),
    (_one(Rule("x", action=Action("log", log_prefix="x" * 30))),
     "log prefix longer than 29 characters", "rule x"),
    (_one(Rule("x", comment="c" * 256)), "comment longer than 255 characters", "rule x"),
    (_one(Rule("x", action=Action("reject", reject_with="tcp-reset"))),
     "reject with tcp-reset without proto tcp", "rule x"),
    (_one(Rule("x", action=Action("reject", reject_with="icmp-bogus"))),
     "reject with icmp-bogus", "rule x"),
    (_one(Rule("x", Match(random=3))),
     "random match finer than the statistic's 2**-31", "rule x"),
    (_one(Rule("x", Match(iif=Iface("a-very-long-interface")))),
     "interface name 'a-very-long-interface'", "rule x"),
    # A longer ASCII name is shortened (its head and a hash); others are refused.
    (_one(chain=Chain("\u00e7" * 15, (Rule("x"),))), "chain name longer than 28 characters",
     "chain " + "\u00e7" * 15),
    (_one(Rule("x", Match(sets=(SetRef("s", ("daddr", "dport")),))),
          sets=(Set("s", ("addr", "port"), (("198.19.0.2", 80),)),)),
     "set addr . port", "set s"),
    (_one(Rule("x", Match(sets=(SetRef("s", ("daddr", "dport", "proto")),))),
          sets=(Set("s", ("addr", "proto", "port")),)),
     "set lookup by daddr . dport . proto", "rule x"),
    (_one(chain=Chain("r", (Rule("x", action=jump("u")),), hook="prerouting",
                      priority=-300),
          extra=(Chain("f", (Rule("y", action=jump("u")),), hook="forward"),
                 Chain("u", (Rule("z"),)))),
     "user chain reached from tables raw and filter", "chain u"),
    (_one(Rule("x"), extra=(
        Chain("m", (Rule("y", action=jump("u")),), hook="prerouting", priority=-150),
        Chain("orphan", (Rule("z", action=jump("u")),)), Chain("u", (Rule("w"),)))),
     "jump from table filter to table mangle", "chain orphan"),
    (_one(Rule("x", action=Action("ct"))), "ct in table filter", "rule x"),
    (_one(Rule("x", Match(string=StringMatch("x" * 129)))),
     "string match longer than 128 bytes", "rule x"),
    (_one(Rule("x", Match(string=StringMatch("tab\there")))),
     "string match of a byte that is not printable ASCII", "rule x"),
    (_one(Rule("x", Match(hashlimit=HashLimit("a-long-hashlimit", 10)))),
     "hashlimit name 'fwb_a-long-hashlimit' (at most 15 letters, digits, _ and -)",
     "rule x"),
    (_one(Rule("x", Match(hashlimit=HashLimit("h", 1_000_001)))),
     "hashlimit faster than 1000000/second", "rule x"),
])
def test_unsupported(rs, feature, where):
    with pytest.raises(Unsupported) as e:
        ipt.refuse_unsupported(rs)
    assert (e.value.feature, e.value.where) == (feature, where)
    assert str(e.value) == f"unsupported: {feature} ({where})"


def test_unsupported_is_raised_by_render_too():
    rs = _one(Rule("x", action=Action("notrack")))
    with pytest.raises(Unsupported,
                       match=r"^unsupported: notrack in table filter \(rule x\)$"):
        ipt.render(rs, IFS, 4)


def test_check_reports_a_feature_iptables_lacks_in_features_order():
    rs = _one(chain=Chain("ing", (Rule("x"),), hook="ingress"), family="netdev")
    assert "family netdev" not in ipt.SUPPORTS and "hook ingress" not in ipt.SUPPORTS
    with pytest.raises(Unsupported) as e:
        ipt.refuse_unsupported(rs)
    assert e.value.feature == "family netdev"


def test_an_ipv6_rule_in_an_ip_table_is_an_error():
    rs = _one(Rule("x", Match(dst=Prefix.of("2001:2::1"))))
    with pytest.raises(RuleSetError, match="rule x"):
        ipt.render(rs, IFS, 4)


def test_payload_strings_as_save_prints_them():
    """save quotes a string match always, escaping `"` and `\\` only; the rest of
    the line (the id after it) is untouched by what the string holds."""
    for text, printed in (("foo", '"foo"'), ("a b", '"a b"'), ("it's", '"it\'s"'),
                          ('"x" \\', '"\\"x\\" \\\\"')):
        line = ipt.render(_one(Rule("x", Match(string=StringMatch(text, "kmp")))), IFS, 4)
        assert f" -m string --string {printed} --algo kmp " \
            '-m comment --comment "fwb:x" -j ACCEPT' in line, line


def test_hashlimit_rates_in_the_unit_save_prints():
    def line(**kw):
        rs = _one(Rule("x", Match(hashlimit=HashLimit("h", **kw)), DROP))
        return ipt.render(rs, IFS, 4).splitlines()[-2]
    assert "--hashlimit-above 1000/sec --hashlimit-burst 5 --hashlimit-mode srcip " \
        "--hashlimit-name fwb_h -m comment" in line(rate=1000)
    # 60/minute is kept as one per second; save would add the entries' expiry if the
    # rendering said /min.
    assert "--hashlimit-above 1/sec --hashlimit-burst 2 " in line(rate=60, per="minute",
                                                                   burst=2)
    assert "--hashlimit-above 9/hour " in line(rate=9, per="hour")
    # The source mask only when it is not the whole address.
    assert "--hashlimit-srcmask 16 " in line(rate=1, src_prefix=16)
    assert "srcmask" not in line(rate=1, src_prefix=32)
    with pytest.raises(RuleSetError, match="rule x: hashlimit source prefix /64 in an IPv4"):
        line(rate=1, src_prefix=64)


def test_supports_uses_the_features_vocabulary():
    used = set(rich().features())
    assert used <= ipt.SUPPORTS
    assert {"family netdev", "hook ingress", "chain type route"}.isdisjoint(ipt.SUPPORTS)


# --- ipset ---------------------------------------------------------------------------------

def test_ipset_types_and_sizes():
    big = tuple(("198.19.0.2", proto, p) for proto in ("tcp", "udp")
                for p in range(1, 35001))
    rs = _one(Rule("x"), sets=(
        Set("ips", ("addr",), (("198.19.0.2",), ("198.19.0.3",))),
        Set("nets", ("addr",), (("198.18.0.0/24",), ("198.18.1.1/32",)), interval=True),
        Set("netports", ("addr", "proto", "port"), (("198.18.0.0/24", "udp", 53),),
            interval=True),
        Set("big", ("addr", "proto", "port"), big),
    ))
    lines = ipset.render(rs).splitlines()
    assert lines[:7] == [
        "create fwb_ips hash:ip family inet hashsize 1024 maxelem 65536",
        "add fwb_ips 198.19.0.2",
        "add fwb_ips 198.19.0.3",
        "create fwb_nets hash:net family inet hashsize 1024 maxelem 65536",
        "add fwb_nets 198.18.0.0/24",
        "add fwb_nets 198.18.1.1",
        "create fwb_netports hash:net,port family inet hashsize 1024 maxelem 65536",
    ]
    assert "create fwb_big hash:ip,port family inet hashsize 1024 maxelem 70000" in lines


@pytest.mark.parametrize("s, feature", [
    (Set("s", ("addr", "port"), (("198.19.0.2", 80),)), "set addr . port"),
    (Set("s", ("port",), ((80,),)), "set port"),
    (Set("s", ("addr", "proto", "port"), (("198.19.0.2", "icmp", 8),)),
     "set element protocol icmp"),
    (Set("s" * 30, ("addr",)), "set name longer than 31 characters"),
])
def test_ipset_unsupported(s, feature):
    rs = _one(Rule("x"), sets=(s,))
    with pytest.raises(Unsupported) as e:
        ipset.render(rs)
    assert (e.value.feature, e.value.where) == (feature, f"set {s.name}")


def test_ipset_name_clash_between_tables():
    s = Set("s", ("addr",))
    rs = validate(RuleSet("t", (Table("ip", "a", (), (s,)), Table("ip6", "b", (), (s,))),
                          ipt_prefix="fwb_"))
    with pytest.raises(Unsupported, match="set name fwb_s in two tables"):
        ipset.refuse_unsupported(rs)


def test_ipset_refuses_an_element_of_the_other_version():
    rs = _one(Rule("x"), sets=(Set("s", ("addr",), (("2001:2::1",),)),))
    with pytest.raises(RuleSetError, match="set s"):
        ipset.render(rs)
