"""The Python side of `bpf/`: drive fwbench-bpf, the loader of the eBPF firewall.

`load` attaches the filter to an interface of a testbed host (commands go through
the testbed's executor, so the host may be a namespace or a machine); `dump` reads
back what the kernel holds there (program, settings, rules, set, per-rule counters);
`test_run` runs frames through a freshly loaded, unattached copy with
BPF_PROG_RUN, so verdicts can be checked with no traffic at all.

`bpf/drop.bpf.c` (the drop-position experiment's "drop every IPv4 UDP packet"
programs, one for XDP, one for tc) has no loader of its own: iproute2 attaches
it (`drop_commands`, `attach_drop`), `drop_attachment` reads back what is
attached, and `drop_count` reads the per-CPU map its program counts drops in.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from fwbench import __version__, proc
from fwbench.errors import FwbenchError
from fwbench.testbed.executor import Executor

HOOKS = ("xdp", "tc")
DROP_OBJECT = proc.REPO / "bpf" / "build" / "drop.bpf.o"
DROP_PROGRAMS = {"xdp": "fwb_xdp_drop", "tc": "fwb_tc_drop"}   # hook -> program name
DROP_MAP = "fwb_drops"
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


def load(ex: Executor, host: str, hook: str, mode: str, ifname: str, rules: str,
         local: tuple[str, ...] = (), xdp_mode: str = "native", room: int = 0) -> dict:
    return _json(ex.run(host, load_argv(hook, mode, ifname, local, xdp_mode, room),
                        input=rules))


def load_argv(hook: str, mode: str, ifname: str, local: tuple[str, ...] = (),
              xdp_mode: str = "native", room: int = 0) -> list[str]:
    """The loader's command line: it reads the rules on stdin, loads a new program
    with new maps and attaches it in place of whatever program is there, in one
    step (XDP's attach replaces; tc's with BPF_TC_F_REPLACE). `room`: set elements
    `update` may add later (set mode)."""
    argv = [str(binary()), "load", "--hook", hook, "--mode", mode, "--ifname", ifname,
            "--xdp-mode", xdp_mode]
    for a in local:
        argv += ["--local", a]
    if room:
        argv += ["--room", str(room)]
    return argv


def update_argv(hook: str, ifname: str) -> list[str]:
    """The loader's command line that changes the attached set filter's elements in
    place: `add DADDR PROTO PORT SLOT` / `del DADDR PROTO PORT` lines on stdin."""
    return [str(binary()), "update", "--hook", hook, "--ifname", ifname]


def dump(ex: Executor, host: str, hook: str, ifname: str) -> dict:
    return _json(ex.run(host, [str(binary()), "dump", "--hook", hook, "--ifname", ifname]))


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


def detach_all(ex: Executor, host: str, ifname: str) -> None:
    """Remove any XDP program and the clsact qdisc (with its tc filters) from ifname."""
    ex.run(host, ["ip", "link", "set", "dev", ifname, "xdp", "off"])
    ex.run(host, ["tc", "qdisc", "del", "dev", ifname, "clsact"], check=False)


def attached(ex: Executor, host: str, ifname: str) -> dict[str, int]:
    """Ids of the XDP program and of tc ingress programs on ifname (empty: none)."""
    out = {}
    link = json.loads(ex.output(host, ["ip", "-j", "-d", "link", "show", "dev", ifname]))[0]
    xdp = link.get("xdp", {})
    if xdp.get("prog", {}).get("id"):
        out["xdp"] = xdp["prog"]["id"]
    cp = ex.run(host, ["tc", "-j", "filter", "show", "dev", ifname, "ingress"], check=False)
    if cp.returncode == 0 and cp.stdout.strip():
        for f in json.loads(cp.stdout):
            prog = f.get("options", {}).get("prog", {})
            if prog.get("id"):
                out["tc"] = prog["id"]
    return out


# --- bpf/drop.bpf.c -------------------------------------------------------------------

def drop_commands(hook: str, ifname: str, obj: str | Path = DROP_OBJECT) -> list[list[str]]:
    """The iproute2 commands that attach drop.bpf.o's program for `hook` to ifname:
    XDP in native mode, or tc ingress (clsact) in direct-action mode."""
    if hook == "xdp":
        return [["ip", "link", "set", "dev", ifname, "xdpdrv", "obj", str(obj), "sec", "xdp"]]
    if hook == "tc":
        return [["tc", "qdisc", "add", "dev", ifname, "clsact"],
                ["tc", "filter", "add", "dev", ifname, "ingress", "bpf", "da", "obj",
                 str(obj), "sec", "tc"]]
    raise FwbenchError(f"no drop program for hook {hook!r} (known: {', '.join(HOOKS)})")


def attach_drop(ex: Executor, host: str, commands: list[list[str]]) -> None:
    """Run drop_commands' commands (as rendered, so what ran is what was recorded)."""
    for argv in commands:
        if not argv or argv[0] not in ("ip", "tc"):
            raise FwbenchError(f"not an iproute2 command: {' '.join(argv)!r}")
        ex.run(host, argv)


