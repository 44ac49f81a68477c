"""The packet corpus for verdict-equivalence checks.

`build(rs)` makes a deterministic list of packets that exercises a rule set: first
one packet per rule that the rule matches (found by solving the conditions on the
way to it, then checked with the reference evaluator), then the edges of every
prefix and port range, near misses (a rule's packet with one field changed), and
seeded random packets to the requested size. The same corpus goes through every
backend in the testbed and through `evaluate`; the verdicts and counters must agree.
A packet's index is its position in the list; `sample` keeps it.

Every address lies in the benchmarking ranges, 198.18.0.0/15 and 2001:2::/48, and
none is the firewall's own, a link's network or broadcast address (IPv6: the
subnet-router anycast), or multicast. A rule set that uses other addresses must be
imported with address remapping first.
"""
from __future__ import annotations

import ipaddress
import random as _random
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator, Sequence

from fwbench import addresses
from fwbench.ruleset.evaluate import (FORWARD_HOOKS, CompiledSet, Evaluator,
                                      address_interval, address_text,
                                      complement_ranges, iface_sides, merge_ranges,
                                      nat_address, packet_length, rule_version)
from fwbench.ruleset.model import (PORTLESS, AddrType, Chain, Iface, Match, Packet, Ports, Range,
                                   Rule, RuleSet, RuleSetError, Table, TcpFlags)

__all__ = ["build", "sample", "RANGES", "RESERVED"]

RANGES = addresses.BENCH
_RANGE = {v: (int(n.network_address), int(n.broadcast_address)) for v, n in RANGES.items()}
# The firewall's own addresses, and the links' network and broadcast addresses
# (IPv6: the subnet-router anycast, which a forwarding Linux answers itself).
RESERVED = {
    v: frozenset([int(ipaddress.ip_address(addresses.FW_CLIENT_SIDE[v])),
                  int(ipaddress.ip_address(addresses.FW_SERVER_SIDE[v]))]
                 + [int(n.network_address) for n in addresses.LINKS[v]]
                 + [int(n.broadcast_address) for n in addresses.LINKS[v] if v == 4])
    for v in (4, 6)
}
# Where the testbed's routes put each side, and its end hosts there.
_SIDE_NET = {v: {"client": addresses.CLIENT_SIDE[v], "server": addresses.SERVER_SIDE[v]}
             for v in (4, 6)}
_HOST = {v: {"client": int(ipaddress.ip_address(addresses.CLIENT[v])),
             "server": int(ipaddress.ip_address(addresses.SERVER[v]))} for v in (4, 6)}
_ICMP = {4: "icmp", 6: "icmpv6"}
_ECHO = {4: (8, 0), 6: (128, 129)}        # request, reply
# The portless protocols of each IP version (model.PORTLESS: AH is IPv4's only).
_PORTLESS = {4: PORTLESS, 6: tuple(p for p in PORTLESS if p != "ah")}
_SIDES = ("client", "server")
_OTHER = {"client": "server", "server": "client"}
_CT_PREFERENCE = ("new", "established", "related", "invalid")
_ATTEMPTS = 6
# Of what the per-rule packets leave of `size`: edges, then near misses, then random.
_SHARES = (0.4, 0.3)


# --- where rules sit -------------------------------------------------------------------

@dataclass(frozen=True)
class _Site:
    """A rule as the packet meets it: its table and base chain, and the jump/goto
    rules that lead from the base chain to the rule's chain."""
    rule: Rule
    table: Table
    base: Chain
    chain: Chain
    path: tuple[Rule, ...]


def _sites(rs: RuleSet) -> list[list[_Site]]:
    """Every rule a forwarded packet can reach, in evaluation order, with up to three
    ways to reach it; rules of input/output chains and unreachable chains are left out."""
    bases = []
    for ti, t in enumerate(rs.tables):
        for ci, c in enumerate(t.chains):
            if c.hook in FORWARD_HOOKS:
                bases.append(((FORWARD_HOOKS.index(c.hook), c.priority, -ti, -ci), t, c))
    bases.sort(key=lambda b: b[0])
    found: dict[str, list[_Site]] = {}
    visits: dict[tuple[str, str, str], int] = {}

    def visit(t: Table, base: Chain, chain: Chain, path: tuple[Rule, ...]) -> None:
        k = (t.family, t.name, chain.name)
        visits[k] = visits.get(k, 0) + 1
        if visits[k] > 3 or len(path) > 16:
            return
        for r in chain.rules:
            sites = found.setdefault(r.id, [])
            if len(sites) < 3:
                sites.append(_Site(r, t, base, chain, path))
            if r.action.kind in ("jump", "goto"):
                visit(t, base, t.chain(r.action.chain), path + (r,))

    for _, t, c in bases:
        visit(t, c, c, ())
    return list(found.values())


# --- what a packet must be ----------------------------------------------------------------

