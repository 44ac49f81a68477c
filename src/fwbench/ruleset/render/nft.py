"""The nftables renderer: a RuleSet as `nft -f` input.

The text is written in the form `nft list ruleset` prints it back (nft 1.0.6, as
measured on this machine's kernel), so a backend can compare what the kernel holds
with what was asked, line by line: `comparable()` makes both sides comparable
(counters' values and blank lines left out, each set's elements taken as a set,
since nft lists them several to a line in its own order). Where nft rewrites what
it is given (a /32 dropped, a named priority, a mark mask shown as a prefix, port
ranges merged, a protocol match folded into the port match that implies it), the
renderer writes nft's form.

Each rule carries its id as its last statement, `comment "fwb:ID"` (a user's own
comment goes before the id in the same string: nft has one comment per rule).

Where nft's meaning would differ from the model's, the renderer adds what makes
them equal (`meta l4proto { tcp, udp }` before a port lookup an ICMP packet could
match; `meta nfproto ipv6`, in netdev `meta protocol ip6`, for a rule restricted
to one IP version that nothing else in it pins) or refuses (Unsupported;
RuleSetError for what the kernel itself refuses). What only iptables has (a payload string match, hashlimit, `-j CT` without
options, a set with per-element counters) is refused with Unsupported.

A random match is `numgen random mod 2147483648 < T`: numgen's
reciprocal_scale(u32, 2**31) is the u32's top 31 bits, so it holds with
probability T / 2**31 exactly; an odd numerator over 2**32 (nft's own
`numgen random mod 3 == 1`) takes mod 2**32 - 1 (see _random_match). A
verdict map keyed by packet fields is a named map (nft lists an anonymous one's
elements in hash order, on the rule's line); a numgen map is written in its rule,
where nft lists it sorted by key, but where a table has NAMED_NUMGEN_MAPS or
more of them: then each is a named map (`typeof numgen random mod M :
verdict`, named as the model names it) that its rule looks up. The kernel (6.18)
gives every new set of a table a scan of all the table's sets, an anonymous one
two (its `__map%d` name is chosen by trying the others', and looked up by name
before its id): measured (nft 1.0.6, kernel 6.18), `nft -f` of kube-proxy's
nftables mode (3 endpoints) took 0.9 / 30 / 115 s inline at 1,000 / 5,000 / 10,000
services (more than 300 s at 30,000) and 0.5 / 3.4 / 9.7 / 190 s named at 1,000 /
5,000 / 10,000 / 30,000, nearly all of it the kernel's. Named is still quadratic
(each named set is a walk of the table's set list too): no form of one set per
service in one table loads in linear time on this kernel. A named map is the same
lookup per packet (a lookup expression in a set of M elements);
`named_numgen_maps()` says when a rendering does this, and the nftables backend's
load record (Backend.load_form) says so.

Pure: no root, no subprocess.
"""
from __future__ import annotations

import ipaddress
import itertools
import re
from functools import lru_cache

from fwbench.ruleset.model import (ADDR_TYPES, ATTR_KEYS, CLIENT, FAMILIES, HOOKS, PROTOCOLS,
                                   RANDOM_SCALE, SERVER, SET_KEYS, TCP_FLAGS,
                                   TCP_OPTION_FIELDS, TCP_OPTION_KINDS, Action, Attr, Chain,
                                   Iface, Interfaces, Limit, Match, Ports, Prefix, Quota,
                                   Range, Rule, RuleSet, RuleSetError, Set, SetRef, Table,
                                   TcpOption, Unsupported, JUMPING, jump_targets)
from fwbench.ruleset.render import ID_TAG

# Everything the model can say, nft can hold but for iptables' own constructs
# (string match, hashlimit, ct, set counters); the few combinations it cannot
# (conntrack and NAT in the netdev family) are refused by refuse_unsupported() per rule.
SUPPORTS: frozenset[str] = frozenset(
    [f"family {f}" for f in FAMILIES]
    + [f"hook {h}" for h in HOOKS]
    + [f"chain type {t}" for t in ("filter", "nat", "route")]
    + ["policy accept", "policy drop", "user chain"]
    + ["set " + " . ".join(k) for n in range(1, 5)
       for k in itertools.product(SET_KEYS, repeat=n)]
    + ["set with prefixes", "ipv6"]
    + ["iif", "oif", "saddr", "daddr", "saddr prefix", "daddr prefix"]
    + [f"proto {p}" for p in PROTOCOLS]
    + ["sport", "dport", "port range", "port list", "icmp type", "icmpv6 type",
       "ip version", "negation", "ct state", "mark match", "set match", "limit", "quota",
       "counter", "limit over", "limit in bytes"]
    + [k if " " in k else f"meta {k}" for k in ATTR_KEYS]
    + ["tcp option", "tcp option field"]
    + ["icmp type code set"]
    + ["tcp flags", "icmp code", "icmp type set", "addrtype", "pkttype", "ttl", "length"]
    + ["accept", "drop", "reject", "jump", "goto", "return", "dnat", "snat",
       "masquerade", "mark set", "notrack", "log", "redirect", "tcp mss",
       "ct status"]
    + ["random match", "verdict map", "numgen map", "random port"]
    + ["ct mark match", "ct mark set", "ct mark save", "ct mark restore", "nth match"])

# Words nft 1.0.6's parser takes as keywords, so not as a table, chain or set name
# (measured: `nft -c` of each as a chain, set and table name; quoting a name does
# not help, 1.0.6 takes no quoted chain names). `ll` and `nh` fail as set names
# only (raw payload bases after `@`).
_RESERVED = frozenset("""
accept add ah all arp auto-merge bridge cgroup chain comment comp constant continue
counter cpu create ct day dccp define delete describe device devices dnat drop dst dup
dynamic ecn element elements esp ether exists expires export exthdr fib flags flow
flowtable flush frag fwd gc-interval get goto handle hbh hook hour ibriport ibrname
icmp icmpv6 igmp iif iifgroup iifname iiftype import include index inet insert interval
ip ip6 ipsec jhash jump limit list ll log map mark masquerade meta meter mh missing
monitor netdev nftrace nh notrack numgen obriport obrname offload oif oifgroup oifname
oiftype osf pkttype policy position priority queue quota random redefine redirect
reject rename replace reset return rt rt0 rt2 rtclassid rule ruleset sctp secmark set
size skgid skuid snat socket srh symhash synproxy table tcp th time timeout tproxy type
typeof udp udplite undefine update vlan vmap xt
""".split())
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*\Z")
_NAME_MAX = 255
_COMMENT_MAX = 128        # nft: "comment too long, 128 characters maximum allowed"
_LOG_PREFIX_MAX = 127     # the kernel's NF_LOG_PREFIXLEN, its NUL included

