"""Renderings of the rule-set model survive a real restore and save unchanged.

Each rendering (the golden files of tests/unit/test_render_iptables.py and fresh
seed000 renderings) is loaded with its ipsets into an anonymous network namespace
(`unshare -n`, gone when the command ends) by iptables-restore, legacy and nft,
and read back with iptables-save: every table's chain and rule lines must come
back byte for byte, so a backend can compare kernel state with the rendering.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fwbench.ruleset.model import Interfaces
from fwbench.ruleset.render import ipset
from fwbench.ruleset.render import iptables as ipt
from fwbench.ruleset.templates.seed000 import seed000

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.iptables_text import by_table  # noqa: E402

GOLDEN = Path(__file__).parent.parent / "golden" / "model"
IFS = Interfaces("fwb000000-f0", "fwb000000-f1")
VARIANTS = ("legacy", "nft")


def _tools(version: int, variant: str) -> tuple[str, str]:
    pre = "ip6tables" if version == 6 else "iptables"
    return f"{pre}-{variant}-restore", f"{pre}-{variant}-save"


def _restore_and_save(rules: str, sets: str, version: int, variant: str,
                      tmp_path: Path) -> str:
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces")
    restore, save = _tools(version, variant)
    for tool in ("unshare", "ipset", restore, save):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    (tmp_path / "sets").write_text(sets)
    (tmp_path / "rules").write_text(rules)
    # The namespace lives as long as this one shell: ipsets, rules, save, gone.
    script = 'ipset restore < "$1" && "$2" < "$3" && "$4"'
    cp = subprocess.run(["unshare", "-n", "sh", "-c", script, "sh", str(tmp_path / "sets"),
                         restore, str(tmp_path / "rules"), save],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout


def _cases():
    for name, version in (("rich-ip4.rules", 4), ("rich-ip6.rules", 6)):
        yield name, version, lambda name=name: (GOLDEN / name).read_text(), \
            lambda: (GOLDEN / "rich.ipset").read_text()
    for layout in ("linear", "set"):
        for version in (4, 6):
            def rules(layout=layout, version=version):
                return ipt.render(seed000(20, version=version, layout=layout), IFS, version)

            def sets(layout=layout, version=version):
                return ipset.render(seed000(20, version=version, layout=layout))
            yield f"seed000-{layout}-ip{version}", version, rules, sets


CASES = {name: (version, rules, sets) for name, version, rules, sets in _cases()}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_rendering_survives_restore_and_save(case, variant, tmp_path):
    version, rules, sets = CASES[case]
    text = rules()
    assert text, "an empty rendering proves nothing"
    saved = _restore_and_save(text, sets(), version, variant, tmp_path)
    want, got = by_table(text), by_table(saved)
    assert set(got) == set(want)
    for table in want:
        assert got[table] == want[table], table
    # The ids come back out of the kernel, one per rendered rule.
    ids = [ipt.rule_id(ln) for ln in saved.splitlines() if ln.startswith("-A ")]
    assert None not in ids and len(ids) == len(set(ids))


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_comparison_can_fail(variant, tmp_path):
    """A line written otherwise than save prints it comes back changed: a limit of
    60/minute reads back as 1/sec, and the default burst disappears."""
    text = ipt.render(seed000(2), IFS, 4).replace(
        '-A fwb_from_server -m comment',
        '-A fwb_from_server -m limit --limit 60/minute --limit-burst 5 -m comment')
    saved = _restore_and_save(text, "", 4, variant, tmp_path)
    assert by_table(saved)["filter"] != by_table(text)["filter"]
    assert "-m limit --limit 1/sec -m comment" in saved
