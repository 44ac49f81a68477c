"""The rule-set model: a firewall policy as data, whatever syntax loads it.

A RuleSet holds tables (nft's shape: a family, base chains at hooks with priorities
and policies, user chains, named sets), and the probes that prove it loaded. Every
Rule has an id that goes into the kernel with it (an iptables comment, an nft
comment, a BPF counter slot), so counters are read by id.

Conventions the renderers, importers, templates and the evaluator share:
- Interface names are literal names, or the testbed roles CLIENT / SERVER
  (`{client}`, `{server}`), which a renderer resolves to the testbed's names.
  A trailing `+` is a wildcard, as in iptables.
- Addresses are IPv4 or IPv6 networks in their canonical text ("198.18.0.0/24",
  "2001:2::1/128"); a rule's family follows from them, from an ICMP protocol,
  or from Match.ip_version where nothing else says it.
- Protocols are names: tcp, udp, icmp, icmpv6, and the portless esp, ah, gre and
  igmp (PORTLESS), which conntrack tracks by addresses alone and a firewall judges by
  protocol number.
- A rule has one action. `counter` on a rule means it counts packets; iptables
  always counts, nft only when asked.
- Some matches and actions exist in one syntax only (a payload string, hashlimit,
  iptables' `-j CT`): the model holds them so that rule sets using them are data
  too; the other renderers, and the reference evaluator, refuse them.

Everything here is pure: no root, no kernel, no subprocess.
"""
from __future__ import annotations

import functools
import hashlib
import operator
import ipaddress
import json
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Iterator

from fwbench.errors import FwbenchError

FAMILIES = ("ip", "ip6", "inet", "netdev")
HOOKS = ("prerouting", "input", "forward", "output", "postrouting", "ingress", "egress")
# The netdev family's hooks: a chain there sees the packets of one device.
NETDEV_HOOKS = ("ingress", "egress")
CHAIN_TYPES = ("filter", "nat", "route")
POLICIES = ("accept", "drop")
# nft's named priorities; iptables' tables sit at these.
PRIORITIES = {"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0,
              "security": 50, "srcnat": 100}
PROTOCOLS = ("tcp", "udp", "icmp", "icmpv6", "esp", "ah", "gre", "igmp")
PROTO_NUMBERS = {"icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58, "esp": 50, "ah": 51,
                 "gre": 47, "igmp": 2}
# Protocols without ports or types: ESP, AH, GRE version 0 and IGMP (conntrack
# tracks them by addresses alone; GRE's tracker keys only PPTP's version 1 by
# call id; a unicast IGMP message is forwarded like any other packet).
# AH is IPv4's only: in IPv6 it is an extension header, which ip6tables' -p and
# nft's meta l4proto skip to the upper layer (measured: an IPv6 AH packet never
# matches them, and ip6tables drops one without an upper layer at any -p rule).
PORTLESS = ("esp", "ah", "gre", "igmp")
CT_STATES = ("new", "established", "related", "invalid", "untracked")
PACKET_FIELDS = ("saddr", "daddr", "proto", "sport", "dport")
SET_KEYS = ("addr", "proto", "port")
# A verdict map's keys may also be a number: nft's `numgen random mod N` draws it.
MAP_KEYS = SET_KEYS + ("number",)
# numgen's draw, reciprocal_scale(get_random_u32(), mod): the probabilities of a
# random condition are numerators over 2**32 (RANDOM_SCALE), which holds both
# iptables' statistic (a 31-bit threshold) and every numgen bucket exactly.
RANDOM_SCALE = 1 << 32
# Terminal actions end the rule walk; the others let the packet go on.
# `redirect` is a dnat to the firewall's own address on the packet's input
# interface, the port kept or `port`: the packet is then delivered to the firewall.
TERMINAL = frozenset({"accept", "drop", "reject", "jump", "goto", "return",
                      "dnat", "snat", "masquerade", "vmap",
                      "redirect"})
# `ct` is iptables' `-j CT` without options: conntrack's default template, so the
# packet is tracked as it would be anyway; loading it registers conntrack's hooks
# in the namespace (nft has no such statement).
# ctmark sets the connection's mark as `mark` sets the packet's; savemark copies
# the packet's mark into it, restoremark the other way (iptables' CONNMARK).
# tcpmss rewrites a TCP SYN's maximum segment size option (iptables' TCPMSS, nft's
# `tcp option maxseg size set`), checksum fills in a packet's checksum (iptables'
# CHECKSUM --checksum-fill): they change bytes of the packet, never its verdict or
# its addresses, and the corpus's SYNs carry no MSS option to rewrite.
NONTERMINAL = frozenset({"counter", "mark", "notrack", "log", "ct",
                         "ctmark", "savemark", "restoremark", "tcpmss", "checksum"})
ACTIONS = TERMINAL | NONTERMINAL
LIMIT_UNITS = ("second", "minute", "hour", "day")
STRING_ALGOS = ("bm", "kmp")    # Boyer-Moore, Knuth-Morris-Pratt (the kernel's textsearch)
# A set element that times out is held as a permanent one when it cannot expire
# while its file and its import are compared: `check` takes minutes, so an hour
# or more left changes no verdict it sees; importers refuse shorter timeouts.
SET_TIMEOUT_FLOOR_S = 3600


CLIENT = "{client}"
SERVER = "{server}"
ROLES = {CLIENT: "client", SERVER: "server"}


class RuleSetError(FwbenchError):
    """A rule set that cannot be what it says: a jump to a missing chain, a loop,
    a duplicate id, a malformed field. The message is one line."""


class Unsupported(FwbenchError):
    """A backend cannot hold a feature the rule set uses. The message is the
    issue's one line: `<backend>: unsupported: <feature> (rule <id>)`."""

    def __init__(self, feature: str, where: str | None = None, backend: str = ""):
        self.feature, self.where, self.backend = feature, where, backend
        super().__init__(self._text())

    def _text(self) -> str:
        head = f"{self.backend}: " if self.backend else ""
        tail = f" ({self.where})" if self.where else ""
        return f"{head}unsupported: {self.feature}{tail}"

    def for_backend(self, backend: str) -> "Unsupported":
        return Unsupported(self.feature, self.where, backend)


# --- matches --------------------------------------------------------------------

@dataclass(frozen=True)
class Iface:
    name: str                # a literal name, CLIENT or SERVER; `+` at the end: prefix
    negate: bool = False


@dataclass(frozen=True)
class Prefix:
    net: str                 # canonical network text, e.g. "198.18.0.0/24"
    negate: bool = False

    @staticmethod
    def of(text: str, negate: bool = False) -> "Prefix":
        try:
            return Prefix(str(ipaddress.ip_network(text, strict=False)), negate)
        except ValueError:
            raise RuleSetError(f"not an address or prefix: {text!r}") from None

    @functools.cached_property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        # Cached: the evaluator and corpus ask for it per packet and per rule.
        return ipaddress.ip_network(self.net)

    @property
    def version(self) -> int:
        # From the canonical text: parsing it is most of validate()'s time.
        return 6 if ":" in self.net else 4


