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
        out: dict[int, dict[str, int]] = {}
        with open("/proc/stat") as f:
            for line in f:
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
        d = {k: (a[k] - b[k]) * _TICK_NS for k in ("softirq", "system", "irq", "user")}
        per_cpu[str(cpu)] = {f"{k}_ns": v for k, v in d.items()}
    busy = {c: v["softirq_ns"] + v["system_ns"] + v["irq_ns"] for c, v in per_cpu.items()}
    fw = busy.get(str(firewall_cpu), 0)
    return {
        "per_cpu": per_cpu,
        "firewall_cpu": firewall_cpu,
        "fw_cpu_ns_per_pkt": fw / packets if packets else None,
        "total_busy_ns_per_pkt": sum(busy.values()) / packets if packets else None,
        "tick_ns": _TICK_NS,
    }