@dataclass
class _Need:
    """The conditions a packet must meet to reach and match one rule."""
    versions: set[int]
    sides: set[str] = field(default_factory=lambda: set(_SIDES))   # iif
    protos: set[str] | None = None
    pos: dict[str, list[tuple[int, int, int]]] = field(
        default_factory=lambda: {"saddr": [], "daddr": []})
    neg: dict[str, list[tuple[int, int, int]]] = field(
        default_factory=lambda: {"saddr": [], "daddr": []})
    ports: dict[str, list[list[tuple[int, int]]]] = field(
        default_factory=lambda: {"sport": [], "dport": []})
    icmp: set[int] | None = None
    ct: set[str] | None = None
    marks: list[tuple[int, int, bool]] = field(default_factory=list)
    sets: list[tuple[CompiledSet, tuple[str, ...], bool]] = field(default_factory=list)
    possible: bool = True
    flags: list[TcpFlags] = field(default_factory=list)
    codes: set[int] | None = None
    # (range, what forwarding took off the TTL before the hook): the packet's TTL
    # as sent minus that must lie in the range.
    ttls: list[tuple[Range, int]] = field(default_factory=list)
    lengths: list[Range] = field(default_factory=list)
    addrtypes: list[AddrType] = field(default_factory=list)

    def only_protos(self, protos: Iterable[str]) -> None:
        self.protos = set(protos) if self.protos is None else self.protos & set(protos)

    def add(self, m: Match, hook: str, before_ct: bool,
            sets: dict[str, CompiledSet]) -> None:
        for spec, attr in ((m.iif, "iif"), (m.oif, "oif")):
            if spec is None:
                continue
            # iif is unknown at egress, oif before routing: no match there.
            if (attr == "iif" and hook == "egress") or \
                    (attr == "oif" and hook in ("ingress", "prerouting")):
                self.possible = False
            sides = iface_sides(spec)
            self.sides &= sides if attr == "iif" else {_OTHER[s] for s in sides}
        for p, attr in ((m.src, "saddr"), (m.dst, "daddr")):
            if p is not None:
                v, lo, hi, _ = address_interval(p.net)
                (self.neg if p.negate else self.pos)[attr].append((v, lo, hi))
        if m.proto is not None:
            self.only_protos([m.proto])
        for p, attr in ((m.sport, "sport"), (m.dport, "dport")):
            if p is not None:
                self.only_protos(["tcp", "udp"])
                self.ports[attr].append(_port_set(p))
        if m.icmp_type is not None:
            self.icmp = {m.icmp_type} if self.icmp is None else self.icmp & {m.icmp_type}
        self.add_everyday(m, hook)
        # Before conntrack every packet reads as invalid: nothing to choose there.
        if m.ct_state is not None and not before_ct:
            self.ct = set(m.ct_state) if self.ct is None else self.ct & set(m.ct_state)
        if m.mark is not None:
            self.marks.append((m.mark[0], m.mark[1], m.mark_negate))
        for ref in m.sets:
            cs = sets[ref.name]
            if any(f in ("sport", "dport") for f in ref.fields):
                self.only_protos(["tcp", "udp"])
            self.sets.append((cs, ref.fields, ref.negate))


    def add_everyday(self, m: Match, hook: str) -> None:
        if m.icmp_types is not None:
            self.icmp = set(m.icmp_types) if self.icmp is None else self.icmp & m.icmp_types
        if m.icmp_code is not None:
            self.codes = {m.icmp_code} if self.codes is None else self.codes & {m.icmp_code}
        if m.icmp_pairs:
            # The first pair (the edges try the others).
            t, c = min(m.icmp_pairs)
            self.icmp = {t} if self.icmp is None else self.icmp & {t}
            self.codes = {c} if self.codes is None else self.codes & {c}
        if m.tcp_flags is not None:
            self.only_protos(["tcp"])
            self.flags.append(m.tcp_flags)
        if m.ttl is not None:
            self.ttls.append((m.ttl, int(hook in ("forward", "postrouting"))))
        if m.length is not None:
            self.lengths.append(m.length)
        if m.addrtype is not None:
            self.addrtypes.append(m.addrtype)
        if m.pkttype is not None and ("host" in m.pkttype) == m.pkttype_negate:
            self.possible = False   # every injected frame is addressed to the firewall


def _own_addresses(need: _Need, v: int, iif: str, saddr: int, daddr: int) -> tuple[int, int]:
    """The firewall's own address as the destination (on the far side) or the
    source (on the near side) where an address type condition asks for a local
    one and not a unicast one: its only local addresses the testbed can send."""
    def wants_local(types, negate) -> bool:
        return types is not None and ("local" in types) != negate and \
            ("unicast" in types) == negate
    for a in need.addrtypes:
        if v == 4 and wants_local(a.dst, a.dst_negate):
            daddr = int(ipaddress.ip_address(addresses.FW_SERVER_SIDE[4] if iif == "client"
                                             else addresses.FW_CLIENT_SIDE[4]))
        if v == 4 and wants_local(a.src, a.src_negate):
            saddr = int(ipaddress.ip_address(addresses.FW_CLIENT_SIDE[4] if iif == "client"
                                             else addresses.FW_SERVER_SIDE[4]))
    return saddr, daddr


