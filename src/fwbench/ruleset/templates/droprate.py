"""The drop-position experiment's treatments (seed 002) as rule sets of the model.

droprate/treatments.py loads each treatment itself today; this holds the same
rules as data, in the same chains and positions, so that one renderer and one
loader serve them. The flood is UDP from the client to the firewall's own
client-side address (198.18.0.1) at a port nothing listens on; every treatment's
counted rule has the id `flood` (the rule whose counter treatments.py reads).

Where the treatment is a backend's choice rather than a rule set's, treatments
share tables: ipset and nftset hold the same set in raw PREROUTING (an ipset for
iptables, an nft set for nft); xdp and tc hold `-p udp -j DROP` in raw
PREROUTING, the match bpf/drop.bpf.c implements, placed by the BPF backend at
XDP or tc ingress.

What the model cannot say yet:
- `-j CT` without options (conntrack and the ICMP rule of both accept-group
  treatments): a counting rule that matches every conntrack state stands in for
  it; like `-j CT`, it changes no verdict and keeps conntrack's hooks
  registered (xt_conntrack and nft's ct expression both register them).
- nft-ingress's chain is bound to a device, the client side; the model's Chain
  has no device, so the netdev ingress chain here means the client side's.
- string-bm, string-kmp (a payload string match) and hashlimit (a rate above
  which packets match, per source /16): `Unsupported`.
"""
from __future__ import annotations

import functools
import ipaddress

from fwbench.ruleset.model import (CLIENT, CT_STATES, DROP, Action, Chain, Iface, Match,
                                   Packet, Prefix, Probe, Rule, RuleSet, RuleSetError, Set,
                                   SetRef, Table, Unsupported, validate)

CLIENT4, FW_CLIENT_SIDE4 = "198.18.0.2", "198.18.0.1"
FLOOD_PORT = 9
FLOOD_SPORT = 10000             # the engine's first source port
FLOOD_RULE = "flood"
CT_ICMP_RULE = "ct-icmp"
SET_NAME = "bl"                 # rendered fwb_bl, the name seed 002's treatment used

# Set fillers: addresses of the benchmarking range the testbed does not use (its
# two link subnets are 198.18.0.0/24 and 198.19.0.0/24), in treatments.py's order.
BENCH_V4 = ipaddress.ip_network("198.18.0.0/15")
TESTBED_V4 = (ipaddress.ip_network("198.18.0.0/24"), ipaddress.ip_network("198.19.0.0/24"))
FILLER_CAPACITY = BENCH_V4.num_addresses - sum(n.num_addresses for n in TESTBED_V4)
MAX_SET_SIZE = FILLER_CAPACITY + 1  # every filler plus the client's own address

# In seed 002's table order; the accept group first.
TREATMENTS = ("notrack", "conntrack", "xdp", "tc", "nft-ingress", "raw", "raw-after-rules",
              "filter-input", "ipset", "nftset", "string-bm", "string-kmp", "hashlimit")
ACCEPT_GROUP = ("notrack", "conntrack")
_UNSUPPORTED = {"string-bm": "payload string match", "string-kmp": "payload string match",
                "hashlimit": "hashlimit"}


@functools.lru_cache(maxsize=4)
def filler_addresses(n: int) -> tuple[str, ...]:
    """The first `n` addresses of 198.18.0.0/15 outside the testbed's subnets."""
    if not 0 <= n <= FILLER_CAPACITY:
        raise RuleSetError(f"{n:,} filler addresses asked; 198.18.0.0/15 has "
                           f"{FILLER_CAPACITY:,} the testbed does not use")
    skip = [(int(s.network_address), int(s.broadcast_address)) for s in TESTBED_V4]
    out: list[str] = []
    a = int(BENCH_V4.network_address)
    while len(out) < n:
        hole = next((hi for lo, hi in skip if lo <= a <= hi), None)
        if hole is not None:
            a = hole + 1
            continue
        out.append(str(ipaddress.IPv4Address(a)))
        a += 1
    return tuple(out)


