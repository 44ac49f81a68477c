"""The eBPF renderer: the load input of fwbench-bpf against golden files, the counter
slot of every rule id, and every shape the filter cannot hold refused with the
feature and the rule.

Regenerate the golden files under tests/golden/model/ after an intended change with
FWBENCH_UPDATE_GOLDEN=1 pytest tests/unit/test_render_bpf.py, then review the diff.
"""
from dataclasses import replace
from pathlib import Path

import pytest

from fwbench.ruleset.model import (CLIENT, DROP, SERVER, Action, Chain, Iface,
                                   Limit, Match, Ports, Prefix, Rule, RuleSet, Set, SetRef,
                                   Table, Unsupported, jump, validate)
from fwbench.ruleset.render import bpf
from fwbench.ruleset.templates.seed000 import seed000

GOLDEN = Path(__file__).parent.parent / "golden"


def test_seed000_linear_golden():
    r = bpf.render(seed000(5), set_mode=False)
    assert r.text == (GOLDEN / "seed000-n5-bpf-linear.rules").read_text()
    assert r.slots == {"from-client": [], "from-server": [], "allow-1": [0], "allow-2": [1],
                       "allow-3": [2], "allow-4": [3], "allow-5": [4], "control": [5],
                       "ping": [6], "return-path": []}
    assert r.drop_slot == 7


def test_seed000_set_golden():
    r = bpf.render(seed000(5, layout="set"), set_mode=True)
    assert r.text == (GOLDEN / "seed000-n5-bpf-set.rules").read_text()
    assert r.slots["allowed"] == [0, 1, 2, 3, 4]
    assert r.slots["control"] == [5] and r.slots["ping"] == [6]


def test_a_set_rule_in_linear_mode_is_one_rule_per_element():
    r = bpf.render(seed000(5, layout="set"), set_mode=False)
    assert r.text == (GOLDEN / "seed000-n5-bpf-linear.rules").read_text()
    assert r.slots["allowed"] == [0, 1, 2, 3, 4]


def test_every_rule_id_has_its_slots():
    rs = seed000(50)
    r = bpf.render(rs, False)
    lines = r.text.splitlines()
    for _, _, rule in rs.rules():
        for slot in r.slots[rule.id]:
            m = rule.match
            port = m.icmp_type if m.proto == "icmp" else m.dport.single
            assert lines[slot] == f"rule {m.dst.net[:-3]} " \
                f"{ {'tcp': 6, 'udp': 17, 'icmp': 1}[m.proto]} {port}"


# --- a hand-built rule set of every shape the filter holds -----------------------------------

def mixed() -> RuleSet:
    """Goto instead of jump, the server-side jump first, two sets (elements given
    as numbers and /32s), ICMP types, rules before and after the set rules."""
    dst = Prefix.of
    rules = (
        Rule("web", Match(dst=dst("198.19.0.2"), proto="tcp", dport=Ports.of(80))),
        Rule("set-a", Match(sets=(SetRef("a", ("daddr", "proto", "dport")),))),
        Rule("dns", Match(dst=dst("198.19.0.3/32"), proto="udp", dport=Ports.of(53)),
             counter=False),
        Rule("set-b", Match(sets=(SetRef("b", ("daddr", "proto", "dport")),))),
        Rule("unreach", Match(dst=dst("198.19.0.2"), proto="icmp", icmp_type=3)),
        Rule("echo", Match(dst=dst("198.19.0.2"), proto="icmp", icmp_type=8)),
    )
    return validate(RuleSet("mixed", (Table("ip", "fwb", (
        Chain("filter_forward", (
            Rule("server-side", Match(iif=Iface(SERVER)), Action("goto", chain="back")),
            Rule("client-side", Match(iif=Iface(CLIENT)), Action("goto", chain="in")),
        ), hook="forward", priority=10, policy="drop"),
        Chain("in", rules),
        Chain("back", (Rule("back-ok", counter=False),)),
    ), (
        Set("a", ("addr", "proto", "port"),
            (("198.19.0.2", "tcp", 22), ("198.19.0.4/32", 17, 123))),
        Set("b", ("addr", "proto", "port"), (("198.19.0.5", 6, 443),)),
        Set("unused", ("addr",), (("198.18.0.0/24",),), interval=True),
    )),)))


