"""The reference evaluator against hand-built rule sets with known answers, and
against seed 000's probes."""
import random

import pytest

from fwbench.ruleset import evaluate as E
from fwbench.ruleset.evaluate import Evaluator, Verdict, evaluate, evaluate_all, expected_counts
from fwbench.ruleset.model import (ACCEPT, CLIENT, DROP, RETURN, SERVER, Action, Chain,
                                   Iface, Limit, Match, Packet, Ports, Prefix, Rule, RuleSet,
                                   RuleSetError, Set, SetRef, Table, jump, validate)
from fwbench.ruleset.templates.seed000 import seed000


def ruleset(*tables: Table) -> RuleSet:
    return validate(RuleSet("test", tables))


def table(*chains: Chain, family: str = "ip", name: str = "t", sets=()) -> Table:
    return Table(family, name, chains, tuple(sets))


def base(name: str, *rules: Rule, hook: str = "forward", priority: int = 0,
         policy: str = "accept", type: str = "filter", device: str | None = None) -> Chain:
    return Chain(name, rules, hook=hook, priority=priority, type=type, policy=policy,
                 device=device)


def user(name: str, *rules: Rule) -> Chain:
    return Chain(name, rules)


def pkt(proto: str = "udp", dport: int | None = 5201, *, version: int = 4,
        iif: str = "client", saddr: str | None = None, daddr: str | None = None,
        sport: int | None = 40404, icmp: int | None = None, mark: int = 0,
        ct: str = "new") -> Packet:
    if proto in ("icmp", "icmpv6"):
        sport = dport = None
        icmp = (8 if version == 4 else 128) if icmp is None else icmp
    side = {"client": ("198.18.0.2", "198.19.0.2"), "server": ("198.19.0.2", "198.18.0.2")}
    side6 = {"client": ("2001:2:0:1::2", "2001:2:0:2::2"),
             "server": ("2001:2:0:2::2", "2001:2:0:1::2")}
    s, d = (side if version == 4 else side6)[iif]
    return Packet(version, iif, saddr or s, daddr or d, proto, sport, dport, icmp, mark, ct)


def tcp(dport: int, **kw) -> Match:
    return Match(proto="tcp", dport=Ports.of(dport), **kw)


def udp(dport: int, **kw) -> Match:
    return Match(proto="udp", dport=Ports.of(dport), **kw)


# --- within a chain ------------------------------------------------------------------------

def test_first_match_decides_and_counts_only_what_matched():
    rs = ruleset(table(base("fwd",
                            Rule("r1", tcp(80), DROP),
                            Rule("r2", Match(proto="udp"), ACCEPT),
                            Rule("r3", Match(), DROP))))
    v = evaluate(rs, pkt("udp", 5201))
    assert v == Verdict(True, "r2", None, ("r2",), pkt("udp", 5201), "accepted by rule r2")
    v = evaluate(rs, pkt("tcp", 80))
    assert (v.forward, v.decided_by, v.counted, v.reason) == \
        (False, "r1", ("r1",), "dropped by rule r1")
    v = evaluate(rs, pkt("tcp", 81))
    assert (v.forward, v.decided_by, v.counted) == (False, "r3", ("r3",))


def test_non_terminal_rules_count_and_continue():
    rs = ruleset(table(base("fwd",
                            Rule("count", Match(), Action("counter")),
                            Rule("log", Match(proto="udp"), Action("log", log_prefix="x")),
                            Rule("other", Match(proto="tcp"), Action("counter")),
                            Rule("ok", Match(), ACCEPT),
                            Rule("never", Match(), DROP), policy="drop")))
    v = evaluate(rs, pkt())
    assert v.forward and v.decided_by == "ok"
    assert v.counted == ("count", "log", "ok")


def test_jump_returns_to_the_rule_after_it():
    rs = ruleset(table(
        base("fwd",
             Rule("j", Match(proto="tcp"), jump("sub")),
             Rule("after", Match(), ACCEPT), policy="drop"),
        user("sub",
             Rule("ret", tcp(80), RETURN),
             Rule("deny", tcp(81), DROP),
             Rule("count", Match(), Action("counter")))))
    v = evaluate(rs, pkt("tcp", 80))
    assert v.forward and v.counted == ("j", "ret", "after") and v.decided_by == "after"
    v = evaluate(rs, pkt("tcp", 81))
    assert not v.forward and v.counted == ("j", "deny") and v.decided_by == "deny"
    # Falling off the user chain returns too.
    v = evaluate(rs, pkt("tcp", 82))
    assert v.forward and v.counted == ("j", "count", "after")
    # A packet the jump does not match never enters the chain.
    assert evaluate(rs, pkt("udp", 80)).counted == ("after",)


