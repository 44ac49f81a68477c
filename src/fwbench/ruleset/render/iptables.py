"""iptables-restore text from a RuleSet, written exactly as iptables-save prints it.

`render(rs, ifs, 4)` is the iptables-restore input for the tables of family ip and
inet, `render(rs, ifs, 6)` the ip6tables-restore input for ip6 and inet (an inet
rule whose addresses, protocol, sets or NAT address pin the other IP version is
left out; so is one restricted to the other version, Match.ip_version, which
needs no option: the table's version says it). Every line is what iptables-save
(legacy and nft, v1.8.9) prints back for it, so a backend compares kernel state
with the rendering line by line: one `*table` block per iptables table in use
(raw, mangle, nat, filter), every built-in chain of that table with its policy,
user chains and their rules in save's order (built-in chains first, then user
chains sorted by name, as libiptc and iptables-nft both list them), options in
save's order and spelling.

The model maps onto iptables so:
- a base chain goes to the iptables table its type and priority name (filter type
  at -300 raw, -150 mangle, 0 filter; nat type: nat), as the built-in chain of its
  hook; a user chain goes to the one table whose base chains reach it (by jump or
  goto, transitively), or, reached from none, to its model table's first base
  chain's table (without one: the iptables table of the model table's name, as
  an imported iptables-save file's mangle table of only kubelet's empty chains
  is; else filter);
- user chains and sets are named rs.ipt_prefix + their name (a chain name over
  iptables' 28 bytes: its first 16 and a hash of it);
- each rule's id is a comment, `-m comment --comment "fwb:ID"`, after every other
  match (a user's own comment is a second comment just before it);
- a random match is `-m statistic --mode random` (a numerator over 2**32 that
  is not even needs more than the statistic's 31 bits, and is refused); a verdict
  map is one counting rule with the map rule's id and no target, then one rule per
  element, without an id, in the same chain: the elements' keys differ, so at most
  one matches, and a jump comes back to the rules after them as nft's does. A
  numgen map is such rules with statistic matches whose probabilities are each
  element's share of what the earlier ones left, refused where one is not a
  multiple of 2**-31 or where an element jumps (the next rule would draw again);
- a payload string match is `-m string` (searched over the whole packet), a
  hashlimit `-m hashlimit --hashlimit-above` with mode srcip, its name prefixed
  like chains, and action `ct` is `-j CT` without options: the three constructs
  only iptables renders.

Whatever iptables cannot express, or refuses at load (DROP in nat, REJECT outside
filter, DNAT in POSTROUTING, `-o` in PREROUTING, ...), raises model.Unsupported
naming the feature and where it is used. Everything here is pure.
"""
from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
from dataclasses import dataclass, field

from fractions import Fraction

from fwbench.ruleset.evaluate import numgen_weights
from fwbench.ruleset.model import (ADDR_TYPES, PORTLESS, RANDOM_SCALE, Action, Chain,
                                   HashLimit, Interfaces, Ports, Prefix, Quota, Rule, RuleSet,
                                   RuleSetError, Set, SetRef, StringMatch, Table, Unsupported,
                                   evolve, JUMPING, jump_targets)
from fwbench.ruleset.render import ID_TAG
from fwbench.ruleset.render import ipset as _ipset

SUPPORTS: frozenset[str] = frozenset({
    "family ip", "family ip6", "family inet",
    "hook prerouting", "hook input", "hook forward", "hook output", "hook postrouting",
    "chain type filter", "chain type nat", "policy accept", "policy drop", "user chain",
    "iif", "oif", "saddr", "daddr", "saddr prefix", "daddr prefix", "ipv6",
    "proto tcp", "proto udp", "proto icmp", "proto icmpv6", "proto esp", "proto ah",
    "proto gre", "proto igmp", "sport", "dport", "port range", "port list", "icmp type", "icmpv6 type",
    "ip version", "negation", "ct state", "mark match", "set match", "limit", "string match",
    "hashlimit", "quota", "tcp flags", "tcp option", "icmp code", "addrtype", "pkttype",
    "ttl", "length", "esp spi", "ah spi",
    "accept", "drop", "reject", "jump", "goto", "return", "dnat", "snat", "masquerade",
    "counter", "mark set", "notrack", "log", "ct", "redirect",
    "random match", "verdict map", "numgen map", "random port",
    "ct mark match", "ct mark set", "ct mark save", "ct mark restore", "nth match",
    "tcp mss", "checksum fill", "ct status",
}) | _ipset.SUPPORTS

