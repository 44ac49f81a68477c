"""An imported rule set moved onto the testbed: interface names onto its roles,
addresses into the benchmarking ranges, deterministically and reversibly.

Interfaces. `iface_map` names the user's interfaces by role ("eth0" -> "client",
"eth1" -> "server"); they become model.CLIENT / model.SERVER, which renderers
resolve to the testbed's names. Names are compared as written: a rule's wildcard
`eth+` takes a role only from a key `eth+`. Other names stay literal: they never
match in the testbed, and RuleSet.notes says which.

Addresses. The testbed routes only 198.18.0.0/15 and 2001:2::/48, so every other
address of the rule set (in matches, set elements, NAT targets, probes) is moved in
there; addresses already inside stay as they are, and so do networks that contain
a whole range (0.0.0.0/0, 192.0.0.0/2, ::/0, 2000::/3: they match the testbed's
traffic as they matched everything before). The mapping keeps prefixes, host bits,
containment and order:

1. The distinct networks to move form a forest by containment (10.0.0.0/8 holds
   10.1.0.0/16 holds 10.1.2.3/32); its roots are the networks nothing else holds.
2. Every node gets an aligned block. Under a size cap C, a node of at most C
   addresses gets a block of its own size, and everything inside it moves with it
   by offset: prefix lengths and host bits are kept (192.168.1.0/24 ->
   198.18.1.0/24, 192.168.1.10 -> 198.18.1.10). A bigger node is compressed to
   max(C, what its children need): its children are packed into it in address
   order, and it keeps room for addresses of its own outside them, so it stays a
   strictly larger network than each of them.
3. The roots are laid out in address order from the start of the range, each on
   a boundary of its block's size, skipping the testbed's links (198.18.0.0/24,
   198.19.0.0/24, 2001:2:0:1::/64, 2001:2:0:2::/64) and the addresses the rule set
   already had inside the range. C starts at the range's size and halves until
   everything fits.

So equal originals map to equal networks, different ones to different networks,
one inside another stays inside, and order between networks is kept. The pairs
(original, mapped) go into RuleSet.address_map, in the original order;
reverse() maps any testbed address back.
"""
from __future__ import annotations

import gc
import ipaddress
import socket
from dataclasses import replace
from typing import Iterable

from fwbench import addresses
from fwbench.ruleset.model import (CLIENT, SERVER, Action, Iface, Match, Packet, Prefix,
                                   Probe, RuleSet, RuleSetError, Table, evolve)

BENCH = addresses.BENCH
# The testbed's own links; nothing is mapped onto them.
LINKS = {v: tuple(str(n) for n in nets) for v, nets in addresses.LINKS.items()}
ROLES = {"client": CLIENT, "server": SERVER, CLIENT: CLIENT, SERVER: SERVER}
_WIDTH = {4: 32, 6: 128}
_AF = {4: socket.AF_INET, 6: socket.AF_INET6}

Net = tuple[int, int, int]   # (version, network address as an int, prefix length)


def remap(rs: RuleSet, iface_map: dict[str, str]) -> RuleSet:
    """`rs` with interfaces mapped to roles and addresses moved into the
    benchmarking ranges (see the module's docstring)."""
    # Nothing here makes reference cycles; the collector would only walk the
    # growing heap again and again (most of the time at 100,000 rules).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return Remapper(iface_map, _collect(rs)).apply(rs)
    finally:
        if was_enabled:
            gc.enable()


