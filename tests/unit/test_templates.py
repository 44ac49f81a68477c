"""The rule-set templates seed001, seed004-forward/-nat, droprate and random: valid
for a range of settings, sized as documented, deterministic, ids as specified,
every address in the benchmarking ranges, and probes the reference evaluator
agrees with."""
import inspect
import ipaddress
import random
from dataclasses import replace

import pytest

from fwbench.ruleset import templates
from fwbench.ruleset.evaluate import evaluate
from fwbench.ruleset.importers.iptables_save import parse
from fwbench.ruleset.model import (ACCEPT, CLIENT, DROP, SERVER, Action, HashLimit, Iface,
                                   Match, Packet, Prefix, Rule, RuleSet, RuleSetError, Set,
                                   SetRef, StringMatch, Table, Unsupported, as_dict, jump,
                                   validate)
from fwbench.ruleset.templates import droprate as dr
from fwbench.ruleset.templates import random as rnd
from fwbench.ruleset.templates.seed001 import seed001
from fwbench.ruleset.templates.seed004 import seed004_forward, seed004_nat

BENCH = (ipaddress.ip_network("198.18.0.0/15"), ipaddress.ip_network("2001:2::/48"))
LINKS = (ipaddress.ip_network("198.18.0.0/24"), ipaddress.ip_network("198.19.0.0/24"),
         ipaddress.ip_network("2001:2:0:1::/64"), ipaddress.ip_network("2001:2:0:2::/64"))


def _addresses(rs: RuleSet) -> list[str]:
    out = []
    for t in rs.tables:
        for s in t.sets:
            out += [e[s.keys.index("addr")] for e in s.elements if "addr" in s.keys]
    for _, _, r in rs.rules():
        out += [p.net for p in (r.match.src, r.match.dst) if p]
        if r.action.addr:
            out.append(r.action.addr)
    packets = [rs.flow] + [p.packet for p in rs.probes] + [p.translated for p in rs.probes]
    out += [a for p in packets if p for a in (p.saddr, p.daddr)]
    return out


def _in_ranges(rs: RuleSet) -> None:
    for a in _addresses(rs):
        net = ipaddress.ip_network(a, strict=False)
        assert any(net.version == b.version and net.subnet_of(b) for b in BENCH), a


def _probes_agree(rs: RuleSet, flow_forwarded: bool = True) -> None:
    """Every probe (and the measured flow) as the reference evaluator sees it."""
    for p in rs.probes:
        v = evaluate(rs, p.packet)
        assert v.forward == p.forward, (rs.name, p.name, v.reason)
        if p.rule is not None:
            assert p.rule in v.counted, (rs.name, p.name, v.counted)
        if p.translated is not None:
            assert v.translated == p.translated, (rs.name, p.name, v.translated)
    if rs.flow_rule is not None:
        v = evaluate(rs, rs.flow)
        assert v.forward == flow_forwarded and rs.flow_rule in v.counted, (rs.name, v)
        assert rs.rule(rs.flow_rule).counter


def _ids(rs: RuleSet) -> list[str]:
    return [r.id for _, _, r in rs.rules()]


def test_the_registry_names_every_template():
    for name in ("seed001", "seed004-forward", "seed004-nat", "droprate", "random"):
        assert callable(templates.get(name))


# --- seed001 ------------------------------------------------------------------------

