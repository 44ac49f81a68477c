"""`iptables-save` / `ip6tables-save` output (and hand-written iptables-restore
input) into the rule-set model.

Each iptables table becomes a model Table of family "ip" or "ip6" with the same
name; built-in chains become base chains named as in iptables ("FORWARD") at the
hook and priority iptables registers them at (raw -300, mangle -150, nat
dstnat/srcnat, filter 0, security 50); user chains stay user chains. `ipset save`
text, when given, supplies the sets that `-m set --match-set` names; only the
sets the rules use are imported, into each table that uses them.

Rule ids: a `-m comment --comment "fwb:ID"` gives the rule its id; any other
rule is `<table>-<n>`, n counting every rule of that table in file order from 1
("nat-3" is the third rule of the nat table). Other comments become
Rule.comment.

Nothing is dropped silently: an option, match module or target the model cannot
hold exactly is a RuleSetError of one line, `<source>:<line>: <what>` (a
`--limit` whose period iptables cannot hold whole, a REJECT type of the other
IP version, an ipset whose elements expire). What changes no verdict is
recorded in RuleSet.notes instead: LOG options other than the prefix, NFLOG
(its rule stays, counting), packet and byte counts, ipset hash tuning and
element comments and counts, and empty built-in chains with policy ACCEPT,
which are left out (they would only add hooks that some backends cannot
hold). An ip6tables-save file is IPv6 throughout: its tables are of family ip6.
Rules no packet of the testbed can match are set aside with a note too: those
that need an IPv6 extension header (-m rt, -m frag) or a non-first fragment (-f),
and rules the model cannot hold in chains only OUTPUT reaches (the firewall's own
packets, which the testbed never judges); `check` proves against the file itself
that leaving them out changed no verdict.

A dual-stack restore file (rules marked -4 or -6) is read once per IP version,
as iptables-restore and ip6tables-restore would, each skipping the other's.

Speed matters (a 100,000-rule file parses in about 1.3 s of CPU on a 2-core VM):
lines are split with str.split, shlex only when a quote is present, and the
small value objects (addresses, ports, interfaces) are built once per distinct
text.
"""
from __future__ import annotations

import gc
import ipaddress
import math
import re
import shlex
import socket
from typing import Protocol

from fwbench.ruleset.model import (ADDR_TYPES, CT_STATES, EMPTY_MATCH, HASHLIMIT_MODES,
                                   RANDOM_SCALE, RULE, TCP_FLAGS, Action, AddrType, Chain,
                                   Attr, HashLimit, Iface, Limit, Ports, Prefix, Quota, Range,
                                   Rule,
                                   RuleSet, RuleSetError, Set, SetRef, Table, TcpFlags,
                                   TcpOption, evolve, timeout_note)
from fwbench.ruleset.render import ID_TAG
from fwbench.ruleset.render.iptables import (HASHLIMIT_GCINTERVAL, HASHLIMIT_SCALE,
                                             hashlimit_default_expire)

