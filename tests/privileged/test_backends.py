"""Every backend loads N = 1,000 and verifies; probes get the right verdicts; a
rule set that is not the one asked for fails verification, with a reason naming what
differs. Run against the real kernel in a fresh testbed."""
from collections import OrderedDict
from dataclasses import replace

import pytest

from fwbench import backends
from fwbench.backends.base import interfaces
from fwbench.backends.kernel import flush_all, ruleset_state
from fwbench.ruleset.model import Match, Ports, Prefix
from fwbench.ruleset.templates.seed000 import entry_id, seed000


FILTERING = [n for n in backends.names() if n != "none"]
SETS = {"ipset", "nftset", "xdp-set", "tc-set"}
NETFILTER_LINEAR = ["iptables-legacy", "iptables-nft", "nftables"]
PROBES = 20
# The backends a tampered rule set is loaded into, to be caught by their verification
# (the comparison with the rendering, the probes). tc-linear and tc-set run the very
# code of xdp-linear and xdp-set for it (one class, renderer and map dump; only the
# hook they attach to differs), and that hook is proven here by their loads of 1,000
# and their wrong rule count, and in test_ebpf by every verdict of their programs:
# tampering with them as well repeated the XDP pair's checks (~11 s).
TAMPERED = [n for n in FILTERING if not n.startswith("tc-")]
SERVER = "198.19.0.2"


@pytest.fixture
def testbed(firewall):
    """The module's tests share one testbed, every firewall emptied around each test
    (conftest's `firewall`): building one per test cost more than the tests."""
    return firewall


def rules_for(b, n, **kw):
    return seed000(n, layout=b.layout, **kw)


def with_entry_replaced(rs, i, daddr, proto, port):
    """The rule set with its i-th entry (1-based) swapped for another: a rule's
    match in the linear layout, a set element in the set layout."""
    (t,) = rs.tables
    if rs.layout == "set":
        (s,) = t.sets
        elems = list(s.elements)
        elems[i - 1] = (daddr, proto, port)
        t = replace(t, sets=(replace(s, elements=tuple(elems)),))
    else:
        chains = []
        for c in t.chains:
            rules = tuple(replace(r, match=Match(dst=Prefix.of(daddr), proto=proto,
                                                 dport=Ports.of(port)))
                          if r.id == entry_id(i) else r for r in c.rules)
            chains.append(replace(c, rules=rules))
        t = replace(t, chains=tuple(chains))
    return replace(rs, tables=(t,), name=rs.name + "-modified")


@pytest.mark.parametrize("backend", FILTERING, indirect=True)
def test_loads_1000_and_verifies(testbed, backend):
    b = backend
    rs = rules_for(b, 1000)
    load = b.apply(testbed, rs)
    v = b.verify(testbed, rs)
    assert v.ok, v.reason
    assert v.rules_loaded == b.expected_entries(rs)
    assert load.load_time_s > 0
    p = v.details["probes"]
    assert p["test flow"]["forwarded"] == p["test flow"]["sent"] == PROBES
    assert p["test flow"]["rule_hits"] >= PROBES   # plus any sample packet it took
    assert p["disallowed"]["forwarded"] == 0
    assert p["ping"]["forwarded"] == PROBES and p["ping"]["rule_hits"] >= PROBES
    assert v.details["differences"] == []
    assert v.details["sample"]["disagreements"] == []


@pytest.mark.parametrize("backend", TAMPERED, indirect=True)
def test_missing_test_rule_fails_verification(testbed, backend):
    """The test entry replaced by one more filler: the count is still N, so only the
    probes can catch it, and they must."""
    b = backend
    good = rules_for(b, 50)
    b.apply(testbed, with_entry_replaced(good, 50, SERVER, "tcp", 39999))
    v = b.verify(testbed, good)
    assert not v.ok
    assert v.rules_loaded == b.expected_entries(good)
    assert f"test flow probe: 0 of {PROBES} forwarded" in v.reason, v.reason
    assert v.details["probes"]["test flow"]["forwarded"] == 0


