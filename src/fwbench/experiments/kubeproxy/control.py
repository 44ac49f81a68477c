"""kube-proxy's control plane with N services present (issue 36, deliverable 3):
one service added and removed by each update mechanism a backend has, the whole
rule set listed, and the kernel memory it holds; the kube-proxy experiment calls
`measure` in a trial whose load (the full sync) and verification are done.

    figures = control.measure(tb, backend, rs, mode)

`tb` the trial's testbed, `backend` a netfilter backend (iptables-legacy,
iptables-nft, nftables), `rs` the kube-proxy rule set the trial loaded and
verified (templates.kubeproxy.kube_proxy, either mode), `mode` "iptables" or
"nftables" (checked against `rs`). Optional: `mechanisms` (default: every one the
backend has but reload, the full sync being the trial's load; ask for "reload"
to have it load the whole rule set with one service more and back),
`seed` (where the added service's rule goes in iptables mode's KUBE-SERVICES),
`listings` (how many timed listings, the median kept; 0: none), `memory` (False: no
memory reading, and no second load). It returns a plain dict, seconds and bytes:

    {"services": N, "endpoints": M, "mode", "backend",
     "added": {"service": "svc-N", "position": p},
     "mechanisms": {"batch": {"runs": "...", "atomic": bool,
                              "add": STEP, "remove": STEP}, ...},
     "listing": {"argv": [...], "s": median, "all_s": [...]},
     "memory": {...} (see held_memory), "sync_again_s": the second full load}

    STEP = {"command_s": first command's start to the last one's end, on the
            firewall's host (fwbench.onhost.update_runner, pinned to the
            firewall's CPU, as the update experiment runs its commands),
            "prepare_s": rendering and differencing (and nft's handles read),
            "steps": commands run, "input_bytes": what they read on stdin,
            "peak_bytes": the machine's kernel memory peak while they ran,
            over its reading before, "check_s": the proof's time,
            "entries": rules and elements the kernel then holds}

Each change is proved before the next: the backend's own listing of the kernel
against the rendering of the rule set it should now hold (Backend.snapshot: no
differences, the entries asked), so the one service came (the other N as they
were) and went again (the rule set as loaded). A failed command or proof raises
FwbenchError, one line naming the mechanism and the step: the kernel then holds
something else, and no later figure would mean what it says.

The mechanisms (Backend.mechanisms): `batch`, the smallest change in one
iptables-restore --noflush or one nft transaction (iptables: `:CHAIN - [0:0]`
for the chains added, their rules, `-I KUBE-SERVICES p`, or `-D`, `-F`, `-X`;
nft: `add chain`, `add rule`, `add element ... service-ips { ... }`, or `delete
element`, `flush chain`, `delete chain`); `commands`, the same one command each;
`sync`, what kube-proxy's partial sync writes (iptables: a chain line for each
chain it writes, KUBE-SERVICES and its other own chains whole, the service's
chains, `-X` for the chains gone, COMMIT, with `--noflush --counters`; nft: the
service's chains made sure of and flushed then filled, its service-ips element,
and on removal the element deleted and the chains flushed and deleted, in one
transaction: kube-proxy deletes them a sync later, for kernels before 6.2);
`reload`, the whole rule set again.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from fwbench.backends import kernel
from fwbench.backends.base import Backend, Step
from fwbench.errors import FwbenchError
from fwbench.onhost import memory as meminfo
from fwbench.ruleset.model import RuleSet
from fwbench.ruleset.templates import kubeproxy
from fwbench.testbed.base import Testbed

# A command of a change may take this long before the trial gives up on it.
STEP_TIMEOUT_S = 900
# After emptying the firewall, before reading memory: RCU frees what it held
# (the update experiment's wait).
SETTLE_S = 0.2
# Memory readings taken on each side of the load; their medians are compared.
READINGS = 5


def measure(tb: Testbed, backend: Backend, rs: RuleSet, mode: str, *,
            mechanisms: list[str] | None = None, seed: int = 0, listings: int = 3,
            memory: bool = True) -> dict:
    """The control plane's figures for the loaded kube-proxy rule set `rs` (see
    the module). `rs` is loaded again when this returns."""
    if kubeproxy.mode_of(rs) != mode:
        raise FwbenchError(f"kube-proxy control plane: the rule set is in "
                           f"{kubeproxy.mode_of(rs)} mode, not {mode}")
    names = [m for m in backend.mechanisms if m != "reload"] if mechanisms is None \
        else list(mechanisms)
    unknown = [m for m in names if m not in backend.mechanisms]
    if unknown:
        raise FwbenchError(f"kube-proxy control plane: {backend.name} has no update "
                           f"mechanism {unknown[0]!r} (it has "
                           f"{', '.join(backend.mechanisms)})")
    added = kubeproxy.one_more(rs, seed)
    rewrite = kubeproxy.SYNC_CHAINS[mode]
    m = added.service.endpoints
    out: dict = {"services": rs.size, "endpoints": len(m), "mode": mode,
                 "backend": backend.name,
                 "added": {"service": added.service.name, "position": added.position}}
    if listings:
        out["listing"] = listing(tb, backend, listings)
    mechs: dict = {}
    for name in names:
        runs, atomic = backend.mechanisms[name]
        rec = {"runs": runs, "atomic": atomic}
        rec["add"] = change(tb, backend, rs, added.ruleset, name, rewrite, "add")
        rec["remove"] = change(tb, backend, added.ruleset, rs, name, rewrite, "remove")
        mechs[name] = rec
    out["mechanisms"] = mechs
    if memory:
        out["memory"], out["sync_again_s"] = held_memory(tb, backend, rs)
    return out


def change(tb: Testbed, b: Backend, old: RuleSet, new: RuleSet, mechanism: str,
           rewrite: frozenset[str], what: str) -> dict:
    """`old` (loaded) turned into `new` by `mechanism`, timed, then proved."""
    t0 = time.perf_counter()
    steps = b.update_steps(mechanism, tb, old, new, rewrite)
    prepare = time.perf_counter() - t0
    ran = run_steps(tb, steps)
    if ran["problem"]:
        raise FwbenchError(f"{b.name} {mechanism} ({what} a service): {ran['problem']}")
    t0 = time.perf_counter()
    snap = _proved(tb, b, new, f"{b.name} {mechanism} ({what} a service): the kernel "
                               f"does not hold the rule set after it")
    check = time.perf_counter() - t0
    return {"command_s": ran["command_s"], "prepare_s": prepare, "steps": len(steps),
            "input_bytes": sum(len(st.input.encode()) for st in steps if st.input),
            "peak_bytes": ran["peak_bytes"], "check_s": check, "entries": snap.entries}


def _proved(tb: Testbed, b: Backend, rs: RuleSet, failure: str):
    """The backend's listing of the kernel, which must be `rs` with its entries;
    else FwbenchError: `failure`, then why."""
    snap = b.snapshot(tb, rs)
    want = b.expected_entries(rs)
    if snap.differences or snap.entries != want:
        why = "; ".join(snap.differences[:2]) or \
            f"{snap.entries} entries in the kernel, {want} asked"
        raise FwbenchError(f"{failure}: {why}")
    return snap


def run_steps(tb: Testbed, steps: list[Step]) -> dict:
    """The steps run one after another on the firewall's host by the update
    runner (fwbench.onhost.update_runner), pinned to the firewall's CPU:
    command_s (the first's start to the last's end, by that host's clock),
    peak_bytes (its kernel memory peak meanwhile over the reading before) and
    problem (None, or the first failure's one line)."""
    fw = tb.topo.fw_client_side.host
    spec = {"cpu": tb.topo.settings.firewall_cpu, "timeout_s": STEP_TIMEOUT_S,
            "steps": [{"argv": tb.executor.on_host(fw, st.argv), "input": st.input}
                      for st in steps]}
    with tb.firewall_change():
        cp = tb.run(fw, [sys.executable, "-m", "fwbench.onhost.update_runner"],
                    input=json.dumps(spec), check=False,
                    timeout=STEP_TIMEOUT_S * max(1, len(steps)) + 60)
    try:
        got = json.loads(cp.stdout)
    except json.JSONDecodeError:
        err = (cp.stderr or cp.stdout or "").strip().splitlines()
        raise FwbenchError(f"the update runner on {fw} gave no report: "
                           f"{(err[-1] if err else 'exit ' + str(cp.returncode))[:120]}") \
            from None
    return {"command_s": (got["end_ns"] - got["start_ns"]) / 1e9,
            "peak_bytes": got["peak"]["kernel"] - got["pre"]["kernel"],
            "problem": got["problem"]}


def listing_argv(b: Backend) -> list[str]:
    """What lists the whole rule set in the backend's own tool: iptables-save
    (IPv4, all tables), or nft list ruleset."""
    if b.family == "x_tables" or getattr(b, "variant", None) == "nft":
        return [f"{kernel.xt(b.variant, 4).tool}-save"]
    return ["nft", "list", "ruleset"]


def listing(tb: Testbed, b: Backend, times: int = 3) -> dict:
    """The whole rule set listed `times` times, each timed as the update runner
    times a command (its output read whole and dropped)."""
    argv = listing_argv(b)
    took = []
    for _ in range(max(1, times)):
        ran = run_steps(tb, [Step(tuple(argv))])
        if ran["problem"]:
            raise FwbenchError(f"{b.name}: listing the rule set: {ran['problem']}")
        took.append(ran["command_s"])
    return {"argv": argv, "s": statistics.median(took), "all_s": took}


def held_memory(tb: Testbed, b: Backend, rs: RuleSet) -> tuple[dict, float]:
    """Kernel memory the loaded rule set holds: every firewall emptied and the
    memory read, the rule set loaded again (the full sync, timed; returned too)
    and read again, and the load proved as every change is (`held`). A trial
    that loads the rule set itself reads `memory_reading` on each side of its
    own load instead, and loads nothing twice."""
    empty = emptied(tb)
    took = b.apply(tb, rs).load_time_s
    b.fresh(tb, rs)     # nothing verifies this load's counters: forget it
    tb.hush(False)
    time.sleep(SETTLE_S)
    loaded = memory_reading(tb)
    _proved(tb, b, rs, f"{b.name}: the rule set loaded again for its memory is not "
                       f"what the kernel holds")
    return held(tb, b, empty, loaded), took


def emptied(tb: Testbed) -> dict:
    """Every firewall emptied, then the memory read (memory_reading)."""
    with tb.firewall_change():
        kernel.flush_all(tb)
    time.sleep(SETTLE_S)
    return memory_reading(tb)


def memory_reading(tb: Testbed) -> dict:
    """READINGS readings of two counters, their medians. `meminfo`: the machine's
    /proc/meminfo Slab + VmallocUsed + Percpu (fwbench.onhost.memory, the update
    experiment's figure), whole kilobytes, moved by everything the machine does
    meanwhile (its readings' spread is given). `cgroup`, on a testbed of
    namespaces on this machine: the kernel memory charged to this process's memory
    cgroup (v2 memory.stat `kernel`, v1 memory.kmem.usage_in_bytes), which the
    load's commands share: netfilter charges its rules, chains, sets and x_tables'
    blobs to the cgroup of the process that makes them (GFP_KERNEL_ACCOUNT), per
    object, so other processes' memory does not move it; to within the pages the
    per-CPU charge caches hold (a few 4 KiB pages a CPU). Neither counts x_tables'
    per-CPU rule counters' share that is not charged."""
    mi = [meminfo.parse(tb.machine_file(tb.topo.fw_client_side.host, "/proc/meminfo"))
          for _ in range(READINGS)]
    cg = [_cgroup_kernel(tb) for _ in range(READINGS)]
    return {"fields": {k: int(statistics.median(r[k] for r in mi)) for k in mi[0]},
            "spread": max(r["kernel"] for r in mi) - min(r["kernel"] for r in mi),
            "cgroup": int(statistics.median(cg)) if None not in cg else None}


def held(tb: Testbed, b: Backend, empty: dict, loaded: dict) -> dict:
    """What the rule set holds: the readings with it loaded over those of the
    emptied firewall (held_bytes: the cgroup's where there is one, it being the
    firewall's alone, else meminfo's), and what the backend says it charged."""
    out = {"meminfo": {"held_bytes": loaded["fields"]["kernel"] - empty["fields"]["kernel"],
                       "held": meminfo.delta(loaded["fields"], empty["fields"]),
                       "spread_bytes": max(empty["spread"], loaded["spread"]),
                       "resolution_bytes": 1024}}
    if empty["cgroup"] is not None and loaded["cgroup"] is not None:
        out["cgroup"] = {"held_bytes": loaded["cgroup"] - empty["cgroup"],
                         "source": _cgroup_file()}
    out["held_bytes"] = out.get("cgroup", out["meminfo"])["held_bytes"]
    charged = b.charged_memory(tb)
    if charged:
        out["charged"] = charged
    return out


def _cgroup_file() -> str | None:
    """This process's memory cgroup's kernel-memory file, if it has one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for ln in lines:
        num, ctrl, path = ln.split(":", 2)
        if num == "0" and ctrl == "":
            f = Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.stat"
            if f.exists():
                return str(f)
        elif "memory" in ctrl.split(","):
            f = Path("/sys/fs/cgroup/memory") / path.lstrip("/") / \
                "memory.kmem.usage_in_bytes"
            if f.exists():
                return str(f)
    return None


def _cgroup_kernel(tb: Testbed) -> int | None:
    """The kernel memory charged to this process's memory cgroup, bytes; None
    where the firewall's commands do not run in it (another machine's host)."""
    from fwbench.testbed.netns import NetnsTestbed
    f = _cgroup_file()
    if f is None or not isinstance(tb, NetnsTestbed):
        return None
    text = Path(f).read_text()
    if f.endswith("memory.stat"):
        for ln in text.splitlines():
            key, _, value = ln.partition(" ")
            if key == "kernel":
                return int(value)
        return None
    return int(text.strip())

