"""`check FILE --coverage`: every rule of a file as imported, dropped (parts that
decide no verdict) or refused, read on past each refusal."""
import json
import subprocess
import sys
from pathlib import Path

from fwbench.ruleset.coverage import coverage

DATA = Path(__file__).parent.parent / "data" / "original"


def test_a_file_is_read_on_past_each_refused_rule():
    cov = coverage(str(DATA / "mixed.rules"))
    got = [(e.where.rsplit(":", 1)[1], e.status) for e in cov.entries]
    assert got == [("5", "imported"), ("6", "imported"), ("7", "refused"),
                   ("8", "dropped"), ("9", "refused"), ("10", "imported")]
    why = {e.where.rsplit(":", 1)[1]: e.why for e in cov.entries}
    assert why["9"] == "unsupported match -m connlimit"
    assert "--log-level" in why["8"]
    assert cov.totals() == {"imported": 3, "dropped": 1, "refused": 2}
    assert not cov.whole and cov.error is None


def test_a_file_that_imports_whole_lists_every_rule_imported():
    cov = coverage(str(DATA / "gw.rules"), {"eth0": "client", "eth1": "server"})
    assert cov.whole and cov.totals() == {"imported": 6, "dropped": 0, "refused": 0}
    assert [e.where for e in cov.entries] == [f"{DATA / 'gw.rules'}:{n}"
                                              for n in (6, 7, 8, 9, 10, 17)]


def test_an_error_no_rule_is_to_blame_for_stops_the_listing_there(tmp_path):
    f = tmp_path / "bad.rules"
    f.write_text("*filter\n:FORWARD DROP [0:0]\n-A FORWARD -p udp -j ACCEPT\n*nat\n")
    cov = coverage(str(f))
    assert not cov.whole and "before COMMIT" in cov.error


def test_the_cli_lists_it_and_exits_1_when_a_rule_is_refused():
    cp = subprocess.run([sys.executable, "-m", "fwbench", "check", str(DATA / "mixed.rules"),
                         "--coverage", "--json"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1, cp.stderr
    doc = json.loads(cp.stdout)
    assert doc["totals"] == {"imported": 3, "dropped": 1, "refused": 2}
    assert doc["rules"][2] == {"where": f"{DATA / 'mixed.rules'}:7", "status": "refused",
                               "why": "unsupported match -m recent"}
    assert "the file does not import whole" in cp.stderr
