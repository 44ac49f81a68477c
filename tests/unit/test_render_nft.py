"""The nft renderer against golden files, against nft itself (`nft -c` in a private
namespace), and against the forms nft 1.0.6 prints back (measured with
`unshare -n sh -c 'nft -f F && nft list ruleset'` on this project's kernel).

Regenerate the golden files under tests/golden/model/ after an intended change with
FWBENCH_UPDATE_GOLDEN=1 pytest tests/unit/test_render_nft.py, then review the diff;
tests/privileged/test_render_nft_kernel.py loads them and compares the listing.
"""
from pathlib import Path

import pytest

from fwbench.ruleset.model import (ACCEPT, CLIENT, DROP, RETURN, SERVER, Action, Chain,
                                   HashLimit, Iface, Interfaces, Limit, Match, Ports, Prefix,
                                   Rule, RuleSet, RuleSetError, Set, SetRef, StringMatch,
                                   Table, Unsupported, jump, validate)
from fwbench.ruleset.render import nft
from fwbench.ruleset.templates.seed000 import seed000

GOLDEN = Path(__file__).parent.parent / "golden"
MODEL_GOLDEN = GOLDEN / "model"
IFS = Interfaces("fwb000000-f0", "fwb000000-f1")


# --- a rich hand-built rule set: every construct the renderer writes ----------------

def _r(rid, action=ACCEPT, counter=True, comment=None, **match):
    return Rule(rid, Match(**match), action, counter, comment)


