"""Seed 001's rule sets (Niemann, Pfingst, Goebel 2015) as a template of the model.

The gateway inserted rules per client thread, as the F setting said:
- F = 0, plain forwarding: no rules at all. The model holds the filter table's
  FORWARD chain as iptables leaves it, policy accept and empty.
- F = 2, up- and download rules: per client `iptables -A FORWARD -s <client>
  -d <server> -p <protocol> -j ACCEPT` and the same the other way, FORWARD's
  policy drop; 2n rules.
- F = 4: F = 2 plus per client and direction `iptables -t mangle -A PREROUTING -s
  <client> -d <server> -p <protocol> -j MARK --set-mark <QoS mark>`; 4n rules.

`stateful` is fwbench's addition for the connection-rate measurement (issue 14,
beyond the seed): FORWARD first accepts packets of tracked connections (`ct state
established,related accept`, which also registers connection tracking in the
namespace), so only a connection's first packet walks the per-client rules, as in any
stateful firewall; and, last in FORWARD, it accepts the connection-table fill's UDP
flows (fwbench.statecheck.fill: from the stranger address to port FILL_PORT), so
background entries can be made without shortening any client's walk.

One model table per iptables table, named as iptables names them ("filter",
"mangle", chains "FORWARD", "PREROUTING"), mangle at its priority (-150). A client
is inserted as it connects, so its rules follow the previous client's. The
testbed's client has one address and sends the measured flow from it, so the
LAST client is the testbed's client (every measured packet traverses the rules of
all other clients first, as seed000's test entry is last); the others are
the testbed's further clients (fwbench.addresses), outside the two link subnets.
"""
from __future__ import annotations

from fwbench import addresses
from fwbench.ruleset.model import (ACCEPT, Action, Chain, Match, Packet, Ports, Prefix,
                                   Probe, Rule, RuleSet, RuleSetError, Table, validate)

SERVER4, CLIENT4 = addresses.SERVER[4], addresses.CLIENT[4]
SERVER6, CLIENT6 = addresses.SERVER[6], addresses.CLIENT[6]
# On the client's link, but nobody's: no rule allows it (strict reverse-path
# filtering would still accept it from the client side).
STRANGER4, STRANGER6 = addresses.STRANGER[4], addresses.STRANGER[6]
MAX_SPARE = addresses.MAX_SPARE
# The other clients are the testbed's further clients (addresses.client_addresses),
# so a many-clients topology holds exactly the addresses the rules name.
MAX_CLIENTS = addresses.MAX_FURTHER_CLIENTS + 1
SETTINGS_F = (0, 2, 4)
PROBE_SPORT = 40404
ESTABLISHED_ID = "established"
FILL_ID = "fill"
FILL_PORT = 5001                # fwbench.statecheck.FILL_PORT (it imports the testbed)


def spare_address(i: int, version: int = 4) -> str:
    """The i-th (0-based) address of the benchmarking range that no host of the
    testbed holds; templates give them to filler entries."""
    if not 0 <= i < MAX_SPARE:
        raise RuleSetError(f"spare address {i} out of 0..{MAX_SPARE - 1}")
    return addresses.spare_address(i, version)


def client_address(i: int, n_clients: int, version: int = 4) -> str:
    """Client i's address (1-based); client n_clients is the testbed's client, the
    others are its further clients in order."""
    if i == n_clients:
        return CLIENT4 if version == 4 else CLIENT6
    if not 1 <= i < n_clients:
        raise RuleSetError(f"client {i} out of 1..{n_clients}")
    return addresses.client_link(i - 1, version).client


def up_id(i: int) -> str:
    return f"up-{i}"


def down_id(i: int) -> str:
    return f"down-{i}"


def mark_up_id(i: int) -> str:
    return f"mark-up-{i}"


def mark_down_id(i: int) -> str:
    return f"mark-down-{i}"


def qos_mark(i: int) -> int:
    """Client i's QoS mark, both directions: one class per client (the seed does
    not say which values it used; any distinct non-zero ones will do)."""
    return i