# TCP flags tried first: a SYN (a new connection), a bare ACK (picked up), then
# every other value.
_FLAG_ORDER = (0x02, 0x10) + tuple(f for f in range(256) if f not in (0x02, 0x10))
_TTL_ORDER = (64,) + tuple(range(255, 1, -1)) + (1, 0)


def _choose(order: Iterable[int], ok) -> int | None:
    return next((x for x in order if ok(x)), None)


def _everyday(need: _Need, proto: str, v: int) -> dict | None:
    """The TCP flags, ICMP code, TTL and padding that meet the rule's conditions
    (the Packet defaults where it has none); None if nothing can."""
    out: dict = {}
    if need.flags:
        flags = _choose(_FLAG_ORDER, lambda f: all(c.matches(f) for c in need.flags))
        if flags is None:
            return None
        out["tcp_flags"] = flags
    if need.codes is not None:
        if not need.codes or proto not in ("icmp", "icmpv6"):
            return None
        out["icmp_code"] = min(need.codes)
    if need.ttls:
        ttl = _choose(_TTL_ORDER, lambda t: all(r.contains(t - off) for r, off in need.ttls))
        if ttl is None:
            return None
        out["ttl"] = ttl
    if need.lengths:
        base = packet_length(Packet(v, "client", "", "", proto))
        pad = _choose(range(_MAX_PAD + 1), lambda n: all(r.contains(base + n)
                                                         for r in need.lengths))
        if pad is None:
            return None
        out["pad"] = pad
    return out


# The most padding a corpus packet carries: its frame stays within a 1500-byte MTU.
_MAX_PAD = 1400


def _port_set(p: Ports) -> list[tuple[int, int]]:
    """The ports a Ports condition allows, as sorted disjoint ranges within 1..65535."""
    ranges = merge_ranges([(max(lo, 1), hi) for lo, hi in p.ranges if hi >= 1])
    return complement_ranges(ranges, 1, 65535) if p.negate else ranges


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for lo1, hi1 in a:
        for lo2, hi2 in b:
            lo, hi = max(lo1, lo2), min(hi1, hi2)
            if lo <= hi:
                out.append((lo, hi))
    return merge_ranges(out)


def _need(site: _Site, sets: dict[tuple[str, str], dict[str, CompiledSet]]) -> _Need:
    t, base = site.table, site.base
    versions = {"ip": {4}, "ip6": {6}}.get(t.family, {4, 6})
    need = _Need(set(versions))
    raw = {s.name: s for s in t.sets}
    before_ct = base.hook == "ingress" or (base.hook == "prerouting" and base.priority < -200)
    tsets = sets[(t.family, t.name)]
    for r in site.path + (site.rule,):
        try:
            v = rule_version(r, raw)
        except RuleSetError:
            need.possible = False
            return need
        if v:
            need.versions &= {v}
        need.add(r.match, base.hook, before_ct, tsets)
    if base.device is not None:
        # A netdev chain sees the packets arriving by its device, or (egress) leaving.
        sides = iface_sides(Iface(base.device))
        need.sides &= sides if base.hook == "ingress" else {_OTHER[s] for s in sides}
    if base.type == "nat" and base.hook in ("prerouting", "postrouting"):
        need.ct = {"new"} if need.ct is None else need.ct & {"new"}
    if not need.sides or not need.versions or need.protos == set() or \
            need.ct == set() or need.icmp == set():
        need.possible = False
    return need


# --- solving -------------------------------------------------------------------------------