@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize("f", [0, 2, 4])
@pytest.mark.parametrize("n", [1, 2, 7, 320])
def test_seed001_sizes_ids_addresses_and_probes(n, f, version):
    rs = seed001(n, f, version=version)
    assert rs.size == rs.rule_count == f * n
    assert rs.ipt_prefix == "fwb_" and rs.versions == {version}
    family = "ip" if version == 4 else "ip6"
    filt = rs.table(family, "filter")
    (fwd,) = filt.chains
    assert (fwd.name, fwd.hook, fwd.priority) == ("FORWARD", "forward", 0)
    assert fwd.policy == ("accept" if f == 0 else "drop")
    if f >= 2:
        want = [x for i in range(1, n + 1) for x in (f"up-{i}", f"down-{i}")]
        assert [r.id for r in fwd.rules] == want
        assert rs.flow_rule == f"up-{n}"
        # The last client is the testbed's: the measured flow passes all others.
        last = fwd.rules[-2].match
        assert last.src.network.network_address == ipaddress.ip_address(rs.flow.saddr)
        clients = {r.match.src.net for r in fwd.rules[::2]}
        assert len(clients) == n
        others = [ipaddress.ip_network(c) for c in clients if c != last.src.net]
        assert not any(o.subnet_of(link) for o in others for link in LINKS
                       if o.version == link.version)
    else:
        assert rs.flow_rule is None and fwd.rules == ()
    if f == 4:
        mangle = rs.table(family, "mangle").chain("PREROUTING")
        assert (mangle.hook, mangle.priority, mangle.type) == ("prerouting", -150, "filter")
        assert [r.id for r in mangle.rules] == \
            [x for i in range(1, n + 1) for x in (f"mark-up-{i}", f"mark-down-{i}")]
        assert all(r.action.kind == "mark" and r.action.mark for r in mangle.rules)
        assert len({r.action.mark for r in mangle.rules}) == n
        # The mark rule and the forward rule match the same packets.
        assert [r.match for r in mangle.rules] == [r.match for r in fwd.rules]
        assert f"mark-up-{n}" in evaluate(rs, rs.flow).counted
    else:
        assert len(rs.tables) == 1
    _in_ranges(rs)
    _probes_agree(rs)
    assert any(not p.forward for p in rs.probes) == (f >= 2)


def test_seed001_is_deterministic_and_refuses_bad_settings(elsewhere):
    assert [seed001(5, 4).digest()] == elsewhere(
        "from fwbench.ruleset.templates.seed001 import seed001", "seed001(5, 4).digest()")
    assert seed001(5, 2).digest() != seed001(5, 4).digest()
    for args, kw in (((5, 3), {}), ((0, 2), {}), ((5, 2), {"version": 5}),
                     ((5, 2), {"proto": "sctp"})):
        with pytest.raises(RuleSetError):
            seed001(*args, **kw)


def test_seed001_tcp_rules_match_tcp():
    rs = seed001(3, 2, proto="tcp")
    assert {r.match.proto for _, _, r in rs.rules()} == {"tcp"}
    assert rs.flow.proto == "tcp"
    _probes_agree(rs)


@pytest.mark.parametrize("f", [0, 2, 4])
def test_seed001_stateful_accepts_established_first_and_the_fill_last(f):
    rs = seed001(3, f, proto="tcp", stateful=True)
    fwd = [r for t, c, r in rs.rules() if c.name == "FORWARD"]
    assert fwd[0].id == "established" and fwd[0].match.ct_state == {"established", "related"}
    assert fwd[-1].id == "fill" and fwd[-1].match.proto == "udp"
    assert [r.id for r in fwd[1:-1]] == [r.id for t, c, r in seed001(3, f, proto="tcp").rules()
                                         if c.name == "FORWARD"]
    assert rs.name == f"seed001-f{f}-stateful" and rs.digest() != seed001(3, f).digest()
    _probes_agree(rs)


# --- seed004 ------------------------------------------------------------------------

APPENDIX_D_E = """\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -i ens5 -p tcp -m tcp --dport 5001 -j DNAT --to-destination 192.168.1.10
-A PREROUTING -i ens5 -p udp -m udp --dport 5001 -j DNAT --to-destination 192.168.1.10
-A POSTROUTING -s 192.168.1.10/32 -o ens5 -j SNAT --to-source 192.168.2.1
COMMIT
*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:forward-external - [0:0]
:forward-internal - [0:0]
:input-external - [0:0]
:input-internal - [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i enp1s0 -j input-internal
-A INPUT -i ens5 -j input-external
-A INPUT -i lo -j ACCEPT
-A FORWARD -i enp1s0 -j forward-internal
-A FORWARD -i ens5 -j forward-external
-A forward-external -p tcp -m tcp --dport 5001 -j ACCEPT
-A forward-external -p udp -m udp --dport 5001 -j ACCEPT
-A forward-external -p icmp -m icmp --icmp-type 8 -j ACCEPT
-A forward-external -p icmp -m icmp --icmp-type 0 -j ACCEPT
-A forward-internal -j ACCEPT
-A input-external -p tcp -m tcp --dport 22 -j ACCEPT
-A input-internal -j ACCEPT
COMMIT
"""
# Appendix E's nat table over Appendix D's filter table (E's own filter table lacks
# the 5001 accepts that Appendix C has), the seed's names mapped onto the testbed.
_SEED_IFACES = {"ens5": CLIENT, "enp1s0": SERVER}
_SEED_ADDRS = {"192.168.1.10/32": "198.19.0.2/32", "192.168.1.10": "198.19.0.2",
               "192.168.2.1": "198.18.0.1"}


