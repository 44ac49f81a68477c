"""Running external commands, optionally inside a network namespace.

Every tool fwbench drives (ip, iptables, nft, ipset, iperf3, ping) is called through
here, so a failure always becomes a CommandError with the tool's own message.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from fwbench.errors import CommandError, FwbenchError


REPO = Path(__file__).resolve().parents[2]


def built_binary(env: str, relpath: str, what: str) -> Path:
    """A binary built from this tree by scripts/setup.sh, or $env when set."""
    p = Path(os.environ.get(env, REPO / relpath))
    if not os.access(p, os.X_OK):
        raise FwbenchError(f"{what} not found at {p}: build it with ./scripts/setup.sh")
    return p


def file_digest(p: Path) -> str:
    """Short sha256 of a file: which build of a tree's binary was used."""
    return hashlib.sha256(p.read_bytes()).hexdigest()[:12]


def in_netns(netns: str | None, argv: list[str]) -> list[str]:
    """The argv that runs `argv` inside `netns` (or as is when netns is None)."""
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


def run(argv: list[str], *, netns: str | None = None, input: str | None = None,
        check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    full = in_netns(netns, argv)
    try:
        cp = subprocess.run(full, input=input, capture_output=True, text=True,
                            timeout=timeout)
    except FileNotFoundError:
        raise FwbenchError(f"{full[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise FwbenchError(f"{' '.join(argv[:3])}: no answer after {timeout:.0f} s") from None
    if check and cp.returncode != 0:
        raise CommandError(argv, cp.returncode, cp.stderr or cp.stdout)
    return cp


def output(argv: list[str], **kw) -> str:
    return run(argv, **kw).stdout


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def require(tools: dict[str, str]) -> None:
    """One line naming the first missing tool and its Debian package, if any is
    missing: {tool: package}."""
    for tool, package in tools.items():
        if not have(tool):
            raise FwbenchError(f"{tool} not found: install the Debian package {package} "
                               f"(./scripts/setup.sh installs everything)")


def version_line(argv: list[str]) -> str | None:
    """First line a tool prints about its version, or None when it is missing."""
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    text = (cp.stdout or cp.stderr).strip()
    return text.splitlines()[0] if text else None