def rich() -> RuleSet:
    """Four families; filter, nat, route, mangle and raw chains at their priorities;
    user chains with jump, goto and return; ct state, marks, negations, port
    ranges and lists, named sets (interval ones too, sized ones), NAT, reject, log,
    limit, netdev chains on either side's device."""
    tcp, udp = "tcp", "udp"
    srv = Prefix.of("198.19.0.2")
    inet = Table("inet", "fwb_inet", (
        Chain("raw", (
            _r("raw-1", Action("notrack"), proto=udp, dst=srv, dport=Ports.of(5201)),
        ), hook="prerouting", priority=-300),
        Chain("mangle", (
            _r("mangle-1", Action("mark", mark=1), iif=Iface(CLIENT)),
            _r("mangle-2", Action("mark", mark=0x10, mark_mask=0xF0), counter=False,
               iif=Iface(SERVER)),
            _r("mangle-3", Action("mark", mark=0, mark_mask=0xFF00), counter=False,
               oif=Iface("eth+")),
        ), hook="prerouting", priority=-150),
        Chain("forward", (
            _r("ct-1", ct_state=frozenset({"related", "established"})),
            _r("ct-2", DROP, ct_state=frozenset({"invalid"})),
            _r("to-client-side", jump("from_client"), counter=False, iif=Iface(CLIENT)),
            _r("to-server-side", Action("goto", chain="from_server"), counter=False,
               iif=Iface(SERVER)),
            _r("log-drops", Action("log", log_prefix="fwb drop: "),
               limit=Limit(10, "minute", 20)),
        ), hook="forward", priority=0, policy="drop"),
        Chain("from_client", (
            _r("blocked", DROP, sets=(SetRef("blocked", ("saddr",)),)),
            _r("not-clients", Action("reject", reject_with="icmp-admin-prohibited"),
               src=Prefix.of("198.18.0.0/24", negate=True)),
            _r("allowed4", sets=(SetRef("allowed4", ("daddr", "proto", "dport")),)),
            _r("allowed6", sets=(SetRef("allowed6", ("daddr", "proto", "dport")),)),
            _r("svc", proto=tcp, sets=(SetRef("svc", ("daddr", "dport")),)),
            _r("ports", proto=tcp, sets=(SetRef("ports", ("dport",)),)),
            _r("not-ports", DROP, sets=(SetRef("ports", ("sport",), negate=True),)),
            _r("range", proto=tcp, dst=srv, dport=Ports.of((1000, 2000))),
            _r("list", proto=tcp, dst=srv, dport=Ports.of(443, 80, 22)),
            _r("merged", proto=tcp, dport=Ports.of((10, 20), (21, 30), 25)),
            _r("neg", proto=udp, sport=Ports.of(53, 123, negate=True),
               dport=Ports.of((5000, 6000))),
            _r("neg-range", DROP, proto=udp, dport=Ports.of((7000, 7100), negate=True)),
            _r("proto-only", proto=udp, dst=Prefix.of("2001:2:0:2::/64")),
            _r("mark-1", jump("marked"), mark=(1, 0xFF)),
            _r("mark-2", mark=(2, 0xFFFFFFFF)),
            _r("mark-3", DROP, mark=(0x10000, 0xFFFF0000), mark_negate=True),
            _r("ping4", proto="icmp", icmp_type=8),
            _r("ping6", proto="icmpv6", icmp_type=128),
            _r("icmp-other", proto="icmp", icmp_type=200),
            _r("reset", Action("reject", reject_with="tcp-reset"), proto=tcp),
            _r("reset-22", Action("reject", reject_with="tcp-reset"), proto=tcp,
               dport=Ports.of(22)),
            _r("limited", limit=Limit(100), comment="burst of 5", proto=udp,
               dport=Ports.of(9)),
            _r("uncounted", counter=False, oif=Iface("eth+", negate=True),
               iif=Iface("lo")),
            _r("reject-6", Action("reject"), dst=Prefix.of("2001:2:0:2::9")),
            _r("reject-any", Action("reject")),
        )),
        Chain("marked", (
            _r("marked-new", RETURN, ct_state=frozenset({"new", "untracked"})),
            _r("marked-count", Action("counter")),
            _r("marked-ok"),
        )),
        Chain("from_server", (_r("return-path", counter=False),)),
        Chain("late", (_r("late-1", Action("counter"), counter=False),),
              hook="forward", priority=10),
        Chain("sec", (), hook="forward", priority=50),
        Chain("early", (), hook="input", priority=-160),
    ), (
        Set("allowed4", ("addr", "proto", "port"),
            (("198.19.0.2", "tcp", 80), ("198.19.0.2", "udp", 53), ("198.19.0.3", 6, 443)),
            size=100),
        Set("allowed6", ("addr", "proto", "port"),
            (("2001:2:0:2::2", "tcp", 80), ("2001:2:0:2::3", "udp", 53)), version=6),
        Set("blocked", ("addr",), (("198.18.5.0/24",), ("198.18.7.7",), ("198.18.6.0/25",),
                                   ("198.18.6.128/25",)), interval=True, size=64),
        Set("svc", ("addr", "port"), (("198.19.1.0/24", "8000-8999"), ("198.19.0.2", 22)),
            interval=True),
        Set("ports", ("port",), ((22,), (80,), (443,))),
        Set("empty", ("addr",), (), interval=True),
    ))
    nat = Table("ip", "fwb_nat", (
        Chain("prerouting", (
            _r("nat-1", Action("dnat", addr="198.19.0.2", port=5001), iif=Iface(CLIENT),
               dst=Prefix.of("198.19.0.1"), proto=udp, dport=Ports.of(5000)),
            _r("nat-2", Action("dnat", addr="198.19.0.2"), dst=Prefix.of("198.19.0.1"),
               proto=tcp, dport=Ports.of(8080)),
            _r("nat-3", jump("dnat_more"), counter=False),
        ), hook="prerouting", priority=-100, type="nat"),
        Chain("dnat_more", (
            _r("nat-4", Action("dnat", addr="198.19.0.3"), dst=Prefix.of("198.19.0.4")),
        )),
        Chain("postrouting", (
            _r("nat-5", Action("snat", addr="198.19.0.1"), src=Prefix.of("198.18.0.0/24"),
               oif=Iface(SERVER)),
            _r("nat-6", Action("masquerade"), oif=Iface("eth+")),
            _r("nat-7", Action("masquerade", port=1000), proto=udp),
            _r("nat-8", Action("snat", addr="198.19.0.1", port=2000), proto=tcp,
               sport=Ports.of(3000)),
        ), hook="postrouting", priority=100, type="nat"),
        Chain("output", (
            _r("nat-9", Action("dnat", addr="198.19.0.2"), dst=Prefix.of("198.19.0.5")),
        ), hook="output", priority=-100, type="nat"),
        Chain("nat_input", (
            _r("nat-10", Action("snat", addr="198.18.0.1"), src=Prefix.of("198.19.0.2")),
        ), hook="input", priority=100, type="nat"),
        Chain("route", (
            _r("route-1", Action("mark", mark=7), proto=tcp, dport=Ports.of(25)),
        ), hook="output", priority=-150, type="route"),
    ))
    ip6 = Table("ip6", "fwb6", (
        Chain("forward", (
            _r("v6-1", src=Prefix.of("2001:2:0:1::/64"), dst=Prefix.of("2001:2:0:2::2"),
               proto=tcp, dport=Ports.of(22)),
            _r("v6-2", proto="icmpv6", icmp_type=135),
            _r("v6-3", Action("reject", reject_with="icmp6-adm-prohibited"),
               proto=udp, dport=Ports.of(137)),
            _r("v6-4", Action("reject"), proto=udp),
            _r("v6-5", Action("reject", reject_with="tcp-reset"), counter=False, proto=tcp,
               dst=Prefix.of("2001:2:0:2::5")),
            _r("v6-6", Action("reject", reject_with="tcp-reset"), proto=tcp),
        ), hook="forward", priority=0, policy="drop"),
        Chain("prerouting", (
            _r("v6-nat", Action("dnat", addr="2001:2:0:2::2", port=8080),
               dst=Prefix.of("2001:2:0:2::1"), proto=tcp, dport=Ports.of(80)),
        ), hook="prerouting", priority=-90, type="nat"),
        Chain("very_early", (), hook="prerouting", priority=-400),
        Chain("raw_minus", (), hook="prerouting", priority=-310),
    ))
    netdev = Table("netdev", "fwb_ingress", (
        Chain("ingress", (
            _r("in-1", DROP, dst=Prefix.of("198.19.0.9")),
            _r("in-2", Action("reject"), src=Prefix.of("198.18.0.66")),
            _r("in-3", Action("reject", reject_with="icmp-admin-prohibited"),
               proto=tcp, dport=Ports.of(23)),
            _r("in-4", Action("mark", mark=3), limit=Limit(1000, "second", 100)),
            _r("in-5", Action("reject"), proto=udp, dport=Ports.of(24)),
        ), hook="ingress", priority=-10),
        Chain("ingress_server", (
            _r("in-server", DROP, proto=udp),
        ), hook="ingress", priority=0, device=SERVER),
    ))
    return validate(RuleSet("rich", (inet, nat, ip6, netdev)))