def test_goto_does_not_come_back():
    def rs_with(kind: str) -> RuleSet:
        return ruleset(table(
            base("fwd",
                 Rule("go", Match(), Action(kind, chain="sub")),
                 Rule("after", Match(), ACCEPT), policy="drop"),
            user("sub", Rule("deny", tcp(80), DROP))))

    v = evaluate(rs_with("goto"), pkt("tcp", 81))
    assert not v.forward and v.decided_by is None and v.policy_of == "fwd"
    assert v.counted == ("go",) and v.reason == "policy drop of chain fwd"
    v = evaluate(rs_with("jump"), pkt("tcp", 81))
    assert v.forward and v.counted == ("go", "after")


def test_goto_from_a_jumped_chain_returns_to_the_jump():
    rs = ruleset(table(
        base("fwd",
             Rule("j", Match(), jump("a")),
             Rule("after", Match(), ACCEPT), policy="drop"),
        user("a", Rule("g", Match(), Action("goto", chain="b")),
             Rule("a-skipped", Match(), DROP)),
        user("b", Rule("b-ret", Match(proto="udp"), RETURN),
             Rule("b-deny", tcp(80), DROP))))
    assert evaluate(rs, pkt("udp")).counted == ("j", "g", "b-ret", "after")
    assert evaluate(rs, pkt("tcp", 81)).counted == ("j", "g", "after")
    v = evaluate(rs, pkt("tcp", 80))
    assert not v.forward and v.decided_by == "b-deny"


def test_return_in_a_base_chain_applies_its_policy():
    rs = ruleset(table(base("fwd", Rule("ret", Match(), RETURN),
                            Rule("ok", Match(), ACCEPT), policy="drop")))
    v = evaluate(rs, pkt())
    assert (v.forward, v.decided_by, v.policy_of, v.counted) == (False, None, "fwd", ("ret",))


def test_policies():
    drop = ruleset(table(base("FORWARD", policy="drop")))
    v = evaluate(drop, pkt())
    assert (v.forward, v.decided_by, v.policy_of, v.reason) == \
        (False, None, "FORWARD", "policy drop of chain FORWARD")
    accept = ruleset(table(base("FORWARD", Rule("x", tcp(1), DROP))))
    v = evaluate(accept, pkt())
    assert (v.forward, v.decided_by, v.policy_of, v.counted) == (True, None, "FORWARD", ())
    assert v.reason == "policy accept of chain FORWARD"
    none = ruleset(table(base("in", Rule("x", Match(), DROP), hook="input")))
    v = evaluate(none, pkt())
    assert v.forward and v.counted == () and v.decided_by is None and v.policy_of is None


def test_reject_drops():
    rs = ruleset(table(base("fwd", Rule("rej", tcp(23), Action("reject",
                                                               reject_with="tcp-reset")))))
    v = evaluate(rs, pkt("tcp", 23))
    assert not v.forward and v.decided_by == "rej" and v.reason == "rejected by rule rej"


def test_limit_always_matches():
    rs = ruleset(table(base("fwd", Rule("lim", Match(limit=Limit(1, "minute", 1)), DROP))))
    assert all(not evaluate(rs, pkt(dport=p)).forward for p in range(1, 50))


# --- across chains and tables ---------------------------------------------------------------

def test_accept_ends_one_base_chain_and_the_next_table_still_drops():
    rs = ruleset(table(base("fwd", Rule("a-ok", Match(), ACCEPT)), name="a"),
                 table(base("fwd", Rule("b-deny", Match(proto="udp"), DROP), priority=10),
                       name="b"))
    v = evaluate(rs, pkt())
    assert not v.forward and v.counted == ("a-ok", "b-deny") and v.decided_by == "b-deny"
    v = evaluate(rs, pkt("tcp", 80))
    assert v.forward and v.decided_by == "a-ok" and v.counted == ("a-ok",)


def test_drop_ends_everything():
    rs = ruleset(table(base("fwd", Rule("deny", Match(), DROP)), name="a"),
                 table(base("fwd", Rule("later", Match(), Action("counter")), priority=10),
                       name="b"))
    assert evaluate(rs, pkt()).counted == ("deny",)


