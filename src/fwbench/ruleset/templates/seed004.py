"""Seed 004's rule sets (Appendices B-E, 2017) as templates of the model.

The seed's firewall is a border router: "internal" (enp1s0, 192.168.1.0/24, the
trusted network with the iperf server 192.168.1.10) and "external" (ens5, the
iperf client's network, the firewall's own address 192.168.2.1 there). In the
testbed internal is the server side and external the client side:

    enp1s0 -> SERVER    ens5 -> CLIENT    192.168.1.10 -> 198.19.0.2
    192.168.2.1 -> 198.18.0.1 (the firewall's client-side address)

The rules are Appendix D's (iptables forwarding) and, for NAT, Appendix E's nat
table; the model has one table per iptables table ("filter", "nat") and base
chains named as iptables names them. Where the nft appendices differ, D and E win,
except that the NAT filter table keeps the tcp/udp 5001 accepts of Appendix C
(Appendix E lacks them, which would drop the port-forwarded traffic it sets up):
- B's INPUT also accepts ICMP echo-request/-reply, and B's forward-external starts
  with a bare `counter`: neither is in D, neither is here.
- B/C match both ICMP types in one rule with a set; D has two rules, as here.
- C's nat prerouting chain sits at priority 0; here at dstnat (-100), iptables'.
- Counters are where B and C have them (tcp/udp 5001 accepts, the DNATs) and on
  the fillers; iptables counts every rule regardless.
Like the seed, FORWARD has no `ct state established,related` rule (only INPUT
does): the return path is accepted by forward-internal.

Rule ids are `<table>-<n>`, numbered over all rules of a table in
iptables-save's order (built-in chains, then user chains alphabetically), as the
iptables-save importer numbers them. The nat table holds the two DNATs first:
nat-1 (tcp), nat-2 (udp), then nat-3 (SNAT).

`n_extra` filler rules at the head of forward-external (per-source accepts of
tcp/udp 5001 from addresses nobody uses) make the set scale: the measured flow
traverses all of them.
"""
from __future__ import annotations

from dataclasses import replace

from fwbench import addresses
from fwbench.ruleset.model import (ACCEPT, CLIENT, SERVER, Action, Chain, Iface, Match,
                                   Packet, Ports, Prefix, Probe, Rule, RuleSet, RuleSetError,
                                   Table, jump, validate)
from fwbench.ruleset.templates.seed001 import MAX_SPARE, PROBE_SPORT, spare_address

SERVER4, CLIENT4 = addresses.SERVER[4], addresses.CLIENT[4]
FW_EXTERNAL4 = addresses.FW_CLIENT_SIDE[4]     # the seed's 192.168.2.1
# The port-forwarded service: an address on the server side that nobody holds,
# so the client's packets are routed to the firewall and DNAT gives them the
# server's address.
SERVICE4 = addresses.SERVICE4
SERVICE_PORT = 5001             # iperf 2's port
SSH_PORT = 22
ECHO_REQUEST, ECHO_REPLY = 8, 0
MAX_EXTRA = MAX_SPARE


def _iif(role: str) -> Match:
    return Match(iif=Iface(role))


def _filler(i: int) -> Match:
    return Match(src=Prefix.of(spare_address(i)), proto="udp",
                 dport=Ports.of(SERVICE_PORT))


def _number(table: str, chains: list[tuple[Chain, list[tuple[Match, Action, bool]]]]
            ) -> tuple[tuple[Chain, ...], dict[tuple[str, int], str]]:
    """Chains with their rules given ids `<table>-<n>` in order; also (chain name,
    index) -> id, for probes."""
    out, ids, n = [], {}, 0
    for chain, rules in chains:
        built = []
        for k, (match, action, counter) in enumerate(rules):
            n += 1
            ids[(chain.name, k)] = f"{table}-{n}"
            built.append(Rule(f"{table}-{n}", match, action, counter=counter))
        out.append(replace(chain, rules=tuple(built)))
    return tuple(out), ids


def _filter_table(n_extra: int) -> tuple[Table, dict[tuple[str, int], str]]:
    if not 0 <= n_extra <= MAX_EXTRA:
        raise RuleSetError(f"extra rule count must be 0..{MAX_EXTRA}, got {n_extra}")
    seed_counts = False   # the seed's nft files count only some rules
    external = [(_filler(i), ACCEPT, True) for i in range(n_extra)] + [
        (Match(proto="tcp", dport=Ports.of(SERVICE_PORT)), ACCEPT, True),
        (Match(proto="udp", dport=Ports.of(SERVICE_PORT)), ACCEPT, True),
        (Match(proto="icmp", icmp_type=ECHO_REQUEST), ACCEPT, seed_counts),
        (Match(proto="icmp", icmp_type=ECHO_REPLY), ACCEPT, seed_counts),
    ]
    chains, ids = _number("filter", [
        (Chain("INPUT", hook="input", priority=0, policy="drop"), [
            (Match(ct_state=frozenset({"established", "related"})), ACCEPT, seed_counts),
            (_iif(SERVER), jump("input-internal"), seed_counts),
            (_iif(CLIENT), jump("input-external"), seed_counts),
            (Match(iif=Iface("lo")), ACCEPT, seed_counts),
        ]),
        (Chain("FORWARD", hook="forward", priority=0, policy="drop"), [
            (_iif(SERVER), jump("forward-internal"), seed_counts),
            (_iif(CLIENT), jump("forward-external"), seed_counts),
        ]),
        (Chain("forward-external"), external),
        (Chain("forward-internal"), [(Match(), ACCEPT, seed_counts)]),
        (Chain("input-external"), [(Match(proto="tcp", dport=Ports.of(SSH_PORT)), ACCEPT,
                                    seed_counts)]),
        (Chain("input-internal"), [(Match(), ACCEPT, seed_counts)]),
    ])
    return Table("ip", "filter", chains), ids