@dataclass(frozen=True)
class Ports:
    ranges: tuple[tuple[int, int], ...]   # inclusive; a single port is (p, p)
    negate: bool = False

    @staticmethod
    def of(*items: int | tuple[int, int], negate: bool = False) -> "Ports":
        ranges = tuple((i, i) if isinstance(i, int) else (int(i[0]), int(i[1])) for i in items)
        for lo, hi in ranges:
            if not 0 <= lo <= hi <= 65535:
                raise RuleSetError(f"bad port range {lo}-{hi}")
        if not ranges:
            raise RuleSetError("an empty port list")
        return Ports(ranges, negate)

    def contains(self, port: int) -> bool:
        return any(lo <= port <= hi for lo, hi in self.ranges) != self.negate

    @property
    def single(self) -> int | None:
        """The one port this matches, if it matches exactly one."""
        if not self.negate and len(self.ranges) == 1 and self.ranges[0][0] == self.ranges[0][1]:
            return self.ranges[0][0]
        return None


@dataclass(frozen=True)
class SetRef:
    """Membership of the packet's `fields` (in the set's key order) in a named set."""
    name: str
    fields: tuple[str, ...]  # from PACKET_FIELDS, e.g. ("daddr", "proto", "dport")
    negate: bool = False


# Fields added to the model later carry this: at their default they are left out
# of RuleSet.digest() and as_dict(), so a rule set that does not use them keeps the
# digest it had before they existed.
_LATER = {"later": True}


@dataclass(frozen=True)
class Limit:
    """A token bucket of `rate` per `per` holding up to `burst`: matches while it
    has tokens (iptables' limit, nft `limit rate`); with `over`, only when it has
    none (nft `limit rate over`). `bytes`: rate and burst count bytes, not
    packets (nft `limit rate N bytes/second`)."""
    rate: int
    per: str = "second"
    burst: int = 5
    over: bool = field(default=False, metadata=_LATER)
    bytes: bool = field(default=False, metadata=_LATER)


@dataclass(frozen=True)
class StringMatch:
    """The packet holds `text` (iptables' string match, searched from the start of
    the packet to its end with the kernel's textsearch `algo`)."""
    text: str
    algo: str = "bm"            # from STRING_ALGOS


@dataclass(frozen=True)
class HashLimit:
    """A token bucket per key: the packets above `rate` per `per` (after a burst
    of `burst`) match, or with `upto` those within it. The key is `mode`'s fields
    of the packet (HASHLIMIT_MODES; none: one bucket for all), addresses cut to
    their first `src_prefix` / `dst_prefix` bits (None: the whole address).
    iptables' hashlimit; `name` names the kernel's table of buckets
    (/proc/net/ipt_hashlimit/NAME), prefixed like chains (RuleSet.ipt_prefix);
    `size`, `max`, `expire` (ms) and `gcinterval` (ms) tune that table (None:
    the kernel's default). `max` decides too: past it a new key's packet does
    not match."""
    name: str
    rate: int
    per: str = "second"         # from LIMIT_UNITS
    burst: int = 5
    src_prefix: int | None = None
    upto: bool = field(default=False, metadata=_LATER)
    mode: tuple[str, ...] = field(default=("srcip",), metadata=_LATER)
    dst_prefix: int | None = field(default=None, metadata=_LATER)
    size: int | None = field(default=None, metadata=_LATER)
    max: int | None = field(default=None, metadata=_LATER)
    expire: int | None = field(default=None, metadata=_LATER)
    gcinterval: int | None = field(default=None, metadata=_LATER)


# The packet fields a hashlimit may key on, in the order iptables-save prints them.
HASHLIMIT_MODES = ("srcip", "srcport", "dstip", "dstport")


# TCP header flag bits, as iptables and nft name them.
TCP_FLAGS = {"fin": 0x01, "syn": 0x02, "rst": 0x04, "psh": 0x08, "ack": 0x10, "urg": 0x20,
             "ecn": 0x40, "cwr": 0x80}
# Address types of xt_addrtype / nft fib, by the firewall's routing tables.
ADDR_TYPES = ("unspec", "unicast", "local", "broadcast", "anycast", "multicast",
              "blackhole", "unreachable", "prohibit", "throw", "nat", "xresolve")
PKT_TYPES = ("host", "broadcast", "multicast", "otherhost")


@dataclass(frozen=True)
class TcpFlags:
    """The TCP packets whose flags, masked with `mask`, are one of `values`
    (with `negate`: none of them). iptables' `--tcp-flags MASK COMP` is one
    value; nft compares with `&` and may name a set of values."""
    mask: int
    values: frozenset[int]
    negate: bool = False

    def matches(self, flags: int) -> bool:
        return ((flags & self.mask) in self.values) != self.negate


@dataclass(frozen=True)
class AddrType:
    """xt_addrtype: the source's and the destination's type in the firewall's
    routing tables (each a set of ADDR_TYPES, None: any), each negatable."""
    src: frozenset[str] | None = None
    dst: frozenset[str] | None = None
    src_negate: bool = False
    dst_negate: bool = False


@dataclass(frozen=True)
class Range:
    """An integer field (TTL, hop limit, length) within lo..hi inclusive; with
    `negate`, outside it."""
    lo: int
    hi: int
    negate: bool = False

    def contains(self, value: int) -> bool:
        return (self.lo <= value <= self.hi) != self.negate


# Attributes of a packet that the testbed fixes, so the reference knows them
# (Evaluator.attr): its interfaces' group (0, "default") and type (1, Ethernet:
# veth) on the side it arrived or leaves by, and its priority (skb->priority,
# 0: the senders set none, and IPv4 forwarding sets it from a TOS of 0).
# The header fields of the ESP and AH packets the testbed sends (every one the
# same: a firewall that forwards them keeps no SA), with their widths in bits: a
# condition on one needs the rule's protocol to be that one.
TESTBED_IPSEC = {"esp spi": (0x100, 32), "esp sequence": (1, 32), "ah nexthdr": (59, 8),
                 "ah hdrlength": (1, 8), "ah reserved": (0, 16), "ah spi": (0x100, 32),
                 "ah sequence": (1, 32)}
ATTR_KEYS = ("iifgroup", "oifgroup", "iiftype", "oiftype", "priority") + tuple(TESTBED_IPSEC)


@dataclass(frozen=True)
class Attr:
    """The packet's `key` (from ATTR_KEYS, 32 bits) within one of `ranges`
    (inclusive); with `negate`, within none. Where the hook knows no such
    interface (no input interface at postrouting) neither matches (nft's meta
    breaks the rule there)."""
    key: str
    ranges: tuple[tuple[int, int], ...]
    negate: bool = False


# The options of every TCP packet the testbed sends, as a Linux SYN carries them:
# MSS 1460, SACK permitted, a timestamp (tsval 1, tsecr 0), a NOP, window scale 7.
TESTBED_TCP_OPTIONS = bytes.fromhex("020405b4" "0402" "080a0000000100000000" "01" "030307")


# nft's TCP option names -> kind, and their fields -> (offset, length) in bytes.
TCP_OPTION_KINDS = {"eol": 0, "nop": 1, "maxseg": 2, "window": 3, "sack-perm": 4,
                    "sack": 5, "sack0": 5, "sack1": 5, "sack2": 5, "sack3": 5,
                    "timestamp": 8, "md5sig": 19, "mptcp": 30, "fastopen": 34}