def seed001(n_clients: int = 10, f: int = 2, *, version: int = 4, proto: str = "udp",
            test_port: int = 5201, stateful: bool = False) -> RuleSet:
    """n_clients clients under setting F (0, 2 or 4); `proto` is the protocol the
    rules allow (seed 001 ran TCP, UDP and SCTP; this kernel has no SCTP);
    `stateful` adds the connection-tracking rules of the module's docstring."""
    if f not in SETTINGS_F:
        raise RuleSetError(f"F must be 0, 2 or 4, got {f}")
    if not 1 <= n_clients <= MAX_CLIENTS:
        raise RuleSetError(f"client count must be 1..{MAX_CLIENTS}, got {n_clients}")
    if version not in (4, 6):
        raise RuleSetError(f"IP version must be 4 or 6, got {version}")
    if proto not in ("tcp", "udp"):
        raise RuleSetError(f"protocol must be tcp or udp, got {proto!r}")
    server, client = (SERVER4, CLIENT4) if version == 4 else (SERVER6, CLIENT6)
    stranger = STRANGER4 if version == 4 else STRANGER6
    family = "ip" if version == 4 else "ip6"
    clients = [client_address(i, n_clients, version) for i in range(1, n_clients + 1)]

    def up(addr: str) -> Match:
        return Match(src=Prefix.of(addr), dst=Prefix.of(server), proto=proto)

    def down(addr: str) -> Match:
        return Match(src=Prefix.of(server), dst=Prefix.of(addr), proto=proto)

    forward: list[Rule] = []
    mangle: list[Rule] = []
    if f >= 2:
        for i, addr in enumerate(clients, 1):
            forward += [Rule(up_id(i), up(addr), ACCEPT), Rule(down_id(i), down(addr), ACCEPT)]
    if f == 4:
        for i, addr in enumerate(clients, 1):
            mark = Action("mark", mark=qos_mark(i))
            mangle += [Rule(mark_up_id(i), up(addr), mark),
                       Rule(mark_down_id(i), down(addr), mark)]

    if stateful:
        est = Rule(ESTABLISHED_ID, Match(ct_state=frozenset({"established", "related"})),
                   ACCEPT)
        fill = Rule(FILL_ID, Match(src=Prefix.of(stranger), proto="udp",
                                   dport=Ports.of(FILL_PORT)), ACCEPT)
        forward = [est, *forward, fill]
    tables = []
    if mangle:
        tables.append(Table(family, "mangle", (
            Chain("PREROUTING", tuple(mangle), hook="prerouting", priority=-150,
                  type="filter", policy="accept"),)))
    tables.append(Table(family, "filter", (
        Chain("FORWARD", tuple(forward), hook="forward", priority=0, type="filter",
              policy="drop" if f >= 2 else "accept"),)))

    flow = Packet(version, "client", client, server, proto, PROBE_SPORT, test_port)
    reply = Packet(version, "server", server, client, proto, test_port, PROBE_SPORT)
    stranger_flow = Packet(version, "client", stranger, server, proto, PROBE_SPORT,
                           test_port)
    unknown_ok = f == 0
    # Under F = 4 the flow is counted by mark-up-N too; a probe names one rule, so
    # the mark rule is checked by the equivalence runs (mark set, then forwarded).
    flow_rule = up_id(n_clients) if f >= 2 else None
    probes = (
        Probe("test flow", flow, True, flow_rule),
        Probe("return path", reply, True, down_id(n_clients) if f >= 2 else None),
        Probe("unknown client", stranger_flow, unknown_ok),
    )
    name = f"seed001-f{f}" + ("-stateful" if stateful else "")
    return validate(RuleSet(name, tuple(tables), probes, flow=flow,
                            flow_rule=flow_rule, size=n_clients * f + 2 * stateful, ipt_prefix="fwb_",
                            notes=(f"F={f}: {n_clients} client(s), the last is the "
                                   f"testbed's client {client}",)))
