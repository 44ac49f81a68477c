"""The reference evaluator: what netfilter (Linux 6.x) does with one packet the
firewall forwards, computed from the rule-set model alone.

Verdict equivalence is checked against it: the same packet corpus goes through
every backend in the testbed, and each backend's verdicts and per-rule counters
must agree with `evaluate` / `expected_counts`.

The path of a forwarded packet: netdev ingress chains (iif is all they know; a
chain with a device sees only the packets arriving on it), then prerouting,
forward and postrouting, then netdev egress chains (oif is all they know; a
chain sees only the packets leaving by its device, as postrouting left them).
At each hook every base chain of every table whose family applies (ip and inet
for IPv4, ip6 and inet for IPv6, netdev for both) runs in priority order. An
accept ends one base chain only; drop and reject end everything; falling off a
base chain, or `return` in it, applies its policy. Within a chain the first
matching rule with a terminal action decides; jump pushes a frame, goto replaces
the current one, return and falling off a user chain pop.

Where the kernel's behaviour is less obvious (each measured on 6.18):
- Equal priorities: the kernel inserts a new hook function before those of the
  same priority already registered, so of two chains at one priority the one
  loaded LATER runs first; loading follows the model's table and chain order.
- NAT chains do not run at their own priority: every nat chain of a hook hangs off
  the NAT core's one hook function at -100 (prerouting) / 100 (postrouting), in
  priority order among themselves. A nat chain at priority 50 still rewrites the
  destination before a filter chain at 0 sees it. The first nat chain that
  translates ends the NAT walk at that hook.
- Conntrack attaches at prerouting priority -200: chains before it (and netdev
  ingress) see `ct state` as invalid; notrack there makes the packet untracked for
  every later chain, and NAT skips it.

Random choice (iptables' statistic --mode random, nft's numgen random, alone or
as a verdict map's key) is exact: a packet that reaches one has several possible
verdicts, each with its probability (Verdict.outcomes), computed from the
kernel's own arithmetic (statistic: a 31-bit threshold on a random u32's low 31
bits; numgen: reciprocal_scale(random u32, mod), so the buckets differ by one in
2**32). A rule set without one is evaluated as before, at no extra cost.

A packet counter's choice (statistic --mode nth, numgen inc) depends on how many
packets reached the rule before, since it loaded: the reference cannot know it,
so a packet that reaches one gets both verdicts as allowed outcomes (weighted
1 : every - 1), and Verdict.counter_choice says that their shares are not a
distribution to test.

Connection marks (CONNMARK, ct mark) are exact for the packets `check` sends:
each opens its own connection (conntrack is flushed between rounds, no two
packets of a round share a flow), so its ct mark starts at 0 and what one chain
sets, a later chain of the same packet sees; a packet without a connection
(untracked, ICMP errors, chains before conntrack) has no ct mark, and neither a
ct mark match nor its negation matches it. What a connection's mark does to its
later packets is beyond a per-packet reference.

Limits, by design: a rate limit is as its bucket is at first, full: `limit`
and hashlimit's `upto` always match, `limit rate over` and hashlimit's `above`
never (a reference cannot model rates; which packets a spent bucket may decide
otherwise, RateLimits says), and a quota is as it is with bytes left (`quota
over` does not match; RateLimits covers its other state too). A payload string
match, which decides by a packet's payload, is refused (Unsupported, one line):
a verdict that would guess it would be no reference. NAT translates only a
connection's first packet (ct state new): conntrack rewrites later packets from
the connection's binding without running any nat chain, which a per-packet model
cannot know; a snat/dnat address range translates to its first address.
"""
from __future__ import annotations

import gc
import ipaddress
from fractions import Fraction
import weakref
from bisect import bisect_right
from collections import Counter
from functools import lru_cache
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Sequence

from fwbench import addresses
from fwbench.ruleset.model import (PROTO_NUMBERS, RANDOM_SCALE, ROLES,
                                   TESTBED_IPSEC, TESTBED_TCP_OPTIONS, Action, Attr, Chain,
                                   TcpOption,
                                   Iface, Match, Packet, Ports, Prefix, Rule, RuleSet,
                                   RuleSetError, Set, SetRef, Unsupported, jump_targets)

__all__ = ["Verdict", "Evaluator", "evaluate", "evaluate_all", "expected_counts",
           "DEFAULT_LOCAL", "FORWARD_HOOKS", "CompiledSet", "address_interval",
           "address_text", "port_interval", "rule_version", "iface_sides", "nat_address",
           "merge_ranges", "complement_ranges", "numgen_weights"]

# The firewall's own addresses in the testbed: masquerade takes the out-interface's.
DEFAULT_LOCAL: dict[int, dict[str, str]] = {
    v: {"client": addresses.FW_CLIENT_SIDE[v], "server": addresses.FW_SERVER_SIDE[v]}
    for v in (4, 6)
}
FORWARD_HOOKS = ("ingress", "prerouting", "forward", "postrouting", "egress")
_CONNTRACK_PRIORITY = -200
_NAT_PRIORITY = {"prerouting": -100, "postrouting": 100}
_OTHER = {"client": "server", "server": "client"}
_PROTO_NAMES = {v: k for k, v in PROTO_NUMBERS.items()}

# Action codes, compared in the inner loop.
_ACCEPT, _DROP, _REJECT, _JUMP, _GOTO, _RETURN = 0, 1, 2, 3, 4, 5
_DNAT, _SNAT, _MASQ, _NOP, _MARK, _NOTRACK, _VMAP = 6, 7, 8, 9, 10, 11, 12
_CTMARK, _SAVEMARK, _RESTOREMARK, _REDIRECT = 13, 14, 15, 16
_CODES = {"accept": _ACCEPT, "drop": _DROP, "reject": _REJECT, "jump": _JUMP,
          "goto": _GOTO, "return": _RETURN, "dnat": _DNAT, "snat": _SNAT,
          "masquerade": _MASQ, "counter": _NOP, "log": _NOP, "mark": _MARK,
          "notrack": _NOTRACK, "ct": _NOP, "vmap": _VMAP, "ctmark": _CTMARK,
          "savemark": _SAVEMARK, "restoremark": _RESTOREMARK, "redirect": _REDIRECT,
          "tcpmss": _NOP, "checksum": _NOP}
# The NAT status a translation gives the connection (conntrack's IPS_DST_NAT etc.).
_NAT_STATUS = {_DNAT: "dnat", _REDIRECT: "dnat", _SNAT: "snat", _MASQ: "snat"}
# The conntrack states of a packet that has a connection (and so a ct mark).
_TRACKED = frozenset({"new", "established", "related"})
# Chains shorter than this are walked rule by rule; longer ones get an index.
_INDEX_MIN = 16