@pytest.mark.parametrize("set_mode, name", [(False, "bpf-mixed-linear.rules"),
                                            (True, "bpf-mixed-set.rules")])
def test_mixed_golden(set_mode, name, golden):
    r = bpf.render(mixed(), set_mode)
    golden(GOLDEN / "model" / name, r.text)
    slots = {k: v for k, v in r.slots.items() if v}
    if set_mode:
        assert slots == {"set-a": [0, 1], "set-b": [2], "web": [3], "dns": [4],
                         "unreach": [5], "echo": [6]}
    else:
        assert slots == {"web": [0], "set-a": [1, 2], "dns": [3], "set-b": [4],
                         "unreach": [5], "echo": [6]}
    assert r.drop_slot == 7


# --- what the filter cannot hold -------------------------------------------------------------

def _seed(**client_rule) -> RuleSet:
    """seed000(3) with its first entry replaced."""
    rs = seed000(3)
    t = rs.tables[0]
    c = t.chain("from_client")
    new = replace(c, rules=(Rule("odd", **client_rule),) + c.rules[1:])
    return rs.with_tables((replace(t, chains=tuple(new if x.name == c.name else x
                                                   for x in t.chains)),))


def _nat_like() -> RuleSet:
    """seed 004's NAT shape: a stateful forward chain and a dnat at prerouting."""
    return validate(RuleSet("nat", (Table("ip", "fw", (
        Chain("forward", (
            Rule("nat-1", Match(ct_state=frozenset({"established", "related"}))),
            Rule("nat-2", Match(iif=Iface(CLIENT)), jump("external")),
        ), hook="forward", policy="drop"),
        Chain("external", ()),
        Chain("prerouting", (
            Rule("nat-3", Match(iif=Iface(CLIENT), proto="udp", dport=Ports.of(5001)),
                 Action("dnat", addr="198.19.0.2")),
        ), hook="prerouting", priority=-100, type="nat"),
    )),)))


D = Prefix.of("198.19.0.2")


@pytest.mark.parametrize("make, message", [
    (_nat_like, "unsupported: dnat (rule nat-3)"),
    (lambda: seed000(3, version=6), "unsupported: ipv6 (rule allow-1)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp", dport=Ports.of(1)),
                   action=Action("mark", mark=1)), "unsupported: mark set (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp", dport=Ports.of(1)), action=DROP),
     "unsupported: drop (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp", dport=Ports.of(1),
                               ct_state=frozenset({"new"}))),
     "unsupported: ct state (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp", dport=Ports.of((1, 9)))),
     "unsupported: port range (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp", dport=Ports.of(1, 2))),
     "unsupported: port list (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp", dport=Ports.of(1, negate=True))),
     "unsupported: negation (rule odd)"),
    (lambda: _seed(match=Match(src=D, dst=D, proto="tcp", dport=Ports.of(1))),
     "unsupported: saddr (rule odd)"),
    (lambda: _seed(match=Match(dst=Prefix.of("198.19.0.0/24"), proto="tcp",
                               dport=Ports.of(1))),
     "unsupported: daddr prefix (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp", dport=Ports.of(1), mark=(1, 1))),
     "unsupported: mark match (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp", dport=Ports.of(1), limit=Limit(1))),
     "unsupported: limit (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp", sport=Ports.of(1))),
     "unsupported: sport (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp")),
     "unsupported: tcp without dport (rule odd)"),
    (lambda: _seed(match=Match(proto="tcp", dport=Ports.of(1))),
     "unsupported: a rule without daddr (rule odd)"),
    (lambda: _seed(match=Match(dst=D)), "unsupported: a rule without proto (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="icmp")),
     "unsupported: icmp without icmp type (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp", dport=Ports.of(1), iif=Iface(CLIENT))),
     "unsupported: iif (rule odd)"),
    (lambda: _seed(match=Match(dst=D, proto="tcp", dport=Ports.of(1)),
                   action=jump("from_server")),
     "unsupported: jump in a user chain (rule odd)"),
])
def test_refused_with_feature_and_rule(make, message):
    rs = make()
    with pytest.raises(Unsupported) as e:
        bpf.refuse_unsupported(rs)
    assert str(e.value) == message
    with pytest.raises(Unsupported):
        bpf.render(rs, set_mode=True)