def test_priority_orders_chains_across_tables():
    def rs_with(mark_prio: int, deny_prio: int) -> RuleSet:
        return ruleset(
            table(base("m", Rule("set", Match(), Action("mark", mark=1)), priority=mark_prio),
                  name="marker"),
            table(base("f", Rule("deny", Match(mark=(1, 0xFFFFFFFF)), DROP),
                       priority=deny_prio), name="filter"))

    assert not evaluate(rs_with(-10, 10), pkt()).forward      # marked first, then dropped
    v = evaluate(rs_with(10, -10), pkt())
    assert v.forward and v.counted == ("set",) and v.translated.mark == 1


def test_equal_priority_runs_the_later_loaded_chain_first():
    # Measured on 6.18: of two hooks at one priority the later registered runs first.
    rs = ruleset(
        table(base("o", Rule("set", Match(), Action("mark", mark=1))), name="a"),
        table(base("o", Rule("saw-0", Match(mark=(0, 0xFFFFFFFF)), Action("counter"))),
              name="b"))
    assert evaluate(rs, pkt()).counted == ("saw-0", "set")


def test_hooks_run_in_path_order_and_input_output_never_see_forwarded_packets():
    rs = ruleset(table(
        base("post", Rule("post", Match(), Action("counter")), hook="postrouting",
             priority=-500),
        base("fwd", Rule("fwd", Match(), Action("counter")), priority=-400),
        base("pre", Rule("pre", Match(), Action("counter")), hook="prerouting", priority=300),
        base("in", Rule("in", Match(), DROP), hook="input"),
        base("out", Rule("out", Match(), DROP), hook="output")))
    v = evaluate(rs, pkt())
    assert v.forward and v.counted == ("pre", "fwd", "post")


def test_families_ip_ip6_inet_and_netdev():
    rs = ruleset(
        table(base("f", Rule("ip-deny", tcp(1), DROP)), family="ip", name="four"),
        table(base("f", Rule("ip6-deny", tcp(2), DROP)), family="ip6", name="six"),
        table(base("f", Rule("inet-deny", tcp(3), DROP)), family="inet", name="both"),
        table(base("ing", Rule("nd-deny", Match(iif=Iface(CLIENT), proto="tcp",
                                                dport=Ports.of(4)), DROP),
                   Rule("nd-oif", Match(oif=Iface(SERVER)), DROP),
                   hook="ingress", priority=0), family="netdev", name="dev"))
    for version in (4, 6):
        assert evaluate(rs, pkt("tcp", 1, version=version)).forward == (version == 6)
        assert evaluate(rs, pkt("tcp", 2, version=version)).forward == (version == 4)
        assert not evaluate(rs, pkt("tcp", 3, version=version)).forward
        v = evaluate(rs, pkt("tcp", 4, version=version))
        assert not v.forward and v.decided_by == "nd-deny"
        # Ingress knows no output interface; the server side is not ingress for iif.
        assert evaluate(rs, pkt("tcp", 4, version=version, iif="server")).forward


def test_netdev_ingress_runs_before_prerouting_raw():
    rs = ruleset(
        table(base("raw", Rule("raw", Match(), Action("counter")), hook="prerouting",
                   priority=-300), family="inet"),
        table(base("ing", Rule("ing", Match(), Action("counter")), hook="ingress",
                   priority=100), family="netdev", name="dev"))
    assert evaluate(rs, pkt()).counted == ("ing", "raw")


def test_netdev_egress_sees_packets_leaving_by_its_device_after_nat():
    """Egress runs last, on the device a packet leaves by: it knows the output
    interface and not the input one, and sees the addresses NAT gave."""
    rs = ruleset(
        table(Chain("pre", (Rule("dnat", Match(proto="tcp", dport=Ports.of(8080)),
                                 Action("dnat", addr="198.19.0.9", port=80)),),
                    hook="prerouting", priority=-100, type="nat"), family="ip", name="nat"),
        table(base("out", Rule("seen", Match(dst=Prefix.of("198.19.0.9"), proto="tcp",
                                             dport=Ports.of(80)), Action("counter")),
                   Rule("iif", Match(iif=Iface(CLIENT)), DROP),
                   Rule("deny", Match(oif=Iface(SERVER), proto="tcp", dport=Ports.of(4)), DROP),
                   hook="egress", device=SERVER),
              base("back", Rule("back", Match(proto="tcp", dport=Ports.of(5)), DROP),
                   hook="egress", device=CLIENT), family="netdev", name="dev"))
    v = evaluate(rs, pkt("tcp", 8080))
    assert v.forward and v.counted == ("dnat", "seen")
    assert not evaluate(rs, pkt("tcp", 4)).forward
    # Leaving by the client side: only packets the server side sent.
    assert evaluate(rs, pkt("tcp", 5)).forward
    assert not evaluate(rs, pkt("tcp", 5, iif="server")).forward
    with pytest.raises(RuleSetError, match="hook egress in family ip"):
        validate(ruleset(table(base("e", hook="egress"), family="ip")))