def _to_testbed(r: Rule) -> Rule:
    m, a = r.match, r.action
    for side in ("iif", "oif"):
        i = getattr(m, side)
        if i:
            m = replace(m, **{side: Iface(_SEED_IFACES.get(i.name, i.name), i.negate)})
    if m.src:
        m = replace(m, src=Prefix(_SEED_ADDRS[m.src.net], m.src.negate))
    if a.addr:
        a = replace(a, addr=_SEED_ADDRS[a.addr])
    return Rule(r.id, m, a)


def test_seed004_nat_is_the_seeds_appendices_as_the_importer_reads_them():
    seed = parse(APPENDIX_D_E, "appendix D+E")
    mine = seed004_nat()
    assert [(t.family, t.name) for t in seed.tables] == [("ip", "nat"), ("ip", "filter")]
    for t in seed.tables:
        ours = mine.table(t.family, t.name)
        assert [c.name for c in ours.chains] == [c.name for c in t.chains]
        for c in t.chains:
            o = ours.chain(c.name)
            assert (o.hook, o.priority, o.type, o.policy) == \
                (c.hook, c.priority, c.type, c.policy)
            assert [(r.id, r.match, r.action) for r in o.rules] == \
                [(r.id, r.match, r.action) for r in map(_to_testbed, c.rules)]


@pytest.mark.parametrize("n_extra", [0, 1, 25, 300])
def test_seed004_forward_ids_sizes_and_probes(n_extra):
    rs = seed004_forward(n_extra=n_extra)
    assert rs.size == n_extra and rs.rule_count == 13 + n_extra
    assert [t.name for t in rs.tables] == ["filter"]
    assert _ids(rs) == [f"filter-{i}" for i in range(1, 14 + n_extra)]
    ext = rs.table("ip", "filter").chain("forward-external")
    assert len(ext.rules) == n_extra + 4
    # The fillers come first, and the measured flow passes them all.
    assert rs.flow_rule == ext.rules[n_extra + 1].id == f"filter-{8 + n_extra}"
    assert evaluate(rs, rs.flow).counted[-1] == rs.flow_rule
    assert rs.flow.dport == 5001
    _in_ranges(rs)
    _probes_agree(rs)


@pytest.mark.parametrize("n_extra", [0, 3])
def test_seed004_nat_ids_translation_and_probes(n_extra):
    rs = seed004_nat(n_extra=n_extra)
    assert rs.size == n_extra and rs.rule_count == 16 + n_extra
    nat = rs.table("ip", "nat")
    assert [r.id for c in nat.chains for r in c.rules] == ["nat-1", "nat-2", "nat-3"]
    assert [r.action.kind for c in nat.chains for r in c.rules] == ["dnat", "dnat", "snat"]
    # The first rule that uses dnat: what a backend without NAT names.
    assert rs.features()["dnat"] == "rule nat-1"
    assert rs.features()["snat"] == "rule nat-3"
    assert (nat.chain("PREROUTING").priority, nat.chain("POSTROUTING").priority) == (-100, 100)
    # The flow goes to the port-forwarded service and arrives at the server.
    v = evaluate(rs, rs.flow)
    assert rs.flow.daddr == "198.19.0.100" and v.translated.daddr == "198.19.0.2"
    assert "nat-2" in v.counted
    _in_ranges(rs)
    _probes_agree(rs)


def test_seed004_refuses_a_negative_size():
    with pytest.raises(RuleSetError):
        seed004_forward(n_extra=-1)