class _Solver:
    def __init__(self, rs: RuleSet, ev: Evaluator, rng: _random.Random):
        self.rs, self.ev, self.rng = rs, ev, rng
        self.sets = ev.sets

    def packets(self, sites: list[_Site], ordinal: int) -> list[Packet]:
        """One packet per IP version the rule can see: the first that the evaluator
        confirms the rule counts, else the first that meets its conditions."""
        versions: list[int] = []
        needs = []
        for site in sites:
            need = _need(site, self.sets)
            if need.possible:
                needs.append((site, need))
                versions += [v for v in sorted(need.versions) if v not in versions]
        out = []
        vs = [v for v in versions if v in self.rs.versions] or versions
        for v in vs:
            fallback = None
            done = False
            for site, need in needs:
                if v not in need.versions:
                    continue
                for attempt in range(_ATTEMPTS):
                    for keep_mark_zero in ((True, False) if need.marks else (False,)):
                        pkt = self.solve(need, v, attempt, ordinal, keep_mark_zero)
                        if pkt is None:
                            continue
                        if site.rule.id in self.ev.evaluate(pkt).counted:
                            out.append(pkt)
                            done = True
                            break
                        if fallback is None and not keep_mark_zero:
                            fallback = pkt
                    if done:
                        break
                if done:
                    break
            if not done and fallback is not None:
                out.append(fallback)
        return out

    def solve(self, need: _Need, v: int, attempt: int, ordinal: int,
              keep_mark_zero: bool = False) -> Packet | None:
        rng = self.rng
        pos = {f: [x for x in need.pos[f]] for f in need.pos}
        ports = {f: list(need.ports[f]) for f in need.ports}
        protos = [p for p in ("tcp", "udp", _ICMP[v]) + _PORTLESS[v]
                  if need.protos is None and p not in PORTLESS
                  or need.protos is not None and p in need.protos]
        # Positive set lookups pin fields to one element.
        for cs, fields, neg in need.sets:
            if neg:
                continue
            if cs.version is not None and cs.version != v:
                return None
            pins = self._element(cs, fields, protos, pos, ports, v, attempt)
            if pins is None:
                return None
            for f, value in pins.items():
                if f in ("saddr", "daddr"):
                    pos[f].append((v, value[0], value[1]))
                elif f == "proto":
                    protos = [p for p in protos if p == value]
                else:
                    ports[f].append([value])
        if not protos:
            return None
        proto = protos[ordinal % len(protos)] if attempt == 0 else rng.choice(protos)
        iif = "client" if "client" in need.sides else "server"
        if attempt >= 2 and len(need.sides) == 2:
            iif = rng.choice(_SIDES)
        oif = _OTHER[iif]
        saddr = self._address(v, pos["saddr"], need.neg["saddr"], _HOST[v][iif], attempt)
        daddr = self._address(v, pos["daddr"], need.neg["daddr"], _HOST[v][oif], attempt,
                              avoid=saddr)
        if saddr is None or daddr is None:
            return None
        saddr, daddr = _own_addresses(need, v, iif, saddr, daddr)
        sport = dport = icmp = None
        if proto in ("tcp", "udp"):
            sport = self._port(ports["sport"], attempt, default=(1024, 65535))
            dport = self._port(ports["dport"], attempt, default=(1, 65535))
            if sport is None or dport is None:
                return None
        elif proto not in PORTLESS:
            icmp = _ECHO[v][0] if need.icmp is None else min(need.icmp)
        extra = _everyday(need, proto, v)
        if extra is None:
            return None
        ct = "new"
        if need.ct is not None:
            ct = next((s for s in _CT_PREFERENCE if s in need.ct), "new")
        mark = 0 if keep_mark_zero else _solve_mark(need.marks)
        if mark is None:
            return None
        pkt = Packet(v, iif, address_text(v, saddr), address_text(v, daddr), proto,
                     sport, dport, icmp, mark, ct, **extra)
        values = {"saddr": saddr, "daddr": daddr, "proto": proto, "sport": sport,
                  "dport": dport}
        for cs, fields, neg in need.sets:
            got = tuple(values[f] for f in fields)
            if None in got or cs.contains(got) == neg:
                return None
        return pkt

    def _element(self, cs: CompiledSet, fields: tuple[str, ...], protos: list[str],
                 pos: dict, ports: dict, v: int, attempt: int) -> dict | None:
        """The fields of a set element the other conditions leave possible."""
        elements = cs.elements
        if not elements:
            return None
        start = 0 if attempt == 0 else self.rng.randrange(len(elements))
        for k in range(min(len(elements), 256)):
            pins = dict(zip(fields, elements[(start + k) % len(elements)]))
            fits = True
            for f, value in pins.items():
                if f == "proto":
                    fits = value in protos
                elif f in ("saddr", "daddr"):
                    lo, hi = _RANGE[v]
                    for _, a, b in pos[f] + [(v, value[0], value[1])]:
                        lo, hi = max(lo, a), min(hi, b)
                    fits = lo <= hi
                else:
                    allowed = [value]
                    for c in ports[f]:
                        allowed = _intersect(allowed, c)
                    fits = bool(allowed)
                if not fits:
                    break
            if fits:
                return pins
        return None

    def _address(self, v: int, pos: list, neg: list, default: int, attempt: int,
                 avoid: int | None = None) -> int | None:
        lo, hi = _RANGE[v]
        for pv, plo, phi in pos:
            if pv != v:
                return None
            lo, hi = max(lo, plo), min(hi, phi)
        if lo > hi:
            return None
        negs = [(a, b) for nv, a, b in neg if nv == v]

        def ok(a: int) -> bool:
            return lo <= a <= hi and a not in RESERVED[v] and a != avoid and \
                not any(x <= a <= y for x, y in negs)

        def tries() -> Iterator[int]:
            if attempt == 0:
                yield from (default, lo + 1, lo, hi - 1, hi)
            elif attempt == 1:
                yield from (hi - 1, hi)
            for _ in range(48):
                yield self.rng.randint(lo, hi)
            # Just past each negated prefix.
            for a, b in negs:
                yield b + 1
                yield a - 1

        return next((a for a in tries() if ok(a)), None)

    def _port(self, constraints: list[list[tuple[int, int]]], attempt: int,
              default: tuple[int, int]) -> int | None:
        if not constraints:
            return self.rng.randint(*default)
        allowed = [(1, 65535)]
        for c in constraints:
            allowed = _intersect(allowed, c)
        if not allowed:
            return None
        # The lowest, then the highest allowed port (where overlapping ranges of
        # earlier rules most often leave one free), then random ones.
        if attempt == 0:
            return allowed[0][0]
        if attempt == 1:
            return allowed[-1][1]
        lo, hi = self.rng.choice(allowed)
        return self.rng.randint(lo, hi)


