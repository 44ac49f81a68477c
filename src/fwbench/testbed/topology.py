"""What the testbed is, apart from how it is built: a graph of hosts, the links
between their ports, and each host's routes, described declaratively; a provider
(testbed/netns.py) builds any such graph.

`Topology.line` is today's instance: client -- firewall -- server, two point-to-point
links. `Topology.many_clients` puts further clients behind the same firewall, either
as further addresses on the client's port or as further hosts each linked to the
firewall. Every address and MAC comes from fwbench.addresses; every namespace and
interface name carries the run's suffix.
"""
from __future__ import annotations

import ipaddress
import re
import secrets
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fwbench import addresses as ad
from fwbench.errors import FwbenchError

NETNS_PREFIX = "fwb-"
# fwb-<6 hex>-<role>; `fwbench clean` removes only names of this exact shape, and a
# topology refuses any role that would give another shape.
NETNS_RE = re.compile(r"^fwb-[0-9a-f]{6}-[a-z][a-z0-9]{0,15}$")
_IFNAMSIZ = 15   # the kernel's limit, without the terminating NUL


class TestbedSettings(BaseModel):
    """The knobs that change where the packet cost lands (a scenario's [testbed]);
    all recorded with each run."""
    __test__ = False  # not a pytest class, despite the name
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    provider: Literal["netns", "ssh"] = Field(
        "netns", description="netns: namespaces on this machine; ssh: the hosts of "
        "`inventory` (fwbench run --inventory FILE sets both)")
    inventory: str | None = Field(None, description="the ssh provider's inventory file")
    mtu: Annotated[int, Field(ge=1280, le=9000)] = 1500
    offloads: bool = Field(False, description="GRO/GSO/TSO on the test interfaces")
    ingress_gro: bool = Field(
        False, description="GRO on the firewall's interfaces facing the clients, whatever "
        "`offloads` says: it puts veth's receive path in NAPI mode, which the XDP sender "
        "needs (veth takes XDP frames only into a peer with NAPI or an XDP program)")
    latency: Literal["auto", "one-way", "round-trip"] = Field(
        "auto", description="how the engine times packets: one-way (the sender's stamp "
        "to the server's arrival; needs client and server on one clock), round-trip "
        "(the server's sink sends a sample of the packets back and the client times "
        "them against the sender's own schedule); auto: one-way on one clock, "
        "round-trip across machines")
    sender_cpu: Annotated[int, Field(ge=0)] = Field(
        0, description="the traffic generator is pinned here")
    firewall_cpu: Annotated[int, Field(ge=0)] = Field(
        1, description="RPS steers the firewall's ingress here")
    server_cpu: Annotated[int, Field(ge=0)] = Field(
        0, description="the server's user-space receivers run here")

    @model_validator(mode="after")
    def _inventory_for_ssh(self):
        if self.provider == "ssh" and not self.inventory:
            raise ValueError("provider ssh needs an inventory (fwbench run --inventory FILE)")
        if self.provider == "netns" and self.inventory:
            raise ValueError("an inventory is for provider ssh")
        return self


Kind = Literal["client", "firewall", "server"]


@dataclass(frozen=True)
class Host:
    """One machine of the testbed (a namespace in the netns provider).

    `kind` says what it does: a client sends, the firewall forwards (the provider
    turns forwarding on there), a server receives. `cpu` is where its work is meant
    to run: a client's sender, the firewall's ingress (RPS), a server's receivers."""
    role: str
    kind: Kind
    cpu: int | None = None


@dataclass(frozen=True)
class Port:
    """One end of a link: an interface in a host's namespace, with its primary
    addresses (prefix lengths give the link's subnet) and any further addresses,
    each on its own (/32, /128)."""
    host: str
    ifname: str
    mac: str
    ip4: str
    ip6: str
    prefix4: int = 24
    prefix6: int = 64
    extra4: tuple[str, ...] = ()
    extra6: tuple[str, ...] = ()

    def addresses(self) -> tuple[str, ...]:
        """Every address of the port with its prefix length, as `ip addr add` takes it."""
        return ((f"{self.ip4}/{self.prefix4}", f"{self.ip6}/{self.prefix6}")
                + tuple(f"{a}/32" for a in self.extra4)
                + tuple(f"{a}/128" for a in self.extra6))


class Link(NamedTuple):
    """A point-to-point link (a veth pair in the netns provider)."""
    a: Port
    b: Port