def _skeleton(**change) -> RuleSet:
    """seed000(3, layout="set") with parts of its table or chains replaced."""
    rs = seed000(3, layout="set")
    t = rs.tables[0]
    chains = {c.name: c for c in t.chains}
    for name, new in change.pop("chains", {}).items():
        if new is None:
            del chains[name]
        else:
            chains[name] = new
    return rs.with_tables((replace(t, chains=tuple(chains.values()), **change),))


_BASE = seed000(3).tables[0].chain("forward")
_SET = Set("allowed", ("addr", "proto", "port"), (("198.19.0.2", "udp", 5201),))


@pytest.mark.parametrize("make, message", [
    (lambda: _skeleton(family="ip6"), "unsupported: ipv6 (table fwbench)"),
    (lambda: _skeleton(family="inet"), "unsupported: family inet (table fwbench)"),
    (lambda: seed000(3).with_tables(seed000(3).tables * 2),
     "unsupported: several tables (table fwbench)"),
    (lambda: _skeleton(chains={"forward": replace(_BASE, policy="accept")}),
     "unsupported: policy accept (chain forward)"),
    (lambda: _skeleton(chains={"forward": replace(_BASE, hook="input")}),
     "unsupported: hook input (chain forward)"),
    (lambda: _skeleton(chains={"extra": Chain("extra")}),
     "unsupported: user chain (chain extra)"),
    (lambda: _skeleton(chains={"forward": replace(_BASE, rules=_BASE.rules[:1])}),
     "unsupported: no iif {server} jump (chain forward)"),
    (lambda: _skeleton(chains={"forward": replace(_BASE, rules=_BASE.rules + (
        Rule("x", Match(dst=D)),))}),
     "unsupported: a base chain rule other than an iif jump (rule x)"),
    (lambda: _skeleton(chains={"from_server": Chain("from_server", (
        Rule("x", Match(proto="tcp")),))}),
     "unsupported: filtering of return traffic (rule x)"),
    (lambda: _skeleton(chains={"from_server": Chain("from_server")}),
     "unsupported: filtering of return traffic (chain from_server)"),
    (lambda: _skeleton(sets=(replace(_SET, interval=True),)),
     "unsupported: set with prefixes (set allowed)"),
    (lambda: _skeleton(sets=(replace(_SET, version=6, elements=()),)),
     "unsupported: ipv6 (set allowed)"),
    (lambda: _skeleton(sets=(replace(_SET, elements=(("198.19.0.2", "icmp", 8),)),)),
     "unsupported: set element with protocol icmp (set allowed)"),
])
def test_refused_shapes(make, message):
    with pytest.raises(Unsupported) as e:
        bpf.refuse_unsupported(make())
    assert str(e.value) == message


def test_features_refused_are_outside_supports():
    """SUPPORTS says what refuse_unsupported() lets through: every feature of a rule set it
    passes is in it, but for sets no rule looks up (mixed's `unused`), which the
    filter does not load."""
    for rs in (mixed(), seed000(5), seed000(5, layout="set")):
        bpf.refuse_unsupported(rs)
        used = set(rs.features()) - {"set addr", "set with prefixes"}
        assert used <= bpf.SUPPORTS, used - bpf.SUPPORTS
    assert "ct state" not in bpf.SUPPORTS and "dnat" not in bpf.SUPPORTS


def test_every_condition_the_filter_does_not_compile_takes_the_slow_path():
    """_plain (the fast path that skips the feature check) must see every Match
    field but those _entry compiles: a condition it missed would be dropped
    silently from the compiled filter."""
    from dataclasses import fields

    from fwbench.ruleset.model import Attr, Match, Rule, TcpOption
    from fwbench.ruleset.render.bpf import _plain
    compiled = {"iif", "dst", "dport", "proto", "sets", "icmp_type"}
    given = {"random": 5, "nth": (2, 0), "ct_mark": (1, 1), "ct_status": frozenset({"dnat"}),
             "attrs": (Attr("priority", ((0, 0),)),), "tcp_options": (TcpOption(2),),
             "ip_version": 6}
    for f in fields(Match):
        if f.name in compiled or f.name.endswith("_negate"):
            continue
        value = given.get(f.name, object())
        assert not _plain(Rule("x", Match(**{f.name: value}), Action("accept"))), f.name
