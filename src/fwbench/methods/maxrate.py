"""`maxrate`: what the foundation measures, as seed 000 did: the packet rate through
the firewall with the sender at full throttle, then the idle ICMP round-trip time.

The rate instrument is the engine (open throttle, counted by the XDP sink) or, for
seed-faithful runs, iperf3 (`-u -b 0`). The two phases run one after the other, not
together: seed 000 ran ping beside iperf3, which measures queueing in the saturated
path more than the rule set.
"""
from __future__ import annotations

from fwbench.testbed.netns import NetnsTestbed
from fwbench.traffic import RateInstrument, RttInstrument


class MaxRate:
    name = "maxrate"

    def __init__(self, rate: RateInstrument, rtt: RttInstrument):
        self.rate = rate
        self.rtt = rtt

    @property
    def traffic(self) -> str:
        return f"{self.rate.name}+{self.rtt.name}"

    def versions(self) -> dict[str, str | None]:
        return {**self.rate.versions(), **self.rtt.versions()}

    def prepare(self, tb: NetnsTestbed) -> None:
        self.rate.start(tb)

    def restart(self, tb: NetnsTestbed) -> None:
        self.rate.restart(tb)

    def run(self, tb: NetnsTestbed, frame_size: int, duration_s: float, **_) -> dict:
        return {**self.rate.measure(tb, frame_size, duration_s),
                **self.rtt.measure(tb, frame_size)}

    def line(self, m: dict) -> str:
        if "rtt_us_median" not in m:
            return f"{m['rx_pps']:,.0f} pps, no RTT ({m.get('rtt_skipped', 'not measured')})"
        return f"{m['rx_pps']:,.0f} pps, RTT median {m['rtt_us_median']:.0f} us"
