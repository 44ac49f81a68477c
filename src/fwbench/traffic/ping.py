"""ICMP echo round-trip time through the firewall, with ping as the seed studies used
it, sent from the client (pinned to the sender CPU) to the server, no other load."""
from __future__ import annotations

import re
import statistics

from fwbench import proc
from fwbench.frames import ipv4_payload
from fwbench.testbed.base import Testbed
from fwbench.errors import MeasurementInvalid

_TIME = re.compile(r"time=([\d.]+) ms")


class PingRtt:
    """`unavailable`: why this rule set cannot be pinged through (it drops the echo
    or its reply); the trial then records the reason, not an RTT."""
    name = "ping"

    def __init__(self, count: int = 50, interval_s: float = 0.01, version: int = 4,
                 unavailable: str | None = None):
        self.count = count
        self.interval_s = interval_s
        self.version = version
        self.unavailable = unavailable

    def versions(self) -> dict[str, str | None]:
        return {"ping": proc.version_line(["ping", "-V"])}

    def measure(self, tb: Testbed, frame_size: int) -> dict:
        if self.unavailable:
            return {"rtt_skipped": self.unavailable}
        topo = tb.topo
        server = topo.server.ip4 if self.version == 4 else topo.server.ip6
        # ICMP(v6) echo payload that makes the frame `frame_size`: IPv6's header is
        # 20 bytes longer than IPv4's.
        payload = ipv4_payload(frame_size) - (0 if self.version == 4 else 20)
        argv = ["taskset", "-c", str(topo.settings.sender_cpu), "ping",
                f"-{self.version}", "-n", "-c", str(self.count), "-i", f"{self.interval_s:g}",
                "-s", str(max(payload, 0)), "-W", "1", server]
        cp = tb.run("client", argv, check=False,
                    timeout=self.count * self.interval_s + 15)
        rtts_us = sorted(float(m) * 1000 for m in _TIME.findall(cp.stdout))
        if not rtts_us:
            raise MeasurementInvalid(f"ping: no reply from {server}")
        return {
            "rtt_us_median": statistics.median(rtts_us),
            "rtt_us_mean": statistics.fmean(rtts_us),
            "rtt_us_min": rtts_us[0],
            "rtt_us_p90": rtts_us[min(len(rtts_us) - 1, int(0.9 * len(rtts_us)))],
            "rtt_us_max": rtts_us[-1],
            "ping_sent": self.count,
            "ping_received": len(rtts_us),
        }