def _raw(rules: list[Rule], sets: tuple[Set, ...] = ()) -> Table:
    return Table("ip", "raw", (Chain("PREROUTING", tuple(rules), hook="prerouting",
                                     priority=-300, policy="accept"),), sets)


def _udp_from_client() -> Match:
    return Match(iif=Iface(CLIENT), proto="udp")


def droprate(*, treatment: str, size: int = 1, nonmatching: int = 5,
             port: int = FLOOD_PORT, text: str = "foo.com",
             hashlimit_pps: int = 1000) -> RuleSet:
    """The rule set of one treatment: `size` is the set's size (ipset, nftset),
    `nonmatching` the rules before the drop (raw-after-rules), `port` the flood's
    destination port; `text` and `hashlimit_pps` belong to the treatments the
    model cannot hold yet."""
    if treatment not in TREATMENTS:
        raise RuleSetError(f"unknown treatment {treatment!r} (known: {', '.join(TREATMENTS)})")
    if treatment in _UNSUPPORTED:
        raise Unsupported(_UNSUPPORTED[treatment], f"treatment {treatment}")
    layout, n = "linear", 1
    if treatment in ACCEPT_GROUP:
        flood = Action("notrack") if treatment == "notrack" else Action("counter")
        tables = (_raw([Rule(FLOOD_RULE, Match(proto="udp"), flood),
                        Rule(CT_ICMP_RULE, Match(proto="icmp", ct_state=frozenset(CT_STATES)),
                             Action("counter"))]),)
        n = 2
    elif treatment in ("xdp", "tc"):
        tables = (_raw([Rule(FLOOD_RULE, Match(proto="udp"), DROP)]),)
    elif treatment == "nft-ingress":
        tables = (Table("netdev", "fwbench", (Chain(
            "ingress", (Rule(FLOOD_RULE, Match(proto="udp"), DROP),), hook="ingress",
            priority=0, policy="accept"),)),)
    elif treatment == "raw":
        tables = (_raw([Rule(FLOOD_RULE, _udp_from_client(), DROP)]),)
    elif treatment == "raw-after-rules":
        if nonmatching < 0:
            raise RuleSetError(f"non-matching rule count must be >= 0, got {nonmatching}")
        # Sources the flood never uses: each of these counters must stay at zero.
        fill = [Rule(f"nonmatching-{i}", Match(iif=Iface(CLIENT), src=Prefix.of(a),
                                               proto="udp"), DROP)
                for i, a in enumerate(filler_addresses(nonmatching), 1)]
        tables = (_raw(fill + [Rule(FLOOD_RULE, _udp_from_client(), DROP)]),)
        n = nonmatching + 1
    elif treatment == "filter-input":
        tables = (Table("ip", "filter", (Chain(
            "INPUT", (Rule(FLOOD_RULE, _udp_from_client(), DROP),), hook="input",
            priority=0, policy="accept"),)),)
    else:   # ipset, nftset
        if not 1 <= size <= MAX_SET_SIZE:
            raise RuleSetError(f"set size must be 1..{MAX_SET_SIZE:,}, got {size:,}")
        elements = tuple((a,) for a in (CLIENT4,) + filler_addresses(size - 1))
        tables = (_raw([Rule(FLOOD_RULE, Match(sets=(SetRef(SET_NAME, ("saddr",)),)), DROP)],
                       (Set(SET_NAME, ("addr",), elements, 4),)),)
        layout, n = "set", size

    flow = Packet(4, "client", CLIENT4, FW_CLIENT_SIDE4, "udp", FLOOD_SPORT, port)
    # The accept group's flood is delivered to the firewall itself: neither
    # forwarded nor dropped, which a Probe cannot say; its counter still shows it.
    probes = () if treatment in ACCEPT_GROUP else (Probe("flood", flow, False, FLOOD_RULE),)
    return validate(RuleSet(f"droprate-{treatment}", tables, probes, flow=flow,
                            flow_rule=FLOOD_RULE, size=n, layout=layout, ipt_prefix="fwb_"))
