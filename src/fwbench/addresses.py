"""Every address fwbench gives out, in one place: the testbed's links and hosts, its
MAC addresses, the further clients of a many-clients topology, and the addresses the
rule-set templates use as fillers.

Only the benchmarking ranges: IPv4 198.18.0.0/15 (RFC 2544 puts the two sides of a
device under test in it) and IPv6 2001:2::/48 (RFC 5180). The map, IPv4 and IPv6:

    198.18.0.0/24     2001:2:0:1::/64   the client link: firewall .1 (::1), client .2
    198.19.0.0/24     2001:2:0:2::/64   the server link: firewall .1 (::1), server .2
    198.18.0.0/16     2001:2:0:1::/64   the client side: what the server routes via
                                        the firewall (198.19.0.0/16 ... the server side)
    198.18.16.0 -     2001:2:0:10::/64  spare: held by nobody, the templates' filler
      198.18.127.255                    addresses (seed 004's sources)
    198.18.128.0/17   2001:2:0:80::/64  further clients, one /30 (/126) each: the
                                        client at .2 of it, the firewall at .1 when
                                        the client has a link of its own
    198.19.64.0/18                      the kube-proxy template's pods (POD_CIDR): the
                                        server holds the whole prefix as local, the
                                        firewall routes it to the server
    198.19.128.0/17                     the kube-proxy template's cluster IPs, from
                                        .128.1, at most 32,000 (clear of .254.0/23);
                                        nobody holds them: DNAT makes them reachable
    198.19.255.0/24   2001:2:0:ff::/64  seed 000's filler destinations past 25,536
    198.19.254.0/24                     held by nobody here: the lab test's IPv4
                                        session to the firewall (the lab itself
                                        manages its hosts over link-local IPv6)

The drop-position experiment's set fillers (`filler_addresses`) are every IPv4
address outside the two links, in order from 198.18.1.0: past 3,840 of them they run
into the spare addresses and past 32,512 into the further clients', which is why
that experiment runs on the line only.

Pure: nothing here imports from the rest of fwbench but its errors, so the rule-set
modules and the testbed can both take their addresses from here.
"""
from __future__ import annotations

import functools
import ipaddress
from typing import NamedTuple

from fwbench.errors import FwbenchError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

BENCH: dict[int, Network] = {4: ipaddress.ip_network("198.18.0.0/15"),
                             6: ipaddress.ip_network("2001:2::/48")}
CLIENT_LINK: dict[int, Network] = {4: ipaddress.ip_network("198.18.0.0/24"),
                                   6: ipaddress.ip_network("2001:2:0:1::/64")}
SERVER_LINK: dict[int, Network] = {4: ipaddress.ip_network("198.19.0.0/24"),
                                   6: ipaddress.ip_network("2001:2:0:2::/64")}
LINKS: dict[int, tuple[Network, Network]] = {v: (CLIENT_LINK[v], SERVER_LINK[v])
                                             for v in (4, 6)}
# What each end host routes through the firewall: the other side.
CLIENT_SIDE: dict[int, Network] = {4: ipaddress.ip_network("198.18.0.0/16"),
                                   6: CLIENT_LINK[6]}
SERVER_SIDE: dict[int, Network] = {4: ipaddress.ip_network("198.19.0.0/16"),
                                   6: SERVER_LINK[6]}

# The hosts' addresses on the two links, as text (as rule sets and tools take them).
FW_CLIENT_SIDE = {4: "198.18.0.1", 6: "2001:2:0:1::1"}
CLIENT = {4: "198.18.0.2", 6: "2001:2:0:1::2"}
FW_SERVER_SIDE = {4: "198.19.0.1", 6: "2001:2:0:2::1"}
SERVER = {4: "198.19.0.2", 6: "2001:2:0:2::2"}
# On the client's link but nobody's (seed 001's probe of a source no rule allows).
STRANGER = {4: "198.18.0.3", 6: "2001:2:0:1::3"}
# On the server's link but nobody's: seed 004's port-forwarded service, which only
# DNAT to the server makes reachable.
SERVICE4 = "198.19.0.100"

# Link numbers of the line; further clients' links are numbered after them.
CLIENT_LINK_NO, SERVER_LINK_NO = 1, 2
_CLIENT_LINKS_FROM = 3


def mac(link: int, end: int) -> str:
    """The MAC address of end 1 (the firewall's) or 2 (the other) of link `link`:
    locally administered and fixed, so static neighbour entries are known before
    anything is built."""
    if not 0 < link < 1 << 24 or end not in (1, 2):
        raise FwbenchError(f"no MAC address for end {end} of link {link}")
    return "02:fb:" + ":".join(f"{b:02x}" for b in (link >> 16 & 0xFF, link >> 8 & 0xFF,
                                                      link & 0xFF, end))


