"""`fwbench check` for real: a corpus through each backend in a testbed, compared with
the reference evaluator; and a kernel that does otherwise is caught."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fwbench import backends, check
from fwbench.errors import FwbenchError
from fwbench.backends.iptables import IptablesLegacy
from fwbench.ruleset.templates.seed000 import seed000


class _Opened(IptablesLegacy):
    """iptables-legacy whose kernel gets the measured flow's rule as DROP."""
    name = "iptables-legacy-opened"

    def load(self, tb, files, room=0):
        text = files["rules.iptables"]
        rid = '"fwb:allow-5"'
        line = next(ln for ln in text.splitlines() if rid in ln)
        assert line.endswith("-j ACCEPT")
        super().load(tb, {**files, "rules.iptables": text.replace(
            line, line[:-len("ACCEPT")] + "DROP")})


def test_a_kernel_that_drops_what_the_rule_set_accepts_is_caught(module_testbed):
    rs = seed000(5)
    rep = check.check(rs, [backends.get("iptables-legacy"), _Opened()], corpus_size=200,
                      tb=module_testbed)
    good, bad = rep.results
    assert good.disagreements == 0
    assert not rep.ok
    assert any("missing from the kernel" in line and "--dport 5201" in line
               for line in bad.kernel), bad.kernel
    assert bad.per_packet, "the flow's packets were forwarded where the rule set drops"
    assert rep.between, "the two backends' verdicts differ on the same packets"


def test_seed004_nat_on_a_stateless_backend_is_refused_before_any_testbed():
    cp = subprocess.run([sys.executable, "-m", "fwbench", "check", "--template", "seed004-nat",
                         "--backends", "xdp-set"], capture_output=True, text=True)
    assert cp.returncode == 2
    assert cp.stderr.strip() == "fwbench: error: xdp-set: unsupported: dnat (rule nat-1)"


RULESETS = Path(__file__).parent.parent / "data" / "rulesets"


@pytest.mark.parametrize("argv", [
    # a template, --json last
    ["--template", "seed000", "--param", "n=5", "--backends", "iptables-legacy", "--json"],
    # --json right before the rule-set file: the file is the rule set, not the output
    ["--json", str(RULESETS / "gateway.nft"), "--iface", "eth0=client,eth1=server",
     "--backends", "nftables"],
], ids=["template", "json-before-file"])
def test_check_json_on_stdout_is_the_document_alone(argv):
    cp = subprocess.run([sys.executable, "-m", "fwbench", "check", "--corpus", "60", *argv],
                        capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    rep = json.loads(cp.stdout)               # stdout holds nothing but the document
    assert rep["ok"] and rep["corpus"] >= 60 and rep["skipped"] == {}
    assert [b["backend"] for b in rep["backends"]] == [argv[argv.index("--backends") + 1]]
    assert rep["backends"][0]["packets"] == rep["corpus"]
    # the human text went to stderr
    assert "all backends agree with the reference" in cp.stderr
    assert rep["ruleset"] in cp.stderr


# --- the original file itself as the reference -------------------------------------

ORIGINALS = Path(__file__).parent.parent / "data" / "original"


def test_check_of_a_file_loads_the_file_itself_and_agrees_with_it(tmp_path):
    """The command line: the file itself loaded as the original row, beside the
    backends' renderings of its import."""
    out = tmp_path / "check.json"
    cp = subprocess.run([sys.executable, "-m", "fwbench", "check", str(ORIGINALS / "gw.rules"),
                         "--iface", "eth0=client,eth1=server", "--backends",
                         "iptables-legacy,nftables", "--corpus", "300", "--json", str(out)],
                        capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "the original and all backends agree with the reference" in cp.stdout
    original_agrees(json.loads(out.read_text()))


@pytest.mark.parametrize("name", ["gw.nft", "gw.json"])
def test_an_nft_or_json_original_agrees_with_its_import(check_file, name):
    """The other two formats the same way, in one testbed and this interpreter (the
    command line is the test above's)."""
    cp, rep = check_file(ORIGINALS / name, iface="wan0=client,lan0=server",
                         backends="iptables-legacy,nftables")
    assert cp.returncode == 0, cp.stdout
    assert "the original and all backends agree with the reference" in cp.stdout
    original_agrees(rep)


def original_agrees(rep: dict) -> None:
    orig = rep["original"]
    assert orig["backend"] == "original" and orig["refused"] is None
    assert orig["disagreements"] == 0 and 0 < orig["forwarded"] < orig["packets"]
    assert [b["backend"] for b in rep["backends"]] == ["iptables-legacy", "nftables"]


def _wrong(rs, rule_id: str, **match):
    """The import with one rule's match changed: what a wrong importer mapping gives."""
    from dataclasses import replace
    from fwbench.ruleset.model import evolve
    tables = tuple(replace(t, chains=tuple(replace(c, rules=tuple(
        evolve(r, match=evolve(r.match, match)) if r.id == rule_id else r
        for r in c.rules)) for c in t.chains)) for t in rs.tables)
    return rs.with_tables(tables)


@pytest.mark.parametrize("rule_id, change", [
    ("filter-2", {"dport": "swapped"}),     # --dport 443 read as another rule's 53
    ("filter-4", {"src": None}),            # the DROP rule's -s 10.1.2.0/24 dropped
])
def test_a_wrong_import_is_caught_by_the_original_and_by_nothing_else(rule_id, change,
                                                                      module_testbed):
    from fwbench.ruleset.model import Ports
    path = str(ORIGINALS / "gw.rules")
    rs = check.ruleset_from(path=path, iface="eth0=client,eth1=server")
    if change.get("dport") == "swapped":
        change = {"dport": Ports.of(53)}
    bad = _wrong(rs, rule_id, **change)
    rep = check.check(bad, [backends.get("iptables-legacy"), backends.get("nftables")],
                      corpus_size=300, original=check.original_of(path), tb=module_testbed)
    orig = rep.original
    assert not rep.ok and orig.refused is None
    assert orig.per_packet, "the original gives other verdicts than the wrong import"
    # Every backend follows the (wrong) model: only the original tells.
    assert all(r.disagreements == 0 for r in rep.results if r is not orig)
    line = {"filter-2": 7, "filter-4": 9}[rule_id]
    assert any(f"gw.rules:{line}" in d or "policy" in d for d in orig.per_packet), \
        orig.per_packet[:5]
    # A run measures nothing of it: it stops before its first trial, in one line.
    with pytest.raises(FwbenchError, match="the import does not mean what the file means"):
        check.confirm_original(bad, path, corpus_size=300)


def test_an_original_that_does_not_load_leaves_the_check_failed(tmp_path):
    f = tmp_path / "odd.rules"
    # The import reads it; iptables' own tool refuses it (a chain name over the 28
    # characters x_tables holds).
    long = "c" * 40
    f.write_text(f"*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
                 f":{long} - [0:0]\n-A FORWARD -p udp -j {long}\n-A {long} -j ACCEPT\nCOMMIT\n")
    rs = check.ruleset_from(path=str(f))
    rep = check.check(rs, [backends.get("nftables")], corpus_size=100,
                      original=check.original_of(str(f)))
    assert rep.original.refused and "does not load here" in rep.original.refused
    assert not rep.ok