# --- droprate -------------------------------------------------------------------------

# Matches the reference evaluator cannot judge (a payload).
UNJUDGED = ("string-bm", "string-kmp")


@pytest.mark.parametrize("treatment", dr.TREATMENTS)
def test_droprate_treatments_hold_their_rules(treatment):
    rs = dr.droprate(treatment=treatment, size=7, nonmatching=3)
    assert rs.flow_rule == "flood" and rs.name == f"droprate-{treatment}"
    assert rs.flow.daddr == "198.18.0.1" and rs.flow.dport == dr.FLOOD_PORT
    size = {"notrack": 2, "conntrack": 2, "raw-after-rules": 4, "ipset": 7, "nftset": 7}
    assert rs.size == size.get(treatment, 1)
    assert rs == dr.droprate(treatment=treatment, size=7, nonmatching=3)
    (table,) = rs.tables
    (chain,) = table.chains
    place = {"nft-ingress": ("netdev", "ingress", 0), "filter-input": ("ip", "input", 0)}
    assert (table.family, chain.hook, chain.priority) == \
        place.get(treatment, ("ip", "prerouting", -300))
    assert chain.policy == "accept"
    assert chain.device == (CLIENT if treatment == "nft-ingress" else None)
    flood = rs.rule("flood")
    if treatment in dr.ACCEPT_GROUP:
        assert chain.rules[0] is flood and not rs.probes
        assert flood.action.kind == ("notrack" if treatment == "notrack" else "ct")
        assert chain.rules[1].match == Match(proto="icmp")
        assert chain.rules[1].action == Action("ct")
    else:
        # The drop is last: behind the non-matching rules in raw-after-rules.
        assert chain.rules[-1] is flood and flood.action == DROP
        assert [p.forward for p in rs.probes] == [False]
    _in_ranges(rs)
    if treatment in UNJUDGED:
        with pytest.raises(Unsupported) as e:
            evaluate(rs, rs.flow)
        assert str(e.value) == "reference evaluator: unsupported: string match (rule flood)"
    elif treatment == "hashlimit":
        # A rate limit: its bucket starts full, so the reference lets the flow (to
        # the firewall itself) pass, and says that the limit may decide it otherwise.
        from fwbench.ruleset.evaluate import RateLimits
        v = evaluate(rs, rs.flow)
        assert v.local and v.decided_by is None
        assert RateLimits(rs).reached(rs.flow) == ("flood",)
    elif chain.hook != "input":   # the evaluator follows forwarded packets only
        _probes_agree(rs, flow_forwarded=False)


def test_droprate_sets_and_fillers_match_treatments_py():
    rs = dr.droprate(treatment="ipset", size=3)
    (s,) = rs.tables[0].sets
    assert s.elements == (("198.18.0.2",), ("198.18.1.0",), ("198.18.1.1",))
    assert rs.layout == "set" and rs.ipt_prefix + s.name == "fwb_bl"
    # Seed 002's ipset counted per element; both sets are sized, so nft picks the
    # set implementation it picked for seed 002's `size`d set.
    assert s.size == 3 and s.counters
    (nft_set,) = dr.droprate(treatment="nftset", size=3).tables[0].sets
    assert nft_set == replace(s, counters=False)
    rs = dr.droprate(treatment="raw-after-rules", nonmatching=2)
    assert [r.id for _, _, r in rs.rules()] == ["nonmatching-1", "nonmatching-2", "flood"]
    assert [r.match.src.net for _, _, r in list(rs.rules())[:2]] == ["198.18.1.0/32",
                                                                    "198.18.1.1/32"]
    fill = dr.filler_addresses(65281)
    assert fill[65279:] == ("198.18.255.255", "198.19.1.0")
    assert not any(ipaddress.ip_address(a) in n for a in fill[::97] for n in dr.TESTBED_V4)