# nft's named priorities and the hooks each is named at (elsewhere it prints the
# number); within 10 of one it prints `name + n` / `name - n`, farther the number.
_PRIO_NAMES = (("raw", -300, None), ("mangle", -150, None), ("dstnat", -100, "prerouting"),
               ("filter", 0, None), ("security", 50, None), ("srcnat", 100, "postrouting"))
_PRIO_NEAR = 10
# More inline numgen maps than this in one table: they are written as named maps
# (see the module's docstring).
NAMED_NUMGEN_MAPS = 1000

# nft's names for protocols where they are not the model's.
_PROTO_NAME = {"tcp": "tcp", "udp": "udp", "icmp": "icmp", "icmpv6": "ipv6-icmp",
               "esp": "esp", "ah": "ah", "gre": "gre", "igmp": "igmp"}
_PROTO_BY_NUMBER = {1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6"}
# nft prints conntrack states in the order of their bits.
_CT_ORDER = ("invalid", "established", "related", "new", "untracked")
_ICMP_TYPES = {0: "echo-reply", 3: "destination-unreachable", 4: "source-quench",
               5: "redirect", 8: "echo-request", 9: "router-advertisement",
               10: "router-solicitation", 11: "time-exceeded", 12: "parameter-problem",
               13: "timestamp-request", 14: "timestamp-reply", 15: "info-request",
               16: "info-reply", 17: "address-mask-request", 18: "address-mask-reply"}
_ICMPV6_TYPES = {1: "destination-unreachable", 2: "packet-too-big", 3: "time-exceeded",
                 4: "parameter-problem", 128: "echo-request", 129: "echo-reply",
                 130: "mld-listener-query", 131: "mld-listener-report",
                 132: "mld-listener-done", 133: "nd-router-solicit",
                 134: "nd-router-advert", 135: "nd-neighbor-solicit",
                 136: "nd-neighbor-advert", 137: "nd-redirect", 138: "router-renumbering",
                 141: "ind-neighbor-solicit", 142: "ind-neighbor-advert",
                 143: "mld2-listener-report"}

# Action.reject_with, in iptables' --reject-with names -> (IP version, nft's type);
# `icmpx-TYPE` too (below).
_REJECT = {
    "icmp-net-unreachable": (4, "net-unreachable"),
    "icmp-host-unreachable": (4, "host-unreachable"),
    "icmp-port-unreachable": (4, "port-unreachable"),
    "icmp-proto-unreachable": (4, "prot-unreachable"),
    "icmp-net-prohibited": (4, "net-prohibited"),
    "icmp-host-prohibited": (4, "host-prohibited"),
    "icmp-admin-prohibited": (4, "admin-prohibited"),
    "icmp6-no-route": (6, "no-route"), "no-route": (6, "no-route"),
    "icmp6-adm-prohibited": (6, "admin-prohibited"), "adm-prohibited": (6, "admin-prohibited"),
    "icmp6-addr-unreachable": (6, "addr-unreachable"), "addr-unreach": (6, "addr-unreachable"),
    "icmp6-port-unreachable": (6, "port-unreachable"), "port-unreach": (6, "port-unreachable"),
    "icmp6-policy-fail": (6, "policy-fail"), "icmp6-reject-route": (6, "reject-route"),
}
# In inet and netdev a rule of either version rejects with icmpx, which has these.
_ICMPX = {"port-unreachable": "port-unreachable", "host-unreachable": "host-unreachable",
          "admin-prohibited": "admin-prohibited", "net-unreachable": "no-route",
          "no-route": "no-route", "addr-unreachable": "host-unreachable"}
# `icmpx-TYPE` (what the nft JSON importer gives) in ip and ip6, where nft takes
# no icmpx: the ICMP type the kernel sends for it.
_FROM_ICMPX = {4: {"port-unreachable": "port-unreachable",
                   "host-unreachable": "host-unreachable",
                   "admin-prohibited": "admin-prohibited", "no-route": "net-unreachable"},
               6: {"port-unreachable": "port-unreachable",
                   "host-unreachable": "addr-unreachable",
                   "admin-prohibited": "admin-prohibited", "no-route": "no-route"}}

# Where the kernel takes each (measured: masquerade at input is refused).
_NAT_HOOKS = {"dnat": ("prerouting", "output"), "snat": ("postrouting", "input"),
              "masquerade": ("postrouting",), "redirect": ("prerouting", "output")}
_REJECT_HOOKS = ("prerouting", "input", "forward", "output", "ingress")
# Conntrack, and so NAT, is registered at -200: a nat chain must come after it.
_CONNTRACK_PRIORITY = -200

# Used by refuse_unsupported(), which renders without a testbed.
_NO_TESTBED = Interfaces("client0", "server0")


# --- public -----------------------------------------------------------------------

def _numgen_maps(t: Table) -> int:
    return sum(1 for s in t.sets if s.inline and s.keys == ("number",))


def named_numgen_maps(rs: RuleSet) -> int:
    """How many numgen maps the rendering writes as named maps (none unless a
    table has NAMED_NUMGEN_MAPS or more: a round count of services and one
    more, as kube-proxy's control plane adds, render alike)."""
    return sum(n for n in map(_numgen_maps, rs.tables) if n >= NAMED_NUMGEN_MAPS)


def refuse_unsupported(rs: RuleSet) -> None:
    """Raise Unsupported (one line, feature and rule) for what nft cannot hold, or
    RuleSetError for what the kernel would refuse (a dnat outside a nat chain at
    prerouting or output, a name nft cannot parse, a comment too long)."""
    for feature, where in rs.features().items():
        if feature not in SUPPORTS:
            raise Unsupported(feature, where)
    _Renderer(_NO_TESTBED).ruleset(rs)


def render(rs: RuleSet, ifs: Interfaces) -> str:
    """`nft -f` input for the whole rule set: tables in model order, each with its
    sets, then its chains in model order. A netdev chain hooks its device, or the
    testbed's client-side interface when it names none. Raises what refuse_unsupported()
    raises, but for most features outside SUPPORTS, which refuse_unsupported() tests
    (RuleSet.features() would take longer than the rendering itself)."""
    return _Renderer(ifs).ruleset(rs)


_COMMENT = re.compile(r' comment "([^"]*)"')


def rule_id(comment: str) -> tuple[str | None, str | None]:
    """A rule's comment as nft lists it -> (rule id, the user's own comment)."""
    if comment.startswith(ID_TAG):
        return comment[len(ID_TAG):], None
    user, sep, rid = comment.rpartition(" " + ID_TAG)
    if sep:
        return rid, user
    return None, comment or None


def strip_ids(text: str) -> str:
    """The text without the rule ids: ` comment "fwb:ID"` removed, and a user's
    `comment "text fwb:ID"` cut back to `comment "text"`."""
    def cut(m: re.Match) -> str:
        rid, user = rule_id(m.group(1))
        if rid is None:
            return m.group(0)
        return f' comment "{user}"' if user else ""
    return _COMMENT.sub(cut, text)


_COUNTER_VALUES = re.compile(r"\bcounter packets \d+ bytes \d+")
_ELEMENTS = "elements = {"


def comparable(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """An nft ruleset, as rendered or as `nft list ruleset` prints it, made
    comparable: its lines stripped, blank ones and counters' values left out, and
    each set's `elements = { ... }` block taken out as "family table set" ->
    elements (one a line when rendered, several a line when listed, in hash order:
    compare them as a multiset)."""
    lines: list[str] = []
    elements: dict[str, list[str]] = {}
    table = set_name = ""
    it = iter(text.splitlines())
    for raw in it:
        line = _COUNTER_VALUES.sub("counter", raw.strip())
        if not line:
            continue
        if line.startswith("table ") and line.endswith("{"):
            table = " ".join(line.split()[1:3])
        elif line.startswith(("set ", "map ")) and line.endswith("{"):
            set_name = line.split()[1]
        elif line.startswith(_ELEMENTS):
            body = line[len(_ELEMENTS):]
            while "}" not in body:
                body += " " + next(it, "}").strip()
            elements.setdefault(f"{table} {set_name}", []).extend(
                e.strip() for e in body.partition("}")[0].split(",") if e.strip())
            line = _ELEMENTS + " ... }"
        lines.append(line)
    return lines, elements


# --- the renderer -------------------------------------------------------------------

def priority_text(family: str, hook: str, priority: int) -> str:
    """A base chain's priority as nft prints it."""
    if family != "netdev":
        names = _PRIO_NAMES
    else:
        names = (("filter", 0, None),)
    for name, value, only_hook in names:
        if only_hook not in (None, hook):
            continue
        off = priority - value
        if off == 0:
            return name
        if abs(off) <= _PRIO_NEAR:
            return f"{name} {'+' if off > 0 else '-'} {abs(off)}"
    return str(priority)


def _name(kind: str, name: str) -> str:
    if not _NAME.match(name) or len(name) > _NAME_MAX or name in _RESERVED:
        raise RuleSetError(f"{kind} name {name!r} is not one nft can parse (a keyword, "
                           f"or not letters, digits and _./- after a letter or _)")
    return name


@lru_cache(maxsize=65536)
def _addr(text: str, allow_prefix: bool) -> tuple[str, int]:
    """An address or prefix as nft prints it (a full-length prefix without its
    length), and its IP version."""
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError:
        raise RuleSetError(f"not an address or prefix: {text!r}") from None
    if net.prefixlen == net.max_prefixlen:
        return str(net.network_address), net.version
    if not allow_prefix:
        raise RuleSetError(f"{text}: a prefix where one address belongs")
    return str(net), net.version


def _version(m: Match, where: str) -> int | None:
    """Match.version, from the cached address parse (a rule set of 100k rules
    renders in well under a second)."""
    versions = {_addr(p.net, True)[1] for p in (m.src, m.dst) if p}
    if m.ip_version is not None:
        versions.add(m.ip_version)
    if m.proto == "icmp":
        versions.add(4)
    elif m.proto == "icmpv6":
        versions.add(6)
    if len(versions) > 1:
        raise RuleSetError(f"{where}: a rule mixes IPv4 and IPv6")
    return versions.pop() if versions else None


def _addr_match(field: str, p: Prefix) -> str:
    text, v = _addr(p.net, True)
    return f"{'ip' if v == 4 else 'ip6'} {field} {'!= ' if p.negate else ''}{text}"


def _port_items(p: Ports) -> list[str]:
    ranges = sorted(set(p.ranges))
    if any(lo != hi for lo, hi in ranges):
        # A list with a range becomes an interval set, whose elements nft merges
        # where they overlap or touch; a list of single ports stays as it is.
        merged: list[tuple[int, int]] = []
        for lo, hi in ranges:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        ranges = merged
    return [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges]


def _ports(p: Ports) -> str:
    if len(p.ranges) == 1:
        lo, hi = p.ranges[0]
        return ("!= " if p.negate else "") + (str(lo) if lo == hi else f"{lo}-{hi}")
    items = _port_items(p)
    # One element, even a merged `{ a-b }`, nft keeps as a plain value.
    body = items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"
    return ("!= " if p.negate else "") + body


def _quoted(what: str, text: str, limit: int) -> str:
    if '"' in text or "\\" in text or "\n" in text:
        raise RuleSetError(f"{what} {text!r}: nft strings take no quotes or backslashes")
    if len(text.encode()) > limit:
        raise RuleSetError(f"{what} {text!r}: longer than nft's {limit} bytes")
    return f'"{text}"'


class _Renderer:
    def __init__(self, ifs: Interfaces):
        self.ifs = ifs
        self.named_numgen = False

    def ruleset(self, rs: RuleSet) -> str:
        out: list[str] = []
        for t in rs.tables:
            self.table(t, out)
        return "\n".join(out) + "\n" if out else ""

    # --- tables, sets and chains --------------------------------------------------

    def table(self, t: Table, out: list[str]) -> None:
        self.t = t
        self.fam = t.family
        self.sets = {s.name: s for s in t.sets}
        self.tcp_udp_only: dict[str, bool] = {}
        self.reach = _reaching_bases(t)
        out.append(f"table {t.family} {_name('table', t.name)} {{")
        self.named_numgen = _numgen_maps(t) >= NAMED_NUMGEN_MAPS
        numgen = {r.action.vmap.name: r.action.numgen for c in t.chains for r in c.rules
                  if r.action.kind == "vmap" and r.action.numgen is not None} \
            if self.named_numgen else {}
        for s in t.sets:
            if s.is_vmap and s.keys == ("number",):
                if s.name in numgen:
                    self.numgen_block(s, numgen[s.name], out)
                continue   # else written in its rule
            if s.is_vmap:
                self.map_block(s, out)
            else:
                self.set_block(s, out)
        for c in t.chains:
            out.append(f"\tchain {_name('chain', c.name)} {{")
            if c.base:
                out.append("\t\t" + self.chain_header(c))
            self.current = c
            out.extend(["\t\t" + self.rule(r) for r in c.rules])
            out.append("\t}")
        out.append("}")

    def set_block(self, s: Set, out: list[str]) -> None:
        where = f"set {s.name}"
        _name("set", s.name)
        if self.fam == "ip" and s.version == 6 or self.fam == "ip6" and s.version == 4:
            raise RuleSetError(f"{where}: IPv{s.version} addresses in table "
                               f"{self.fam} {self.t.name}")
        types = {"addr": "ipv4_addr" if s.version == 4 else "ipv6_addr",
                 "proto": "inet_proto", "port": "inet_service"}
        if "proto" in s.keys:
            i = s.keys.index("proto")
            self.tcp_udp_only[s.name] = all(
                e[i] in ("tcp", "udp", 6, 17) for e in s.elements)
        if s.counters:
            raise Unsupported("set counters", where)
        out.append(f"\tset {s.name} {{")
        out.append("\t\ttype " + " . ".join(types[k] for k in s.keys))
        if s.size is not None:
            out.append(f"\t\tsize {s.size}")
        if s.interval:
            out.append("\t\tflags interval")
        if s.elements:
            items = [" . ".join(self.element_part(s, k, v) for k, v in zip(s.keys, e))
                     for e in s.elements]
            if len(set(items)) != len(items):
                seen: set[str] = set()
                dup = next(i for i in items if i in seen or seen.add(i))
                raise RuleSetError(f"{where}: element {dup} appears twice")
            if s.interval and s.keys == ("addr",):
                _no_overlap(where, items)
            out.append("\t\telements = {")
            out.append(",\n".join("\t\t\t" + i for i in items))
            out.append("\t\t}")
        out.append("\t}")

    def map_block(self, s: Set, out: list[str]) -> None:
        """A verdict map keyed by packet fields, named (nft lists it so)."""
        where = f"map {s.name}"
        _name("map", s.name)
        if "port" in s.keys and "proto" in s.keys and any(
                e[s.keys.index("proto")] not in ("tcp", "udp", 6, 17) for e in s.elements):
            # th dport reads any transport header; only TCP and UDP have ports.
            raise Unsupported("verdict map on a port of a protocol without ports", where)
        types = {"addr": "ipv4_addr" if s.version == 4 else "ipv6_addr",
                 "proto": "inet_proto", "port": "inet_service"}
        out.append(f"\tmap {s.name} {{")
        out.append("\t\ttype " + " . ".join(types[k] for k in s.keys) + " : verdict")
        if s.elements:
            items = [" . ".join(self.element_part(s, k, v) for k, v in zip(s.keys, e))
                     + " : " + self.verdict(v, where)
                     for e, v in zip(s.elements, s.verdicts)]
            out.append("\t\telements = {")
            out.append(",\n".join("\t\t\t" + i for i in items))
            out.append("\t\t}")
        out.append("\t}")

    def numgen_block(self, s: Set, numgen: tuple[int, int], out: list[str]) -> None:
        """A numgen map as a named map (NAMED_NUMGEN_MAPS or more in the table)."""
        where = f"map {s.name}"
        _name("map", s.name)
        mod, offset = numgen
        key = f"numgen random mod {mod}" + (f" offset {offset}" if offset else "")
        items = sorted((int(e[0]), self.verdict(v, where))
                       for e, v in zip(s.elements, s.verdicts))
        out.append(f"\tmap {s.name} {{")
        out.append(f"\t\ttypeof {key} : verdict")
        out.append("\t\telements = {")
        out.append(",\n".join(f"\t\t\t{k} : {v}" for k, v in items))
        out.append("\t\t}")
        out.append("\t}")

    def verdict(self, a: Action, where: str) -> str:
        if a.kind in ("jump", "goto"):
            return f"{a.kind} {_name('chain', a.chain or '')}"
        if a.kind in ("accept", "drop", "return"):
            return a.kind
        raise RuleSetError(f"{where}: verdict {a.kind!r} in a verdict map")

    def vmap(self, a: Action, m: Match, version: int | None, where: str) -> str:
        s = self.sets.get(a.vmap.name)
        if s is None:
            raise RuleSetError(f"{where}: no map {a.vmap.name!r}")
        if a.numgen is not None:
            mod, offset = a.numgen
            key = f"numgen random mod {mod}" + (f" offset {offset}" if offset else "")
            if self.named_numgen:
                return f"{key} vmap @{s.name}"
            items = sorted((int(e[0]), self.verdict(v, where))
                           for e, v in zip(s.elements, s.verdicts))
            return f"{key} vmap {{ " + ", ".join(f"{k} : {v}" for k, v in items) + " }"
        exprs = []
        for field, key in zip(a.vmap.fields, s.keys):
            if key == "addr":
                if version is not None and version != s.version:
                    raise RuleSetError(f"{where}: an IPv{version} rule looks up IPv"
                                       f"{s.version} map {s.name}")
                exprs.append(f"{'ip' if s.version == 4 else 'ip6'} {field}")
            elif key == "proto":
                exprs.append("meta l4proto")
            elif "proto" in s.keys:
                exprs.append(f"th {field}")
            elif m.proto in ("tcp", "udp"):
                exprs.append(f"{m.proto} {field}")
            else:
                raise Unsupported("verdict map on a port without tcp or udp", where)
        return f"{' . '.join(exprs)} vmap @{_name('map', s.name)}"

    def element_part(self, s: Set, key: str, v) -> str:
        where = f"set {s.name}"
        if key == "addr":
            text, version = _addr(str(v), s.interval)
            if version != s.version:
                raise RuleSetError(f"{where}: {v} is not an IPv{s.version} address")
            return text
        if key == "proto":
            name = _PROTO_BY_NUMBER.get(v) if isinstance(v, int) else v
            if name not in _PROTO_NAME:
                raise RuleSetError(f"{where}: unknown protocol {v!r}")
            return _PROTO_NAME[name]
        lo, _, hi = str(v).partition("-")
        try:
            ports = Ports.of((int(lo), int(hi or lo)))
        except ValueError:
            raise RuleSetError(f"{where}: not a port: {v!r}") from None
        (a, b), = ports.ranges
        if a != b and not s.interval:
            raise RuleSetError(f"{where}: a port range needs an interval set")
        return str(a) if a == b else f"{a}-{b}"

    def chain_header(self, c: Chain) -> str:
        where = f"chain {c.name}"
        if c.type == "nat":
            if self.fam == "netdev":
                raise Unsupported("chain type nat in family netdev", where)
            if c.hook not in ("prerouting", "input", "output", "postrouting"):
                raise RuleSetError(f"{where}: a nat chain at hook {c.hook}")
            if c.priority <= _CONNTRACK_PRIORITY:
                raise RuleSetError(f"{where}: a nat chain must have a priority above "
                                   f"{_CONNTRACK_PRIORITY} (conntrack)")
        if c.type == "route" and (c.hook != "output" or self.fam == "netdev"):
            raise RuleSetError(f"{where}: a route chain is only at hook output")
        device = ""
        if self.fam == "netdev":
            # Unnamed: where forwarded packets arrive (ingress) or leave (egress).
            default = SERVER if c.hook == "egress" else CLIENT
            device = " device " + _quoted(f"{where}: device",
                                          self.ifs.resolve(c.device or default), 15)
        prio = priority_text(self.fam, c.hook, c.priority)
        return f"type {c.type} hook {c.hook}{device} priority {prio}; policy {c.policy};"

    # --- rules ----------------------------------------------------------------------

    def rule(self, r: Rule) -> str:
        m, a = r.match, r.action
        where = f"rule {r.id}"
        if m.string is not None:
            raise Unsupported("string match", where)
        if m.hashlimit is not None:
            raise Unsupported("hashlimit", where)
        fam = self.fam
        version = _version(m, where)
        if fam == "ip" and version == 6 or fam == "ip6" and version == 4:
            raise RuleSetError(f"{where}: an IPv{version} match in table {fam} {self.t.name}")
        if version is None:
            version = {"ip": 4, "ip6": 6}.get(fam)
        parts: list[str] = []
        if m.ip_version is not None and fam in ("inet", "netdev") and \
                not self.pins_version(m, a, bool(r.counter or m.limit)):
            # In ip and ip6 the table says it; nft lists the restriction only
            # where no later expression implies it (measured).
            parts.append(("meta nfproto ipv" if fam == "inet" else "meta protocol ip")
                         + ("4" if m.ip_version == 4 else "6"))
        if m.iif:
            self.iface(parts, "iifname", m.iif, where)
        if m.oif:
            self.iface(parts, "oifname", m.oif, where)
        if m.src:
            parts.append(_addr_match("saddr", m.src))
        if m.dst:
            parts.append(_addr_match("daddr", m.dst))
        lookups = [self.lookup(ref, m, version, where) for ref in m.sets]
        proto = m.proto
        # nft folds a protocol match into a later match that implies it (a port,
        # an ICMP type, a port in a set lookup) and prints only the latter.
        implied = bool(m.sport or m.dport or m.icmp_type is not None or m.tcp_flags
                       or m.icmp_types or m.icmp_code is not None or m.tcp_options
                       or m.icmp_pairs or any(" " in a.key for a in m.attrs)) or any(
            f in ("sport", "dport") for ref in m.sets for f in ref.fields)
        # In ip and ip6, `reject with tcp reset` brings its own `meta l4proto tcp`,
        # which nft then lists as part of the reject, unless a statement (counter,
        # limit, quota) stands between them (measured).
        implied = implied or (fam in ("ip", "ip6") and a.kind == "reject"
                              and a.reject_with == "tcp-reset" and not r.counter
                              and not m.limit and not m.quota)
        if proto and not implied:
            parts.append(f"meta l4proto {_PROTO_NAME[proto]}")
        elif proto is None and any(self.guarded(ref) for ref in m.sets):
            parts.append("meta l4proto { tcp, udp }")
        if m.sport:
            parts.append(f"{proto} sport {_ports(m.sport)}")
        if m.dport:
            parts.append(f"{proto} dport {_ports(m.dport)}")
        if m.icmp_type is not None:
            if not 0 <= m.icmp_type <= 255:
                raise RuleSetError(f"{where}: ICMP type {m.icmp_type} out of range")
            names = _ICMP_TYPES if proto == "icmp" else _ICMPV6_TYPES
            parts.append(f"{proto} type {names.get(m.icmp_type, m.icmp_type)}")
        parts += _everyday(m, proto, version, where)
        parts.extend(lookups)
        if m.ct_state:
            if fam == "netdev":
                raise Unsupported("ct state in family netdev", where)
            parts.append("ct state " + ",".join(s for s in _CT_ORDER if s in m.ct_state))
        if m.icmp_pairs:
            parts.append(_icmp_pairs(proto, m.icmp_pairs))
        parts += [_attr(a, where) for a in m.attrs]
        parts += [_tcp_option(o, where) for o in m.tcp_options]
        if m.ct_status:
            if fam == "netdev":
                raise Unsupported("ct status in family netdev", where)
            if m.ct_status_negate:
                # nft's ct expression breaks the rule of a packet without a
                # connection, where iptables' negated --ctstate holds.
                raise Unsupported("negated ct status (nft's ct status does not hold "
                                  "for a packet without a connection)", where)
            parts.append("ct status " + ",".join(s for s in ("snat", "dnat")
                                                 if s in m.ct_status))
        if m.mark:
            parts.append(_mark_match(*m.mark, m.mark_negate, where))
        if m.ct_mark is not None:
            if fam == "netdev":
                raise Unsupported("ct mark in family netdev", where)
            # nft prints a ct mark as it prints a packet mark.
            parts.append(_mark_match(*m.ct_mark, m.ct_mark_negate, where)
                         .replace("meta mark", "ct mark", 1))
        if m.limit:
            parts.append(_limit(m.limit, where))
        if m.nth is not None:
            # numgen inc's counter gives the k-th packet k % every.
            parts.append(f"numgen inc mod {m.nth[0]} {m.nth[1]}")
        if m.random is not None:
            parts.append(_random_match(m.random, where))
        if m.quota:
            parts.append(_quota(m.quota))
        if r.counter and a.kind != "counter":
            parts.append("counter")
        parts.append(self.action(a, m, version, where))
        rid = ID_TAG + r.id
        parts.append("comment " + _quoted(f"{where}: comment",
                                          f"{r.comment} {rid}" if r.comment else rid,
                                          _COMMENT_MAX))
        return " ".join(parts)

    def iface(self, parts: list[str], key: str, i: Iface, where: str) -> None:
        name = self.ifs.resolve(i.name)
        wildcard = name.endswith("+")
        base = name[:-1] if wildcard else name
        if wildcard and not base:
            # iptables' `-i +` is any interface: no condition at all. nft has no
            # all-wildcard string, so the match is left out; negated it matches nothing.
            if i.negate:
                raise RuleSetError(f"{where}: `! {key} +` matches no packet")
            return
        if not name:
            raise RuleSetError(f"{where}: an empty interface name")
        # A literal `*` must be escaped, or nft reads it as the wildcard.
        text = base.replace("*", "\\*") + ("*" if wildcard else "")
        if '"' in base or "\\" in base or len(base) > 15:
            raise RuleSetError(f"{where}: interface name {name!r} is not one Linux allows")
        parts.append(f'{key} {"!= " if i.negate else ""}"{text}"')

    def lookup(self, ref: SetRef, m: Match, version: int | None, where: str) -> str:
        s = self.sets.get(ref.name)
        if s is None:
            raise RuleSetError(f"{where}: no set {ref.name!r}")
        exprs = []
        for field, key in zip(ref.fields, s.keys):
            want = {"saddr": "addr", "daddr": "addr", "proto": "proto",
                    "sport": "port", "dport": "port"}.get(field)
            if want != key:
                raise RuleSetError(f"{where}: set {s.name} key {key} looked up with "
                                   f"the packet's {field}")
            if key == "addr":
                if version is not None and version != s.version:
                    raise RuleSetError(f"{where}: an IPv{version} rule looks up IPv"
                                       f"{s.version} set {s.name}")
                exprs.append(f"{'ip' if s.version == 4 else 'ip6'} {field}")
            elif key == "proto":
                exprs.append("meta l4proto")
            elif m.proto in ("tcp", "udp"):
                exprs.append(f"{m.proto} {field}")
            elif m.proto is None:
                exprs.append(f"th {field}")
            else:
                # nft would look up the ICMP checksum; the model's ICMP packet has
                # no port, so matches neither the set nor its negation.
                raise Unsupported(f"set port lookup with protocol {m.proto}", where)
        return f"{' . '.join(exprs)} {'!= ' if ref.negate else ''}@{_name('set', s.name)}"

    def pins_version(self, m: Match, a: Action, statements: bool) -> bool:
        """Whether the rule holds an expression nft gives a dependency on the IP
        version and lists without it: an address match or lookup, ICMP, or a
        reject with an ICMP type of one version (in a rule of one version every
        reject but icmpx and tcp reset is rendered so), but for the latter only
        when no statement (counter, limit) stands before it (measured)."""
        return (m.src is not None or m.dst is not None
                or m.proto in ("icmp", "icmpv6") or m.ttl is not None   # ip ttl, ip6 hoplimit
                or any("addr" in self.sets[ref.name].keys for ref in m.sets
                       if ref.name in self.sets)
                or a.kind == "reject" and not statements and not (
                    a.reject_with or "").startswith(("icmpx-", "tcp-reset")))

    def guarded(self, ref: SetRef) -> bool:
        """Whether a port lookup of a rule without a protocol needs `meta l4proto
        { tcp, udp }` before it. `th dport` reads two bytes of any transport header
        (an ICMP checksum too), while in the model only TCP and UDP have ports and
        a packet without the field matches neither a set nor its negation. A
        plain lookup in a set keyed on the protocol, of TCP and UDP elements only,
        needs no guard: no other protocol is in it."""
        if not any(f in ("sport", "dport") for f in ref.fields):
            return False
        return ref.negate or not self.tcp_udp_only.get(ref.name, False)

    def action(self, a: Action, m: Match, version: int | None, where: str) -> str:
        k = a.kind
        if k in ("accept", "drop", "return", "counter", "notrack"):
            if k == "notrack" and self.fam == "netdev":
                raise Unsupported("notrack in family netdev", where)
            return k
        if k in ("jump", "goto"):
            return f"{k} {_name('chain', a.chain or '')}"
        if k == "ct":
            raise Unsupported("ct", where)
        if k == "tcpmss":
            return "tcp option maxseg size set " + ("rt mtu" if a.mss is None else str(a.mss))
        if k == "checksum":
            raise Unsupported("checksum fill", where)
        if k == "mark":
            return _mark_set(a.mark or 0, a.mark_mask, where)
        if k == "vmap":
            return self.vmap(a, m, version, where)
        if k in ("ctmark", "savemark", "restoremark"):
            if self.fam == "netdev":
                raise Unsupported("ct mark in family netdev", where)
            if k == "ctmark":
                return _mark_set(a.mark or 0, a.mark_mask, where).replace("meta mark",
                                                                          "ct mark")
            if a.ct_masks != (0xFFFFFFFF, 0xFFFFFFFF):
                raise Unsupported(f"ct mark {k[:-4]} with masks", where)
            return "ct mark set meta mark" if k == "savemark" else "meta mark set ct mark"
        if k == "log":
            if a.log_prefix is None:
                return "log"
            return "log prefix " + _quoted(f"{where}: log prefix", a.log_prefix,
                                           _LOG_PREFIX_MAX)
        if k == "reject":
            self.hooks_allow(where, _REJECT_HOOKS, None, "reject")
            return self.reject(a.reject_with, m, version, where)
        if k in _NAT_HOOKS:
            if self.fam == "netdev":
                raise Unsupported(f"{k} in family netdev", where)
            self.hooks_allow(where, _NAT_HOOKS[k], "nat", k)
            return self.nat(a, m, where)
        raise RuleSetError(f"{where}: unknown action {k!r}")

    def hooks_allow(self, where: str, hooks: tuple[str, ...], ctype: str | None,
                    what: str) -> None:
        """The kernel refuses the rule in a chain reached from any base chain of
        another type or at another hook."""
        for b in self.reach.get(self.current.name, ()):
            if b.hook not in hooks or (ctype and b.type != ctype):
                raise RuleSetError(f"{where}: {what} in a {b.type} chain at hook {b.hook} "
                                   f"(chain {b.name}); it needs "
                                   f"{'a ' + ctype + ' chain at ' if ctype else ''}"
                                   f"{' or '.join(hooks)}")

    def reject(self, kind: str | None, m: Match, version: int | None, where: str) -> str:
        if kind == "tcp-reset":
            if m.proto != "tcp":
                raise RuleSetError(f"{where}: reject with tcp-reset needs protocol tcp")
            return "reject with tcp reset"
        if kind is None:
            need, typ = None, "port-unreachable"
        elif kind in _REJECT:
            need, typ = _REJECT[kind]
        elif kind.startswith("icmpx-") and kind[6:] in _FROM_ICMPX[4]:
            typ = kind[6:]
            if self.fam in ("inet", "netdev"):
                return "reject" if typ == "port-unreachable" else f"reject with icmpx {typ}"
            need, typ = version, _FROM_ICMPX[version or 4][typ]
        else:
            raise RuleSetError(f"{where}: unknown reject type {kind!r}")
        if version is None:
            # inet or netdev, a rule of either IP version: icmpx, whose
            # port-unreachable is nft's default.
            if need is not None and typ not in _ICMPX:
                raise RuleSetError(f"{where}: reject with {kind} needs an IPv{need} "
                                   f"match in table {self.fam} {self.t.name}")
            typ = _ICMPX.get(typ, typ)
            return "reject" if typ == "port-unreachable" else f"reject with icmpx {typ}"
        if need is not None and need != version:
            raise RuleSetError(f"{where}: reject with {kind} in an IPv{version} rule")
        proto = "icmp" if version == 4 else "icmpv6"
        if typ == "port-unreachable" and self.fam in ("ip", "ip6"):
            return "reject"   # the family's default, which nft prints bare
        return f"reject with {proto} {typ}"

    def nat(self, a: Action, m: Match, where: str) -> str:
        if a.port is not None:
            if m.proto not in ("tcp", "udp"):
                raise RuleSetError(f"{where}: a {a.kind} port needs protocol tcp or udp")
            if not 0 < a.port <= 65535:
                raise RuleSetError(f"{where}: {a.kind} to port {a.port}")
        if a.kind in ("masquerade", "redirect"):
            if a.addr:
                raise RuleSetError(f"{where}: {a.kind} takes no address")
            port = a.port if a.port_hi is None else f"{a.port}-{a.port_hi}"
            text = a.kind if a.port is None else f"{a.kind} to :{port}"
            return text + (" fully-random" if a.random_port else "")
        addr, v = _addr(a.addr or "", False)
        rv = m.version
        if rv is not None and rv != v or self.fam == "ip" and v == 6 \
                or self.fam == "ip6" and v == 4:
            raise RuleSetError(f"{where}: {a.kind} to an IPv{v} address from an IPv"
                               f"{rv or {'ip': 4, 'ip6': 6}[self.fam]} rule")
        if a.port is not None:
            port = a.port if a.port_hi is None else f"{a.port}-{a.port_hi}"
            addr = f"{addr}:{port}" if v == 4 else f"[{addr}]:{port}"
        fam = f" {'ip' if v == 4 else 'ip6'}" if self.fam == "inet" else ""
        return f"{a.kind}{fam} to {addr}" + (" fully-random" if a.random_port else "")


def _random_match(random: int, where: str) -> str:
    """A random match as a numgen bound. numgen gives reciprocal_scale(u32, mod),
    which is below T for ceil(T * 2**32 / mod) of the 2**32 u32s: mod 2**31 makes
    that 2T (the even numerators), mod 2**32 - 1 makes it T + 1 (the rest)."""
    if random % 2 == 0:
        return f"numgen random mod {RANDOM_SCALE // 2} < {random // 2}"
    if random < 2:
        raise Unsupported("random match of 2**-32", where)
    return f"numgen random mod {RANDOM_SCALE - 1} < {random - 1}"


# nft's names of ICMP and ICMPv6 codes (icmp_code_type, icmpv6_code_type); it
# lists a code by its name where it has one.
_ICMP_CODES = {0: "net-unreachable", 1: "host-unreachable", 2: "prot-unreachable",
               3: "port-unreachable", 4: "frag-needed", 9: "net-prohibited",
               10: "host-prohibited", 13: "admin-prohibited"}
_ICMPV6_CODES = {0: "no-route", 1: "admin-prohibited", 3: "addr-unreachable",
                 4: "port-unreachable", 5: "policy-fail", 6: "reject-route"}
_TCP_FLAG_ORDER = tuple(TCP_FLAGS.items())
_PKT_TYPE_ORDER = ("host", "broadcast", "multicast", "otherhost")


def _flags(bits: int) -> str:
    return ",".join(n for n, b in _TCP_FLAG_ORDER if bits & b) or "0x0"


def _everyday(m: Match, proto: str | None, version: int | None, where: str) -> list[str]:
    """ICMP codes and type sets, TCP flags, TTL, length, packet and address types,
    as nft lists them."""
    out = []
    if m.icmp_code is not None:
        codes = _ICMP_CODES if proto == "icmp" else _ICMPV6_CODES
        out.append(f"{proto} code {codes.get(m.icmp_code, m.icmp_code)}")
    if m.icmp_types is not None:
        names = _ICMP_TYPES if proto == "icmp" else _ICMPV6_TYPES
        items = ", ".join(str(names.get(t, t)) for t in sorted(m.icmp_types))
        out.append(f"{proto} type {{ {items} }}")
    f = m.tcp_flags
    if f is not None:
        if len(f.values) != 1:
            # nft lists a set of flag values in an order of its own.
            raise Unsupported("tcp flags set", where)
        (value,) = f.values
        if value == 0:      # none of the mask's flags; negated: any of them
            out.append(f"tcp flags {'' if f.negate else '! '}{_flags(f.mask)}")
        elif f.mask == 0xFF:
            out.append(f"tcp flags {'!=' if f.negate else '=='} {_flags(value)}")
        else:
            out.append(f"tcp flags {'!= ' if f.negate else ''}{_flags(value)} / "
                       f"{_flags(f.mask)}")
    if m.ttl is not None:
        if version is None:
            raise Unsupported("ttl without an IP version in family inet", where)
        out.append(("ip ttl " if version == 4 else "ip6 hoplimit ") + _range(m.ttl))
    if m.length is not None:
        out.append("meta length " + _range(m.length))
    if m.pkttype is not None:
        kinds = [k for k in _PKT_TYPE_ORDER if k in m.pkttype]
        neg = "!= " if m.pkttype_negate else ""
        out.append(f"meta pkttype {neg}{kinds[0]}" if len(kinds) == 1
                   else f"meta pkttype {neg}{{ {', '.join(kinds)} }}")
    a = m.addrtype
    if a is not None:
        if version != 4:
            raise Unsupported("addrtype of IPv6 addresses", where)
        for key, types, neg in (("saddr", a.src, a.src_negate), ("daddr", a.dst, a.dst_negate)):
            if types is not None:
                kinds = [t for t in ADDR_TYPES if t in types]
                body = kinds[0] if len(kinds) == 1 else f"{{ {', '.join(kinds)} }}"
                out.append(f"fib {key} type {'!= ' if neg else ''}{body}")
    return out


def _range(r: Range) -> str:
    span = str(r.lo) if r.lo == r.hi else f"{r.lo}-{r.hi}"
    return f"!= {span}" if r.negate else span


def _mark_match(value: int, mask: int, negate: bool, where: str) -> str:
    if value & ~mask & 0xFFFFFFFF or not 0 <= mask <= 0xFFFFFFFF:
        raise RuleSetError(f"{where}: mark 0x{value:x} has bits outside its mask "
                           f"0x{mask:x}")
    op = "!= " if negate else ""
    if mask == 0xFFFFFFFF:
        return f"meta mark {op}0x{value:08x}"
    inverse = ~mask & 0xFFFFFFFF
    if inverse & (inverse + 1) == 0:
        # Leading ones: nft prints the mask as a prefix length.
        return f"meta mark {op}0x{value:08x}/{32 - inverse.bit_length()}"
    return f"meta mark & 0x{mask:08x} {'!=' if negate else '=='} 0x{value:08x}"


def _mark_set(value: int, mask: int, where: str) -> str:
    """mark = (mark & ~mask) ^ value, as iptables' --set-xmark value/mask. A value
    inside its mask sets bits (nft prints the AND with the value's bits kept, and
    drops a no-op AND or OR); with no mask it toggles them (`^`); other pairs,
    which nft prints in forms of its own, are refused."""
    if not 0 <= value <= 0xFFFFFFFF or not 0 <= mask <= 0xFFFFFFFF:
        raise RuleSetError(f"{where}: mark 0x{value:x}/0x{mask:x} is not 32 bits")
    if value & ~mask:
        if mask:
            raise Unsupported("mark set that toggles bits outside its mask", where)
        return f"meta mark set meta mark ^ 0x{value:08x}"
    if mask == 0xFFFFFFFF:
        return f"meta mark set 0x{value:08x}"
    keep = (~mask | value) & 0xFFFFFFFF
    ops = ([f"& 0x{keep:08x}"] if keep != 0xFFFFFFFF else []) + \
        ([f"| 0x{value:08x}"] if value else [])
    return " ".join(["meta mark set meta mark", *ops])


def _limit(lim: Limit, where: str) -> str:
    if lim.rate < 1 or lim.burst < 0 or lim.per not in ("second", "minute", "hour", "day"):
        raise RuleSetError(f"{where}: limit {lim.rate}/{lim.per} burst {lim.burst}")
    over = "over " if lim.over else ""
    if lim.bytes:
        # In bytes nft's default burst is 0.
        burst = f" burst {_in_bytes(lim.burst)}" if lim.burst else ""
        return f"limit rate {over}{_in_bytes(lim.rate)}/{lim.per}{burst}"
    if lim.burst < 1:
        raise RuleSetError(f"{where}: limit burst {lim.burst}")
    burst = "" if lim.burst == 5 else f" burst {lim.burst} packets"   # 5: nft's default
    return f"limit rate {over}{lim.rate}/{lim.per}{burst}"


_IFTYPE_NAMES = {1: "ether", 512: "ppp", 768: "ipip", 769: "ipip6", 772: "loopback",
                 776: "sit", 778: "ipgre"}


# Protocol numbers nft lists by name (its /etc/protocols), as in `ah nexthdr`.
_NEXTHDR_NAMES = {1: "icmp", 2: "igmp", 6: "tcp", 17: "udp", 33: "dccp", 47: "gre",
                  50: "esp", 51: "ah", 58: "ipv6-icmp", 59: "ipv6-nonxt", 108: "comp",
                  132: "sctp", 136: "udplite"}


def _attr(a: Attr, where: str) -> str:
    """A meta attribute condition as nft lists it: groups as `iifgroup`, group 0
    as "default" and the known interface types by name (but in a range, numbers),
    priorities as tc handles (`none`, `root`, major:minor in hex). A set with a
    range nft may list as a prefix, which is refused rather than guessed."""
    def value(v: int, in_range: bool) -> str:
        if a.key == "ah nexthdr":
            return _NEXTHDR_NAMES.get(v, str(v))
        if a.key == "priority":
            return {0: "none", 0xFFFFFFFF: "root"}.get(v, f"{v >> 16:x}:{v & 0xFFFF:x}")
        if not in_range and a.key.endswith("group") and v == 0:
            return '"default"'
        if not in_range and a.key.endswith("type") and v in _IFTYPE_NAMES:
            return _IFTYPE_NAMES[v]
        return str(v)

    def element(lo: int, hi: int) -> str:
        return value(lo, False) if lo == hi else f"{value(lo, True)}-{value(hi, True)}"

    if len(a.ranges) > 1 and any(lo != hi for lo, hi in a.ranges):
        raise Unsupported(f"meta {a.key} set with a range", where)
    text = element(*a.ranges[0]) if len(a.ranges) == 1 else \
        "{ " + ", ".join(element(lo, hi) for lo, hi in a.ranges) + " }"
    head = a.key if a.key.endswith("group") or " " in a.key else f"meta {a.key}"
    return f"{head} {'!= ' if a.negate else ''}{text}"


# nft's names of TCP option kinds, and of fields by (kind, offset, length), as it
# lists them (the first SACK block as `sack`).
_TCP_OPTION_NAMES = {0: "eol", 1: "nop", 2: "maxseg", 3: "window", 4: "sack-perm", 5: "sack",
                     8: "timestamp", 19: "md5sig", 30: "mptcp", 34: "fastopen"}
_TCP_OPTION_FIELD_NAMES = {
    (TCP_OPTION_KINDS[name], *where): (("sack" if name == "sack0" else name), field)
    for name, fields in TCP_OPTION_FIELDS.items() if name != "sack"
    for field, where in fields.items()}


# nft's names of ICMP and ICMPv6 codes (the same for every type).
_ICMP_CODE_NAMES = {
    "icmp": {0: "net-unreachable", 1: "host-unreachable", 2: "prot-unreachable",
             3: "port-unreachable", 4: "frag-needed", 9: "net-prohibited",
             10: "host-prohibited", 13: "admin-prohibited"},
    "icmpv6": {0: "no-route", 1: "admin-prohibited", 3: "addr-unreachable",
               4: "port-unreachable", 5: "policy-fail", 6: "reject-route"}}


def _icmp_pairs(proto: str, pairs) -> str:
    """`icmp type . icmp code { t . c, ... }` with nft's names (the listing's
    order is its hash's: the comparison sorts an anonymous set's elements)."""
    types = _ICMP_TYPES if proto == "icmp" else _ICMPV6_TYPES
    codes = _ICMP_CODE_NAMES[proto]
    elems = ", ".join(f"{types.get(t, t)} . {codes.get(c, c)}" for t, c in sorted(pairs))
    return f"{proto} type . {proto} code {{ {elems} }}"


def _tcp_option(o: TcpOption, where: str) -> str:
    name = _TCP_OPTION_NAMES.get(o.kind, str(o.kind))
    if o.offset is None:
        return f"tcp option {name} {'missing' if o.negate else 'exists'}"
    if (o.offset, o.length) == (1, 1):
        name, field = name, "length"
    else:
        name, field = _TCP_OPTION_FIELD_NAMES.get((o.kind, o.offset, o.length), (None, None))
        if name is None:
            raise Unsupported(f"tcp option {o.kind} field at {o.offset}", where)
    if len(o.ranges) > 1 and any(lo != hi for lo, hi in o.ranges):
        raise Unsupported(f"tcp option {name} {field} set with a range", where)
    text = ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in o.ranges)
    if len(o.ranges) > 1:
        text = "{ " + text + " }"
    return f"tcp option {name} {field} {'!= ' if o.negate else ''}{text}"


def _in_bytes(n: int) -> str:
    """A count of bytes as nft lists a limit's: in the largest unit that holds it
    whole (4096 is `4 kbytes`, 1025 `1025 bytes`)."""
    unit = "bytes"
    for bigger in ("kbytes", "mbytes"):
        if n % 1024:
            break
        n, unit = n // 1024, bigger
    return f"{n} {unit}"


def _quota(q: Quota) -> str:
    """As nft lists it: `used` only when some is, each in the largest unit up to
    mbytes that divides it (quota_stmt_print, get_rate)."""
    used = f" used {_bytes(q.used)}" if q.used else ""
    return f"quota {'over ' if q.over else ''}{_bytes(q.bytes)}{used}"


def _bytes(n: int) -> str:
    unit = 0
    while n and n % 1024 == 0 and unit < len(_BYTE_UNITS) - 1:
        n, unit = n // 1024, unit + 1
    return f"{n} {_BYTE_UNITS[unit]}"


_BYTE_UNITS = ("bytes", "kbytes", "mbytes")


def _no_overlap(where: str, items: list[str]) -> None:
    nets = sorted(ipaddress.ip_network(i) for i in items)
    for a, b in zip(nets, nets[1:]):
        if b.network_address <= a.broadcast_address:
            raise RuleSetError(f"{where}: elements {a} and {b} overlap")


def _reaching_bases(t: Table) -> dict[str, list[Chain]]:
    """Chain name -> the base chains whose packets can reach it by jump or goto."""
    maps = {s.name: s for s in t.sets if s.is_vmap}
    edges = {c.name: [x for r in c.rules if r.action.kind in JUMPING
                      for x in jump_targets(r, maps)] for c in t.chains}
    out: dict[str, list[Chain]] = {}
    for b in t.chains:
        if not b.base:
            continue
        seen, todo = set(), [b.name]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            out.setdefault(name, []).append(b)
            todo.extend(n for n in edges.get(name, []) if n)
    return out
