"""Seed 000's rule set (Appendices B-E) as a template of the model.

N entries: N-1 filler entries `ip daddr <server> tcp dport 40000+i accept` that the
UDP test flow never matches, then the UDP test entry last, so every measured packet
traverses all N rules of a linear chain before it is accepted. In the set layout
the N entries are the elements of one set (address . protocol . port) matched by
one rule, as seed 000's ipset and nft-set treatments held them.

The skeleton: FORWARD (policy drop) jumps by input interface to from_client, which
holds the entries and two auxiliary rules (the iperf3 control connection, ICMP
echo-request to the server), or to from_server, which accepts the return path.

`chain="input"` puts the same skeleton at the input hook, with the firewall as the
endpoint (seed 003's INPUT variant): every entry's destination, the test flow's and
the probes' are the firewall's own address on the client side, and the probes are
local (delivered to the firewall, proven by their rules' counters).

`host_traffic=True` (the INPUT variant on a real host, whose own traffic, the SSH
session fwbench drives it by included, enters on other interfaces) lets through
what comes in on neither test interface: after the two jumps, packets from
neither interface jump to `host`, which accepts them. The measured flow is
decided in from_client before it, and the disallowed probe still falls to the
policy.
"""
from __future__ import annotations

import ipaddress

from fwbench import addresses
from fwbench.ruleset.model import (ACCEPT, CLIENT, SERVER, Chain, Iface, Match, Packet,
                                   Ports, Prefix, Probe, Rule, RuleSet, RuleSetError, Set,
                                   SetRef, Table, jump, validate)

FILLER_BASE_PORT = 40000
_PORTS_PER_ADDRESS = 65536 - FILLER_BASE_PORT
# Past 25,536 fillers the ports run out; later blocks use other, unassigned
# destination addresses from the benchmarking range, one /24 of them.
_FILLER_SPILL_NET = addresses.FILLER_SPILL[4]
_FILLER_SPILL_NET6 = addresses.FILLER_SPILL[6]
MAX_ENTRIES = 1 + _PORTS_PER_ADDRESS * (1 + _FILLER_SPILL_NET.num_addresses - 2)

SERVER4, CLIENT4 = addresses.SERVER[4], addresses.CLIENT[4]
SERVER6, CLIENT6 = addresses.SERVER[6], addresses.CLIENT[6]
TABLE = "fwbench"
SET_NAME = "allowed"
# Rule ids: entries are allow-1 .. allow-N in order; in the set layout one rule,
# `allowed`, matches the set.
SET_RULE = "allowed"
CONTROL_RULE, PING_RULE = "control", "ping"
PROBE_SPORT = 40404


def entry_id(i: int) -> str:
    """The id of the i-th entry (1-based), the test entry being the N-th."""
    return f"allow-{i}"


def _filler(i: int, server: str) -> tuple[str, str, int]:
    block, offset = divmod(i, _PORTS_PER_ADDRESS)
    if block == 0:
        daddr = server
    elif ipaddress.ip_address(server).version == 4:
        daddr = str(_FILLER_SPILL_NET[block])
    else:
        daddr = str(_FILLER_SPILL_NET6[block])
    return daddr, "tcp", FILLER_BASE_PORT + offset


def _entry_match(daddr: str, proto: str, port: int) -> Match:
    return Match(dst=Prefix.of(daddr), proto=proto, dport=Ports.of(port))


CHAINS = ("forward", "input")


def entry_rule(rid: str, daddr: str, proto: str, port: int, counter: bool = True) -> Rule:
    """One entry as a linear rule: accept `proto` to daddr:port."""
    return Rule(rid, _entry_match(daddr, proto, port), ACCEPT, counter=counter)


