"""`maxrate`: what the foundation measures, as seed 000 did: the packet rate through
the firewall with the sender at full throttle, then the idle ICMP round-trip time.

The two phases run one after the other, not together: seed 000 ran ping beside
iperf3, which measures queueing in the saturated path more than the rule set.
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

    def run(self, tb: NetnsTestbed, frame_size: int, duration_s: float) -> dict:
        return {**self.rate.measure(tb, frame_size, duration_s),
                **self.rtt.measure(tb, frame_size)}
