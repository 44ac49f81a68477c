"""The eBPF renderer: a RuleSet as the load input of fwbench-bpf (bpf/filter.bpf.c).

The filter is stateless, IPv4 only, and sits on the firewall's client-facing
interface: it passes what is not IPv4 or is addressed to the firewall itself,
accepts a packet whose (daddr, protocol, dport or ICMP type) equals a rule's, and
drops the rest. So it holds exactly one shape of rule set:

    table ip T {
        chain B { type filter hook forward ...; policy drop;
            iifname {client} jump X      (or goto; the two rules in either order)
            iifname {server} jump Y }
        chain X { one accept per rule: daddr (one address) . tcp|udp . one dport,
                  daddr . icmp . type, or daddr . l4proto . dport @S, S a set
                  (addr . proto . port) }
        chain Y { accept }               (return traffic: the filter does not see it)
    }

Anything else is refused with model.Unsupported, naming the feature and the rule.
Every line of the load input is a rule with its own counter slot, the line's index;
`BpfRendering.slots` maps each rule id to its slots, so counters are read by id.

Pure: no root, no subprocess.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache

from fwbench.ruleset.model import (CLIENT, PROTO_NUMBERS, SERVER, Chain, Match, Rule,
                                   RuleSet, RuleSetError, Set, Table, Unsupported,
                                   rule_features)

SUPPORTS: frozenset[str] = frozenset({
    "family ip", "set addr . proto . port", "hook forward", "chain type filter",
    "policy drop", "user chain", "iif", "daddr", "proto tcp", "proto udp", "proto icmp",
    "dport", "icmp type", "ip version", "set match", "accept", "jump", "goto", "counter"})

_ACTIONS = ("accept", "jump", "goto")
_SET_FIELDS = ("daddr", "proto", "dport")
_SET_KEYS = ("addr", "proto", "port")


@dataclass(frozen=True)
class BpfRendering:
    text: str                       # fwbench-bpf load input: `set|rule DADDR PROTO PORT`
    slots: dict[str, list[int]]     # rule id -> its counter slots (line indexes);
    #                                 [] for the skeleton's rules, which the filter has not
    drop_slot: int                  # the counter slot of the default drop


@dataclass(frozen=True)
class _Entry:
    rule: Rule
    keys: tuple[tuple[str, int, int], ...]  # (daddr, protocol number, port or ICMP type)
    from_set: bool


def refuse_unsupported(rs: RuleSet) -> None:
    """Raise Unsupported for what the filter cannot hold: the actions first (the
    reason that matters: `dnat`, `mark set`, ...), then the matches, then the
    tables and chains, then the shape."""
    _entries(rs)


def render(rs: RuleSet, set_mode: bool) -> BpfRendering:
    """Linear mode: every entry a `rule` line in chain order, a set-matching rule
    expanded into one line per element, in element order. Set mode: the elements
    of the sets first as `set` lines (the filter looks the hash up before it scans
    the rules), then the other rules in chain order. In set mode a packet matching
    both a set and a rule before the set rule counts on the set element: the
    verdict is the same (both accept), the counter differs from nft's."""
    entries = _entries(rs)
    slots: dict[str, list[int]] = {r.id: [] for _, _, r in rs.rules()}
    lines: list[str] = []
    order = ([e for e in entries if e.from_set] + [e for e in entries if not e.from_set]
             if set_mode else entries)
    for e in order:
        kind = "set" if set_mode and e.from_set else "rule"
        got = slots[e.rule.id]
        for daddr, proto, port in e.keys:
            got.append(len(lines))
            lines.append(f"{kind} {daddr} {proto} {port}")
    return BpfRendering("\n".join(lines) + "\n" if lines else "", slots, len(lines))


# --- the shape ------------------------------------------------------------------------

def _entries(rs: RuleSet) -> list[_Entry]:
    for _, _, r in rs.rules():
        kind = r.action.kind
        if kind not in _ACTIONS:
            raise Unsupported({"mark": "mark set"}.get(kind, kind), f"rule {r.id}")
    for _, _, r in rs.rules():
        if not _plain(r):
            for f in rule_features(r):
                if f not in SUPPORTS:
                    raise Unsupported(f, f"rule {r.id}")
    table = _table(rs)
    base = _base_chain(table)
    client, server = _jumps(table, base)
    for c in table.chains:
        if c.name not in (base.name, client.name, server.name):
            raise Unsupported("user chain", f"chain {c.name}")
    # The filter does not see return traffic: the server side must accept it all.
    for r in server.rules:
        if r.match != Match() or r.action.kind != "accept" or r is not server.rules[0]:
            raise Unsupported("filtering of return traffic", f"rule {r.id}")
    if not server.rules:
        raise Unsupported("filtering of return traffic", f"chain {server.name}")
    entries = [_entry(table, r) for r in client.rules]
    _unique(entries)
    return entries


def _plain(r: Rule) -> bool:
    """Whether the rule uses nothing beyond SUPPORTS, told without parsing
    addresses (RuleSet.features() costs a second per 100k rules)."""
    m = r.match
    # Every condition of Match but those _entry compiles (a test keeps this so).
    return (m.src is None and m.oif is None and m.sport is None and m.ct_state is None
            and m.mark is None and m.limit is None and m.string is None
            and m.hashlimit is None and m.ip_version in (None, 4) and m.tcp_flags is None
            and m.icmp_code is None
            and m.icmp_types is None and m.addrtype is None and m.ttl is None
            and m.length is None and m.pkttype is None and m.quota is None
            and m.random is None and m.nth is None and m.ct_mark is None
            and m.ct_status is None and not m.attrs and not m.tcp_options
            and m.icmp_pairs is None
            and (m.iif is None or not m.iif.negate)
            and (m.dst is None or (not m.dst.negate and m.dst.net.endswith("/32")
                                   and "." in m.dst.net))
            and (m.dport is None or m.dport.single is not None)
            and m.proto in (None, "tcp", "udp", "icmp")
            and not any(s.negate for s in m.sets))