def skeleton(version: int, entries: list[Rule], sets: tuple[Set, ...] = (), *,
             server: str, chain: str = "forward", control_port: int = 5201,
             tail: tuple[Rule, ...] = (), host_traffic: bool = False) -> Table:
    """Seed 000's table around `entries`: the base chain at `chain`'s hook (policy
    drop) jumps by input interface to from_client, which holds the entries, then
    the control and ping rules, then `tail` (rules appended after them, as
    `iptables -A` appends), or to from_server, which accepts the return path."""
    icmp, echo = ("icmp", 8) if version == 4 else ("icmpv6", 128)
    rules = [*entries, Rule(CONTROL_RULE, _entry_match(server, "tcp", control_port)),
             Rule(PING_RULE, Match(dst=Prefix.of(server), proto=icmp, icmp_type=echo)),
             *tail]
    base = [Rule("from-client", Match(iif=Iface(CLIENT)), jump("from_client"), counter=False),
            Rule("from-server", Match(iif=Iface(SERVER)), jump("from_server"), counter=False)]
    host: tuple[Chain, ...] = ()
    if host_traffic:
        base.append(Rule("not-from-client", Match(iif=Iface(CLIENT, negate=True)),
                         jump("host"), counter=False))
        host = (Chain("host", (Rule("host-traffic", Match(iif=Iface(SERVER, negate=True)),
                                    counter=False),)),)
    return Table("ip" if version == 4 else "ip6", TABLE, (
        # The skeleton's rules count nothing in nft, as seed 000's files had it.
        Chain(chain, tuple(base), hook=chain, priority=0, type="filter", policy="drop"),
        Chain("from_client", tuple(rules)),
        Chain("from_server", (Rule("return-path", counter=False),)),
        *host,
    ), sets)


def filler(i: int, server: str) -> tuple[str, str, int]:
    """The i-th filler entry (0-based): (daddr, "tcp", port), TCP to ports from
    40000 on, then to the spill addresses; no UDP test flow matches one."""
    return _filler(i, server)


def seed000(n: int = 20, *, version: int = 4, layout: str = "linear", counters: bool = True,
            test_port: int = 5201, control_port: int = 5201,
            chain: str = "forward", host_traffic: bool = False) -> RuleSet:
    """N entries, the test entry (UDP to the server's test port) last; `counters`
    False leaves the fillers without counters (nft only; iptables always counts).
    `chain` "input": the entries at the input hook, for the firewall's own
    client-side address instead of the server's; `host_traffic` lets the host's
    own traffic (not on a test interface) through there."""
    if not 1 <= n <= MAX_ENTRIES:
        raise RuleSetError(f"rule count must be 1..{MAX_ENTRIES}, got {n}")
    if version not in (4, 6):
        raise RuleSetError(f"IP version must be 4 or 6, got {version}")
    if layout not in ("linear", "set"):
        raise RuleSetError(f"layout must be linear or set, got {layout!r}")
    if chain not in CHAINS:
        raise RuleSetError(f"chain must be forward or input, got {chain!r}")
    local = chain == "input"
    server, client = (SERVER4, CLIENT4) if version == 4 else (SERVER6, CLIENT6)
    if local:
        server = addresses.FW_CLIENT_SIDE[version]
    icmp, echo = ("icmp", 8) if version == 4 else ("icmpv6", 128)
    entries = [_filler(i, server) for i in range(n - 1)] + [(server, "udp", test_port)]

    sets: tuple[Set, ...] = ()
    if layout == "linear":
        rules = [Rule(entry_id(i + 1), _entry_match(*e), ACCEPT,
                      counter=counters or i == n - 1)
                 for i, e in enumerate(entries)]
        test_rule = entry_id(n)
    else:
        sets = (Set(SET_NAME, ("addr", "proto", "port"), tuple(entries), version),)
        rules = [Rule(SET_RULE, Match(sets=(SetRef(SET_NAME, ("daddr", "proto", "dport")),)))]
        test_rule = SET_RULE
    if host_traffic and not local:
        raise RuleSetError("host_traffic is for chain input: forwarding leaves the "
                           "host's own traffic alone")
    table = skeleton(version, rules, sets, server=server, chain=chain,
                     control_port=control_port, host_traffic=host_traffic)

    flow = Packet(version, "client", client, server, "udp", PROBE_SPORT, test_port)
    probes = (
        Probe("test flow", flow, True, test_rule, local=local),
        Probe("disallowed", Packet(version, "client", client, server, "udp", PROBE_SPORT,
                                   test_port + 1), False, local=local),
        Probe("ping", Packet(version, "client", client, server, icmp, icmp_type=echo),
              True, PING_RULE, local=local),
    )
    name = f"seed000-{layout}" + ("-input" if local else "") + ("-host" if host_traffic else "")
    return validate(RuleSet(name, (table,), probes, flow=flow,
                            flow_rule=test_rule, size=n, layout=layout, ipt_prefix="fwb_"))