TCP_OPTION_FIELDS = {
    "maxseg": {"size": (2, 2)}, "window": {"count": (2, 1)},
    **{name: {"left": (2 + 8 * n, 4), "right": (6 + 8 * n, 4)}
       for n, name in enumerate(("sack0", "sack1", "sack2", "sack3"))},
    "sack": {"left": (2, 4), "right": (6, 4)},
    "timestamp": {"tsval": (2, 4), "tsecr": (6, 4)},
}


@dataclass(frozen=True)
class TcpOption:
    """A TCP option of `kind`: present (`offset` None; with `negate`, missing),
    or the big-endian field of `length` bytes at `offset` into it within one of
    `ranges` (with `negate`, within none), which a packet without the option
    meets neither way (nft's tcp option breaks the rule). nft's `tcp option`,
    iptables' `--tcp-option` (presence)."""
    kind: int
    offset: int | None = None
    length: int = 0
    ranges: tuple[tuple[int, int], ...] = ()
    negate: bool = False


@dataclass(frozen=True)
class Quota:
    """Matches while the packets that reached it so far hold fewer than `bytes`
    bytes, counting from `used` (iptables' quota, nft `quota N bytes [used U
    bytes]`); with `over`, only once they hold more (nft `quota over`, iptables
    `! --quota`). What came before decides, as for a rate limit."""
    bytes: int
    over: bool = False
    used: int = 0


@dataclass(frozen=True)
class Match:
    """All given conditions must hold (an empty Match matches every packet)."""
    iif: Iface | None = None
    oif: Iface | None = None
    src: Prefix | None = None
    dst: Prefix | None = None
    proto: str | None = None
    sport: Ports | None = None
    dport: Ports | None = None
    icmp_type: int | None = None        # ICMP or ICMPv6, as `proto` says
    ct_state: frozenset[str] | None = None
    mark: tuple[int, int] | None = None  # (value, mask): packet mark & mask == value
    mark_negate: bool = False
    sets: tuple[SetRef, ...] = ()
    limit: Limit | None = None
    string: StringMatch | None = field(default=None, metadata=_LATER)
    hashlimit: HashLimit | None = field(default=None, metadata=_LATER)
    # 4 or 6: only packets of that IP version match, where nothing else of the
    # rule says so (nft's `meta nfproto ipv6`, or `reject with icmpv6 ...`, in an
    # inet table); None: packets of either version, as the rest of the match says.
    ip_version: int | None = field(default=None, metadata=_LATER)
    # Holds at random, each time a packet reaches it, with probability
    # random / RANDOM_SCALE (iptables' statistic --mode random, nft's numgen random
    # compared with a bound): 0 < random < RANDOM_SCALE.
    random: int | None = field(default=None, metadata=_LATER)
    # The connection's mark: (value, mask) as `mark`; a packet without a
    # connection (untracked, or before conntrack) matches neither it nor its
    # negation (iptables' connmark, nft's ct mark).
    ct_mark: tuple[int, int] | None = field(default=None, metadata=_LATER)
    ct_mark_negate: bool = field(default=False, metadata=_LATER)
    # (every, phase): holds for the k-th packet that reaches it (its other
    # conditions met; k = 1, 2, ... counted by the rule itself since it loaded)
    # when k % every == phase: iptables' statistic --mode nth, nft's numgen inc.
    nth: tuple[int, int] | None = field(default=None, metadata=_LATER)
    tcp_flags: TcpFlags | None = field(default=None, metadata=_LATER)
    icmp_code: int | None = field(default=None, metadata=_LATER)    # icmp, icmpv6
    # More than one ICMP type (nft's anonymous sets); icmp_type is then None.
    icmp_types: frozenset[int] | None = field(default=None, metadata=_LATER)
    addrtype: AddrType | None = field(default=None, metadata=_LATER)
    # The IPv4 TTL or IPv6 hop limit as the hook sees it (forwarding has
    # decremented it before forward and postrouting).
    ttl: Range | None = field(default=None, metadata=_LATER)
    # The IP packet's length, header included (iptables' length, nft meta length).
    length: Range | None = field(default=None, metadata=_LATER)
    pkttype: frozenset[str] | None = field(default=None, metadata=_LATER)
    pkttype_negate: bool = field(default=False, metadata=_LATER)
    quota: Quota | None = field(default=None, metadata=_LATER)
    # The connection's NAT status: "dnat" and/or "snat" (any of them), set once a
    # NAT rule translated its first packet (iptables' --ctstate DNAT/SNAT, nft's
    # ct status dnat/snat); a packet without a connection has none.
    ct_status: frozenset[str] | None = field(default=None, metadata=_LATER)
    # Negated: the connection has none of them, as has a packet without one
    # (iptables' `! --ctstate DNAT`: kubelet's `! --ctstate RELATED,ESTABLISHED,DNAT`
    # is ct_state {invalid, new, untracked} and this).
    ct_status_negate: bool = field(default=False, metadata=_LATER)
    # Conditions on attributes the testbed fixes (nft's meta iifgroup, iiftype,
    # priority ...), each its own key.
    attrs: tuple[Attr, ...] = field(default=(), metadata=_LATER)
    # TCP options (present, missing, a field's value); the packet must be TCP.
    tcp_options: tuple[TcpOption, ...] = field(default=(), metadata=_LATER)
    # One of these (ICMP type, code) pairs (nft's `icmp type . icmp code { ... }`
    # where one rule must hold them all: a rate limit shares one budget).
    icmp_pairs: frozenset[tuple[int, int]] | None = field(default=None, metadata=_LATER)

    @property
    def version(self) -> int | None:
        """4 or 6 when an address, the protocol or ip_version pins the IP version,
        else None."""
        versions = {p.version for p in (self.src, self.dst) if p}
        if self.ip_version is not None:
            versions.add(self.ip_version)
        if self.proto == "icmp" or self.proto == "ah":
            versions.add(4)
        elif self.proto == "icmpv6":
            versions.add(6)
        if len(versions) > 1:
            raise RuleSetError("a rule mixes IPv4 and IPv6")
        return versions.pop() if versions else None


# --- actions and rules ------------------------------------------------------------