# --- golden files ----------------------------------------------------------------------

@pytest.mark.parametrize("kw, name", [
    ({}, "seed000-n5-nft-linear.nft"),
    ({"counters": False}, "seed000-n5-nft-linear-nocounters.nft"),
    ({"layout": "set"}, "seed000-n5-nft-set.nft"),
])
def test_seed000_matches_the_old_renderings(kw, name):
    """Without its ids, the model's rendering is what the old renderer wrote."""
    text = nft.render(seed000(5, **kw), IFS)
    assert nft.strip_ids(text) == (GOLDEN / name).read_text()
    assert f'counter accept comment "fwb:{seed000(5, **kw).flow_rule}"' in text


def test_rich_golden(golden):
    golden(MODEL_GOLDEN / "nft-rich.nft", nft.render(rich(), IFS))


def test_seed000_ipv6_set_golden(golden):
    golden(MODEL_GOLDEN / "nft-seed000-n5-v6-set.nft",
            nft.render(seed000(5, version=6, layout="set"), IFS))


def test_every_rule_carries_its_id_last():
    rs = rich()
    lines = nft.render(rs, IFS).splitlines()
    for _, _, r in rs.rules():
        line = next(x for x in lines if f'fwb:{r.id}"' in x)
        rid, user = nft.rule_id(line.rpartition(' comment "')[2][:-1])
        assert (rid, user) == (r.id, r.comment)