def test_droprate_string_and_hashlimit_rules():
    for algo in ("bm", "kmp"):
        rs = dr.droprate(treatment=f"string-{algo}", text="bar.org")
        assert rs.rule("flood").match == Match(proto="udp",
                                               string=StringMatch("bar.org", algo))
        assert rs.features()["string match"] == "rule flood"
    rs = dr.droprate(treatment="hashlimit", hashlimit_pps=500)
    assert rs.rule("flood").match == Match(proto="udp", hashlimit=HashLimit(
        "udp", 500, "second", burst=5, src_prefix=16))
    assert rs.features()["hashlimit"] == "rule flood"


def test_droprate_ingress_chain_sees_its_device_only():
    rs = dr.droprate(treatment="nft-ingress")
    v = evaluate(rs, rs.flow)
    assert not v.forward and v.counted == ("flood",)
    # From the server side the packet never meets the client side's ingress chain.
    back = replace(rs.flow, iif="server", saddr="198.19.0.2")
    assert evaluate(rs, back).counted == ()
    unbound = rs.with_tables((replace(rs.tables[0], chains=(
        replace(rs.tables[0].chains[0], device=None),)),))
    assert evaluate(unbound, back).counted == ("flood",)


def test_fields_added_for_droprate_leave_other_rule_sets_digests_alone():
    """Chain.device, Match.string/hashlimit and Set.size/counters are left out of
    the digest (and as_dict) at their defaults: rule sets that do not use them
    keep the digests they had before the fields existed."""
    def keys(obj) -> set:
        if isinstance(obj, dict):
            return set(obj) | set().union(*(keys(v) for v in obj.values()))
        if isinstance(obj, list):
            return set().union(set(), *(keys(v) for v in obj))
        return set()
    later = {"device", "string", "hashlimit", "counters"}
    for rs in (seed001(5, 4), dr.droprate(treatment="raw")):
        assert not keys(as_dict(rs)["tables"]) & (later | {"size"})
    assert keys(as_dict(dr.droprate(treatment="nft-ingress"))["tables"]) >= {"device"}
    assert keys(as_dict(dr.droprate(treatment="ipset", size=2))["tables"]) >= \
        {"size", "counters"}
    assert dr.droprate(treatment="ipset", size=2).digest() != \
        dr.droprate(treatment="nftset", size=2).digest()


@pytest.mark.parametrize("change, message", [
    (lambda c: replace(c, hook="prerouting", priority=-300), "hook prerouting in family"),
    (lambda c: replace(c, device=""), "chain ingress: a device belongs to a netdev ingress"),
    (lambda c: replace(c, rules=(replace(c.rules[0], match=Match(
        string=StringMatch("x", "regex"))),)), "string match algorithm 'regex'"),
    (lambda c: replace(c, rules=(replace(c.rules[0], match=Match(
        hashlimit=HashLimit("h", 10, "week"))),)), "hashlimit per 'week'"),
    (lambda c: replace(c, rules=(replace(c.rules[0], match=Match(
        hashlimit=HashLimit("", 10))),)), "a hashlimit without a name"),
    (lambda c: replace(c, rules=(replace(c.rules[0], match=Match(
        hashlimit=HashLimit("h", 10, src_prefix=129))),)), "hashlimit source prefix /129"),
])
def test_the_constructs_droprate_added_are_validated(change, message):
    rs = dr.droprate(treatment="nft-ingress")
    table = rs.tables[0]
    with pytest.raises(RuleSetError, match=message):
        validate(rs.with_tables((replace(table, chains=(change(table.chains[0]),)),)))
    s = dr.droprate(treatment="nftset", size=3).tables[0].sets[0]
    with pytest.raises(RuleSetError, match="set bl: size 2 is below its 3 elements"):
        validate(RuleSet("t", (Table("ip", "t", (), (replace(s, size=2),)),)))


def test_droprate_refuses_bad_settings_in_one_line():
    with pytest.raises(RuleSetError, match="unknown treatment"):
        dr.droprate(treatment="bogus")
    with pytest.raises(RuleSetError):
        dr.droprate(treatment="ipset", size=0)
    with pytest.raises(RuleSetError):
        dr.droprate(treatment="ipset", size=dr.MAX_SET_SIZE + 1)
    with pytest.raises(RuleSetError, match="rule flood: an empty string match"):
        dr.droprate(treatment="string-bm", text="")
    with pytest.raises(RuleSetError, match="rule flood: hashlimit rate 0"):
        dr.droprate(treatment="hashlimit", hashlimit_pps=0)