FW_CLIENT_SIDE_MAC, CLIENT_MAC = mac(CLIENT_LINK_NO, 1), mac(CLIENT_LINK_NO, 2)
FW_SERVER_SIDE_MAC, SERVER_MAC = mac(SERVER_LINK_NO, 1), mac(SERVER_LINK_NO, 2)

# kube-proxy's address plan on the server side: the pods, held by the server (their
# packets, DNATed there, must reach it), and the services' cluster IPs, which only
# DNAT turns into a pod's. Both IPv4 only: the template is kube-proxy's `ip` table.
KUBE_PODS = ipaddress.ip_network("198.19.64.0/18")
KUBE_CLUSTER_IPS = ipaddress.ip_network("198.19.128.0/17")
MAX_KUBE_SERVICES = 32_000   # from .128.1: up to 198.19.253.0, clear of 198.19.254.0/23

# --- spare addresses: nobody holds them --------------------------------------------

_SPARE = {4: int(ipaddress.IPv4Address("198.18.16.0")),
          6: int(ipaddress.IPv6Address("2001:2:0:10::"))}
MAX_SPARE = int(ipaddress.IPv4Address("198.18.128.0")) - _SPARE[4]


def spare_address(i: int, version: int = 4) -> str:
    """The i-th (0-based) address that no host of any topology holds; templates give
    them to filler rules."""
    if not 0 <= i < MAX_SPARE:
        raise FwbenchError(f"spare address {i} out of 0..{MAX_SPARE - 1}")
    return str(ipaddress.ip_address(_SPARE[version] + i))


# --- further clients ---------------------------------------------------------------

CLIENT_POOL: dict[int, Network] = {4: ipaddress.ip_network("198.18.128.0/17"),
                                   6: ipaddress.ip_network("2001:2:0:80::/64")}
CLIENT_LINK_PREFIX = {4: 30, 6: 126}
MAX_FURTHER_CLIENTS = CLIENT_POOL[4].num_addresses // 4


class ClientLink(NamedTuple):
    """Further client i's block: its link subnet when it has a link of its own."""
    network: Network
    fw: str          # the firewall's end (when the client has its own link)
    client: str      # the client's address, the same in either shape
    fw_mac: str
    client_mac: str


def client_link(i: int, version: int = 4) -> ClientLink:
    """Further client i's (0-based) block of the client pool."""
    if not 0 <= i < MAX_FURTHER_CLIENTS:
        raise FwbenchError(f"further client {i} out of 0..{MAX_FURTHER_CLIENTS - 1}")
    base = int(CLIENT_POOL[version].network_address) + 4 * i
    net = ipaddress.ip_network((base, CLIENT_LINK_PREFIX[version]))
    link = _CLIENT_LINKS_FROM + i
    return ClientLink(net, str(ipaddress.ip_address(base + 1)),
                      str(ipaddress.ip_address(base + 2)), mac(link, 1), mac(link, 2))


def client_addresses(n: int, version: int = 4) -> tuple[str, ...]:
    """The addresses of `n` further clients (besides the testbed's CLIENT), whether
    they are n addresses on the client's port or n hosts with links of their own."""
    if not 0 <= n <= MAX_FURTHER_CLIENTS:
        raise FwbenchError(f"{n:,} further clients asked; at most {MAX_FURTHER_CLIENTS:,}")
    return tuple(client_link(i, version).client for i in range(n))


# --- fillers -----------------------------------------------------------------------

# seed 000's filler destinations once the ports of the server's address run out.
FILLER_SPILL: dict[int, Network] = {4: ipaddress.ip_network("198.19.255.0/24"),
                                    6: ipaddress.ip_network("2001:2:0:ff::/64")}
FILLER_CAPACITY = BENCH[4].num_addresses - sum(n.num_addresses for n in LINKS[4])

@functools.lru_cache(maxsize=4)
def filler_addresses(n: int) -> tuple[str, ...]:
    """The first `n` addresses of 198.18.0.0/15 outside the testbed's two links."""
    if not 0 <= n <= FILLER_CAPACITY:
        raise FwbenchError(f"{n:,} filler addresses asked; 198.18.0.0/15 has "
                           f"{FILLER_CAPACITY:,} the testbed does not use")
    skip = [(int(s.network_address), int(s.broadcast_address)) for s in LINKS[4]]
    out: list[str] = []
    a = int(BENCH[4].network_address)
    while len(out) < n:
        hole = next((hi for lo, hi in skip if lo <= a <= hi), None)
        if hole is not None:
            a = hole + 1
            continue
        out.append(str(ipaddress.IPv4Address(a)))
        a += 1
    return tuple(out)


def within_bench(addr: str) -> bool:
    """Whether an address or network lies in the benchmarking ranges."""
    net = ipaddress.ip_network(addr, strict=False)
    return net.subnet_of(BENCH[net.version])  # type: ignore[arg-type]
