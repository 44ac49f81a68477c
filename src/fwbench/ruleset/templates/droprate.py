"""The drop-position experiment's treatments (seed 002) as rule sets of the model.

droprate/treatments.py renders and loads each of these through the backends (the
BPF ones excepted, below), so one renderer and one loader serve them. The flood
is UDP from the client to the firewall's own client-side address (198.18.0.1) at
a port nothing listens on; every treatment's counted rule has the id `flood`,
and raw-after-rules' rules the flood must pass without a count are
`nonmatching-1` ... `nonmatching-N`.

The accept group's rules are iptables' `-j CT` (action `ct`) and `-j CT
--notrack` (action `notrack`); the ICMP rule `ct-icmp` keeps conntrack's hooks
registered in both. nft-ingress's chain is on the client side's device.
string-bm, string-kmp (a payload string match) and hashlimit (the packets above
a rate, per source /16) are matches only iptables renders; the reference
evaluator refuses them, so their probe is a claim about the kernel only.

Where the treatment is a backend's choice rather than a rule set's, treatments
share tables: ipset and nftset hold the same elements in a set in raw PREROUTING
(an ipset with per-element counters, as seed 002's had, for iptables; an nft set
of that size for nft); xdp and tc hold `-p udp -j DROP` in raw PREROUTING, the
match bpf/drop.bpf.c implements, which iproute2 attaches at XDP or tc ingress
(fwbench.bpf): no renderer writes that program.
"""
from __future__ import annotations

from fwbench import addresses
from fwbench.ruleset.model import (CLIENT, DROP, Action, Chain, HashLimit, Iface, Match,
                                   Packet, Prefix, Probe, Rule, RuleSet, RuleSetError, Set,
                                   SetRef, StringMatch, Table, validate)

CLIENT4, FW_CLIENT_SIDE4 = addresses.CLIENT[4], addresses.FW_CLIENT_SIDE[4]
FLOOD_PORT = 9
FLOOD_SPORT = 10000             # the engine's first source port
FLOOD_RULE = "flood"
CT_ICMP_RULE = "ct-icmp"
SET_NAME = "bl"                 # rendered fwb_bl, the name seed 002's treatment used
HASHLIMIT_NAME = "udp"          # rendered fwb_udp
HASHLIMIT_BURST = 5             # hashlimit's default
HASHLIMIT_SRC_PREFIX = 16       # seed 002's: each /16 of sources has one budget

# Set fillers: addresses of the benchmarking range the testbed's links do not use
# (fwbench.addresses.filler_addresses), in treatments.py's order.
BENCH_V4 = addresses.BENCH[4]
TESTBED_V4 = addresses.LINKS[4]
FILLER_CAPACITY = addresses.FILLER_CAPACITY
MAX_SET_SIZE = FILLER_CAPACITY + 1  # every filler plus the client's own address

# In seed 002's table order; the accept group first.
TREATMENTS = ("notrack", "conntrack", "xdp", "tc", "nft-ingress", "raw", "raw-after-rules",
              "filter-input", "ipset", "nftset", "string-bm", "string-kmp", "hashlimit")
ACCEPT_GROUP = ("notrack", "conntrack")


def filler_addresses(n: int) -> tuple[str, ...]:
    """The first `n` addresses of 198.18.0.0/15 outside the testbed's subnets."""
    if not 0 <= n <= FILLER_CAPACITY:
        raise RuleSetError(f"{n:,} filler addresses asked; 198.18.0.0/15 has "
                           f"{FILLER_CAPACITY:,} the testbed does not use")
    return addresses.filler_addresses(n)


def _raw(rules: list[Rule], sets: tuple[Set, ...] = ()) -> Table:
    return Table("ip", "raw", (Chain("PREROUTING", tuple(rules), hook="prerouting",
                                     priority=-300, policy="accept"),), sets)


def _udp_from_client() -> Match:
    return Match(iif=Iface(CLIENT), proto="udp")


def droprate(*, treatment: str = "raw", size: int = 1, nonmatching: int = 5,
             port: int = FLOOD_PORT, text: str = "foo.com",
             hashlimit_pps: int = 1000) -> RuleSet:
    """The rule set of one treatment: `size` is the set's size (ipset, nftset),
    `nonmatching` the rules before the drop (raw-after-rules), `port` the flood's
    destination port, `text` what string-bm and string-kmp look for, and
    `hashlimit_pps` the rate per source /16 above which hashlimit drops."""
    if treatment not in TREATMENTS:
        raise RuleSetError(f"unknown treatment {treatment!r} (known: {', '.join(TREATMENTS)})")
    layout, n = "linear", 1
    if treatment in ACCEPT_GROUP:
        tables = (_raw([Rule(FLOOD_RULE, Match(proto="udp"),
                             Action("notrack" if treatment == "notrack" else "ct")),
                        Rule(CT_ICMP_RULE, Match(proto="icmp"), Action("ct"))]),)
        n = 2
    elif treatment in ("xdp", "tc"):
        tables = (_raw([Rule(FLOOD_RULE, Match(proto="udp"), DROP)]),)
    elif treatment == "nft-ingress":
        tables = (Table("netdev", "fwbench", (Chain(
            "ingress", (Rule(FLOOD_RULE, Match(proto="udp"), DROP),), hook="ingress",
            priority=0, policy="accept", device=CLIENT),)),)
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
    elif treatment in ("string-bm", "string-kmp"):
        algo = treatment.removeprefix("string-")
        tables = (_raw([Rule(FLOOD_RULE, Match(proto="udp", string=StringMatch(text, algo)),
                             DROP)]),)
    elif treatment == "hashlimit":
        limit = HashLimit(HASHLIMIT_NAME, hashlimit_pps, "second", HASHLIMIT_BURST,
                          HASHLIMIT_SRC_PREFIX)
        tables = (_raw([Rule(FLOOD_RULE, Match(proto="udp", hashlimit=limit), DROP)]),)
    else:   # ipset, nftset
        if not 1 <= size <= MAX_SET_SIZE:
            raise RuleSetError(f"set size must be 1..{MAX_SET_SIZE:,}, got {size:,}")
        elements = tuple((a,) for a in (CLIENT4,) + filler_addresses(size - 1))
        # Sized, so nft picks the set implementation seed 002's nft set had; the
        # ipset counts per element, as seed 002's did.
        s = Set(SET_NAME, ("addr",), elements, 4, size=size,
                counters=treatment == "ipset")
        tables = (_raw([Rule(FLOOD_RULE, Match(sets=(SetRef(SET_NAME, ("saddr",)),)), DROP)],
                       (s,)),)
        layout, n = "set", size

    flow = Packet(4, "client", CLIENT4, FW_CLIENT_SIDE4, "udp", FLOOD_SPORT, port)
    # The accept group's flood is delivered to the firewall itself: neither
    # forwarded nor dropped, which a Probe cannot say; its counter still shows it.
    probes = () if treatment in ACCEPT_GROUP else (Probe("flood", flow, False, FLOOD_RULE),)
    return validate(RuleSet(f"droprate-{treatment}", tables, probes, flow=flow,
                            flow_rule=FLOOD_RULE, size=n, layout=layout, ipt_prefix="fwb_"))