@dataclass(frozen=True)
class Verdict:
    """What the firewall did with one packet."""
    forward: bool
    # The rule whose action decided: the drop/reject rule, or for a forwarded packet
    # the last accepting rule of a filter chain (a nat chain's when no filter chain
    # saw the packet). None when a policy decided; then `policy_of` names the chain.
    decided_by: str | None
    policy_of: str | None
    # Every rule the packet matched, in evaluation order, terminal or not (jumps,
    # marks, counters too), whether or not the rule asks for a counter.
    counted: tuple[str, ...]
    translated: Packet        # the packet as it leaves (or as far as it got)
    reason: str
    # Addressed to the firewall itself and accepted by its input hook: delivered
    # to it, not forwarded (`forward` is then False).
    local: bool = False
    # Translated by a fully-random masquerade or snat: the kernel chose the source
    # port, so any port in `translated` is as right as the one shown.
    sport_random: bool = False
    # The packet met a random choice: every verdict it may get, each with its
    # probability (most likely first; they sum to 1), this one the first of them.
    # Empty for a packet whose verdict is certain.
    outcomes: tuple[tuple[float, "Verdict"], ...] = ()
    # Some of the outcomes come from a packet counter's choice (nth), not a
    # random one: each is allowed, their shares are no distribution.
    counter_choice: bool = False

    @property
    def possible(self) -> tuple[tuple[float, "Verdict"], ...]:
        """Every verdict the packet may get, with its probability."""
        return self.outcomes or ((1.0, self),)


# --- compiling -----------------------------------------------------------------------

@lru_cache(maxsize=1 << 16)
def _addr_int(text: str) -> tuple[int, int]:
    """An address's (version, integer); ValueError if it is none. IPv4 is parsed
    here: ipaddress costs microseconds a call, and rule sets hold 100k of them."""
    parts = text.split(".")
    if len(parts) == 4 and all(p.isascii() and p.isdigit() and len(p) <= 3 and int(p) <= 255
                               and (p == "0" or p[0] != "0") for p in parts):
        a, b, c, d = map(int, parts)
        return 4, (a << 24) | (b << 16) | (c << 8) | d
    a = ipaddress.ip_address(text)
    return a.version, int(a)


@lru_cache(maxsize=1 << 16)
def address_interval(text: str) -> tuple[int, int, int, int | None]:
    """An address, prefix or `a-b` range -> (version, lo, hi, mask or None); the
    mask when the interval is a prefix."""
    try:
        if "-" in text:
            lo_t, hi_t = text.split("-", 1)
            v, lo = _addr_int(lo_t.strip())
            v2, hi = _addr_int(hi_t.strip())
            if v != v2 or hi < lo:
                raise ValueError
            size = hi - lo + 1
            bits = 32 if v == 4 else 128
            if size & (size - 1) == 0 and lo % size == 0:
                return v, lo, hi, ((1 << bits) - 1) ^ (size - 1)
            return v, lo, hi, None
        addr, _, plen = text.partition("/")
        v, a = _addr_int(addr.strip())
        bits = 32 if v == 4 else 128
        n = int(plen) if plen else bits
        if not 0 <= n <= bits:
            raise ValueError
        mask = ((1 << bits) - 1) ^ ((1 << (bits - n)) - 1)
        lo = a & mask
        return v, lo, lo | ((1 << (bits - n)) - 1), mask
    except ValueError:
        raise RuleSetError(f"not an address, prefix or range: {text!r}") from None


def address_text(version: int, value: int) -> str:
    if version == 4:
        return f"{value >> 24}.{(value >> 16) & 255}.{(value >> 8) & 255}.{value & 255}"
    return str(ipaddress.IPv6Address(value))


def port_interval(value) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        return int(value[0]), int(value[1])
    if isinstance(value, str) and "-" in value:
        lo, hi = value.split("-", 1)
        return int(lo), int(hi)
    return int(value), int(value)


def _proto_name(value) -> str:
    if isinstance(value, int):
        return _PROTO_NAMES.get(value, str(value))
    return str(value)


class CompiledSet:
    """A named set as hash tables: exact and prefix elements are found by masking
    the looked-up values with each prefix length the set holds; only elements with
    a true range (not a prefix) are scanned."""

    def __init__(self, s: Set):
        self.name = s.name
        self.version = s.version if "addr" in s.keys else None
        self.keys = s.keys
        # Elements as (lo, hi) for addresses and ports, a name for a protocol.
        self.elements: list[tuple] = []
        # shape (per key: None = exact, int = address mask) -> set of keys
        hashed: dict[tuple, set] = {}
        self.ranged: list[tuple[tuple[int, int] | str, ...]] = []
        for e in s.elements:
            shape, key, parts, ranged = [], [], [], False
            for kind, value in zip(s.keys, e):
                if kind == "addr":
                    v, lo, hi, mask = address_interval(str(value))
                    if v != s.version:
                        raise RuleSetError(f"set {s.name}: element {value} is not IPv{s.version}")
                    parts.append((lo, hi))
                    if lo == hi:
                        shape.append(None)
                        key.append(lo)
                    elif mask is not None:
                        shape.append(mask)
                        key.append(lo)
                    else:
                        ranged = True
                elif kind == "port":
                    lo, hi = port_interval(value)
                    parts.append((lo, hi))
                    if lo == hi:
                        shape.append(None)
                        key.append(lo)
                    else:
                        ranged = True
                else:
                    name = _proto_name(value)
                    parts.append(name)
                    shape.append(None)
                    key.append(name)
            self.elements.append(tuple(parts))
            if ranged:
                self.ranged.append(tuple(parts))
            else:
                hashed.setdefault(tuple(shape), set()).add(tuple(key))
        self.exact = hashed.pop(tuple([None] * len(s.keys)), set())
        self.masked = [(shape, keys) for shape, keys in hashed.items()]

    def contains(self, values: tuple) -> bool:
        if values in self.exact:
            return True
        for shape, keys in self.masked:
            if tuple(v if m is None else v & m for v, m in zip(values, shape)) in keys:
                return True
        for parts in self.ranged:
            for v, p in zip(values, parts):
                if isinstance(p, str):
                    if v != p:
                        break
                elif not p[0] <= v <= p[1]:
                    break
            else:
                return True
        return False


class _State:
    """The packet as the chains see it at one point of its path."""
    __slots__ = ("version", "iif", "oif", "saddr", "daddr", "proto", "sport", "dport",
                 "icmp", "mark", "ct", "untracked", "side_in", "side_out",
                 "script", "trail", "sport_random", "ctmark",
                 "flags", "code", "ttl", "length", "addr_type", "nat_done")

    def choose(self, weights: tuple[int, ...], counter: bool = False) -> int:
        """A random choice among options of these weights (out of their sum), or a
        packet counter's (`counter`): the option the evaluator's script says for
        this point of the walk (the first one past it), recorded in the trail so
        every other can be walked too."""
        i = len(self.trail)
        k = self.script[i] if i < len(self.script) else 0
        self.trail.append((k, weights, counter))
        return k


_NEVER = object()   # a compiled condition that no forwarded packet meets


def iface_sides(spec: Iface, ifnames: Mapping[str, str] | None = None) -> frozenset[str]:
    """The sides ("client", "server") whose interface an iif/oif condition matches.
    The testbed has two interfaces, so a literal name matches only when `ifnames`
    (side -> real name) says which side carries it; `+` alone matches both."""
    name = spec.name
    if name in ROLES:
        sides = {ROLES[name]}
    elif name.endswith("+") and name[:-1] in ROLES:
        sides = {ROLES[name[:-1]]}
    elif name == "+":
        sides = {"client", "server"}
    elif ifnames:
        if name.endswith("+"):
            sides = {side for side, real in ifnames.items() if real.startswith(name[:-1])}
        else:
            sides = {side for side, real in ifnames.items() if real == name}
    else:
        sides = set()
    return frozenset(_OTHER.keys() - sides if spec.negate else sides)


