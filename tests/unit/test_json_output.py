"""`--json`: one JSON document on stdout and nothing else there (`fwbench backends
--json`; `fwbench check --json`, whose run needs root: tests/privileged/test_check.py),
or into a file with `--json FILE`, a rule-set path never taken for that FILE."""
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fwbench import backends, jsonout
from fwbench.cli import build_parser, check_json_target


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "fwbench", *args], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "80"}, timeout=120)


def test_backends_json_lists_every_registry_backend():
    cp = run_cli("backends", "--json")
    assert cp.returncode == 0, cp.stderr
    listing = json.loads(cp.stdout)          # the whole of stdout is the document
    assert [b["name"] for b in listing] == backends.names()
    for b in listing:
        assert set(b) == {"name", "available", "reason", "versions", "description",
                          "mechanisms"}
        assert all(set(m) == {"runs", "atomic"} for m in b["mechanisms"].values())
        assert set(b["mechanisms"]) <= {"reload", "batch", "commands", "map", "sync"}
        assert bool(b["mechanisms"]) == (b["name"] != "none")
        assert isinstance(b["available"], bool) and b["description"]
        assert isinstance(b["versions"], dict)
        assert all(v is None or isinstance(v, str) for v in b["versions"].values())
        # a reason exactly when unavailable, one line
        assert (b["reason"] is None) == b["available"]
        assert b["reason"] is None or "\n" not in b["reason"]
    if os.geteuid() != 0:
        assert {b["reason"] for b in listing} == {"needs root"}


def test_backends_without_json_is_the_table():
    cp = run_cli("backends")
    assert cp.returncode == 0 and "fwbench backends" in cp.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(cp.stdout)


def _check_args(*argv):
    args = build_parser().parse_args(["check", *argv])
    check_json_target(args)
    return args.ruleset, args.template, args.json


@pytest.mark.parametrize("argv, want", [
    (["gw.rules", "--json"], ("gw.rules", None, "-")),
    (["--json", "gw.rules"], ("gw.rules", None, "-")),            # not swallowed
    (["--json", "-", "gw.rules"], ("gw.rules", None, "-")),
    (["gw.rules", "--json", "out.json"], ("gw.rules", None, "out.json")),
    (["--json", "out.json", "gw.rules"], ("gw.rules", None, "out.json")),
    (["--json", "--template", "seed000"], (None, "seed000", "-")),
    (["--template", "seed000", "--json"], (None, "seed000", "-")),
    (["--template", "seed000", "--json", "out.json"], (None, "seed000", "out.json")),
    (["--json", "out.json", "--template", "seed000"], (None, "seed000", "out.json")),
    (["gw.rules"], ("gw.rules", None, None)),
])
def test_check_json_takes_a_file_or_stdout_and_never_the_rule_set(argv, want):
    assert _check_args(*argv) == want


@pytest.mark.parametrize("argv", [["--json", "/nonexistent.rules"],
                                  ["/nonexistent.rules", "--json"],
                                  ["--json", "OUT", "/nonexistent.rules"]])
def test_check_json_error_is_one_line_on_stderr_and_stdout_stays_empty(argv, tmp_path):
    out = tmp_path / "out.json"
    cp = run_cli("check", *[str(out) if a == "OUT" else a for a in argv])
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1, cp.stderr
    assert "/nonexistent.rules: no such file" in lines[0] and cp.stdout == ""
    assert not out.exists()


@dataclass
class _Rec:
    name: str
    sizes: frozenset


def test_emit_writes_the_same_document_to_stdout_or_a_file(tmp_path, capsys):
    doc = {"path": Path("/a/b"), "rec": _Rec("x", frozenset({3, 1})), "n": None}
    jsonout.emit(doc)
    printed = capsys.readouterr().out
    assert json.loads(printed) == {"path": "/a/b", "rec": {"name": "x", "sizes": [1, 3]},
                                   "n": None}
    jsonout.emit(doc, tmp_path / "out.json")
    assert (tmp_path / "out.json").read_text() == printed
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]   # no temporary left
    with pytest.raises(jsonout.FwbenchError, match="cannot write"):
        jsonout.emit(doc, tmp_path / "missing" / "out.json")
    jsonout.emit({**doc, "n": 5}, tmp_path / "out.json")      # an earlier one: replaced
    assert json.loads((tmp_path / "out.json").read_text())["n"] == 5


@pytest.mark.parametrize("text", [
    "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n",                 # a rule set
    '{"nftables": [{"metainfo": {"json_schema_version": 1}}]}',  # an nft JSON one
    '[{"id": "000"}]',                                         # another command's
])
def test_emit_never_replaces_a_file_that_is_not_its_own_kind(tmp_path, text):
    f = tmp_path / "gw.rules"
    f.write_text(text)
    with pytest.raises(jsonout.FwbenchError) as e:
        jsonout.emit({"ok": True, "results": []}, f)
    assert "not an earlier output of this command" in str(e.value) and "\n" not in str(e.value)
    assert f.read_text() == text
    with pytest.raises(TypeError):
        jsonout.dumps({"x": object()})
