"""`cpucost`: what a packet costs the firewall's CPU at one fixed offered load.

Throughput ranks backends only while they are slower than the sender; the fastest
(sets, eBPF) all forward whatever the sender offers. At a load every backend can
carry, the busy time of the CPU the firewall's ingress is steered to, divided by the
packets forwarded, still ranks them: nanoseconds per packet, with the instrument's
own share (veth, forwarding, the XDP sink) the same in every cell and measured by the
`none` backend.

Per trial: the soaker (fwbench.soaker) measures its idle rate on the firewall CPU
for `calibrate_s` with no traffic, the engine offers `rate_pps` for the trial's
duration while the soaker counts what it is left, and the idle rate is measured
again. Their mean is the trial's reference; when they differ by more than
`max_drift`, something else took the CPU (another tenant, the hypervisor) and the
trial is measured again, up to `redo` times, every disturbed attempt kept. The eBPF backends' programs are
also timed by the kernel itself (BPF run-time statistics: run time and runs of the
program attached to the firewall's ingress), which excludes everything but the
program. A cell that loses more than `max_loss` is marked over capacity: its figure
is then the cost at saturation, not at the offered load.
"""
from __future__ import annotations

from fwbench import bpf
from fwbench.methods.base import Method, Reload
from fwbench.experiments.sweep import CpuCostSettings
from fwbench.soaker import Soaker, busy_ns
from fwbench.testbed.base import Testbed
from fwbench.traffic.native import EngineTraffic

# What the record says about the instrument, once per trial.
SOAKER_NOTE = ("firewall CPU busy time = window - soaker rounds / idle rate (SCHED_IDLE "
               "soaker pinned there; the CPU never halts while it runs)")


class CpuCost(Method):
    name = "cpucost"
    remeasure = False      # its soaker takes the firewall's CPU on purpose: it judges
                           # a disturbance by the idle rate itself

    @classmethod
    def for_scenario(cls, sc, engine, ping) -> "CpuCost":
        return cls(engine, sc.cpucost)

    def __init__(self, traffic: EngineTraffic, settings: CpuCostSettings):
        super().__init__(traffic)
        self.settings = settings
        self.soaker: Soaker | None = None

    def prepare(self, tb: Testbed) -> None:
        super().prepare(tb)
        if self.soaker is None:
            # On the firewall's machine, which also counts its BPF programs' run time
            # while the soaker runs.
            self.soaker = Soaker(tb.topo.settings.firewall_cpu, tb,
                                 tb.topo.fw_client_side.host, bpf_stats=True)

    def close(self) -> None:
        if self.soaker is not None:
            self.soaker.close()
        self.soaker = None

    def _programs(self, tb: Testbed) -> dict[str, int]:
        """The BPF programs on the firewall's ingress: the backend's, never the
        instrument's (which puts none there)."""
        t = tb.topo
        return bpf.attached(tb.executor, t.fw_client_side.host, t.fw_client_side.ifname)

    def _prog_stats(self, tb: Testbed, progs: dict[str, int]) -> dict[str, dict]:
        return {hook: bpf.run_stats(tb.executor, tb.topo.fw_client_side.host, pid)
                for hook, pid in progs.items()}

    def run(self, tb: Testbed, frame_size: int, duration_s: float, *,
            rules: int | None = None, reload: Reload | None = None) -> dict:
        """One measurement, again while the soaker's idle rates around it disagree by
        more than `max_drift` (at most `redo` times); the disturbed ones go to the
        record's sub-trials, the last one is the trial's figure."""
        if self.soaker is None:
            self.prepare(tb)
        m = self.measurer(tb, frame_size)
        progs = self._programs(tb)
        disturbed = []
        for _ in range(self.settings.redo + 1):
            out = self._once(tb, m, duration_s, progs)
            if not out["disturbed"]:
                break
            disturbed.append(out)
            if self.on_step is not None:
                self.on_step(f"disturbed: the idle rate moved {out['drift']:.1%}, "
                             f"measuring again")
        if disturbed:
            out["trials"] = disturbed
        return out

    def _once(self, tb: Testbed, m, duration_s: float, progs: dict[str, int]) -> dict:
        st, soaker = self.settings, self.soaker
        assert soaker is not None
        idle_before = soaker.idle_rate(st.calibrate_s)
        before = self._prog_stats(tb, progs)
        a = soaker.read()
        r = m.measure(duration_s, st.rate_pps)
        b = soaker.read()
        after = self._prog_stats(tb, progs)
        idle_after = soaker.idle_rate(st.calibrate_s)
        idle = (idle_before + idle_after) / 2
        drift = abs(idle_after - idle_before) / idle
        busy = busy_ns(a, b, idle)
        window = b.t_ns - a.t_ns
        out = {
            "offered_pps": st.rate_pps, "achieved_pps": r.achieved_pps,
            "processed_pps": r.forwarded_pps, "loss_ratio": r.loss_ratio,
            "sender_short": r.sender_short, "accounting": r.extra.get("accounting"),
            "over_capacity": r.loss_ratio > st.max_loss,
            "fw_busy_ns_per_pkt": busy / r.received if r.received else None,
            "fw_busy_fraction": busy / window,
            "drift": drift, "disturbed": drift > st.max_drift,
            "soaker": {"cpu": soaker.cpu, "idle_rounds_per_s": idle,
                       "idle_before": idle_before, "idle_after": idle_after,
                       "window_ns": window, "rounds": b.rounds - a.rounds,
                       "calibrate_s": st.calibrate_s, "note": SOAKER_NOTE},
            "cpu": r.cpu,
            "p50_us": (r.latency_us or {}).get("p50"),
        }
        if progs:
            runs = {h: {k: after[h][k] - before[h][k] for k in after[h]} for h in progs}
            out["bpf"] = {h: {**v, "ns_per_run": v["run_time_ns"] / v["run_cnt"]
                              if v["run_cnt"] else None} for h, v in runs.items()}
            out["bpf_ns_per_pkt"] = sum(v["run_time_ns"] for v in runs.values()) / \
                r.received if r.received else None
        return out

    def line(self, m: dict) -> str:
        cost = m["fw_busy_ns_per_pkt"]
        s = (f"{'n/a' if cost is None else f'{cost:,.0f}'} ns/packet of firewall CPU at "
             f"{m['offered_pps']:,.0f} pps ({m['fw_busy_fraction']:.0%} busy)")
        if m.get("bpf_ns_per_pkt") is not None:
            s += f", program {m['bpf_ns_per_pkt']:,.0f} ns"
        if m["over_capacity"]:
            s += f"; over capacity, loss {m['loss_ratio']:.2%}"
        if m["disturbed"]:
            s += f"; disturbed (idle rate moved {m['drift']:.1%})"
        elif m.get("trials"):
            s += f"; after {len(m['trials'])} disturbed"
        return s