@dataclass(frozen=True)
class Route:
    """On `host`, the network `dst` is reached through the neighbour at `via`; or,
    `local`, the host holds every address of `dst` itself (a `local` route: one
    namespace answers a whole prefix without an address each)."""
    host: str
    dst: str
    via: str = ""
    local: bool = False

    @property
    def version(self) -> int:
        return ipaddress.ip_network(self.dst).version


@dataclass(frozen=True)
class Topology:
    """Hosts, links and routes, plus how an experiment wires them (the RPS flags) and
    the user's testbed settings. Checked when made: a bad graph is a FwbenchError."""
    run_id: str
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    routes: tuple[Route, ...] = ()
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
    # Recorded when it is not the line: which instance this is, as (key, value) pairs.
    shape: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        _validate(self)

    # --- instances ---------------------------------------------------------------

    @staticmethod
    def line(settings: TestbedSettings | None = None, *, firewall_rps: bool = True,
             server_rps: bool = True) -> "Topology":
        """Client -- firewall -- server, the instance every experiment so far uses."""
        return _line(secrets.token_hex(3), settings or TestbedSettings(), firewall_rps,
                     server_rps)

    new = line   # the name callers know

    @staticmethod
    def many_clients(n: int, *, hosts: bool, settings: TestbedSettings | None = None,
                     firewall_rps: bool = True, server_rps: bool = True) -> "Topology":
        """The line with `n` clients in all: the line's client and n-1 further ones
        (fwbench.addresses.client_addresses). `hosts` False: the further clients are
        addresses on the client's port; True: hosts `client1` ... each with a link of
        its own to the firewall. Either way they hold the same addresses."""
        if n < 1:
            raise FwbenchError(f"client count must be at least 1, got {n}")
        base = _line(secrets.token_hex(3), settings or TestbedSettings(), firewall_rps,
                     server_rps)
        return _more_clients(base, n - 1, hosts) if n > 1 else base

    # --- what callers ask --------------------------------------------------------

    def record(self) -> dict:
        """The settings as a run records them, the wiring included."""
        return {**self.settings.model_dump(), "firewall_rps": self.firewall_rps,
                "server_rps": self.server_rps,
                **({"topology": dict(self.shape)} if self.shape else {})}

    def netns(self, role: str) -> str:
        return f"{NETNS_PREFIX}{self.run_id}-{role}"

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(h.role for h in self.hosts)

    def host(self, role: str) -> Host:
        for h in self.hosts:
            if h.role == role:
                return h
        raise FwbenchError(f"this topology has no host {role!r}")

    @property
    def ports(self) -> tuple[Port, ...]:
        return tuple(p for link in self.links for p in link)

    def ports_of(self, role: str) -> tuple[Port, ...]:
        return tuple(p for p in self.ports if p.host == role)

    def peer(self, port: Port) -> Port:
        """The other end of port's link."""
        for a, b in self.links:
            if port == a:
                return b
            if port == b:
                return a
        raise FwbenchError(f"port {port.ifname} is on no link")

    def _facing(self, role: str, other: str) -> Port:
        """role's port on its link with `other`."""
        for a, b in self.links:
            if (a.host, b.host) == (role, other):
                return a
            if (b.host, a.host) == (role, other):
                return b
        raise FwbenchError(f"this topology has no link between {role!r} and {other!r}")

    @property
    def client(self) -> Port:
        return self._facing("client", "fw")

    @property
    def fw_client_side(self) -> Port:
        return self._facing("fw", "client")

    @property
    def fw_server_side(self) -> Port:
        return self._facing("fw", "server")

    @property
    def server(self) -> Port:
        return self._facing("server", "fw")

    def neighbours(self) -> list[tuple[Port, Port]]:
        """(port, peer) pairs: on `port`, a static neighbour entry for `peer`."""
        out = []
        for a, b in self.links:
            out += [(a, b), (b, a)]
        return out

    def routes_of(self, role: str) -> tuple[Route, ...]:
        return tuple(r for r in self.routes if r.host == role)

    def serving(self, prefixes: tuple[str, ...]) -> "Topology":
        """This topology with the server holding `prefixes` (a rule set's
        RuleSet.served: where its DNAT sends packets) and the firewall routing
        them to it."""
        if not prefixes:
            return self
        server = self.server
        extra = []
        for p in prefixes:
            v = ipaddress.ip_network(p).version
            extra += [Route("fw", p, server.ip4 if v == 4 else server.ip6),
                      Route("server", p, local=True)]
        return replace(self, routes=self.routes + tuple(r for r in extra
                                                        if r not in self.routes))