def test_check_accepts_what_renders():
    nft.refuse_unsupported(rich())
    nft.refuse_unsupported(seed000(5, layout="set"))
    assert set(rich().features()) <= nft.SUPPORTS


# --- nft itself -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["nft-rich.nft", "nft-seed000-n5-v6-set.nft"])
def test_golden_passes_nft_check(name, nft_check):
    cp = nft_check((MODEL_GOLDEN / name).read_text())
    assert cp.returncode == 0, cp.stderr


@pytest.mark.parametrize("layout", ["linear", "set"])
def test_large_rendering_passes_nft_check(layout, nft_check):
    cp = nft_check(nft.render(seed000(1000, layout=layout), IFS))
    assert cp.returncode == 0, cp.stderr


def test_nft_check_catches_a_keyword_name(nft_check):
    """The check above can fail: `fwd` as a chain name is a syntax error in nft,
    which is why the renderer refuses it."""
    text = nft.render(seed000(3), IFS).replace("from_server", "fwd")
    assert nft_check(text).returncode != 0


# --- nft's printed forms ----------------------------------------------------------------

@pytest.mark.parametrize("family, hook, prio, text", [
    ("ip", "prerouting", -300, "raw"), ("ip", "forward", -150, "mangle"),
    ("ip", "prerouting", -100, "dstnat"), ("ip", "forward", -100, "-100"),
    ("inet", "forward", 0, "filter"), ("ip", "forward", 50, "security"),
    ("ip", "postrouting", 100, "srcnat"), ("ip", "input", 100, "100"),
    ("ip", "forward", 10, "filter + 10"), ("ip", "forward", -10, "filter - 10"),
    ("ip", "forward", 11, "11"), ("ip", "forward", -160, "mangle - 10"),
    ("ip", "postrouting", 110, "srcnat + 10"), ("ip6", "forward", -290, "raw + 10"),
    ("netdev", "ingress", -300, "-300"), ("netdev", "ingress", 5, "filter + 5"),
    ("ip", "forward", -400, "-400"),
])
def test_priority_as_nft_prints_it(family, hook, prio, text):
    assert nft.priority_text(family, hook, prio) == text


def _one(match=None, action=ACCEPT, family="ip", hook="forward", ctype="filter", **kw):
    """The rendered line of a one-rule rule set."""
    rs = RuleSet("t", (Table(family, "t", (
        Chain("c", (Rule("r", match or Match(), action, False),), hook=hook,
              type=ctype, priority=kw.get("priority", 0)),)),))
    line = nft.render(rs, IFS).splitlines()[3].strip()
    return nft.strip_ids(line)


@pytest.mark.parametrize("ports, text", [
    (Ports.of(22), "22"), (Ports.of((22, 22)), "22"), (Ports.of((1000, 2000)), "1000-2000"),
    (Ports.of(80, 22, 443), "{ 22, 80, 443 }"), (Ports.of(22, 23), "{ 22, 23 }"),
    (Ports.of((10, 20), (21, 30)), "10-30"), (Ports.of((10, 20), (15, 30)), "10-30"),
    (Ports.of(80, 22, 443, (1000, 2000), 21), "{ 21-22, 80, 443, 1000-2000 }"),
    (Ports.of(22, 23, negate=True), "!= { 22, 23 }"), (Ports.of(22, 22), "22"),
])
def test_ports_as_nft_prints_them(ports, text):
    assert _one(Match(proto="tcp", dport=ports)) == f"tcp dport {text} accept"