def _solve_mark(marks: list[tuple[int, int, bool]]) -> int | None:
    mark = 0
    for value, mask, neg in marks:
        if not neg:
            if value & ~mask:
                return None
            mark = (mark & ~mask) | value
    for value, mask, neg in marks:
        if neg and mark & mask == value:
            if not mask:
                return None
            mark ^= mask & -mask
    for value, mask, neg in marks:
        if (mark & mask == value) == neg:
            return None
    return mark


# --- checking the rule set -------------------------------------------------------------------

def _validate_ranges(rs: RuleSet) -> None:
    def require_inside(text: str, where: str) -> None:
        v, lo, hi, _ = address_interval(text)
        rlo, rhi = _RANGE[v]
        if rlo <= lo and hi <= rhi:
            return
        if lo <= rlo and rhi <= hi:     # e.g. 0.0.0.0/0: holds the whole range
            return
        raise RuleSetError(f"{where}: address {text} is outside {RANGES[4]} and "
                           f"{RANGES[6]}; import the rule set with address remapping first")

    for t in rs.tables:
        for s in t.sets:
            if "addr" in s.keys:
                i = s.keys.index("addr")
                for e in s.elements:
                    require_inside(str(e[i]), f"set {s.name}")
        for c in t.chains:
            for r in c.rules:
                for p in (r.match.src, r.match.dst):
                    if p is not None:
                        require_inside(p.net, f"rule {r.id}")
                if r.action.addr:
                    require_inside(nat_address(r.action.addr), f"rule {r.id}")


# --- edges, near misses and random packets -----------------------------------------------

def _valid(v: int, a: int) -> bool:
    lo, hi = _RANGE[v]
    return lo <= a <= hi and a not in RESERVED[v]


def _with_addr(p: Packet, f: str, a: int) -> Packet | None:
    if not _valid(p.version, a):
        return None
    text = address_text(p.version, a)
    other = p.daddr if f == "saddr" else p.saddr
    if text == other:
        return None
    return replace(p, **{f: text})


def _with_port(p: Packet, f: str, port: int) -> Packet | None:
    if p.proto not in ("tcp", "udp") or not 1 <= port <= 65535:
        return None
    return replace(p, **{f: port})


def _edges(rs: RuleSet, firsts: dict[str, Packet], solver: _Solver) -> list[Packet]:
    """The first and last address of every prefix and the ones just outside; for
    every port range lo-1, lo, hi, hi+1; on the packet of the rule that holds them."""
    out: list[Packet | None] = []
    set_base: dict[tuple[str, str, str], list[tuple[Packet, tuple[str, ...]]]] = {}
    for t in rs.tables:
        for c in t.chains:
            for r in c.rules:
                base = firsts.get(r.id)
                if base is None:
                    continue
                m = r.match
                for p, f in ((m.src, "saddr"), (m.dst, "daddr")):
                    if p is None:
                        continue
                    v, lo, hi, _ = address_interval(p.net)
                    if v != base.version:
                        continue
                    out += [_with_addr(base, f, a) for a in (lo, hi, lo - 1, hi + 1)]
                for p, f in ((m.sport, "sport"), (m.dport, "dport")):
                    if p is None:
                        continue
                    for lo, hi in p.ranges:
                        out += [_with_port(base, f, x) for x in (lo - 1, lo, hi, hi + 1)]
                out += _everyday_edges(m, base)
                for ref in m.sets:
                    set_base.setdefault((t.family, t.name, ref.name), []).append(
                        (base, ref.fields))
                ref = r.action.vmap
                if ref is not None and r.action.numgen is None:
                    # A verdict map's keys, as a set's: packets that find an element.
                    set_base.setdefault((t.family, t.name, ref.name), []).append(
                        (base, ref.fields))
    for t in rs.tables:
        for s in t.sets:
            for base, fields in set_base.get((t.family, t.name, s.name), [])[:1]:
                if "addr" in s.keys and s.version != base.version:
                    continue
                cs = solver.sets[(t.family, t.name)][s.name]
                for e in _some(solver.rng, cs.elements, _EDGE_ELEMENTS):
                    pkt = base
                    for f, value in zip(fields, e):
                        if pkt is None:
                            break
                        if f in ("saddr", "daddr"):
                            pkt = _with_addr(pkt, f, value[0])
                        elif f == "proto":
                            if value != pkt.proto:
                                pkt = _reproto(pkt, value)
                        else:
                            pkt = _with_port(pkt, f, value[0])
                    if pkt is None:
                        continue
                    for f, value in zip(fields, e):
                        if f in ("saddr", "daddr"):
                            lo, hi = value
                            out += [_with_addr(pkt, f, a) for a in (lo, hi, lo - 1, hi + 1)]
                        elif f in ("sport", "dport"):
                            lo, hi = value
                            out += [_with_port(pkt, f, x) for x in (lo - 1, lo, hi, hi + 1)]
    return [p for p in out if p is not None]