def _nat_table() -> tuple[Table, dict[tuple[str, int], str]]:
    dnat = Action("dnat", addr=SERVER4)
    chains, ids = _number("nat", [
        (Chain("PREROUTING", hook="prerouting", priority=-100, type="nat"), [
            (Match(iif=Iface(CLIENT), proto="tcp", dport=Ports.of(SERVICE_PORT)), dnat, True),
            (Match(iif=Iface(CLIENT), proto="udp", dport=Ports.of(SERVICE_PORT)), dnat, True),
        ]),
        (Chain("POSTROUTING", hook="postrouting", priority=100, type="nat"), [
            (Match(src=Prefix.of(SERVER4), oif=Iface(CLIENT)),
             Action("snat", addr=FW_EXTERNAL4), False),
        ]),
    ])
    return Table("ip", "nat", chains), ids


def _accepts(ids: dict[tuple[str, int], str], n_extra: int) -> tuple[str, str]:
    """The ids of forward-external's tcp and udp 5001 accepts."""
    return ids[("forward-external", n_extra)], ids[("forward-external", n_extra + 1)]


def seed004_forward(*, n_extra: int = 0) -> RuleSet:
    """Appendix D: stateful INPUT, FORWARD split by side, the external side allowed
    iperf (tcp/udp 5001) and ping."""
    table, ids = _filter_table(n_extra)
    tcp_rule, udp_rule = _accepts(ids, n_extra)
    flow = Packet(4, "client", CLIENT4, SERVER4, "udp", PROBE_SPORT, SERVICE_PORT)
    probes = (
        Probe("test flow", flow, True, udp_rule),
        Probe("iperf tcp", Packet(4, "client", CLIENT4, SERVER4, "tcp", PROBE_SPORT,
                                  SERVICE_PORT), True, tcp_rule),
        Probe("ping", Packet(4, "client", CLIENT4, SERVER4, "icmp",
                             icmp_type=ECHO_REQUEST), True),
        Probe("return path", Packet(4, "server", SERVER4, CLIENT4, "udp", SERVICE_PORT,
                                    PROBE_SPORT), True),
        Probe("disallowed", Packet(4, "client", CLIENT4, SERVER4, "udp", PROBE_SPORT,
                                   SERVICE_PORT + 1), False),
    )
    return validate(RuleSet("seed004-forward", (table,), probes, flow=flow,
                            flow_rule=udp_rule, size=n_extra, ipt_prefix="fwb_"))


def seed004_nat(*, n_extra: int = 0) -> RuleSet:
    """Appendices C and E: the forwarding rules plus a port forward of tcp/udp 5001
    arriving on the external side to the server, and SNAT of what the server sends
    out of the external side to the firewall's external address."""
    table, ids = _filter_table(n_extra)
    nat, nat_ids = _nat_table()
    tcp_rule, udp_rule = _accepts(ids, n_extra)
    dnat_tcp = nat_ids[("PREROUTING", 0)]

    def to_service(proto: str) -> tuple[Packet, Packet]:
        sent = Packet(4, "client", CLIENT4, SERVICE4, proto, PROBE_SPORT, SERVICE_PORT)
        return sent, Packet(4, "client", CLIENT4, SERVER4, proto, PROBE_SPORT, SERVICE_PORT)

    flow, flow_translated = to_service("udp")
    tcp, tcp_translated = to_service("tcp")
    # A connection the server opens: conntrack undoes the DNAT of replies to the
    # client's connections without the nat chains, so only a new one meets SNAT.
    out = Packet(4, "server", SERVER4, CLIENT4, "udp", SERVICE_PORT, PROBE_SPORT)
    probes = (
        # The udp DNAT (nat-2) shows in the test flow's translation; its counter,
        # like the tcp one's, counts only a connection's first packet.
        Probe("test flow", flow, True, udp_rule, flow_translated),
        Probe("port forward tcp", tcp, True, dnat_tcp, tcp_translated),
        Probe("snat", out, True, None,
              Packet(4, "server", FW_EXTERNAL4, CLIENT4, "udp", SERVICE_PORT, PROBE_SPORT)),
        Probe("ping", Packet(4, "client", CLIENT4, SERVER4, "icmp",
                             icmp_type=ECHO_REQUEST), True),
        Probe("disallowed", Packet(4, "client", CLIENT4, SERVER4, "udp", PROBE_SPORT,
                                   SERVICE_PORT + 1), False),
    )
    return validate(RuleSet("seed004-nat", (table, nat), probes, flow=flow,
                            flow_rule=udp_rule, size=n_extra, ipt_prefix="fwb_",
                            notes=(f"the measured flow goes to the port-forwarded "
                                   f"service {SERVICE4}:{SERVICE_PORT}",)))
