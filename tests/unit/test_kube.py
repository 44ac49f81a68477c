"""Random choice, verdict maps and marks, as kube-proxy's rule sets use them: the
importers' model, both renderers' text, the reference's outcomes and their
probabilities, the chi-square test of an exchange, and the kube-proxy generator."""
from dataclasses import replace
from fractions import Fraction

import pytest

from fwbench.backends.base import Exchange, chance_test
from fwbench.ruleset import corpus as corpora
from fwbench.ruleset.evaluate import Evaluator, numgen_weights
from fwbench.ruleset.importers import iptables_save, nft_json
from fwbench.ruleset.model import (RANDOM_SCALE, Action, Chain, Interfaces, Match, Packet,
                                   Rule, RuleSet, RuleSetError, Set, SetRef, Table,
                                   Unsupported, validate)
from fwbench.ruleset.render import iptables as ipt_render
from fwbench.ruleset.render import nft as nft_render
from fwbench.ruleset.templates import kube

IFS = Interfaces("c0", "s0")
NAT_HEAD = "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:S - [0:0]\n"


def _ipt(body: str):
    return iptables_save.parse(NAT_HEAD + body + "COMMIT\n", "k.rules")


# --- iptables: statistic, MARK, MASQUERADE --random-fully ----------------------------

@pytest.mark.parametrize("text, random", [
    ("--probability 0.50000000000", 1 << 31),
    # lround(P * 2**31) = 715827883: kube-proxy's 1/3 as save prints it.
    ("--probability 0.33333333349", 1431655766),
    ("--probability 0.33333333333", 1431655766),
    ("! --probability 0.25000000000", RANDOM_SCALE - (1 << 30)),
])
def test_statistic_random_is_the_kernels_31_bit_threshold(text, random):
    rs = _ipt(f"-A PREROUTING -m statistic --mode random {text} -j S\n")
    assert rs.rule("nat-1").match.random == random


def test_statistic_renders_back_to_the_same_threshold():
    rs = _ipt("-A PREROUTING -m statistic --mode random --probability 0.33333333349 -j S\n")
    text = ipt_render.render(rs, IFS, 4)
    line = next(ln for ln in text.splitlines() if "statistic" in ln)
    assert line == ('-A PREROUTING -m statistic --mode random --probability 0.33333333349 '
                    '-m comment --comment "fwb:nat-1" -j S')
    again = iptables_save.parse(text, "again.rules")
    assert again.rule("nat-1").match.random == 1431655766


@pytest.mark.parametrize("target, mark, mask", [
    ("--set-xmark 0x4000/0x4000", 0x4000, 0x4000),
    ("--set-xmark 0x4000/0x0", 0x4000, 0),           # kube-proxy's clearing xor
    ("--set-mark 0x1/0x3", 0x1, 0x3),
    ("--set-mark 0x4", 0x4, 0xFFFFFFFF),
    ("--or-mark 0x4000", 0x4000, 0x4000),
    ("--and-mark 0xffffbfff", 0, 0x4000),
    ("--xor-mark 0x4000", 0x4000, 0),
])
def test_mark_targets_are_xmark_pairs(target, mark, mask):
    a = _ipt(f"-A POSTROUTING -j MARK {target}\n").rule("nat-1").action
    assert (a.kind, a.mark, a.mark_mask) == ("mark", mark, mask)


def test_xor_mark_toggles_in_the_reference_and_renders_in_both():
    rs = _ipt("-A POSTROUTING -j MARK --set-xmark 0x4000/0x0\n")
    ev = Evaluator(rs)
    for before, after in ((0x4001, 0x0001), (0x0001, 0x4001)):
        p = Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2, mark=before)
        assert ev.evaluate(p).translated.mark == after
    assert '-j MARK --set-xmark 0x4000/0x0' in ipt_render.render(rs, IFS, 4)
    assert "meta mark set meta mark ^ 0x00004000" in nft_render.render(rs, IFS)


def test_masquerade_random_fully_leaves_the_source_port_to_the_kernel():
    rs = _ipt("-A POSTROUTING -j MASQUERADE --random-fully\n")
    assert rs.rule("nat-1").action.random_port
    v = Evaluator(rs).evaluate(Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2))
    assert v.sport_random and v.translated.saddr == "198.19.0.1"
    assert "-j MASQUERADE --random-fully" in ipt_render.render(rs, IFS, 4)
    assert "masquerade fully-random" in nft_render.render(rs, IFS)