@dataclass(frozen=True)
class Action:
    kind: str                       # from ACTIONS
    chain: str | None = None        # jump, goto
    # mark: the new mark is (mark & ~mark_mask) ^ mark (iptables' --set-xmark; a
    # value inside its mask sets those bits, one outside it toggles them).
    mark: int | None = None
    mark_mask: int = 0xFFFFFFFF
    addr: str | None = None         # dnat, snat: the new address
    port: int | None = None         # dnat, snat, redirect: the new port (None keeps it)
    reject_with: str | None = None  # reject: e.g. "icmp-port-unreachable", "tcp-reset"
    log_prefix: str | None = None   # log
    # vmap: the verdict map looked up with the packet's fields (`fields` of the
    # SetRef; ("number",) looks up numgen's draw); a key it holds applies that
    # element's verdict, a key it lacks lets the packet go on to the next rule.
    vmap: SetRef | None = field(default=None, metadata=_LATER)
    # vmap on ("number",): nft's `numgen random mod N offset K` as (N, K).
    numgen: tuple[int, int] | None = field(default=None, metadata=_LATER)
    # masquerade, snat: the kernel picks the source port at random (iptables'
    # --random-fully, nft's fully-random), so a translated port is anyone's.
    random_port: bool = field(default=False, metadata=_LATER)
    # masquerade, snat: the last port of a source port range `port`..`port_hi`
    # (None: one port, or none). A connection whose port is in it keeps it (when
    # no other holds it); any other gets one of the range, the kernel's pick.
    port_hi: int | None = field(default=None, metadata=_LATER)
    # savemark: ct mark = (ct mark & ~ctmask) ^ (mark & nfmask); restoremark:
    # mark = (mark & ~nfmask) ^ (ct mark & ctmask), as (nfmask, ctmask). ctmark
    # takes `mark` and `mark_mask` as `mark` does, on the connection's mark.
    ct_masks: tuple[int, int] = field(default=(0xFFFFFFFF, 0xFFFFFFFF), metadata=_LATER)
    # tcpmss: the MSS set; None clamps it to the route's path MTU.
    mss: int | None = field(default=None, metadata=_LATER)

    @property
    def terminal(self) -> bool:
        return self.kind in TERMINAL


ACCEPT = Action("accept")
DROP = Action("drop")
RETURN = Action("return")


def jump(chain: str) -> Action:
    return Action("jump", chain=chain)


@dataclass(frozen=True)
class Rule:
    id: str
    match: Match = Match()
    action: Action = ACCEPT
    counter: bool = True
    comment: str | None = None      # a user's own comment, kept apart from the id


def evolve(obj, changes: dict | None = None, /, **more):
    """dataclasses.replace for the model's plain frozen dataclasses (Match, Action,
    Packet, Rule: fields only, no cached values, no __post_init__), without their
    __init__, which sets every field through object.__setattr__: three times
    faster, and importers and remap build one Match and one Rule per rule.
    `evolve(EMPTY_MATCH, dst=p)` is a new Match; `changes` is a dict of fields."""
    d = obj.__dict__.copy()
    if changes:
        d.update(changes)
    if more:
        d.update(more)
    new = _new(type(obj))
    _setattr(new, "__dict__", d)
    return new


_new, _setattr = object.__new__, object.__setattr__
# The fields validate checks only where a rule sets one, read in one C call.
_rare_fields = operator.attrgetter("tcp_options", "attrs", "icmp_pairs", "ct_status", "string",
                                   "hashlimit", "ct_mark", "nth", "random", "quota")
_everyday_fields = operator.attrgetter("tcp_flags", "icmp_code", "icmp_types", "addrtype",
                                       "ttl", "length", "pkttype")
EMPTY_MATCH = Match()
RULE = Rule("")     # evolve(RULE, id=..., ...) builds a Rule
_PLAIN = _rare_fields(EMPTY_MATCH)
_NO_EVERYDAY = _everyday_fields(EMPTY_MATCH)
# Their attributes as plain dicts, not the instance dicts __init__ made (which
# share their keys with the class): a plain dict copies at a third less cost,
# and evolve() copies one per rule an importer reads.
for _template in (EMPTY_MATCH, RULE):
    _setattr(_template, "__dict__", dict(_template.__dict__))


@dataclass(frozen=True)
class Chain:
    name: str
    rules: tuple[Rule, ...] = ()
    hook: str | None = None         # None: a user chain, entered by jump or goto
    priority: int = 0
    type: str = "filter"
    policy: str = "accept"          # base chains only
    # A netdev chain's interface (a name, CLIENT or SERVER): an ingress chain sees
    # only packets arriving there, an egress chain only packets leaving by it.
    # None: the renderers' default, the client side for ingress, the server side
    # for egress (where forwarded packets arrive, and leave).
    device: str | None = field(default=None, metadata=_LATER)

    @property
    def base(self) -> bool:
        return self.hook is not None


@dataclass(frozen=True)
class Set:
    """A named set. `keys` are the element's parts, from SET_KEYS, e.g.
    ("addr", "proto", "port"); an element is a tuple of that many strings or ints
    (addresses may be prefixes when `interval`). `version` says which IP version
    its addresses are. `size` bounds how many elements it may hold (None: the
    renderer's own bound; nft picks its set implementation by it), `counters`
    gives every element a packet counter (ipset's `counters`)."""
    name: str
    keys: tuple[str, ...]
    elements: tuple[tuple, ...] = ()
    version: int = 4
    interval: bool = False
    size: int | None = field(default=None, metadata=_LATER)
    counters: bool = field(default=False, metadata=_LATER)
    # A verdict map: element i leads to verdicts[i] (accept, drop, return, jump,
    # goto). `inline`: written in its one rule (nft's anonymous `vmap { ... }`).
    verdicts: tuple["Action", ...] = field(default=(), metadata=_LATER)
    inline: bool = field(default=False, metadata=_LATER)
    # A verdict map even with no elements (kube-proxy's empty firewall-ips):
    # `verdicts` alone cannot say so.
    map: bool = field(default=False, metadata=_LATER)

    @property
    def is_vmap(self) -> bool:
        return bool(self.verdicts) or self.inline or self.map


def timeout_note(where: str, shortest_s: int) -> str:
    """The note, or (below SET_TIMEOUT_FLOOR_S) the refusal, for the timeouts of
    a set's elements: one line, `where` names the set in the user's file."""
    if shortest_s < SET_TIMEOUT_FLOOR_S:
        raise RuleSetError(f"{where}: unsupported: an element that expires in "
                           f"{shortest_s} s (under {SET_TIMEOUT_FLOOR_S} s, it could "
                           f"expire during a check)")
    return (f"{where}: element timeouts left out (the shortest {shortest_s} s): none "
            f"expires within {SET_TIMEOUT_FLOOR_S} s, longer than a check takes")


@dataclass(frozen=True)
class Table:
    family: str
    name: str
    chains: tuple[Chain, ...] = ()
    sets: tuple[Set, ...] = ()

    def chain(self, name: str) -> Chain:
        try:
            return self._chains_by_name[name]
        except KeyError:
            raise RuleSetError(f"table {self.family} {self.name} has no chain {name!r}") \
                from None

    @functools.cached_property
    def _chains_by_name(self) -> dict[str, Chain]:
        # A scan per lookup made walking kube-proxy's 120,000 chains quadratic.
        by: dict[str, Chain] = {}
        for c in self.chains:
            by.setdefault(c.name, c)
        return by

    def set(self, name: str) -> Set:
        try:
            return self._sets_by_name[name]
        except KeyError:
            raise RuleSetError(f"table {self.family} {self.name} has no set {name!r}") \
                from None

    @functools.cached_property
    def _sets_by_name(self) -> dict[str, Set]:
        by: dict[str, Set] = {}
        for s in self.sets:
            by.setdefault(s.name, s)
        return by


# --- packets and probes ------------------------------------------------------------

