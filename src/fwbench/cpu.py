"""CPU time spent during a trial, from /proc/stat: per CPU, how much went to softirq
(where forwarding and netfilter run), to the kernel on behalf of processes (system,
e.g. the sender's packet writes), and to user space.

/proc/stat counts in USER_HZ ticks (10 ms here), so a 1 s trial is resolved to about
1 %; the record says so. The figures cover the whole machine, not only the testbed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
# /proc/stat columns after the CPU name.
_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class CpuSample:
    ticks: dict[int, dict[str, int]]

    @staticmethod
    def now() -> "CpuSample":
        """This machine's."""
        with open("/proc/stat") as f:
            return CpuSample.parse(f.read())

    @staticmethod
    def of(tb, role: str = "fw") -> "CpuSample":
        """The machine's that testbed host `role` runs on."""
        return CpuSample.parse(tb.machine_file(role, "/proc/stat"))

    @staticmethod
    def parse(text: str) -> "CpuSample":
        out: dict[int, dict[str, int]] = {}
        for line in text.splitlines():
            name, *vals = line.split()
            if not name.startswith("cpu") or name == "cpu":
                continue
            out[int(name[3:])] = {k: int(v) for k, v in zip(_FIELDS, vals)}
        return CpuSample(out)


def delta(before: CpuSample, after: CpuSample, packets: int, firewall_cpu: int) -> dict:
    """Per-CPU time between two samples and the cost per forwarded packet.

    `fw_cpu_ns_per_pkt` charges the busy time (softirq + system + irq) of the CPU the
    firewall's ingress is steered to; `total_busy_ns_per_pkt` charges every CPU's busy
    time, the sender's included. Both are None when nothing was forwarded.
    """
    per_cpu = {}
    for cpu, a in after.ticks.items():
        b = before.ticks.get(cpu, a)
        d = {k: (a[k] - b[k]) * _TICK_NS for k in _FIELDS}
        per_cpu[str(cpu)] = {f"{k}_ns": v for k, v in d.items()}
    busy = {c: v["softirq_ns"] + v["system_ns"] + v["irq_ns"] for c, v in per_cpu.items()}
    fw = busy.get(str(firewall_cpu), 0)
    return {
        "per_cpu": per_cpu,
        "firewall_cpu": firewall_cpu,
        "fw_cpu_ns_per_pkt": fw / packets if packets else None,
        "total_busy_ns_per_pkt": sum(busy.values()) / packets if packets else None,
        "tick_ns": _TICK_NS,
        "drift": drift_index(per_cpu, firewall_cpu),
    }


# A trial is disturbed when others took this much of the firewall's CPU, or the
# hypervisor this much of any CPU.
OTHERS_MAX = 0.05
STEAL_MAX = 0.02


def drift_index(per_cpu: dict[str, dict[str, int]], firewall_cpu: int) -> dict:
    """How much of the trial's CPU the firewall did not get: `others` is the share of
    the firewall CPU spent in process context (user, nice, system: tasks that took it
    from softirq forwarding; only meaningful where nothing of the instrument runs
    there), `steal` the largest share the hypervisor took from any CPU. Tick-sampled:
    about 1 % of a 1 s trial."""
    def share(c: dict[str, int], keys: tuple[str, ...]) -> float:
        total = sum(c.values())
        return sum(c[f"{k}_ns"] for k in keys) / total if total else 0.0
    fw = per_cpu.get(str(firewall_cpu))
    return {"others": share(fw, ("user", "nice", "system")) if fw else None,
            "steal": max((share(c, ("steal",)) for c in per_cpu.values()), default=0.0)}


def disturbed(cpu: dict | None) -> str | None:
    """Why a trial's CPU figures say it was disturbed, or None."""
    d = (cpu or {}).get("drift")
    if not d:
        return None
    if d["others"] is not None and d["others"] > OTHERS_MAX:
        return f"other tasks took {d['others']:.0%} of the firewall CPU"
    if d["steal"] > STEAL_MAX:
        return f"the hypervisor took {d['steal']:.0%} of a CPU (steal)"
    return None
