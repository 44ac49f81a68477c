"""Imported constructs reach the kernel as the user's rule set had them (issue 34,
item 2): nft text read by nft itself, rendered for nft and iptables, loaded into
an anonymous network namespace (`unshare -n`, gone when the command ends) and
listed back. A rule an inet table restricts to one IP version (`meta nfproto`,
`ip protocol`, an ICMPv6 reject) lands in that version's iptables table only,
and a rate comes back as the period the rule asked for."""
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fwbench.ruleset.importers import nft_json
from fwbench.ruleset.model import (DROP, Action, Chain, HashLimit, Interfaces, Limit, Match,
                                   Ports, Rule, RuleSet, Table, Unsupported, validate)
from fwbench.ruleset.render import iptables as ipt
from fwbench.ruleset.render import ipset
from fwbench.ruleset.render import nft

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.iptables_text import by_table  # noqa: E402

IFS = Interfaces("fwb000000-f0", "fwb000000-f1")

SOURCE = """
table inet t {
    set s6 { type ipv6_addr; elements = { 2001:2::1 } }
    chain c {
        type filter hook forward priority 0; policy drop;
        tcp dport 22 reject with icmpv6 type admin-prohibited comment "fwb:v6-reject"
        udp dport 53 reject with icmp type host-unreachable comment "fwb:v4-reject"
        meta nfproto ipv6 tcp dport 80 counter drop comment "fwb:v6-only"
        ip protocol udp accept comment "fwb:v4-udp"
        meta nfproto != ipv4 limit rate 1000/second accept comment "fwb:v6-limit"
        ip6 saddr @s6 accept comment "fwb:v6-set"
        reject with icmpx type admin-prohibited comment "fwb:both"
    }
}
"""


@pytest.fixture(scope="module", autouse=True)
def root_and_tools():
    if os.geteuid() != 0:
        pytest.skip("needs root: nft and iptables in a network namespace")
    for tool in ("nft", "unshare", "iptables-legacy-restore", "ip6tables-legacy-restore"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (./scripts/setup.sh installs it)")


def _in_netns(script: str, *args: str) -> str:
    cp = subprocess.run(["unshare", "-n", "sh", "-c", script, "sh", *args],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout


@pytest.fixture(scope="module")
def imported() -> RuleSet:
    return nft_json.parse_text(SOURCE, "t.nft")


def test_nft_lists_the_rendering_of_the_import(imported, tmp_path):
    rendered = nft.render(imported, IFS)
    assert "meta nfproto ipv6 tcp dport 80 counter drop" in rendered
    (tmp_path / "r.nft").write_text(rendered)
    listed = _in_netns('nft -f "$1" && nft list ruleset', str(tmp_path / "r.nft"))
    want, want_elements = nft.comparable(rendered)
    got, got_elements = nft.comparable(listed)
    assert got == want
    assert {k: Counter(v) for k, v in got_elements.items()} == \
        {k: Counter(v) for k, v in want_elements.items()}


@pytest.mark.parametrize("variant", ("legacy", "nft"))
def test_each_version_s_rules_in_its_own_iptables_table(imported, variant, tmp_path):
    if not shutil.which("ipset"):
        pytest.skip("ipset is not installed")
    ids = {}
    (tmp_path / "sets").write_text(ipset.render(imported))
    for version in (4, 6):
        rendered = ipt.render(imported, IFS, version)
        pre = "ip6tables" if version == 6 else "iptables"
        (tmp_path / "rules").write_text(rendered)
        saved = _in_netns('ipset restore < "$1" && "$2" < "$3" && "$4"',
                          str(tmp_path / "sets"), f"{pre}-{variant}-restore",
                          str(tmp_path / "rules"), f"{pre}-{variant}-save")
        assert by_table(saved) == by_table(rendered)
        ids[version] = {ipt.rule_id(line) for line in saved.splitlines()} - {None}
    assert ids[4] == {"v4-reject", "v4-udp", "both"}
    assert ids[6] == {"v6-reject", "v6-only", "v6-limit", "v6-set", "both"}


def test_a_rate_iptables_cannot_hold_is_refused_not_rounded(tmp_path):
    rs = nft_json.parse_text(SOURCE.replace("1000/second", "1023/second"), "t.nft")
    with pytest.raises(Unsupported, match=r"limit rate 1023/second .* \(rule v6-limit\)"):
        ipt.render(rs, IFS, 6)
    (tmp_path / "r.nft").write_text(nft.render(rs, IFS))
    listed = _in_netns('nft -f "$1" && nft list ruleset', str(tmp_path / "r.nft"))
    assert "limit rate 1023/second accept" in listed


def test_rates_come_back_as_asked(tmp_path):
    """The renderer's limits load and save back as rendered in both variants (legacy
    holds a period, iptables-nft the printed rate); a refused one does not load as
    it was asked: legacy refuses a burst whose credits overflow."""
    rules = (Rule("a", Match(limit=Limit(25, "minute", 9))),
             Rule("b", Match(limit=Limit(1, "day", 1))),
             Rule("c", Match(hashlimit=HashLimit("h", 9, "hour"))))
    rs = validate(RuleSet("x", (Table("ip", "t", (
        Chain("c", rules, hook="forward", policy="accept"),)),)))
    rendered = ipt.render(rs, IFS, 4)
    (tmp_path / "rules").write_text(rendered)
    for variant in ("legacy", "nft"):
        saved = _in_netns('"$1" < "$2" && "$3"', f"iptables-{variant}-restore",
                          str(tmp_path / "rules"), f"iptables-{variant}-save")
        assert by_table(saved) == by_table(rendered)
    with pytest.raises(Unsupported, match="limit burst 2 at 1/day"):
        ipt.refuse_unsupported(validate(RuleSet("x", (Table("ip", "t", (Chain(
            "c", (Rule("a", Match(limit=Limit(1, "day", 2))),), hook="forward"),)),))))
    (tmp_path / "rules").write_text(rendered.replace("--limit-burst 1 ", "--limit-burst 2 "))
    cp = subprocess.run(["unshare", "-n", "iptables-legacy-restore", str(tmp_path / "rules")],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode != 0


def test_version_restrictions_list_back_as_rendered(tmp_path):
    """nft lists `meta nfproto` by itself only where no later expression implies it,
    and a reject's implied one only when no statement stands before the reject."""
    rules = (Rule("plain", Match(ip_version=6), Action("reject")),
             Rule("bare", Match(ip_version=6), Action("reject"), counter=False),
             Rule("limited", Match(ip_version=4, limit=Limit(5)),
                  Action("reject", reject_with="icmp-host-prohibited"), counter=False),
             Rule("icmpx", Match(ip_version=4),
                  Action("reject", reject_with="icmpx-admin-prohibited")),
             Rule("reset", Match(ip_version=4, proto="tcp"),
                  Action("reject", reject_with="tcp-reset")),
             Rule("port", Match(ip_version=4, proto="udp", dport=Ports.of(5)), DROP))
    rs = validate(RuleSet("x", (
        Table("inet", "t", (Chain("c", rules, hook="forward"),)),
        Table("netdev", "n", (Chain("i", (Rule("v6", Match(ip_version=6)),),
                                    hook="ingress", device="lo"),)))))
    rendered = nft.render(rs, IFS)
    (tmp_path / "r.nft").write_text(rendered)
    listed = _in_netns('ip link set lo up && nft -f "$1" && nft list ruleset',
                       str(tmp_path / "r.nft"))
    assert nft.comparable(listed)[0] == nft.comparable(rendered)[0]
    assert 'meta protocol ip6 counter' in listed