class Remapper:
    """Where remap() moves a rule set's interfaces and addresses: a plan made from
    every network the rule set names (`texts`, as written), then asked value by
    value. remap() asks it for every value of a finished rule set (apply); an
    importer that can list the networks before it builds the rules asks it as it
    reads them (addr, iface) and adds the record at the end (finish), so the rule
    set is built once. `complete` says whether the networks it was asked for were
    exactly those the plan was made from, the condition for the two ways to give
    the same rule set."""

    def __init__(self, iface_map: dict[str, str], texts: Iterable[str]):
        self.roles: dict[str, str] = {}
        for name, role in iface_map.items():
            if role not in ROLES:
                raise RuleSetError(f"interface map: {name}={role}: the role must be client "
                                   f"or server")
            self.roles[name] = ROLES[role]
        self._nets = {x: _parse(x) for x in texts}
        nets = set(self._nets.values())
        self.mapping: dict[Net, Net] = {}
        self.notes: list[str] = []
        for version in (4, 6):
            mine = [n for n in nets if n[0] == version]
            move, kept_wide = _classify(mine, version)
            self.mapping.update(_plan(move, mine, version))
            for n in kept_wide:
                self.notes.append(f"{_text(n)} holds the whole benchmarking range: kept as "
                                  f"it is")
        self._moved: dict[str, str] = {}
        self._texts: dict[Net, str] = {}   # canonical network texts made so far
        self._asked: set[Net] = set()
        self._unmapped: set[str] = set()

    def addr(self, text: str) -> str:
        """A network or address text (canonical), moved; plain stays plain."""
        out = self._moved.get(text)
        if out is None:
            net = self._nets.get(text) or _parse(text)
            self._asked.add(net)
            m = self.mapping.get(net)
            if m is None:
                out = text
            else:
                out = _text(m) if "/" in text else _addr_text(m[0], m[1])
            self._moved[text] = out
        return out

    def prefix(self, written: str) -> str | None:
        """The canonical text of the network (moved) that was written `written`
        among the texts the plan was made from; None for any other text."""
        net = self._nets.get(written)
        if net is None:
            return None
        self._asked.add(net)
        out = self.mapping.get(net) or net
        text = self._texts.get(out)
        if text is None:
            text = self._texts[out] = _text(out)
        return text

    def iface(self, name: str) -> str:
        """An interface name's role, or the name when it has none."""
        if name == CLIENT or name == SERVER:
            return name
        role = self.roles.get(name)
        if role is None:
            self._unmapped.add(name)
            return name
        return role

    @property
    def complete(self) -> bool:
        return self._asked == set(self._nets.values())

    def finish(self, rs: RuleSet) -> RuleSet:
        """`rs`, whose values went through addr() and iface(), with the record of
        what moved: address_map, iface_map and notes."""
        notes = list(rs.notes) + self.notes
        if self._unmapped:
            notes.append(f"interfaces without a role stay literal and never match in the "
                         f"testbed: {', '.join(sorted(self._unmapped))}")
        texts = self._texts
        pairs = tuple((_text(o), texts.get(m) or _text(m))
                      for o, m in sorted(self.mapping.items()))
        return replace(rs, address_map=rs.address_map + pairs,
                       iface_map=rs.iface_map + tuple(sorted(self.roles.items())),
                       notes=tuple(notes))

    def apply(self, rs: RuleSet) -> RuleSet:
        """`rs` (whose networks the plan was made from) moved."""
        return self.finish(_apply(rs, self))


def reverse(rs: RuleSet, addr: str) -> str:
    """The original address (or network) of testbed address `addr`, in the form
    it is given; `addr` itself when remap() did not move it."""
    a = _parse(addr)
    best = None
    for orig, mapped in rs.address_map:
        m = _parse(mapped)
        if m[0] == a[0] and m[2] <= a[2] and \
                a[1] >> (_WIDTH[a[0]] - m[2]) == m[1] >> (_WIDTH[a[0]] - m[2]):
            if best is None or m[2] > best[1][2]:
                best = (orig, m)
    if best is None:
        return addr
    orig, m = best
    o = _parse(orig)
    if a[1:] == m[1:]:
        result = o
    else:
        result = (o[0], o[1] + (a[1] - m[1]), a[2])
    return _text(result) if "/" in addr else _addr_text(result[0], result[1])


def parse_iface_map(text: str) -> dict[str, str]:
    """`eth0=client,eth1=server` as a dict; an empty text is an empty map."""
    out: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, sep, role = item.partition("=")
        name, role = name.strip(), role.strip()
        if not sep or not name or role not in ("client", "server"):
            raise RuleSetError(f"interface map: {item!r} is not NAME=client or "
                               f"NAME=server")
        if name in out:
            raise RuleSetError(f"interface map: {name} given twice")
        out[name] = role
    return out