# --- random ---------------------------------------------------------------------------

def _random_sets():
    for version in (4, 6):
        for seed in range(60):
            for n in (1, 2, 5, 13, 40):
                yield rnd.random_ruleset(n_rules=n, seed=seed, version=version)


def test_random_sets_are_exact_in_size_valid_and_iptables_shaped():
    for rs in _random_sets():
        assert rs.rule_count == rs.size
        validate(rs)
        family = "ip" if rs.flow.version == 4 else "ip6"
        assert {t.family for t in rs.tables} == {family}
        names = [t.name for t in rs.tables]
        assert names in (["filter"], ["mangle", "filter"])
        filt = rs.table(family, "filter")
        bases = [c for c in filt.chains if c.base]
        assert [(c.name, c.hook, c.priority, c.type) for c in bases] == \
            [("FORWARD", "forward", 0, "filter")]
        assert {c.name for c in filt.chains if not c.base} <= {"c1", "c2", "c3", "c4"}
        if "mangle" in names:
            (m,) = rs.table(family, "mangle").chains
            assert (m.name, m.hook, m.priority, m.policy) == \
                ("PREROUTING", "prerouting", -150, "accept")
            assert {r.action.kind for r in m.rules} <= {"mark", "counter", "accept"}
            assert not any(r.match.oif or r.match.sets for r in m.rules)
        ids = _ids(rs)
        assert ids == [f"{t.name}-{i}" for t in rs.tables
                       for i in range(1, sum(len(c.rules) for c in t.chains) + 1)]
        # Return only from user chains; every user chain entered from an earlier one.
        for k, c in enumerate(filt.chains):
            assert c.base or any(r.action.chain == c.name for d in filt.chains[:k]
                                 for r in d.rules)
            assert not (c.base and any(r.action.kind == "return" for r in c.rules))
        _in_ranges(rs)


def test_random_sets_accept_the_measured_flow_as_the_evaluator_sees_it():
    for rs in _random_sets():
        assert rs.flow == Packet(rs.flow.version, "client", rnd._Space(rs.flow.version).client,
                                 rnd._Space(rs.flow.version).server, "udp",
                                 rnd.PROBE_SPORT, 5201)
        v = evaluate(rs, rs.flow)
        assert v.forward and v.decided_by == rs.flow_rule, (rs.name, rs.size, v)
        _probes_agree(rs)


def test_random_sets_are_deterministic_and_differ_by_seed(elsewhere):
    a = rnd.random_ruleset(n_rules=50, seed=3)
    assert [a.digest(), repr(a)] == elsewhere(
        f"from {rnd.__name__} import random_ruleset\nr = random_ruleset(n_rules=50, seed=3)",
        "r.digest()", "repr(r)")
    assert a.digest() != rnd.random_ruleset(n_rules=50, seed=4).digest()
    assert rnd.random_ruleset(n_rules=50, seed=3, version=6).versions == {6}


def test_random_sets_are_awkward():
    """Across a few seeds every awkward construct the generator promises appears."""
    seen: set[str] = set()
    policies = set()
    for seed in range(40):
        rs = rnd.random_ruleset(n_rules=40, seed=seed)
        seen |= set(rs.features())
        policies.add(rs.table("ip", "filter").chain("FORWARD").policy)
        for t in rs.tables:
            for c in t.chains:
                matches = [r.match for r in c.rules]
                if len(set(matches)) < len(matches):
                    seen.add("twin")
            for s in t.sets:
                seen.add("set " + "/".join(s.keys) + (" interval" if s.interval else ""))
    for feature in ("negation", "port range", "port list", "icmp type", "user chain", "jump",
                    "goto", "return", "reject", "counter", "mark set", "mark match",
                    "set match", "hook prerouting", "saddr prefix", "oif", "twin",
                    "set addr interval", "set addr", "set addr/proto/port"):
        assert feature in seen, feature
    assert policies == {"accept", "drop"}