def test_a_rule_of_the_other_ip_version_never_matches():
    rs = ruleset(table(base("f",
                            Rule("v6-neg", Match(src=Prefix.of("2001:2::/48", negate=True)),
                                 DROP),
                            Rule("v6", Match(dst=Prefix.of("2001:2:0:2::2")), DROP),
                            Rule("v4", Match(dst=Prefix.of("198.19.0.2")), Action("counter"))),
                       family="inet"))
    assert evaluate(rs, pkt()).counted == ("v4",)
    assert evaluate(rs, pkt(version=6)).counted == ("v6",)


# --- matches ---------------------------------------------------------------------------------

def test_interfaces_by_role():
    rs = ruleset(table(base("f",
                            Rule("lit", Match(iif=Iface("eth0")), DROP),
                            Rule("lit-wild", Match(iif=Iface("fwb+")), DROP),
                            Rule("not-lit", Match(iif=Iface("eth0", negate=True)),
                                 Action("counter")),
                            Rule("any", Match(iif=Iface("+")), Action("counter")),
                            Rule("to-server", Match(oif=Iface(SERVER)), Action("counter")),
                            Rule("not-client", Match(iif=Iface(CLIENT, negate=True)), DROP))))
    v = evaluate(rs, pkt())
    assert v.forward and v.counted == ("not-lit", "any", "to-server")
    v = evaluate(rs, pkt(iif="server"))
    assert not v.forward and v.counted == ("not-lit", "any", "not-client")
    # With the testbed's real names, literal names match their side.
    ev = Evaluator(rs, ifnames={"client": "fwb1-f0", "server": "fwb1-f1"})
    assert ev.evaluate(pkt()).decided_by == "lit-wild"


def test_interfaces_unknown_at_a_hook_never_match_even_negated():
    rs = ruleset(table(
        base("pre", Rule("pre-oif", Match(oif=Iface(SERVER)), DROP),
             Rule("pre-not-oif", Match(oif=Iface(CLIENT, negate=True)), DROP),
             Rule("pre-iif", Match(iif=Iface(CLIENT)), Action("counter")),
             hook="prerouting"),
        # At postrouting a forwarded packet's input device is known (measured).
        base("post", Rule("post-iif", Match(iif=Iface(CLIENT)), Action("counter")),
             Rule("post-oif", Match(oif=Iface(SERVER)), Action("counter")),
             hook="postrouting")),
        table(base("out", Rule("egress-iif", Match(iif=Iface(CLIENT)), DROP),
                   Rule("egress-not-iif", Match(iif=Iface(SERVER, negate=True)), DROP),
                   hook="egress", device=SERVER), family="netdev", name="dev"))
    v = evaluate(rs, pkt())
    assert v.forward and v.counted == ("pre-iif", "post-iif", "post-oif")


def test_prefixes_ports_and_negations():
    rs = ruleset(table(base("f",
                            Rule("src", Match(src=Prefix.of("198.18.0.0/24", negate=True)),
                                 DROP),
                            Rule("ports", Match(proto="tcp", dport=Ports.of((1000, 2000), 443)),
                                 ACCEPT),
                            Rule("not-ports", Match(proto="udp",
                                                    sport=Ports.of((1, 1023), negate=True)),
                                 ACCEPT),
                            Rule("dst", Match(dst=Prefix.of("198.19.0.0/30")), DROP),
                            policy="accept")))
    assert evaluate(rs, pkt(saddr="198.18.1.2")).decided_by == "src"
    assert evaluate(rs, pkt("tcp", 80, saddr="198.18.0.255", daddr="198.19.1.1")).policy_of \
        == "f"
    for port, rule in ((999, "dst"), (1000, "ports"), (2000, "ports"), (2001, "dst"),
                       (443, "ports")):
        assert evaluate(rs, pkt("tcp", port)).decided_by == rule
    assert evaluate(rs, pkt("udp", 9, sport=1024)).decided_by == "not-ports"
    assert evaluate(rs, pkt("udp", 9, sport=1023)).decided_by == "dst"
    # A port match never matches ICMP, negated or not.
    assert evaluate(rs, pkt("icmp")).decided_by == "dst"


