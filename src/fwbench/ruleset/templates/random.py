"""Seeded random rule sets, awkward on purpose, for verdict-equivalence tests.

`random_ruleset(n_rules=, seed=)` builds exactly n_rules rules that only
iptables-expressible constructs make up, so every backend family can load them:
one filter table (family ip or ip6) with FORWARD (priority 0, a random policy)
and up to four user chains reached by jumps and gotos (an acyclic graph: a chain
only enters chains after it), and sometimes a mangle table's PREROUTING (-150)
that sets marks the filter rules then match. The matches overlap and shadow each
other on purpose: nested prefixes around the testbed's hosts, negated addresses,
ports and interfaces, port ranges and lists, ICMP types, marks, named sets of
prefixes, of hosts and of address . protocol . port; the actions mix accept, drop,
reject, counter, mark, jump, goto and return. Every address is in 198.18.0.0/15
(2001:2::/48). User chains are c1..c4; rule ids are `<table>-<n>` counted over the
table's chains in iptables-save's order, as the iptables-save importer counts.

The measured flow (client 198.18.0.2 to server 198.19.0.2, UDP port 5201) is
accepted by construction: FORWARD ends with a rule accepting it, and walking the
flow through the generated rules, every rule that would drop or reject it (or
goto from FORWARD into a chain that ends at the policy) gets one more condition
the flow fails. That walk also gives the rule that accepts the flow, the rule set's
flow_rule. The walk judges only the flow's own packet against these constructs;
the reference evaluator (ruleset/evaluate.py) is the judge of everything else.
"""
from __future__ import annotations

import ipaddress
import random
from dataclasses import replace

from fwbench import addresses
from fwbench.ruleset.model import (ACCEPT, CLIENT, SERVER, Action, Chain, Iface, Match,
                                   Packet, Ports, Prefix, Probe, Rule, RuleSet, RuleSetError,
                                   Set, SetRef, Table, validate)

FLOW_PORT = 5201
PROBE_SPORT = 40404
MAX_CHAINS = 4
# Interface names no testbed interface has (they never match; negated, always).
ODD_IFACES = ("lo", "eth9", "veth+")
MARKS = (1, 2, 3, 0x10, 0x100)
TERMINAL = ("accept", "drop", "reject", "goto")