# --- addresses as integers ---------------------------------------------------------

def _parse(text: str) -> Net:
    addr, sep, plen = text.partition("/")
    version = 6 if ":" in addr else 4
    try:
        x = int.from_bytes(socket.inet_pton(_AF[version], addr), "big")
        n = int(plen) if sep else _WIDTH[version]
    except (OSError, ValueError):
        raise RuleSetError(f"not an address or prefix: {text!r}") from None
    w = _WIDTH[version]
    if not 0 <= n <= w:
        raise RuleSetError(f"not an address or prefix: {text!r}")
    return version, x & (((1 << w) - 1) ^ ((1 << (w - n)) - 1)), n


def _addr_text(version: int, x: int) -> str:
    if version == 4:
        return socket.inet_ntop(socket.AF_INET, x.to_bytes(4, "big"))
    return str(ipaddress.IPv6Address(x))   # the model's canonical IPv6 text


def _text(n: Net) -> str:
    return f"{_addr_text(n[0], n[1])}/{n[2]}"


def _span(n: Net) -> tuple[int, int]:
    size = 1 << (_WIDTH[n[0]] - n[2])
    return n[1], n[1] + size - 1


def _collect(rs: RuleSet) -> set[str]:
    """Every network the rule set names (matches, set elements, NAT, probes), as
    written."""
    texts: set[str] = set()
    for t in rs.tables:
        for s in t.sets:
            for i, k in enumerate(s.keys):
                if k == "addr":
                    texts.update(str(e[i]) for e in s.elements)
            if s.interval and s.keys == ("addr",):
                texts.update(_hulls(str(e[0]) for e in s.elements))
        for c in t.chains:
            for r in c.rules:
                m = r.match
                if m.src:
                    texts.add(m.src.net)
                if m.dst:
                    texts.add(m.dst.net)
                if r.action.addr:
                    texts.add(r.action.addr)
    for p in _packets(rs):
        texts.update((p.saddr, p.daddr))
    return texts


def _hulls(texts: Iterable[str]) -> list[str]:
    """The smallest network holding each run of adjacent networks among `texts`
    (an address range the importer wrote as the prefixes covering it). In the
    plan, it moves such a run as one block, by one offset: the range stays a
    range, as the file's own `a-b` moved address by address says it is."""
    nets = sorted(_parse(x) for x in texts)
    out, run = [], []
    for n in nets + [None]:
        if n is not None and run and run[-1][0] == n[0] and _span(run[-1])[1] + 1 == n[1]:
            run.append(n)
            continue
        if len(run) > 1:
            v, lo, hi = run[0][0], run[0][1], _span(run[-1])[1]
            plen = _WIDTH[v] - (lo ^ hi).bit_length()
            out.append(_text((v, lo >> (_WIDTH[v] - plen) << (_WIDTH[v] - plen), plen)))
        run = [n] if n is not None else []
    return out


def _packets(rs: RuleSet) -> list[Packet]:
    out = [p for pr in rs.probes for p in (pr.packet, pr.translated) if p]
    return out + [rs.flow] if rs.flow else out


def _classify(nets: list[Net], version: int) -> tuple[list[Net], list[Net]]:
    """The networks to move (by address, a network before those inside it), and
    those kept because they hold the whole range."""
    blo, bhi = _span(_parse(str(BENCH[version])))
    w = _WIDTH[version]
    move, wide = [], []
    for n in nets:
        lo = n[1]
        hi = lo + (1 << (w - n[2])) - 1
        if hi < blo or lo > bhi:
            move.append(n)
        elif lo <= blo and hi >= bhi:
            wide.append(n)
    move.sort()     # one version: by address, then prefix length
    return move, sorted(wide)


# --- the plan ----------------------------------------------------------------------

class _Node:
    """A network to move, with those it holds. `runs` groups its children into
    runs of equal size, so that those not bigger than a cap, which always get a
    block of their own size, are packed in one step."""
    __slots__ = ("net", "size", "children", "runs", "need")

    def __init__(self, net: Net, size: int):
        self.net, self.size, self.children, self.need = net, size, [], size
        self.runs: list[tuple[int, list[_Node]]] = []