def test_icmp_type_and_protocol():
    rs = ruleset(table(base("f",
                            Rule("echo", Match(proto="icmp", icmp_type=8), ACCEPT),
                            Rule("echo6", Match(proto="icmpv6", icmp_type=128), ACCEPT),
                            Rule("tcp", Match(proto="tcp"), ACCEPT), policy="drop"),
                       family="inet"))
    assert evaluate(rs, pkt("icmp")).decided_by == "echo"
    assert not evaluate(rs, pkt("icmp", icmp=0)).forward
    assert evaluate(rs, pkt("icmpv6", version=6)).decided_by == "echo6"
    assert evaluate(rs, pkt("tcp", 80, version=6)).decided_by == "tcp"
    assert not evaluate(rs, pkt("udp", 80)).forward


def test_ct_state():
    rs = ruleset(table(base("f",
                            Rule("est", Match(ct_state=frozenset({"established", "related"})),
                                 ACCEPT),
                            Rule("new", Match(ct_state=frozenset({"new"}), proto="tcp"), ACCEPT),
                            policy="drop")))
    assert evaluate(rs, pkt(ct="established")).decided_by == "est"
    assert evaluate(rs, pkt(ct="related")).decided_by == "est"
    assert evaluate(rs, pkt("tcp", 80)).decided_by == "new"
    assert not evaluate(rs, pkt(ct="invalid")).forward
    assert not evaluate(rs, pkt()).forward


def test_marks_set_in_one_chain_and_matched_in_a_later_one():
    rs = ruleset(
        table(base("mangle", Rule("mark", Match(proto="tcp"),
                                  Action("mark", mark=0x10, mark_mask=0xFF)),
                   hook="prerouting", priority=-150), name="mangle"),
        table(base("f", Rule("marked", Match(mark=(0x10, 0xFF)), ACCEPT),
                   Rule("unmarked", Match(mark=(0x10, 0xFF), mark_negate=True), DROP),
                   policy="accept"), name="filter"))
    v = evaluate(rs, pkt("tcp", 80, mark=0x1FF))
    # --set-xmark: zero the mask's bits, then XOR the value in.
    assert v.decided_by == "marked" and v.translated.mark == 0x110
    assert v.counted == ("mark", "marked")
    v = evaluate(rs, pkt("udp", 80, mark=0x1FF))
    assert not v.forward and v.decided_by == "unmarked" and v.translated.mark == 0x1FF
    assert evaluate(rs, pkt("udp", 80, mark=0x310)).decided_by == "marked"


def test_sets_with_concatenations_and_intervals():
    services = Set("svc", ("addr", "proto", "port"),
                   (("198.19.0.2", "tcp", 443), ("198.19.0.3", "udp", 53),
                    ("198.19.1.0/24", "tcp", (8000, 8999))), version=4, interval=True)
    nets = Set("nets", ("addr",), (("198.18.8.0/22",), ("198.18.0.9",),
                                   ("198.18.0.100-198.18.0.102",)), version=4, interval=True)
    ports = Set("ports", ("port",), ((22,), ("6000-6010",)))
    rs = ruleset(table(
        base("f",
             Rule("svc", Match(sets=(SetRef("svc", ("daddr", "proto", "dport")),)), ACCEPT),
             Rule("nets", Match(sets=(SetRef("nets", ("saddr",)),)), ACCEPT),
             Rule("not-ports", Match(sets=(SetRef("ports", ("dport",), negate=True),)),
                  Action("counter")),
             Rule("ports", Match(sets=(SetRef("ports", ("dport",)),)), DROP),
             policy="drop"),
        sets=(services, nets, ports)))
    assert evaluate(rs, pkt("tcp", 443)).decided_by == "svc"
    assert evaluate(rs, pkt("udp", 443)).counted == ("not-ports",)
    assert evaluate(rs, pkt("udp", 53, daddr="198.19.0.3")).decided_by == "svc"
    for addr, port, rule in (("198.19.1.0", 8000, "svc"), ("198.19.1.255", 8999, "svc"),
                             ("198.19.1.7", 9000, None), ("198.19.2.0", 8000, None)):
        assert evaluate(rs, pkt("tcp", port, daddr=addr)).decided_by == rule
    for saddr, rule in (("198.18.8.0", "nets"), ("198.18.11.255", "nets"),
                        ("198.18.12.0", None), ("198.18.0.9", "nets"),
                        ("198.18.0.101", "nets"), ("198.18.0.103", None)):
        assert evaluate(rs, pkt("tcp", 1, saddr=saddr)).decided_by == rule
    v = evaluate(rs, pkt("tcp", 6005))
    assert v.decided_by == "ports" and v.counted == ("ports",)
    # ICMP has no port: neither the set nor its negation matches.
    assert evaluate(rs, pkt("icmp")).counted == ()


# --- NAT and conntrack ------------------------------------------------------------------------