def _iface_test(sides: frozenset[str], attr: str):
    """A condition on an interface the hook does not know (oif before routing, iif
    at netdev egress) never matches, negated or not: nft's meta expression breaks
    the rule there, and iptables refuses -o in PREROUTING. At postrouting a
    forwarded packet's input device is known (ip_output and ip6_output pass it
    on; measured: nft's iifname matches there), though iptables refuses -i."""
    if not sides:
        return _NEVER
    if len(sides) == 2:
        if attr == "iif":
            return lambda s: s.iif is not None
        return lambda s: s.oif is not None
    (side,) = sides
    if attr == "iif":
        return lambda s: s.iif == side
    return lambda s: s.oif == side


def _prefix_test(p: Prefix, attr: str):
    v, lo, hi, mask = address_interval(p.net)
    neg = p.negate
    if attr == "saddr":
        if neg:
            return lambda s: s.saddr & mask != lo
        return lambda s: s.saddr & mask == lo
    if neg:
        return lambda s: s.daddr & mask != lo
    return lambda s: s.daddr & mask == lo


def _ports_test(p: Ports, attr: str):
    single = p.single
    if attr == "sport":
        if single is not None:
            return lambda s: s.sport == single
        ranges, neg = p.ranges, p.negate
        return lambda s: s.sport is not None and \
            any(lo <= s.sport <= hi for lo, hi in ranges) != neg
    if single is not None:
        return lambda s: s.dport == single
    ranges, neg = p.ranges, p.negate
    return lambda s: s.dport is not None and \
        any(lo <= s.dport <= hi for lo, hi in ranges) != neg


def _set_test(ref: SetRef, cset: CompiledSet):
    getters = tuple(ref.fields)
    neg = ref.negate
    contains = cset.contains

    def test(s: _State) -> bool:
        values = tuple(getattr(s, f) for f in getters)
        # A packet without the looked-up field (ports of an ICMP packet) matches
        # neither the set nor its negation.
        if None in values:
            return False
        return contains(values) != neg
    return test


def _all(tests: list[Callable]) -> Callable | None:
    if not tests:
        return None
    if len(tests) == 1:
        return tests[0]
    if len(tests) == 2:
        a, b = tests
        return lambda s: a(s) and b(s)
    if len(tests) == 3:
        a, b, c = tests
        return lambda s: a(s) and b(s) and c(s)
    if len(tests) == 4:
        a, b, c, d = tests
        return lambda s: a(s) and b(s) and c(s) and d(s)
    t = tuple(tests)
    return lambda s: all(f(s) for f in t)


def rule_version(r: Rule, sets: Mapping[str, Set]) -> int | None:
    """The IP version a rule can match, pinned by its addresses, protocol, sets of
    addresses, NAT address or its own restriction (Match.ip_version); None if
    nothing pins it. RuleSetError if they disagree (such a rule matches no packet)."""
    m = r.match
    versions = {address_interval(p.net)[0] for p in (m.src, m.dst) if p is not None}
    if m.ip_version is not None:
        versions.add(m.ip_version)
    if m.proto == "icmp":
        versions.add(4)
    elif m.proto == "icmpv6":
        versions.add(6)
    for ref in r.match.sets:
        s = sets.get(ref.name)
        if s is not None and "addr" in s.keys:
            versions.add(s.version)
    if r.action.kind in ("dnat", "snat") and r.action.addr:
        # nft's `dnat ip to` carries an implicit `meta nfproto ipv4`.
        versions.add(address_interval(nat_address(r.action.addr))[0])
    if len(versions) > 1:
        raise RuleSetError(f"rule {r.id}: mixes IPv4 and IPv6")
    return versions.pop() if versions else None


def nat_address(addr: str) -> str:
    """The address a snat/dnat translates to: the first of a range or prefix."""
    return addr.split("-", 1)[0].split("/", 1)[0].strip().strip("[]")


def _compile_match(r: Rule, sets: Mapping[str, CompiledSet], raw_sets: Mapping[str, Set],
                   ifnames: Mapping[str, str] | None, family: str | None = None):
    """A rule's match as one function of the state, or None (matches all) or _NEVER."""
    m: Match = r.match
    if m.string is not None:
        raise Unsupported("string match", f"rule {r.id}", "reference evaluator")
    tests: list = []
    try:
        version = rule_version(r, raw_sets)
    except RuleSetError:
        return _NEVER
    if (m.quota is not None and m.quota.over) or (m.limit is not None and m.limit.over) \
            or (m.hashlimit is not None and not m.hashlimit.upto):
        return _NEVER   # its bytes or its bucket not yet spent (the module docstring)
    if m.proto is not None:
        proto = m.proto
        tests.append(lambda s: s.proto == proto)
    if version is not None:
        tests.insert(0, lambda s: s.version == version)
    if m.dport:
        tests.append(_ports_test(m.dport, "dport"))
    if m.dst:
        tests.append(_prefix_test(m.dst, "daddr"))
    if m.src:
        tests.append(_prefix_test(m.src, "saddr"))
    if m.sport:
        tests.append(_ports_test(m.sport, "sport"))
    if m.icmp_type is not None:
        icmp = m.icmp_type
        tests.append(lambda s: s.icmp == icmp)
    for spec, attr in ((m.iif, "iif"), (m.oif, "oif")):
        if spec is not None:
            t = _iface_test(iface_sides(spec, ifnames), attr)
            if t is _NEVER:
                return _NEVER
            tests.append(t)
    if m.ct_state is not None:
        states = frozenset(m.ct_state)
        tests.append(lambda s: s.ct in states)
    if m.ct_status is not None:
        nat_kinds = frozenset(m.ct_status)
        if m.ct_status_negate:
            # xt_conntrack sets the NAT bits only for a packet with a connection.
            tests.append(lambda s: s.ct not in _TRACKED or nat_kinds.isdisjoint(s.nat_done))
        else:
            tests.append(lambda s: s.ct in _TRACKED and not nat_kinds.isdisjoint(s.nat_done))
    if m.icmp_pairs is not None:
        pairs = frozenset(m.icmp_pairs)
        tests.append(lambda s: (s.icmp, s.code) in pairs)
    for o in m.tcp_options:
        if not _tcp_option_holds(o):
            return _NEVER
        # m.proto is tcp (validate): the protocol test stands already.
    for at in m.attrs:
        t = _attr_test(at)
        if t is _NEVER:
            return _NEVER
        if t is not None:
            tests.append(t)
    if m.mark is not None:
        value, mask = m.mark
        if m.mark_negate:
            tests.append(lambda s: s.mark & mask != value)
        else:
            tests.append(lambda s: s.mark & mask == value)
    for ref in m.sets:
        tests.append(_set_test(ref, sets[ref.name]))
    tests += _everyday_tests(r, version or {"ip": 4, "ip6": 6}.get(family or ""))
    if m.ct_mark is not None:
        # Names of their own: the mark test's closure reads value and mask late.
        ct_value, ct_mask = m.ct_mark
        if m.ct_mark_negate:
            tests.append(lambda s: s.ct in _TRACKED and s.ctmark & ct_mask != ct_value)
        else:
            tests.append(lambda s: s.ct in _TRACKED and s.ctmark & ct_mask == ct_value)
    if m.nth is not None:
        nth_weights = (1, m.nth[0] - 1)
        tests.append(lambda s: s.choose(nth_weights, counter=True) == 0)
    if m.random is not None:
        # Last: the draw happens only for a packet every other condition admits
        # (iptables and nft test a rule's matches in order, and stop at a miss).
        weights = (m.random, RANDOM_SCALE - m.random)
        tests.append(lambda s: s.choose(weights) == 0)
    # m.limit: always matches (see the module docstring).
    return _all(tests)


