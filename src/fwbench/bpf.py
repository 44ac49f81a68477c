"""The Python side of `bpf/`: drive fwbench-bpf, the loader of the eBPF firewall.

`load` attaches the filter to an interface inside a namespace; `dump` reads back
what the kernel holds there (program, settings, rules, set, per-rule counters);
`test_run` runs frames through a freshly loaded, unattached copy with
BPF_PROG_RUN, so verdicts can be checked with no traffic at all.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from fwbench import __version__, proc
from fwbench.errors import FwbenchError

HOOKS = ("xdp", "tc")
MODES = ("linear", "set")
# Return codes of the two hooks: XDP_DROP/XDP_PASS, TC_ACT_SHOT/TC_ACT_OK.
PASS = {"xdp": 2, "tc": 0}
DROP = {"xdp": 1, "tc": 2}


def binary() -> Path:
    return proc.built_binary("FWBENCH_BPF", "bpf/build/fwbench-bpf", "eBPF loader")


def version() -> str | None:
    try:
        return f"fwbench-bpf {__version__} (sha256 {proc.file_digest(binary())})"
    except FwbenchError:
        return None


def _json(cp: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(cp.stdout)
    except ValueError:
        raise FwbenchError(f"fwbench-bpf printed no JSON: {cp.stdout[:200]!r}") from None


def load(netns: str, hook: str, mode: str, ifname: str, rules: str,
         local: tuple[str, ...] = (), xdp_mode: str = "native") -> dict:
    argv = [str(binary()), "load", "--hook", hook, "--mode", mode, "--ifname", ifname,
            "--xdp-mode", xdp_mode]
    for a in local:
        argv += ["--local", a]
    return _json(proc.run(argv, netns=netns, input=rules))


def dump(netns: str, hook: str, ifname: str) -> dict:
    return _json(proc.run([str(binary()), "dump", "--hook", hook, "--ifname", ifname],
                          netns=netns))


def test_run(hook: str, mode: str, rules: str, frames: list[bytes],
             local: tuple[str, ...] = ()) -> dict:
    """Load the filter unattached and run each frame through it once."""
    with tempfile.NamedTemporaryFile("w", suffix=".rules") as f:
        f.write(rules)
        f.flush()
        argv = [str(binary()), "test-run", "--hook", hook, "--mode", mode, "--rules", f.name]
        for a in local:
            argv += ["--local", a]
        return _json(proc.run(argv, input="".join(fr.hex() + "\n" for fr in frames)))


def detach_all(netns: str, ifname: str) -> None:
    """Remove any XDP program and the clsact qdisc (with its tc filters) from ifname."""
    proc.run(["ip", "link", "set", "dev", ifname, "xdp", "off"], netns=netns)
    proc.run(["tc", "qdisc", "del", "dev", ifname, "clsact"], netns=netns, check=False)


def attached(netns: str, ifname: str) -> dict[str, int]:
    """Ids of the XDP program and of tc ingress programs on ifname (empty: none)."""
    out = {}
    link = json.loads(proc.output(["ip", "-j", "-d", "link", "show", "dev", ifname],
                                  netns=netns))[0]
    xdp = link.get("xdp", {})
    if xdp.get("prog", {}).get("id"):
        out["xdp"] = xdp["prog"]["id"]
    cp = proc.run(["tc", "-j", "filter", "show", "dev", ifname, "ingress"], netns=netns,
                  check=False)
    if cp.returncode == 0 and cp.stdout.strip():
        for f in json.loads(cp.stdout):
            prog = f.get("options", {}).get("prog", {})
            if prog.get("id"):
                out["tc"] = prog["id"]
    return out