def _everyday_edges(m: Match, base: Packet) -> list[Packet | None]:
    """Both sides of the rule's TCP flag, ICMP code and type, TTL and length
    conditions, on its packet: each flag of the mask flipped, the code and the
    TTL and length bounds one either side."""
    out: list[Packet | None] = []
    if m.tcp_flags is not None and base.proto == "tcp":
        out += [replace(base, tcp_flags=base.tcp_flags ^ bit)
                for bit in (1 << k for k in range(8)) if m.tcp_flags.mask & bit]
    if base.proto in ("icmp", "icmpv6"):
        if m.icmp_code is not None:
            out += [replace(base, icmp_code=c) for c in (m.icmp_code - 1, m.icmp_code + 1)
                    if 0 <= c <= 255]
        for t in sorted(m.icmp_types or ()):
            out.append(replace(base, icmp_type=t))
        for t, c in sorted(m.icmp_pairs or ()):
            out += [replace(base, icmp_type=t, icmp_code=c),
                    replace(base, icmp_type=t, icmp_code=(c + 1) % 256)]
    if m.ttl is not None:
        out += [replace(base, ttl=t) for t in
                {m.ttl.lo - 1, m.ttl.lo, m.ttl.hi, m.ttl.hi + 1,
                 m.ttl.lo, m.ttl.lo + 1, m.ttl.hi + 1, m.ttl.hi + 2} if 0 <= t <= 255]
    if m.addrtype is not None and base.version == 4:
        # The firewall's own addresses are its only local ones: the packet sent to
        # them (delivered to the firewall, or translated by a DNAT there), and from
        # them (prepare() lets the firewall accept its own address as a source).
        own = addresses.FW_SERVER_SIDE[4] if base.iif == "client" else \
            addresses.FW_CLIENT_SIDE[4]
        out += [replace(base, daddr=own),
                replace(base, saddr=addresses.FW_CLIENT_SIDE[4] if base.iif == "client"
                        else addresses.FW_SERVER_SIDE[4])]
    if m.length is not None:
        have = packet_length(base) - base.pad
        out += [replace(base, pad=n - have) for n in
                (m.length.lo - 1, m.length.lo, m.length.hi, m.length.hi + 1)
                if 0 <= n - have <= _MAX_PAD]
    return out


# A set's edges come from at most this many of its elements (a seeded sample, in
# order): a 1,000,000-element set would otherwise make millions of packets for a
# corpus of a few thousand.
_EDGE_ELEMENTS = 2000


def _some(rng: _random.Random, items: Sequence, k: int) -> Sequence:
    """All of items if there are at most k, else a seeded sample of k in order."""
    if len(items) <= k:
        return items
    return [items[i] for i in sorted(rng.sample(range(len(items)), k))]


def _reproto(p: Packet, proto: str) -> Packet | None:
    if proto in ("tcp", "udp"):
        if p.proto in ("tcp", "udp"):
            return replace(p, proto=proto)
        return replace(p, proto=proto, sport=40404, dport=5201, icmp_type=None)
    if proto in PORTLESS:
        return replace(p, proto=proto, sport=None, dport=None, icmp_type=None)
    if proto != _ICMP[p.version]:
        return None
    return replace(p, proto=proto, sport=None, dport=None, icmp_type=_ECHO[p.version][0])


def _near_misses(firsts: Iterable[Packet]) -> list[Packet]:
    """Each rule's packet with one field changed: the next port, the next address,
    the other protocol, the other side, another ct state, no mark."""
    out: list[Packet | None] = []
    for p in firsts:
        a_s = address_interval(p.saddr)[1]
        a_d = address_interval(p.daddr)[1]
        if p.proto in ("tcp", "udp"):
            out += [_with_port(p, "dport", p.dport + 1), _with_port(p, "sport", p.sport + 1),
                    _reproto(p, "udp" if p.proto == "tcp" else "tcp"),
                    _reproto(p, _ICMP[p.version])]
        elif p.proto in PORTLESS:
            # The next portless protocol: a rule on one must not take another.
            mine = _PORTLESS[p.version]
            others = mine[mine.index(p.proto) + 1:] + mine
            out += [_reproto(p, "udp"), _reproto(p, others[0])]
        else:
            out += [_reproto(p, "udp"), replace(p, icmp_type=_ECHO[p.version][1])
                    if p.icmp_type != _ECHO[p.version][1] else None]
        out += [_with_addr(p, "daddr", a_d + 1), _with_addr(p, "saddr", a_s + 1),
                replace(p, iif=_OTHER[p.iif]),
                replace(p, ct_state="established" if p.ct_state == "new" else "new")]
        if p.mark:
            out.append(replace(p, mark=0))
    return [p for p in out if p is not None]


