"""kube-proxy's control plane without a kernel: one service more in the template
(everything else byte for byte as it was), and the update texts made from the
difference, each applied by a model of the tool's semantics (iptables-restore
--noflush, iptables commands, nft transactions) to the old rendering, which must
give exactly the new one; and their exact lines."""
import shlex
from collections import Counter

import pytest

from fwbench.backends import delta
from fwbench.errors import FwbenchError
from fwbench.ruleset import templates
from fwbench.ruleset.model import Interfaces, RuleSetError
from fwbench.ruleset.render import iptables as ipt_render
from fwbench.ruleset.render import nft as nft_render
from fwbench.ruleset.templates import kubeproxy as kp

IFS = Interfaces("c0", "s0", ("198.18.0.1", "198.19.0.1"))
N, M = 40, 3


def base(mode, n=N, m=M, seed=0):
    return kp.kube_proxy(services=n, endpoints=m, mode=mode, seed=seed)


def ipt(rs):
    return ipt_render.render(rs, IFS, 4)


def nft(rs):
    return nft_render.render(rs, IFS)


# --- the template: one service more -------------------------------------------------

@pytest.mark.parametrize("mode", kp.MODES)
def test_one_more_adds_the_next_service_of_the_plan_and_changes_nothing_else(mode):
    rs = base(mode)
    added = kp.one_more(rs, seed=5)
    plus, svc = added.ruleset, added.service
    # The service the template would have made as the (N+1)-th.
    (want,) = [s for s in kp.services(N + 1, M) if s.name == f"svc-{N}"]
    assert svc == want and plus.size == N + 1 and added.mode == mode
    old = {(t.name, c.name): c for t in rs.tables for c in t.chains}
    new = {(t.name, c.name): c for t in plus.tables for c in t.chains}
    changed = {k for k in old if old[k] != new[k]}
    if mode == "iptables":
        assert changed == {("nat", "KUBE-SERVICES")}
        names = {svc.svc_chain(), *(svc.sep_chain(i) for i in range(M))}
        rules = new[("nat", "KUBE-SERVICES")].rules
        assert list(old[("nat", "KUBE-SERVICES")].rules) == \
            [r for i, r in enumerate(rules) if i != added.position]
        assert rules[added.position].action.chain == svc.svc_chain()
    else:
        assert changed == set()
        names = {"service-" + svc.nft_base(),
                 *("endpoint-" + svc.nft_endpoint_base(k) for k in range(M))}
    assert set(new) - set(old) == {(t, n) for t, n in new if n in names} and \
        len(names) == 1 + M
    # The new rules' ids follow the last one: none is taken twice.
    ids = [r.id for _, _, r in plus.rules()]
    assert len(ids) == len(set(ids)) and {r.id for _, _, r in rs.rules()} < set(ids)
    assert plus.digest() != rs.digest()
    probe = {p.name: p for p in plus.probes}["added service"]
    assert probe.packet.daddr == svc.cluster_ip and len(probe.choices) == M
    assert (probe.rule is not None) == (mode == "iptables")


def test_the_added_service_goes_where_the_seed_says():
    rs = base("iptables")
    places = {kp.one_more(rs, seed=s).position for s in range(20)}
    assert len(places) > 5 and all(0 <= p <= N for p in places)
    assert kp.one_more(rs, seed=3).position == kp.one_more(rs, seed=3).position


def test_one_more_renders_as_the_old_rendering_and_the_service_only():
    rs = base("iptables")
    added = kp.one_more(rs)
    svc = added.service
    before, after = Counter(ipt(rs).splitlines()), Counter(ipt(added.ruleset).splitlines())
    assert not before - after
    extra = list((after - before).elements())
    # Its KUBE-SERVICES rule, 1 + M chain lines, the SVC chain's 1 + M rules and
    # each SEP chain's 2.
    assert len(extra) == 1 + (1 + M) + (1 + M) + 2 * M
    assert sum(ln.startswith(f"-A KUBE-SERVICES -d {svc.cluster_ip}/32 ") for ln in extra) == 1
    rs = base("nftables")
    added = kp.one_more(rs)
    svc = added.service
    o, n = delta.nft_parts(nft(rs)), delta.nft_parts(nft(added.ruleset))
    assert all(n.rules[k] == v for k, v in o.rules.items())
    assert set(n.rules) - set(o.rules) == {
        ("ip kube-proxy", c) for c in ["service-" + svc.nft_base(),
                                       *("endpoint-" + svc.nft_endpoint_base(k)
                                         for k in range(M))]}
    (key,) = o.elements
    assert set(n.elements[key]) - set(o.elements[key]) == \
        {f"{svc.cluster_ip} . tcp . 80 : goto service-{svc.nft_base()}"}
    assert set(o.elements[key]) < set(n.elements[key])


