"""Every backend loads N = 1,000 and verifies; probes get the right verdicts; a
rule set that is not the one asked for fails verification, with a reason naming what
differs. Run against the real kernel in a fresh testbed."""
import pytest

from fwbench import backends
from fwbench.backends.base import flush_all, interfaces, ruleset_state
from fwbench.ruleset import render as r
from fwbench.ruleset import Entry, seed000
from fwbench.ruleset.seed000 import with_entry_replaced

FILTERING = [n for n in backends.names() if n != "none"]
SETS = {"ipset", "nftset", "xdp-set", "tc-set"}
NETFILTER_LINEAR = ["iptables-legacy", "iptables-nft", "nftables"]
PROBES = 20


def backend_or_skip(name):
    b = backends.get(name)
    if why := b.unavailable():
        pytest.skip(f"{name} cannot run here: {why}")
    return b


@pytest.mark.parametrize("name", FILTERING)
def test_loads_1000_and_verifies(testbed, name):
    b = backend_or_skip(name)
    policy = seed000(1000, testbed.topo.server.ip4)
    load = b.apply(testbed, policy)
    v = b.verify(testbed, policy)
    assert v.ok, v.reason
    assert v.rules_loaded == 1000
    assert load.load_time_s > 0
    d = v.details
    assert d["allowed_probe"]["forwarded"] >= d["allowed_probe"]["sent"]
    assert d["allowed_probe"]["rule_hits"] == d["allowed_probe"]["sent"]
    assert d["disallowed_probe"]["forwarded"] == 0
    assert d["ping_probe"]["replies"] == d["ping_probe"]["rule_hits"] == d["ping_probe"]["sent"]
    assert d["differences"] == []


@pytest.mark.parametrize("name", FILTERING)
def test_missing_test_rule_fails_verification(testbed, name):
    """The test entry replaced by one more filler: the count is still N, so only the
    probe can catch it, and it must."""
    b = backend_or_skip(name)
    good = seed000(50, testbed.topo.server.ip4)
    broken = with_entry_replaced(good, good.test_entry, Entry(good.test_entry.daddr, "tcp", 39999))
    b.apply(testbed, broken)
    v = b.verify(testbed, good)
    assert not v.ok
    assert v.rules_loaded == 50
    # The probe itself must catch it, whatever the listing says.
    assert f"test-flow probe: 0 of {PROBES} forwarded" in v.reason, v.reason
    assert v.details["allowed_probe"]["forwarded"] == 0


@pytest.mark.parametrize("name", FILTERING)
def test_wrong_rule_count_fails_verification(testbed, name):
    b = backend_or_skip(name)
    b.apply(testbed, seed000(999, testbed.topo.server.ip4))
    v = b.verify(testbed, seed000(1000, testbed.topo.server.ip4))
    assert not v.ok and "999 entries in the kernel, 1000 asked" in v.reason


def test_none_forwards_everything(testbed):
    b = backend_or_skip("none")
    policy = seed000(1, testbed.topo.server.ip4)
    b.apply(testbed, policy)
    v = b.verify(testbed, policy)
    assert v.ok, v.reason
    assert v.rules_loaded == 0
    assert v.details["disallowed_probe"]["forwarded"] == v.details["disallowed_probe"]["sent"]


def test_backends_do_not_stack(testbed):
    """Loading one backend after another leaves only the last: legacy and nft rules
    would otherwise both apply, and an XDP or tc filter would sit under either."""
    policy = seed000(100, testbed.topo.server.ip4)
    for name in ("iptables-legacy", "xdp-set", "tc-linear"):
        backend_or_skip(name).apply(testbed, policy)
    nft = backend_or_skip("nftables")
    nft.apply(testbed, policy)
    state = ruleset_state(testbed)
    assert state["iptables-legacy"] == 0 and state["nftables_tables"] == 1
    assert state["bpf_programs"] == 0
    assert nft.verify(testbed, policy).ok
    backend_or_skip("tc-set").apply(testbed, policy)
    assert ruleset_state(testbed)["bpf_programs"] == 1
    flush_all(testbed)
    assert ruleset_state(testbed) == {"iptables-legacy": 0, "nftables_tables": 0, "ipsets": 0,
                                      "bpf_programs": 0}


# --- rule sets that are not what was asked --------------------------------------
#
# Each is loaded with the backend's own load step, then verified against the policy
# that was asked for. The rule count stays N in every case, so only the comparison
# with the rendering, or a probe, can catch it, and each case says which must.

def client_rule_lines(name: str, text: str) -> list[int]:
    """Indices of the lines of a rendered file that are the client-side chain's
    rules (iptables, nft) or the eBPF filter's scanned rules."""
    lines = text.splitlines()
    if name.startswith(("iptables", "ipset")):
        return [i for i, ln in enumerate(lines) if ln.startswith(f"-A {r.IPT_FROM_CLIENT} ")]
    if name.startswith("nft"):
        start = lines.index(f"\tchain {r.NFT_FROM_CLIENT} {{")
        end = lines.index("\t}", start)
        return list(range(start + 1, end))
    return [i for i, ln in enumerate(lines) if ln.startswith("rule ")]


def rules_file(name: str) -> str:
    return {"nftables": "rules.nft", "nftset": "rules.nft"}.get(
        name, "rules.bpf" if name.startswith(("xdp", "tc")) else "rules.iptables")