class _Random:
    """Seeded random packets: addresses from the rule set's prefixes or from each
    side's part of the benchmarking ranges, random ports."""

    def __init__(self, rs: RuleSet, solver: _Solver, rng: _random.Random):
        self.rng = rng
        self.versions = sorted(rs.versions)
        self.pools: dict[int, list[tuple[int, int]]] = {4: [], 6: []}
        self.ports: list[tuple[int, int]] = []
        self.icmp = {4: {0, 3, 8, 11}, 6: {1, 128, 129}}
        portless: set[str] = set()
        ct: set[str] = set()
        for t in rs.tables:
            for c in t.chains:
                for r in c.rules:
                    m = r.match
                    for p in (m.src, m.dst):
                        if p is not None:
                            v, lo, hi, _ = address_interval(p.net)
                            self._pool(v, lo, hi)
                    for p in (m.sport, m.dport):
                        if p is not None:
                            self.ports += [(max(lo, 1), hi) for lo, hi in p.ranges if hi >= 1]
                    if m.icmp_type is not None:
                        self.icmp[4 if m.proto == "icmp" else 6].add(m.icmp_type)
                    if m.proto in PORTLESS:
                        portless.add(m.proto)
                    if m.ct_state:
                        ct |= set(m.ct_state)
            for cs in solver.sets[(t.family, t.name)].values():
                for k, kind in enumerate(cs.keys):
                    for e in cs.elements[:1000]:
                        if kind == "addr":
                            self._pool(cs.version, *e[k])
                        elif kind == "port":
                            self.ports.append((max(e[k][0], 1), e[k][1]))
        self.ct = sorted(ct & {"established", "related", "invalid"})
        # Only those a rule names: a rule set without them keeps its seeded corpus.
        self.portless = tuple(p for p in PORTLESS if p in portless)
        self.icmp_sorted = {v: sorted(s) for v, s in self.icmp.items()}

    def _pool(self, v: int, lo: int, hi: int) -> None:
        rlo, rhi = _RANGE[v]
        lo, hi = max(lo, rlo), min(hi, rhi)
        if lo <= hi:
            self.pools[v].append((lo, hi))

    def _addr(self, v: int, side: str) -> int:
        rng = self.rng
        if self.pools[v] and rng.random() < 0.5:
            lo, hi = rng.choice(self.pools[v])
        else:
            n = _SIDE_NET[v][side]
            lo, hi = int(n.network_address), int(n.broadcast_address)
        return rng.randint(lo, hi)

    def packet(self) -> Packet | None:
        rng = self.rng
        v = rng.choice(self.versions)
        iif = rng.choice(_SIDES)
        saddr, daddr = self._addr(v, iif), self._addr(v, _OTHER[iif])
        if not (_valid(v, saddr) and _valid(v, daddr)) or saddr == daddr:
            return None
        proto = rng.choice(("tcp", "udp", _ICMP[v])
                           + tuple(p for p in self.portless if p in _PORTLESS[v]))
        sport = dport = icmp = None
        if proto == _ICMP[v]:
            icmp = rng.choice(self.icmp_sorted[v])
        elif proto not in PORTLESS:
            sport = rng.randint(1024, 65535)
            if self.ports and rng.random() < 0.5:
                lo, hi = rng.choice(self.ports)
                dport = rng.randint(lo, hi)
            else:
                dport = rng.randint(1, 65535)
        ct = rng.choice(self.ct) if self.ct and rng.random() < 0.2 else "new"
        return Packet(v, iif, address_text(v, saddr), address_text(v, daddr), proto,
                      sport, dport, icmp, 0, ct)


# --- the corpus ------------------------------------------------------------------------------

def _pick(rng: _random.Random, items: list, k: int) -> list:
    """k of items, seeded, in their order."""
    if k >= len(items):
        return list(items)
    if k <= 0:
        return []
    return [items[i] for i in sorted(rng.sample(range(len(items)), k))]


def _unique(packets: Iterable[Packet], seen: set[Packet]) -> list[Packet]:
    out = []
    for p in packets:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def build(rs: RuleSet, size: int = 5000, seed: int = 0,
          evaluator: Evaluator | None = None) -> list[Packet]:
    """A deterministic corpus of at most `size` distinct packets for `rs` (see the
    module docstring); the same (rs, size, seed) always gives the same list.
    `evaluator`, if given, is `Evaluator(rs)` already compiled (seconds at 100,000
    rules)."""
    if size < 1:
        raise RuleSetError(f"corpus size must be at least 1, got {size}")
    _validate_ranges(rs)
    rng = _random.Random(seed)
    ev = evaluator if evaluator is not None and evaluator.rs is rs else Evaluator(rs)
    solver = _Solver(rs, ev, rng)

    seen: set[Packet] = set()
    head = _unique((pr.packet for pr in rs.probes if _in_ranges(pr.packet)), seen)
    sites = _sites(rs)
    if len(head) + len(sites) >= size:
        out = _sampled(rng, solver, sites, head, seen, size)
    else:
        out = _whole(rng, solver, rs, sites, head, seen, size)
    gen = _Random(rs, solver, rng)
    misses = 0
    while len(out) < size and misses < 20 * size:
        p = gen.packet()
        if p is None or p in seen:
            misses += 1
            continue
        seen.add(p)
        out.append(p)
    return out


