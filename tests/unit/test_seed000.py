"""Seed 000's template: its shape (fillers first, the test entry last), its size
limits and the spill of fillers past the port range to other addresses, and its
nft rendering checked by nft itself at a few sizes. The renderings against seed
000's golden files are in test_render_iptables.py, test_render_nft.py and
test_render_bpf.py."""
from dataclasses import replace

import pytest

from fwbench.ruleset import templates
from fwbench.ruleset.evaluate import evaluate
from fwbench.ruleset.model import Interfaces, Match, Ports, Prefix, RuleSet, RuleSetError
from fwbench.ruleset.render import iptables as ipt
from fwbench.ruleset.render import nft
from fwbench.ruleset.templates.seed000 import (CONTROL_RULE, MAX_ENTRIES, PING_RULE,
                                               SET_NAME, SET_RULE, entry_id)

seed000 = templates.get("seed000")
IFS = Interfaces("fwb000000-f0", "fwb000000-f1")
SERVER = "198.19.0.2"


def _entries(rs: RuleSet) -> list[tuple[str, str, int]]:
    """(daddr, proto, dport) of every entry, in order, whatever the layout."""
    (t,) = rs.tables
    if rs.layout == "set":
        return [(a, p, int(port)) for a, p, port in t.set(SET_NAME).elements]
    rules = [r for r in t.chain("from_client").rules if r.id.startswith("allow-")]
    return [(r.match.dst.net.split("/")[0], r.match.proto, r.match.dport.single)
            for r in rules]


def test_the_registry_names_seed000():
    from fwbench.ruleset.templates.seed000 import seed000 as direct
    assert seed000 is direct


@pytest.mark.parametrize("layout", ["linear", "set"])
def test_seed000_shape(layout):
    rs = seed000(1000, layout=layout)
    entries = _entries(rs)
    assert rs.size == len(entries) == len(set(entries)) == 1000
    assert entries[0] == (SERVER, "tcp", 40000)
    assert entries[-1] == (SERVER, "udp", 5201)
    assert all(proto == "tcp" for _, proto, _ in entries[:-1])  # fillers never match UDP
    (t,) = rs.tables
    ids = [r.id for r in t.chain("from_client").rules]
    if layout == "linear":
        assert ids == [entry_id(i) for i in range(1, 1001)] + [CONTROL_RULE, PING_RULE]
        assert rs.flow_rule == entry_id(1000)
    else:
        assert ids == [SET_RULE, CONTROL_RULE, PING_RULE]
        assert rs.flow_rule == SET_RULE
    assert (rs.flow.daddr, rs.flow.proto, rs.flow.dport) == entries[-1]


def test_seed000_beyond_the_port_range_spills_to_other_addresses():
    for layout in ("linear", "set"):
        entries = _entries(seed000(30_000, layout=layout))
        assert len(set(entries)) == 30_000
        assert entries[25_535] == (SERVER, "tcp", 65535)
        assert entries[25_536] == ("198.19.255.1", "tcp", 40000)
        assert all(port <= 65535 for _, _, port in entries)
    v6 = _entries(seed000(30_000, version=6))
    assert v6[25_536] == ("2001:2:0:ff::1", "tcp", 40000)
    assert len(set(v6)) == 30_000


@pytest.mark.parametrize("n", [0, -1, MAX_ENTRIES + 1])
def test_seed000_rejects_sizes_out_of_range(n):
    with pytest.raises(RuleSetError, match=f"rule count must be 1..{MAX_ENTRIES}"):
        seed000(n)


def test_seed000_rejects_an_unknown_layout():
    with pytest.raises(RuleSetError, match="layout must be linear or set"):
        seed000(5, layout="tree")


def test_one_entry_is_only_the_test_entry():
    rs = seed000(1)
    assert _entries(rs) == [(SERVER, "udp", 5201)]
    assert ipt.render(rs, IFS, 4).count("-A fwb_from_client ") == 1 + 2


def test_without_counters_only_the_fillers_count_nothing():
    (t,) = seed000(5, counters=False).tables
    counting = [r.id for r in t.chain("from_client").rules if r.counter]
    assert counting == [entry_id(5), CONTROL_RULE, PING_RULE]


def test_digest_changes_with_any_entry():
    rs = seed000(10)
    assert rs.digest() == seed000(10).digest()
    (t,) = rs.tables
    client = t.chain("from_client")
    moved = tuple(replace(r, match=Match(dst=Prefix.of(SERVER), proto="tcp",
                                         dport=Ports.of(1)))
                  if r.id == entry_id(10) else r for r in client.rules)
    other = rs.with_tables((replace(t, chains=tuple(
        replace(c, rules=moved) if c is client else c for c in t.chains)),))
    assert other.digest() != rs.digest()
    assert seed000(10, layout="set").digest() != rs.digest()


# --- nft -c -------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["linear", "set"])
# 1000 is test_render_nft.py's; 30,000 spills past the ports to other addresses.
@pytest.mark.parametrize("n", [1, 30_000])
def test_generated_nft_passes_nft_check(layout, n, nft_check):
    cp = nft_check(nft.render(seed000(n, layout=layout), IFS))
    assert cp.returncode == 0, cp.stderr


def test_generated_nft_without_counters_passes_nft_check(nft_check):
    cp = nft_check(nft.render(seed000(50, counters=False), IFS))
    assert cp.returncode == 0, cp.stderr


def test_nft_check_catches_a_broken_file(nft_check):
    """The check above can fail: a rule set with a syntax error is rejected."""
    text = nft.render(seed000(3), IFS).replace("accept", "acept", 1)
    assert nft_check(text).returncode != 0


def test_the_input_variant_lets_a_real_hosts_own_traffic_through(nft_check):
    """On a real firewall the INPUT chain (policy drop) would also drop the SSH session
    fwbench drives the host by: `host_traffic` accepts what enters on neither test
    interface, after the test interfaces' jumps, so the measured flow and the probes
    are decided as before."""
    plain = seed000(5, chain="input")
    rs = seed000(5, chain="input", host_traffic=True)
    assert rs.name == "seed000-linear-input-host" and rs.digest() != plain.digest()
    assert rs.probes == plain.probes
    decided = [(v.forward, v.decided_by, v.policy_of)
               for v in (evaluate(x, p.packet) for x in (rs, plain) for p in x.probes)]
    assert decided[:3] == decided[3:]
    assert decided[1] == (False, None, "input")     # the disallowed probe: the policy
    base = rs.tables[0].chains[0]
    assert [r.id for r in base.rules] == ["from-client", "from-server", "not-from-client"]
    text = nft.render(rs, IFS)
    assert 'iifname != "fwb000000-f0" jump host' in text
    assert 'iifname != "fwb000000-f1"' in text
    assert nft_check(text).returncode == 0
    rules = ipt.render(rs, IFS, 4)
    assert "! -i fwb000000-f0" in rules and "! -i fwb000000-f1" in rules
    with pytest.raises(RuleSetError, match="for chain input"):
        seed000(5, host_traffic=True)