# --- the instances ----------------------------------------------------------------------

def _ifname(run_id: str, tag: str) -> str:
    return f"fwb{run_id}-{tag}"   # 12 characters with a 2-character tag


def _line(run_id: str, s: TestbedSettings, firewall_rps: bool, server_rps: bool
          ) -> Topology:
    client = Port("client", _ifname(run_id, "c0"), ad.CLIENT_MAC, ad.CLIENT[4], ad.CLIENT[6],
                  ad.CLIENT_LINK[4].prefixlen, ad.CLIENT_LINK[6].prefixlen)
    fw_c = Port("fw", _ifname(run_id, "f0"), ad.FW_CLIENT_SIDE_MAC, ad.FW_CLIENT_SIDE[4],
                ad.FW_CLIENT_SIDE[6], ad.CLIENT_LINK[4].prefixlen, ad.CLIENT_LINK[6].prefixlen)
    fw_s = Port("fw", _ifname(run_id, "f1"), ad.FW_SERVER_SIDE_MAC, ad.FW_SERVER_SIDE[4],
                ad.FW_SERVER_SIDE[6], ad.SERVER_LINK[4].prefixlen, ad.SERVER_LINK[6].prefixlen)
    server = Port("server", _ifname(run_id, "s0"), ad.SERVER_MAC, ad.SERVER[4], ad.SERVER[6],
                  ad.SERVER_LINK[4].prefixlen, ad.SERVER_LINK[6].prefixlen)
    # Each end host routes the other side through the firewall, nothing else.
    routes = tuple(Route("client", str(ad.SERVER_SIDE[v]), ad.FW_CLIENT_SIDE[v])
                   for v in (4, 6)) \
        + tuple(Route("server", str(ad.CLIENT_SIDE[v]), ad.FW_SERVER_SIDE[v]) for v in (4, 6))
    hosts = (Host("client", "client", s.sender_cpu), Host("fw", "firewall", s.firewall_cpu),
             Host("server", "server", s.server_cpu))
    return Topology(run_id, hosts,
                    (Link(client, fw_c), Link(fw_s, server)), routes, s, firewall_rps,
                    server_rps)


def _more_clients(t: Topology, extra: int, hosts: bool) -> Topology:
    """The line `t` with `extra` further clients (see Topology.many_clients)."""
    pool = {v: str(ad.CLIENT_POOL[v]) for v in (4, 6)}
    shape = (("clients", extra + 1), ("further_clients_as", "hosts" if hosts else "addresses"))
    # The server routes the further clients' IPv6 pool too (its IPv4 pool lies in
    # the client side the server already routes).
    to_pool = [Route("server", pool[6], ad.FW_SERVER_SIDE[6])]
    if not hosts:
        c = t.client
        c2 = Port(c.host, c.ifname, c.mac, c.ip4, c.ip6, c.prefix4, c.prefix6,
                  ad.client_addresses(extra, 4), ad.client_addresses(extra, 6))
        links = (Link(c2, t.links[0].b),) + t.links[1:]
        routes = t.routes + tuple(Route("fw", pool[v], ad.CLIENT[v]) for v in (4, 6)) \
            + tuple(to_pool)
        return Topology(t.run_id, t.hosts, links, routes, t.settings, t.firewall_rps,
                        t.server_rps, shape)
    new_hosts, new_links, new_routes = [], [], []
    for i in range(extra):
        role = f"client{i + 1}"
        l4, l6 = ad.client_link(i, 4), ad.client_link(i, 6)
        # Tags c<i> and e<i>: at most 5 characters, so names stay within IFNAMSIZ.
        cp = Port(role, _ifname(t.run_id, f"c{i + 1}"), l4.client_mac, l4.client, l6.client,
                  l4.network.prefixlen, l6.network.prefixlen)
        fp = Port("fw", _ifname(t.run_id, f"e{i + 1}"), l4.fw_mac, l4.fw, l6.fw,
                  l4.network.prefixlen, l6.network.prefixlen)
        new_hosts.append(Host(role, "client", t.settings.sender_cpu))
        new_links.append(Link(cp, fp))
        new_routes += [Route(role, str(ad.SERVER_SIDE[4]), l4.fw),
                       Route(role, str(ad.SERVER_SIDE[6]), l6.fw)]
    return Topology(t.run_id, t.hosts + tuple(new_hosts), t.links + tuple(new_links),
                    t.routes + tuple(new_routes) + tuple(to_pool), t.settings,
                    t.firewall_rps, t.server_rps, shape)