def nat_ruleset(**kw) -> RuleSet:
    return ruleset(table(
        base("mangle", Rule("pre-nat", Match(dst=Prefix.of("198.19.0.50")), Action("counter")),
             Rule("pre-nat-new", Match(dst=Prefix.of("198.19.0.2")), Action("counter")),
             hook="prerouting", priority=-150),
        base("dnat", Rule("dnat", tcp(80, dst=Prefix.of("198.19.0.50")),
                          Action("dnat", addr="198.19.0.2", port=8080)),
             hook="prerouting", priority=-100, type="nat"),
        base("fwd", Rule("web", tcp(8080, dst=Prefix.of("198.19.0.2")), ACCEPT),
             policy="drop"),
        base("snat", Rule("masq", Match(oif=Iface(SERVER)), Action("masquerade")),
             hook="postrouting", priority=100, type="nat"), **kw))


def test_dnat_rewrites_before_the_forward_hook_and_masquerade_after():
    rs = nat_ruleset()
    p = pkt("tcp", 80, daddr="198.19.0.50")
    v = evaluate(rs, p)
    assert v.forward and v.decided_by == "web"
    assert v.counted == ("pre-nat", "dnat", "web", "masq")
    assert v.translated == Packet(4, "client", "198.19.0.1", "198.19.0.2", "tcp", 40404, 8080)
    # The firewall's address on the out side is a parameter.
    v = evaluate(rs, p, local={"server": "198.19.0.254"})
    assert v.translated.saddr == "198.19.0.254"


def test_nat_applies_to_a_connections_first_packet_only():
    rs = nat_ruleset()
    v = evaluate(rs, pkt("tcp", 80, daddr="198.19.0.50", ct="established"))
    assert not v.forward and v.policy_of == "fwd" and v.counted == ("pre-nat",)
    assert v.translated.daddr == "198.19.0.50"


def test_nat_chains_run_at_the_nat_core_priority():
    # A nat chain declared at 50 still runs at -100: the prerouting filter chain at 0
    # sees the translated address (measured on 6.18 at the output hook).
    rs = ruleset(table(
        base("dnat", Rule("dnat", tcp(80, dst=Prefix.of("198.19.0.50")),
                          Action("dnat", addr="198.19.0.2")),
             hook="prerouting", priority=50, type="nat"),
        base("filter", Rule("saw-new", Match(dst=Prefix.of("198.19.0.2")), Action("counter")),
             Rule("saw-old", Match(dst=Prefix.of("198.19.0.50")), Action("counter")),
             hook="prerouting", priority=0)))
    assert evaluate(rs, pkt("tcp", 80, daddr="198.19.0.50")).counted == ("dnat", "saw-new")


def test_first_translating_nat_chain_ends_the_nat_walk():
    rs = ruleset(table(
        base("n1", Rule("n1-count", Match(), Action("counter")),
             Rule("n1", Match(proto="tcp"), Action("snat", addr="198.18.0.7")),
             hook="postrouting", priority=100, type="nat"),
        base("n2", Rule("n2", Match(), Action("snat", addr="198.18.0.8", port=999)),
             hook="postrouting", priority=110, type="nat")))
    v = evaluate(rs, pkt("tcp", 80))
    assert v.counted == ("n1-count", "n1") and v.translated.saddr == "198.18.0.7"
    assert v.translated.sport == 40404
    v = evaluate(rs, pkt("udp", 80))
    assert v.counted == ("n1-count", "n2")
    assert (v.translated.saddr, v.translated.sport) == ("198.18.0.8", 999)


def test_masquerade_ipv6_and_the_other_direction():
    rs = ruleset(table(base("snat", Rule("masq", Match(), Action("masquerade")),
                            hook="postrouting", type="nat", priority=100), family="inet"))
    assert evaluate(rs, pkt(version=6)).translated.saddr == "2001:2:0:2::1"
    assert evaluate(rs, pkt(iif="server")).translated.saddr == "198.18.0.1"


def test_dnat_to_the_firewall_is_not_forwarded():
    rs = ruleset(table(
        base("dnat", Rule("redirect", Match(), Action("dnat", addr="198.19.0.1")),
             hook="prerouting", priority=-100, type="nat"),
        base("fwd", Rule("fwd", Match(), Action("counter")))))
    v = evaluate(rs, pkt())
    assert not v.forward and v.counted == ("redirect",) and v.decided_by == "redirect"