def _runs(nodes: list[_Node]) -> list[tuple[int, list[_Node]]]:
    out: list[tuple[int, list[_Node]]] = []
    for n in nodes:
        if out and out[-1][0] == n.size:
            out[-1][1].append(n)
        else:
            out.append((n.size, [n]))
    return out


def _plan(move: list[Net], all_nets: list[Net], version: int) -> dict[Net, Net]:
    if not move:
        return {}
    w = _WIDTH[version]
    blo, bhi = _span(_parse(str(BENCH[version])))
    # The links and the addresses already inside the range stay free for them.
    taken = [_span(_parse(x)) for x in LINKS[version]]
    taken += [_span(n) for n in all_nets if blo <= n[1] <= bhi]
    reserved: list[list[int]] = []
    for lo, hi in sorted(taken):
        if reserved and lo <= reserved[-1][1] + 1:
            reserved[-1][1] = max(reserved[-1][1], hi)
        else:
            reserved.append([lo, hi])

    roots: list[_Node] = []
    stack: list[tuple[int, _Node]] = []   # (last address, node)
    for n in move:   # sorted by address, a network before those inside it
        size = 1 << (w - n[2])
        node = _Node(n, size)
        while stack and stack[-1][0] < n[1]:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((n[1] + size - 1, node))
    todo = list(roots)
    while todo:
        node = todo.pop()
        if node.children:
            node.runs = _runs(node.children)
            todo.extend(node.children)
    root_runs = _runs(roots)

    def fits(cap: int) -> bool:
        return _fits(root_runs, cap, blo, bhi, reserved)

    # The largest cap that fits, by bisection over powers of two: a smaller cap
    # never needs more room.
    top = (bhi - blo + 1).bit_length() - 1
    good = top
    if not fits(1 << top):
        if not fits(1):
            raise RuleSetError(f"{len(move)} distinct IPv{version} networks do not fit "
                               f"into {BENCH[version]} apart from the testbed's links")
        good, bad = 0, top
        while bad - good > 1:
            mid = (good + bad) // 2
            if fits(1 << mid):
                good = mid
            else:
                bad = mid
    cap = 1 << good
    fits(cap)   # sets the need of every node bigger than the cap, for this cap
    out: dict[Net, Net] = {}
    for r, base in zip(roots, _place(roots, cap, blo, reserved)):
        _assign(r, base, cap, w, out)
    return out


