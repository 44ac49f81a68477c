"""Import round trips through the kernel: import a rule set, render it, load it into
an anonymous network namespace (`unshare -n`, gone when the command ends), save it
with the kernel's own tools, import the saved text again: the same rule set.

What comes back must equal what went in, table by table, chain by chain, rule by
rule (ids included: they travel as `fwb:` comments), and set by set with the
elements as a set (the kernel lists a hash set in its own order). The second
import maps the testbed's interface names back to their roles; its addresses are
already inside the benchmarking ranges, so it moves none.
"""
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from fwbench.ruleset.importers import load
from fwbench.ruleset.model import Interfaces, RuleSet
from fwbench.ruleset.render import ipset
from fwbench.ruleset.render import iptables as ipt
from fwbench.ruleset.render import nft
from fwbench.ruleset.templates.random import random_ruleset

DATA = Path(__file__).parent.parent / "data" / "rulesets"
IFS = Interfaces("fwb000000-f0", "fwb000000-f1")
BACK = f"{IFS.client_side}=client,{IFS.server_side}=server"


@pytest.fixture(autouse=True)
def root_and_tools():
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces")
    for tool in ("unshare", "ipset", "nft", "iptables-legacy-restore", "iptables-nft-save"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (./scripts/setup.sh installs it)")


def _in_namespace(script: str, *args: str) -> str:
    cp = subprocess.run(["unshare", "-n", "sh", "-c", script, "sh", *args],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout


def _shape(rs: RuleSet) -> dict:
    """What a round trip must keep: every table's chains and rules in order, and
    its sets with their elements as a multiset."""
    out = {}
    for t in rs.tables:
        sets = {s.name: (s.keys, s.version, s.interval, Counter(s.elements)) for s in t.sets}
        out[(t.family, t.name)] = (t.chains, sets)
    return out


def _iptables_trip(rs: RuleSet, variant: str, tmp_path: Path) -> RuleSet:
    version = 6 if rs.versions == {6} else 4
    pre = "ip6tables" if version == 6 else "iptables"
    (tmp_path / "sets").write_text(ipset.render(rs))
    (tmp_path / "rules").write_text(ipt.render(rs, IFS, version))
    saved = _in_namespace('ipset restore < "$1" && "$2" < "$3" && "$4" && ipset save > "$5"',
                          str(tmp_path / "sets"), f"{pre}-{variant}-restore",
                          str(tmp_path / "rules"), f"{pre}-{variant}-save",
                          str(tmp_path / "saved.ipset"))
    (tmp_path / "saved.rules").write_text(saved)
    return load.load_file(str(tmp_path / "saved.rules"), load.parse_iface_map(BACK),
                          str(tmp_path / "saved.ipset"))


def _nft_trip(rs: RuleSet, tmp_path: Path) -> RuleSet:
    (tmp_path / "rules.nft").write_text(nft.render(rs, IFS))
    saved = _in_namespace('nft -f "$1" && nft -j list ruleset', str(tmp_path / "rules.nft"))
    (tmp_path / "saved.json").write_text(saved)
    return load.load_file(str(tmp_path / "saved.json"), load.parse_iface_map(BACK))


def _gateway_ipt() -> RuleSet:
    return load.load_file(str(DATA / "gateway.rules"),
                          load.parse_iface_map("eth0=client,eth1=server"),
                          str(DATA / "gateway.ipset"))


def _gateway_nft(name: str) -> RuleSet:
    return load.load_file(str(DATA / name), load.parse_iface_map("eth0=client,eth1=server"))


@pytest.mark.parametrize("variant", ("legacy", "nft"))
def test_a_gateways_iptables_save_comes_back_the_same(variant, tmp_path):
    rs = _gateway_ipt()
    assert rs.address_map, "the gateway's own addresses were to be moved"
    assert _shape(_iptables_trip(rs, variant, tmp_path)) == _shape(rs)


@pytest.mark.parametrize("name", ("gateway.nft", "gateway.json"))
def test_a_gateways_nft_rule_set_comes_back_the_same(name, tmp_path):
    rs = _gateway_nft(name)
    assert any(t.sets for t in rs.tables), "the fixture has named sets"
    assert _shape(_nft_trip(rs, tmp_path)) == _shape(rs)


@pytest.mark.parametrize("version", (4, 6))
@pytest.mark.parametrize("seed", (1, 2, 3))
def test_random_rule_sets_come_back_the_same_through_both_tools(seed, version, tmp_path):
    """A seeded awkward rule set, written as iptables-save would write it, imported,
    then round-tripped through iptables-legacy and through nft."""
    made = random_ruleset(n_rules=200, seed=seed, version=version)
    text = ipt.render(made, IFS, version)
    (tmp_path / "made.rules").write_text(text)
    (tmp_path / "made.ipset").write_text(ipset.render(made))
    rs = load.load_file(str(tmp_path / "made.rules"), load.parse_iface_map(BACK),
                        str(tmp_path / "made.ipset"))
    assert rs.rule_count == 200
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    assert _shape(_iptables_trip(rs, "legacy", legacy)) == _shape(rs)
    via_nft = tmp_path / "nft"
    via_nft.mkdir()
    assert _shape(_nft_trip(rs, via_nft)) == _shape(rs)


def test_the_comparison_sees_a_changed_rule(tmp_path):
    """A round trip that lost or changed a rule would be caught: the same check on
    a kernel that holds one rule less fails."""
    rs = _gateway_ipt()
    back = _iptables_trip(rs, "legacy", tmp_path)
    t = back.tables[0]
    c = next(c for c in t.chains if c.rules)
    fewer = back.with_tables((type(t)(t.family, t.name, tuple(
        type(x)(x.name, x.rules[1:], x.hook, x.priority, x.type, x.policy)
        if x is c else x for x in t.chains), t.sets),) + back.tables[1:])
    assert _shape(fewer) != _shape(rs)
