"""`fwbench check` for real: a corpus through each backend in a testbed, compared with
the reference evaluator; and a kernel that does otherwise is caught."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fwbench import backends, check
from fwbench.backends.iptables import IptablesLegacy
from fwbench.ruleset.templates.seed000 import seed000


def test_check_of_seed004_nat_agrees_on_two_backends(tmp_path):
    out = tmp_path / "check.json"
    cp = subprocess.run([sys.executable, "-m", "fwbench", "check", "--template", "seed004-nat",
                         "--backends", "iptables-legacy,nftables", "--corpus", "300",
                         "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "all backends agree with the reference" in cp.stdout
    rep = json.loads(out.read_text())
    assert rep["ok"] and rep["corpus"] >= 300
    for b in rep["backends"]:
        assert b["disagreements"] == 0 and b["refused"] is None
        # Some of the corpus is forwarded (and translated), some dropped.
        assert 0 < b["forwarded"] < b["packets"], b


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


def test_a_kernel_that_drops_what_the_rule_set_accepts_is_caught():
    rs = seed000(5)
    rep = check.check(rs, [backends.get("iptables-legacy"), _Opened()], corpus_size=200)
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