def test_one_more_refuses_what_is_no_kube_proxy_rule_set_and_the_largest():
    from fwbench.ruleset.templates import updates
    with pytest.raises(RuleSetError, match="^not a kube-proxy template rule set: "):
        kp.one_more(updates.pair("add-end", 20, layout="linear")[0])
    rs = base("nftables", n=1, m=1)
    import dataclasses
    full = dataclasses.replace(rs, size=kp.MAX_SERVICES)
    with pytest.raises(FwbenchError) as e:
        kp.one_more(full)
    assert str(e.value) == "kube-proxy: no service can be added to 32,000: the template " \
                           "holds at most 32,000" and "\n" not in str(e.value)


def test_the_template_built_through_the_registry_is_the_function():
    rs = templates.build("kube-proxy", {"services": "30", "endpoints": "2",
                                        "mode": "nftables"})
    assert rs.digest() == base("nftables", 30, 2).digest()
    assert kp.mode_of(rs) == "nftables"


# --- models of the tools ---------------------------------------------------------------

def _ipt_state(text):
    """(table -> chain -> rules, table -> user chains) of a rendering."""
    frames, rules = delta._ipt_parts(text)
    state = {t: {ln[1:].split()[0]: [] for ln in lines} for t, lines in frames.items()}
    user = {t: {ln[1:].split()[0] for ln in lines if ln.split()[1] == "-"}
            for t, lines in frames.items()}
    for (t, c), rs in rules.items():
        state[t][c] = list(rs)
    return state, user


_TARGETS = {"ACCEPT", "DROP", "RETURN", "DNAT", "SNAT", "MASQUERADE", "MARK", "REJECT"}


def _target(rule):
    words = rule.split()
    for flag in ("-j", "-g"):
        if flag in words:
            return words[words.index(flag) + 1]
    return None


def _ipt_apply(state, user, table, line, restore):
    """One line of iptables-restore --noflush input (or an iptables command)
    applied as the tools apply it; an AssertionError where they would fail."""
    chains, mine = state[table], user[table]
    if line.startswith(":"):
        assert restore
        name = line[1:].split()[0]
        if name in chains and name in mine:
            chains[name] = []           # an existing user chain is emptied
        elif name not in chains:
            chains[name] = []
            mine.add(name)
        return
    op, name, *rest = line.split(" ", 2)
    spec = rest[0] if rest else ""
    if op == "-N":
        assert name not in chains, f"-N {name}: exists"
        chains[name] = []
        mine.add(name)
        return
    assert name in chains, f"{op} {name}: no such chain"
    if op in ("-A", "-I", "-R"):
        if op != "-A":
            pos, _, spec = spec.partition(" ")
        t = _target(spec)
        assert t is None or t in chains or t in _TARGETS, \
            f"{op} {name}: jump to missing chain {t}"
        if op == "-A":
            chains[name].append(spec)
        elif op == "-I":
            chains[name].insert(int(pos) - 1, spec)
        else:
            chains[name][int(pos) - 1] = spec
    elif op == "-D":
        chains[name].remove(spec)
    elif op == "-F":
        chains[name] = []
    elif op == "-X":
        assert name in mine and not chains[name], f"-X {name}: not an empty user chain"
        assert not any(_target(r) == name for rs in chains.values() for r in rs), \
            f"-X {name}: still named"
        del chains[name]
        mine.discard(name)
    else:
        raise AssertionError(f"unknown {op}")


def _restore(old_text, restore_text):
    state, user = _ipt_state(old_text)
    table = None
    for ln in restore_text.splitlines():
        if ln.startswith("*"):
            table = ln[1:]
        elif ln == "COMMIT":
            table = None
        else:
            assert table is not None
            _ipt_apply(state, user, table, ln, True)
    return state


def _commands(old_text, argvs):
    """The commands applied; rules compared as the argv words they are."""
    state, user = _ipt_state(old_text)
    state = _words(state)
    for argv in argvs:
        assert argv[1] == "-t"
        _ipt_apply(state, user, argv[2], shlex.join(argv[3:]), False)
    return _words(state)