def test_random_sets_refuse_bad_settings():
    with pytest.raises(RuleSetError):
        rnd.random_ruleset(n_rules=0, seed=1)
    with pytest.raises(RuleSetError):
        rnd.random_ruleset(n_rules=5, seed=1, version=5)


def test_random_walk_undoes_a_goto_that_ends_at_the_policy():
    """The generator's own flow walk: FORWARD's goto into a chain that falls off
    reaches the policy, so the goto must stop matching the flow; a drop in a
    jumped-to chain must too; a mark set earlier decides a mark match later."""
    gen = rnd._Gen(random.Random(1), 4)
    flow = Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 40404, 5201)
    chains = {
        "FORWARD": [Rule("f1", Match(), Action("mark", mark=2)),
                    Rule("f2", Match(), Action("goto", chain="c1")),
                    Rule("f3", Match(mark=(2, 0xFF)), jump("c2")),
                    Rule("f4", Match(proto="udp"), ACCEPT)],
        "c1": [Rule("c1-1", Match(proto="tcp"), DROP)],
        "c2": [Rule("c2-1", Match(iif=Iface(CLIENT)), DROP),
               Rule("c2-2", Match(mark=(2, 0xFF), mark_negate=True), ACCEPT)],
    }
    assert rnd._settle(gen, chains, [], flow, {}) == "f4"
    for rid, chain, k in (("f2", "FORWARD", 1), ("c2-1", "c2", 0)):
        r = chains[chain][k]
        assert r.id == rid and not rnd._hits(r.match, flow, 2, {})
    f3 = chains["FORWARD"][2]
    assert f3.id == "f3" and rnd._hits(f3.match, flow, 2, {})
    nets = Set("nets", ("addr",), (("198.18.0.0/30",),), 4, interval=True)
    svc = Set("svc", ("addr", "proto", "port"), (("198.19.0.2", "udp", 5201),), 4)
    sets = {"nets": nets, "svc": svc}
    assert rnd._hits(Match(sets=(SetRef("nets", ("saddr",)),)), flow, 0, sets)
    assert not rnd._hits(Match(sets=(SetRef("nets", ("daddr",)),)), flow, 0, sets)
    assert rnd._hits(Match(sets=(SetRef("svc", ("daddr", "proto", "dport")),)), flow, 0, sets)
    assert not rnd._hits(Match(sets=(SetRef("svc", ("daddr", "proto", "dport"), True),)),
                         flow, 0, sets)
    assert not rnd._hits(Match(oif=Iface(SERVER, negate=True)), flow, 0, sets)
    assert rnd._hits(Match(iif=Iface("veth+", negate=True)), flow, 0, sets)


def test_random_sets_leave_most_of_the_corpus_to_more_than_a_few_rules():
    """A rule set whose first few rules decide every packet tests nothing after them:
    at 500 rules, the reference sees a tenth of the rules count a corpus packet, and
    the corpus is neither all forwarded nor all dropped."""
    from fwbench.ruleset import corpus
    from fwbench.ruleset.evaluate import Evaluator
    for version in (4, 6):
        for seed in range(1, 6):
            rs = rnd.random_ruleset(n_rules=500, seed=seed, version=version)
            ev = Evaluator(rs)
            verdicts = [ev.evaluate(p) for p in corpus.build(rs, 2000, seed)]
            counted = set().union(*(v.counted for v in verdicts))
            forwarded = sum(v.forward for v in verdicts)
            assert len(counted) >= 40, (version, seed, len(counted))
            assert 0 < forwarded < len(verdicts), (version, seed, forwarded)


@pytest.mark.parametrize("name", sorted(templates.TEMPLATES))
def test_every_template_builds_with_its_defaults(name):
    """`fwbench check --template NAME` with no --param, as the README writes it."""
    rs = templates.build(name)
    assert isinstance(rs, RuleSet) and validate(rs) is not None
    assert all(d is not inspect.Parameter.empty
               for _, d in templates.settings(name).values()), name


def test_settings_given_as_text_take_the_type_the_template_declares():
    rs = templates.build("seed000", {"n": "7", "counters": "false", "layout": "set"})
    assert rs.size == 7 and rs.layout == "set"
    assert templates.build("seed000", {"n": "7"}) == templates.get("seed000")(7)