BUILTIN = {
    "raw": ("PREROUTING", "OUTPUT"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "security": ("INPUT", "FORWARD", "OUTPUT"),
}
_TABLE_PRIORITY = {"raw": -300, "mangle": -150, "filter": 0, "security": 50}
# iptables' nat table: destination NAT before routing (and for local output),
# source NAT after it (and for local input).
_NAT_PRIORITY = {"PREROUTING": -100, "OUTPUT": -100, "POSTROUTING": 100, "INPUT": 100}

_PROTOS = {"tcp": "tcp", "6": "tcp", "udp": "udp", "17": "udp", "icmp": "icmp", "1": "icmp",
           "ipv6-icmp": "icmpv6", "icmpv6": "icmpv6", "icmp6": "icmpv6", "58": "icmpv6",
           "all": None, "0": None, "esp": "esp", "50": "esp", "ah": "ah", "51": "ah",
           "gre": "gre", "47": "gre", "igmp": "igmp", "2": "igmp"}
# Protocols that load but that the model does not hold, and why (one line); the
# nft importer says the same.
_SCTP = "conntrack's SCTP tracker reads a packet's chunks, which the model does not hold"
REFUSED_PROTOS = {"sctp": _SCTP, "132": _SCTP}
_MODULES = frozenset({"tcp", "udp", "icmp", "icmp6", "multiport", "conntrack", "state",
                      "mark", "set", "limit", "comment", "statistic", "connmark", "addrtype", "pkttype", "ttl", "hl",
                      "length", "quota", "iprange", "hashlimit", "owner", "cgroup",
                      "esp", "ah", "string"})
# Matches that need an IPv6 extension header (a routing header, a fragment
# header): xt_rt and xt_frag match no packet without one, whatever their options
# say, and the testbed sends none. Such rules are set aside with a note.
_HEADER_ONLY = {"rt": "a routing header", "frag": "a fragment header"}
_TARGETS = frozenset({"ACCEPT", "DROP", "RETURN", "REJECT", "MARK", "CT", "NOTRACK",
                      "DNAT", "SNAT", "MASQUERADE", "LOG", "NFLOG", "CONNMARK",
                      "REDIRECT", "TCPMSS", "CHECKSUM"})
# Targets iptables has that the model cannot hold: named so an unknown target reads
# as such and not as a jump to a missing chain.
_OTHER_TARGETS = frozenset({
    "AUDIT", "CLASSIFY", "CLUSTERIP", "CONNSECMARK", "DNPT",
    "DSCP", "ECN", "HL", "HMARK", "IDLETIMER", "LED", "NETMAP", "NFQUEUE",
    "QUEUE", "RATEEST", "SECMARK", "SET", "SNPT", "SYNPROXY",
    "TCPOPTSTRIP", "TEE", "TOS", "TPROXY", "TRACE", "TTL", "ULOG"})
# libxt_limit: a unit is any start of these words; the rate is held as a whole
# period in units of 1/10000 s.
_LIMIT_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_LIMIT_SCALE = 10000
_LIMIT_BURST_MAX = 10000
_REJECT_DEFAULT = {4: "icmp-port-unreachable", 6: "icmp6-port-unreachable"}
# REJECT's --reject-with per IP version: the names save prints, and the short
# ones iptables takes for them (libipt_REJECT, libip6t_REJECT).
_REJECT_NAMES = {
    4: {"icmp-net-unreachable": "net-unreach", "icmp-host-unreachable": "host-unreach",
        "icmp-proto-unreachable": "proto-unreach", "icmp-port-unreachable": "port-unreach",
        "icmp-net-prohibited": "net-prohib", "icmp-host-prohibited": "host-prohib",
        "icmp-admin-prohibited": "admin-prohib", "tcp-reset": "tcp-rst"},
    6: {"icmp6-no-route": "no-route", "icmp6-adm-prohibited": "adm-prohibited",
        "icmp6-addr-unreachable": "addr-unreach", "icmp6-port-unreachable": "port-unreach",
        "icmp6-policy-fail": "policy-fail", "icmp6-reject-route": "reject-route",
        "tcp-reset": "tcp-reset"},
}
_REJECT_WITH = {v: {**{n: n for n in names}, **{s: n for n, s in names.items()}}
                for v, names in _REJECT_NAMES.items()}
# LOG's options: only the prefix is kept, the rest change what is logged.
_LOG_OPTS = frozenset({"--log-prefix", "--log-level", "--log-tcp-sequence",
                       "--log-tcp-options", "--log-ip-options", "--log-uid",
                       "--log-macdecode"})
# NFLOG's: all of them change only what goes to the log.
_NFLOG_OPTS = frozenset({"--nflog-group", "--nflog-prefix", "--nflog-range",
                         "--nflog-size", "--nflog-threshold"})

# name -> (type, code or None: every code), as libxt_icmp and libxt_icmp6 name them.
ICMP_NAMES = {
    "echo-reply": (0, None), "pong": (0, None),
    "destination-unreachable": (3, None), "network-unreachable": (3, 0),
    "host-unreachable": (3, 1), "protocol-unreachable": (3, 2),
    "port-unreachable": (3, 3), "fragmentation-needed": (3, 4),
    "source-route-failed": (3, 5), "network-unknown": (3, 6), "host-unknown": (3, 7),
    "network-prohibited": (3, 9), "host-prohibited": (3, 10),
    "TOS-network-unreachable": (3, 11), "TOS-host-unreachable": (3, 12),
    "communication-prohibited": (3, 13), "host-precedence-violation": (3, 14),
    "precedence-cutoff": (3, 15), "source-quench": (4, None), "redirect": (5, None),
    "network-redirect": (5, 0), "host-redirect": (5, 1), "TOS-network-redirect": (5, 2),
    "TOS-host-redirect": (5, 3), "echo-request": (8, None), "ping": (8, None),
    "router-advertisement": (9, None), "router-solicitation": (10, None),
    "time-exceeded": (11, None), "ttl-exceeded": (11, None),
    "ttl-zero-during-transit": (11, 0), "ttl-zero-during-reassembly": (11, 1),
    "parameter-problem": (12, None), "ip-header-bad": (12, 0),
    "required-option-missing": (12, 1), "timestamp-request": (13, None),
    "timestamp-reply": (14, None), "address-mask-request": (17, None),
    "address-mask-reply": (18, None),
}
ICMP6_NAMES = {
    "destination-unreachable": (1, None), "no-route": (1, 0),
    "communication-prohibited": (1, 1), "beyond-scope": (1, 2),
    "address-unreachable": (1, 3), "port-unreachable": (1, 4), "failed-policy": (1, 5),
    "reject-route": (1, 6), "packet-too-big": (2, None), "time-exceeded": (3, None),
    "ttl-exceeded": (3, None), "ttl-zero-during-transit": (3, 0),
    "ttl-zero-during-reassembly": (3, 1), "parameter-problem": (4, None),
    "bad-header": (4, 0), "unknown-header-type": (4, 1), "unknown-option": (4, 2),
    "echo-request": (128, None), "ping": (128, None), "echo-reply": (129, None),
    "pong": (129, None), "router-solicitation": (133, None),
    "router-advertisement": (134, None), "neighbour-solicitation": (135, None),
    "neighbor-solicitation": (135, None), "neighbour-advertisement": (136, None),
    "neighbor-advertisement": (136, None), "redirect": (137, None),
}

# option -> what it sets; the parser's hot loop compares these short codes.
_OPTS = {
    "-i": "iif", "--in-interface": "iif", "-o": "oif", "--out-interface": "oif",
    "-s": "src", "--source": "src", "--src": "src",
    "-d": "dst", "--destination": "dst", "--dst": "dst",
    "-p": "proto", "--protocol": "proto", "-m": "mod", "--match": "mod",
    "-j": "jump", "--jump": "jump", "-g": "goto", "--goto": "goto",
    "--dport": "dport", "--destination-port": "dport",
    "--sport": "sport", "--source-port": "sport",
    "--dports": "mdport", "--destination-ports": "mdport",
    "--sports": "msport", "--source-ports": "msport",
    "--ctstate": "ctstate", "--state": "state", "--comment": "comment", "--mark": "mark",
    "--match-set": "match-set", "--limit": "limit", "--limit-burst": "limit-burst",
    "--icmp-type": "icmp", "--icmpv6-type": "icmpv6",
    "--quota": "quota", "--src-range": "srcrange", "--dst-range": "dstrange",
    "-c": "counters", "--set-counters": "counters", "-f": "fragment", "--fragment": "fragment",
    "--mode": "stat-mode", "--probability": "probability", "--every": "every",
    "--packet": "packet",
    "!": "!",
    "--syn": "syn", "--tcp-flags": "tcp-flags", "--tcp-option": "tcp-option",
    "--src-type": "src-type", "--dst-type": "dst-type",
    "--limit-iface-in": "limit-iface", "--limit-iface-out": "limit-iface",
    "--pkt-type": "pkt-type", "--length": "length",
    "--ttl-eq": "ttl-eq", "--ttl-gt": "ttl-gt", "--ttl-lt": "ttl-lt",
    "--hl-eq": "hl-eq", "--hl-gt": "hl-gt", "--hl-lt": "hl-lt",
    "-4": "only4", "--ipv4": "only4", "-6": "only6", "--ipv6": "only6",
    "--espspi": "ipsec-spi", "--ahspi": "ipsec-spi",
    "--string": "gather", "--hex-string": "gather", "--algo": "gather", "--from": "gather",
    "--to": "gather", "--icase": "gather-flag",
    "--uid-owner": "gather", "--gid-owner": "gather", "--cgroup": "gather",
    "--path": "gather", "--socket-exists": "gather-flag", "--suppl-groups": "gather-flag",
    **{f"--hashlimit{o}": "hashlimit" for o in (
        "", "-upto", "-above", "-burst", "-mode", "-name", "-srcmask", "-dstmask",
        "-htable-size", "-htable-max", "-htable-expire", "-htable-gcinterval")},
}
# Options that take no value.
_NO_VALUE = frozenset({"syn", "only4", "only6", "fragment", "limit-iface", "gather-flag"})
# Modules whose options _options gathers and reads after the loop.
_RARE_MODULES = frozenset({"owner", "cgroup", "hashlimit", "string"})
_FAMILY_OPTS = frozenset(o for o, code in _OPTS.items() if code in ("only4", "only6"))
_TCP_FLAG_NAMES = {**{k.upper(): v for k, v in TCP_FLAGS.items() if v <= 0x20},
                   "ALL": 0x3F, "NONE": 0}
# libxt_pkttype's names -> the kernel's packet types as the model names them.
_PKT_TYPES = {"unicast": "host", "host": "host", "broadcast": "broadcast",
              "multicast": "multicast", "otherhost": "otherhost"}
# What may follow `-m quota --quota N`: the IP header's matches (the kernel tests
# them before every -m match), comments, the target, counters.
_AFTER_QUOTA = frozenset({"iif", "oif", "src", "dst", "proto", "comment", "jump", "goto",
                          "counters"})
_OLD_NEGATION = frozenset({"-i", "-o", "-s", "-d", "-p", "--dport", "--sport"})
_FLAG_OPTS = frozenset({"--notrack", "--random", "--persistent", "--random-fully",
                        "--save-mark", "--restore-mark", "--clamp-mss-to-pmtu",
                        "--checksum-fill",
                        "--log-tcp-sequence", "--log-tcp-options", "--log-ip-options",
                        "--log-uid", "--log-macdecode"})
_TARGET_OPTS = {"REJECT": ("--reject-with",), "CT": ("--notrack",),
                "DNAT": ("--to-destination",), "SNAT": ("--to-source",),
                "MASQUERADE": ("--random-fully", "--to-ports"), "REDIRECT": ("--to-ports",),
                "TCPMSS": ("--clamp-mss-to-pmtu", "--set-mss"), "CHECKSUM": ("--checksum-fill",)}
_SIMPLE = {"ACCEPT": Action("accept"), "DROP": Action("drop"), "RETURN": Action("return"),
           "NOTRACK": Action("notrack")}
_COUNTER = Action("counter")
_MASQUERADE = Action("masquerade")
_MASQUERADE_FULLY_RANDOM = Action("masquerade", random_port=True)
_NAT_TARGETS = frozenset({"DNAT", "SNAT", "MASQUERADE", "REDIRECT"})


class _Fail(Exception):
    """A problem on the current line (or on `line`); parse() adds
    `<source>:<line>: `."""

    def __init__(self, what: str, line: int | None = None):
        super().__init__(what)
        self.line = line


class _Aside(Exception):
    """A rule no packet of the testbed can match (it needs a header the testbed
    never sends): left out of the model, with a note saying why."""


class _Skip(Exception):
    """A rule for the other IP version (`-4` read by ip6tables-restore, `-6` by
    iptables-restore): the tool ignores it, and so does the import."""


class Mover(Protocol):
    """What parse() asks, when given one, for every address (canonical text) and
    interface name as it reads them: where they go (remap.Remapper)."""

    def addr(self, text: str) -> str: ...

    def prefix(self, written: str) -> str | None: ...

    def iface(self, name: str) -> str: ...


def parse(text: str, source: str, version: int = 4, ipsets: str | None = None,
          ipsets_source: str = "ipsets", mover: Mover | None = None,
          refused: list[tuple[str, str]] | None = None) -> RuleSet:
    """The rule set `text` (iptables-save output for IPv4, or ip6tables-save's
    with version=6) holds. `ipsets` is `ipset save` text defining the sets that
    `-m set` names (errors in it name `ipsets_source`). With a `mover`, every
    address and interface is what the mover says it becomes. With `refused` (a
    list: coverage), a rule the model cannot hold is left out and its refusal
    appended there as (where, why), instead of refusing the file."""
    parser = _Parser(source, version, ipsets, ipsets_source, mover)
    parser.refused = refused
    return parser.run(text)


# An address option and its value (a NAT target's may carry a port), as
# iptables-save writes them; networks() reads them without parsing the rules.
_ADDR_OPT = re.compile(r"(?<!\S)(?:-[sd]|--source|--destination|--src|--dst|"
                       r"--to-destination|--to-source)[ \t]+(?:![ \t]+)?([^\s\"']+)")


def networks(text: str, version: int, ipsets: str | None = None) -> set[str]:
    """The networks `text` names (and the elements of the `ipset save` text
    `ipsets`), as written, read by pattern in a sixth of parse()'s time; a
    remap plan made from them before parsing saves building the rules twice.
    Only a guess: a quoted comment may hold something that reads as an address,
    an unusual form may be missed. What parse() asked its mover for is the truth
    (remap.Remapper.complete)."""
    out = set()
    for v in _ADDR_OPT.findall(text):
        if v.startswith("["):          # [v6addr]:port
            v = v[1:].partition("]")[0]
        elif version == 4:
            v = v.partition(":")[0]    # addr:port
        out.add(v)
    for line in (ipsets or "").splitlines():
        toks = line.split(None, 3)
        if len(toks) >= 3 and toks[0] in ("add", "-A"):
            out.add(toks[2].partition(",")[0])
    return out


class _Parser:
    def __init__(self, source: str, version: int, ipsets: str | None, ipsets_source: str,
                 mover: Mover | None = None):
        if version not in (4, 6):
            raise RuleSetError(f"{source}: IP version must be 4 or 6, got {version}")
        self.source, self.version = source, version
        self.family = "ip" if version == 4 else "ip6"
        self.mover = mover
        self.ipsets = _IpsetDefs(ipsets, ipsets_source, version, mover) if ipsets else None
        self.tables: list[Table] = []
        self.ids: dict[str, int] = {}   # rule id -> line
        self.notes: list[str] = []
        self.counts = False   # a rule's packet or byte count was not 0 (not kept)
        # Saved by iptables-nft, which holds -m limit as nft's limit, the rate as
        # printed; legacy holds a period (see _rate).
        self.native = False
        # Coverage: refused rules as (where, why), the rest of the file read on.
        self.refused: list[tuple[str, str]] | None = None
        self.ranges = 0                   # iprange sets made so far
        self._prefix_cache: dict[str, Prefix] = {}
        self._ports_cache: dict[tuple[str, bool, bool], Ports] = {}
        self._iface_cache: dict[str, Iface] = {}
        self._ct_cache: dict[tuple[str, bool], frozenset[str]] = {}
        self.table: str | None = None     # the table being read, between *NAME and COMMIT
        self.done: set[str] = set()       # tables already committed
        # per table, reset by _open:
        self.chains: dict[str, list] = {}  # name -> [policy or None, rules]
        self.jumps: list[tuple[str, str, int]] = []   # (from, to, line)
        self.n = 0
        self.table_sets: dict[str, Set] = {}
        # Rules the model cannot hold, in chains that may be reached from OUTPUT
        # alone: (chain, line, what). At COMMIT they are refused if a packet the
        # firewall forwards or receives can reach them, else set aside.
        self.pending: list[tuple[str, int, str]] = []

    # --- lines ---------------------------------------------------------------

    def run(self, text: str) -> RuleSet:
        # The parser makes no reference cycles; the collector would walk the
        # growing heap again and again (a third of the time at 100,000 rules).
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(text)
        finally:
            if was_enabled:
                gc.enable()

    def _run(self, text: str) -> RuleSet:
        lineno = 0
        try:
            for lineno, line in enumerate(text.splitlines(), 1):
                line = line.strip()
                if not line or line[0] == "#":
                    if "(nf_tables)" in line:   # "# Generated by iptables-nft-save ..."
                        self.native = True
                    continue
                c = line[0]
                if c == "-" or c == "[":
                    if self.refused is None:
                        self._rule(line, lineno)
                    else:
                        self._rule_or_refusal(line, lineno)
                elif c == ":":
                    self._chain(line)
                elif c == "*":
                    self._open(line[1:].strip())
                elif line == "COMMIT":
                    self._commit()
                else:
                    raise _Fail(self._not_rules(line))
        except _Fail as e:
            raise RuleSetError(f"{self.source}:{e.line or lineno}: {e}") from None
        except RuleSetError as e:
            raise RuleSetError(f"{self.source}:{lineno}: {e}") from None
        if self.table is not None:
            raise RuleSetError(f"{self.source}:{lineno}: table {self.table} has no COMMIT")
        if not self.done:
            raise RuleSetError(f"{self.source}: not an iptables-save rule set (no *table)")
        rules = sum(len(c.rules) for t in self.tables for c in t.chains)
        if self.counts:
            self.notes.append(f"{self.source}: rules' packet and byte counts not kept (a "
                              f"run counts from zero)")
        if self.ipsets is not None:
            self.notes += self.ipsets.notes
        # No validate() here: every rule was checked as it was read (ids, jumps,
        # loops, sets), with its line, and validate() alone takes 0.7 s per
        # 100,000 rules; load_file() validates the finished rule set once.
        src = self.source
        return RuleSet(src, tuple(self.tables), size=rules, ipt_prefix="",
                       notes=tuple(self.notes),
                       origins=tuple((rid, f"{src}:{ln}") for rid, ln in self.ids.items()))

    def _rule_or_refusal(self, line: str, lineno: int) -> None:
        """A rule, or (coverage) its refusal recorded and the rule left out."""
        try:
            self._rule(line, lineno)
        except _Fail as e:
            self.refused.append((f"{self.source}:{e.line or lineno}", str(e)))
        except RuleSetError as e:
            self.refused.append((f"{self.source}:{lineno}", str(e)))

    def _not_rules(self, line: str) -> str:
        if self.table is None and not self.done:
            return "not an iptables-save rule set"
        return f"syntax error: {line[:40]!r}"

    def _open(self, name: str) -> None:
        if self.table is not None:
            raise _Fail(f"*{name} before COMMIT of table {self.table}")
        if name not in BUILTIN:
            raise _Fail(f"unknown table {name!r}")
        if name in self.done:
            raise _Fail(f"table {name} appears twice")
        self.table = name
        self.chains, self.jumps, self.n, self.table_sets = {}, [], 0, {}
        self.pending = []

    def _chain(self, line: str) -> None:
        if self.table is None:
            raise _Fail("a chain outside a table")
        parts = line[1:].split()
        if len(parts) < 2:
            raise _Fail(f"syntax error: {line!r}")
        name, policy = parts[0], parts[1]
        if parts[2:] and parts[2] != "[0:0]":
            self.counts = True   # the policy's count, as a rule's
        if name in self.chains:
            raise _Fail(f"chain {name} declared twice")
        builtin = name in BUILTIN[self.table]
        if builtin:
            if policy not in ("ACCEPT", "DROP"):
                raise _Fail(f"built-in chain {name} needs policy ACCEPT or DROP, "
                            f"got {policy}")
        elif policy != "-":
            raise _Fail(f"user chain {name} cannot have policy {policy}")
        self.chains[name] = [policy.lower() if builtin else None, []]

    def _commit(self) -> None:
        if self.table is None:
            raise _Fail("COMMIT outside a table")
        self._validate_loops()
        self._set_aside_output()
        chains, empty = [], []
        for name, (policy, rules) in self.chains.items():
            if name in BUILTIN[self.table]:
                if not rules and policy == "accept":
                    empty.append(name)
                    continue
                hook = name.lower()
                prio = _NAT_PRIORITY[name] if self.table == "nat" \
                    else _TABLE_PRIORITY[self.table]
                chains.append(Chain(name, tuple(rules), hook=hook, priority=prio,
                                    type="nat" if self.table == "nat" else "filter",
                                    policy=policy))
            else:
                chains.append(Chain(name, tuple(rules)))
        if empty:
            self.notes.append(f"table {self.table}: empty chains with policy ACCEPT left "
                              f"out: {', '.join(empty)}")
        if chains:
            self.tables.append(Table(self.family, self.table, tuple(chains),
                                     tuple(self.table_sets.values())))
        self.done.add(self.table)
        self.table = None

    def _set_aside_output(self) -> None:
        """The pending rules (unsupported, in chains OUTPUT may reach) are refused
        when a forwarded packet or one addressed to the firewall can reach them;
        else only the firewall's own packets can, which the testbed never judges
        (it sends packets through the firewall and to it, never from it), so the
        rules are set aside with a note."""
        if not self.pending:
            return
        edges: dict[str, set[str]] = {}
        for src, dst, _ in self.jumps:
            edges.setdefault(src, set()).add(dst)
        seen = {c for c in BUILTIN[self.table] if c != "OUTPUT" and c in self.chains}
        todo = list(seen)
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        for chain, line, what in self.pending:
            if chain in seen:
                raise _Fail(what, line)
            self.notes.append(f"{self.source}:{line}: rule set aside, only the firewall's "
                              f"own packets reach chain {chain}: {what}")

    def _validate_loops(self) -> None:
        """A jump loop, named with the line of the jump that closes it. Iterative:
        a generated file may chain thousands of user chains one after another."""
        edges: dict[str, list[tuple[str, int]]] = {}
        for src, dst, line in self.jumps:
            edges.setdefault(src, []).append((dst, line))
        state: dict[str, int] = {}   # 1: on the current path, 2: done
        for start in self.chains:
            if start in state:
                continue
            path, todo = [start], [iter(edges.get(start, ()))]
            state[start] = 1
            while todo:
                step = next(todo[-1], None)
                if step is None:
                    state[path.pop()] = 2
                    todo.pop()
                    continue
                nxt, line = step
                if state.get(nxt) == 1:
                    loop = path[path.index(nxt):] + [nxt]
                    if len(loop) > 8:
                        loop[3:-3] = [f"... ({len(loop) - 6} more)"]
                    raise _Fail(f"jump loop {' -> '.join(loop)}", line)
                if nxt not in state:
                    state[nxt] = 1
                    path.append(nxt)
                    todo.append(iter(edges.get(nxt, ())))

    # --- one rule ------------------------------------------------------------

    def _rule(self, line: str, lineno: int) -> None:
        if self.table is None:
            raise _Fail("a rule outside a table")
        if line[0] == "[":
            end = line.find("]")
            if end < 0:
                raise _Fail("syntax error: unclosed counters")
            if line[1:end] != "0:0":
                self.counts = True   # the old kernel's counts, not policy
            line = line[end + 1:]
        toks = _split(line) if '"' in line or "'" in line else line.split()
        if toks and toks[0] in _FAMILY_OPTS:
            # `-4 -A CHAIN ...`: the family option may come first, as any option may.
            toks = toks[1:3] + toks[:1] + toks[3:]
        if len(toks) < 2 or toks[0] not in ("-A", "--append"):
            raise _Fail(f"syntax error: expected -A CHAIN, got {line[:40]!r}")
        chain = toks[1]
        entry = self.chains.get(chain)
        if entry is None:
            raise _Fail(f"-A to undeclared chain {chain}")
        try:
            rule = self._options(toks, lineno, chain)
        except IndexError:
            raise _Fail(f"{toks[-1]} needs a value") from None
        except _Skip:
            return
        except _Aside as e:
            self.n += 1
            self.notes.append(f"{self.source}:{lineno}: rule set aside: {e}")
            return
        except _Fail as e:
            if not str(e).startswith("unsupported") or chain in BUILTIN[self.table] \
                    and chain != "OUTPUT":
                raise
            self.n += 1
            self.pending.append((chain, lineno, str(e)))
            return
        entry[1].append(rule)

    def _options(self, toks: list[str], lineno: int, chain: str) -> Rule:
        kw: dict = {}
        mods: set[str] = set()
        proto = rid = comment = action = None
        sets: list[SetRef] = []
        limit_rate = limit_burst = None
        module = None   # the latest -m: mark and connmark share --mark
        nth: dict[str, int] = {}
        hashlimit: dict[str, str] = {}
        # The options of -m owner, cgroup and string, read after the loop: negated?
        gathered: list[tuple[str, bool]] = []
        quota = None
        neg = False
        i, n = 2, len(toks)
        opts_get, prefixes, ifaces = _OPTS.get, self._prefix_cache, self._iface_cache
        while i < n:
            t = toks[i]
            code = opts_get(t)
            if code is None:
                raise _Fail(f"unsupported option {t}")
            if code == "!":
                neg = True
                i += 1
                continue
            if quota is not None and code not in _AFTER_QUOTA and \
                    not (code == "mod" and toks[i + 1] == "comment"):
                # The quota counts every packet that reaches it: a match after it
                # would refuse packets it has already counted, which the model's
                # one quota per rule, checked last, does not say.
                raise _Fail(f"unsupported: {t} after -m quota")
            if code in _NO_VALUE:
                i += 1
                if code == "gather-flag":
                    gathered.append((t, neg))
                else:
                    self._flag_option(code, neg, proto, kw)
                neg = False
                continue
            v = toks[i + 1]
            if v == "!" and t in _OLD_NEGATION:
                # the old form, `-s ! ADDR`
                neg, v = True, toks[i + 2]
                i += 1
            i += 2
            # Most frequent first: this loop is the parser's hot path.
            if code == "mod":
                if v in _HEADER_ONLY and self.version == 6:
                    raise _Aside(f"-m {v} matches only packets with {_HEADER_ONLY[v]}, "
                                 f"which the testbed never sends")
                if v not in _MODULES:
                    raise _Fail(f"unsupported match -m {v}")
                if neg:
                    raise _Fail(f"syntax error: ! before -m {v}")
                mods.add(v)
                module = v
            elif code == "src" or code == "dst":
                p = prefixes.get(v) or self._addr(v)
                kw[code] = Prefix(p.net, True) if neg else p
            elif code == "iif" or code == "oif":
                f = ifaces.get(v) if not neg else None
                if f is None:
                    f = Iface(self.mover.iface(v) if self.mover else v, neg)
                    if not neg:
                        ifaces[v] = f
                kw[code] = f
            elif code == "proto":
                if neg:
                    raise _Fail(f"unsupported: negated protocol ! -p {v}")
                pl = v.lower()
                if pl not in _PROTOS:
                    why = REFUSED_PROTOS.get(pl)
                    raise _Fail(f"unsupported protocol -p {v}" + (f": {why}" if why else ""))
                proto = _PROTOS[pl]
                if proto == ("icmpv6" if self.version == 4 else "icmp"):
                    raise _Fail(f"-p {v} in an IPv{self.version} rule set")
                if proto == "ah" and self.version == 6:
                    raise _Fail(f"unsupported: -p {v} in an IPv6 rule set (AH is an "
                                f"extension header there, which -p skips)")
                if proto:
                    kw["proto"] = proto
            elif code == "jump" or code == "goto":
                if neg:
                    raise _Fail(f"syntax error: ! before {t}")
                action = self._target(code, t, v, toks, i, chain, lineno)
                break   # the target's options end the line
            elif code == "dport" or code == "sport":
                if not ("tcp" in mods or "udp" in mods or proto == "tcp" or proto == "udp"):
                    raise _Fail(f"{t} needs -p tcp or -p udp")
                kw[code] = self._ports(v, neg, True)
            elif code == "mdport" or code == "msport":
                if "multiport" not in mods:
                    raise _Fail(f"{t} needs -m multiport")
                kw[code[1:]] = self._ports(v, neg, False)
            elif code == "ctstate" or code == "state":
                need = "conntrack" if code == "ctstate" else "state"
                if need not in mods:
                    raise _Fail(f"{t} needs -m {need}")
                # conntrack's virtual states DNAT and SNAT are rare: look only then.
                nat = {x.lower() for x in v.split(",")} & {"dnat", "snat"} \
                    if "nat" in v.lower() else None
                if nat:
                    # conntrack's virtual states: the connection's NAT status. The
                    # states' mask holds if any bit does: a list of real and virtual
                    # states is an `or` the model holds only negated (none of them:
                    # kubelet's `! --ctstate RELATED,ESTABLISHED,DNAT`).
                    real = [x for x in v.split(",") if x.lower() not in nat]
                    if real and not neg:
                        raise _Fail(f"unsupported: {t} {v} (DNAT or SNAT with other "
                                    f"states, not negated)")
                    if real:
                        kw["ct_state"] = self._ct(",".join(real), True)
                    kw["ct_status"] = frozenset(nat)
                    kw["ct_status_negate"] = neg
                else:
                    kw["ct_state"] = self._ct(v, neg)
            elif code == "comment":
                if "comment" not in mods:
                    raise _Fail("--comment needs -m comment")
                if neg:
                    raise _Fail("syntax error: ! before --comment")
                if v.startswith(ID_TAG):
                    if rid is not None:
                        raise _Fail("two fwb: id comments")
                    rid = v[len(ID_TAG):]
                    if not rid:
                        raise _Fail("an empty fwb: id")
                else:
                    comment = v if comment is None else f"{comment}; {v}"
            elif code == "mark" and module == "connmark":
                kw["ct_mark"] = _mark(v)
                kw["ct_mark_negate"] = neg
            elif code == "mark":
                if "mark" not in mods:
                    raise _Fail("--mark needs -m mark")
                kw["mark"] = _mark(v)
                kw["mark_negate"] = neg
            elif code == "match-set":
                if "set" not in mods:
                    raise _Fail("--match-set needs -m set")
                sets.append(self._set_ref(v, toks[i], neg))
                i += 1
            elif code == "limit" or code == "limit-burst":
                if "limit" not in mods:
                    raise _Fail(f"{t} needs -m limit")
                if neg:
                    raise _Fail(f"unsupported: negated {t}")
                if code == "limit":
                    limit_rate = _rate(v, self.native)
                else:
                    limit_burst = _int(v, t)
                    if not 0 < limit_burst <= _LIMIT_BURST_MAX:
                        raise _Fail(f"{t} {v}: iptables takes 1 to {_LIMIT_BURST_MAX}")
            elif code == "icmp" or code == "icmpv6":
                want = code
                if not (("icmp6" if code == "icmpv6" else "icmp") in mods or proto == want):
                    raise _Fail(f"{t} needs -p {want}")
                if neg:
                    raise _Fail(f"unsupported: negated {t}")
                if proto is not None and proto != want:
                    raise _Fail(f"{t} does not go with -p {proto}")
                typ, icmp_code = _icmp_type(v, 6 if code == "icmpv6" else 4)
                if typ is not None:
                    kw["icmp_type"] = typ
                if icmp_code is not None:
                    kw["icmp_code"] = icmp_code
                kw["proto"] = want
            elif code in ("stat-mode", "probability", "every", "packet"):
                if "statistic" not in mods:
                    raise _Fail(f"{t} needs -m statistic")
                if code == "stat-mode" and v not in ("random", "nth"):
                    raise _Fail(f"unsupported: -m statistic --mode {v}")
                if code == "probability":
                    kw["random"] = _probability(v, neg)
                elif code != "stat-mode":
                    if neg:
                        raise _Fail(f"unsupported: negated {t}")
                    nth[code] = _int(v, t)
            elif code == "srcrange" or code == "dstrange":
                if "iprange" not in mods:
                    raise _Fail(f"{t} needs -m iprange")
                self._range(kw, sets, "saddr" if code == "srcrange" else "daddr", v, neg,
                            lineno)
            elif code == "ipsec-spi":
                proto_name = "esp" if t == "--espspi" else "ah"
                if proto_name not in mods or proto != proto_name:
                    raise _Fail(f"{t} needs -p {proto_name} -m {proto_name}")
                if self.version == 6 and proto_name == "ah":
                    raise _Fail("unsupported: -m ah in an IPv6 rule set (AH is an "
                                "extension header there)")
                lo, sep, hi = v.partition(":")
                lo_i = _int(lo or "0", t)
                hi_i = _int(hi or "4294967295", t) if sep else lo_i
                if not 0 <= lo_i <= hi_i <= 0xFFFFFFFF:
                    raise _Fail(f"{t} {v}: a range of 32-bit SPIs")
                kw["attrs"] = kw.get("attrs", ()) + (
                    Attr(f"{proto_name} spi", ((lo_i, hi_i),), neg),)
            elif code == "gather":
                gathered.append((t, neg))
            elif code == "hashlimit":
                if "hashlimit" not in mods:
                    raise _Fail(f"{t} needs -m hashlimit")
                if neg:
                    raise _Fail(f"unsupported: negated {t}")
                hashlimit[t] = v
            elif code == "quota":
                if "quota" not in mods:
                    raise _Fail("--quota needs -m quota")
                quota = Quota(_int(v, t), over=neg)
            elif code == "counters":
                i += 1  # -c PACKETS BYTES: the old kernel's counts, not policy
                if v != "0" or toks[i - 1] != "0":
                    self.counts = True
            else:
                i = self._everyday_option(code, t, v, neg, mods, proto, kw, toks, i)
            neg = False
        if gathered or hashlimit or nth or mods & _RARE_MODULES:
            if "string" in mods:
                _string_match(gathered)
            if "owner" in mods or "cgroup" in mods:
                _socket_match(mods, gathered)
            if nth:
                kw["nth"] = _nth(nth)
            if hashlimit or "hashlimit" in mods:
                kw["hashlimit"] = _hashlimit(hashlimit, self.version)
        if limit_rate is not None or limit_burst is not None:
            rate, per = limit_rate or (3, "hour")
            kw["limit"] = Limit(rate, per, 5 if limit_burst is None else limit_burst)
        if sets:
            kw["sets"] = tuple(sets)
        if quota is not None:
            kw["quota"] = quota
        if ("sport" in kw or "dport" in kw) and proto != "tcp" and proto != "udp":
            raise _Fail("a port match needs -p tcp or -p udp")
        self.n += 1
        if rid is None:
            rid = f"{self.table}-{self.n}"
        prev = self.ids.get(rid)
        if prev is not None:
            raise _Fail(f"rule id {rid!r} already used on line {prev}")
        self.ids[rid] = lineno
        return evolve(RULE, {"id": rid, "match": evolve(EMPTY_MATCH, kw) if kw else EMPTY_MATCH,
                             "action": action if action is not None else _COUNTER,
                             "comment": comment})

    def _flag_option(self, code: str, neg: bool, proto: str | None, kw: dict) -> None:
        """An option without a value: --syn, -4, -6, -f, --limit-iface-in/out."""
        if code == "limit-iface":
            raise _Fail("unsupported: -m addrtype --limit-iface-in/out (address types "
                        "on one interface)")
        if code == "only4" or code == "only6":
            if neg:
                raise _Fail(f"syntax error: ! before -{code[-1]}")
            if (code == "only4") != (self.version == 4):
                raise _Skip()
        elif code == "fragment":
            if neg:
                raise _Fail("unsupported match ! -f (every packet but non-first fragments)")
            raise _Aside("-f matches only non-first fragments, which the testbed never sends")
        else:   # --syn: SYN set, ACK, RST and FIN clear
            if proto != "tcp":
                raise _Fail("--syn needs -p tcp")
            if "tcp_flags" in kw:
                raise _Fail("--syn and --tcp-flags in one rule")
            kw["tcp_flags"] = TcpFlags(0x17, frozenset({0x02}), neg)

    def _everyday_option(self, code: str, t: str, v: str, neg: bool, mods: set[str],
                         proto: str | None, kw: dict, toks: list[str], i: int) -> int:
        """The options of tcp's flags, addrtype, pkttype, ttl, hl and length;
        returns where the next option starts."""
        if code == "tcp-flags":
            if proto != "tcp":
                raise _Fail("--tcp-flags needs -p tcp")
            if "tcp_flags" in kw:
                raise _Fail("--syn and --tcp-flags in one rule")
            mask, comp = _tcp_flags(v), _tcp_flags(toks[i])
            kw["tcp_flags"] = TcpFlags(mask, frozenset({comp & mask}), neg)
            return i + 1
        if code == "tcp-option":
            if proto != "tcp" or "tcp" not in mods:
                raise _Fail("--tcp-option needs -p tcp -m tcp")
            kind = _int(v, t)
            if not 0 <= kind <= 255:
                raise _Fail(f"--tcp-option {v}: a TCP option kind is 0 to 255")
            kw["tcp_options"] = kw.get("tcp_options", ()) + (TcpOption(kind, negate=neg),)
            return i
        if code in ("src-type", "dst-type"):
            if "addrtype" not in mods:
                raise _Fail(f"{t} needs -m addrtype")
            if self.version == 6:
                raise _Fail("unsupported: -m addrtype in an IPv6 rule set (IPv6 address "
                            "types are not modelled)")
            types = frozenset(x.lower() for x in v.split(","))
            bad = sorted(types - set(ADDR_TYPES))
            if bad:
                raise _Fail(f"{t}: unknown address type {bad[0].upper()}")
            have = kw.get("addrtype") or AddrType()
            side = code[:3]
            kw["addrtype"] = AddrType(**{**have.__dict__, side: types, f"{side}_negate": neg})
            return i
        if code == "pkt-type":
            if "pkttype" not in mods:
                raise _Fail("--pkt-type needs -m pkttype")
            if v.lower() not in _PKT_TYPES:
                raise _Fail(f"--pkt-type: unknown packet type {v!r}")
            kw["pkttype"] = frozenset({_PKT_TYPES[v.lower()]})
            kw["pkttype_negate"] = neg
            return i
        if code == "length":
            if "length" not in mods:
                raise _Fail("--length needs -m length")
            lo, sep, hi = v.partition(":")
            a = _int(lo, t) if lo else 0
            b = (_int(hi, t) if hi else 65535) if sep else a
            if not 0 <= a <= b <= 65535:
                raise _Fail(f"bad length range {v}")
            kw["length"] = Range(a, b, neg)
            return i
        # --ttl-eq/gt/lt, --hl-eq/gt/lt
        mod, op = code.split("-")
        if mod not in mods:
            raise _Fail(f"{t} needs -m {mod}")
        if (mod == "ttl") != (self.version == 4):
            raise _Fail(f"-m {mod} in an IPv{self.version} rule set")
        n = _int(v, t)
        lo, hi = {"eq": (n, n), "gt": (n + 1, 255), "lt": (0, n - 1)}[op]
        if not 0 <= lo <= hi <= 255:
            raise _Fail(f"unsupported: {t} {v} (matches no packet)")
        if "ttl" in kw:
            raise _Fail(f"two {mod} matches in one rule")
        kw["ttl"] = Range(lo, hi, neg)
        return i

    # --- values --------------------------------------------------------------

    def _addr(self, v: str) -> Prefix:
        p = self._prefix_cache.get(v)
        if p is None and self.mover:
            net = self.mover.prefix(v)   # one step for the addresses it planned for
            if net is not None and (":" in net) == (self.version == 6):
                p = self._prefix_cache[v] = Prefix(net)
                return p
        if p is None:
            net = canonical4(v) if self.version == 4 else None
            if net:
                p = Prefix(net)
            else:
                p = Prefix.of(v)
                if p.version != self.version:
                    raise _Fail(f"IPv{p.version} address {v} in an IPv{self.version} "
                                f"rule set")
            if self.mover:
                p = Prefix(self.mover.addr(p.net))
            self._prefix_cache[v] = p
        return p

    def _range(self, kw: dict, sets: list[SetRef], field: str, v: str, neg: bool,
               lineno: int) -> None:
        """`-m iprange --src-range A-B` (or --dst-range): the prefix it is, or an
        interval set of the prefixes that cover it exactly, named `iprangeN` (as
        nft's anonymous sets become named ones). networks() does not see ranges,
        so load_file() moves such a file after parsing (remap), which moves an
        interval set's adjacent prefixes as one block: a range stays a range."""
        lo_text, _, hi_text = v.partition("-")
        try:
            lo, hi = ipaddress.ip_address(lo_text), ipaddress.ip_address(hi_text or lo_text)
        except ValueError:
            raise _Fail(f"not an address range: {v!r}") from None
        if lo.version != self.version or hi.version != self.version:
            raise _Fail(f"not an IPv{self.version} address range: {v}")
        if hi < lo:
            raise _Fail(f"an empty address range {v}")
        nets = [self._addr(str(n)).net
                for n in ipaddress.summarize_address_range(lo, hi)]
        key = "src" if field == "saddr" else "dst"
        if len(nets) == 1 and key not in kw:
            kw[key] = Prefix(nets[0], neg)
            return
        elements = tuple((n.removesuffix("/32") if self.version == 4
                          else n.removesuffix("/128"),) for n in nets)
        # One name space for all tables: the iptables backends load sets into ipset.
        taken = set(self.ipsets.creates if self.ipsets else ())
        self.ranges += 1
        while f"iprange{self.ranges}" in taken:
            self.ranges += 1
        name = f"iprange{self.ranges}"
        self.table_sets[name] = Set(name, ("addr",), elements, self.version, True)
        self.notes.append(f"{self.source}:{lineno}: address range {v} became set {name}")
        sets.append(SetRef(name, (field,), neg))

    def _ports(self, v: str, neg: bool, single: bool) -> Ports:
        key = (v, neg, single)
        p = self._ports_cache.get(key)
        if p is None:
            ranges = []
            for item in ([v] if single else v.split(",")):
                lo, sep, hi = item.partition(":")
                try:
                    a = int(lo) if lo else 0
                    b = (int(hi) if hi else 65535) if sep else a
                except ValueError:
                    raise _Fail(f"not a port: {item!r}") from None
                if not 0 <= a <= b <= 65535:
                    raise _Fail(f"bad port range {item}")
                ranges.append((a, b))
            p = self._ports_cache[key] = Ports(tuple(ranges), neg)
        return p

    def _ct(self, v: str, neg: bool) -> frozenset[str]:
        key = (v, neg)
        s = self._ct_cache.get(key)
        if s is None:
            s = self._ct_cache[key] = _ct_states(v, neg)
        return s

    def _set_ref(self, name: str, flags: str, neg: bool) -> SetRef:
        if self.ipsets is None:
            raise _Fail(f"-m set --match-set {name}: no ipset definitions given")
        s = self.table_sets.get(name) or self.ipsets.get(name)
        if s is None:
            raise _Fail(f"-m set --match-set {name}: no such set in {self.ipsets.source}")
        self.table_sets[name] = s
        dirs = flags.split(",")
        dims = len(s.keys) - ("proto" in s.keys)
        if len(dirs) != dims or any(d not in ("src", "dst") for d in dirs):
            raise _Fail(f"-m set --match-set {name} {flags}: set {name} has {dims} "
                        f"dimension{'s' * (dims > 1)}, give src or dst for each")
        fields, it = [], iter(dirs)
        for k in s.keys:
            if k == "addr":
                fields.append("saddr" if next(it) == "src" else "daddr")
            elif k == "proto":
                fields.append("proto")
            else:
                fields.append("sport" if next(it) == "src" else "dport")
        return SetRef(name, tuple(fields), neg)

    def _target(self, code: str, opt: str, target: str, toks: list[str], i: int,
                chain: str, lineno: int) -> Action:
        """The action of `-j TARGET [options]` or `-g CHAIN`; toks[i:] are the
        target's options."""
        n = len(toks)
        simple = _SIMPLE.get(target)
        if simple is not None and i == n:
            return simple
        if code == "goto" or (target not in _TARGETS and target not in _OTHER_TARGETS):
            if i != n:
                raise _Fail(f"{opt} {target}: unexpected {toks[i]!r} after the target")
            if target not in self.chains:
                raise _Fail(f"{opt} {target}: jump to a missing chain")
            if target in BUILTIN[self.table]:
                raise _Fail(f"{opt} {target}: jump to a built-in chain")
            self.jumps.append((chain, target, lineno))
            return Action(code, chain=target)
        if target in _OTHER_TARGETS:
            raise _Fail(f"unsupported target -j {target}")
        opts: dict[str, str | None] = {}
        while i < n:
            o = toks[i]
            if o in _FLAG_OPTS:
                opts[o] = None
                i += 1
            elif o.startswith("--") and i + 1 < n:
                if o in opts:
                    raise _Fail(f"-j {target}: {o} given twice")
                opts[o] = toks[i + 1]
                i += 2
            else:
                raise _Fail(f"-j {target}: unexpected {o!r} after the target")
        if target == "LOG":
            for o in opts:
                if o not in _LOG_OPTS:
                    raise _Fail(f"unsupported option {o} of -j LOG")
            prefix = opts.pop("--log-prefix", None)
            if opts:
                self.notes.append(f"{self.source}:{lineno}: LOG {' '.join(sorted(opts))} "
                                  f"ignored (only the prefix is kept)")
            return Action("log", log_prefix=prefix)
        if target == "NFLOG":
            # Decides no verdict: the rule stays, counting the packets it logged.
            for o in opts:
                if o not in _NFLOG_OPTS:
                    raise _Fail(f"unsupported option {o} of -j NFLOG")
            self.notes.append(f"{self.source}:{lineno}: -j NFLOG left out (the rule "
                              f"only counts; no verdict depends on it)")
            return _COUNTER
        if target == "MARK":
            return _mark_target(opts)
        if target == "CONNMARK":
            return _connmark_target(opts)
        allowed = _TARGET_OPTS.get(target, ())
        for o in opts:
            if o not in allowed:
                raise _Fail(f"unsupported option {o} of -j {target}")
        if target == "TCPMSS":
            if ("--set-mss" in opts) == ("--clamp-mss-to-pmtu" in opts):
                raise _Fail("-j TCPMSS needs one of --set-mss, --clamp-mss-to-pmtu")
            mss = opts.get("--set-mss")
            return Action("tcpmss", mss=None if mss is None else _int(mss, "--set-mss"))
        if target == "CHECKSUM":
            if "--checksum-fill" not in opts:
                raise _Fail("-j CHECKSUM needs --checksum-fill")
            return Action("checksum")
        if target == "REJECT":
            given = opts.get("--reject-with")
            with_ = _REJECT_WITH[self.version].get(given) if given else \
                _REJECT_DEFAULT[self.version]
            if with_ is None:
                raise _Fail(f"unsupported: -j REJECT --reject-with {given} in an "
                            f"IPv{self.version} rule set")
            return Action("reject", reject_with=with_)
        if target == "CT":
            if "--notrack" not in opts:
                raise _Fail("unsupported: -j CT without --notrack")
            return Action("notrack")
        if target in _NAT_TARGETS and self.table != "nat":
            raise _Fail(f"-j {target} outside the nat table")
        if target in ("DNAT", "SNAT"):
            key = allowed[0]
            if key not in opts:
                raise _Fail(f"-j {target} without {key}")
            addr, port, port_hi = self._nat_to(opts[key] or "", target)
            return Action(target.lower(), addr=addr, port=port, port_hi=port_hi)
        if target == "MASQUERADE" or target == "REDIRECT":
            ports = opts.get("--to-ports")
            if ports is None:
                if target == "REDIRECT":
                    return Action("redirect")
                return _MASQUERADE_FULLY_RANDOM if "--random-fully" in opts else _MASQUERADE
            lo, _, hi = ports.partition("-")
            if not lo.isdigit() or hi and (target == "REDIRECT" or not hi.isdigit()):
                raise _Fail(f"unsupported: -j {target} --to-ports {ports} (one port"
                            f"{'' if target == 'REDIRECT' else ', or a range'})")
            p, q = int(lo), int(hi or lo)
            if not 0 < p <= q < 65536:
                raise _Fail(f"bad port {ports}")
            # One port: --random-fully has no other to choose.
            return Action(target.lower(), port=p, port_hi=q if q > p else None,
                          random_port=q > p and "--random-fully" in opts)
        return _SIMPLE[target]   # with no options, as checked above

    def _nat_to(self, v: str, target: str) -> tuple[str, int | None, int | None]:
        """ADDR[:PORT[-PORT]]: the address, the port, and (SNAT's source port
        range) its last port."""
        if self.version == 6 and v.startswith("["):
            host, _, rest = v[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else None
            if rest and port is None:
                raise _Fail(f"not an address[:port]: {v!r}")
        elif self.version == 6:
            host, port = v, None
        else:
            host, _, port = v.partition(":")
            port = port or None
        if "-" in host:
            raise _Fail(f"unsupported: an address range in NAT ({v})")
        last = None
        if port is not None and "-" in port:
            if target != "SNAT":
                raise _Fail(f"unsupported: a port range in {target} ({v}; the port a "
                            f"connection gets is the kernel's pick)")
            port, _, last = port.partition("-")
        try:
            a = ipaddress.ip_address(host)
        except ValueError:
            raise _Fail(f"not an address: {host!r}") from None
        if a.version != self.version:
            raise _Fail(f"IPv{a.version} address {host} in an IPv{self.version} rule set")
        p = _int(port, "port") if port is not None else None
        q = _int(last, "port") if last is not None else p
        if p is not None and not 0 < p <= q < 65536:
            raise _Fail(f"bad port {port}" + (f"-{last}" if last else ""))
        return (self.mover.addr(str(a)) if self.mover else str(a), p,
                q if q is not None and q != p else None)


# --- helpers without state -------------------------------------------------------

def _split(line: str) -> list[str]:
    """A line with quotes into words. iptables-save quotes with double quotes and
    escapes with backslashes; lines without backslashes or single quotes (nearly
    all) are split here, the rest by shlex, ten times slower."""
    if "\\" not in line and "'" not in line:
        # The common case, one quoted comment: three splits, no loop.
        pre, _, rest = line.partition('"')
        word, closed, post = rest.partition('"')
        if closed and '"' not in post and pre[-1:] == " " and post[:1] in (" ", ""):
            toks = pre.split()
            toks.append(word)
            toks += post.split()
            return toks
        parts = line.split('"')
        if len(parts) % 2 == 1:
            toks: list[str] = []
            last = len(parts) - 1
            for k, seg in enumerate(parts):
                if k % 2:
                    toks.append(seg)
                    continue
                # a quote glued to a word: let shlex join them
                if k and not (seg[:1].isspace() or (k == last and not seg)):
                    break
                if k < last and not seg[-1:].isspace():
                    break
                toks.extend(seg.split())
            else:
                return toks
    try:
        return shlex.split(line)
    except ValueError as e:
        raise _Fail(f"syntax error: {e}") from None


def canonical4(v: str, _pton=socket.inet_pton, _ntop=socket.inet_ntop,
            _af=socket.AF_INET) -> str | None:
    """The canonical network text of an IPv4 `a.b.c.d[/len]`, or None to leave
    it to the ipaddress module (five times slower). The nft importer uses it too."""
    addr, sep, plen = v.partition("/")
    try:
        packed = _pton(_af, addr)
    except OSError:
        return None
    if not sep or plen == "32":
        return _ntop(_af, packed) + "/32"
    if not plen.isdigit() or int(plen) > 32:
        return None
    n = int(plen)
    x = int.from_bytes(packed, "big") & ((0xFFFFFFFF << (32 - n)) & 0xFFFFFFFF)
    return f"{_ntop(_af, x.to_bytes(4, 'big'))}/{n}"


def _int(v: str, what: str) -> int:
    try:
        return int(v, 0)
    except ValueError:
        raise _Fail(f"{what}: not a number: {v!r}") from None


def _nth(given: dict[str, int]) -> tuple[int, int]:
    """`--every N --packet P` as the model's (every, phase): the kernel's counter
    starts at P and matches when it wraps to 0, so first at the (N - P)-th packet."""
    every, packet = given.get("every"), given.get("packet", 0)
    if every is None:
        raise _Fail("--packet needs --every")
    if every < 2 or not 0 <= packet < every:
        raise _Fail(f"unsupported: --every {every} --packet {packet} (a rule that always "
                    f"matches, or a packet past every)")
    return every, (every - packet) % every


def _probability(v: str, neg: bool) -> int:
    """`--probability P` as the model's numerator over 2**32: libxt_statistic keeps
    lround(P * 2**31), which the kernel compares with a random u32's low 31 bits
    (`!` inverts the outcome); save prints it back with 11 decimals, which read
    back to the same threshold."""
    try:
        p = float(v)
    except ValueError:
        raise _Fail(f"--probability: not a number: {v!r}") from None
    if not 0 <= p <= 1:
        raise _Fail(f"--probability {v}: must be between 0 and 1")
    x = p * 0x80000000             # exact: a power of two
    t = math.floor(x)
    t += x - t >= 0.5              # lround: halves away from zero
    if not 0 < t < 0x80000000:
        raise _Fail(f"unsupported: --probability {v}, a rule that always or never "
                    f"matches")
    return RANDOM_SCALE - 2 * t if neg else 2 * t


def _mark(v: str) -> tuple[int, int]:
    val, _, mask = v.partition("/")
    m = _int(mask, "mark mask") if mask else 0xFFFFFFFF
    value = _int(val, "mark")
    if not (0 <= value <= 0xFFFFFFFF and 0 <= m <= 0xFFFFFFFF):
        raise _Fail(f"mark {v}: not 32 bits")
    return value, m


def _mark_target(opts: dict) -> Action:
    """MARK's forms as the model's `mark = (mark & ~mask) ^ value` (libxt_MARK
    turns each into that xmark pair, which iptables-save prints)."""
    if len(opts) != 1:
        raise _Fail("-j MARK needs exactly one of --set-xmark, --set-mark, --or-mark, "
                    "--and-mark, --xor-mark")
    (o, v), = opts.items()
    if o == "--set-xmark":
        value, mask = _mark(v or "")
        return Action("mark", mark=value, mark_mask=mask)
    if o == "--set-mark":
        # Clears the mask and ORs the value in: its bits join the mask.
        value, mask = _mark(v or "")
        return Action("mark", mark=value, mark_mask=(mask | value) & 0xFFFFFFFF)
    if o == "--xor-mark":
        return Action("mark", mark=_int(v or "", "mark"), mark_mask=0)
    if o == "--or-mark":
        value = _int(v or "", "mark")
        return Action("mark", mark=value, mark_mask=value)
    if o == "--and-mark":
        value = _int(v or "", "mark")
        return Action("mark", mark=0, mark_mask=~value & 0xFFFFFFFF)
    raise _Fail(f"unsupported option {o} of -j MARK")


def _connmark_target(opts: dict) -> Action:
    """CONNMARK's forms: the set ones as MARK's on the connection's mark, save and
    restore with their masks (--mask sets both; save prints --nfmask and
    --ctmask)."""
    if "--save-mark" in opts or "--restore-mark" in opts:
        kind = "savemark" if "--save-mark" in opts else "restoremark"
        rest = {o: v for o, v in opts.items() if o not in ("--save-mark", "--restore-mark")}
        if "--mask" in rest:
            nfmask = ctmask = _int(rest.pop("--mask") or "", "--mask")
        else:
            nfmask = _int(rest.pop("--nfmask", None) or "0xffffffff", "--nfmask")
            ctmask = _int(rest.pop("--ctmask", None) or "0xffffffff", "--ctmask")
        if rest:
            raise _Fail(f"unsupported -j CONNMARK options {' '.join(sorted(opts))}")
        return Action(kind, ct_masks=(nfmask & 0xFFFFFFFF, ctmask & 0xFFFFFFFF))
    try:
        a = _mark_target(opts)
    except _Fail:
        raise _Fail(f"unsupported -j CONNMARK options {' '.join(sorted(opts))}") from None
    return Action("ctmark", mark=a.mark, mark_mask=a.mark_mask)


def _ct_states(v: str, neg: bool) -> frozenset[str]:
    states = set()
    for s in v.split(","):
        s = s.lower()
        if s not in CT_STATES:
            raise _Fail(f"unsupported: ct state {s.upper()}")
        states.add(s)
    # Every packet has exactly one of CT_STATES, so a negation is the rest.
    return frozenset(CT_STATES) - states if neg else frozenset(states)


def _rate(v: str, native: bool) -> tuple[int, str]:
    """`--limit N[/unit]` as the model's rate. iptables-nft (`native`) holds it
    as written; legacy as a whole period of 1/10000 s, so there a rate whose
    period is not whole (3/second: 3333 units, 3.0003 a second) is not the rate
    written, and is refused (as it is from a file that does not say which)."""
    num, _, unit = v.partition("/")
    unit = unit.lower() or "second"
    per = next((u for u in _LIMIT_UNITS if u.startswith(unit)), None)
    if per is None:
        raise _Fail(f"--limit {v}: unknown unit {unit!r}")
    rate = _int(num, "--limit")
    whole = _LIMIT_SCALE * _LIMIT_UNITS[per]
    if not 0 < rate <= whole:
        raise _Fail(f"--limit {v}: iptables takes 1/day to {_LIMIT_SCALE}/second")
    if whole % rate and not native:
        raise _Fail(f"unsupported: --limit {v} (iptables-legacy holds it as one packet "
                    f"per {whole // rate}/{_LIMIT_SCALE} s, not exactly {rate}/{per})")
    return rate, per


def _string_match(opts: list[tuple[str, bool]]) -> None:
    """-m string: the packets whose bytes hold a string. The testbed's hold their
    headers, fwbench's marker and zeros, so a rule that looks for a string is set
    aside (_Aside; the original, which keeps it, shows if one did hold it); one
    that looks for its absence, which nearly every packet has, is refused."""
    if not any(o in ("--string", "--hex-string") for o, _ in opts):
        raise _Fail("-m string needs --string or --hex-string")
    if any(neg for _, neg in opts):
        raise _Fail("unsupported: ! --string (nearly every packet lacks the string; "
                    "the model holds no payload)")
    raise _Aside("-m string matches only packets whose bytes hold the string; the "
                 "testbed's carry fwbench's marker and zeros")


def _socket_match(mods: set[str], opts: list[tuple[str, bool]]) -> None:
    """-m owner and -m cgroup read the packet's local socket, which no packet the
    testbed sends through the firewall has: without one xt_cgroup never matches,
    and xt_owner matches only when every option it was given is negated. So the
    rule is set aside (_Aside), or refused where it would match every packet."""
    if not opts:
        raise _Fail(f"-m {'owner' if 'owner' in mods else 'cgroup'} needs an option")
    if "cgroup" in mods or not all(neg for _, neg in opts):
        name = "cgroup" if "cgroup" in mods else "owner"
        raise _Aside(f"-m {name} matches only packets of a local socket, which no packet "
                     f"the testbed sends through the firewall has")
    raise _Fail("unsupported: -m owner with every option negated (it matches every "
                "packet without a local socket, and the firewall's own by their owner)")


def _hashlimit(opts: dict[str, str], version: int) -> HashLimit:
    """-m hashlimit's options as the model's HashLimit, exactly or refused: a rate
    in packets whose period in microseconds is whole (libxt_hashlimit holds it so),
    its expiry the written unit's when not given (120/min: 60000 ms)."""
    upto, above = opts.get("--hashlimit-upto", opts.get("--hashlimit")), \
        opts.get("--hashlimit-above")
    if (upto is None) == (above is None):
        raise _Fail("-m hashlimit needs one of --hashlimit-upto and --hashlimit-above")
    written = upto or above
    name = opts.get("--hashlimit-name")
    if not name:
        raise _Fail("-m hashlimit needs --hashlimit-name")
    num, _, unit = written.partition("/")
    if not num.isdigit() or unit.lower().endswith("b/s") or num.lower().endswith("b"):
        raise _Fail(f"unsupported: hashlimit rate {written} (a rate in bytes, "
                    f"or not a number of packets)")
    unit = unit.lower() or "second"
    per = next((u for u in _LIMIT_UNITS if u.startswith(unit)), None)
    if per is None:
        raise _Fail(f"hashlimit rate {written}: unknown unit {unit!r}")
    rate = int(num)
    whole = HASHLIMIT_SCALE * _LIMIT_UNITS[per]
    if not 0 < rate <= whole:
        raise _Fail(f"hashlimit rate {written}: iptables takes 1/day to "
                    f"{HASHLIMIT_SCALE}/second")
    if whole % rate:
        raise _Fail(f"unsupported: hashlimit rate {written} (iptables holds it as one "
                    f"packet per {whole // rate} us, not exactly {rate}/{per})")
    burst = _int(opts.get("--hashlimit-burst", "5"), "--hashlimit-burst")
    if not 0 < burst <= _LIMIT_BURST_MAX:
        raise _Fail(f"--hashlimit-burst {burst}: iptables takes 1 to {_LIMIT_BURST_MAX}")
    mode = opts.get("--hashlimit-mode")
    modes = tuple(m for m in HASHLIMIT_MODES if m in (mode or "").split(","))
    if mode is not None and len(modes) != len(mode.split(",")):
        raise _Fail(f"--hashlimit-mode {mode}: from {','.join(HASHLIMIT_MODES)}")
    width = 32 if version == 4 else 128
    masks = []
    for opt in ("--hashlimit-srcmask", "--hashlimit-dstmask"):
        bits = _int(opts[opt], opt) if opt in opts else None
        if bits is not None and not 0 <= bits <= width:
            raise _Fail(f"{opt} {bits}: an IPv{version} mask is 0 to {width}")
        masks.append(None if bits == width else bits)
    tune = {}
    for what in ("size", "max", "expire", "gcinterval"):
        opt = f"--hashlimit-htable-{what}"
        tune[what] = _int(opts[opt], opt) if opt in opts else None
    if tune["expire"] is None:
        tune["expire"] = _LIMIT_UNITS[per] * 1000
    if tune["expire"] == hashlimit_default_expire(rate, per):
        tune["expire"] = None
    if tune["gcinterval"] == HASHLIMIT_GCINTERVAL:
        tune["gcinterval"] = None
    tune["size"] = tune["size"] or None
    tune["max"] = tune["max"] or None
    return HashLimit(name, rate, per, burst, masks[0], upto=upto is not None, mode=modes,
                     dst_prefix=masks[1], **tune)


def _tcp_flags(v: str) -> int:
    """A comma list of TCP flag names (SYN,ACK / ALL / NONE) as bits."""
    out = 0
    for name in v.split(","):
        bit = _TCP_FLAG_NAMES.get(name.upper())
        if bit is None:
            raise _Fail(f"--tcp-flags: unknown flag {name!r}")
        out |= bit
    return out


def _icmp_type(v: str, version: int) -> tuple[int | None, int | None]:
    """The (type, code) `--icmp-type V` matches; (None, None) for `any`, code None
    for every code."""
    if v == "any":
        return None, None
    names = ICMP_NAMES if version == 4 else ICMP6_NAMES
    if v in names:
        typ, code = names[v]
    else:
        t, sep, c = v.partition("/")
        typ = _int(t, "ICMP type")
        code = _int(c, "ICMP code") if sep else None
    if not 0 <= typ <= 255 or code is not None and not 0 <= code <= 255:
        raise _Fail(f"bad ICMP type {v}")
    return typ, code


# --- ipset save ------------------------------------------------------------------

class _IpsetDefs:
    """`ipset save` text, parsed lazily: a set is converted when a rule uses it."""

    _KEYS = {"hash:ip": ("addr",), "hash:net": ("addr",),
             "hash:ip,port": ("addr", "proto", "port"),
             "hash:net,port": ("addr", "proto", "port")}

    def __init__(self, text: str, source: str, version: int, mover: Mover | None):
        self.source, self.version, self.mover = source, version, mover
        self.notes: list[str] = []
        self.creates: dict[str, tuple[int, list[str]]] = {}
        self.adds: dict[str, list[tuple[int, list[str]]]] = {}
        self.done: dict[str, Set] = {}
        self.notes: list[str] = []   # of the sets the rules use
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line[0] == "#":
                continue
            try:
                toks = shlex.split(line) if '"' in line else line.split()
            except ValueError as e:
                self._fail(lineno, f"syntax error: {e}")
            if toks[0] in ("create", "-N", "-exist") and len(toks) >= 3:
                self.creates[toks[1]] = (lineno, toks[2:])
            elif toks[0] in ("add", "-A") and len(toks) >= 3:
                if toks[1] not in self.creates:
                    self._fail(lineno, f"add to set {toks[1]} before its create")
                self.adds.setdefault(toks[1], []).append((lineno, toks[2:]))
            else:
                self._fail(lineno, f"not an ipset save line: {line[:40]!r}")

    def _fail(self, lineno: int, what: str):
        raise RuleSetError(f"{self.source}:{lineno}: {what}")

    def get(self, name: str) -> Set | None:
        if name in self.done:
            return self.done[name]
        if name not in self.creates:
            return None
        lineno, toks = self.creates[name]
        kind, opts = toks[0], toks[1:]
        if kind not in self._KEYS:
            self._fail(lineno, f"unsupported set type {kind} (set {name})")
        family = "inet"
        size, counters, tuning = None, False, []
        timeout = 0   # the elements' default: 0, none
        j = 0
        while j < len(opts):
            o = opts[j]
            if o == "family":
                family = opts[j + 1] if j + 1 < len(opts) else ""
                j += 2
            elif o == "maxelem":
                size = self._number(lineno, opts[j + 1] if j + 1 < len(opts) else "", o)
                j += 2
            elif o == "timeout":
                timeout = self._seconds(lineno, opts[j + 1:j + 2])
                j += 2
            elif o in ("hashsize", "bucketsize", "initval"):
                tuning.append(" ".join(opts[j:j + 2]))
                j += 2
            elif o == "counters":
                counters = True
                j += 1
            elif o in ("comment", "forceadd"):
                j += 1   # elements may have comments; a full set takes more adds
            else:
                self._fail(lineno, f"unsupported option {o} (set {name})")
        if tuning:
            # Not `source:line`, which names a rule (coverage attaches it there).
            self.notes.append(f"{self.source}: set {name}: {', '.join(tuning)} not kept "
                              f"(hash tuning; no verdict depends on it)")
        if family not in ("inet", "inet6"):
            self._fail(lineno, f"unsupported family {family} (set {name})")
        version = 4 if family == "inet" else 6
        if version != self.version:
            self._fail(lineno, f"set {name} is IPv{version}, the rule set IPv{self.version}")
        keys = self._KEYS[kind]
        interval = kind.startswith("hash:net")
        elements, dropped, expiring = [], set(), []
        for eline, etoks in self.adds.get(name, ()):
            elements.append(self._element(eline, etoks, keys, interval, version, name,
                                          dropped))
            seconds = self._expires(eline, etoks, timeout)
            if seconds:
                expiring.append((seconds, eline))
        for what in sorted(dropped):
            self.notes.append(f"{self.source}: set {name}: element {what} not kept (no "
                              f"verdict depends on them)")
        if expiring:
            # The line of the element that expires first: refused there, or noted.
            seconds, eline = min(expiring)
            self.notes.append(timeout_note(f"{self.source}:{eline}: set {name}", seconds))
        if size is not None and size < len(elements):
            self._fail(lineno, f"set {name}: maxelem {size} below its {len(elements)} "
                               f"elements")
        s = self.done[name] = Set(name, keys, tuple(elements), version, interval,
                                  size=size, counters=counters)
        return s

    def _number(self, lineno: int, v: str, what: str) -> int:
        if not v.isdigit():
            self._fail(lineno, f"{what} {v!r}: not a number")
        return int(v)

    def _expires(self, lineno: int, toks: list[str], default: int) -> int:
        """In how many seconds an element expires: its own timeout, else its set's;
        0 for never."""
        for j in range(1, len(toks) - 1):
            if toks[j] == "timeout":
                return self._seconds(lineno, toks[j + 1:j + 2])
        return default

    def _seconds(self, lineno: int, v: list[str]) -> int:
        if not v or not v[0].isdigit():
            self._fail(lineno, f"timeout: not a number of seconds: {' '.join(v)!r}")
        return int(v[0])

    def _element(self, lineno: int, toks: list[str], keys: tuple[str, ...],
                 interval: bool, version: int, name: str, dropped: set[str]) -> tuple:
        j = 1
        while j < len(toks):
            o = toks[j]
            if o == "timeout":
                j += 2   # get() reads it: noted, or refused
            elif o in ("packets", "bytes", "comment"):
                dropped.add("comments" if o == "comment" else "packet and byte counts")
                j += 2
            else:
                # timeout: the element expires; nomatch: an exception to a prefix
                self._fail(lineno, f"unsupported element option {o} (set {name})")
        parts = toks[0].split(",")
        if len(parts) != (2 if len(keys) == 3 else 1):
            self._fail(lineno, f"element {toks[0]!r} does not fit set {name}")
        try:
            net = ipaddress.ip_network(parts[0], strict=False)
        except ValueError:
            self._fail(lineno, f"not an address: {parts[0]!r}")
        if net.version != version:
            self._fail(lineno, f"IPv{net.version} element in IPv{version} set {name}")
        if net.prefixlen != net.max_prefixlen and not interval:
            self._fail(lineno, f"a prefix in set {name} of single addresses")
        addr = str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net)
        if self.mover:
            addr = self.mover.addr(addr)
        if len(keys) == 1:
            return (addr,)
        proto, sep, port = parts[1].partition(":")
        if not sep:
            proto, port = "tcp", proto
        if proto not in ("tcp", "udp"):
            self._fail(lineno, f"unsupported protocol {proto} in set {name}")
        try:
            p = int(port)
        except ValueError:
            self._fail(lineno, f"not a port: {port!r}")
        return (addr, proto, p)