def load_tampered(tb, b, name, policy, tamper):
    """Render `policy`, change the rule file with `tamper(lines, rule_indices)`,
    load it as the backend would, and verify against `policy`."""
    files = b.render(policy, interfaces(tb))
    f = rules_file(name)
    lines = files[f].splitlines()
    tamper(lines, client_rule_lines(name, files[f]))
    files[f] = "\n".join(lines) + "\n"
    flush_all(tb)
    b.load(tb, files)
    return b.verify(tb, policy)


@pytest.mark.parametrize("name", FILTERING)
def test_reordered_rule_set_fails_verification(testbed, name):
    """The same rules in another order: right count, every probe still passes (the
    swapped rules are fillers, or the two auxiliary rules after a set's rule)."""
    b = backend_or_skip(name)
    policy = seed000(50, testbed.topo.server.ip4)

    def swap(lines, rules):
        i, j = (rules[-2], rules[-1]) if name in SETS else (rules[0], rules[1])
        lines[i], lines[j] = lines[j], lines[i]

    v = load_tampered(testbed, b, name, policy, swap)
    assert not v.ok and v.rules_loaded == 50
    assert "differs from the rendered one" in v.reason and "another order" in v.reason, v.reason
    d = v.details
    assert d["allowed_probe"]["forwarded"] >= PROBES and d["disallowed_probe"]["forwarded"] == 0
    assert d["ping_probe"]["replies"] == 3


@pytest.mark.parametrize("name", FILTERING)
def test_one_rule_too_permissive_fails_verification(testbed, name):
    """A filler (or set element) replaced by one that lets the disallowed probe's
    flow through: same size; the disallowed probe and the comparison both catch it."""
    b = backend_or_skip(name)
    good = seed000(50, testbed.topo.server.ip4)
    t = good.test_entry
    loose = Entry(t.daddr, "udp", t.dport + 1)
    b.apply(testbed, with_entry_replaced(good, good.entries[3], loose))
    v = b.verify(testbed, good)
    assert not v.ok and v.rules_loaded == 50
    assert f"disallowed probe: {PROBES} of {PROBES} forwarded, expected 0" in v.reason, v.reason
    assert "missing from the kernel" in v.reason and "not rendered" in v.reason
    assert str(t.dport + 1) in v.reason


@pytest.mark.parametrize("name", NETFILTER_LINEAR)
def test_one_rule_widened_fails_verification(testbed, name):
    """A TCP filler whose port match is gone (every TCP port allowed): no probe can
    see it (they are UDP and ICMP), only the comparison with the rendering."""
    b = backend_or_skip(name)
    policy = seed000(50, testbed.topo.server.ip4)

    def widen(lines, rules):
        i = rules[5]
        if name == "nftables":
            assert " tcp dport 40005 " in lines[i]
            lines[i] = lines[i].replace(" tcp dport 40005 ", " meta l4proto tcp ")
        else:
            assert " -m tcp --dport 40005 " in lines[i]
            lines[i] = lines[i].replace(" -m tcp --dport 40005 ", " ")

    v = load_tampered(testbed, b, name, policy, widen)
    assert not v.ok and v.rules_loaded == 50
    d = v.details
    assert d["allowed_probe"]["forwarded"] >= PROBES and d["disallowed_probe"]["forwarded"] == 0
    assert "missing from the kernel" in v.reason and "40005" in v.reason, v.reason


@pytest.mark.parametrize("name", FILTERING)
def test_missing_icmp_rule_fails_verification(testbed, name):
    """The ICMP echo-request rule left out: the entries are all there; the ping
    probe and the comparison catch it."""
    b = backend_or_skip(name)
    policy = seed000(50, testbed.topo.server.ip4)

    def drop_icmp(lines, rules):
        (i,) = [i for i in rules if "icmp" in lines[i] or lines[i].endswith(" 1 8")]
        del lines[i]

    v = load_tampered(testbed, b, name, policy, drop_icmp)
    assert not v.ok and v.rules_loaded == 50
    assert "ping probe: 0 of 3 answered" in v.reason, v.reason
    assert "1 rendered line missing from the kernel" in v.reason, v.reason
    assert v.details["allowed_probe"]["forwarded"] >= PROBES


@pytest.mark.parametrize("name", FILTERING)
def test_one_element_replaced_fails_verification(testbed, name):
    """One set element (or, in a linear chain, one rule) replaced by another that no
    probe sends: same size, every probe passes; only the comparison can tell."""
    b = backend_or_skip(name)
    good = seed000(50, testbed.topo.server.ip4)
    other = Entry(good.entries[7].daddr, "tcp", 39_999)
    b.apply(testbed, with_entry_replaced(good, good.entries[7], other))
    v = b.verify(testbed, good)
    assert not v.ok and v.rules_loaded == 50
    d = v.details
    assert d["allowed_probe"]["forwarded"] >= PROBES and d["disallowed_probe"]["forwarded"] == 0
    assert d["ping_probe"]["replies"] == 3
    noun = "element" if name in SETS else "line"
    assert f"1 rendered {noun} missing from the kernel" in v.reason, v.reason
    assert f"1 {noun} in the kernel not rendered" in v.reason and "39999" in v.reason
