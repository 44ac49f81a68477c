"""The README's command list and every ```sh block of docs/, as written.

Each command line is run, or, where it runs for minutes to hours or needs real
hosts, checked as far as `fwbench` itself goes before it needs root: the CLI's own
parser, the scenario loaded and validated, the experiment's tool check and its plan
(the echo design's time estimate among its notes). The commands run in a scratch
directory holding small real stand-ins for the files they name (gw.rules, gw.ipset,
results/mine and the other run directories, lab.toml, /tmp/lab), with `scenarios/`,
`bench/`, `tests/` and `.venv/` linked in, so `.venv/bin/python bench/...` and
`fwbench run scenarios/...` are typed as the page shows them. A command this test
does not know how to classify fails it: a new line in the docs gets a decision here.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fwbench import backends, cli, experiments, scenario
from fwbench.experiments import loop
from fwbench.testbed import hosts, inventory

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
LINKED = ("scenarios", "bench", "tests", ".venv")
# The small run the report and compare lines read: the pair `report --pair` names,
# and `none` for `compare --normalise`.
SMALL_RUN = ["--backends", "none,iptables-legacy,xdp-set", "--rules", "20",
             "--frame-sizes", "64", "--repeat", "1", "--duration", "0.2", "--no-report"]
RUN_COPIES = ("results/before", "results/after", "A", "B")


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^[ \t]*```{lang}\n(.*?)^[ \t]*```", text, re.S | re.M)


def commands(block: str) -> list[str]:
    """The block's command lines: continuations joined, lines that are only a
    comment (a comment continued from the line above) left out."""
    out, cur = [], ""
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cur += line
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        out.append(cur.strip())
        cur = ""
    assert not cur, f"a continued line with nothing after it: {cur!r}"
    return out


def words(cmd: str) -> list[str]:
    return [w for w in shlex.split(cmd, comments=True) if w != "..."]


def page_commands(page: Path) -> list[str]:
    return [c for b in fenced(page.read_text(), "sh") for c in commands(b)]


class Reached(BaseException):
    """The command got as far as it goes without root (or without real hosts)."""


def long_running(w: list[str]) -> bool:
    """Runs for minutes or hours, or on real hosts: its arguments are checked."""
    if w[0] in ("./run.sh", "./test.sh"):
        return True
    if w[0] != "fwbench":
        return False
    return w[1] in ("run", "lab") or (w[1] == "study" and w[2] != "list") or \
        (w[1] == "clean" and "--inventory" in w)


# ---- the stand-ins -----------------------------------------------------------------

def inventory_example() -> str:
    """docs/real-hosts.md's example inventory: the stand-in for lab.toml."""
    (block,) = fenced((REPO / "docs" / "real-hosts.md").read_text(), "toml")
    return block


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("documented")
    for name in LINKED:
        (d / name).symlink_to(REPO / name)
    # A gateway's iptables-save and the ipset save its rules name (eth0 its LAN).
    shutil.copy(REPO / "tests/data/rulesets/gateway.rules", d / "gw.rules")
    shutil.copy(REPO / "tests/data/rulesets/gateway.ipset", d / "gw.ipset")
    shutil.copy(REPO / "tests/data/original/mixed.rules", d / "mixed.rules")
    for lab in (d, d / "lab"):      # lab.toml here; /tmp/lab/inventory.toml is lab/
        lab.mkdir(exist_ok=True)
        (lab / "id_ed25519").write_text("not a key: the commands stop before a login\n")
        (lab / "known_hosts").write_text("")
    (d / "lab.toml").write_text(inventory_example())
    (d / "lab" / "inventory.toml").write_text(inventory_example())
    run = shell(f"fwbench run {shlex.join(SMALL_RUN)} --out results/mine", d, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    for copy in RUN_COPIES:
        shutil.copytree(d / "results/mine", d / copy)
    return d


def shell(cmd: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{REPO / '.venv/bin'}:{os.environ['PATH']}",
           "COLUMNS": "200"}
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


# ---- running a command, or checking it ------------------------------------------------

_done: dict[str, str] = {}    # a command run once serves every page that shows it


def run_fast(cmd: str, d: Path) -> None:
    typed, w = shlex.join(words(cmd)), words(cmd)
    if typed in _done:
        return
    if w[0] == ".venv/bin/python":      # the bench scripts: their --help
        assert w[1].startswith("bench/") and len(w) == 2, cmd
        w = [*w, "--help"]
        cmd = shlex.join(w)
    p = shell(cmd, d)
    assert p.returncode == 0, f"{cmd}: exit {p.returncode}\n{p.stderr[-3000:]}"
    plausible(w, p.stdout, d)
    _done[typed] = p.stdout


def plausible(w: list[str], out: str, d: Path) -> None:
    """What a command that exits 0 must also have printed or written."""
    names = backends.names()
    if w[0] == ".venv/bin/python":
        assert out.startswith("usage:") and Path(w[1]).name in out, out
        return
    sub, rest = w[1], w[2:]
    if sub == "backends" and "--json" in rest:
        assert [b["name"] for b in json.loads(out)] == names
    elif sub == "backends":
        assert all(n in out for n in names), out
    elif sub == "study":
        assert all(s in out for s in ("000", "001", "002", "003", "004", "all five")), out
    elif sub == "check" and "--coverage" in rest:
        assert "the file imports whole" in out, out
    elif sub == "check" and "|" in w:           # --json | jq .ok
        assert out.strip() == "true", out
    elif sub == "check":
        assert re.search(r"agree with the reference$", out.strip()), out[-2000:]
        if "--json" in rest and rest[rest.index("--json") + 1:][:1] != []:
            doc = json.loads((d / rest[rest.index("--json") + 1]).read_text())
            assert doc["ok"] is True and doc["backends"], doc
    elif sub == "report":
        html = d / rest[0] / "report.html"
        assert f"report: {rest[0]}/report.html" in out and html.stat().st_size > 10_000
    elif sub == "compare":
        a, b = [x for x in rest if not x.startswith("--")]
        html = d / b / f"compare-vs-{Path(a).name}" / "compare.html"
        assert f"comparison: {html.relative_to(d)}" in out and html.exists(), out
    elif sub == "clean":
        assert out.startswith("removed "), out
    else:
        raise AssertionError(f"no check of what `fwbench {sub}` prints")


def check_long(cmd: str, d: Path, monkeypatch, capsys) -> None:
    """The command as `fwbench` takes it up to where it would need root or a real
    host; then, for a run, the experiment it would start and its checks before any
    testbed (tools, kernel features, the measured flow of a rule set); for `--full`,
    its plan, whose notes hold the estimate. (Plans are not made for every run: at
    1,000,000 set elements the update experiment's takes minutes.)"""
    w = words(cmd.replace("/tmp/lab", str(d / "lab")))
    if w[0] in ("./run.sh", "./test.sh"):
        script = REPO / w[0]
        assert os.access(script, os.X_OK), f"{w[0]} is not executable"
        assert subprocess.run(["bash", "-n", script]).returncode == 0
        for line in script.read_text().splitlines():    # run.sh's own `fwbench run`
            if "fwbench run" in line and not line.lstrip().startswith("#"):
                inner = [x for x in shlex.split(line) if x not in ("exec", "$@")]
                check_long(shlex.join(["fwbench", *inner[inner.index("run"):]]), d,
                           monkeypatch, capsys)
        return
    loaded: list = []
    real_load = scenario.load

    def load(*a, **kw):
        loaded.append(real_load(*a, **kw))
        return loaded[-1]

    def reached(*a, **kw):
        raise Reached(w)

    monkeypatch.chdir(d)
    with monkeypatch.context() as m:
        m.setattr(scenario, "load", load)
        m.setattr(cli, "_need_root", reached)
        m.setattr(hosts, "clean", reached)      # clean --inventory: would log in
        capsys.readouterr()
        try:
            code = cli.main(w[1:])
        except Reached:
            code = None
        err = capsys.readouterr().err
    assert code is None, f"{cmd}: exit {code} before it would start: {err}"
    if w[1] == "run" and "--resume" in w:
        assert (d / w[w.index("--resume") + 1] / "run.json").exists()
    elif w[1] == "run":
        (sc,) = loaded
        exp = experiments.get(sc)
        loop._preflight(exp)
        if "--full" in w:       # "estimate first": the plan says how long it takes
            planned = exp.plan()
            assert planned.cells and any("estimated" in n for n in planned.notes), \
                planned.notes
        if "--inventory" in w:
            inv = Path(w[w.index("--inventory") + 1])
            assert sc.testbed.provider == "ssh" and inventory.load(d / inv).hosts
    elif w[1] == "clean":
        inventory.load(d / w[w.index("--inventory") + 1])


def exercise(cmd: str, d: Path, monkeypatch, capsys) -> None:
    w = words(cmd)
    known = w[0] in ("fwbench", "./run.sh", "./test.sh") or \
        (w[0] == ".venv/bin/python" and w[1].startswith("bench/"))
    assert known, f"a documented command this test does not know: {cmd}"
    if long_running(w):
        check_long(cmd, d, monkeypatch, capsys)
    else:
        run_fast(cmd, d)


# ---- the tests ---------------------------------------------------------------------------

def test_the_readme_command_list_runs_as_written(scratch, monkeypatch, capsys):
    cmds = page_commands(README)
    jq = words("fwbench check --template seed000 --json | jq .ok")
    assert len(cmds) > 30 and any(words(c) == jq for c in cmds)
    for cmd in cmds:
        exercise(cmd, scratch, monkeypatch, capsys)
    ran = [c for c in cmds if not long_running(words(c))]
    assert len(ran) >= 15 and all(shlex.join(words(c)) in _done for c in ran)


@pytest.mark.parametrize("page", [p.name for p in DOCS])
def test_every_sh_example_of_the_docs_runs(page, scratch, monkeypatch, capsys):
    for cmd in page_commands(REPO / "docs" / page):
        exercise(cmd, scratch, monkeypatch, capsys)


def test_the_coverage_example_is_what_check_prints(scratch):
    """docs/rulesets.md's `check mixed.rules --coverage` listing, line for line."""
    text = (REPO / "docs" / "rulesets.md").read_text()
    (block,) = [b for b in fenced(text, "") if b.startswith("$ fwbench check")]
    first, *want = block.rstrip("\n").splitlines()
    cmd = first.removeprefix("$ ").split("#")[0].strip()
    p = shell(cmd, scratch)
    assert p.returncode == 1, p.stderr       # a rule refused: exit 1, as the page says
    got = [ln.rstrip() for ln in p.stdout.splitlines()]
    assert got[:len(want)] == want, "\n".join(got)


def test_the_inventory_example_loads(scratch):
    inv = inventory.load(scratch / "lab.toml")
    assert set(inv.hosts) == {"client", "fw", "server"}


def test_only_the_api_page_holds_python_examples():
    """test_docs_api.py runs docs/api.md's; a ```python block elsewhere needs a test."""
    pages = [p for p in [README, *DOCS] if fenced(p.read_text(), "python")]
    assert pages == [REPO / "docs" / "api.md"]


def test_the_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    for page in DOCS:
        assert f"](docs/{page.name})" in text, f"docs/{page.name} is not linked from the README"


def anchors(page: Path) -> set[str]:
    """The page's headings as GitHub names their anchors."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_link_between_pages_resolves():
    for page in [README, *DOCS]:
        for target, anchor in re.findall(r"\]\(([^)#:]+\.md)(?:#([^)]*))?\)",
                                         page.read_text()):
            assert (page.parent / target).exists(), f"{page.name}: {target}"
            if anchor:
                assert anchor in anchors(page.parent / target), \
                    f"{page.name}: {target}#{anchor}: no such heading"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