@pytest.mark.parametrize("body, message", [
    ("-A PREROUTING -m statistic --mode nth --every 3 --packet 3 -j S\n",
     "k.rules:5: unsupported: --every 3 --packet 3 (a rule that always matches, or a "
     "packet past every)"),
    ("-A PREROUTING -m statistic --mode random --probability 1 -j S\n",
     "k.rules:5: unsupported: --probability 1, a rule that always or never matches"),
    ("-A PREROUTING --probability 0.5 -j S\n",
     "k.rules:5: --probability needs -m statistic"),
])
def test_what_statistic_the_model_cannot_hold_is_refused_in_one_line(body, message):
    with pytest.raises(RuleSetError) as e:
        _ipt(body)
    assert str(e.value) == message


# --- the model's maps and the reference ---------------------------------------------

def _kube_like(endpoints: int = 3) -> RuleSet:
    eps = [Chain(f"ep{i}", (Rule(f"d{i}", Match(proto="tcp"),
                                 Action("dnat", addr=f"198.19.0.{i + 2}")),))
           for i in range(endpoints)]
    pick = Set("pick", ("number",), tuple((i,) for i in range(endpoints)),
               verdicts=tuple(Action("goto", chain=f"ep{i}") for i in range(endpoints)),
               inline=True)
    ips = Set("ips", ("addr", "proto", "port"), (("198.19.5.1", "tcp", 80),),
              verdicts=(Action("goto", chain="svc"),))
    pre = Chain("pre", (Rule("v", action=Action("vmap", vmap=SetRef(
        "ips", ("daddr", "proto", "dport")))),), hook="prerouting", priority=-100,
        type="nat")
    svc = Chain("svc", (Rule("n", action=Action("vmap", vmap=SetRef("pick", ("number",)),
                                                 numgen=(endpoints, 0))),))
    return validate(RuleSet("k", (Table("ip", "k", (pre, svc, *eps), (ips, pick)),)))


def test_numgen_buckets_are_reciprocal_scale_shares():
    w = numgen_weights(3, 0)
    assert [w(0), w(1), w(2), w(3)] == [1431655766, 1431655765, 1431655765, 0]
    assert numgen_weights(2, 5)(6) == 1 << 31


def test_the_reference_gives_each_endpoint_with_its_exact_probability():
    ev = Evaluator(_kube_like())
    v = ev.evaluate(Packet(4, "client", "198.18.0.2", "198.19.5.1", "tcp", 1000, 80))
    got = {o.translated.daddr: q for q, o in v.possible}
    assert got == {"198.19.0.2": float(Fraction(1431655766, RANDOM_SCALE)),
                   "198.19.0.3": float(Fraction(1431655765, RANDOM_SCALE)),
                   "198.19.0.4": float(Fraction(1431655765, RANDOM_SCALE))}
    assert v is not v.outcomes[0][1] and v.translated.daddr == "198.19.0.2"
    assert v.outcomes[0][1].counted == ("v", "n", "d0")
    # A key the map lacks: on to the next rule, here the policy; nothing random.
    miss = ev.evaluate(Packet(4, "client", "198.18.0.2", "198.19.5.1", "tcp", 1000, 81))
    assert miss.outcomes == () and miss.counted == ("v",)
    assert miss.possible == ((1.0, miss),)


def test_mod_1_and_a_deterministic_rule_set_make_no_outcomes():
    v = Evaluator(_kube_like(1)).evaluate(
        Packet(4, "client", "198.18.0.2", "198.19.5.1", "tcp", 1000, 80))
    assert v.outcomes == () and v.translated.daddr == "198.19.0.2"


def test_two_random_rules_in_a_row_multiply():
    chain = Chain("forward", (Rule("a", Match(random=1 << 31), Action("drop")),
                              Rule("b", Match(random=1 << 30), Action("drop"))),
                  hook="forward")
    rs = validate(RuleSet("r", (Table("ip", "t", (chain,)),)))
    v = Evaluator(rs).evaluate(Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2))
    assert sorted((q, o.decided_by) for q, o in v.possible) == \
        [(0.125, "b"), (0.375, None), (0.5, "a")]