def drop_attachment(ex: Executor, host: str, hook: str, ifname: str) -> dict:
    """The program attached at `hook` on ifname: {"prog": {id, name, tag, jited, ...},
    "mode": iproute2's XDP mode (1 native, 2 generic, 3 offload)} for XDP,
    {"prog": ..., "direct_action": bool} for tc; {} when none is attached."""
    if hook == "xdp":
        link = json.loads(ex.output(host, ["ip", "-j", "link", "show", "dev", ifname]))[0]
        xdp = link.get("xdp") or {}
        return {"prog": xdp["prog"], "mode": xdp.get("mode")} if xdp.get("prog") else {}
    cp = ex.run(host, ["tc", "-j", "filter", "show", "dev", ifname, "ingress"], check=False)
    items = json.loads(cp.stdout) if cp.returncode == 0 and cp.stdout.strip() else []
    for f in items:
        opts = f.get("options") or {}
        if f.get("kind") == "bpf" and opts.get("prog"):
            return {"prog": opts["prog"], "direct_action": bool(opts.get("direct-action"))}
    return {}


def drop_count(ex: Executor, host: str, prog_id: int) -> int:
    """Packets program `prog_id` has counted in its DROP_MAP, summed over CPUs."""
    info = json.loads(ex.output(host, ["bpftool", "-j", "prog", "show", "id", str(prog_id)]))
    for m in info.get("map_ids", []):
        meta = json.loads(ex.output(host, ["bpftool", "-j", "map", "show", "id", str(m)]))
        if meta.get("name") == DROP_MAP:
            dump = json.loads(ex.output(host, ["bpftool", "-j", "map", "dump", "id", str(m)]))
            return sum(v["value"] for e in dump for v in e["formatted"]["values"])
    raise FwbenchError(f"BPF program {prog_id} has no {DROP_MAP} map")


def has_clsact(ex: Executor, host: str, ifname: str) -> bool:
    """Whether ifname has a clsact qdisc (tc's attach point), with or without filters."""
    cp = ex.run(host, ["tc", "-j", "qdisc", "show", "dev", ifname], check=False)
    if cp.returncode != 0 or not cp.stdout.strip():
        return False
    return any(q.get("kind") == "clsact" for q in json.loads(cp.stdout))


def run_stats(ex: Executor, host: str, prog_id: int) -> dict[str, int]:
    """{"run_time_ns", "run_cnt"} of program `prog_id` so far: the kernel's run-time
    statistics (zeros unless something keeps them on, as `fwbench-engine spin
    --bpf-stats` does for cpucost)."""
    info = json.loads(ex.output(host, ["bpftool", "-j", "prog", "show", "id", str(prog_id)]))
    return {"run_time_ns": int(info.get("run_time_ns", 0)), "run_cnt": int(info.get("run_cnt", 0))}