def _words(state):
    return {t: {c: [shlex.join(shlex.split(r)) for r in rs] for c, rs in chains.items()}
            for t, chains in state.items()}


def _pair(mode, direction, backend_render):
    rs = base(mode)
    plus = kp.one_more(rs, seed=7).ruleset
    old, new = (rs, plus) if direction == "add" else (plus, rs)
    return backend_render(old), backend_render(new)


@pytest.mark.parametrize("mode", kp.MODES)
@pytest.mark.parametrize("direction", ["add", "remove"])
def test_iptables_texts_turn_the_old_rendering_into_the_new(mode, direction):
    old, new = _pair(mode, direction, ipt)
    want = _ipt_state(new)[0]
    d = delta.iptables_delta(old, new)
    assert _restore(old, delta.iptables_restore_text(d)) == want
    assert _commands(old, delta.iptables_commands("iptables-legacy", d)) == _words(want)
    rewrite = kp.SYNC_CHAINS[mode]
    assert _restore(old, delta.iptables_sync_text(d, rewrite)) == want
    assert _restore(old, delta.iptables_sync_text(d)) == want


def test_iptables_batch_adds_a_service_in_these_lines():
    rs = base("iptables")
    added = kp.one_more(rs, seed=7)
    svc, p = added.service, added.position
    old, new = ipt(rs), ipt(added.ruleset)
    d = delta.iptables_delta(old, new)
    lines = delta.iptables_restore_text(d).splitlines()
    new_chains = sorted([svc.svc_chain(), *(svc.sep_chain(i) for i in range(M))])
    entry = next(ln for ln in new.splitlines()
                 if ln.startswith(f"-A KUBE-SERVICES -d {svc.cluster_ip}/32 "))
    bodies = [ln for ln in new.splitlines()
              if ln.split(" ")[:2] in (["-A", c] for c in new_chains)]
    assert lines == ["*nat", *(f":{c} - [0:0]" for c in new_chains), *bodies,
                     f"-I KUBE-SERVICES {p + 1} {entry[len('-A KUBE-SERVICES '):]}",
                     "COMMIT"]
    back = delta.iptables_restore_text(delta.iptables_delta(new, old)).splitlines()
    assert back == ["*nat", f"-D KUBE-SERVICES {entry[len('-A KUBE-SERVICES '):]}",
                    *(f"-F {c}" for c in new_chains), *(f"-X {c}" for c in new_chains),
                    "COMMIT"]
    argvs = delta.iptables_commands("iptables-nft", d)
    assert [a[3] for a in argvs] == ["-N"] * (1 + M) + ["-A"] * (1 + 3 * M) + ["-I"]
    assert argvs[0] == ["iptables-nft", "-t", "nat", "-N", new_chains[0]]


def test_iptables_sync_is_kube_proxys_partial_restore():
    rs = base("iptables")
    added = kp.one_more(rs, seed=7)
    svc = added.service
    old, new = ipt(rs), ipt(added.ruleset)
    text = delta.iptables_sync_text(delta.iptables_delta(old, new), kp.SYNC_CHAINS["iptables"])
    blocks = {b.splitlines()[0]: b.splitlines()[1:] for b in text.split("COMMIT\n") if b}
    assert set(blocks) == {"*nat", "*filter"}
    nat = blocks["*nat"]
    heads = [ln for ln in nat if ln.startswith(":")]
    written = sorted(["KUBE-MARK-MASQ", "KUBE-NODEPORTS", "KUBE-POSTROUTING",
                      "KUBE-SERVICES", svc.svc_chain(), *(svc.sep_chain(i) for i in range(M))])
    assert heads == [f":{c} - [0:0]" for c in written]
    assert nat[:len(heads)] == heads and not any(ln.startswith("-X") for ln in nat)
    # KUBE-SERVICES whole: N + 1 services and the node-port jump; nothing else of
    # the N services' own chains.
    assert sum(ln.startswith("-A KUBE-SERVICES ") for ln in nat) == N + 2
    assert sum(ln.startswith("-A KUBE-SVC-") for ln in nat) == 1 + M
    assert blocks["*filter"][0] == ":KUBE-FORWARD - [0:0]" and \
        sum(ln.startswith("-A KUBE-FORWARD ") for ln in blocks["*filter"]) == 3
    back = delta.iptables_sync_text(delta.iptables_delta(new, old),
                                    kp.SYNC_CHAINS["iptables"]).split("COMMIT\n")
    nat = next(b for b in back if b.startswith("*nat")).splitlines()
    gone = sorted([svc.svc_chain(), *(svc.sep_chain(i) for i in range(M))])
    assert [ln for ln in nat if ln.startswith("-X")] == [f"-X {c}" for c in gone]
    assert {f":{c} - [0:0]" for c in gone} <= set(nat)