@pytest.mark.parametrize("backend", FILTERING, indirect=True)
def test_wrong_rule_count_fails_verification(testbed, backend):
    b = backend
    b.apply(testbed, rules_for(b, 999))
    v = b.verify(testbed, rules_for(b, 1000))
    assert not v.ok and "entries in the kernel" in v.reason, v.reason


def test_none_forwards_everything(testbed, backend_named):
    b = backend_named("none")
    rs = seed000(1)
    b.apply(testbed, rs)
    v = b.verify(testbed, rs)
    assert v.ok, v.reason
    assert v.rules_loaded == 0
    assert v.details["probes"]["disallowed"]["forwarded"] == PROBES


def test_backends_do_not_stack(testbed, backend_named):
    """Loading one backend after another leaves only the last: legacy and nft rules
    would otherwise both apply, and an XDP or tc filter would sit under either."""
    for name in ("iptables-legacy", "xdp-set", "tc-linear"):
        b = backend_named(name)
        b.apply(testbed, rules_for(b, 100))
    nft = backend_named("nftables")
    rs = rules_for(nft, 100)
    nft.apply(testbed, rs)
    state = ruleset_state(testbed)
    assert state["iptables-legacy"] == 0 and state["nftables_tables"] == 1
    assert state["bpf_programs"] == 0
    assert nft.verify(testbed, rs).ok
    tc = backend_named("tc-set")
    tc.apply(testbed, rules_for(tc, 100))
    assert ruleset_state(testbed)["bpf_programs"] == 1
    flush_all(testbed)
    assert set(ruleset_state(testbed).values()) == {0}


# --- rule sets that are not what was asked --------------------------------------
#
# Each is loaded with the backend's own load step, then verified against the rule
# set that was asked for. The rule count stays N in every case, so only the
# comparison with the rendering, or a probe, can catch it, and each case says which.

def client_rule_lines(name: str, text: str) -> list[int]:
    """Indices of the lines of a rendered file that are the client-side chain's
    rules (iptables, nft) or the eBPF filter's scanned rules."""
    lines = text.splitlines()
    if name.startswith(("iptables", "ipset")):
        return [i for i, ln in enumerate(lines) if ln.startswith("-A fwb_from_client ")]
    if name.startswith("nft"):
        start = lines.index("\tchain from_client {")
        end = lines.index("\t}", start)
        return list(range(start + 1, end))
    return [i for i, ln in enumerate(lines) if ln.startswith("rule ")]


def rules_file(name: str) -> str:
    return {"nftables": "rules.nft", "nftset": "rules.nft"}.get(
        name, "rules.bpf" if name.startswith(("xdp", "tc")) else "rules.iptables")


def load_tampered(tb, b, name, rs, tamper):
    """Render `rs`, change the rule file with `tamper(lines, rule_indices)`, load it
    as the backend would, and verify against `rs`."""
    files = b.render(rs, interfaces(tb))
    f = rules_file(name)
    lines = files[f].splitlines()
    tamper(lines, client_rule_lines(name, files[f]))
    files[f] = "\n".join(lines) + "\n"
    flush_all(tb)
    b.load(tb, files)
    return b.verify(tb, rs)


@pytest.mark.parametrize("backend", TAMPERED, indirect=True)
def test_reordered_rule_set_fails_verification(testbed, backend):
    """The same rules in another order: right count, every probe still passes (the
    swapped rules are fillers, or the two auxiliary rules after a set's rule)."""
    b, name = backend, backend.name
    rs = rules_for(b, 50)

    def swap(lines, rules):
        i, j = (rules[-2], rules[-1]) if name in SETS else (rules[0], rules[1])
        lines[i], lines[j] = lines[j], lines[i]

    v = load_tampered(testbed, b, name, rs, swap)
    assert not v.ok
    assert "differs from the rendered one" in v.reason and "another order" in v.reason, v.reason
    p = v.details["probes"]
    assert p["test flow"]["forwarded"] == PROBES and p["disallowed"]["forwarded"] == 0
    assert p["ping"]["forwarded"] == PROBES