def test_notrack_makes_the_packet_untracked_and_skips_nat():
    rs = ruleset(table(
        base("raw", Rule("before-ct", Match(ct_state=frozenset({"invalid"})),
                         Action("counter")),
             Rule("notrack", Match(proto="udp"), Action("notrack")),
             Rule("untracked-now", Match(ct_state=frozenset({"untracked"})),
                  Action("counter")),
             hook="prerouting", priority=-300),
        base("dnat", Rule("dnat", Match(), Action("dnat", addr="198.19.0.9")),
             hook="prerouting", priority=-100, type="nat"),
        base("fwd", Rule("untracked", Match(ct_state=frozenset({"untracked"})), ACCEPT),
             Rule("new", Match(ct_state=frozenset({"new"})), ACCEPT), policy="drop")))
    v = evaluate(rs, pkt("udp", 53))
    assert v.counted == ("before-ct", "notrack", "untracked-now", "untracked")
    assert v.translated.daddr == "198.19.0.2"
    v = evaluate(rs, pkt("tcp", 53))
    assert v.counted == ("before-ct", "dnat", "new")
    assert v.translated.daddr == "198.19.0.9"


def test_notrack_after_conntrack_does_nothing():
    rs = ruleset(table(
        base("mangle", Rule("notrack", Match(), Action("notrack")), hook="prerouting",
             priority=-150),
        base("fwd", Rule("untracked", Match(ct_state=frozenset({"untracked"})), DROP))))
    assert evaluate(rs, pkt()).forward


# --- seed 000, batches, errors and the index ---------------------------------------------------

@pytest.mark.parametrize("layout", ["linear", "set"])
@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize("n", [1, 5, 300])
def test_seed000_probes_agree(layout, version, n):
    rs = seed000(n, version=version, layout=layout)
    for probe in rs.probes:
        v = evaluate(rs, probe.packet)
        assert v.forward == probe.forward, probe.name
        if probe.rule is not None:
            assert v.decided_by == probe.rule and probe.rule in v.counted, probe.name
        if probe.translated is not None:
            assert v.translated == probe.translated
    assert rs.flow_rule in evaluate(rs, rs.flow).counted


def test_evaluate_all_and_expected_counts():
    rs = seed000(5)
    packets = [p.packet for p in rs.probes] * 3
    verdicts = evaluate_all(rs, packets)
    assert [v.forward for v in verdicts] == [True, False, True] * 3
    assert expected_counts(rs, packets) == {"from-client": 9, "allow-5": 3, "ping": 3}


def test_bad_packets_are_one_line_errors():
    rs = seed000(1)
    with pytest.raises(RuleSetError, match="iif"):
        evaluate(rs, Packet(4, "lo", "198.18.0.2", "198.19.0.2", "udp", 1, 2))
    with pytest.raises(RuleSetError, match="IPv6"):
        evaluate(rs, Packet(6, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2))


def _random_ruleset(rng: random.Random, n: int) -> RuleSet:
    """A long chain of mixed conditions, and a user chain, for the index check."""
    def prefix() -> Prefix:
        base = rng.choice(["198.18.0.0", "198.19.0.0", "198.19.4.0"])
        return Prefix.of(f"{base}/{rng.choice([16, 22, 24, 30, 32])}",
                         negate=rng.random() < 0.2)

    def ports() -> Ports:
        lo = rng.randint(1, 300)
        if rng.random() < 0.5:
            return Ports.of(lo, negate=rng.random() < 0.2)
        return Ports.of((lo, lo + rng.randint(0, 50)), lo + 400, negate=rng.random() < 0.2)

    rules = []
    for i in range(n):
        kw = {}
        if rng.random() < 0.8:
            kw["proto"] = rng.choice(["tcp", "udp", "icmp"])
        if kw.get("proto") in ("tcp", "udp"):
            if rng.random() < 0.8:
                kw["dport"] = ports()
            if rng.random() < 0.2:
                kw["sport"] = ports()
        if kw.get("proto") == "icmp" and rng.random() < 0.5:
            kw["icmp_type"] = rng.choice([0, 8])
        if rng.random() < 0.6:
            kw["dst"] = prefix()
        if rng.random() < 0.3:
            kw["src"] = prefix()
        if rng.random() < 0.2:
            kw["iif"] = Iface(rng.choice([CLIENT, SERVER]), negate=rng.random() < 0.3)
        if rng.random() < 0.1:
            kw["ct_state"] = frozenset({"new"})
        # Broad rules do not end the walk, so packets reach deep into the chain.
        if "dport" in kw and "dst" in kw:
            action = rng.choice([ACCEPT, DROP])
        else:
            action = rng.choice([Action("counter"), Action("mark", mark=3),
                                 jump("sub") if rng.random() < 0.05 else Action("log")])
        rules.append(Rule(f"r{i}", Match(**kw), action))
    sub = tuple(Rule(f"s{i}", Match(proto="tcp", dport=Ports.of(rng.randint(1, 300))),
                     rng.choice([RETURN, DROP, Action("counter")])) for i in range(40))
    return ruleset(table(base("f", *rules, policy="drop"), user("sub", *sub)))