# --- checks -----------------------------------------------------------------------------

def _neighbours_by_address(t: Topology) -> dict[str, dict[str, Port]]:
    """host -> {a neighbour's primary address: that neighbour's port}."""
    out: dict[str, dict[str, Port]] = {}
    for a, b in t.links:
        for port, peer in ((a, b), (b, a)):
            near = out.setdefault(port.host, {})
            near[peer.ip4] = near[peer.ip6] = peer
    return out


def _gateway(near: dict[str, dict[str, Port]], r: Route) -> Port:
    gw = near.get(r.host, {}).get(r.via)
    if gw is None:
        raise FwbenchError(f"topology: route to {r.dst} on {r.host}: no neighbour "
                           f"holds {r.via}")
    return gw


def _validate(t: Topology) -> None:
    """Refuse a graph the provider could not build or that would leave the ranges."""
    roles = [h.role for h in t.hosts]
    if not roles:
        raise FwbenchError("topology: no hosts")
    dup = [r for r, k in Counter(roles).items() if k > 1]
    if dup:
        raise FwbenchError(f"topology: host {dup[0]!r} twice")
    for h in t.hosts:
        if not NETNS_RE.match(t.netns(h.role)):
            raise FwbenchError(f"topology: role {h.role!r} is not a lower-case name "
                               f"of at most 16 letters and digits")
        if h.kind not in ("client", "firewall", "server"):
            raise FwbenchError(f"topology: host {h.role!r} has unknown kind {h.kind!r}")
    ports = [p for link in t.links for p in link]
    for p in ports:
        if p.host not in roles:
            raise FwbenchError(f"topology: a link ends at {p.host!r}, which is no host")
        if not 0 < len(p.ifname) <= _IFNAMSIZ:
            raise FwbenchError(f"topology: interface name {p.ifname!r} is longer than "
                               f"{_IFNAMSIZ} characters")
    for what, values in (("interface", [f"{p.host}:{p.ifname}" for p in ports]),
                         ("port", ports),
                         ("MAC address", [p.mac.lower() for p in ports]),
                         ("address", [str(ipaddress.ip_interface(a).ip)
                                      for p in ports for a in p.addresses()])):
        dup = [v for v, k in Counter(values).items() if k > 1]
        if dup:
            name = dup[0].ifname if isinstance(dup[0], Port) else dup[0]
            raise FwbenchError(f"topology: {what} {name} is used twice")
    for p in ports:
        for a in p.addresses():
            if not ad.within_bench(a):
                raise FwbenchError(f"topology: {a} on {p.ifname} is outside "
                                   f"{ad.BENCH[4]} and {ad.BENCH[6]}")
    for a, b in t.links:
        for x, y in ((f"{a.ip4}/{a.prefix4}", f"{b.ip4}/{b.prefix4}"),
                     (f"{a.ip6}/{a.prefix6}", f"{b.ip6}/{b.prefix6}")):
            if ipaddress.ip_interface(x).network != ipaddress.ip_interface(y).network:
                raise FwbenchError(f"topology: the link {a.ifname} -- {b.ifname} joins "
                                   f"{x} and {y}, which share no subnet")
    near = _neighbours_by_address(t)
    for r in t.routes:
        if r.host not in roles:
            raise FwbenchError(f"topology: a route on {r.host!r}, which is no host")
        try:
            dst = ipaddress.ip_network(r.dst)
            via = dst.network_address if r.local else ipaddress.ip_address(r.via)
        except ValueError as e:
            raise FwbenchError(f"topology: route on {r.host}: {e}") from None
        if r.local:
            if r.via or not ad.within_bench(r.dst):
                raise FwbenchError(f"topology: local route to {r.dst} on {r.host} has a "
                                   f"gateway or leaves the benchmarking ranges")
            continue
        if dst.version != via.version or not ad.within_bench(r.dst):
            raise FwbenchError(f"topology: route to {r.dst} via {r.via} on {r.host} "
                               f"leaves the benchmarking ranges or mixes versions")
        _gateway(near, r)