@pytest.mark.parametrize("mark, neg, text", [
    ((1, 0xFF), False, "meta mark & 0x000000ff == 0x00000001"),
    ((1, 0xFFFFFFFF), False, "meta mark 0x00000001"),
    ((1, 0xFFFFFFFF), True, "meta mark != 0x00000001"),
    ((0x10000, 0xFFFF0000), False, "meta mark 0x00010000/16"),
    ((0x10000, 0xFFFF0000), True, "meta mark != 0x00010000/16"),
    ((0x10, 0xF0), True, "meta mark & 0x000000f0 != 0x00000010"),
])
def test_mark_match_as_nft_prints_it(mark, neg, text):
    assert _one(Match(mark=mark, mark_negate=neg)) == f"{text} accept"


@pytest.mark.parametrize("value, mask, text", [
    (1, 0xFFFFFFFF, "meta mark set 0x00000001"),
    (2, 0xFF, "meta mark set meta mark & 0xffffff02 | 0x00000002"),
    (0, 0xFF, "meta mark set meta mark & 0xffffff00"),
    (0xFF, 0xFF, "meta mark set meta mark | 0x000000ff"),
])
def test_mark_set_as_nft_prints_it(value, mask, text):
    assert _one(action=Action("mark", mark=value, mark_mask=mask)) == text


@pytest.mark.parametrize("family, match, reject_with, text", [
    ("ip", Match(), None, "reject"),
    ("ip", Match(), "icmp-port-unreachable", "reject"),
    ("ip", Match(), "icmp-host-prohibited", "reject with icmp host-prohibited"),
    ("ip6", Match(), "icmp6-port-unreachable", "reject"),
    ("ip6", Match(), "icmp6-no-route", "reject with icmpv6 no-route"),
    ("inet", Match(), None, "reject"),
    ("inet", Match(), "icmp-admin-prohibited", "reject with icmpx admin-prohibited"),
    ("inet", Match(dst=Prefix.of("198.19.0.2")), None,
     "ip daddr 198.19.0.2 reject with icmp port-unreachable"),
    ("inet", Match(proto="tcp"), "tcp-reset", "meta l4proto tcp reject with tcp reset"),
    ("ip", Match(proto="tcp", iif=Iface("x")), "tcp-reset",
     'iifname "x" reject with tcp reset'),
    ("inet", Match(dst=Prefix.of("198.19.0.2")), "icmpx-admin-prohibited",
     "ip daddr 198.19.0.2 reject with icmpx admin-prohibited"),
    ("inet", Match(), "icmpx-port-unreachable", "reject"),
    ("ip", Match(), "icmpx-no-route", "reject with icmp net-unreachable"),
    ("ip6", Match(), "icmpx-host-unreachable", "reject with icmpv6 addr-unreachable"),
])
def test_reject_as_nft_prints_it(family, match, reject_with, text):
    assert _one(match, Action("reject", reject_with=reject_with), family) == text


def test_interfaces_and_protocols_as_nft_prints_them():
    assert _one(Match(iif=Iface("eth+"), oif=Iface("a*b", negate=True))) == \
        'iifname "eth*" oifname != "a\\*b" accept'
    assert _one(Match(iif=Iface("+"))) == "accept"   # any interface
    assert _one(Match(proto="icmpv6"), family="ip6") == "meta l4proto ipv6-icmp accept"
    assert _one(Match(proto="icmp", icmp_type=3)) == \
        "icmp type destination-unreachable accept"
    assert _one(Match(ct_state=frozenset({"new", "established", "invalid"}))) == \
        "ct state invalid,established,new accept"


