"""`fwbench check FILE` on issue 34's example files (tests/data/constructs/protos:
each construct in iptables-save and nft form), with the original row: the file
itself, loaded by its own tool, must give the reference's verdict for every
packet it judges, as must every backend that holds the rule set."""
from pathlib import Path

import pytest


PROTOS = Path(__file__).parent.parent / "data" / "constructs" / "protos"


def run_check(check_file, name: str, corpus: int = 200,
              backends: str = "iptables-legacy,nftables") -> dict:
    """`fwbench check` of one example file (in the module's testbed)."""
    ipsets = PROTOS / name.replace(".rules", ".ipset")
    more = str(ipsets) if name.endswith(".rules") and ipsets.exists() else None
    cp, rep = check_file(PROTOS / name, iface="eth0=client,eth1=server", corpus=corpus,
                         backends=backends, ipsets=more)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "the original and all backends agree with the reference" in cp.stdout
    orig = rep["original"]
    assert orig["refused"] is None and orig["disagreements"] == 0
    assert 0 < orig["forwarded"] < orig["packets"]
    return rep


@pytest.mark.parametrize("name", ["ipsec-gre.rules", "ipsec-gre.nft", "ipsec-gre6.rules",
                                  "ipsec-gre-inet.nft"])
def test_esp_ah_gre_by_name_and_number(check_file, name):
    rep = run_check(check_file, name, backends="iptables-legacy,iptables-nft,nftables")
    checked = {b["backend"] for b in rep["backends"] if b["refused"] is None}
    assert {"iptables-legacy", "iptables-nft", "nftables"} <= checked


@pytest.mark.parametrize("name, note", [
    ("nflog.rules", "nflog.rules:7: -j NFLOG left out (the rule only counts; no verdict "
                    "depends on it)"),
    ("nflog.nft", "rule 1 (handle 2): log group 5 left out (the rule only counts; no "
                  "verdict depends on it)"),
])
def test_nflog_decides_no_verdict_and_the_check_says_so(check_file, name, note):
    rep = run_check(check_file, name)
    assert any(note in n for n in rep["notes"]), rep["notes"]


@pytest.mark.parametrize("name", ["quota.rules", "quota.nft"])
def test_quota_packets_that_reach_it_are_not_judged_the_rest_are(check_file, name):
    rep = run_check(check_file, name)
    assert rep["limit_rules"] == ["filter-2", "filter-3"]
    assert 0 < rep["not_judged_rate_limited"] < rep["corpus"]


@pytest.mark.parametrize("name, sets", [("set-timeouts.rules", ("blocked", "webnets")),
                                        ("set-timeouts.nft", ("blocked", "trusted6"))])
def test_set_timeouts_that_outlast_a_check_agree_and_are_noted(check_file, name, sets):
    rep = run_check(check_file, name)
    noted = [n for n in rep["notes"] if "element timeouts left out" in n]
    assert [s for s in sets if any(f"set {s}:" in n for n in noted)] == list(sets)


@pytest.mark.parametrize("name", ["redirect.rules", "redirect.nft"])
def test_redirect_delivers_to_the_firewall_and_its_counters_prove_it(check_file, name):
    from fwbench import check
    from fwbench.ruleset import corpus
    from fwbench.backends.base import as_tracked, evaluator
    rep = run_check(check_file, name)
    # The reference delivers some packets to the firewall (no capture sees them):
    # the per-rule counters every backend agreed on are what proves it.
    rs = check.with_counters(check.ruleset_from(path=str(PROTOS / name),
                                                iface="eth0=client,eth1=server"))
    pkts = [as_tracked(p) for p in corpus.build(rs, size=rep["corpus"])]
    local = [p for p in pkts if evaluator(rs).evaluate(p).local]
    assert local
    assert all(b["per_rule"] == [] for b in rep["backends"] if b["refused"] is None)


@pytest.mark.parametrize("name", ["interval-concat.rules", "interval-concat.nft",
                                  "iprange.rules"])
def test_interval_and_concatenated_sets_agree_with_their_original(check_file, name):
    rep = run_check(check_file, name)
    assert not [n for n in rep["notes"] if "set" in n and "left out" in n]


@pytest.mark.parametrize("name", ["masquerade-port.rules", "masquerade-port.nft"])
def test_masquerade_to_one_port_agrees_with_its_original(check_file, name):
    rep = run_check(check_file, name)
    assert {"iptables-legacy", "nftables"} <= {b["backend"] for b in rep["backends"]
                                               if b["refused"] is None}
