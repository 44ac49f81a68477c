"""The nft renderer against the kernel: each rendering is loaded with `nft -f` into an
anonymous network namespace (`unshare -n`, gone when the command ends) and what
`nft list ruleset` prints back must be the rendering, line by line with counters'
values left out, and every set's elements as a set."""
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from fwbench.ruleset.model import Interfaces
from fwbench.ruleset.render import nft
from fwbench.ruleset.templates.seed000 import seed000

MODEL_GOLDEN = Path(__file__).parent.parent / "golden" / "model"
IFS = Interfaces("fwb000000-f0", "fwb000000-f1")


def _renderings() -> dict[str, str]:
    out = {p.name: p.read_text() for p in sorted(MODEL_GOLDEN.glob("nft-*.nft"))}
    for kw in ({}, {"counters": False}, {"layout": "set"}):
        for n in (5, 3000):
            rs = seed000(n, **kw)
            out[f"{rs.name}-n{n}{'-nocounters' if kw.get('counters') is False else ''}"] = \
                nft.render(rs, IFS)
    return out


RENDERINGS = _renderings()


@pytest.fixture(scope="module", autouse=True)
def root_and_tools():
    if os.geteuid() != 0:
        pytest.skip("needs root: nft -f into a network namespace")
    for tool in ("nft", "unshare"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (./scripts/setup.sh installs it)")


def _listed(text: str, tmp_path: Path) -> str:
    f = tmp_path / "rules.nft"
    f.write_text(text)
    cp = subprocess.run(["unshare", "-n", "sh", "-c", 'nft -f "$0" && nft list ruleset',
                         str(f)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_kernel_lists_the_rendering(name, tmp_path):
    rendered = RENDERINGS[name]
    want_lines, want_elements = nft.comparable(rendered)
    got_lines, got_elements = nft.comparable(_listed(rendered, tmp_path))
    assert got_lines == want_lines
    assert {k: Counter(v) for k, v in got_elements.items()} == \
        {k: Counter(v) for k, v in want_elements.items()}


def test_a_difference_is_seen(tmp_path):
    """The comparison above can fail: a rule the kernel holds differs from the text."""
    rendered = RENDERINGS["nft-rich.nft"]
    want_lines, _ = nft.comparable(rendered.replace("priority filter + 10", "priority 10"))
    got_lines, _ = nft.comparable(_listed(rendered, tmp_path))
    assert got_lines != want_lines