def _need(node: _Node, cap: int) -> int:
    """The block size `node`, bigger than cap, gets under cap (set on every node
    below it that is bigger than cap too)."""
    packed = covered = 0
    for s, group in node.runs:
        if s <= cap:
            packed = -(-packed // s) * s + len(group) * s
        else:
            for c in group:
                cs = _need(c, cap)
                packed = -(-packed // cs) * cs + cs
        covered += len(group) * s
    size = 1 << (packed - 1).bit_length() if packed else 1
    if size == packed and covered < node.size:
        size *= 2   # room for the node's own addresses outside its children
    node.need = min(max(cap, size), node.size)
    return node.need


def _next_free(cursor: int, s: int, reserved: list[list[int]], j: int) -> tuple[int, int, int]:
    """(start, reserved index, blocks of size s that fit from start before the next
    reserved range, -1 for no limit): the first start at or after `cursor` on a
    boundary of s whose block misses the reserved ranges."""
    while True:
        cursor = -(-cursor // s) * s
        while j < len(reserved) and reserved[j][1] < cursor:
            j += 1
        if j == len(reserved):
            return cursor, j, -1
        room = (reserved[j][0] - cursor) // s
        if room > 0:
            return cursor, j, room
        cursor = reserved[j][1] + 1


def _fits(root_runs: list[tuple[int, list[_Node]]], cap: int, blo: int, bhi: int,
          reserved: list[list[int]]) -> bool:
    """Whether the roots, in order, fit into [blo, bhi] under cap."""
    cursor, j = blo, 0
    for s, group in root_runs:
        if s <= cap:
            k = len(group)
            while k:
                cursor, j, room = _next_free(cursor, s, reserved, j)
                take = k if room < 0 else min(k, room)
                cursor += take * s
                k -= take
        else:
            for r in group:
                need = _need(r, cap)
                cursor, j, _ = _next_free(cursor, need, reserved, j)
                cursor += need
        if cursor - 1 > bhi:
            return False
    return True


def _place(roots: list[_Node], cap: int, blo: int, reserved: list[list[int]]) -> list[int]:
    """Block bases for the roots in order (they fit: _fits said so)."""
    out, cursor, j = [], blo, 0
    for r in roots:
        s = r.size if r.size <= cap else r.need
        cursor, j, _ = _next_free(cursor, s, reserved, j)
        out.append(cursor)
        cursor += s
    return out


def _assign(node: _Node, base: int, cap: int, w: int, out: dict[Net, Net]) -> None:
    version = node.net[0]
    if node.size <= cap or node.need == node.size:
        # The whole subtree moves by one offset, host bits and prefixes kept.
        shift = base - node.net[1]
        todo = [node]
        while todo:
            n = todo.pop()
            out[n.net] = (version, n.net[1] + shift, n.net[2])
            todo.extend(n.children)
        return
    out[node.net] = (version, base, w - node.need.bit_length() + 1)
    cursor = base
    for c in node.children:
        need = c.size if c.size <= cap else c.need
        cursor = -(-cursor // need) * need
        _assign(c, cursor, cap, w, out)
        cursor += need


# --- applying it -------------------------------------------------------------------

def _apply(rs: RuleSet, mover: Remapper) -> RuleSet:
    addr = mover.addr

    def iface(f: Iface | None) -> Iface | None:
        if f is None:
            return None
        name = mover.iface(f.name)
        return f if name == f.name else Iface(name, f.negate)

    # By identity: importers share one Prefix object per address text, and the
    # rule set keeps every key alive while this runs.
    prefixes: dict[int, Prefix] = {}

    def prefix(p: Prefix | None) -> Prefix | None:
        if p is None:
            return None
        out = prefixes.get(id(p))
        if out is None:
            net = addr(p.net)
            out = prefixes[id(p)] = p if net == p.net else Prefix(net, p.negate)
        return out

    def match(m: Match) -> Match:
        iif, oif, src, dst = iface(m.iif), iface(m.oif), prefix(m.src), prefix(m.dst)
        if iif is m.iif and oif is m.oif and src is m.src and dst is m.dst:
            return m
        return evolve(m, iif=iif, oif=oif, src=src, dst=dst)

    def action(a: Action) -> Action:
        return evolve(a, addr=addr(a.addr)) if a.addr else a

    def packet(p: Packet | None) -> Packet | None:
        return evolve(p, saddr=addr(p.saddr), daddr=addr(p.daddr)) if p else None

    matches: dict[int, Match] = {}
    tables = []
    for t in rs.tables:
        chains = []
        for c in t.chains:
            rules = []
            for r in c.rules:
                m = matches.get(id(r.match))
                if m is None:
                    m = matches[id(r.match)] = match(r.match)
                a = action(r.action)
                rules.append(r if m is r.match and a is r.action
                             else evolve(r, match=m, action=a))
            device = mover.iface(c.device) if c.device else None
            chains.append(replace(c, rules=tuple(rules), device=device))
        sets = []
        for s in t.sets:
            idx = [i for i, k in enumerate(s.keys) if k == "addr"]
            elements = tuple(tuple(addr(str(x)) if i in idx else x for i, x in enumerate(e))
                             for e in s.elements) if idx else s.elements
            sets.append(replace(s, elements=elements))
        tables.append(Table(t.family, t.name, tuple(chains), tuple(sets)))
    probes = tuple(Probe(p.name, packet(p.packet), p.forward, p.rule, packet(p.translated))
                   for p in rs.probes)
    return replace(rs, tables=tuple(tables), probes=probes, flow=packet(rs.flow))