def test_iptables_refuses_a_base_chain_added():
    old = "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"
    new = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\nCOMMIT\n"
    with pytest.raises(FwbenchError, match="base chain FORWARD added by the update: only "
                                           "a reload can"):
        delta.iptables_delta(old, new)
    with pytest.raises(FwbenchError, match="chains or sets added or removed"):
        delta.iptables_changes(ipt(base("iptables")), ipt(kp.one_more(base("iptables")).ruleset))


def _nft_state(text):
    p = delta.nft_parts(text)
    chains = {k: list(v) for k, v in p.rules.items()}
    for key, lines in p.frames.items():
        fam, name, kind, obj = key.split(" ", 3)
        if kind == "chain":
            chains.setdefault((f"{fam} {name}", obj), [])
    elements = {k: {e.partition(" : ")[0]: e for e in v} for k, v in p.elements.items()}
    return chains, elements


def _nft_apply(state, cmds, handles):
    """nft commands applied as one transaction would apply them; handles: rule id
    -> handle, for the rules a command names by handle."""
    chains, elements = state
    by_handle = {h: rid for rid, h in handles.items()}
    for cmd in cmds:
        words = cmd.split(" ")
        verb, kind = words[0], words[1]
        where = " ".join(words[2:4])
        if kind == "chain":
            key = (where, words[4])
            if verb == "add":
                chains.setdefault(key, [])
            elif verb == "flush":
                assert key in chains
                chains[key] = []
            else:
                assert key in chains and not chains[key], f"delete chain {key}: not empty"
                named = [r for rs in chains.values() for r in rs
                         if f"goto {key[1]}" in r or f"jump {key[1]}" in r]
                named += [e for es in elements.values() for e in es.values()
                          if e.endswith(f" {key[1]}")]
                assert not named, f"delete chain {key}: still named by {named[0]}"
                del chains[key]
        elif kind == "rule":
            key = (where, words[4])
            assert key in chains, f"{cmd}: no chain"
            rest = " ".join(words[5:])
            for target in [w for i, w in enumerate(words) if i and words[i - 1] in
                           ("goto", "jump")]:
                assert (where, target.rstrip(",")) in chains, f"{cmd}: no chain {target}"
            for ref in [w[1:] for w in words if w.startswith("@")]:
                assert f"{where} {ref}" in elements, f"{cmd}: no set {ref}"
            if verb == "add" and words[5] == "index":
                chains[key].insert(int(words[6]) + 1, " ".join(words[7:]))
            elif verb == "add":
                chains[key].append(rest)
            elif verb == "insert":
                chains[key].insert(0, rest)
            elif verb == "delete":
                rid = by_handle[int(words[6])]
                hit = [r for r in chains[key] if delta.nft_rule_id(r) == rid]
                assert hit, cmd
                chains[key].remove(hit[0])
            else:
                raise AssertionError(cmd)
        elif kind in ("set", "map"):
            name = f"{where} {words[4]}"
            if verb == "add":
                assert name not in elements, f"{cmd}: it exists"
                elements[name] = {}
            else:
                named = [r for rs in chains.values() for r in rs if f"@{words[4]} " in r]
                assert not named, f"{cmd}: still named by {named[0]}"
                del elements[name]
        elif kind == "element":
            name = f"{where} {words[4]}"
            assert name in elements, f"{cmd}: no set {words[4]}"
            inside = cmd[cmd.index("{") + 1:cmd.rindex("}")].strip()
            for e in (x.strip() for x in inside.split(",")):
                k = e.partition(" : ")[0]
                if verb == "add":
                    target = e.rpartition(" ")[2]
                    assert (where, target) in chains, f"{cmd}: no chain {target}"
                    elements[name][k] = e
                else:
                    assert " : " not in e, "a delete names the key alone"
                    del elements[name][k]
        else:
            raise AssertionError(cmd)
    return chains, elements


def _lines(text):
    return [ln for ln in text.splitlines() if ln]