# The testbed's values of the attributes Attr names (model.ATTR_KEYS): both its
# firewall's interfaces are veth (type 1, Ethernet) in group 0; no sender sets a
# priority, and IPv4 forwarding sets it from the TOS, 0 in every corpus packet.
TESTBED_ATTRS = {"group": 0, "type": 1, "priority": 0}


def _tcp_option_holds(o: TcpOption) -> bool:
    """Whether a TCP packet of the testbed (TESTBED_TCP_OPTIONS) meets `o`,
    scanning the options as nft and xt_tcp do: EOL and NOP are one byte, any
    other kind is as long as its length byte says (at least one)."""
    opts, i, found = TESTBED_TCP_OPTIONS, 0, None
    while i < len(opts):
        kind = opts[i]
        size = 1 if kind <= 1 or i + 1 >= len(opts) else (opts[i + 1] or 1)
        if kind == o.kind:
            found = opts[i:i + size]
            break
        i += size
    if o.offset is None:
        return (found is not None) != o.negate
    if found is None or o.offset + o.length > len(found):
        return False
    value = int.from_bytes(found[o.offset:o.offset + o.length], "big")
    return any(lo <= value <= hi for lo, hi in o.ranges) != o.negate


def _attr_test(at: Attr):
    """An attribute condition as a test, None (always holds) or _NEVER."""
    if at.key in TESTBED_IPSEC:
        value = TESTBED_IPSEC[at.key][0]
    else:
        value = TESTBED_ATTRS[at.key[3:] if at.key[1:3] == "if" else at.key]
    if any(lo <= value <= hi for lo, hi in at.ranges) == at.negate:
        return _NEVER
    if at.key == "priority" or at.key in TESTBED_IPSEC:
        return None     # the rule's protocol test stands for the header
    # No interface on that side at this hook: nft's meta breaks the rule.
    if at.key.startswith("i"):
        return lambda s: s.iif is not None
    return lambda s: s.oif is not None


