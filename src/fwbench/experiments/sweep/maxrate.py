"""`maxrate`: what the foundation measures, as seed 000 did: the packet rate through
the firewall with the sender at full throttle, then the idle ICMP round-trip time.

The rate instrument is the engine (open throttle, counted by the XDP sink) or, for
seed-faithful runs, iperf3 (`-u -b 0`). The two phases run one after the other, not
together: seed 000 ran ping beside iperf3, which measures queueing in the saturated
path more than the rule set.

At full throttle the firewall's CPU is all softirq, so any task that runs there, or
a hypervisor that steals a CPU, lowers the rate measured (cpu.drift_index). Such a
disturbed measurement is taken again, up to REDO times; every disturbed one is kept
in the record's sub-trials, never hidden.
"""
from __future__ import annotations

from fwbench import cpu
from fwbench.methods.base import Method
from fwbench.testbed.base import Testbed
from fwbench.traffic import RateInstrument, RttInstrument


REDO = 2


class MaxRate(Method):
    """Its rate instrument is the method's `engine` (the engine, or iperf3); it
    takes disturbed measurements again itself, keeping each in the sub-trials."""
    name = "maxrate"

    def __init__(self, rate: RateInstrument, rtt: RttInstrument):
        super().__init__(rate)
        self.rate = rate
        self.rtt = rtt

    @classmethod
    def for_scenario(cls, sc, engine, ping) -> "MaxRate":
        return cls(engine, ping)

    @property
    def traffic(self) -> str:
        return f"{self.rate.name}+{self.rtt.name}"

    def versions(self) -> dict[str, str | None]:
        return {**self.rate.versions(), **self.rtt.versions()}

    def prepare(self, tb: Testbed) -> None:
        self.rate.start(tb)

    def restart(self, tb: Testbed) -> None:
        self.rate.restart(tb)

    def run(self, tb: Testbed, frame_size: int, duration_s: float, **_) -> dict:
        disturbed = []
        for _ in range(REDO + 1):
            got = self.rate.measure(tb, frame_size, duration_s)
            why = cpu.disturbed(got.get("cpu"))
            if why is None:
                break
            disturbed.append({**got, "disturbed": why})
        out = {**got, **self.rtt.measure(tb, frame_size)}
        if why is not None:
            out["disturbed"] = why
        if disturbed:
            out["trials"] = [{"offered_pps": t["tx_pps"], "loss_ratio": t["loss_ratio"],
                              **t} for t in disturbed]
        return out

    def line(self, m: dict) -> str:
        if "rtt_us_median" not in m:
            s = f"{m['rx_pps']:,.0f} pps, no RTT ({m.get('rtt_skipped', 'not measured')})"
        else:
            s = f"{m['rx_pps']:,.0f} pps, RTT median {m['rtt_us_median']:.0f} us"
        if m.get("disturbed"):
            s += f"; disturbed: {m['disturbed']}"
        elif m.get("trials"):
            s += f"; measured again after {len(m['trials'])} disturbed"
        return s