@dataclass(frozen=True)
class Packet:
    """One packet entering the firewall on the `iif` side ("client" or "server")."""
    version: int
    iif: str
    saddr: str
    daddr: str
    proto: str
    sport: int | None = None        # tcp, udp
    dport: int | None = None
    icmp_type: int | None = None    # icmp, icmpv6
    mark: int = 0
    ct_state: str = "new"
    tcp_flags: int = 0x02           # tcp: a SYN unless told
    icmp_code: int = 0              # icmp, icmpv6
    ttl: int = 64                   # IPv4 TTL / IPv6 hop limit as sent
    # Bytes of L4 payload beyond the injector's marker (for length matches).
    pad: int = 0

    @property
    def oif(self) -> str:
        """The testbed routes every forwarded packet out of the other side."""
        return "server" if self.iif == "client" else "client"


@dataclass(frozen=True)
class Probe:
    """A packet that proves the rule set loaded: forwarded (and counted by `rule`,
    and translated into `translated` when given) or dropped. A `local` probe is
    addressed to the firewall itself: `forward` then means accepted by its input
    hook and delivered to it, which no capture sees, so `rule` must count every
    packet of it."""
    name: str
    packet: Packet
    forward: bool
    rule: str | None = None
    translated: Packet | None = None
    local: bool = False
    # A random choice (kube-proxy's endpoints): forwarded translated into one of
    # these, compared by addresses and destination port (the source port may be
    # a masquerade's random one).
    choices: tuple[Packet, ...] = field(default=(), metadata=_LATER)


@dataclass(frozen=True)
class RuleSet:
    name: str                               # template name or file it came from
    tables: tuple[Table, ...]
    probes: tuple[Probe, ...] = ()
    # The measured flow: its packets, and the rule that must count them.
    flow: Packet | None = None
    flow_rule: str | None = None
    size: int = 0                           # the N a sweep scales (rules or elements)
    layout: str = "linear"                  # "linear" or "set": how entries are held
    # iptables chain and ipset names carry this prefix (templates: "fwb_";
    # imports: ""): iptables has no table of fwbench's own to keep them apart.
    ipt_prefix: str = ""
    # Imported rule sets: original address -> testbed address, and interface map.
    address_map: tuple[tuple[str, str], ...] = ()
    iface_map: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    # Imported rule sets: rule id -> where the file has it ("rules.v4:12", or an
    # nft rule's table, chain and place), for messages that name the user's rule.
    origins: tuple[tuple[str, str], ...] = ()
    # Prefixes the rule set's NAT sends packets to that the server must hold (the
    # kube-proxy template's pods): a testbed for it routes them to the server.
    served: tuple[str, ...] = field(default=(), metadata=_LATER)

    # --- walking -----------------------------------------------------------

    def rules(self) -> Iterator[tuple[Table, Chain, Rule]]:
        for t in self.tables:
            for c in t.chains:
                for r in c.rules:
                    yield t, c, r

    def origin(self, rule_id: str) -> str | None:
        """Where the imported file has rule `rule_id`; None for a template's."""
        if not self.origins:
            return None
        table = self.__dict__.get("_origins")
        if table is None:
            table = dict(self.origins)
            object.__setattr__(self, "_origins", table)
        return table.get(rule_id)

    def rule(self, rule_id: str) -> Rule:
        for _, _, r in self.rules():
            if r.id == rule_id:
                return r
        raise RuleSetError(f"no rule with id {rule_id!r}")

    def table(self, family: str, name: str) -> Table:
        for t in self.tables:
            if (t.family, t.name) == (family, name):
                return t
        raise RuleSetError(f"no table {family} {name}")

    @property
    def rule_count(self) -> int:
        return sum(1 for _ in self.rules())

    @property
    def versions(self) -> frozenset[int]:
        """The IP versions the rule set filters: from table families, then rules."""
        out: set[int] = set()
        for t in self.tables:
            if t.family == "ip":
                out.add(4)
            elif t.family == "ip6":
                out.add(6)
            else:
                for c in t.chains:
                    for r in c.rules:
                        v = r.match.version
                        if v:
                            out.add(v)
                out |= {s.version for s in t.sets}
        return frozenset(out or {4})

    def features(self) -> dict[str, str]:
        """Every feature the rule set uses -> where it is first used (`rule ID`,
        `chain NAME`, `table NAME`); the vocabulary backends declare support in."""
        out: dict[str, str] = {}

        def add(feature: str, where: str) -> None:
            out.setdefault(feature, where)

        for t in self.tables:
            add(f"family {t.family}", f"table {t.name}")
            for s in t.sets:
                if s.is_vmap:
                    add("verdict map", f"set {s.name}")
                    continue
                add("set " + " . ".join(s.keys), f"set {s.name}")
                if s.interval:
                    add("set with prefixes", f"set {s.name}")
                if s.counters:
                    add("set counters", f"set {s.name}")
                if s.version == 6:
                    add("ipv6", f"set {s.name}")
            for c in t.chains:
                if c.base:
                    add(f"hook {c.hook}", f"chain {c.name}")
                    add(f"chain type {c.type}", f"chain {c.name}")
                    add(f"policy {c.policy}", f"chain {c.name}")
                else:
                    add("user chain", f"chain {c.name}")
                for r in c.rules:
                    where = f"rule {r.id}"
                    for f in rule_features(r):
                        add(f, where)
        return out

    def digest(self) -> str:
        """A stable hash of everything that reaches the kernel or the verdicts.
        Computed once per instance (the rule set is immutable): at 100,000 rules it
        takes seconds, and a trial asks for it several times."""
        cached = self.__dict__.get("_digest")
        if cached is None:
            cached = self._compute_digest()
            object.__setattr__(self, "_digest", cached)
        return cached

    def _compute_digest(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps(_plain(self.tables), sort_keys=True,
                            separators=(",", ":")).encode())
        h.update(json.dumps([self.ipt_prefix, self.layout], sort_keys=True).encode())
        return h.hexdigest()

    def with_tables(self, tables: tuple[Table, ...], **kw) -> "RuleSet":
        return replace(self, tables=tables, **kw)


def rule_features(r: Rule) -> list[str]:
    """The features one rule uses, in SUPPORTS' vocabulary."""
    m, a, out = r.match, r.action, []
    if m.iif:
        out.append("iif")
    if m.oif:
        out.append("oif")
    for what, p in (("saddr", m.src), ("daddr", m.dst)):
        if p:
            out.append(what)
            if p.version == 6:
                out.append("ipv6")
            if p.network.prefixlen != p.network.max_prefixlen:
                out.append(f"{what} prefix")
    if m.proto:
        out.append(f"proto {m.proto}")
    if m.ip_version is not None:
        out.append("ip version")
        if m.ip_version == 6:
            out.append("ipv6")
    for what, p in (("sport", m.sport), ("dport", m.dport)):
        if p:
            out.append(what)
            if p.single is None and not p.negate:
                out.append("port range" if len(p.ranges) == 1 else "port list")
    if m.icmp_type is not None:
        out.append("icmpv6 type" if m.proto == "icmpv6" else "icmp type")
    if any(x and x.negate for x in (m.iif, m.oif, m.src, m.dst, m.sport, m.dport)) \
            or m.mark_negate or any(s.negate for s in m.sets):
        out.append("negation")
    if m.ct_state:
        out.append("ct state")
    if m.mark:
        out.append("mark match")
    if m.sets:
        out.append("set match")
    if m.limit:
        out.append("limit")
        if m.limit.over:
            out.append("limit over")
        if m.limit.bytes:
            out.append("limit in bytes")
    if m.string:
        out.append("string match")
    if m.hashlimit:
        out.append("hashlimit")
    if m.random is not None:
        out.append("random match")
    if m.nth is not None:
        out.append("nth match")
    if m.ct_mark is not None:
        out.append("ct mark match")
        if m.ct_mark_negate:
            out.append("negation")
    if m.quota:
        out.append("quota")
    if m.ct_status:
        out.append("ct status")
        if m.ct_status_negate:
            out.append("negation")
    out += [a.key if a.key in TESTBED_IPSEC else f"meta {a.key}" for a in m.attrs]
    if m.icmp_pairs:
        out.append("icmp type code set")
    if m.tcp_options:
        out.append("tcp option")
        if any(o.offset is not None for o in m.tcp_options):
            out.append("tcp option field")
    out += _everyday_features(m)
    if a.random_port:
        out.append("random port")
    if a.kind == "vmap":
        out.append("verdict map" if a.numgen is None else "numgen map")
    else:
        out.append({"mark": "mark set", "ctmark": "ct mark set", "savemark": "ct mark save",
                    "tcpmss": "tcp mss", "checksum": "checksum fill",
                    "restoremark": "ct mark restore"}.get(a.kind, a.kind))
    if r.counter:
        out.append("counter")
    return out