def test_nat_as_nft_prints_it():
    m = Match(proto="udp", dport=Ports.of(53))
    assert _one(m, Action("dnat", addr="198.19.0.2", port=5353), "inet", "prerouting",
                "nat") == "udp dport 53 dnat ip to 198.19.0.2:5353"
    assert _one(Match(), Action("dnat", addr="2001:2::2"), "ip6", "output", "nat") == \
        "dnat to 2001:2::2"


# --- what nft cannot hold ---------------------------------------------------------------

@pytest.mark.parametrize("rule, sets, message", [
    (Rule("r", Match(proto="udp", string=StringMatch("foo.com"))), (),
     "unsupported: string match (rule r)"),
    (Rule("r", Match(hashlimit=HashLimit("h", 10))), (), "unsupported: hashlimit (rule r)"),
    (Rule("r", action=Action("ct")), (), "unsupported: ct (rule r)"),
    (Rule("r", Match(sets=(SetRef("s", ("saddr",)),))),
     (Set("s", ("addr",), (("198.18.0.2",),), counters=True),), "unsupported: set counters (set s)"),
])
def test_what_only_iptables_renders_is_refused(rule, sets, message):
    """By refuse_unsupported() and by render() alone: nft would load the rule without it."""
    rs = validate(RuleSet("t", (Table("ip", "t", (
        Chain("c", (rule,), hook="prerouting", priority=-300),), sets),)))
    for call in (nft.refuse_unsupported, lambda rs: nft.render(rs, IFS)):
        with pytest.raises(Unsupported) as e:
            call(rs)
        assert str(e.value) == message
    assert {"string match", "hashlimit", "ct", "set counters"}.isdisjoint(nft.SUPPORTS)


def _netdev_header(hook: str, device: str | None) -> str:
    """The rendered header line of a netdev chain at `hook` on `device`."""
    rs = validate(RuleSet("t", (Table("netdev", "t", (
        Chain("c", (), hook=hook, device=device),)),)))
    return nft.render(rs, IFS).splitlines()[2].strip()


def test_a_netdev_egress_chain_hooks_the_server_side_unless_told():
    assert _netdev_header("egress", None) == \
        'type filter hook egress device "fwb000000-f1" priority filter; policy accept;'
    assert 'device "fwb000000-f0" ' in _netdev_header("egress", CLIENT)


def test_a_netdev_chain_hooks_its_device():
    def header(device):
        return _netdev_header("ingress", device)
    assert header(None) == \
        'type filter hook ingress device "fwb000000-f0" priority filter; policy accept;'
    assert header(CLIENT) == header(None)
    assert 'device "fwb000000-f1" ' in header(SERVER)
    assert 'device "eth0" ' in header("eth0")
    with pytest.raises(RuleSetError, match="device"):
        header("a-very-long-device-name")


def test_a_set_size_is_listed_after_its_type():
    rs = validate(RuleSet("t", (Table("ip", "t", (), (
        Set("s", ("addr",), (("198.18.0.0/24",),), interval=True, size=7),)),)))
    assert nft.render(rs, IFS).splitlines()[1:5] == [
        "\tset s {", "\t\ttype ipv4_addr", "\t\tsize 7", "\t\tflags interval"]


@pytest.mark.parametrize("make, message", [
    (lambda: _one(Match(ct_state=frozenset({"new"})), family="netdev", hook="ingress"),
     "unsupported: ct state in family netdev (rule r)"),
    (lambda: _one(action=Action("notrack"), family="netdev", hook="ingress"),
     "unsupported: notrack in family netdev (rule r)"),
])
def test_netdev_refuses_conntrack(make, message):
    with pytest.raises(Unsupported) as e:
        make()
    assert str(e.value) == message


