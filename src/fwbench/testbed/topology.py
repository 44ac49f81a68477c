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
from dataclasses import asdict, dataclass, field

NETNS_PREFIX = "fwb-"
# fwb-<6 hex>-<role>; `fwbench clean` removes only names of this exact shape.
NETNS_RE = re.compile(r"^fwb-[0-9a-f]{6}-(client|fw|server)$")


@dataclass(frozen=True)
class TestbedSettings:
    """Knobs that change where the packet cost lands; all recorded with each run."""
    __test__ = False  # not a pytest class, despite the name
    mtu: int = 1500
    offloads: bool = False      # GRO/GSO/TSO on the test interfaces
    sender_cpu: int = 0         # the traffic generator is pinned here
    firewall_cpu: int = 1       # RPS steers the firewall's ingress here
    server_cpu: int = 0         # the server's user-space receivers run here
    # False: no RPS on the firewall's ingress. veth then hands each packet to the
    # sending CPU's backlog, processed in the sender's own softirq: sender and
    # firewall share one CPU (the drop-position experiment's single-core model).
    firewall_rps: bool = True
    # RPS steers the server's ingress to server_cpu too: right for a user-space
    # receiver (iperf3), needless for the XDP sink, which counts in the firewall's
    # softirq; the extra hop would add an inter-CPU wake-up to every ping.
    server_rps: bool = True

    def as_dict(self) -> dict:
        return asdict(self)


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

    @staticmethod
    def new(settings: TestbedSettings | None = None) -> "Topology":
        return Topology(secrets.token_hex(3), settings or TestbedSettings())

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