def _everyday_features(m: Match) -> list[str]:
    """The features of the everyday host and router matches (TCP flags, ICMP
    codes and type sets, address and packet types, TTL, length)."""
    out = []
    if m.tcp_flags is not None:
        out.append("tcp flags")
        if len(m.tcp_flags.values) > 1:
            out.append("tcp flags set")
    if m.icmp_code is not None:
        out.append("icmp code")
    if m.icmp_types is not None:
        out.append("icmp type set")
    if m.addrtype is not None:
        out.append("addrtype")
    if m.ttl is not None:
        out.append("ttl")
    if m.length is not None:
        out.append("length")
    if m.pkttype is not None:
        out.append("pkttype")
    if any(x is not None and x.negate for x in (m.tcp_flags, m.ttl, m.length)) \
            or m.pkttype_negate or (m.addrtype is not None
                                    and (m.addrtype.src_negate or m.addrtype.dst_negate)):
        out.append("negation")
    return out


def _plain(obj):
    """Dataclasses, tuples and frozensets as JSON-able values, sets sorted; fields
    added later (_LATER) only when they differ from their default."""
    plan = _FIELD_PLANS.get(type(obj))
    if plan is None and is_dataclass(obj):
        plan = _FIELD_PLANS[type(obj)] = tuple(
            (f.name, bool(f.metadata.get("later")), f.default) for f in fields(obj))
    if plan is not None:
        out = {}
        for name, later, default in plan:
            value = getattr(obj, name)
            if not (later and value == default):
                out[name] = value if type(value) in _SCALARS else _plain(value)
        return out
    if isinstance(obj, (tuple, list)):
        return [x if type(x) in _SCALARS else _plain(x) for x in obj]
    if isinstance(obj, frozenset):
        return sorted(obj)
    return obj


# Per dataclass: its fields as (name, added later, default); the digest walks every
# rule, and dataclasses.fields() per object was most of its time.
_FIELD_PLANS: dict[type, tuple] = {}
_SCALARS = frozenset({str, int, bool, float, type(None)})


def as_dict(rs: RuleSet) -> dict:
    """The rule set as plain data (run.json, debugging)."""
    return _plain(rs)


# --- validation ----------------------------------------------------------------------

def validate(rs: RuleSet) -> RuleSet:
    """Raise RuleSetError (one line) unless the rule set is well formed: known
    families, hooks, types and actions; unique rule ids; jumps to chains of the
    same table; no jump loop; sets referenced exist with as many keys as fields."""
    seen: dict[str, str] = {}
    # [True if any rule rewrites the MSS, then the ids of rules on an MSS field]
    mss_fields: list = [False]
    for t in rs.tables:
        if t.family not in FAMILIES:
            raise RuleSetError(f"table {t.name}: unknown family {t.family!r}")
        chains = {c.name: c for c in t.chains}
        if len(chains) != len(t.chains):
            raise RuleSetError(f"table {t.family} {t.name}: a chain name appears twice")
        sets = {s.name: s for s in t.sets}
        for s in t.sets:
            if s.is_vmap:
                _validate_map(s, chains)
            elif not s.keys or any(k not in SET_KEYS for k in s.keys):
                raise RuleSetError(f"set {s.name}: keys must be from {', '.join(SET_KEYS)}")
            if any(len(e) != len(s.keys) for e in s.elements):
                raise RuleSetError(f"set {s.name}: an element does not have "
                                   f"{len(s.keys)} parts")
            if s.size is not None and not len(s.elements) <= s.size >= 1:
                raise RuleSetError(f"set {s.name}: size {s.size} is below its "
                                   f"{len(s.elements)} elements, or below 1")
        for c in t.chains:
            if c.base:
                if c.hook not in HOOKS:
                    raise RuleSetError(f"chain {c.name}: unknown hook {c.hook!r}")
                if c.type not in CHAIN_TYPES:
                    raise RuleSetError(f"chain {c.name}: unknown type {c.type!r}")
                if c.policy not in POLICIES:
                    raise RuleSetError(f"chain {c.name}: unknown policy {c.policy!r}")
                if (c.hook in NETDEV_HOOKS) != (t.family == "netdev"):
                    raise RuleSetError(f"chain {c.name}: hook {c.hook} in family {t.family}")
            if c.device is not None and (c.hook not in NETDEV_HOOKS or not c.device):
                raise RuleSetError(f"chain {c.name}: a device belongs to a netdev ingress "
                                   f"or egress chain only, and is not empty")
            for r in c.rules:
                if not r.id:
                    raise RuleSetError(f"chain {c.name}: a rule without an id")
                if r.id in seen:
                    raise RuleSetError(f"rule id {r.id!r} appears twice")
                seen[r.id] = c.name
                a = r.action
                if a.kind not in ACTIONS:
                    raise RuleSetError(f"rule {r.id}: unknown action {a.kind!r}")
                if a.kind in ("jump", "goto"):
                    if a.chain not in chains:
                        raise RuleSetError(f"rule {r.id}: {a.kind} to a missing chain "
                                           f"{a.chain!r}")
                    if chains[a.chain].base:
                        raise RuleSetError(f"rule {r.id}: {a.kind} to base chain {a.chain}")
                if a.kind == "vmap":
                    _validate_vmap(r.id, a, sets)
                m = r.match
                # The rarely used conditions and actions, checked only where present
                # (validate walks every rule of a 100,000-rule import).
                if _rare_fields(m) != _PLAIN or a.port_hi is not None \
                        or a.kind in _RARE_ACTIONS:
                    _validate_rare(r, mss_fields)
                if a.kind in ("dnat", "snat") and not a.addr:
                    raise RuleSetError(f"rule {r.id}: {a.kind} without an address")
                if m.proto:
                    if m.proto not in PROTOCOLS:
                        raise RuleSetError(f"rule {r.id}: unknown protocol {m.proto!r}")
                    if m.proto[:4] == "icmp" or m.proto == "ah":
                        m.version  # raises on a mixed rule
                if m.src is not None and m.dst is not None:
                    m.version  # raises on a mixed rule
                if m.ip_version is not None:
                    _validate_ip_version(r.id, m, t.family)
                if (m.sport or m.dport) and m.proto not in ("tcp", "udp"):
                    raise RuleSetError(f"rule {r.id}: a port match needs tcp or udp")
                if m.icmp_type is not None and m.proto not in ("icmp", "icmpv6"):
                    raise RuleSetError(f"rule {r.id}: an ICMP type needs icmp or icmpv6")
                if _everyday_fields(m) != _NO_EVERYDAY:
                    _validate_everyday(r.id, m)
                if m.ct_state and not m.ct_state <= set(CT_STATES):
                    raise RuleSetError(f"rule {r.id}: unknown ct state "
                                       f"{sorted(m.ct_state - set(CT_STATES))[0]!r}")
                for ref in m.sets:
                    if ref.name not in sets:
                        raise RuleSetError(f"rule {r.id}: no set {ref.name!r}")
                    if len(ref.fields) != len(sets[ref.name].keys) or \
                            any(f not in PACKET_FIELDS for f in ref.fields):
                        raise RuleSetError(f"rule {r.id}: set {ref.name} looked up with "
                                           f"{len(ref.fields)} fields, it has "
                                           f"{len(sets[ref.name].keys)} keys")
        _validate_loops(t)
    if mss_fields and mss_fields[0] is True:
        # The reference reads the testbed's MSS, not one a rule rewrote.
        rid = next((x for x in mss_fields[1:] if x is not True), None)
        if rid is not None:
            raise RuleSetError(f"rule {rid}: unsupported: a tcp option maxseg field in a "
                               f"rule set that rewrites the MSS")
    for probe in rs.probes:
        if probe.rule is not None and probe.rule not in seen:
            raise RuleSetError(f"probe {probe.name}: no rule {probe.rule!r}")
    if rs.flow_rule is not None and rs.flow_rule not in seen:
        raise RuleSetError(f"measured flow: no rule {rs.flow_rule!r}")
    return rs