def test_port_lookups_match_only_tcp_and_udp():
    """`th dport` reads any transport header; the model's ports are TCP's and
    UDP's only, so a lookup that an ICMP packet could match gets a guard."""
    ports = Set("p", ("port",), ((22,),))
    keyed = Set("k", ("addr", "proto", "port"), (("198.19.0.2", "tcp", 22),))
    icmp = Set("i", ("addr", "proto", "port"), (("198.19.0.2", "icmp", 8),))

    def line(s, negate=False, **match):
        fields = {"p": ("dport",), "k": ("daddr", "proto", "dport"),
                  "i": ("daddr", "proto", "dport")}[s.name]
        rs = RuleSet("t", (Table("ip", "t", (Chain("c", (Rule("r", Match(
            sets=(SetRef(s.name, fields, negate),), **match), counter=False),)),),
            (s,)),))
        return nft.strip_ids(nft.render(rs, IFS).splitlines()[-3].strip())

    assert line(keyed) == "ip daddr . meta l4proto . th dport @k accept"
    assert line(keyed, True) == \
        "meta l4proto { tcp, udp } ip daddr . meta l4proto . th dport != @k accept"
    assert line(icmp) == "meta l4proto { tcp, udp } ip daddr . meta l4proto . th dport @i accept"
    assert line(ports) == "meta l4proto { tcp, udp } th dport @p accept"
    assert line(ports, proto="udp") == "udp dport @p accept"
    with pytest.raises(Unsupported, match="set port lookup with protocol icmp"):
        line(ports, proto="icmp")


@pytest.mark.parametrize("make, words", [
    (lambda: _one(action=Action("dnat", addr="198.19.0.2")), "dnat in a filter chain"),
    (lambda: _one(action=Action("snat", addr="198.19.0.2"), hook="prerouting", ctype="nat",
                  priority=-100), "at hook prerouting"),
    (lambda: _one(action=Action("reject"), hook="postrouting"), "reject in a filter"),
    (lambda: _one(action=Action("masquerade"), hook="input", ctype="nat", priority=100),
     "needs a nat chain at postrouting"),
    (lambda: _one(hook="forward", ctype="nat"), "a nat chain at hook forward"),
    (lambda: _one(hook="prerouting", ctype="nat", priority=-200), "above -200"),
    (lambda: _one(Match(proto="udp"), Action("reject", reject_with="tcp-reset")),
     "needs protocol tcp"),
    (lambda: _one(Match(), Action("masquerade", port=1), hook="postrouting", ctype="nat",
                  priority=100), "a masquerade port needs protocol tcp or udp"),
    (lambda: _one(action=Action("dnat", addr="198.19.0.2", port=80), hook="prerouting",
                  ctype="nat", priority=-100), "needs protocol tcp or udp"),
    (lambda: _one(Match(mark=(0x100, 0xFF))), "outside its mask"),
    (lambda: _one(action=Action("log", log_prefix='say "hi"')), "no quotes"),
    (lambda: _one(action=Action("reject", reject_with="icmp-host-prohibited"),
                  family="inet"), "needs an IPv4 match"),
    (lambda: _one(Match(dst=Prefix.of("2001:2::1"))), "IPv6 match in table ip"),
    (lambda: _one(Match(iif=Iface("+", negate=True))), "matches no packet"),
])
def test_refuses_what_the_kernel_would(make, words):
    with pytest.raises(RuleSetError, match=words):
        make()


def _with_set(s: Set, family="ip") -> RuleSet:
    return RuleSet("t", (Table(family, "t", (Chain("c", (
        Rule("r", Match(sets=(SetRef(s.name, ("saddr",) * len(s.keys)),))),)),), (s,)),))


@pytest.mark.parametrize("s, words", [
    (Set("s", ("addr",), (("198.18.0.1",), ("198.18.0.1/32",))), "appears twice"),
    (Set("s", ("addr",), (("198.18.0.0/24",), ("198.18.0.128/25",)), interval=True),
     "overlap"),
    (Set("s", ("addr",), (("198.18.0.0/24",),)), "a prefix where one address belongs"),
    (Set("s", ("addr",), (("2001:2::1",),)), "not an IPv4 address"),
    (Set("fwd", ("addr",)), "chain name|set name 'fwd'"),
    (Set("ll", ("addr",)), "set name 'll'"),
])
def test_refuses_sets_nft_would(s, words):
    with pytest.raises(RuleSetError, match=words):
        nft.render(_with_set(s), IFS)