def test_the_index_of_long_chains_changes_no_verdict(monkeypatch):
    rng = random.Random(7)
    rs = _random_ruleset(rng, 600)
    packets = []
    for _ in range(1500):
        proto = rng.choice(["tcp", "udp", "icmp"])
        packets.append(pkt(proto, rng.randint(1, 700), iif=rng.choice(["client", "server"]),
                           sport=rng.randint(1, 700),
                           saddr=f"198.{rng.choice([18, 19])}.{rng.choice([0, 4, 5])}."
                                 f"{rng.randint(2, 254)}",
                           daddr=f"198.19.{rng.choice([0, 4, 7])}.{rng.randint(2, 254)}",
                           icmp=rng.choice([0, 8])))
    indexed = Evaluator(rs)
    assert indexed.units[(4, "forward")][0].chains[0].filter is not None
    monkeypatch.setattr(E, "_INDEX_MIN", 10 ** 9)
    plain = Evaluator(rs)
    assert plain.units[(4, "forward")][0].chains[0].filter is None
    got, want = indexed.evaluate_all(packets), plain.evaluate_all(packets)
    assert got == want
    # The check saw many rules match and decide.
    assert len({r for v in want for r in v.counted}) > 250
    assert len({v.decided_by for v in want}) > 15


# --- rate limits -------------------------------------------------------------------

def _limited_set() -> RuleSet:
    """FORWARD: ICMP echo accepted under a limit, then every UDP packet to port 53
    accepted; the policy drops. A nat POSTROUTING rule counts what leaves."""
    echo = Rule("echo", Match(proto="icmp", icmp_type=8, limit=Limit(5)), ACCEPT)
    dns = Rule("dns", Match(proto="udp", dport=Ports.of(53)), ACCEPT)
    out = Rule("out", Match(oif=Iface(SERVER)), Action("counter"))
    return validate(RuleSet("limited", (
        Table("ip", "filter", (Chain("FORWARD", (echo, dns), hook="forward", priority=0,
                                     policy="drop"),)),
        Table("ip", "nat", (Chain("POSTROUTING", (out,), hook="postrouting", priority=100,
                                  type="nat"),)))))


def test_rate_limits_name_the_packets_a_limit_may_decide_and_their_counters():
    rs = _limited_set()
    lim = E.RateLimits(rs)
    assert lim.ids == {"echo"}
    ping = Packet(4, "client", "198.18.0.2", "198.19.0.2", "icmp", icmp_type=8)
    reply = Packet(4, "client", "198.18.0.2", "198.19.0.2", "icmp", icmp_type=0)
    dns = Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1024, 53)
    assert lim.reached(ping) == ("echo",)
    assert lim.reached(reply) == () and lim.reached(dns) == ()
    # A spent limit drops the echo: its own counter and nat's differ, dns's do not.
    assert lim.unsure_rules([ping, reply, dns]) == {"echo", "out"}
    assert lim.unsure_rules([reply, dns]) == set()


def test_a_rule_set_without_limits_has_nothing_unsure():
    rs = seed000(5)
    lim = E.RateLimits(rs)
    assert lim.ids == frozenset()
    assert lim.reached(rs.flow) == () and lim.unsure_rules([rs.flow]) == set()


def test_disagreements_leave_out_what_a_spent_limit_decided():
    """The kernel's limit was spent: the echo dropped, nat's counter one short. Not a
    disagreement; a dropped DNS packet still is."""
    from fwbench.backends import base
    rs = _limited_set()

    class Kernel:
        filters = True

        def counted_ids(self, rs):
            return frozenset({"echo", "dns", "out"})

    ping = Packet(4, "client", "198.18.0.2", "198.19.0.2", "icmp", icmp_type=8)
    dns = Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1024, 53)
    spent = base.Exchange([ping, dns], [None, dns], {"dns": 1, "out": 1})
    assert base.disagreements(Kernel(), rs, spent) == ([], [])
    lost = base.Exchange([ping, dns], [None, None], {"out": 0})
    per_packet, per_rule = base.disagreements(Kernel(), rs, lost)
    assert len(per_packet) == 1 and "udp" in per_packet[0]
    assert per_rule == ["rule dns counted 0, expected 1"]