def test_iptables_renders_maps_as_rules_with_exact_shares():
    text = ipt_render.render(_kube_like(), IFS, 4)
    assert [ln for ln in text.splitlines() if ln.startswith(("-A PRE", "-A svc"))] == [
        '-A PREROUTING -m comment --comment "fwb:v"',
        "-A PREROUTING -d 198.19.5.1/32 -p tcp -m tcp --dport 80 -g svc",
        '-A svc -m comment --comment "fwb:n"',
        "-A svc -m statistic --mode random --probability 0.33333333349 -g ep0",
        "-A svc -m statistic --mode random --probability 0.50000000000 -g ep1",
        "-A svc -g ep2",
    ]


def test_a_share_the_statistic_cannot_hold_is_refused():
    # mod 4: the second rule would need 1/3, not a multiple of 2**-31.
    with pytest.raises(Unsupported) as e:
        ipt_render.render(_kube_like(4), IFS, 4)
    assert str(e.value) == ("unsupported: numgen map share 1073741824/3221225472 (not a "
                            "multiple of the statistic's 2**-31) (rule n)")


def test_nft_renders_a_named_map_and_an_inline_numgen_map():
    text = nft_render.render(_kube_like(), IFS)
    assert "\tmap ips {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n" \
           "\t\telements = {\n\t\t\t198.19.5.1 . tcp . 80 : goto svc\n\t\t}\n\t}" in text
    assert 'ip daddr . meta l4proto . th dport vmap @ips comment "fwb:v"' in text
    assert ('numgen random mod 3 vmap { 0 : goto ep0, 1 : goto ep1, 2 : goto ep2 } '
            'comment "fwb:n"') in text
    rs = _ipt("-A PREROUTING -m statistic --mode random --probability 0.25 -j S\n")
    assert "numgen random mod 2147483648 < 536870912 counter jump S" in \
        nft_render.render(rs, IFS)


# --- nft JSON ----------------------------------------------------------------------------

def _nft(*exprs, extra=()):
    items = [{"metainfo": {"json_schema_version": 1}},
             {"table": {"family": "ip", "name": "k", "handle": 1}},
             {"chain": {"family": "ip", "table": "k", "name": "pre", "handle": 2,
                        "type": "nat", "hook": "prerouting", "prio": -100,
                        "policy": "accept"}},
             {"chain": {"family": "ip", "table": "k", "name": "a", "handle": 3}},
             {"chain": {"family": "ip", "table": "k", "name": "b", "handle": 4}}]
    items += list(extra)
    items += [{"rule": {"family": "ip", "table": "k", "chain": "pre", "handle": 10 + i,
                        "expr": e}} for i, e in enumerate(exprs)]
    return nft_json.parse({"nftables": items}, "k.json")


NUMGEN = {"numgen": {"mode": "random", "mod": 3, "offset": 0}}


@pytest.mark.parametrize("op, right, share", [
    ("==", 0, 1431655766),
    ("!=", 0, RANDOM_SCALE - 1431655766),
    ("<", 2, 1431655766 + 1431655765),
    (">", 0, 2 * 1431655765),
])
def test_nft_numgen_matches_are_their_values_share(op, right, share):
    rs = _nft([{"match": {"op": op, "left": NUMGEN, "right": right}},
               {"goto": {"target": "a"}}])
    assert rs.rule("k-1").match.random == share


def test_nft_numgen_modulus_listed_negative_is_read_as_unsigned():
    big = {"numgen": {"mode": "random", "mod": -2147483648, "offset": 0}}
    rs = _nft([{"match": {"op": "<", "left": big, "right": 1 << 30}},
               {"goto": {"target": "a"}}])
    assert rs.rule("k-1").match.random == 1 << 31


def test_nft_vmaps_named_and_anonymous():
    named = {"map": {"family": "ip", "table": "k", "name": "ips", "map": "verdict",
                     "type": ["ipv4_addr", "inet_proto", "inet_service"],
                     "elem": [[{"concat": ["10.96.0.10", "tcp", 80]},
                               {"goto": {"target": "a"}}]]}}
    key = {"concat": [{"payload": {"protocol": "ip", "field": "daddr"}},
                      {"meta": {"key": "l4proto"}},
                      {"payload": {"protocol": "th", "field": "dport"}}]}
    rs = _nft([{"vmap": {"key": key, "data": "@ips"}}],
              [{"vmap": {"key": NUMGEN, "data": {"set": [[0, {"goto": {"target": "a"}}],
                                                         [1, {"goto": {"target": "b"}}]]}}}],
              extra=[named])
    t = rs.tables[0]
    a1, a2 = rs.rule("k-1").action, rs.rule("k-2").action
    assert a1.vmap == SetRef("ips", ("daddr", "proto", "dport")) and a1.numgen is None
    assert t.set("ips").elements == (("10.96.0.10", "tcp", 80),)
    assert t.set("ips").verdicts == (Action("goto", chain="a"),)
    assert a2.numgen == (3, 0) and t.set(a2.vmap.name).inline
    assert t.set(a2.vmap.name).elements == ((0,), (1,))