@pytest.mark.parametrize("mode", kp.MODES)
@pytest.mark.parametrize("direction", ["add", "remove"])
def test_nft_texts_turn_the_old_rendering_into_the_new(mode, direction):
    old, new = _pair(mode, direction, nft)
    want = _nft_state(new)
    d = delta.nft_delta(old, new)
    handles = {}
    for rules in d.old.values():
        for r in rules:
            handles[delta.nft_rule_id(r)] = len(handles) + 1
    assert _nft_apply(_nft_state(old), _lines(delta.nft_transaction(d, handles=handles)),
                      handles) == want
    assert _nft_apply(_nft_state(old), delta.nft_commands(d, handles, each=True),
                      handles) == want
    assert _nft_apply(_nft_state(old), _lines(delta.nft_sync_text(d, kp.SYNC_CHAINS[mode])),
                      handles) == want


@pytest.mark.parametrize("direction", ["add", "remove"])
def test_nft_texts_add_and_remove_a_named_numgen_map_with_its_service(direction, monkeypatch):
    """From NAMED_NUMGEN_MAPS services on, each service's endpoint choice is a
    named map, added and removed with the service (lowered here to N: the
    rendering does not otherwise depend on the count)."""
    monkeypatch.setattr(nft_render, "NAMED_NUMGEN_MAPS", N)
    old, new = _pair("nftables", direction, nft)
    assert "typeof numgen random mod 3 : verdict" in old
    d = delta.nft_delta(old, new)
    assert [(c.op, c.kind) for c in d.sets] == [(direction.replace("remove", "delete"), "map")]
    want = _nft_state(new)
    assert _nft_apply(_nft_state(old), _lines(delta.nft_transaction(d)), {}) == want
    assert _nft_apply(_nft_state(old), delta.nft_commands(d, {}, each=True), {}) == want
    assert _nft_apply(_nft_state(old), _lines(delta.nft_sync_text(d)), {}) == want
    name = d.sets[0].name
    if direction == "add":
        assert f"add map ip kube-proxy {name} {{ typeof numgen random mod 3 : verdict ; }}" \
            in delta.nft_sync_text(d)
    else:
        assert not [e for e in d.elements if e.set.endswith(f" {name}")], \
            "a map removed takes its elements with it"


def test_nft_batch_adds_and_removes_a_service_in_these_commands():
    rs = base("nftables")
    added = kp.one_more(rs)
    svc = added.service
    old, new = nft(rs), nft(added.ruleset)
    d = delta.nft_delta(old, new)
    chains = ["service-" + svc.nft_base(), *("endpoint-" + svc.nft_endpoint_base(k)
                                             for k in range(M))]
    where = "ip kube-proxy"
    cmds = _lines(delta.nft_transaction(d))
    assert cmds[:1 + M] == [f"add chain {where} {c}" for c in chains]
    assert all(c.startswith(f"add rule {where} ") for c in cmds[1 + M:-1])
    assert len(cmds) == (1 + M) + 2 * (1 + M) + 1
    assert cmds[-1] == f"add element {where} service-ips {{ {svc.cluster_ip} . tcp . 80 : " \
                       f"goto {chains[0]} }}"
    back = _lines(delta.nft_transaction(delta.nft_delta(new, old)))
    assert back == [f"delete element {where} service-ips {{ {svc.cluster_ip} . tcp . 80 }}",
                    *(f"flush chain {where} {c}" for c in chains),
                    *(f"delete chain {where} {c}" for c in chains)]
    sync = _lines(delta.nft_sync_text(d))
    assert sync[:2 * (1 + M)] == [f"{verb} chain {where} {c}" for c in chains
                                  for verb in ("add", "flush")]
    assert sync[2 * (1 + M)] == f"add rule {where} {chains[0]} " + d.new[(where, chains[0])][0]
    assert sync[-1].startswith(f"add element {where} service-ips {{ {svc.cluster_ip} . ")
    back = _lines(delta.nft_sync_text(delta.nft_delta(new, old)))
    assert back == [*(f"flush chain {where} {c}" for c in chains),
                    f"delete element {where} service-ips {{ {svc.cluster_ip} . tcp . 80 }}",
                    *(f"delete chain {where} {c}" for c in chains)]


def test_nft_changes_stay_strict_about_chains():
    rs = base("nftables")
    with pytest.raises(FwbenchError, match="chains or sets added or removed"):
        delta.nft_changes(nft(rs), nft(kp.one_more(rs).ruleset))