def numgen_weights(mod: int, offset: int) -> Callable[[int], int]:
    """For numgen random mod `mod` offset `offset`: value -> how many of the 2**32
    random u32s give it (reciprocal_scale(x, mod) = x * mod >> 32, plus offset)."""
    def weight(value: int) -> int:
        v = value - offset
        if not 0 <= v < mod:
            return 0
        return -(-(v + 1) * RANDOM_SCALE // mod) - -(-v * RANDOM_SCALE // mod)
    return weight


def _vmap_lookup(r: Rule, maps: Mapping[str, Set], chains: Mapping[str, "_CChain"]):
    """A vmap rule's lookup: a function of the state giving the found element's
    (code, argument) as a rule action, or None for a key the map lacks."""
    a = r.action
    s = maps[a.vmap.name]
    verdicts = []
    for v in s.verdicts:
        code = _CODES[v.kind]
        verdicts.append((code, chains[v.chain] if code in (_JUMP, _GOTO) else None))
    if a.numgen is not None:
        weight = numgen_weights(*a.numgen)
        options = [(weight(int(e[0])), verdicts[i]) for i, e in enumerate(s.elements)]
        options = [o for o in options if o[0]]
        missed = RANDOM_SCALE - sum(w for w, _ in options)
        if missed:
            options.append((missed, None))
        if len(options) == 1:     # `numgen random mod 1`: no choice at all
            only = options[0][1]
            return lambda st: only
        weights = tuple(w for w, _ in options)
        found = tuple(v for _, v in options)
        return lambda st: found[st.choose(weights)]
    table = {}
    for e, v in zip(s.elements, verdicts):
        key = []
        for kind, value in zip(s.keys, e):
            if kind == "addr":
                _, lo, hi, _ = address_interval(str(value))
                if lo != hi:
                    raise Unsupported("verdict map with address prefixes", f"rule {r.id}",
                                      "reference evaluator")
                key.append(lo)
            elif kind == "port":
                lo, hi = port_interval(value)
                if lo != hi:
                    raise Unsupported("verdict map with port ranges", f"rule {r.id}",
                                      "reference evaluator")
                key.append(lo)
            else:
                key.append(_proto_name(value))
        table[tuple(key)] = v
    fields = tuple(a.vmap.fields)
    get = table.get
    return lambda st: get(tuple(getattr(st, f) for f in fields))


# Lengths the injector's packets have before any padding: IP header, L4 header,
# the marker (packets.MARKER_LEN).
_IP_HEADER = {4: 20, 6: 40}
_L4_HEADER = {"tcp": 20 + len(TESTBED_TCP_OPTIONS), "udp": 8, "icmp": 8, "icmpv6": 8,
              "esp": 8, "ah": 12, "gre": 4, "igmp": 8}
_MARKER_LEN = 12


def packet_length(pkt: Packet) -> int:
    """The IP packet's length in bytes, header included, as the injector sends it."""
    return _IP_HEADER[pkt.version] + _L4_HEADER.get(pkt.proto, 0) + _MARKER_LEN + pkt.pad


def _everyday_tests(r: Rule, version: int | None) -> list[Callable]:
    """TCP flags, ICMP codes and type sets, address types, packet type, TTL and
    length. The injector sends every frame to the firewall's own MAC address, so
    every packet is of packet type host (iptables' unicast)."""
    m, out = r.match, []
    if m.tcp_flags is not None:
        f = m.tcp_flags
        out.append(lambda s: s.proto == "tcp" and f.matches(s.flags))
    if m.icmp_code is not None:
        code = m.icmp_code
        out.append(lambda s: s.code == code)
    if m.icmp_types is not None:
        types = m.icmp_types
        out.append(lambda s: s.icmp in types)
    if m.addrtype is not None:
        if version != 4:
            raise Unsupported("addrtype of IPv6 addresses", f"rule {r.id}",
                              "reference evaluator")
        a = m.addrtype
        if a.src is not None:
            src, sneg = a.src, a.src_negate
            out.append(lambda s: (s.addr_type(s.saddr) in src) != sneg)
        if a.dst is not None:
            dst, dneg = a.dst, a.dst_negate
            out.append(lambda s: (s.addr_type(s.daddr) in dst) != dneg)
    if m.pkttype is not None:
        if ("host" in m.pkttype) == m.pkttype_negate:
            return [lambda s: False]
    if m.ttl is not None:
        ttl = m.ttl
        out.append(lambda s: ttl.contains(s.ttl))
    if m.length is not None:
        length = m.length
        out.append(lambda s: length.contains(s.length))
    return out


class _Stab:
    """Interval stabbing over one integer field: which rules' conditions on it hold
    for a value. The masks (bit i: rule i) are kept at checkpoints only and rebuilt
    from the per-boundary flips in between, so memory stays near `budget` bytes."""
    __slots__ = ("points", "flips", "every", "marks", "wild")

    def __init__(self, conds: list[tuple[int, list[tuple[int, int]]]], wild: int, n: int,
                 budget: int = 8 << 20):
        events: dict[int, list[int]] = {}
        for i, ranges in conds:
            for lo, hi in ranges:
                events.setdefault(lo, []).append(i)
                events.setdefault(hi + 1, []).append(i)
        self.points = sorted(events)
        # A flip is a mask when that costs no more than the list of rule numbers
        # (a mask takes n/8 bytes, whatever its number of bits).
        self.flips = [_mask(events[p]) if len(events[p]) * 64 >= n else tuple(events[p])
                      for p in self.points]
        self.every = max(8, -(-len(self.points) * (n // 8 + 1) // budget))
        self.wild = wild
        self.marks: list[int] = []
        m = 0
        for j, p in enumerate(self.points):
            if j % self.every == 0:
                self.marks.append(m)
            m = _flip(m, self.flips[j])
        self.marks.append(m)

    def query(self, x: int) -> int:
        j = bisect_right(self.points, x)        # flips at points <= x apply
        c = j // self.every
        m = self.marks[c]
        flips = self.flips
        for k in range(c * self.every, j):
            m = _flip(m, flips[k])
        return m | self.wild


def _mask(bits: Iterable[int]) -> int:
    """Bits i set for each i in bits, built in linear time."""
    bits = list(bits)
    if not bits:
        return 0
    buf = bytearray((max(bits) >> 3) + 1)
    for i in bits:
        buf[i >> 3] |= 1 << (i & 7)
    return int.from_bytes(buf, "little")


def _flip(m: int, flip) -> int:
    if isinstance(flip, int):
        return m ^ flip
    for i in flip:
        m ^= 1 << i
    return m


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive integer ranges as sorted, disjoint, non-adjacent ones."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def complement_ranges(ranges: list[tuple[int, int]], lo: int, hi: int) \
        -> list[tuple[int, int]]:
    """What merged `ranges` leave of lo..hi."""
    out, at = [], lo
    for a, b in ranges:
        if a > at:
            out.append((at, a - 1))
        at = max(at, b + 1)
    if at <= hi:
        out.append((at, hi))
    return out


class _Filter:
    """For a long chain: the rules a packet can possibly match, as a bit mask, from
    the conditions that index well (IP version, protocol, interfaces, ICMP type,
    ports, addresses). The rules' own tests still decide; marks, ct state and sets
    are left to them (a notrack or mark action changes those mid-chain)."""

    def __init__(self, rules: list[Rule], versions: list[int | None],
                 sides: list[tuple[frozenset[str] | None, frozenset[str] | None]]):
        n = len(rules)
        full = (1 << n) - 1
        self.version = {pv: _mask(i for i, v in enumerate(versions) if v in (None, pv))
                        for pv in (4, 6)}
        self.parts: list[tuple[str, object]] = []

        def by_value(have: list) -> dict | None:
            # value -> mask; a rule without the condition (None) is in every mask,
            # and only such rules are under the key None.
            if all(h is None for h in have):
                return None
            wild = _mask(i for i, h in enumerate(have) if h is None)
            bits: dict = {}
            for i, h in enumerate(have):
                for k in (h if h is not None else ()):
                    bits.setdefault(k, []).append(i)
            out = {k: wild | _mask(b) for k, b in bits.items()}
            out[None] = wild
            return out

        for attr, have in (
                ("proto", [(r.match.proto,) if r.match.proto else None for r in rules]),
                ("iif", [sd[0] for sd in sides]),
                ("oif", [sd[1] for sd in sides]),
                ("icmp", [(r.match.icmp_type,) if r.match.icmp_type is not None else None
                          for r in rules])):
            table = by_value(have)
            if table is not None:
                self.parts.append((attr, table))
        for attr in ("sport", "dport"):
            conds, wilds = [], []
            for i, r in enumerate(rules):
                p = getattr(r.match, attr)
                if p is None:
                    wilds.append(i)
                    continue
                ranges = merge_ranges(p.ranges)
                conds.append((i, complement_ranges(ranges, 0, 65535) if p.negate else ranges))
            if conds:
                wild = _mask(wilds)
                self.parts.append((attr, (_Stab(conds, wild, n), wild)))
        for attr, field in (("saddr", "src"), ("daddr", "dst")):
            stabs = {}
            for pv, bits in ((4, 32), (6, 128)):
                conds, wilds = [], []
                for i, r in enumerate(rules):
                    p = getattr(r.match, field)
                    if p is None:
                        wilds.append(i)
                        continue
                    v, lo, hi, _ = address_interval(p.net)
                    if v != pv:
                        continue
                    conds.append((i, complement_ranges([(lo, hi)], 0, (1 << bits) - 1)
                                  if p.negate else [(lo, hi)]))
                wild = _mask(wilds)
                if conds:
                    stabs[pv] = _Stab(conds, wild, n)
                elif wild != full:
                    stabs[pv] = None, wild
            if stabs:
                self.parts.append((attr, stabs))

    def candidates(self, s: _State) -> int:
        m = self.version[s.version]
        for attr, part in self.parts:
            if not m:
                return 0
            if attr in ("saddr", "daddr"):
                stab = part.get(s.version)
                if stab is None:
                    continue
                if isinstance(stab, tuple):
                    m &= stab[1]
                else:
                    m &= stab.query(getattr(s, attr))
            elif attr in ("sport", "dport"):
                value = getattr(s, attr)
                stab, wild = part
                m &= wild if value is None else stab.query(value)
            else:
                value = getattr(s, attr)
                m &= part.get(value, part[None])
        return m


class _CChain:
    """A compiled chain: rules as (id, test, action code, argument) tuples, and for a
    long chain a _Filter that narrows the rules a packet can match."""
    __slots__ = ("name", "table", "rules", "full", "filter", "policy_drop", "base",
                 "nat", "hook", "priority", "order", "sides")

    def __init__(self, table_idx: int, chain_idx: int, c: Chain, table_name: str):
        self.name = c.name
        self.table = table_name
        self.rules: list[tuple] = []
        self.full = 0
        self.filter: _Filter | None = None
        self.policy_drop = c.policy == "drop"
        self.base = c.base
        self.nat = c.type == "nat" and c.hook in _NAT_PRIORITY
        self.hook = c.hook
        self.priority = c.priority
        self.order = (table_idx, chain_idx)
        # The sides whose packets the chain sees: all but for a chain on a device.
        self.sides: frozenset[str] | None = None

    def candidates(self, s: _State) -> int:
        """Bit i set: rule i may match."""
        if self.filter is None:
            return self.full
        return self.filter.candidates(s)


@dataclass(frozen=True)
class _Unit:
    """What runs at one point of a hook: one base chain, or the NAT core with all
    nat chains of the hook in their order."""
    chains: tuple[_CChain, ...]
    nat: bool
    before_conntrack: bool


class Evaluator:
    """A rule set compiled once for many packets.

    `local` maps a side ("client", "server") to the firewall's address on it, one
    address or several (one per IP version); missing ones default to DEFAULT_LOCAL.
    `ifnames` maps a side to its real interface name, so literal interface names in
    rules can match; without it only the roles CLIENT/SERVER (and `+`) match.
    """

    def __init__(self, rs: RuleSet, local: Mapping[str, str | Sequence[str]] | None = None,
                 ifnames: Mapping[str, str] | None = None):
        self.rs = rs
        self.local: dict[int, dict[str, tuple[str, int]]] = {
            v: {side: (a, _addr_int(a)[1]) for side, a in d.items()}
            for v, d in DEFAULT_LOCAL.items()}
        for side, given in (local or {}).items():
            if side not in _OTHER:
                raise RuleSetError(f"local address for unknown side {side!r}")
            for a in ([given] if isinstance(given, str) else given):
                try:
                    v, i = _addr_int(a)
                except ValueError:
                    raise RuleSetError(f"local address for {side} is not an address: "
                                       f"{a!r}") from None
                self.local[v][side] = (address_text(v, i), i)
        self.local_ints = {v: frozenset(i for _, i in d.values()) for v, d in self.local.items()}
        self._broadcast4 = frozenset(int(n.broadcast_address) for n in addresses.LINKS[4])
        self.units: dict[tuple[int, str], tuple[_Unit, ...]] = {}
        # (table family, table name) -> set name -> its compiled elements.
        self.sets: dict[tuple[str, str], dict[str, CompiledSet]] = {}
        # Compiling makes a few closures per rule and nothing cyclic: the cyclic
        # collector would only rescan them, which took 4/5 of the time at 100k rules.
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._compile(ifnames)
        finally:
            if enabled:
                gc.enable()

    # --- compiling -------------------------------------------------------------

    def _compile(self, ifnames: Mapping[str, str] | None) -> None:
        compiled: list[tuple[str, _CChain]] = []   # (family, base chain)
        for ti, t in enumerate(self.rs.tables):
            raw_sets = {s.name: s for s in t.sets}
            csets = self.sets[(t.family, t.name)] = {s.name: CompiledSet(s) for s in t.sets}
            chains = {c.name: _CChain(ti, ci, c, t.name) for ci, c in enumerate(t.chains)}
            for c in t.chains:
                cc = chains[c.name]
                if c.device is not None:
                    cc.sides = iface_sides(Iface(c.device), ifnames)
                rules, kept, versions, sides = [], [], [], []
                for r in c.rules:
                    test = _compile_match(r, csets, raw_sets, ifnames, t.family)
                    if test is _NEVER:
                        continue
                    a = r.action
                    code = _CODES[a.kind]
                    arg = None
                    if code in (_JUMP, _GOTO):
                        arg = chains[a.chain]
                    elif code == _MARK or code == _CTMARK:
                        arg = ((a.mark or 0), a.mark_mask & 0xFFFFFFFF)
                    elif code == _SAVEMARK or code == _RESTOREMARK:
                        arg = a.ct_masks
                    elif code in (_DNAT, _SNAT):
                        addr = nat_address(a.addr)
                        v, i = address_interval(addr)[:2]
                        arg = (address_text(v, i), i, a.port, a.random_port, a.port_hi)
                    elif code == _MASQ:
                        # The new source port (or range), or None.
                        arg = (a.port, a.random_port, a.port_hi)
                    elif code == _REDIRECT:
                        arg = a.port    # the new destination port, or None
                    elif code == _VMAP:
                        arg = _vmap_lookup(r, raw_sets, chains)
                    if code == _NOTRACK and not (c.hook == "prerouting"
                                                 and c.priority < _CONNTRACK_PRIORITY):
                        # After conntrack attached, notrack does nothing (nft checks
                        # for an existing entry; iptables allows it in raw only).
                        code = _NOP
                    if code in (_DNAT, _SNAT, _MASQ, _REDIRECT) and c.base and not cc.nat:
                        code = _ACCEPT      # a user chain's: decided by its base, in _walk
                    rules.append((r.id, test, code, arg))
                    kept.append(r)
                    versions.append(rule_version(r, raw_sets))
                    sides.append(tuple(None if spec is None else iface_sides(spec, ifnames)
                                       for spec in (r.match.iif, r.match.oif)))
                cc.rules = rules
                cc.full = (1 << len(rules)) - 1
                if len(rules) >= _INDEX_MIN:
                    cc.filter = _Filter(kept, versions, sides)
                if c.base:
                    compiled.append((t.family, cc))
        for version in (4, 6):
            families = {"ip", "inet", "netdev"} if version == 4 else {"ip6", "inet", "netdev"}
            for hook in FORWARD_HOOKS + ("input",):
                here = [cc for fam, cc in compiled if fam in families and cc.hook == hook]
                self.units[(version, hook)] = _units(hook, here)

    # --- evaluating ------------------------------------------------------------

    def addr_type4(self, a: int) -> str:
        """An IPv4 address's type as xt_addrtype and nft's fib read it from the
        firewall's local routing table (inet_dev_addr_type): its own addresses and
        127/8 local, its links' broadcast addresses, 0/8 and 255.255.255.255
        broadcast, 224/4 multicast, anything else unicast."""
        if a >> 24 == 0 or a == 0xFFFFFFFF or a in self._broadcast4:
            return "broadcast"
        if a >> 28 == 0xE:
            return "multicast"
        if a in self.local_ints[4] or a >> 24 == 127:
            return "local"
        return "unicast"

    def addressed_to_firewall(self, pkt: Packet) -> bool:
        """Is the packet's destination one of the firewall's own addresses (as sent,
        before any DNAT)?"""
        v, i = _addr_int(pkt.daddr)
        return i in self.local_ints[v]

    def evaluate(self, pkt: Packet) -> Verdict:
        v, trail = self._once(pkt, ())
        if not trail:
            return v
        return self._chances(pkt, v, trail)

    def _chances(self, pkt: Packet, first: Verdict, trail: list) -> Verdict:
        """Every verdict a packet that met random choices may get: the walk again
        for every other option at every choice point (depth first), each leaf's
        probability the product of its options' shares, equal verdicts merged."""
        found: dict[Verdict, Fraction] = {}
        by_counter = False
        todo: list[tuple[int, ...]] = []
        script: tuple[int, ...] = ()
        v = first
        while True:
            for j in range(len(script), len(trail)):
                prefix = tuple(k for k, _, _ in trail[:j])
                todo.extend(prefix + (alt,) for alt, w in enumerate(trail[j][1])
                            if alt and w)
            p = Fraction(1)
            for k, weights, counter in trail:
                p *= Fraction(weights[k], sum(weights))
                by_counter = by_counter or counter
            if p:
                found[v] = found.get(v, Fraction(0)) + p
            if not todo:
                break
            script = todo.pop()
            v, trail = self._once(pkt, script)
        ranked = sorted(found.items(), key=lambda vp: -vp[1])
        if len(ranked) == 1:      # every choice led to the same verdict
            return ranked[0][0]
        return replace(ranked[0][0], outcomes=tuple((float(p), v) for v, p in ranked),
                       counter_choice=by_counter)

    def _once(self, pkt: Packet, script: tuple[int, ...]) -> tuple[Verdict, list]:
        """One walk of the packet, random choices taken as `script` says (then
        the first option): its verdict and the choices it met."""
        s = _State()
        # Every packet the corpus sends opens its connection: its ct mark starts at 0.
        s.script, s.trail, s.sport_random, s.ctmark = script, [], False, 0
        s.nat_done = frozenset()   # the connection's NAT status: "dnat", "snat"
        return self._walk_hooks(pkt, s), s.trail

    def _walk_hooks(self, pkt: Packet, s: _State) -> Verdict:
        try:
            s.version, s.saddr = _addr_int(pkt.saddr)
            _, s.daddr = _addr_int(pkt.daddr)
        except ValueError:
            raise RuleSetError(f"packet with a bad address: {pkt.saddr} -> {pkt.daddr}") \
                from None
        if pkt.version != s.version:
            raise RuleSetError(f"packet says IPv{pkt.version} but has address {pkt.saddr}")
        if pkt.iif not in _OTHER:
            raise RuleSetError(f"packet iif must be client or server, not {pkt.iif!r}")
        s.proto, s.sport, s.dport, s.icmp = pkt.proto, pkt.sport, pkt.dport, pkt.icmp_type
        s.mark = pkt.mark
        s.flags, s.code, s.length = pkt.tcp_flags, pkt.icmp_code, packet_length(pkt)
        s.addr_type = self.addr_type4
        s.untracked = pkt.ct_state == "untracked"
        s.side_in, s.side_out = pkt.iif, pkt.oif
        counted: list[str] = []
        # Per kind of chain (nat or not): the last rule that accepted, the last chain.
        accepted: dict[bool, str | None] = {False: None, True: None}
        walked: dict[bool, str | None] = {False: None, True: None}
        version = s.version
        local = False
        for hook in FORWARD_HOOKS:
            if hook == "forward" and s.daddr in self.local_ints[version]:
                # Addressed to the firewall (after DNAT or not): its input hook instead
                # of forward, and nothing after it: delivered there or dropped.
                local, hook = True, "input"
            if hook == "forward" and pkt.ttl <= 1:
                # Forwarding drops it before the forward hook (time exceeded).
                return self._verdict(pkt, s, False, None, None, counted,
                                     f"TTL {pkt.ttl} expired in forwarding")
            units = self.units[(version, hook)]
            if not units:
                if local:
                    break
                continue
            after = hook in ("forward", "postrouting", "egress")
            # At egress the kernel knows no input device (at postrouting it does).
            s.iif = s.side_in if hook != "egress" else None
            s.oif = s.side_out if after else None
            # Forwarding decrements the TTL (hop limit) before the forward hook.
            s.ttl = pkt.ttl - after
            # A netdev chain sees its device's packets: arriving (ingress) or leaving.
            side = s.side_out if hook == "egress" else s.side_in
            for unit in units:
                if unit.nat:
                    # NAT runs the nat chains for a connection's first packet only;
                    # for later packets conntrack applies the binding without them.
                    if s.untracked or pkt.ct_state != "new":
                        continue
                    s.ct = "new"
                elif unit.before_conntrack:
                    s.ct = "untracked" if s.untracked else "invalid"
                else:
                    s.ct = "untracked" if s.untracked else pkt.ct_state
                for chain in unit.chains:
                    if chain.sides is not None and side not in chain.sides:
                        continue
                    code, rid = self._walk(chain, s, counted)
                    if code == _DROP or code == _REJECT:
                        if rid is None:
                            return self._verdict(pkt, s, False, None, chain.name, counted,
                                                 f"policy drop of chain {chain.name}")
                        what = "dropped" if code == _DROP else "rejected"
                        return self._verdict(pkt, s, False, rid, None, counted,
                                             f"{what} by rule {rid}")
                    walked[unit.nat] = chain.name
                    if rid is not None:
                        accepted[unit.nat] = rid
                    if code >= _DNAT:   # translated: the NAT walk ends at this hook
                        s.nat_done = s.nat_done | {_NAT_STATUS[code]}
                        break
            if local:
                break
        kind = walked[False] is None
        rid, chain_name = accepted[kind], walked[kind]
        # Delivered to the firewall itself: accepted, but not forwarded.
        fwd, head = (False, "delivered to the firewall itself: ") if local else (True, "")
        if rid is not None:
            return self._verdict(pkt, s, fwd, rid, None, counted,
                                 f"{head}accepted by rule {rid}", local)
        if chain_name is not None:
            return self._verdict(pkt, s, fwd, None, chain_name, counted,
                                 f"{head}policy accept of chain {chain_name}", local)
        return self._verdict(pkt, s, fwd, None, None, counted,
                             f"{head}no chain on the {'input' if local else 'forward'} path",
                             local)

    def _walk(self, chain: _CChain, s: _State, counted: list[str]) -> tuple[int, str | None]:
        """Run one base chain: (_ACCEPT, rule id | None for the policy), (_DROP, ...),
        (_REJECT, id) or (a NAT code, id) after translating the state."""
        # A frame is (chain, rest, k): bit j of `rest` is rule k + j, a candidate.
        stack: list[tuple[_CChain, int, int]] = []
        base = chain
        rules = chain.rules
        rest, k = chain.candidates(s), 0
        while True:
            if not rest:
                if not stack:
                    break
                chain, rest, k = stack.pop()
                rules = chain.rules
                continue
            step = (rest & -rest).bit_length()
            rest >>= step
            k += step
            rid, test, code, arg = rules[k - 1]
            if test is not None and not test(s):
                continue
            counted.append(rid)
            if code == _NOP:
                continue
            if code == _VMAP:
                found = arg(s)
                if found is None:
                    continue
                code, arg = found
            if code <= _REJECT:     # accept, drop, reject
                return code, rid
            if code == _JUMP:
                stack.append((chain, rest, k))
                chain = arg
            elif code == _GOTO:
                chain = arg
            elif code == _RETURN:
                rest = 0
                continue
            elif code == _MARK:
                value, mask = arg
                s.mark = (s.mark & ~mask & 0xFFFFFFFF) ^ value
                continue
            elif code == _NOTRACK:
                s.untracked = True
                s.ct = "untracked"
                continue
            elif code == _CTMARK or code == _SAVEMARK or code == _RESTOREMARK:
                if s.ct in _TRACKED:   # without a connection there is no ct mark
                    self._ctmark(code, arg, s)
                continue
            elif not base.nat:
                return _ACCEPT, rid     # NAT in a user chain that a filter chain reached
            else:
                # A user chain jumped to from a nat chain translates as the nat
                # chain would (nft's user chains take their base chain's type).
                self._translate(code, arg, s)
                return code, rid
            rules = chain.rules
            rest, k = chain.candidates(s), 0
        return (_DROP if base.policy_drop else _ACCEPT), None

    @staticmethod
    def _ctmark(code: int, arg, s: _State) -> None:
        """CONNMARK's three forms on the connection's mark (the kernel's xt_connmark
        and nft's ct mark statements compute the same)."""
        if code == _CTMARK:
            value, mask = arg
            s.ctmark = (s.ctmark & ~mask & 0xFFFFFFFF) ^ value
        elif code == _SAVEMARK:
            nfmask, ctmask = arg
            s.ctmark = (s.ctmark & ~ctmask & 0xFFFFFFFF) ^ (s.mark & nfmask)
        else:
            nfmask, ctmask = arg
            s.mark = (s.mark & ~nfmask & 0xFFFFFFFF) ^ (s.ctmark & ctmask)

    def _translate(self, code: int, arg, s: _State) -> None:
        if code == _MASQ:
            s.saddr = self.local[s.version][s.side_out][1]
            port, random_port, port_hi = arg
            self._source_port(s, port, port_hi, random_port)
            return
        if code == _REDIRECT:
            # To the input interface's address (nf_nat_redirect): delivered locally.
            s.daddr = self.local[s.version][s.side_in][1]
            if arg is not None and s.dport is not None:
                s.dport = arg
            return
        _, addr_i, port, random_port, port_hi = arg
        if code == _DNAT:
            s.daddr = addr_i
            if port is not None and s.dport is not None:
                s.dport = port
        else:
            s.saddr = addr_i
            self._source_port(s, port, port_hi, random_port)

    @staticmethod
    def _source_port(s: _State, port: int | None, port_hi: int | None,
                     random_port: bool) -> None:
        """SNAT's source port: one port; or a range, which a port already in it
        stays in (nf_nat keeps a tuple in range that no other connection holds:
        each corpus packet is a connection of its own) and any other leaves for
        one the kernel picks; or the kernel's random pick (fully-random)."""
        if s.sport is not None and port is not None:
            if port_hi is None:
                s.sport = port
            elif not port <= s.sport <= port_hi:
                s.sport_random = True
        s.sport_random = s.sport_random or random_port

    def _verdict(self, pkt: Packet, s: _State, forward: bool, rid: str | None,
                 policy_of: str | None, counted: list[str], reason: str,
                 local: bool = False) -> Verdict:
        out = pkt
        saddr, daddr = _addr_int(pkt.saddr)[1], _addr_int(pkt.daddr)[1]
        if (s.saddr, s.daddr, s.sport, s.dport, s.mark) != \
                (saddr, daddr, pkt.sport, pkt.dport, pkt.mark):
            out = replace(pkt, sport=s.sport, dport=s.dport, mark=s.mark,
                          saddr=pkt.saddr if s.saddr == saddr else address_text(s.version, s.saddr),
                          daddr=pkt.daddr if s.daddr == daddr else address_text(s.version, s.daddr))
        return Verdict(forward, rid, policy_of, tuple(counted), out, reason, local,
                       s.sport_random and s.sport is not None)

    def evaluate_all(self, packets: Iterable[Packet]) -> list[Verdict]:
        return [self.evaluate(p) for p in packets]

    def expected_counts(self, packets: Iterable[Packet]) -> Counter[str]:
        out: Counter[str] = Counter()
        for p in packets:
            out.update(self.evaluate(p).counted)
        return out


def _units(hook: str, chains: list[_CChain]) -> tuple[_Unit, ...]:
    """The base chains at one hook in the order the kernel runs them."""
    def key(cc: _CChain, priority: int | None = None) -> tuple:
        # Equal priorities: the chain loaded later runs first (see the docstring).
        return (cc.priority if priority is None else priority, -cc.order[0], -cc.order[1])

    nat = sorted((cc for cc in chains if cc.nat), key=key)
    plain = [cc for cc in chains if not cc.nat]
    entries: list[tuple[tuple, _Unit]] = []
    for cc in plain:
        before = hook == "ingress" or (hook == "prerouting"
                                       and cc.priority < _CONNTRACK_PRIORITY)
        entries.append((key(cc), _Unit((cc,), False, before)))
    if nat:
        first = min(nat, key=lambda cc: cc.order)
        entries.append((key(first, _NAT_PRIORITY[hook]), _Unit(tuple(nat), True, False)))
    entries.sort(key=lambda e: e[0])
    return tuple(u for _, u in entries)


# --- the functional interface ------------------------------------------------------

_cache: tuple[weakref.ref, object, Evaluator] | None = None


def _evaluator(rs: RuleSet, local: Mapping[str, str] | None) -> Evaluator:
    """One compiled rule set kept for repeated calls with the same object."""
    global _cache
    key = tuple(sorted((k, v if isinstance(v, str) else tuple(v))
                       for k, v in (local or {}).items()))
    if _cache is not None and _cache[0]() is rs and _cache[1] == key:
        return _cache[2]
    ev = Evaluator(rs, local)
    _cache = (weakref.ref(rs), key, ev)
    return ev


def evaluate(rs: RuleSet, pkt: Packet, local: Mapping[str, str] | None = None) -> Verdict:
    """What the firewall holding `rs` does with `pkt` (see the module docstring)."""
    return _evaluator(rs, local).evaluate(pkt)


def evaluate_all(rs: RuleSet, packets: Iterable[Packet],
                 local: Mapping[str, str] | None = None) -> list[Verdict]:
    return _evaluator(rs, local).evaluate_all(packets)


def expected_counts(rs: RuleSet, packets: Iterable[Packet],
                    local: Mapping[str, str] | None = None) -> Counter[str]:
    """Rule id -> how many of `packets` the rule counts (matches)."""
    return _evaluator(rs, local).expected_counts(packets)


# --- rate limits -------------------------------------------------------------------

_REACH = "\0reach:"   # ids of the counting twins; no rule id can start so


def traffic_decides(r: Rule) -> bool:
    """Whether the packets before decide if the rule matches: a rate limit or a
    quota."""
    m = r.match
    return m.limit is not None or m.quota is not None or m.hashlimit is not None


def _spent(r: Rule) -> tuple[Rule, ...]:
    """The rule once its limits and quota are spent: gone where one of them then
    never matches (a limit, a quota), else matching without them (`over`, a
    hashlimit's `above`)."""
    m = r.match
    spent_never = (m.limit is not None and not m.limit.over) \
        or (m.quota is not None and not m.quota.over) \
        or (m.hashlimit is not None and m.hashlimit.upto)
    if spent_never:
        return ()
    return (replace(r, match=replace(m, limit=None, quota=None, hashlimit=None)),)


class RateLimits:
    """Which packets a rate limit or a quota may decide, so comparisons can leave
    them out.

    The reference lets every `limit` match; a kernel matches only while the
    limit's bucket holds tokens, which depends on what came before and when. A
    packet whose path reaches a limit rule (every other condition of it met) may
    go either way, and so may the counters of every rule it could then reach.
    A quota is the same: it matches until its bytes are spent (`quota over`:
    only after). Found with the evaluator itself: a counting twin without the
    limit or quota before each such rule says who reached it; a copy with each
    spent says where a packet goes when every limit and quota is. Counters a
    packet reaches only with one spent and another not are not covered."""

    def __init__(self, rs: RuleSet):
        self.ids = frozenset(r.id for _, _, r in rs.rules() if traffic_decides(r))
        self._reach = self._spent = None
        self._reached: dict[Packet, tuple[str, ...]] = {}   # asked per backend
        if self.ids:
            self._reach = Evaluator(_rewrite(rs, lambda r: (
                Rule(_REACH + r.id, replace(r.match, limit=None, quota=None,
                                            hashlimit=None),
                     Action("counter")), r)))
            self._spent = Evaluator(_rewrite(rs, _spent))

    def reached(self, p: Packet) -> tuple[str, ...]:
        """The limit rules `p` reaches: its verdict may be theirs to decide."""
        if self._reach is None:
            return ()
        out = self._reached.get(p)
        if out is None:
            out = self._reached[p] = tuple(rid[len(_REACH):]
                                           for rid in self._reach.evaluate(p).counted
                                           if rid.startswith(_REACH))
        return out

    def unsure_rules(self, packets: Iterable[Packet]) -> set[str]:
        """Rules whose counters the limits may change, over these packets."""
        out: set[str] = set()
        if self._reach is None:
            return out
        for p in packets:
            if self.reached(p):
                full = Counter(rid for rid in self._reach.evaluate(p).counted
                               if not rid.startswith(_REACH))
                spent = Counter(self._spent.evaluate(p).counted)
                out.update(rid for rid in full.keys() | spent.keys()
                           if full[rid] != spent[rid])
        return out


def _rewrite(rs: RuleSet, limited: Callable[[Rule], tuple[Rule, ...]]) -> RuleSet:
    """`rs` with every limit and quota rule replaced by what `limited` makes of it."""
    tables = tuple(replace(t, chains=tuple(replace(c, rules=tuple(
        x for r in c.rules for x in (limited(r) if traffic_decides(r) else (r,))))
        for c in t.chains)) for t in rs.tables)
    return rs.with_tables(tables)