@pytest.mark.parametrize("name", ["in", "x-y", "DOCKER-USER", "a.b/c", "_x", "ACCEPT"])
def test_names_nft_takes(name):
    rs = RuleSet("t", (Table("ip", name, (Chain(name),)),))
    assert f"\tchain {name} {{" in nft.render(rs, IFS)


@pytest.mark.parametrize("name", ["fwd", "accept", "counter", "1x", "a b", "x:y", ""])
def test_names_nft_refuses(name):
    rs = RuleSet("t", (Table("ip", "t", (Chain(name),)),))
    with pytest.raises(RuleSetError, match="not one nft can parse"):
        nft.render(rs, IFS)


def test_comment_length_is_nft_limit():
    ok = Rule("r", comment="x" * (128 - len(" fwb:r")))
    long = Rule("r", comment="x" * (129 - len(" fwb:r")))
    for rule, fails in ((ok, False), (long, True)):
        rs = RuleSet("t", (Table("ip", "t", (Chain("c", (rule,)),)),))
        if fails:
            with pytest.raises(RuleSetError, match="128 bytes"):
                nft.render(rs, IFS)
        else:
            nft.render(rs, IFS)


# --- ids and comparison -------------------------------------------------------------------

@pytest.mark.parametrize("comment, parsed", [
    ("fwb:allow-1", ("allow-1", None)),
    ("burst of 5 fwb:limited", ("limited", "burst of 5")),
    ("just mine", (None, "just mine")),
    ("", (None, None)),
])
def test_rule_id(comment, parsed):
    assert nft.rule_id(comment) == parsed


def test_strip_ids():
    text = ('\t\taccept comment "fwb:a"\n\t\tdrop comment "mine fwb:b"\n'
            '\t\tdrop comment "only mine"\n')
    assert nft.strip_ids(text) == '\t\taccept\n\t\tdrop comment "mine"\n' \
        '\t\tdrop comment "only mine"\n'


# What nft 1.0.6 listed after `nft -f` of seed000(3, layout="set") with these
# interfaces, a few packets later: elements in hash order, blank lines, counters.
LISTED = """table ip fwbench {
	set allowed {
		type ipv4_addr . inet_proto . inet_service
		elements = { 198.19.0.2 . udp . 5201, 198.19.0.2 . tcp . 40000,
			     198.19.0.2 . tcp . 40001 }
	}

	chain forward {
		type filter hook forward priority filter; policy drop;
		iifname "fwb000000-f0" jump from_client comment "fwb:from-client"
		iifname "fwb000000-f1" jump from_server comment "fwb:from-server"
	}

	chain from_client {
		ip daddr . meta l4proto . th dport @allowed counter packets 20 bytes 1200 accept comment "fwb:allowed"
		ip daddr 198.19.0.2 tcp dport 5201 counter packets 0 bytes 0 accept comment "fwb:control"
		ip daddr 198.19.0.2 icmp type echo-request counter packets 3 bytes 252 accept comment "fwb:ping"
	}

	chain from_server {
		accept comment "fwb:return-path"
	}
}
"""


def test_comparable_matches_a_listing():
    lines, elements = nft.comparable(nft.render(seed000(3, layout="set"), IFS))
    got_lines, got_elements = nft.comparable(LISTED)
    assert lines == got_lines
    assert sorted(elements["ip fwbench allowed"]) == sorted(got_elements["ip fwbench allowed"])
    assert len(elements["ip fwbench allowed"]) == 3


def test_comparable_sees_a_difference():
    lines, _ = nft.comparable(nft.render(seed000(3, layout="set"), IFS))
    got_lines, _ = nft.comparable(LISTED.replace("tcp dport 5201", "tcp dport 5202"))
    assert lines != got_lines