@pytest.mark.parametrize("expr, message", [
    ([{"match": {"op": "<", "left": {"numgen": {"mode": "inc", "mod": 2, "offset": 0}},
                 "right": 1}}, {"accept": None}],
     "unsupported: numgen inc < 1 (only ==)"),
    ([{"vmap": {"key": {"numgen": {"mode": "inc", "mod": 2, "offset": 0}},
                "data": {"set": [[0, {"goto": {"target": "a"}}]]}}}],
     "unsupported: numgen inc (only random)"),
    ([{"vmap": {"key": {"payload": {"protocol": "th", "field": "dport"}},
                "data": {"set": [[80, {"accept": None}]]}}}],
     "unsupported: a verdict map on a port, without tcp or udp in its key or its rule"),
    ([{"masquerade": {"flags": ["random", "persistent"]}}],
     "unsupported: NAT flags random, persistent"),
])
def test_nft_what_the_model_cannot_hold_is_refused(expr, message):
    with pytest.raises(RuleSetError) as e:
        _nft(expr)
    assert str(e.value) == f"k.json: table ip k chain pre rule 1 (handle 10): {message}"


def test_nft_xor_mark_and_fully_random():
    rs = _nft([{"mangle": {"key": {"meta": {"key": "mark"}},
                           "value": {"^": [{"meta": {"key": "mark"}}, 16384]}}}],
              [{"masquerade": {"flags": "fully-random"}}])
    a = rs.rule("k-1").action
    assert (a.mark, a.mark_mask) == (0x4000, 0)
    assert rs.rule("k-2").action == Action("masquerade", random_port=True)


# --- the chi-square test -------------------------------------------------------------------

def _exchange(rs: RuleSet, shares: tuple[int, ...]) -> Exchange:
    """Packets of `rs` to its service, seen DNATed to endpoint k shares[k] times."""
    pkts, seen = [], []
    for k, n in enumerate(shares):
        for j in range(n):
            p = Packet(4, "client", "198.18.0.2", "198.19.5.1", "tcp", 2000 + 10 * j + k, 80)
            pkts.append(p)
            seen.append(Packet(4, "client", "198.18.0.2", f"198.19.0.{k + 2}", "tcp",
                               p.sport, 80))
    return Exchange(pkts, seen, {})


def test_the_chi_square_test_passes_fair_shares_and_fails_skewed_ones(monkeypatch):
    rs = _kube_like()
    from fwbench.backends import base
    monkeypatch.setattr(base, "evaluator", lambda _: Evaluator(rs))
    fair = chance_test(rs, _exchange(rs, (40, 38, 42)))
    assert fair.level == 0.001 and fair.failed == []
    (group,) = fair.groups
    # The likeliest outcome (endpoint 0: one more u32 of the 2**32) first.
    assert group["seen"][0] == 40 and sorted(group["seen"]) == [38, 40, 42]
    assert group["packets"] == 120
    skewed = chance_test(rs, _exchange(rs, (90, 15, 15)))
    assert len(skewed.failed) == 1 and skewed.groups[0]["rejected"]
    few = chance_test(rs, _exchange(rs, (3, 4, 3)))
    assert few.failed == [] and "too few packets" in few.groups[0]["tested"]


def test_chance_copies_fill_a_group_of_alike_choices():
    rs = _kube_like()
    ev = Evaluator(rs)
    one = Packet(4, "client", "198.18.0.2", "198.19.5.1", "tcp", 1000, 80)
    extra = corpora.chance_copies(rs, [one], ev)
    assert len(extra) == corpora.CHANCE_GROUP - 1
    assert len(set(extra)) == len(extra) and one not in extra
    assert corpora.chance_copies(rs, [replace(one, dport=81)], ev) == []


