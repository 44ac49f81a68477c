"""What the testbed is, apart from how it is built.

Three hosts in a line, client -- firewall -- server, two point-to-point links, the
benchmarking ranges only: IPv4 198.18.0.0/24 on the client side and 198.19.0.0/24 on
the server side (RFC 2544 puts the two sides of a device under test in 198.18/15),
IPv6 2001:2:0:1::/64 and 2001:2:0:2::/64 (RFC 5180). MAC addresses are fixed and
locally administered, so static neighbour entries are known before anything is built.
Every namespace and interface name carries the run's suffix.
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

NETNS_PREFIX = "fwb-"
# fwb-<6 hex>-<role>; `fwbench clean` removes only names of this exact shape.
NETNS_RE = re.compile(r"^fwb-[0-9a-f]{6}-(client|fw|server)$")


class TestbedSettings(BaseModel):
    """The knobs that change where the packet cost lands (a scenario's [testbed]);
    all recorded with each run."""
    __test__ = False  # not a pytest class, despite the name
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    provider: Literal["netns"] = "netns"
    mtu: Annotated[int, Field(ge=1280, le=9000)] = 1500
    offloads: bool = Field(False, description="GRO/GSO/TSO on the test interfaces")
    sender_cpu: Annotated[int, Field(ge=0)] = Field(
        0, description="the traffic generator is pinned here")
    firewall_cpu: Annotated[int, Field(ge=0)] = Field(
        1, description="RPS steers the firewall's ingress here")
    server_cpu: Annotated[int, Field(ge=0)] = Field(
        0, description="the server's user-space receivers run here")


@dataclass(frozen=True)
class Port:
    """One end of a link: an interface in a host's namespace."""
    host: str
    ifname: str
    mac: str
    ip4: str
    ip6: str
    prefix4: int = 24
    prefix6: int = 64


@dataclass(frozen=True)
class Topology:
    run_id: str
    settings: TestbedSettings = field(default_factory=TestbedSettings)
    # How an experiment wires the testbed, not a user's knob. False: no RPS on the
    # firewall's ingress; veth then hands each packet to the sending CPU's backlog,
    # processed in the sender's own softirq, so sender and firewall share one CPU
    # (the drop-position experiment's single-core model).
    firewall_rps: bool = True
    # RPS steers the server's ingress to server_cpu too: right for a user-space
    # receiver (iperf3), needless for the XDP sink, which counts in the firewall's
    # softirq; the extra hop would add an inter-CPU wake-up to every ping.
    server_rps: bool = True

    @staticmethod
    def new(settings: TestbedSettings | None = None, *, firewall_rps: bool = True,
            server_rps: bool = True) -> "Topology":
        return Topology(secrets.token_hex(3), settings or TestbedSettings(),
                        firewall_rps, server_rps)

    def record(self) -> dict:
        """The settings as a run records them, the wiring included."""
        return {**self.settings.model_dump(), "firewall_rps": self.firewall_rps,
                "server_rps": self.server_rps}

    def netns(self, role: str) -> str:
        return f"{NETNS_PREFIX}{self.run_id}-{role}"

    @property
    def roles(self) -> tuple[str, ...]:
        return ("client", "fw", "server")

    def _ifname(self, tag: str) -> str:
        return f"fwb{self.run_id}-{tag}"   # 12 characters, within IFNAMSIZ

    @property
    def client(self) -> Port:
        return Port("client", self._ifname("c0"), "02:fb:00:00:01:02",
                    "198.18.0.2", "2001:2:0:1::2")

    @property
    def fw_client_side(self) -> Port:
        return Port("fw", self._ifname("f0"), "02:fb:00:00:01:01",
                    "198.18.0.1", "2001:2:0:1::1")

    @property
    def fw_server_side(self) -> Port:
        return Port("fw", self._ifname("f1"), "02:fb:00:00:02:01",
                    "198.19.0.1", "2001:2:0:2::1")

    @property
    def server(self) -> Port:
        return Port("server", self._ifname("s0"), "02:fb:00:00:02:02",
                    "198.19.0.2", "2001:2:0:2::2")

    @property
    def links(self) -> tuple[tuple[Port, Port], ...]:
        return ((self.client, self.fw_client_side), (self.fw_server_side, self.server))

    def neighbours(self) -> list[tuple[Port, Port]]:
        """(port, peer) pairs: on `port`, a static neighbour entry for `peer`."""
        out = []
        for a, b in self.links:
            out += [(a, b), (b, a)]
        return out

    @property
    def gateways(self) -> dict[str, Port]:
        """Each end host routes everything through its firewall-side neighbour."""
        return {"client": self.fw_client_side, "server": self.fw_server_side}