def _whole(rng: _random.Random, solver: _Solver, rs: RuleSet, sites: list[list[_Site]],
           head: list[Packet], seen: set[Packet], size: int) -> list[Packet]:
    """Room for every rule: each rule's packets (one per IP version it sees), then
    edges and near misses, each part sampled when it overflows its share."""
    firsts: dict[str, Packet] = {}
    extras: list[Packet] = []
    for ordinal, ways in enumerate(sites):
        pkts = solver.packets(ways, ordinal)
        if pkts:
            firsts[ways[0].rule.id] = pkts[0]
            head += _unique(pkts[:1], seen)
            extras += pkts[1:]
    out = head + _pick(rng, _unique(extras, set(seen)), size - len(head))
    seen.update(out)
    # Of what is left: edges first, then near misses (with what the edges did not
    # use); random packets take the rest.
    budget = size - len(out)
    quota = int(round(budget * _SHARES[0]))
    for part in (_edges(rs, firsts, solver), _near_misses(firsts.values())):
        take = _pick(rng, _unique(part, set(seen)), quota)
        seen.update(take)
        out += take
        quota = int(round(budget * sum(_SHARES))) - (len(out) - (size - budget))
    return out


def _sampled(rng: _random.Random, solver: _Solver, sites: list[list[_Site]],
             head: list[Packet], seen: set[Packet], size: int) -> list[Packet]:
    """More rules than room: one packet each for a seeded sample of the rules, in
    evaluation order, drawing further rules until `size` distinct packets."""
    if len(head) >= size:
        return _pick(rng, head, size)
    order = list(range(len(sites)))
    rng.shuffle(order)
    chosen: dict[int, Packet] = {}
    for ordinal in order:
        if len(head) + len(chosen) >= size:
            break
        pkts = solver.packets(sites[ordinal], ordinal)
        if pkts and pkts[0] not in seen:
            seen.add(pkts[0])
            chosen[ordinal] = pkts[0]
    return head + [chosen[i] for i in sorted(chosen)]


def _in_ranges(p: Packet) -> bool:
    try:
        s, d = ipaddress.ip_address(p.saddr), ipaddress.ip_address(p.daddr)
    except ValueError:
        return False
    return all(_valid(a.version, int(a)) for a in (s, d))


def sample(corpus: Sequence[Packet], n: int, seed: int = 0) -> list[tuple[int, Packet]]:
    """A seeded sample of n packets for one trial, as (index in the corpus, packet)
    in corpus order; all of them when n >= len(corpus)."""
    rng = _random.Random(seed)
    if n >= len(corpus):
        return list(enumerate(corpus))
    return [(i, corpus[i]) for i in sorted(rng.sample(range(len(corpus)), max(n, 0)))]


# --- random choices ----------------------------------------------------------------------

# Packets a group of alike random choices gets at least (for check's chi-square
# test), and at least this many expected in its least likely outcome.
CHANCE_GROUP = 200
CHANCE_LEAST = 20


def chance_copies(rs: RuleSet, pkts: list[Packet], ev: Evaluator) -> list[Packet]:
    """Copies (other source ports) of the TCP and UDP packets of `pkts` that meet
    a random choice, so that every group of them with the same outcome
    probabilities holds enough packets to test how they fall: CHANCE_GROUP, or
    more where the least likely outcome would expect fewer than CHANCE_LEAST.
    Empty for a rule set that makes no random choice."""
    groups: dict[tuple[float, ...], list[Packet]] = {}
    for p in pkts:
        if p.sport is None:
            continue
        v = ev.evaluate(p)
        if v.outcomes and not v.counter_choice:
            groups.setdefault(tuple(round(q, 9) for q, _ in v.outcomes), []).append(p)
    seen = set(pkts)
    out: list[Packet] = []
    for key, members in groups.items():
        want = max(CHANCE_GROUP, -(-CHANCE_LEAST // max(min(key), 1e-9)))
        want = min(want, 20 * CHANCE_GROUP)   # a rare outcome is then not tested
        k, have = 0, len(members)
        while have < want and k < 64 * want:
            base = members[k % len(members)]
            k += 1
            q = replace(base, sport=1024 + (base.sport - 1024 + 7919 * k) % 64512)
            if q in seen:
                continue
            seen.add(q)
            out.append(q)
            have += 1
    return out
