"""ICMP echo round-trip time through the firewall, with ping as the seed studies used
it, sent from the client (pinned to the sender CPU) to the server, no other load."""
from __future__ import annotations

import re
import statistics

from fwbench import proc
from fwbench.frames import ipv4_payload
from fwbench.testbed.netns import NetnsTestbed
from fwbench.errors import MeasurementInvalid

_TIME = re.compile(r"time=([\d.]+) ms")


class PingRtt:
    name = "ping"

    def __init__(self, count: int = 50, interval_s: float = 0.01):
        self.count = count
        self.interval_s = interval_s

    def versions(self) -> dict[str, str | None]:
        return {"ping": proc.version_line(["ping", "-V"])}

    def measure(self, tb: NetnsTestbed, frame_size: int) -> dict:
        topo = tb.topo
        argv = ["taskset", "-c", str(topo.settings.sender_cpu), "ping", "-n",
                "-c", str(self.count), "-i", f"{self.interval_s:g}",
                "-s", str(ipv4_payload(frame_size)), "-W", "1", topo.server.ip4]
        cp = tb.run("client", argv, check=False,
                    timeout=self.count * self.interval_s + 15)
        rtts_us = sorted(float(m) * 1000 for m in _TIME.findall(cp.stdout))
        if not rtts_us:
            raise MeasurementInvalid(f"ping: no reply from {topo.server.ip4}")
        return {
            "rtt_us_median": statistics.median(rtts_us),
            "rtt_us_mean": statistics.fmean(rtts_us),
            "rtt_us_min": rtts_us[0],
            "rtt_us_p90": rtts_us[min(len(rtts_us) - 1, int(0.9 * len(rtts_us)))],
            "rtt_us_max": rtts_us[-1],
            "ping_sent": self.count,
            "ping_received": len(rtts_us),
        }
