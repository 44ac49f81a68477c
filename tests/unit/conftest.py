"""Fixtures the unit tests share."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def nft_check(tmp_path):
    """`nft -c -f` of a text in a private network namespace (nft -c needs
    CAP_NET_ADMIN, never the root namespace's); skips where that cannot run."""
    def check(text: str) -> subprocess.CompletedProcess:
        if not shutil.which("nft") or not shutil.which("unshare"):
            pytest.skip("nft or unshare is not installed (./scripts/setup.sh installs them)")
        f = tmp_path / "rules.nft"
        f.write_text(text)
        argv = ["unshare", "--net", "nft", "-c", "-f", str(f)]
        if os.geteuid() != 0:
            argv = ["unshare", "--map-root-user", "--net", "nft", "-c", "-f", str(f)]
        cp = subprocess.run(argv, capture_output=True, text=True)
        if cp.returncode != 0 and os.geteuid() != 0:
            if "Operation not permitted" in cp.stderr:
                pytest.skip("unprivileged user namespaces are disabled, so nft -c cannot run")
            if "Message too long" in cp.stderr:
                # nft enlarges its netlink buffer with SO_RCVBUFFORCE, which a user
                # namespace does not grant; large files are checked when run as root.
                pytest.skip("nft -c of a large file needs root (netlink buffer limit)")
        return cp
    return check


GOLDEN = Path(__file__).parent.parent / "golden"


@pytest.fixture
def golden():
    """`golden(path, text)`: `text` must equal the golden file at `path`;
    FWBENCH_UPDATE_GOLDEN=1 writes it instead (then review the diff)."""
    def check(path: Path, text: str) -> None:
        if os.environ.get("FWBENCH_UPDATE_GOLDEN"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        assert text == path.read_text()
    return check


@pytest.fixture
def elsewhere():
    """`elsewhere(setup, *exprs)`: each expression's value as text (str), computed in
    a new Python process under another hash seed (PYTHONHASHSEED) after `setup`
    (imports; tests/unit is on its path). Determinism is proven against it: the
    same call twice in one process shares its hash seed and every cache, so a
    result that depends on set or dict order, or on the run, would still agree."""
    def run(setup: str, *exprs: str) -> list[str]:
        code = (f"import json, sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                f"{setup}\nprint(json.dumps([str(e) for e in ({', '.join(exprs)},)]))")
        for seed in ("1", "4242"):    # whichever differs from this process's
            if os.environ.get("PYTHONHASHSEED") != seed:
                break
        cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "PYTHONHASHSEED": seed}, timeout=120)
        assert cp.returncode == 0, cp.stderr
        return json.loads(cp.stdout)
    return run