@pytest.mark.parametrize("backend", TAMPERED, indirect=True)
def test_one_rule_too_permissive_fails_verification(testbed, backend):
    """A filler (or set element) replaced by one that lets the disallowed probe's
    flow through: same size; the disallowed probe and the comparison both catch it."""
    b = backend
    good = rules_for(b, 50)
    b.apply(testbed, with_entry_replaced(good, 4, SERVER, "udp", 5202))
    v = b.verify(testbed, good)
    assert not v.ok and v.rules_loaded == b.expected_entries(good)
    assert f"disallowed probe: {PROBES} of {PROBES} forwarded, expected 0" in v.reason, v.reason
    assert "missing from the kernel" in v.reason and "not rendered" in v.reason
    assert "5202" in v.reason


@pytest.mark.parametrize("backend", NETFILTER_LINEAR, indirect=True)
def test_one_rule_widened_fails_verification(testbed, backend):
    """A TCP filler whose port match is gone (every TCP port allowed): no probe can
    see it (they are UDP and ICMP), only the comparison with the rendering and the
    corpus sample, if it holds a TCP packet to another port."""
    b, name = backend, backend.name
    rs = rules_for(b, 50)

    def widen(lines, rules):
        i = rules[5]
        if name == "nftables":
            assert " tcp dport 40005 " in lines[i]
            lines[i] = lines[i].replace(" tcp dport 40005 ", " meta l4proto tcp ")
        else:
            assert " -m tcp --dport 40005 " in lines[i]
            lines[i] = lines[i].replace(" -m tcp --dport 40005 ", " ")

    v = load_tampered(testbed, b, name, rs, widen)
    assert not v.ok
    p = v.details["probes"]
    assert p["test flow"]["forwarded"] == PROBES and p["disallowed"]["forwarded"] == 0
    assert "missing from the kernel" in v.reason and "40005" in v.reason, v.reason


@pytest.mark.parametrize("backend", TAMPERED, indirect=True)
def test_missing_icmp_rule_fails_verification(testbed, backend):
    """The ICMP echo-request rule left out: the entries are all there; the ping
    probe and the comparison catch it."""
    b, name = backend, backend.name
    rs = rules_for(b, 50)

    def drop_icmp(lines, rules):
        (i,) = [i for i in rules if "icmp" in lines[i] or lines[i].endswith(" 1 8")]
        del lines[i]

    v = load_tampered(testbed, b, name, rs, drop_icmp)
    assert not v.ok
    assert f"ping probe: 0 of {PROBES} forwarded" in v.reason, v.reason
    assert "1 rendered line missing from the kernel" in v.reason, v.reason
    assert v.details["probes"]["test flow"]["forwarded"] == PROBES


@pytest.mark.parametrize("backend", TAMPERED, indirect=True)
def test_one_element_replaced_fails_verification(testbed, backend):
    """One set element (or, in a linear chain, one rule) replaced by another that no
    probe sends: same size, every probe passes; the comparison tells."""
    b, name = backend, backend.name
    good = rules_for(b, 50)
    b.apply(testbed, with_entry_replaced(good, 8, SERVER, "tcp", 39_999))
    v = b.verify(testbed, good)
    assert not v.ok and v.rules_loaded == b.expected_entries(good)
    p = v.details["probes"]
    assert p["test flow"]["forwarded"] == PROBES and p["disallowed"]["forwarded"] == 0
    assert p["ping"]["forwarded"] == PROBES
    noun = "element" if name in SETS else "line"
    assert f"1 rendered {noun} missing from the kernel" in v.reason, v.reason
    assert f"1 {noun} in the kernel not rendered" in v.reason and "39999" in v.reason