# --- the generator ---------------------------------------------------------------------------

def test_generator_services_and_both_files_import():
    svcs = kube.services(4)
    assert [(s.cluster_ip, s.proto, s.port, len(s.endpoints)) for s in svcs] == [
        ("10.96.0.10", "tcp", 80, 1), ("10.96.0.11", "udp", 53, 2),
        ("10.96.0.12", "tcp", 443, 3), ("10.96.0.13", "tcp", 80, 1)]
    rs = iptables_save.parse(kube.iptables_save(4), "kube.rules")
    randoms = sorted(r.match.random for _, _, r in rs.rules() if r.match.random)
    assert randoms == [1431655766, 1 << 31, 1 << 31]
    text = kube.nft(4)
    assert text.count("numgen random mod") == 4 and text.count(" : goto service-") == 4


# --- connection marks ------------------------------------------------------------------

MANGLE_HEAD = "*mangle\n:PREROUTING ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n"


@pytest.mark.parametrize("target, kind, mark, mask, masks", [
    ("--set-xmark 0x20/0xf0", "ctmark", 0x20, 0xF0, (0xFFFFFFFF, 0xFFFFFFFF)),
    ("--set-mark 0x1", "ctmark", 0x1, 0xFFFFFFFF, (0xFFFFFFFF, 0xFFFFFFFF)),
    ("--save-mark --nfmask 0xff --ctmask 0xf0", "savemark", None, 0xFFFFFFFF, (0xFF, 0xF0)),
    ("--restore-mark --mask 0xff", "restoremark", None, 0xFFFFFFFF, (0xFF, 0xFF)),
])
def test_connmark_targets(target, kind, mark, mask, masks):
    rs = iptables_save.parse(MANGLE_HEAD + f"-A PREROUTING -j CONNMARK {target}\nCOMMIT\n",
                             "c.rules")
    a = rs.rule("mangle-1").action
    assert (a.kind, a.mark, a.mark_mask, a.ct_masks) == (kind, mark, mask, masks)


def test_connmark_save_and_restore_with_masks_in_the_reference():
    rs = iptables_save.parse(MANGLE_HEAD +
                             "-A PREROUTING -j CONNMARK --set-xmark 0xab/0xff\n"
                             "-A PREROUTING -j CONNMARK --save-mark --nfmask 0xf00 --ctmask 0xf00\n"
                             "-A FORWARD -j CONNMARK --restore-mark --nfmask 0xff --ctmask 0xf0\n"
                             "-A FORWARD -m connmark --mark 0x5ab -j DROP\nCOMMIT\n", "c.rules")
    ev = Evaluator(rs)
    # ct 0 -> 0xab -> (0xab & ~0xf00) ^ (0x512 & 0xf00) = 0x5ab; then the mark's low
    # byte is replaced: (0x512 & ~0xff) ^ (0x5ab & 0xf0) = 0x5a0.
    v = ev.evaluate(Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2, mark=0x512))
    assert v.decided_by == "mangle-4" and v.translated.mark == 0x5a0
    # Untracked (no connection): no ct mark to set, and no match either way.
    rs2 = iptables_save.parse(MANGLE_HEAD + "-A PREROUTING -m connmark ! --mark 0x1 -j DROP\n"
                              "COMMIT\n", "c.rules")
    p = Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2, ct_state="untracked")
    assert Evaluator(rs2).evaluate(p).forward
    tracked = Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2)
    assert not Evaluator(rs2).evaluate(tracked).forward


def test_connmark_renders_in_both():
    rs = iptables_save.parse(MANGLE_HEAD +
                             "-A PREROUTING -j CONNMARK --set-xmark 0x20/0xf0\n"
                             "-A PREROUTING -j CONNMARK --save-mark\n"
                             "-A FORWARD -j CONNMARK --restore-mark --nfmask 0xff --ctmask 0xff\n"
                             "-A FORWARD -m connmark ! --mark 0x10/0xff -j ACCEPT\nCOMMIT\n",
                             "c.rules")
    ipt = ipt_render.render(rs, IFS, 4)
    assert "-j CONNMARK --set-xmark 0x20/0xf0" in ipt
    assert "-j CONNMARK --save-mark --nfmask 0xffffffff --ctmask 0xffffffff" in ipt
    assert "-j CONNMARK --restore-mark --nfmask 0xff --ctmask 0xff" in ipt
    assert '-m connmark ! --mark 0x10/0xff -m comment --comment "fwb:mangle-4"' in ipt
    with pytest.raises(Unsupported) as e:
        nft_render.render(rs, IFS)
    assert str(e.value) == "unsupported: ct mark restore with masks (rule mangle-3)"
    nft = nft_render.render(_without(rs, "mangle-3"), IFS)
    assert "ct mark set ct mark & 0xffffff2f | 0x00000020" in nft
    assert "ct mark set meta mark" in nft
    assert "ct mark & 0x000000ff != 0x00000010 counter accept" in nft