def _validate_ip_version(rid: str, m: Match, family: str) -> None:
    if m.ip_version not in (4, 6):
        raise RuleSetError(f"rule {rid}: IP version {m.ip_version!r}, expected 4 or 6")
    m.version  # raises on a mixed rule
    if family == ("ip6" if m.ip_version == 4 else "ip"):
        raise RuleSetError(f"rule {rid}: an IPv{m.ip_version} rule in a table of "
                           f"family {family}")


def _validate_everyday(rid: str, m: Match) -> None:
    if m.tcp_flags is not None and (m.proto != "tcp" or not m.tcp_flags.values or any(
            v & ~m.tcp_flags.mask for v in m.tcp_flags.values) or not 0 <= m.tcp_flags.mask
            <= 0xFF):
        raise RuleSetError(f"rule {rid}: TCP flags need tcp, and values within their mask")
    if m.icmp_code is not None and (m.proto not in ("icmp", "icmpv6")
                                    or not 0 <= m.icmp_code <= 255):
        raise RuleSetError(f"rule {rid}: an ICMP code needs icmp or icmpv6")
    if m.icmp_types is not None and (m.proto not in ("icmp", "icmpv6") or len(m.icmp_types) < 2
                                     or m.icmp_type is not None):
        raise RuleSetError(f"rule {rid}: an ICMP type set needs icmp or icmpv6, two types "
                           f"or more, and no single type")
    a = m.addrtype
    if a is not None and (a.src is None and a.dst is None or any(
            t not in ADDR_TYPES for t in (a.src or frozenset()) | (a.dst or frozenset()))):
        raise RuleSetError(f"rule {rid}: an addrtype match needs known source or "
                           f"destination types")
    for what, r, top in (("TTL", m.ttl, 255), ("length", m.length, 65535)):
        if r is not None and not 0 <= r.lo <= r.hi <= top:
            raise RuleSetError(f"rule {rid}: {what} range {r.lo}-{r.hi}")
    if m.pkttype is not None and (not m.pkttype or not m.pkttype <= set(PKT_TYPES)):
        raise RuleSetError(f"rule {rid}: packet types must be from {', '.join(PKT_TYPES)}")


def _validate_string(rid: str, s: StringMatch) -> None:
    if not s.text:
        raise RuleSetError(f"rule {rid}: an empty string match")
    if s.algo not in STRING_ALGOS:
        raise RuleSetError(f"rule {rid}: string match algorithm {s.algo!r}, expected "
                           f"{' or '.join(STRING_ALGOS)}")



_RARE_ACTIONS = frozenset({"tcpmss", "ctmark", "savemark", "restoremark"})


def _validate_rare(r: Rule, mss_fields: list) -> None:
    """validate's checks of the conditions and actions few rules use."""
    m, a = r.match, r.action
    if m.icmp_pairs is not None and not (
            m.proto in ("icmp", "icmpv6") and m.icmp_pairs
            and m.icmp_type is None and m.icmp_code is None
            and all(0 <= x <= 255 for pair in m.icmp_pairs for x in pair)):
        raise RuleSetError(f"rule {r.id}: icmp type . code pairs need proto icmp "
                           f"or icmpv6 and no other type or code match")
    for o in m.tcp_options:
        if m.proto != "tcp" or not 0 <= o.kind <= 255 or (
                o.offset is not None and not (
                    o.ranges and 1 <= o.length <= 4 and 0 <= o.offset < 40
                    and all(0 <= lo <= hi < 1 << (8 * o.length)
                            for lo, hi in o.ranges))):
            raise RuleSetError(f"rule {r.id}: tcp option {o}: needs proto tcp, "
                               f"a kind 0-255, a field of 1-4 bytes")
    for at in m.attrs:
        bits = TESTBED_IPSEC.get(at.key, (0, 32))[1]
        if at.key not in ATTR_KEYS or not at.ranges or not all(
                0 <= lo <= hi < 2 ** bits for lo, hi in at.ranges):
            raise RuleSetError(f"rule {r.id}: meta {at.key} {at.ranges}: a key "
                               f"from {', '.join(ATTR_KEYS)}, {bits}-bit ranges")
        if at.key in TESTBED_IPSEC and m.proto != at.key.split()[0]:
            raise RuleSetError(f"rule {r.id}: {at.key} needs protocol "
                               f"{at.key.split()[0]}")
    if len({at.key for at in m.attrs}) != len(m.attrs):
        raise RuleSetError(f"rule {r.id}: two conditions on one meta key")
    if m.ct_status is not None and not (m.ct_status and m.ct_status <= {"dnat", "snat"}):
        raise RuleSetError(f"rule {r.id}: ct status must be dnat, snat or both")
    if a.port_hi is not None and not (
            a.kind in ("masquerade", "snat") and a.port is not None
            and 0 < a.port <= a.port_hi <= 65535):
        raise RuleSetError(f"rule {r.id}: a source port range {a.port}-"
                           f"{a.port_hi} belongs to masquerade or snat")
    if a.kind == "tcpmss" and (m.proto != "tcp" or a.mss is not None
                               and not 0 < a.mss < 65536):
        raise RuleSetError(f"rule {r.id}: tcpmss needs tcp, and an MSS of "
                           f"1..65535")
    if m.string is not None:
        _validate_string(r.id, m.string)
    if m.hashlimit is not None:
        _validate_hashlimit(r.id, m.hashlimit)
    for what, pair in (("ct mark", m.ct_mark), ("ct masks", a.ct_masks)):
        if pair is not None and not all(0 <= x <= 0xFFFFFFFF for x in pair):
            raise RuleSetError(f"rule {r.id}: {what} {pair} is not 32 bits")
    if m.nth is not None and not 0 <= m.nth[1] < m.nth[0] >= 2:
        raise RuleSetError(f"rule {r.id}: nth match every {m.nth[0]} phase "
                           f"{m.nth[1]}: every must be 2 or more, phase below it")
    if m.random is not None and not 0 < m.random < RANDOM_SCALE:
        raise RuleSetError(f"rule {r.id}: random match {m.random} is not "
                           f"strictly between 0 and {RANDOM_SCALE}")
    if m.quota is not None and min(m.quota.bytes, m.quota.used) < 0:
        raise RuleSetError(f"rule {r.id}: quota of {m.quota.bytes} bytes, "
                           f"{m.quota.used} used: neither may be negative")
    if a.kind == "tcpmss":
        mss_fields[0] = True
    if any(o.kind == 2 and o.offset is not None for o in m.tcp_options):
        mss_fields.append(r.id)