# --- large rule sets: later loads compared with the first over netlink -----------
#
# Past nftables.TEXT_CHECK_ENTRIES a rendering is compared in nft's text at its
# first load only; later loads are compared with that one, read over netlink. The
# limit is lowered here so 50 entries take that path.

@pytest.fixture
def netlink_path(monkeypatch):
    from fwbench.backends import nftables
    monkeypatch.setattr(nftables, "TEXT_CHECK_ENTRIES", 0)
    monkeypatch.setattr(nftables, "_proven", OrderedDict())
    return nftables


def proven_then_text_forbidden(tb, b, rs, monkeypatch, nftables):
    """Load and verify `rs` (its text compared: the proof), then make nft's text
    listing fail, so any later verification must go over netlink."""
    b.apply(tb, rs)
    v = b.verify(tb, rs)
    assert v.ok, v.reason
    assert any(key[0] == b.name for key in nftables._proven)

    def no_listing(tb):
        raise AssertionError("nft list ruleset read after the proven load")
    monkeypatch.setattr(nftables.kernel, "nft_list", no_listing)


@pytest.mark.parametrize("backend", ["nftables", "nftset"], indirect=True)
def test_later_load_matches_the_proven_one(testbed, backend, netlink_path, monkeypatch):
    b = backend
    rs = rules_for(b, 50)
    proven_then_text_forbidden(testbed, b, rs, monkeypatch, netlink_path)
    b.apply(testbed, rs)
    v = b.verify(testbed, rs)
    assert v.ok, v.reason
    assert v.rules_loaded == b.expected_entries(rs)
    assert v.details["probes"]["test flow"]["rule_hits"] >= PROBES


@pytest.mark.parametrize("backend", ["nftables", "nftset"], indirect=True)
@pytest.mark.parametrize("tamper", ["swap", "widen", "element"])
def test_later_load_that_differs_fails(testbed, backend, netlink_path, monkeypatch, tamper):
    """Rules swapped, a port match dropped, a set element (or rule) replaced: each
    seen by the netlink comparison, naming the chain or the sets."""
    b, name = backend, backend.name
    rs = rules_for(b, 50)
    proven_then_text_forbidden(testbed, b, rs, monkeypatch, netlink_path)
    if tamper == "element":
        b.apply(testbed, with_entry_replaced(rs, 8, SERVER, "tcp", 39_999))
        v = b.verify(testbed, rs)
        where = "nft sets" if name == "nftset" else "nft chain ip fwbench from_client"
    else:
        def edit(lines, rules):
            if tamper == "swap":
                i, j = (rules[-2], rules[-1]) if name == "nftset" else (rules[0], rules[1])
                lines[i], lines[j] = lines[j], lines[i]
            else:
                (i,) = [i for i in rules if "icmp" in lines[i]]
                lines[i] = lines[i].replace(" icmp type echo-request ", " ")
        v = load_tampered(testbed, b, name, rs, edit)
        where = "nft chain ip fwbench from_client"
    assert not v.ok
    assert "differs from the rendered one" in v.reason and where in v.reason, v.reason


@pytest.mark.parametrize("backend", ["iptables-legacy", "nftables"], indirect=True)
def test_counters_that_moved_after_the_load_are_read_before(testbed, backend):
    """Verification reads the kernel once, after its packets, only when nothing has
    passed since the load: packets sent in between (here the probes, through
    `exchange`) make it read the counters before as well, or its counts would be off."""
    from fwbench.backends.base import as_tracked, copies, exchange
    b = backend
    rs = rules_for(b, 50)
    b.apply(testbed, rs)
    probe = next(p for p in rs.probes if p.name == "test flow")
    ex = exchange(b, testbed, rs, copies(as_tracked(probe.packet), 5))
    assert ex.counts.get(probe.rule) == 5
    v = b.verify(testbed, rs)
    assert v.ok, v.reason
    assert v.details["probes"]["test flow"]["rule_hits"] >= PROBES