def _without(rs: RuleSet, rid: str) -> RuleSet:
    return rs.with_tables(tuple(replace(t, chains=tuple(replace(c, rules=tuple(
        r for r in c.rules if r.id != rid)) for c in t.chains)) for t in rs.tables))


def test_nft_ct_mark_statements_and_matches():
    ct, meta = {"ct": {"key": "mark"}}, {"meta": {"key": "mark"}}
    rs = _nft([{"mangle": {"key": ct, "value": meta}}],
              [{"mangle": {"key": meta, "value": ct}}],
              [{"mangle": {"key": ct, "value": {"|": [ct, 0x300]}}}],
              [{"match": {"op": "!=", "left": {"&": [ct, 0xff]}, "right": 1}},
               {"accept": None}])
    assert [rs.rule(f"k-{i}").action.kind for i in (1, 2, 3)] == \
        ["savemark", "restoremark", "ctmark"]
    assert (rs.rule("k-3").action.mark, rs.rule("k-3").action.mark_mask) == (0x300, 0x300)
    m = rs.rule("k-4").match
    assert (m.ct_mark, m.ct_mark_negate) == ((1, 0xFF), True)


# --- packet counters: nth and numgen inc -------------------------------------------------

def test_nth_is_every_and_phase_in_both_syntaxes_and_renders_back():
    rs = _ipt("-A PREROUTING -m statistic --mode nth --every 3 --packet 2 -j S\n"
              "-A PREROUTING -m statistic --mode nth --every 3 --packet 0 -j S\n")
    assert rs.rule("nat-1").match.nth == (3, 1)     # the counter starts at 2: 1st packet
    assert rs.rule("nat-2").match.nth == (3, 0)     # every 3rd
    ipt = ipt_render.render(rs, IFS, 4)
    assert "-m statistic --mode nth --every 3 --packet 2 -m comment" in ipt
    nft = nft_render.render(rs, IFS)
    assert "numgen inc mod 3 1 counter jump S" in nft and "numgen inc mod 3 0 counter" in nft
    inc = {"numgen": {"mode": "inc", "mod": 3, "offset": 1}}
    rs2 = _nft([{"match": {"op": "==", "left": inc, "right": 2}}, {"goto": {"target": "a"}}])
    assert rs2.rule("k-1").match.nth == (3, 1)


def test_a_counter_choice_allows_both_verdicts_and_is_not_a_distribution():
    chain = Chain("forward", (Rule("a", Match(nth=(3, 0)), Action("drop")),), hook="forward")
    rs = validate(RuleSet("n", (Table("ip", "t", (chain,)),)))
    v = Evaluator(rs).evaluate(Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2))
    assert v.counter_choice
    assert sorted((round(q, 4), o.forward) for q, o in v.possible) == \
        [(0.3333, False), (0.6667, True)]
    assert corpora.chance_copies(rs, [v.translated], Evaluator(rs)) == []


def test_nft_renders_an_odd_share_with_mod_2_32_minus_1_and_reads_it_back():
    rs = _nft([{"match": {"op": "==", "left": NUMGEN, "right": 1}}, {"accept": None}])
    assert rs.rule("k-1").match.random == 1431655765          # odd: no 31-bit form
    text = nft_render.render(rs, IFS)
    assert "numgen random mod 4294967295 < 1431655764 accept" in text
    listed = {"numgen": {"mode": "random", "mod": -1, "offset": 0}}   # as nft -j lists it
    again = _nft([{"match": {"op": "<", "left": listed, "right": 1431655764}},
                  {"accept": None}])
    assert again.rule("k-1").match.random == 1431655765
    with pytest.raises(Unsupported):
        ipt_render.render(rs, IFS, 4)