def _validate_hashlimit(rid: str, h: HashLimit) -> None:
    if not h.name:
        raise RuleSetError(f"rule {rid}: a hashlimit without a name")
    if h.rate < 1 or h.burst < 1:
        raise RuleSetError(f"rule {rid}: hashlimit rate {h.rate} burst {h.burst}: "
                           f"both must be at least 1")
    if h.per not in LIMIT_UNITS:
        raise RuleSetError(f"rule {rid}: hashlimit per {h.per!r}, expected one of "
                           f"{', '.join(LIMIT_UNITS)}")
    for side, bits in (("source", h.src_prefix), ("destination", h.dst_prefix)):
        if bits is not None and not 0 <= bits <= 128:
            raise RuleSetError(f"rule {rid}: hashlimit {side} prefix /{bits}")
    if not set(h.mode) <= set(HASHLIMIT_MODES) or len(set(h.mode)) != len(h.mode):
        raise RuleSetError(f"rule {rid}: hashlimit mode {','.join(h.mode)}: from "
                           f"{', '.join(HASHLIMIT_MODES)}, each once")
    for what in ("size", "max", "expire", "gcinterval"):
        value = getattr(h, what)
        if value is not None and not 0 < value < 2 ** 32:
            raise RuleSetError(f"rule {rid}: hashlimit {what} {value}")


# What a verdict map's element may do.
MAP_VERDICTS = ("accept", "drop", "return", "jump", "goto")


def _validate_map(s: Set, chains: dict[str, Chain]) -> None:
    if not s.keys or any(k not in MAP_KEYS for k in s.keys):
        raise RuleSetError(f"map {s.name}: keys must be from {', '.join(MAP_KEYS)}")
    if "number" in s.keys and s.keys != ("number",):
        raise RuleSetError(f"map {s.name}: a number key stands alone")
    if len(s.verdicts) != len(s.elements) or any(len(e) != len(s.keys) for e in s.elements):
        raise RuleSetError(f"map {s.name}: every element needs {len(s.keys)} key parts "
                           f"and one verdict")
    if len(set(s.elements)) != len(s.elements):
        raise RuleSetError(f"map {s.name}: a key appears twice")
    for v in s.verdicts:
        if v.kind not in MAP_VERDICTS:
            raise RuleSetError(f"map {s.name}: verdict {v.kind!r}, expected one of "
                               f"{', '.join(MAP_VERDICTS)}")
        if v.kind in ("jump", "goto") and (v.chain not in chains or chains[v.chain].base):
            raise RuleSetError(f"map {s.name}: {v.kind} to a missing or base chain "
                               f"{v.chain!r}")


def _validate_vmap(rid: str, a: Action, sets: dict[str, Set]) -> None:
    ref = a.vmap
    s = sets.get(ref.name) if ref is not None else None
    if s is None or not s.is_vmap:
        raise RuleSetError(f"rule {rid}: vmap without a verdict map")
    if len(ref.fields) != len(s.keys) or ref.negate:
        raise RuleSetError(f"rule {rid}: map {s.name} looked up with {len(ref.fields)} "
                           f"fields, it has {len(s.keys)} keys")
    if ref.fields == ("number",):
        if a.numgen is None or s.keys != ("number",) or not 0 < a.numgen[0] < RANDOM_SCALE \
                or not 0 <= a.numgen[1] < RANDOM_SCALE:
            raise RuleSetError(f"rule {rid}: a number lookup needs numgen (mod, offset) "
                               f"and a map of numbers")
    elif a.numgen is not None or any(f not in PACKET_FIELDS for f in ref.fields):
        raise RuleSetError(f"rule {rid}: map {s.name} looked up by "
                           f"{' . '.join(ref.fields)}")


# The actions that lead to other chains (jump_targets has something to say).
JUMPING = frozenset({"jump", "goto", "vmap"})


def jump_targets(r: Rule, maps: dict[str, Set]) -> tuple[str, ...]:
    """The chains rule `r` may jump or go to: its action's, or those of its verdict
    map (`maps`: its table's sets by name)."""
    a = r.action
    if a.kind in ("jump", "goto"):
        return (a.chain,)
    if a.kind == "vmap" and a.vmap is not None and a.vmap.name in maps:
        return tuple(v.chain for v in maps[a.vmap.name].verdicts
                     if v.kind in ("jump", "goto"))
    return ()


def _validate_loops(t: Table) -> None:
    """Depth-first over jump/goto edges (a verdict map's too), without recursion:
    an imported rule set may nest chains deeper than Python's stack."""
    maps = {s.name: s for s in t.sets if s.is_vmap}
    edges = {c.name: sorted({x for r in c.rules if r.action.kind in JUMPING
                             for x in jump_targets(r, maps)})
             for c in t.chains}
    done: set[str] = set()
    for root in edges:
        if root in done:
            continue
        path, on_path = [root], {root}
        todo = [iter(edges[root])]
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                todo.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
            elif nxt in on_path:
                loop = path[path.index(nxt):] + [nxt]
                if len(loop) > 8:
                    loop = loop[:3] + [f"... ({len(loop) - 6} more)"] + loop[-3:]
                raise RuleSetError(f"table {t.family} {t.name}: jump loop "
                                   f"{' -> '.join(loop)}")
            elif nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                todo.append(iter(edges.get(nxt, ())))


@dataclass(frozen=True)
class Interfaces:
    """The firewall's two interfaces in the testbed: facing the client (ingress of
    the test flow) and facing the server, and the firewall's own addresses (the
    eBPF filters pass traffic to them, as INPUT would)."""
    client_side: str
    server_side: str
    local4: tuple[str, ...] = ()
    local6: tuple[str, ...] = ()

    def resolve(self, name: str) -> str:
        """A rule's interface name as the kernel knows it."""
        return {CLIENT: self.client_side, SERVER: self.server_side}.get(name, name)