class _Space:
    """One IP version's addresses: the testbed's hosts and prefixes around them."""

    def __init__(self, version: int):
        self.version = version
        self.client, self.server = addresses.CLIENT[version], addresses.SERVER[version]
        self.base = addresses.BENCH[version]
        self.bits = self.base.max_prefixlen
        self.block_len = 24 if version == 4 else 64
        client_link, server_link = addresses.LINKS[version]
        # Nested prefixes around the testbed's hosts, of lengths that make them
        # overlap in every way: the client's own small block and its neighbour, the
        # link, a block holding it, each side, the whole range.
        small = 30 if version == 4 else 126
        own = ipaddress.ip_network((self.client, small), strict=False)
        next_to = ipaddress.ip_network((int(own.network_address) + own.num_addresses, small))
        holding = client_link.supernet(new_prefix=23 if version == 4 else 62)
        server_small = ipaddress.ip_network((self.server, 28 if version == 4 else 124),
                                            strict=False)
        stranger = ipaddress.ip_network(addresses.STRANGER[version])
        if version == 4:
            self.fixed = tuple(str(n) for n in (
                ipaddress.ip_network(self.client), ipaddress.ip_network(self.server),
                client_link, server_link, addresses.CLIENT_SIDE[4],
                addresses.SERVER_SIDE[4], self.base, holding, own, next_to, server_small,
                stranger))
        else:
            self.fixed = tuple(str(n) for n in (
                ipaddress.ip_network(self.client), ipaddress.ip_network(self.server),
                client_link, server_link, self.base, holding, own, next_to, server_small,
                stranger))
        self.flow_sources = (self.client, self.fixed[2], str(self.base))
        self.icmp = "icmp" if version == 4 else "icmpv6"
        self.icmp_types = (0, 3, 8, 11) if version == 4 else (1, 3, 128, 129)

    def block(self, k: int) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        """The k-th /24 (/64) of the range."""
        size = 1 << (self.bits - self.block_len)
        return ipaddress.ip_network((int(self.base.network_address) + k * size,
                                     self.block_len))

    def block_of(self, addr: str) -> int:
        return (int(ipaddress.ip_address(addr)) - int(self.base.network_address)) \
            >> (self.bits - self.block_len)

    @property
    def blocks(self) -> int:
        return 1 << (self.block_len - self.base.prefixlen)

    def inside(self, rng: random.Random, block: int, min_len: int | None = None) -> str:
        """A random prefix inside block `block`, as network text."""
        net = self.block(block)
        length = rng.randint(min_len or self.block_len, self.bits)
        span = 1 << (self.bits - length)
        offset = rng.randrange(net.num_addresses // span) * span
        return str(ipaddress.ip_network((int(net.network_address) + offset, length)))

    def prefix(self, rng: random.Random) -> str:
        if rng.random() < 0.6:
            return rng.choice(self.fixed)
        return self.inside(rng, rng.randrange(self.blocks))


class _Gen:
    def __init__(self, rng: random.Random, version: int):
        self.rng, self.sp = rng, _Space(version)
        self.marks = False
        self.sets: list[Set] = []

    # --- matches -------------------------------------------------------------

    def _negate(self, p: float = 0.2) -> bool:
        return self.rng.random() < p

    def _iface(self) -> Iface:
        r = self.rng
        name = r.choice((CLIENT, CLIENT, SERVER, SERVER) + ODD_IFACES)
        return Iface(name, self._negate(0.25))

    def _ports(self) -> Ports:
        r = self.rng
        kind = r.random()
        if kind < 0.45:
            return Ports.of(r.choice((FLOW_PORT, FLOW_PORT, FLOW_PORT - 1, FLOW_PORT + 1,
                                      53, 80, 443, r.randint(1, 65535))),
                            negate=self._negate())
        if kind < 0.75:
            lo = r.choice((FLOW_PORT - r.randint(0, 300), r.randint(1, 60000), 1024))
            return Ports.of((lo, min(65535, lo + r.choice((1, 10, 300, 5000)))),
                            negate=self._negate())
        # A list: sorted, disjoint and not adjacent (nft refuses overlapping
        # elements of an anonymous set), some items ranges; at most 10 ports for
        # multiport's 15.
        points = sorted(r.sample(range(1, 65000, 4), r.randint(2, 5)))
        if r.random() < 0.5 and FLOW_PORT not in points:
            points = sorted(set(points[:-1]) | {FLOW_PORT})
        items: list[int | tuple[int, int]] = []
        for k, p in enumerate(points):
            nxt = points[k + 1] if k + 1 < len(points) else 65537
            hi = min(65535, nxt - 2, p + r.randint(1, 100))
            items.append((p, hi) if r.random() < 0.3 and hi > p else p)
        return Ports.of(*items, negate=self._negate())

    def _mark_pair(self) -> tuple[int, int]:
        value = self.rng.choice(MARKS)
        masks = [0xFFFFFFFF] + ([0xFF] if value <= 0xFF else []) + \
            ([0xF0] if value & ~0xF0 == 0 else [])
        return value, self.rng.choice(masks)

    def match(self, *, oif: bool = True, sets: bool = True) -> Match:
        """A random match with at least one condition: a match-all rule that
        accepts or drops early would leave every rule after it dead."""
        while True:
            m = self._match(oif=oif, sets=sets)
            if m != Match():
                return m

    def _match(self, *, oif: bool, sets: bool) -> Match:
        r, sp = self.rng, self.sp
        kw: dict = {}
        if r.random() < 0.45:
            kw["src"] = Prefix.of(sp.prefix(r), self._negate())
        if r.random() < 0.45:
            kw["dst"] = Prefix.of(sp.prefix(r), self._negate())
        if r.random() < 0.35:
            kw["iif"] = self._iface()
        if oif and r.random() < 0.2:
            kw["oif"] = self._iface()
        if r.random() < 0.6:
            proto = r.choices(("tcp", "udp", sp.icmp), (3, 4, 1.5))[0]
            kw["proto"] = proto
            if proto != sp.icmp:
                if r.random() < 0.55:
                    kw["dport"] = self._ports()
                if r.random() < 0.15:
                    kw["sport"] = self._ports()
            elif r.random() < 0.6:
                kw["icmp_type"] = r.choice(sp.icmp_types)
        if self.marks and r.random() < 0.15:
            kw["mark"], kw["mark_negate"] = self._mark_pair(), self._negate()
        # A port key looks at a port: not in an ICMP rule (nft refuses).
        usable = [s for s in self.sets if s.keys == ("addr",) or kw.get("proto") != sp.icmp]
        if sets and usable and r.random() < 0.15:
            s = r.choice(usable)
            if s.keys == ("addr",):
                fields = (r.choice(("saddr", "daddr")),)
            else:
                fields = r.choice((("daddr", "proto", "dport"), ("saddr", "proto", "sport")))
            # iptables (ipset) and the model differ on a port lookup of a packet
            # without ports once negated: negate it only where -p says tcp/udp.
            negate = self._negate() if s.keys == ("addr",) or \
                kw.get("proto") in ("tcp", "udp") else False
            kw["sets"] = (SetRef(s.name, fields, negate),)
        return Match(**kw)

    def narrow(self, m: Match) -> bool:
        """Whether `m` singles out a small part of the traffic: a host or subnet,
        a few ports, an ICMP type or a set's members."""
        def small(p: Prefix | None) -> bool:
            return p is not None and not p.negate and \
                p.network.prefixlen >= self.sp.block_len
        ports = [p for p in (m.sport, m.dport) if p is not None and not p.negate]
        return small(m.src) or small(m.dst) or m.icmp_type is not None or \
            any(sum(hi - lo + 1 for lo, hi in p.ranges) <= 1000 for p in ports) or \
            any(not ref.negate for ref in m.sets)

    def make_sets(self) -> None:
        r, sp = self.rng, self.sp
        if r.random() < 0.5:
            # Prefixes from distinct blocks never overlap (nft refuses overlapping
            # intervals); sometimes one is in the client's or the server's link.
            blocks = r.sample(range(sp.blocks), r.randint(1, 6))
            if r.random() < 0.5:
                b = sp.block_of(r.choice((sp.client, sp.server)))
                if b not in blocks:
                    blocks[0] = b
            elems = tuple(sorted({(sp.inside(r, b),) for b in blocks}))
            self.sets.append(Set("nets", ("addr",), elems, sp.version, interval=True))
        if r.random() < 0.3:
            hosts = {sp.inside(r, r.randrange(sp.blocks), sp.bits).split("/")[0]
                     for _ in range(r.randint(1, 6))}
            if r.random() < 0.5:
                hosts.add(r.choice((sp.client, sp.server)))
            self.sets.append(Set("hosts", ("addr",), tuple(sorted((h,) for h in hosts)),
                                 sp.version))
        if r.random() < 0.4:
            elems = {(sp.inside(r, r.randrange(sp.blocks), sp.bits).split("/")[0],
                      r.choice(("tcp", "udp")), r.choice((FLOW_PORT, 53, 80, 443, 40404)))
                     for _ in range(r.randint(1, 6))}
            if r.random() < 0.5:
                elems.add((sp.server, "udp", FLOW_PORT))
            if r.random() < 0.3:
                elems.add((sp.client, "udp", PROBE_SPORT))
            self.sets.append(Set("svc", ("addr", "proto", "port"), tuple(sorted(elems)),
                                 sp.version))

    # --- actions -----------------------------------------------------------------

    def mark_action(self) -> Action:
        value, mask = self._mark_pair()
        return Action("mark", mark=value, mark_mask=mask)

    def action(self, m: Match, chain: int, n_chains: int) -> Action:
        r = self.rng
        weights = {"accept": 3, "drop": 3, "reject": 1, "counter": 1}
        if self.marks:
            weights["mark"] = 1
        if chain < n_chains:
            weights |= {"jump": 1.2, "goto": 0.6}
        if chain > 0:
            weights["return"] = 0.8
        kind = r.choices(list(weights), list(weights.values()))[0]
        if kind in ("jump", "goto"):
            return Action(kind, chain=_chain_name(r.randint(chain + 1, n_chains)))
        if kind == "mark":
            return self.mark_action()
        if kind == "reject" and m.proto == "tcp" and r.random() < 0.5:
            return Action("reject", reject_with="tcp-reset")
        return Action(kind)

    # --- the flow --------------------------------------------------------------------

    def exclude(self, m: Match, flow: Packet) -> Match:
        """`m` with one more condition the flow fails, whatever its mark."""
        r, sp = self.rng, self.sp
        options = []
        if m.src is None:
            options.append(lambda: replace(m, src=self._missing(flow.saddr)))
        if m.dst is None:
            options.append(lambda: replace(m, dst=self._missing(flow.daddr)))
        if m.iif is None:
            options.append(lambda: replace(m, iif=r.choice((Iface(SERVER),
                                                            Iface(CLIENT, negate=True)))))
        if m.proto is None:
            # A port lookup needs a protocol with ports.
            ported = any(f in ("sport", "dport") for ref in m.sets for f in ref.fields)
            options.append(lambda: replace(m, proto="tcp" if ported
                                           else r.choice(("tcp", sp.icmp))))
        if not options:
            options.append(lambda: replace(m, src=self._missing(flow.saddr)))
        return r.choice(options)()

    def _missing(self, addr: str) -> Prefix:
        """A prefix test that `addr` fails: a prefix without it, or one with it
        negated."""
        p = Prefix.of(self.sp.prefix(self.rng))
        return Prefix(p.net, ipaddress.ip_address(addr) in p.network)


def _chain_name(k: int) -> str:
    return "FORWARD" if k == 0 else f"c{k}"


def _hits(m: Match, p: Packet, mark: int, sets: dict[str, Set]) -> bool:
    """Whether `m` matches packet `p` carrying `mark`, for the constructs the
    generator uses (interfaces by role, prefixes, ports, ICMP types, marks, sets)."""
    def iface(i: Iface | None, side: str) -> bool:
        if i is None:
            return True
        return (i.name == {"client": CLIENT, "server": SERVER}[side]) != i.negate

    def prefix(x: Prefix | None, addr: str) -> bool:
        return x is None or (ipaddress.ip_address(addr) in x.network) != x.negate

    if not (iface(m.iif, p.iif) and iface(m.oif, p.oif)
            and prefix(m.src, p.saddr) and prefix(m.dst, p.daddr)):
        return False
    if m.proto is not None and m.proto != p.proto:
        return False
    if m.sport and not m.sport.contains(p.sport):
        return False
    if m.dport and not m.dport.contains(p.dport):
        return False
    if m.icmp_type is not None and m.icmp_type != p.icmp_type:
        return False
    if m.mark is not None and ((mark & m.mark[1]) == m.mark[0]) == m.mark_negate:
        return False
    for ref in m.sets:
        key = tuple(getattr(p, f) for f in ref.fields)
        if _member(sets[ref.name], key) == ref.negate:
            return False
    return True


def _member(s: Set, key: tuple) -> bool:
    for elem in s.elements:
        if all(ipaddress.ip_address(v) in ipaddress.ip_network(e) if k == "addr" else v == e
               for k, e, v in zip(s.keys, elem, key)):
            return True
    return False


def _set_mark(mark: int, a: Action) -> int:
    return (mark & ~a.mark_mask & 0xFFFFFFFF) | (a.mark & a.mark_mask)


def _settle(gen: _Gen, chains: dict[str, list[Rule]], mangle: list[Rule], flow: Packet,
            sets: dict[str, Set]) -> str:
    """Walk the flow through mangle then FORWARD, making every rule that would
    drop, reject or lose it miss it; the id of the rule that accepts it."""
    mark = flow.mark
    for r in mangle:   # marks, counters and accepts only
        if _hits(r.match, flow, mark, sets):
            if r.action.kind == "accept":
                break
            if r.action.kind == "mark":
                mark = _set_mark(mark, r.action)
    stack: list[tuple[str, int]] = []
    name, i = "FORWARD", 0
    base_goto: tuple[int, int] | None = None   # FORWARD's goto taken, the mark then

    def undo_goto() -> tuple[str, int, int]:
        # The flow left FORWARD by a goto and reached the policy: that goto misses.
        assert base_goto is not None
        k, m = base_goto
        fwd = chains["FORWARD"]
        fwd[k] = replace(fwd[k], match=gen.exclude(fwd[k].match, flow))
        return "FORWARD", k, m

    while True:
        rules = chains[name]
        if i >= len(rules):
            if stack:
                name, i = stack.pop()
                continue
            name, i, mark = undo_goto()
            base_goto = None
            continue
        r = rules[i]
        if not _hits(r.match, flow, mark, sets):
            i += 1
            continue
        a = r.action
        if a.kind == "accept":
            return r.id
        if a.kind in ("drop", "reject"):
            rules[i] = replace(r, match=gen.exclude(r.match, flow))
        elif a.kind == "jump":
            stack.append((name, i + 1))
            name, i = a.chain, 0
        elif a.kind == "goto":
            if not stack and name == "FORWARD":
                base_goto = (i, mark)
            name, i = a.chain, 0
        elif a.kind == "return":
            if stack:
                name, i = stack.pop()
            else:
                name, i, mark = undo_goto()
                base_goto = None
        else:
            if a.kind == "mark":
                mark = _set_mark(mark, a)
            i += 1


def random_ruleset(*, n_rules: int = 100, seed: int = 0, version: int = 4) -> RuleSet:
    """Exactly `n_rules` rules, the same for the same (n_rules, seed, version)."""
    if n_rules < 1:
        raise RuleSetError(f"rule count must be at least 1, got {n_rules}")
    if version not in (4, 6):
        raise RuleSetError(f"IP version must be 4 or 6, got {version}")
    rng = random.Random(seed)
    gen = _Gen(rng, version)
    sp = gen.sp
    family = "ip" if version == 4 else "ip6"
    flow = Packet(version, "client", sp.client, sp.server, "udp", PROBE_SPORT, FLOW_PORT)

    n_mangle = rng.randint(1, max(1, n_rules // 5)) if n_rules >= 5 and rng.random() < 0.5 \
        else 0
    n_filter = n_rules - n_mangle
    n_chains = rng.randint(0, min(MAX_CHAINS, (n_filter - 1) // 2))
    gen.marks = n_mangle > 0 or rng.random() < 0.3
    gen.make_sets()

    # Per chain: one rule of its own at least (user chains), the rest spread at
    # random; then one entry (jump or goto) per user chain from a chain before it.
    counts = [0] + [1] * n_chains
    for _ in range(n_filter - 1 - 2 * n_chains):
        counts[rng.randrange(n_chains + 1)] += 1
    bodies: list[list[tuple[Match, Action]]] = []
    for c, count in enumerate(counts):
        body: list[tuple[Match, Action]] = []
        for _ in range(count):
            if body and rng.random() < 0.1:
                m = rng.choice(body)[0]      # shadowed by, or shadowing, a twin
                a = gen.action(m, c, n_chains)
            else:
                m = gen.match()
                a = gen.action(m, c, n_chains)
                # Broad verdicts stay, but rare: a few of them early decide nearly
                # every packet, and the rules after them would go untested.
                while a.kind in TERMINAL and not gen.narrow(m) and rng.random() < 0.85:
                    m = gen.match()
                    if a.reject_with == "tcp-reset" and m.proto != "tcp":
                        a = Action("reject")
            body.append((m, a))
        bodies.append(body)
    for c in range(1, n_chains + 1):
        parent = rng.randrange(c)
        kind = "goto" if rng.random() < 0.25 else "jump"
        bodies[parent].insert(rng.randint(0, len(bodies[parent])),
                              (gen.match(), Action(kind, chain=_chain_name(c))))
    # The flow's own accept, generalised at random, ends FORWARD.
    bodies[0].append((Match(
        src=Prefix.of(rng.choice(sp.flow_sources)),
        dst=Prefix.of(sp.server) if rng.random() < 0.7 else None,
        proto="udp",
        dport=Ports.of(rng.choice((FLOW_PORT, (FLOW_PORT, FLOW_PORT + 9), (5000, 5999))))),
        ACCEPT))

    n = 0
    chains: dict[str, list[Rule]] = {}
    for c, body in enumerate(bodies):
        rules = []
        for m, a in body:
            n += 1
            rules.append(Rule(f"filter-{n}", m, a, counter=rng.random() >= 0.15))
        chains[_chain_name(c)] = rules
    mangle = []
    for k in range(1, n_mangle + 1):
        m = gen.match(oif=False, sets=False)
        a = rng.choices((gen.mark_action(), Action("counter"), ACCEPT), (6, 1, 0.4))[0]
        mangle.append(Rule(f"mangle-{k}", m, a))

    sets = {s.name: s for s in gen.sets}
    flow_rule = _settle(gen, chains, mangle, flow, sets)
    for rules in chains.values():
        for k, r in enumerate(rules):
            if r.id == flow_rule and not r.counter:
                rules[k] = replace(r, counter=True)   # the probe reads its counter

    tables = []
    if mangle:
        tables.append(Table(family, "mangle", (Chain(
            "PREROUTING", tuple(mangle), hook="prerouting", priority=-150, type="filter",
            policy="accept"),)))
    policy = rng.choice(("accept", "drop"))
    filter_chains = tuple(
        Chain(name, tuple(rules), hook="forward", priority=0, policy=policy)
        if name == "FORWARD" else Chain(name, tuple(rules))
        for name, rules in chains.items())
    tables.append(Table(family, "filter", filter_chains, tuple(gen.sets)))
    probes = (Probe("test flow", flow, True, flow_rule),)
    return validate(RuleSet(f"random-{seed}", tuple(tables), probes, flow=flow,
                            flow_rule=flow_rule, size=n_rules, ipt_prefix="fwb_",
                            notes=(f"random rule set: seed {seed}, {n_rules} rules, "
                                   f"IPv{version}",)))