def _table(rs: RuleSet) -> Table:
    if not rs.tables:
        raise Unsupported("a rule set without a forward chain", f"rule set {rs.name}")
    if len(rs.tables) > 1:
        raise Unsupported("several tables", f"table {rs.tables[1].name}")
    t = rs.tables[0]
    if t.family != "ip":
        raise Unsupported("ipv6" if t.family == "ip6" else f"family {t.family}",
                          f"table {t.name}")
    return t


def _base_chain(t: Table) -> Chain:
    bases = [c for c in t.chains if c.base]
    for c in bases:
        where = f"chain {c.name}"
        if c.hook != "forward":
            raise Unsupported(f"hook {c.hook}", where)
        if c.type != "filter":
            raise Unsupported(f"chain type {c.type}", where)
        if c.policy != "drop":
            raise Unsupported(f"policy {c.policy}", where)
    if not bases:
        raise Unsupported("a rule set without a forward chain", f"table {t.name}")
    if len(bases) > 1:
        raise Unsupported("several base chains", f"chain {bases[1].name}")
    return bases[0]


def _jumps(t: Table, base: Chain) -> tuple[Chain, Chain]:
    """The chains the base chain sends client-side and server-side packets to."""
    to: dict[str, str] = {}
    for r in base.rules:
        m, a = r.match, r.action
        role = m.iif.name if m.iif else None
        if a.kind not in ("jump", "goto") or role not in (CLIENT, SERVER) or \
                m.iif.negate or m != Match(iif=m.iif):
            raise Unsupported("a base chain rule other than an iif jump", f"rule {r.id}")
        if role in to:
            raise Unsupported("a second iif jump", f"rule {r.id}")
        to[role] = a.chain
    for role in (CLIENT, SERVER):
        if role not in to:
            raise Unsupported(f"no iif {role} jump", f"chain {base.name}")
    if to[CLIENT] == to[SERVER]:
        raise Unsupported("one chain for both sides", f"chain {to[CLIENT]}")
    return t.chain(to[CLIENT]), t.chain(to[SERVER])


def _entry(t: Table, r: Rule) -> _Entry:
    m, a = r.match, r.action
    where = f"rule {r.id}"
    if a.kind != "accept":
        raise Unsupported(f"{a.kind} in a user chain", where)
    if m.iif:
        raise Unsupported("iif", where)
    if m.sets:
        if len(m.sets) > 1 or m.dst or m.proto or m.dport or m.icmp_type is not None:
            raise Unsupported("set match with other matches", where)
        ref = m.sets[0]
        if ref.fields != _SET_FIELDS:
            raise Unsupported(f"set match on {' . '.join(ref.fields)}", where)
        return _Entry(r, _set_keys(t.set(ref.name)), True)
    if m.dst is None:
        raise Unsupported("a rule without daddr", where)
    if m.proto is None:
        raise Unsupported("a rule without proto", where)
    if m.proto == "icmp":
        if m.icmp_type is None:
            raise Unsupported("icmp without icmp type", where)
        port = m.icmp_type
    elif m.dport is None:
        raise Unsupported(f"{m.proto} without dport", where)
    else:
        port = m.dport.single
    return _Entry(r, ((_addr(m.dst.net, where), PROTO_NUMBERS[m.proto], port),), False)


def _set_keys(s: Set) -> tuple[tuple[str, int, int], ...]:
    where = f"set {s.name}"
    if s.keys != _SET_KEYS:
        raise Unsupported("set " + " . ".join(s.keys), where)
    if s.version != 4:
        raise Unsupported("ipv6", where)
    if s.interval:
        raise Unsupported("set with prefixes", where)
    names = {v: k for k, v in PROTO_NUMBERS.items()}
    out = []
    for addr, proto, port in s.elements:
        name = names.get(proto) if isinstance(proto, int) else proto
        if name not in ("tcp", "udp"):
            # The set is looked up as `th dport`: no ICMP type in it.
            raise Unsupported(f"set element with protocol {proto}", where)
        try:
            port = int(port)
        except ValueError:
            raise Unsupported("port range", where) from None
        if not 0 <= port <= 65535:
            raise RuleSetError(f"{where}: port {port} out of range")
        out.append((_addr(str(addr), where), PROTO_NUMBERS[name], port))
    if len(set(out)) != len(out):
        raise RuleSetError(f"{where}: an element appears twice")
    return tuple(out)


def _addr(text: str, where: str) -> str:
    addr, version, prefixlen = _network(text)
    if not addr:
        raise RuleSetError(f"{where}: not an address: {text!r}")
    if version != 4:
        raise Unsupported("ipv6", where)
    if prefixlen != 32:
        raise Unsupported("daddr prefix", where)
    return addr


@lru_cache(maxsize=65536)
def _network(text: str) -> tuple[str, int, int]:
    """(address, version, prefix length), ("", 0, 0) for no address."""
    try:
        net = ipaddress.ip_network(text)
    except ValueError:
        return "", 0, 0
    return str(net.network_address), net.version, net.prefixlen


def _unique(entries: list[_Entry]) -> None:
    """The hash holds a key once: a set element in two set rules would count on
    one of them only."""
    seen: dict[tuple, str] = {}
    for e in entries:
        if not e.from_set:
            continue
        for k in e.keys:
            if seen.setdefault(k, e.rule.id) != e.rule.id:
                raise Unsupported("an element in two set rules", f"rule {e.rule.id}")