# iptables-restore's order of tables, and each table's built-in chains in the order
# iptables-save lists them.
TABLE_HOOKS: dict[str, tuple[str, ...]] = {
    "raw": ("PREROUTING", "OUTPUT"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
}
_FILTER_PRIORITIES = {-300: "raw", -150: "mangle", 0: "filter"}
_HOOKS = {"prerouting": "PREROUTING", "input": "INPUT", "forward": "FORWARD",
          "output": "OUTPUT", "postrouting": "POSTROUTING"}
_POLICIES = {"accept": "ACCEPT", "drop": "DROP"}
# Targets the kernel (or iptables itself) accepts only in some tables or hooks.
_TARGET_TABLES = {"reject": "filter", "dnat": "nat", "snat": "nat", "masquerade": "nat",
                  "notrack": "raw", "ct": "raw", "redirect": "nat", "checksum": "mangle"}
_TARGET_HOOKS = {"dnat": ("PREROUTING", "OUTPUT"), "snat": ("POSTROUTING", "INPUT"),
                 "masquerade": ("POSTROUTING",), "redirect": ("PREROUTING", "OUTPUT")}
_SIMPLE_TARGETS = {"accept": " -j ACCEPT", "drop": " -j DROP", "return": " -j RETURN",
                   "masquerade": " -j MASQUERADE", "notrack": " -j CT --notrack",
                   "ct": " -j CT", "counter": ""}
# conntrack's save prints states in this order, whatever order they were given in.
_CT_ORDER = (("invalid", "INVALID"), ("new", "NEW"), ("related", "RELATED"),
             ("established", "ESTABLISHED"), ("untracked", "UNTRACKED"))
_SET_FLAGS = {"saddr": "src", "daddr": "dst", "sport": "src", "dport": "dst"}
# REJECT's names per IP version; the other version's names map to the ICMP
# message that means the same (as nft's icmpx does), the rest are refused.
_REJECT4 = {"icmp-net-unreachable", "icmp-host-unreachable", "icmp-port-unreachable",
            "icmp-proto-unreachable", "icmp-net-prohibited", "icmp-host-prohibited",
            "icmp-admin-prohibited", "tcp-reset"}
_REJECT6 = {"icmp6-no-route", "icmp6-adm-prohibited", "icmp6-addr-unreachable",
            "icmp6-port-unreachable", "icmp6-policy-fail", "icmp6-reject-route",
            "tcp-reset"}
_REJECT_4TO6 = {"icmp-net-unreachable": "icmp6-no-route",
                "icmp-host-unreachable": "icmp6-addr-unreachable",
                "icmp-port-unreachable": "icmp6-port-unreachable",
                "icmp-admin-prohibited": "icmp6-adm-prohibited"}
_REJECT_6TO4 = {v: k for k, v in _REJECT_4TO6.items()}
# nft's icmpx types (`icmpx-TYPE`), as the kernel sends them per version
# (nft_reject: icmpx no-route is ICMP net-unreachable, host-unreachable is
# ICMPv6 address-unreachable).
_REJECT_ICMPX = {4: {"icmpx-port-unreachable": "icmp-port-unreachable",
                     "icmpx-host-unreachable": "icmp-host-unreachable",
                     "icmpx-no-route": "icmp-net-unreachable",
                     "icmpx-admin-prohibited": "icmp-admin-prohibited"},
                 6: {"icmpx-port-unreachable": "icmp6-port-unreachable",
                     "icmpx-host-unreachable": "icmp6-addr-unreachable",
                     "icmpx-no-route": "icmp6-no-route",
                     "icmpx-admin-prohibited": "icmp6-adm-prohibited"}}
# libxt_limit: rates are periods in units of 1/10000 s, an integer (so 1023/second,
# 10000/1023 units, is no rate it can hold); save picks the largest unit that
# prints the period exactly (so 60/minute reads back as 1/sec).
_LIMIT_SCALE = 10000
_LIMIT_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_LIMIT_PRINT = (("day", _LIMIT_SCALE * 86400), ("hour", _LIMIT_SCALE * 3600),
                ("min", _LIMIT_SCALE * 60), ("sec", _LIMIT_SCALE))
_LIMIT_BURST = 5                  # the default, which save leaves out
_MAX_CREDITS_A_SECOND = 38400
# libxt_hashlimit (revisions 2 and 3) keeps a rate as a period in microseconds and
# prints it as limit does; the burst it always prints, the mode when there is one,
# a mask when it is not the whole address, the entries' expiry when it is not the
# printed unit's (rendering the rate in that unit keeps it so).
HASHLIMIT_SCALE = 1_000_000
HASHLIMIT_GCINTERVAL = 1000       # ms, libxt_hashlimit's default
MAX_HASHLIMIT_NAME = 15           # XT_HASHLIMIT's name: 16 bytes with its NUL
# libxt_string: a pattern of at most 128 bytes; save prints it quoted, `"` and `\`
# escaped, or as --hex-string when a byte is not printable.
MAX_STRING = 128
# Kernel and tool limits: a chain name is 28 bytes, an interface 15, a comment
# 255 (longer ones are cut silently), a log prefix 29, a multiport match 15 ports
# (a range takes two).
MAX_CHAIN = 28
MAX_IFNAME = 15
MAX_COMMENT = 255
MAX_LOG_PREFIX = 29
MAX_MULTIPORT = 15
_SAFE = frozenset("_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ID_HEAD = ' -m comment --comment "' + ID_TAG
_ID_RE = re.compile(r' -m comment --comment "' + re.escape(ID_TAG) + r'(?:[^"\\]|\\.)*"')


# --- the public functions ------------------------------------------------------------

def refuse_unsupported(rs: RuleSet) -> None:
    """Raise Unsupported for the first feature (in RuleSet.features() order) iptables
    lacks, then for anything the mapping onto iptables' tables and hooks refuses."""
    for feature, where in rs.features().items():
        if feature not in SUPPORTS:
            raise Unsupported(feature, where)
    _ipset.refuse_unsupported(rs)
    ifs = Interfaces("fwb-check-c", "fwb-check-s")
    for version in (4, 6):
        render(rs, ifs, version)


def render(rs: RuleSet, ifs: Interfaces, version: int) -> str:
    """iptables-restore (version 4) or ip6tables-restore (version 6) input, every
    line as iptables-save prints it back; "" when no table is of that version."""
    if version not in (4, 6):
        raise ValueError(f"IP version must be 4 or 6, got {version}")
    plan = _plan(rs, version)
    emit = _Emitter(rs, ifs, version)
    out: list[str] = []
    for ipt in TABLE_HOOKS:
        tp = plan.get(ipt)
        if tp is None:
            continue
        out.append("*" + ipt)
        for hook in TABLE_HOOKS[ipt]:
            out.append(f":{hook} {tp.policies.get(hook, 'ACCEPT')} [0:0]")
        users = sorted(tp.users)
        out.extend(f":{name} - [0:0]" for name in users)
        for hook in TABLE_HOOKS[ipt]:
            if hook in tp.base:
                chain, table = tp.base[hook]
                emit.chain(out, hook, chain, table, ipt, frozenset((hook,)), hook)
        for name in users:
            chain, table, hooks = tp.users[name]
            emit.chain(out, name, chain, table, ipt, frozenset(hooks), None)
        out.append("COMMIT")
    return "\n".join(out) + "\n" if out else ""


def rule_id(line: str) -> str | None:
    """The rule id in a saved rule line (`-A ... -m comment --comment "fwb:ID" ...`),
    or None when the line carries none."""
    i = line.rfind(_ID_HEAD)
    if i < 0:
        return None
    start = i + len(_ID_HEAD)
    end = line.find('"', start)
    if end < 0:
        return None
    text = line[start:end]
    if "\\" not in text:
        return text
    # The id holds an escaped quote or backslash: read it as save escaped it.
    out, j = [], start
    while j < len(line):
        ch = line[j]
        if ch == "\\" and j + 1 < len(line):
            out.append(line[j + 1])
            j += 2
        elif ch == '"':
            return "".join(out)
        else:
            out.append(ch)
            j += 1
    return None


def strip_ids(text: str) -> str:
    """The text without its rule-id comments (and nothing else)."""
    return _ID_RE.sub("", text)


def quote(text: str) -> str:
    """A string option as iptables-save prints it (xtables_save_string): bare when
    only letters, digits, `_` and `-`, else double-quoted with `"`, `\\` and `'`
    escaped by a backslash; iptables-restore reads either form back."""
    if text and _SAFE.issuperset(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("'", "\\'") + '"'


# --- the mapping onto iptables' tables ---------------------------------------------------

@dataclass
class _IptTable:
    base: dict[str, tuple[Chain, Table]] = field(default_factory=dict)      # hook ->
    policies: dict[str, str] = field(default_factory=dict)                  # hook ->
    users: dict[str, tuple[Chain, Table, set[str]]] = field(default_factory=dict)


def _included(t: Table, version: int) -> bool:
    if t.family == "netdev":
        raise Unsupported("family netdev", f"table {t.name}")
    return t.family == "inet" or t.family == ("ip" if version == 4 else "ip6")


def _base_place(c: Chain) -> tuple[str, str]:
    """(iptables table, built-in chain) of a base chain."""
    where = f"chain {c.name}"
    if c.type == "nat":
        ipt = "nat"
    elif c.type == "filter":
        ipt = _FILTER_PRIORITIES.get(c.priority)
        if ipt is None:
            raise Unsupported(f"priority {c.priority}", where)
    else:
        raise Unsupported(f"chain type {c.type}", where)
    hook = _HOOKS.get(c.hook)
    if hook is None:
        raise Unsupported(f"hook {c.hook}", where)
    if hook not in TABLE_HOOKS[ipt]:
        raise Unsupported(f"hook {c.hook} in table {ipt}", where)
    if c.policy not in _POLICIES:
        raise Unsupported(f"policy {c.policy}", where)
    if ipt == "nat" and c.policy == "drop":
        raise Unsupported("policy drop in table nat", where)
    return ipt, hook


def _plan(rs: RuleSet, version: int) -> dict[str, _IptTable]:
    plan: dict[str, _IptTable] = {}
    for t in rs.tables:
        if not _included(t, version):
            continue
        chains = {c.name: c for c in t.chains}
        maps = {s.name: s for s in t.sets if s.is_vmap}
        edges = {c.name: [x for r in c.rules if r.action.kind in JUMPING
                          for x in jump_targets(r, maps)]
                 for c in t.chains}
        reach: dict[str, dict[str, set[str]]] = {}   # user chain -> ipt table -> hooks
        first: str | None = None
        placed: dict[str, str] = {}                   # chain -> ipt table
        for c in t.chains:
            if not c.base:
                continue
            ipt, hook = _base_place(c)
            first = first or ipt
            tp = plan.setdefault(ipt, _IptTable())
            if hook in tp.base:
                raise Unsupported(f"two base chains at {ipt} {hook}", f"chain {c.name}")
            tp.base[hook] = (c, t)
            tp.policies[hook] = _POLICIES[c.policy]
            stack, seen = list(edges[c.name]), set()
            while stack:
                name = stack.pop()
                if name in seen:
                    continue
                seen.add(name)
                if name not in chains:
                    raise RuleSetError(f"table {t.family} {t.name}: a jump to a missing "
                                       f"chain {name!r}")
                reach.setdefault(name, {}).setdefault(ipt, set()).add(hook)
                stack.extend(edges[name])
            placed[c.name] = ipt
        for c in t.chains:
            if c.base:
                continue
            where = f"chain {c.name}"
            home = first or (t.name if t.name in TABLE_HOOKS else "filter")
            tables = reach.get(c.name, {home: set()})
            if len(tables) > 1:
                a, b = sorted(tables, key=list(TABLE_HOOKS).index)[:2]
                raise Unsupported(f"user chain reached from tables {a} and {b}", where)
            (ipt, hooks), = tables.items()
            name = _chain_name(rs, c)
            tp = plan.setdefault(ipt, _IptTable())
            if name in tp.users:
                raise Unsupported(f"chain name {name} in two tables", where)
            tp.users[name] = (c, t, hooks)
            placed[c.name] = ipt
        # A chain no base chain reaches may still jump to one that is reached.
        for name, targets in edges.items():
            for target in targets:
                if placed.get(target, placed[name]) != placed[name]:
                    raise Unsupported(f"jump from table {placed[name]} to table "
                                      f"{placed[target]}", f"chain {name}")
    return plan


def _chain_name(rs: RuleSet, c: Chain) -> str:
    name = rs.ipt_prefix + c.name
    where = f"chain {c.name}"
    if len(name.encode()) > MAX_CHAIN:
        # nft's longer names (kube-proxy's nftables mode, 40 and more): their first
        # 16 bytes and 11 of their hash's base32, unique across 10**5 chains.
        if not name.isascii():
            raise Unsupported(f"chain name longer than {MAX_CHAIN} characters", where)
        digest = base64.b32encode(hashlib.sha256(name.encode()).digest()).decode()
        name = f"{name[:16]}-{digest[:11]}"
    if not name or name[0] in "-!" or any(ch.isspace() or ch in "\"'\\" for ch in name) \
            or name in _POLICIES.values() or name in ("RETURN", "QUEUE") \
            or name in _HOOKS.values():
        raise Unsupported(f"chain name {name!r}", where)
    return name


# --- rules -------------------------------------------------------------------------------

class _Emitter:
    """Writes rule lines. Per rule it only joins strings (no regex, no address
    parsing): a 100,000-rule chain renders in a fraction of a second."""

    def __init__(self, rs: RuleSet, ifs: Interfaces, version: int):
        self.rs, self.ifs, self.version = rs, ifs, version
        self.ifnames: dict[str, str] = {}
        self.targets: dict[str | None, str] = {}
        self.setrefs: dict[tuple[int, SetRef], tuple[str, int]] = {}
        self.other_protos: dict[tuple[int, str], bool] = {}
        self.maps: dict[int, dict[str, Set]] = {}
        self.icmp = " -p icmp -m icmp --icmp-type " if version == 4 \
            else " -p ipv6-icmp -m icmp6 --icmpv6-type "

    def chain(self, out: list[str], name: str, c: Chain, t: Table, ipt: str,
              hooks: frozenset[str], base_hook: str | None) -> None:
        head = "-A " + name
        inet = t.family == "inet"
        line = self.rule
        for r in c.rules:
            if r.action.kind == "vmap":
                self.vmap(out, head, r, t, inet, ipt, hooks, base_hook)
                continue
            text = line(head, r, t, inet, ipt, hooks, base_hook)
            if text is not None:
                out.append(text)

    def vmap(self, out: list[str], head: str, r: Rule, t: Table, inet: bool, ipt: str,
             hooks: frozenset[str], base_hook: str | None) -> None:
        """A verdict map rule: its counting rule, then a rule per element (see the
        module docstring)."""
        where = f"rule {r.id}"
        maps = self.maps.get(id(t))
        if maps is None:   # by name: kube-proxy's nft mode has a map per service
            maps = self.maps[id(t)] = {x.name: x for x in t.sets if x.is_vmap}
        s = maps.get(r.action.vmap.name)
        if s is None:
            raise RuleSetError(f"{where}: no verdict map {r.action.vmap.name!r}")
        counting = self.rule(head, evolve(r, action=Action("counter")), t, inet, ipt,
                             hooks, base_hook)
        if counting is None:
            return
        out.append(counting)
        m = r.match
        if r.action.numgen is not None:
            if m.random is not None:
                raise Unsupported("numgen map in a rule with a random match", where)
            for random, verdict in _numgen_shares(r.action.numgen, s, where):
                element = evolve(r, match=evolve(m, random=random), action=verdict)
                out.append(self.rule(head, element, t, inet, ipt, hooks, base_hook,
                                     tagged=False))
            return
        fields = r.action.vmap.fields
        for e, verdict in zip(s.elements, s.verdicts):
            kw = {}
            for f, value in zip(fields, e):
                if f in ("saddr", "daddr"):
                    key, have = ("src", m.src) if f == "saddr" else ("dst", m.dst)
                    kw[key] = Prefix.of(str(value))
                elif f == "proto":
                    key, have = "proto", m.proto
                    kw[key] = str(value)
                else:
                    key, have = f, getattr(m, f)
                    kw[key] = Ports.of(int(value))
                if have is not None:
                    raise Unsupported(f"verdict map on {f}, which its rule matches too",
                                      where)
            if ("sport" in kw or "dport" in kw) and kw.get("proto", m.proto) not in ("tcp", "udp"):
                raise Unsupported("verdict map on a port without tcp or udp", where)
            element = evolve(r, match=evolve(m, kw), action=verdict)
            out.append(self.rule(head, element, t, inet, ipt, hooks, base_hook,
                                 tagged=False))

    def rule(self, head: str, r: Rule, t: Table, inet: bool, ipt: str,
             hooks: frozenset[str], base_hook: str | None, tagged: bool = True) -> str | None:
        m, a = r.match, r.action
        rid = r.id
        # The IP version this rule is pinned to, if any.
        v4 = v6 = False
        src, dst, proto = m.src, m.dst, m.proto
        for p in (src, dst):
            if p is not None:
                if ":" in p.net:
                    v6 = True
                else:
                    v4 = True
        if proto == "icmp":
            v4 = True
        elif proto == "icmpv6":
            v6 = True
        if m.ip_version:
            if m.ip_version == 4:
                v4 = True
            else:
                v6 = True
        refs = []
        for ref in m.sets:
            flags = self._setref(t, ref, rid)
            if proto not in ("tcp", "udp") and self._port_lookup_differs(t, ref):
                # ipset looks an ICMP packet up by its type and code, an other
                # protocol by port 0: it is then "not in" the set, where in the
                # model a packet without ports matches neither the set nor its
                # negation. A positive lookup of TCP/UDP elements agrees.
                raise Unsupported("set port lookup without -p tcp or -p udp",
                                  f"rule {rid}")
            refs.append(flags)
            if flags[1] == 6:
                v6 = True
            else:
                v4 = True
        if a.addr is not None:
            if ":" in a.addr:
                v6 = True
            else:
                v4 = True
        if v4 and v6:
            raise RuleSetError(f"rule {rid}: mixes IPv4 and IPv6")
        if (v6 and self.version == 4) or (v4 and self.version == 6):
            if inet:
                return None
            raise RuleSetError(f"rule {rid}: an IPv{6 if v6 else 4} match in a table "
                               f"of family {t.family}")

        parts = [head]
        if src is not None:
            self._addr(parts, " -s ", src, rid, "saddr")
        if dst is not None:
            self._addr(parts, " -d ", dst, rid, "daddr")
        if m.iif is not None:
            if base_hook in ("OUTPUT", "POSTROUTING"):
                raise Unsupported(f"iif in hook {base_hook.lower()}", f"rule {rid}")
            parts.append(" ! -i " if m.iif.negate else " -i ")
            parts.append(self._ifname(m.iif.name, rid))
        if m.oif is not None:
            if base_hook in ("PREROUTING", "INPUT"):
                raise Unsupported(f"oif in hook {base_hook.lower()}", f"rule {rid}")
            parts.append(" ! -o " if m.oif.negate else " -o ")
            parts.append(self._ifname(m.oif.name, rid))
        if proto is not None:
            if proto == "tcp" or proto == "udp":
                parts.append(" -p " + proto)
                self._ports(parts, proto, m.sport, m.dport, rid)
            elif proto == "icmp" or proto == "icmpv6":
                if m.icmp_type is None:
                    parts.append(" -p icmp" if proto == "icmp" else " -p ipv6-icmp")
                else:
                    # 255 is iptables' "any type", not the type 255 nft would match.
                    if not 0 <= m.icmp_type < 255:
                        raise Unsupported(f"icmp type {m.icmp_type}", f"rule {rid}")
                    parts.append(self.icmp)
                    parts.append(str(m.icmp_type))
                    if m.icmp_code is not None:
                        parts.append(f"/{m.icmp_code}")
            elif proto in PORTLESS:
                parts.append(" -p " + proto)
            else:
                raise Unsupported(f"proto {proto}", f"rule {rid}")
        if m.icmp_types is not None:
            raise Unsupported("icmp type set", f"rule {rid}")
        if m.icmp_code is not None and m.icmp_type is None:
            raise Unsupported("icmp code without a type", f"rule {rid}")
        if m.attrs or m.tcp_options:
            for at in m.attrs:
                parts.append(_ipsec_spi(at, rid))
            for o in m.tcp_options:
                # xt_tcp tests a kind's presence only.
                parts.append(f" -m tcp {'! ' if o.negate else ''}--tcp-option {o.kind}")
        if m.tcp_flags is not None:
            parts.append(_tcp_flags(m.tcp_flags, rid))
        if m.addrtype is not None or m.pkttype is not None or m.ttl is not None \
                or m.length is not None:
            parts += _everyday(m, self.version, rid)
        if m.ct_state:
            parts.append(" -m conntrack --ctstate ")
            parts.append(",".join(n for s, n in _CT_ORDER if s in m.ct_state))
        if m.ct_status:
            parts.append(" -m conntrack ! --ctstate " if m.ct_status_negate
                         else " -m conntrack --ctstate ")
            parts.append(",".join(n for s, n in (("snat", "SNAT"), ("dnat", "DNAT"))
                                  if s in m.ct_status))
        if m.mark is not None:
            value, mask = m.mark
            _u32(value, rid)
            _u32(mask, rid)
            parts.append(" -m mark ! --mark " if m.mark_negate else " -m mark --mark ")
            parts.append(f"{value:#x}" if mask == 0xFFFFFFFF else f"{value:#x}/{mask:#x}")
        if m.ct_mark is not None:
            value, mask = m.ct_mark
            parts.append(" -m connmark ! --mark " if m.ct_mark_negate else " -m connmark --mark ")
            parts.append(f"{value:#x}" if mask == 0xFFFFFFFF else f"{value:#x}/{mask:#x}")
        for ref, (text, _) in zip(m.sets, refs):
            parts.append(" -m set ! --match-set " if ref.negate else " -m set --match-set ")
            parts.append(text)
        if m.limit is not None:
            parts.append(_limit(m.limit, rid))
        if m.string is not None:
            parts.append(_string(m.string, rid))
        if m.hashlimit is not None:
            parts.append(self._hashlimit(m.hashlimit, rid))
        if m.random is not None:
            parts.append(_statistic(m.random, rid))
        if m.nth is not None:
            every, phase = m.nth
            parts.append(f" -m statistic --mode nth --every {every} "
                         f"--packet {(every - phase) % every}")
        if m.quota is not None:
            parts.append(_quota(m.quota, rid))
        if r.comment is not None:
            parts.append(" -m comment --comment ")
            parts.append(_comment(r.comment, rid))
        if not tagged:
            pass
        elif len(rid) <= _MAX_ID and _SAFE_ID.issuperset(rid):
            parts.append(' -m comment --comment "' + ID_TAG + rid + '"')
        else:
            parts.append(" -m comment --comment " + _comment(ID_TAG + rid, rid))
        parts.append(self._target(r, ipt, hooks))
        return "".join(parts)

    def _hashlimit(self, h: HashLimit, rid: str) -> str:
        where = f"rule {rid}"
        name = self.rs.ipt_prefix + h.name
        if len(name.encode()) > MAX_HASHLIMIT_NAME or not _SAFE.issuperset(name):
            raise Unsupported(f"hashlimit name {name!r} (at most {MAX_HASHLIMIT_NAME} "
                              f"letters, digits, _ and -)", where)
        width = 32 if self.version == 4 else 128
        if h.src_prefix is not None and h.src_prefix > width:
            raise RuleSetError(f"{where}: hashlimit source prefix /{h.src_prefix} in an "
                               f"IPv{self.version} rule")
        if h.dst_prefix is not None and h.dst_prefix > width:
            raise RuleSetError(f"{where}: hashlimit destination prefix /{h.dst_prefix} in "
                               f"an IPv{self.version} rule")
        rate = _rate(h.rate, h.per, HASHLIMIT_SCALE, "hashlimit", rid)
        if not 1 <= h.burst <= 10000:
            raise Unsupported(f"hashlimit burst {h.burst}", where)
        # In iptables-save's order; what it leaves out at its default, so do we.
        text = [f" -m hashlimit --hashlimit-{'upto' if h.upto else 'above'} {rate}",
                f" --hashlimit-burst {h.burst}"]
        if h.mode:
            text.append(f" --hashlimit-mode {','.join(h.mode)}")
        text.append(f" --hashlimit-name {name}")
        if h.size:
            text.append(f" --hashlimit-htable-size {h.size}")
        if h.max:
            text.append(f" --hashlimit-htable-max {h.max}")
        if h.gcinterval not in (None, HASHLIMIT_GCINTERVAL):
            text.append(f" --hashlimit-htable-gcinterval {h.gcinterval}")
        if h.expire not in (None, hashlimit_default_expire(h.rate, h.per)):
            text.append(f" --hashlimit-htable-expire {h.expire}")
        if h.src_prefix not in (None, width):
            text.append(f" --hashlimit-srcmask {h.src_prefix}")
        if h.dst_prefix not in (None, width):
            text.append(f" --hashlimit-dstmask {h.dst_prefix}")
        return "".join(text)

    def _addr(self, parts: list[str], opt: str, p: Prefix, rid: str, what: str) -> None:
        net = p.net
        if net.endswith("/0"):
            # save drops a 0/0 address; negated, the nft variant refuses it.
            if p.negate:
                raise Unsupported(f"negated {what} /0", f"rule {rid}")
            return
        if p.negate:
            parts.append(" !")
        parts.append(opt)
        parts.append(net)

    def _ifname(self, name: str, rid: str) -> str:
        out = self.ifnames.get(name)
        if out is None:
            out = self.ifs.resolve(name)
            if not out or len(out.encode()) > MAX_IFNAME or \
                    any(ch.isspace() or ch in "\"'\\/" for ch in out):
                raise Unsupported(f"interface name {out!r}", f"rule {rid}")
            self.ifnames[name] = out
        return out

    def _ports(self, parts: list[str], proto: str, sport: Ports | None,
               dport: Ports | None, rid: str) -> None:
        one, lists = [], []
        for opt, p in ((" --sport ", sport), (" --dport ", dport)):
            if p is None:
                continue
            r = p.ranges
            if len(r) == 1:
                lo, hi = r[0]
                if lo == 0 and hi == 65535:
                    # save prints no option for the full range; negated, it loses
                    # the negation (legacy) or the match (nft).
                    if p.negate:
                        raise Unsupported("negated full port range", f"rule {rid}")
                    continue
                one.append(" !" + opt if p.negate else opt)
                one.append(str(lo) if lo == hi else f"{lo}:{hi}")
            else:
                if sum(1 if lo == hi else 2 for lo, hi in r) > MAX_MULTIPORT:
                    raise Unsupported(f"port list of more than {MAX_MULTIPORT} ports",
                                      f"rule {rid}")
                lists.append(" -m multiport ! --" if p.negate else " -m multiport --")
                lists.append(opt[3:-1] + "s ")
                lists.append(",".join(str(lo) if lo == hi else f"{lo}:{hi}"
                                      for lo, hi in r))
        if one:
            parts.append(" -m " + proto)
            parts.extend(one)
        parts.extend(lists)

    def _port_lookup_differs(self, t: Table, ref: SetRef) -> bool:
        """Whether a lookup of ports in `ref`'s set means other than the model's
        for packets that are neither TCP nor UDP: negated, or in a set that holds
        other protocols."""
        if not any(f in ("sport", "dport") for f in ref.fields):
            return False
        if ref.negate:
            return True
        key = (id(t), ref.name)
        out = self.other_protos.get(key)
        if out is None:
            s = t.set(ref.name)
            i = s.keys.index("proto") if "proto" in s.keys else None
            out = self.other_protos[key] = i is None or any(
                e[i] not in ("tcp", "udp", 6, 17) for e in s.elements)
        return out

    def _setref(self, t: Table, ref: SetRef, rid: str) -> tuple[str, int]:
        """(` NAME FLAGS`, the set's IP version) for a set lookup."""
        key = (id(t), ref)
        out = self.setrefs.get(key)
        if out is not None:
            return out
        try:
            s = t.set(ref.name)
        except RuleSetError:
            raise RuleSetError(f"rule {rid}: no set {ref.name!r}") from None
        _ipset.set_type(s)
        flags = _set_flags(s, ref, rid)
        out = self.setrefs[key] = (f"{_ipset.set_name(self.rs, s)} {flags}", s.version)
        return out

    def _target(self, r: Rule, ipt: str, hooks: frozenset[str]) -> str:
        a, rid = r.action, r.id
        kind = a.kind
        where = f"rule {rid}"
        need = _TARGET_TABLES.get(kind)
        if need is not None and need != ipt:
            raise Unsupported(f"{kind} in table {ipt}", where)
        allowed = _TARGET_HOOKS.get(kind)
        if allowed is not None:
            for hook in hooks:
                if hook not in allowed:
                    raise Unsupported(f"{kind} in hook {hook.lower()}", where)
        if kind == "drop" and ipt == "nat":
            # iptables itself refuses: "the nat table is not intended for filtering".
            raise Unsupported("drop in table nat", where)
        if kind in ("redirect", "masquerade") and a.port is not None:
            if r.match.proto not in ("tcp", "udp") or not 0 < a.port <= 65535:
                raise RuleSetError(f"{where}: {kind} to port {a.port} needs tcp or udp")
            ports = str(a.port) if a.port_hi is None else f"{a.port}-{a.port_hi}"
            return f" -j {kind.upper()} --to-ports {ports}" + (
                " --random-fully" if a.random_port else "")
        if kind == "tcpmss":
            return _tcpmss(a.mss, r.match, hooks, where)
        if kind == "checksum":
            return " -j CHECKSUM --checksum-fill"
        simple = _SIMPLE_TARGETS.get(kind)
        if simple is not None:
            if a.random_port:
                return simple + " --random-fully"
            return simple
        if kind == "jump" or kind == "goto":
            name = self.targets.get(a.chain)
            if name is None:
                name = self.targets[a.chain] = _chain_name(self.rs, Chain(a.chain or ""))
            return (" -j " if kind == "jump" else " -g ") + name
        if kind == "reject":
            return " -j REJECT --reject-with " + self._reject(r)
        if kind == "redirect":
            return " -j REDIRECT"
        if kind == "dnat" or kind == "snat":
            return ((" -j DNAT --to-destination " if kind == "dnat"
                     else " -j SNAT --to-source ") + self._nat_to(r))
        if kind == "mark":
            value, mask = a.mark, a.mark_mask
            if value is None:
                raise RuleSetError(f"rule {rid}: mark without a value")
            _u32(value, rid)
            _u32(mask, rid)
            return f" -j MARK --set-xmark {value:#x}/{mask:#x}"
        if kind == "ctmark":
            _u32(a.mark or 0, rid)
            return f" -j CONNMARK --set-xmark {a.mark or 0:#x}/{a.mark_mask:#x}"
        if kind == "savemark" or kind == "restoremark":
            nfmask, ctmask = a.ct_masks
            return (f" -j CONNMARK --{kind[:-4]}-mark --nfmask {nfmask:#x} "
                    f"--ctmask {ctmask:#x}")
        if kind == "log":
            prefix = a.log_prefix
            if not prefix:
                return " -j LOG"
            if len(prefix.encode()) > MAX_LOG_PREFIX:
                raise Unsupported(f"log prefix longer than {MAX_LOG_PREFIX} characters",
                                  where)
            return " -j LOG --log-prefix " + _comment(prefix, rid)
        raise Unsupported(kind, where)

    def _reject(self, r: Rule) -> str:
        w = r.action.reject_with
        if w is None:
            return "icmp-port-unreachable" if self.version == 4 else "icmp6-port-unreachable"
        if w == "tcp-reset" and (r.match.proto != "tcp"):
            raise Unsupported("reject with tcp-reset without proto tcp", f"rule {r.id}")
        if self.version == 4:
            out = w if w in _REJECT4 else _REJECT_6TO4.get(w)
        else:
            out = w if w in _REJECT6 else _REJECT_4TO6.get(w)
        out = out or _REJECT_ICMPX[self.version].get(w)
        if out is None:
            raise Unsupported(f"reject with {w}", f"rule {r.id}")
        return out

    def _nat_to(self, r: Rule) -> str:
        a, where = r.action, f"rule {r.id}"
        try:
            net = ipaddress.ip_network(a.addr or "", strict=True)
        except ValueError:
            raise RuleSetError(f"rule {r.id}: not an address: {a.addr!r}") from None
        if net.num_addresses != 1:
            raise Unsupported(f"{a.kind} to a prefix", where)
        addr = str(net.network_address)
        if a.port is None:
            return addr
        if r.match.proto not in ("tcp", "udp"):
            raise Unsupported(f"{a.kind} to a port without tcp or udp", where)
        if not 0 < a.port <= 65535:
            raise RuleSetError(f"rule {r.id}: bad port {a.port}")
        port = str(a.port) if a.port_hi is None else f"{a.port}-{a.port_hi}"
        return f"[{addr}]:{port}" if net.version == 6 else f"{addr}:{port}"


# Ids of these characters print quoted (the tag's `:` asks for it) and unescaped.
_SAFE_ID = frozenset(c for c in map(chr, range(32, 127)) if c not in "\"'\\")
_MAX_ID = MAX_COMMENT - len(ID_TAG)


def _tcpmss(mss: int | None, m, hooks: frozenset[str], where: str) -> str:
    """TCPMSS as libxt_TCPMSS saves it. The kernel loads it only in a rule that
    matches SYNs (`--tcp-flags` with SYN set, not negated), and clamps to the
    path MTU only where a route is known: forward, output and postrouting."""
    f = m.tcp_flags
    if f is None or f.negate or not f.mask & 0x02 or not all(v & 0x02 for v in f.values):
        raise Unsupported("tcp mss without a SYN match (TCPMSS takes SYNs only)", where)
    if mss is not None:
        return f" -j TCPMSS --set-mss {mss}"
    for hook in hooks:
        if hook not in ("FORWARD", "OUTPUT", "POSTROUTING"):
            raise Unsupported(f"tcp mss clamp in hook {hook.lower()}", where)
    return " -j TCPMSS --clamp-mss-to-pmtu"


def _statistic(random: int, rid: str) -> str:
    """A random match as libxt_statistic saves it: the kernel's 31-bit threshold
    printed with 11 decimals, which iptables reads back to the same threshold."""
    if random % 2:
        raise Unsupported("random match finer than the statistic's 2**-31", f"rule {rid}")
    return f" -m statistic --mode random --probability {random / RANDOM_SCALE:.11f}"


def _numgen_shares(numgen: tuple[int, int], s: Set,
                   where: str) -> list[tuple[int | None, Action]]:
    """A numgen map's elements as (random match or None, verdict) for rules in a
    row: each rule's probability the element's share of what the rules before it
    left, so that each element gets exactly its numgen bucket's probability."""
    weight = numgen_weights(*numgen)
    items = [(weight(int(e[0])), v) for e, v in zip(s.elements, s.verdicts)]
    items = [(w, v) for w, v in items if w]
    left = RANDOM_SCALE
    out: list[tuple[int | None, Action]] = []
    for w, v in items:
        if v.kind == "jump":
            raise Unsupported("numgen map with a jump (iptables would draw again after "
                              "it returns)", where)
        if w == left:
            out.append((None, v))
            break
        share = Fraction(w, left) * RANDOM_SCALE
        if share.denominator != 1 or share % 2:
            raise Unsupported(f"numgen map share {w}/{left} (not a multiple of the "
                              f"statistic's 2**-31)", where)
        out.append((int(share), v))
        left -= w
    return out


# libxt_tcp's flag names, in the order its save prints them.
_TCP_FLAG_ORDER = (("FIN", 0x01), ("SYN", 0x02), ("RST", 0x04), ("PSH", 0x08),
                   ("ACK", 0x10), ("URG", 0x20))
# libxt_pkttype's names as its save prints them (PACKET_HOST is "unicast").
_PKT_TYPE_NAMES = {"host": "unicast", "broadcast": "broadcast", "multicast": "multicast",
                   "otherhost": "otherhost"}


def _flag_names(bits: int) -> str:
    return ",".join(n for n, b in _TCP_FLAG_ORDER if bits & b) or "NONE"


def _tcp_flags(f, rid: str) -> str:
    """`--tcp-flags MASK COMP`: one value, within FIN..URG (ECE and CWR have no
    name in iptables)."""
    if len(f.values) != 1:
        raise Unsupported("tcp flags set", f"rule {rid}")
    if f.mask & ~0x3F:
        raise Unsupported("tcp flags ECE or CWR", f"rule {rid}")
    (value,) = f.values
    neg = " !" if f.negate else ""
    return f" -m tcp{neg} --tcp-flags {_flag_names(f.mask)} {_flag_names(value)}"


def _everyday(m, version: int, rid: str) -> list[str]:
    """addrtype, pkttype, ttl/hl and length, as iptables-save prints them."""
    out = []
    a = m.addrtype
    if a is not None:
        if version == 6:
            raise Unsupported("addrtype of IPv6 addresses", f"rule {rid}")
        out.append(" -m addrtype")
        for opt, types, neg in (("src", a.src, a.src_negate), ("dst", a.dst, a.dst_negate)):
            if types is not None:
                names = ",".join(t.upper() for t in ADDR_TYPES if t in types)
                out.append(f"{' !' if neg else ''} --{opt}-type {names}")
    if m.pkttype is not None:
        if len(m.pkttype) != 1:
            raise Unsupported("pkttype set", f"rule {rid}")
        (kind,) = m.pkttype
        out.append(f" -m pkttype{' !' if m.pkttype_negate else ''} --pkt-type "
                   f"{_PKT_TYPE_NAMES[kind]}")
    if m.ttl is not None:
        mod = "ttl" if version == 4 else "hl"
        out.append(f" -m {mod}{_ttl(m.ttl, mod, rid)}")
    if m.length is not None:
        r = m.length
        span = str(r.lo) if r.lo == r.hi else f"{r.lo}:{r.hi}"
        out.append(f" -m length{' !' if r.negate else ''} --length {span}")
    return out


def _ttl(r, mod: str, rid: str) -> str:
    """A TTL range as one of --ttl-eq, --ttl-lt, --ttl-gt (or ! --ttl-eq)."""
    lo, hi, neg = r.lo, r.hi, r.negate
    if neg and lo == 0 and hi < 255:        # not below hi + 1: above hi
        lo, hi, neg = hi + 1, 255, False
    elif neg and hi == 255 and lo > 0:      # not above lo - 1: below lo
        lo, hi, neg = 0, lo - 1, False
    if lo == hi:
        return f"{' !' if neg else ''} --{mod}-eq {lo}"
    if not neg and lo == 0 and hi < 255:
        return f" --{mod}-lt {hi + 1}"
    if not neg and hi == 255 and lo > 0:
        return f" --{mod}-gt {lo - 1}"
    raise Unsupported(f"{mod} range {lo}-{hi}", f"rule {rid}")


def _comment(text: str, rid: str) -> str:
    if len(text.encode()) > MAX_COMMENT:
        raise Unsupported(f"comment longer than {MAX_COMMENT} characters", f"rule {rid}")
    if "\n" in text or "\r" in text or "\0" in text:
        raise Unsupported("line break in a comment", f"rule {rid}")
    return quote(text)


def _u32(value: int, rid: str) -> None:
    if not 0 <= value <= 0xFFFFFFFF:
        raise RuleSetError(f"rule {rid}: mark {value} is not 32 bits")


def _set_flags(s: Set, ref: SetRef, rid: str) -> str:
    """ipset's direction flags for a lookup: one per address or port field, the
    protocol riding with the port (a hash:ip,port key holds it)."""
    f = ref.fields
    ok = len(f) == len(s.keys)
    if ok and len(f) == 3:
        ok = f[0] in ("saddr", "daddr") and f[1] == "proto" and f[2] in ("sport", "dport")
    elif ok and len(f) == 1:
        ok = f[0] in ("saddr", "daddr")
    if not ok:
        raise Unsupported(f"set lookup by {' . '.join(f)}", f"rule {rid}")
    return ",".join(_SET_FLAGS[x] for x in f if x != "proto")


def _limit(lim, rid: str) -> str:
    rate = _rate(lim.rate, lim.per, _LIMIT_SCALE, "limit", rid, native=True)
    if not 1 <= lim.burst <= 10000:
        raise Unsupported(f"limit burst {lim.burst}", f"rule {rid}")
    # xt_limit (legacy) keeps the burst as 32-bit credits, HZ x CREDITS_PER_JIFFY
    # a second (at most 38,400 for HZ 100, 250, 300 or 1000): past that it keeps a
    # wrapped, smaller burst, or refuses the rule.
    seconds = lim.burst * _LIMIT_UNITS[lim.per] // lim.rate
    if seconds * _MAX_CREDITS_A_SECOND > 0xFFFFFFFF:
        raise Unsupported(f"limit burst {lim.burst} at {lim.rate}/{lim.per} (xt_limit's "
                          f"credits overflow)", f"rule {rid}")
    text = " -m limit --limit " + rate
    return text if lim.burst == _LIMIT_BURST else f"{text} --limit-burst {lim.burst}"


def _rate(rate: int, per: str, scale: int, what: str, rid: str,
          native: bool = False) -> str:
    """A rate as limit and hashlimit save it: held as a period in units of 1/scale
    second, printed in the largest unit that shows the period exactly. A rate
    whose period is not a whole number of units is refused: the kernel would
    hold a period cut down to one, a faster rate than the rule's. `native`:
    iptables-nft holds the printed rate itself (nft's limit, for -m limit), so
    that must be the rule's too."""
    mult = _LIMIT_UNITS.get(per)
    if mult is None:
        raise Unsupported(f"{what} per {per}", f"rule {rid}")
    if rate < 1:
        raise RuleSetError(f"rule {rid}: {what} rate {rate}")
    period, rest = divmod(scale * mult, rate)
    if period == 0:
        raise Unsupported(f"{what} faster than {scale}/second", f"rule {rid}")
    if rest:
        raise Unsupported(f"{what} rate {rate}/{per} (iptables holds a period of "
                          f"1/{scale} s units: {scale * mult}/{rate} is not whole)",
                          f"rule {rid}")
    prints = [(name, unit // _LIMIT_SCALE * scale) for name, unit in _LIMIT_PRINT]
    i = 1
    while i < len(prints):
        unit = prints[i][1]
        if period > unit or unit // period < unit % period:
            break
        i += 1
    name, unit = prints[i - 1]
    if native and unit % period:
        # 3125/minute prints as 52/sec: legacy reads it back as the same period,
        # iptables-nft holds 52/second.
        raise Unsupported(f"{what} rate {rate}/{per} (iptables-save prints it as "
                          f"{unit // period}/{name})", f"rule {rid}")
    return f"{unit // period}/{name}"


def _ipsec_spi(at, rid: str) -> str:
    """-m esp --espspi / -m ah --ahspi as save prints them: one value, or lo:hi;
    nothing at all for every SPI (0:4294967295) unless negated."""
    if at.key not in ("esp spi", "ah spi") or len(at.ranges) != 1:
        raise Unsupported(at.key if " " in at.key else f"meta {at.key}", f"rule {rid}")
    (lo, hi), proto = at.ranges[0], at.key.split()[0]
    if (lo, hi) == (0, 0xFFFFFFFF) and not at.negate:
        return f" -m {proto}"
    spi = str(lo) if lo == hi else f"{lo}:{hi}"
    return f" -m {proto} {'! ' if at.negate else ''}--{proto}spi {spi}"


def hashlimit_default_expire(rate: int, per: str) -> int:
    """libxt_hashlimit's expiry of idle entries when none is given: the rate's
    unit in milliseconds, the unit as save prints it (120/min is 2/sec there, and
    its expiry 1000 ms unless given, 60000 when the rule was written per minute)."""
    text = _rate(rate, per, HASHLIMIT_SCALE, "hashlimit", "-")
    return {"day": 86400, "hour": 3600, "min": 60, "sec": 1}[text.split("/")[1]] * 1000


def _quota(q: Quota, rid: str) -> str:
    """xt_quota: the bytes left live in the kernel's copy of the rule; a file cannot
    load a quota partly used, and save prints the bytes it was given."""
    if q.used:
        raise Unsupported("quota already partly used", f"rule {rid}")
    return f" -m quota {'! ' if q.over else ''}--quota {q.bytes}"


def _string(s: StringMatch, rid: str) -> str:
    where = f"rule {rid}"
    data = s.text.encode()
    if len(data) > MAX_STRING:
        raise Unsupported(f"string match longer than {MAX_STRING} bytes", where)
    if not all(0x20 <= b < 0x7F for b in data):
        # save would print it as --hex-string: not the text the rule was given.
        raise Unsupported("string match of a byte that is not printable ASCII", where)
    text = s.text.replace("\\", "\\\\").replace('"', '\\"')
    return f' -m string --string "{text}" --algo {s.algo}'
