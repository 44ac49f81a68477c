"""`nft -j list ruleset` output (libnftables-json, schema version 1) into the
rule-set model, and nft text by way of nft itself.

Tables keep their family and name, chains their hook, priority, type, policy and
device (one; a chain on several keeps none, and a note says so), named sets their
size and elements (address ranges become the prefixes that cover them
exactly; port ranges inside set elements are spelled out). An anonymous set of
addresses in a rule (`ip saddr { a, b/24 }`, or a range that is not one prefix)
becomes a named set `anonN` of its table, which the model can hold and every
backend can render. An anonymous set of protocols, interface names or ICMP
type . code pairs makes one rule per element (ids `<id>`, `<id>:2`, ...): the
elements are disjoint, so the verdicts are the same. A rule needing an IPv6
extension header, and a rule the model cannot hold that only output-hook chains
reach, is set aside with a note (see iptables_save).

Rule ids: a comment `fwb:ID` (or `<user text> fwb:ID`, the form the nft renderer
writes) gives the rule its id and leaves the user text in Rule.comment; any
other rule is `<table>-<n>`, n counting the rules of that table in document
order from 1 (when two tables of different families share a name,
`<family>-<table>-<n>`). A rule holding several actions (`log prefix "x" drop`)
becomes one model rule per action, in order, the last keeping the id and the
others `<id>.1`, `<id>.2`, ... with the same matches: the same packets reach each
of them, so the verdicts do not change.

Exact or refused: what the model cannot hold exactly is refused (an element
timeout, `ip6 nexthdr`, a reject type no renderer sends, a dormant table). A
rule an inet table restricts to one IP version, where its addresses and
protocol do not say so (`meta nfproto ipv6`, `ip protocol`, `reject with icmpv6
...`, whose `meta nfproto` nft adds and lists as part of it) keeps the
restriction as Match.ip_version. What decides no verdict is left out with a note
in RuleSet.notes: log options but the prefix, counters' values, set policies,
comments and per-element counters.

nft JSON has no line numbers: an error names the rule as
`<source>: table <family> <name> chain <chain> rule <n> (handle <h>): <what>`,
n counting within the chain from 1.

parse() is pure. parse_text() and parse_file() on nft text run nft (as root, in
a new network namespace of their own, gone when nft exits) to turn the text
into JSON: no other way reads nft syntax faithfully.
"""
from __future__ import annotations

import gc
import ipaddress
import itertools
import json
import os
import re

from fwbench.ruleset.evaluate import complement_ranges, merge_ranges, numgen_weights
from fwbench.ruleset.model import (ADDR_TYPES, ATTR_KEYS, CT_STATES, FAMILIES, NETDEV_HOOKS,
                                   PKT_TYPES, PRIORITIES, PROTO_NUMBERS, RANDOM_SCALE,
                                   TESTBED_IPSEC,
                                   TCP_FLAGS, TCP_OPTION_FIELDS, TCP_OPTION_KINDS, Action,
                                   AddrType, Attr, Chain, Iface, Limit, Match, Ports, Prefix,
                                   Quota, Range, Rule, RuleSet, RuleSetError, Set, SetRef,
                                   Table, TcpFlags, TcpOption, timeout_note, validate)
from fwbench.ruleset.importers.iptables_save import REFUSED_PROTOS, canonical4
from fwbench.ruleset.render import ID_TAG

ICMP_TYPES = {
    "echo-reply": 0, "destination-unreachable": 3, "source-quench": 4, "redirect": 5,
    "echo-request": 8, "router-advertisement": 9, "router-solicitation": 10,
    "time-exceeded": 11, "parameter-problem": 12, "timestamp-request": 13,
    "timestamp-reply": 14, "info-request": 15, "info-reply": 16,
    "address-mask-request": 17, "address-mask-reply": 18,
}
ICMPV6_TYPES = {
    "destination-unreachable": 1, "packet-too-big": 2, "time-exceeded": 3,
    "parameter-problem": 4, "echo-request": 128, "echo-reply": 129,
    "mld-listener-query": 130, "mld-listener-report": 131, "mld-listener-done": 132,
    "mld-listener-reduction": 132, "nd-router-solicit": 133, "nd-router-advert": 134,
    "nd-neighbor-solicit": 135, "nd-neighbor-advert": 136, "nd-redirect": 137,
    "router-renumbering": 138, "ind-neighbor-solicit": 141, "ind-neighbor-advert": 142,
    "mld2-listener-report": 143,
}
_PROTO_NAMES = {"tcp": "tcp", "udp": "udp", "icmp": "icmp", "ipv6-icmp": "icmpv6",
                "icmpv6": "icmpv6", "esp": "esp", "ah": "ah", "gre": "gre", "igmp": "igmp",
                **{str(v): k for k, v in PROTO_NUMBERS.items()}}
_SET_KEYS = {"ipv4_addr": ("addr", 4), "ipv6_addr": ("addr", 6),
             "inet_proto": ("proto", None), "inet_service": ("port", None)}
# nft reject types -> the iptables --reject-with names the model uses; nft's
# others (icmp frag-needed, a number) no renderer can send, so they are refused.
_REJECT_TYPES = {
    "icmp": {"net-unreachable": "icmp-net-unreachable",
             "host-unreachable": "icmp-host-unreachable",
             "prot-unreachable": "icmp-proto-unreachable",
             "port-unreachable": "icmp-port-unreachable",
             "net-prohibited": "icmp-net-prohibited",
             "host-prohibited": "icmp-host-prohibited",
             "admin-prohibited": "icmp-admin-prohibited"},
    "icmpv6": {"no-route": "icmp6-no-route", "admin-prohibited": "icmp6-adm-prohibited",
               "addr-unreachable": "icmp6-addr-unreachable",
               "port-unreachable": "icmp6-port-unreachable",
               "policy-fail": "icmp6-policy-fail", "reject-route": "icmp6-reject-route"},
    "icmpx": {t: f"icmpx-{t}" for t in ("port-unreachable", "admin-prohibited",
                                        "no-route", "host-unreachable")},
}
_LIMIT_PER = ("second", "minute", "hour", "day")
_NAMED_OBJECTS = ("counter", "quota", "limit", "ct helper", "ct timeout",
                  "ct expectation", "secmark", "synproxy")
# A named set's keys: kept (auto-merge only merges what the elements list shows
# merged already), or left out with a note, being hints or comments.
_SET_KEPT = frozenset({"family", "name", "table", "type", "handle", "flags", "elem",
                       "size", "auto-merge", "timeout"})
_SET_NOTED = {"policy": "a hint for nft's choice of set type",
              "gc-interval": "how often expired elements are collected",
              "comment": "a comment"}
_MAX_EXPANDED = 65536   # elements one set element may spell out into
MASK32 = 0xFFFFFFFF


class _Fail(Exception):
    """A problem in the current rule or set; the caller adds where it is."""


class _Aside(Exception):
    """A rule no packet of the testbed can match (it needs an IPv6 extension
    header, or a local socket, which no packet the testbed sends has): left out,
    with a note saying why."""


def parse(doc: dict | str, source: str,
          refused: list[tuple[str, str]] | None = None) -> RuleSet:
    """The rule set of `nft -j list ruleset` output, as text or already loaded.
    With `refused` (a list: coverage), a rule the model cannot hold is left out
    and its refusal appended there as (where, why), instead of refusing the file."""
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except ValueError as e:
            raise RuleSetError(f"{source}: not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nftables"), list):
        raise RuleSetError(f"{source}: not an nft JSON rule set (no \"nftables\" list)")
    # No reference cycles are made; the collector would only walk the growing
    # heap again and again.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        importer = _Importer(source)
        importer.refused = refused
        return importer.run(doc["nftables"])
    finally:
        if was_enabled:
            gc.enable()


def parse_text(text: str, source: str,
               refused: list[tuple[str, str]] | None = None) -> RuleSet:
    """nft text: nft loads it into a new, empty network namespace and lists it
    as JSON (root only; the namespace goes when nft exits)."""
    from fwbench import proc
    from fwbench.errors import CommandError, FwbenchError
    if os.geteuid() != 0:
        raise RuleSetError(f"{source}: reading nft text needs root (nft loads it into a "
                           f"namespace of its own); or give `nft -j list ruleset` JSON")
    # The devices the text names must exist where nft reads it: `iif`/`oif` resolve
    # a name when loaded, and an ingress chain keeps only a device that exists.
    # Stand-ins of those names (veth: this kernel has no dummy links) in nft's
    # namespace.
    devices = sorted({n for n in _DEVICE_NAMES.findall(text) for n in _names(n)
                      if n and "*" not in n and "$" not in n and len(n) < 16})
    script = ('i=0; for d in "$@"; do i=$((i+1)); '
              'ip link add "$d" type veth peer name "fwbstand$i" 2>/dev/null; done; '
              f'nft -f - && nft -j list ruleset && echo "{_LISTING}" && nft list ruleset')
    try:
        out = proc.output(["unshare", "-n", "sh", "-c", script, "sh", *devices],
                          input=text)
    except CommandError as e:
        lines = e.stderr.splitlines()
        at = next((i for i, ln in enumerate(lines) if "Error" in ln), None)
        if at is None:
            first = lines[0] if e.stderr.strip() else str(e)
        else:
            first = lines[at]
            # nft quotes the statement on the next line; its errno text alone
            # ("No such file or directory") does not say what was missing.
            quoted = lines[at + 1].strip() if at + 1 < len(lines) else ""
            if quoted and not quoted.startswith("^"):
                first = f"{first.rstrip()}: {quoted}"
        raise RuleSetError(first.replace("/dev/stdin:", f"{source}:", 1).strip()) from None
    except FwbenchError as e:
        raise RuleSetError(f"{source}: {e}") from None
    doc, _, listing = out.partition(f"{_LISTING}\n")
    return parse(_with_devices(doc, listing), source, refused)


# Between nft's JSON listing and its text listing in parse_text's output.
_LISTING = "--- fwbench: nft list ruleset ---"
_TABLE = re.compile(r"^table (\S+) (\S+) \{")
_CHAIN = re.compile(r"^\s*chain (\S+) \{")
_HOOK_DEVICES = re.compile(r"hook (?:ingress|egress) "
                           r"(?:device \"?([^\"\s;]+)\"?|devices = \{([^}]*)\})")


def _with_devices(doc: str, listing: str) -> dict:
    """nft's JSON listing with every netdev chain's devices, which nft 1.0.6 lists
    in text only (its JSON leaves `dev` out)."""
    devices: dict[tuple, list[str]] = {}
    table = chain = None
    for line in listing.splitlines():
        if m := _TABLE.match(line):
            table = (m.group(1), m.group(2))
        elif m := _CHAIN.match(line):
            chain = m.group(1)
        elif (m := _HOOK_DEVICES.search(line)) and table and chain:
            names = [m.group(1)] if m.group(1) else _names(m.group(2))
            devices[(*table, chain)] = [n for n in names if n]
    parsed = json.loads(doc)
    for item in parsed.get("nftables", []):
        c = item.get("chain") if isinstance(item, dict) else None
        if isinstance(c, dict) and c.get("hook") in NETDEV_HOOKS and "dev" not in c:
            found = devices.get((c.get("family"), c.get("table"), c.get("name")))
            if found:
                c["dev"] = found[0] if len(found) == 1 else found
    return parsed


_DEVICE_NAMES = re.compile(r"\b(?:iif|oif|device|devices)\s*(?:=\s*)?(?:!=\s*|==\s*)?"
                           r"(\{[^}]*\}|\"[^\"]*\"|[^\s;{}]+)")


def _names(value: str) -> list[str]:
    """The interface names in one value of _DEVICE_NAMES: a name, or a braced list."""
    return [x.strip().strip('"') for x in value.strip("{}").split(",")]


def parse_file(path: str) -> RuleSet:
    """A file of nft JSON or nft text, whichever it holds."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise RuleSetError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") \
            from None
    if text.lstrip().startswith("{"):
        return parse(text, path)
    return parse_text(text, path)


class _Importer:
    def __init__(self, source: str):
        self.source = source
        self.notes: list[str] = []
        self.tables: dict[tuple[str, str], dict] = {}
        self.anon = itertools.count(1)
        self.set_names: set[str] = set()
        self.where = ""   # the rule being read, for notes
        self.counts = False   # a counter held packets or bytes (not kept)
        self.refused: list[tuple[str, str]] | None = None   # see parse()

    def run(self, items: list) -> RuleSet:
        rules: list[dict] = []
        origins: list[tuple[str, str]] = []
        pending: list[tuple[dict, str, str, str]] = []   # (table, chain, where, why)
        for item in items:
            if not isinstance(item, dict) or len(item) != 1:
                raise RuleSetError(f"{self.source}: not an nft JSON rule set "
                                   f"(an item is not one object)")
            (kind, obj), = item.items()
            if kind == "metainfo":
                continue
            if not isinstance(obj, dict):
                raise RuleSetError(f"{self.source}: {kind}: not an object")
            if kind == "table":
                self._table(obj)
            elif kind == "chain":
                chains = self._t(obj, kind)["chains"]
                if obj.get("name") in chains:
                    raise RuleSetError(f"{self.source}: table {obj.get('family')} "
                                       f"{obj.get('table')}: chain {obj.get('name')} "
                                       f"appears twice")
                chains[obj.get("name")] = obj
            elif kind == "set" or kind == "map" and obj.get("map") == "verdict":
                # A verdict map is held as a set whose elements carry verdicts.
                t = self._t(obj, kind)
                if any(s.get("name") == obj.get("name") for s in t["raw_sets"]):
                    raise RuleSetError(f"{self.source}: table {obj.get('family')} "
                                       f"{obj.get('table')}: {kind} {obj.get('name')} "
                                       f"appears twice")
                self.set_names.add(str(obj.get("name")))
                t["raw_sets"].append(obj)
            elif kind == "rule":
                self._t(obj, kind)
                rules.append(obj)
            elif kind in _NAMED_OBJECTS:
                self.notes.append(f"{self.source}: named {kind} {obj.get('name')} in table "
                                  f"{obj.get('family')} {obj.get('table')} not imported")
            elif kind in ("map", "flowtable") and self.refused is not None:
                self.refused.append((f"{self.source}: table {obj.get('family')} "
                                     f"{obj.get('table')} {kind} {obj.get('name')}",
                                     f"unsupported {kind}"))
            elif kind in ("map", "flowtable"):
                raise RuleSetError(f"{self.source}: table {obj.get('family')} "
                                   f"{obj.get('table')}: unsupported {kind} "
                                   f"{obj.get('name')}")
            else:
                raise RuleSetError(f"{self.source}: not a `nft -j list ruleset` document "
                                   f"(found {kind!r})")
        if not self.tables:
            raise RuleSetError(f"{self.source}: no tables")
        names = [name for _, name in self.tables]
        for t in self.tables.values():
            t["sets"] = {}
            for raw in t["raw_sets"]:
                try:
                    t["sets"][raw.get("name")] = self._set(t, raw)
                except RuleSetError as e:
                    if self.refused is None:
                        raise
                    self.refused.append((f"{self.source}: table {t['family']} "
                                         f"{t['name']} set {raw.get('name')}", str(e)))
            fam, name = t["family"], t["name"]
            t["id_prefix"] = f"{fam}-{name}" if names.count(name) > 1 else name
            t["rules"] = {c: [] for c in t["chains"]}
            t["n"] = 0
        for r in rules:
            t = self.tables[(r.get("family"), r.get("table"))]
            chain = r.get("chain")
            if chain not in t["rules"]:
                raise RuleSetError(f"{self.source}: a rule in table {t['family']} "
                                   f"{t['name']} names a missing chain {chain!r}")
            pos = len(t["rules"][chain]) + 1
            t["n"] += 1
            where = (f"table {t['family']} {t['name']} chain {chain} rule {pos} "
                     f"(handle {r.get('handle')})")
            self.where = where
            why = None
            try:
                new = self._rule(t, r)
            except _Aside as e:
                self.notes.append(f"{self.source}: {where}: rule set aside: {e}")
                new = []
            except (_Fail, RuleSetError) as e:
                if str(e).startswith("unsupported"):
                    # Decided once every jump is known: refused, or set aside when
                    # only the firewall's own packets reach the chain.
                    pending.append((t, chain, f"{self.source}: {where}", str(e)))
                    new = []
                else:
                    why = str(e)
            except (TypeError, KeyError, ValueError, AttributeError, IndexError):
                why = "malformed expression"
            if why is not None:
                if self.refused is None:
                    raise RuleSetError(f"{self.source}: {where}: {why}")
                self.refused.append((f"{self.source}: {where}", why))
                new = []    # keeps the places of the chain's later rules
            t["rules"][chain].append(new)
            origins.extend((x.id, f"{self.source}: {where}") for x in new)
        self._set_aside_output(pending)
        tables = []
        for t in self.tables.values():
            chains = []
            for name, c in t["chains"].items():
                rules_ = tuple(x for group in t["rules"][name] for x in group)
                chains.append(self._chain(t, c, rules_))
            tables.append(Table(t["family"], t["name"], tuple(chains),
                                tuple(t["sets"].values())))
        size = sum(len(c.rules) for t in tables for c in t.chains)
        if self.counts:
            self.notes.append(f"{self.source}: counters' packets and bytes not kept (a "
                              f"run counts from zero)")
        rs = RuleSet(self.source, tuple(tables), size=size, ipt_prefix="",
                     notes=tuple(self.notes), origins=tuple(origins))
        try:
            return validate(rs)
        except RuleSetError as e:
            raise RuleSetError(f"{self.source}: {e}") from None

    def _set_aside_output(self, pending: list[tuple[dict, str, str, str]]) -> None:
        """Rules the model cannot hold are refused where a packet the firewall
        forwards or receives can reach them; where only chains at the output hook
        lead (the firewall's own packets, which the testbed never judges), they are
        set aside with a note."""
        reach: dict[int, set[str]] = {}
        for t, chain, where, why in pending:
            seen = reach.get(id(t))
            if seen is None:
                seen = reach[id(t)] = {name for name, c in t["chains"].items()
                                       if c.get("hook") not in (None, "output")}
                todo = list(seen)
                while todo:
                    for group in t["rules"][todo.pop()]:
                        for x in group:
                            nxt = x.action.chain
                            if nxt is not None and nxt not in seen:
                                seen.add(nxt)
                                todo.append(nxt)
            if chain not in seen:
                self.notes.append(f"{where}: {why}: set aside, only the firewall's own "
                                  f"packets reach chain {chain}")
            elif self.refused is None:
                raise RuleSetError(f"{where}: {why}")
            else:
                self.refused.append((where, why))

    # --- objects ---------------------------------------------------------------

    def _table(self, obj: dict) -> None:
        fam, name = obj.get("family"), obj.get("name")
        if fam not in FAMILIES:
            raise RuleSetError(f"{self.source}: table {fam} {name}: unsupported family {fam}")
        if (fam, name) in self.tables:
            raise RuleSetError(f"{self.source}: table {fam} {name} appears twice")
        if obj.get("flags"):
            # dormant: a table that filters nothing (nft 1.0.6 lists it garbled)
            raise RuleSetError(f"{self.source}: table {fam} {name}: unsupported: flags "
                               f"{json.dumps(obj['flags'])}")
        self.tables[(fam, name)] = {"family": fam, "name": name, "chains": {},
                                    "raw_sets": [], "anon": []}

    def _t(self, obj: dict, kind: str) -> dict:
        t = self.tables.get((obj.get("family"), obj.get("table")))
        if t is None:
            what = f"{kind} {obj['name']}" if "name" in obj else kind
            raise RuleSetError(f"{self.source}: {what} in a missing table "
                               f"{obj.get('family')} {obj.get('table')}")
        return t

    def _chain(self, t: dict, c: dict, rules: tuple[Rule, ...]) -> Chain:
        name = c.get("name")
        if "hook" not in c:
            return Chain(name, rules)
        dev = c.get("dev")
        where = f"{self.source}: chain {t['family']} {t['name']} {name}"
        if isinstance(dev, list):
            if len(dev) != 1:
                # Another device, or none, would show the chain other packets.
                raise RuleSetError(f"{where}: unsupported: a chain on "
                                   f"{len(dev)} devices ({', '.join(map(str, dev))}); the "
                                   f"model holds one")
            dev = dev[0]
        if dev is not None and not isinstance(dev, str):
            raise RuleSetError(f"{where}: device {dev!r} is not a name")
        if c["hook"] in NETDEV_HOOKS and not dev:
            raise RuleSetError(f"{where}: unsupported: an {c['hook']} chain on no device")
        prio = c.get("prio", 0)
        if isinstance(prio, str):   # hand-written JSON may name it
            prio = PRIORITIES.get(prio, prio)
        if not isinstance(prio, int):
            raise RuleSetError(f"{self.source}: chain {t['family']} {t['name']} {name}: "
                               f"priority {prio!r} is not a number")
        return Chain(name, rules, hook=c["hook"], priority=prio, type=c.get("type", "filter"),
                     policy=c.get("policy", "accept"), device=dev or None)

    def _set(self, t: dict, raw: dict) -> Set:
        name = raw.get("name")
        where = f"{self.source}: table {t['family']} {t['name']} set {name}"
        types = raw.get("type")
        types = [types] if isinstance(types, str) else list(types or ())
        keys, version = [], None
        for ty in types:
            if ty not in _SET_KEYS:
                raise RuleSetError(f"{where}: unsupported type {ty}")
            k, v = _SET_KEYS[ty]
            keys.append(k)
            version = v or version
        if version is None:
            version = 6 if t["family"] == "ip6" else 4
        flags = raw.get("flags", ())
        for flag in [flags] if isinstance(flags, str) else flags:
            if flag not in ("interval", "constant", "timeout", "dynamic"):
                raise RuleSetError(f"{where}: unsupported flag {flag}")
        is_map = raw.get("map") == "verdict"
        for key in raw:
            if key in _SET_NOTED or key == "stmt" and all(
                    isinstance(x, dict) and list(x) == ["counter"] for x in raw[key]):
                self.notes.append(f"{where}: {key} not kept ({_SET_NOTED.get(key, 'counters')}"
                                  f", no verdict depends on it)")
            elif key not in _SET_KEPT and not (is_map and key == "map"):
                raise RuleSetError(f"{where}: unsupported: {key}")
        if is_map:
            return self._vmap_set(t, raw, tuple(keys), version, where)
        try:
            elements = self._elements(tuple(keys), version, raw.get("elem", ()), where)
            expiring = [s for s in (_expires(e, raw.get("timeout", 0))
                                    for e in raw.get("elem", ())) if s]
        except (_Fail, RuleSetError) as e:
            raise RuleSetError(f"{where}: {e}") from None
        except (TypeError, KeyError, ValueError, AttributeError, IndexError):
            raise RuleSetError(f"{where}: malformed element") from None
        interval = any(k == "addr" and "/" in str(e[i])
                       for e in elements for i, k in enumerate(keys))
        if expiring:
            self.notes.append(timeout_note(where, min(expiring)))
        size = raw.get("size")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
            raise RuleSetError(f"{where}: size {size!r} is not a number")
        return Set(name, tuple(keys), tuple(elements), version, interval, size=size)

    def _vmap_set(self, t: dict, raw: dict, keys: tuple[str, ...], version: int,
                  where: str, inline: bool = False) -> Set:
        """A verdict map: exact keys only (an interval map would need the model's
        sets' prefixes in a lookup that yields a verdict), each element's verdict
        one of accept, drop, return, jump, goto."""
        flags = raw.get("flags", ())
        if "interval" in ([flags] if isinstance(flags, str) else flags):
            raise RuleSetError(f"{where}: unsupported: a verdict map with intervals")
        elements, verdicts = [], []
        try:
            for item in raw.get("elem", ()):
                key, verdict = item
                if isinstance(key, dict) and "elem" in key:
                    key = key["elem"].get("val")
                parts = key["concat"] if isinstance(key, dict) and "concat" in key else [key]
                if len(parts) != len(keys):
                    raise _Fail(f"element {json.dumps(key)} does not have {len(keys)} parts")
                element = []
                for k, part in zip(keys, parts):
                    if k == "number":
                        if not isinstance(part, int):
                            raise _Fail(f"unsupported: element {json.dumps(part)}")
                        element.append(part)
                        continue
                    choice = self._element_part(k, version, part)
                    if len(choice) != 1 or (k == "addr" and "/" in str(choice[0])):
                        raise _Fail(f"unsupported: element {json.dumps(part)} (a range "
                                    f"or prefix in a verdict map)")
                    element.append(choice[0])
                if "port" in keys and "proto" in keys and \
                        element[keys.index("proto")] not in ("tcp", "udp"):
                    raise _Fail(f"unsupported: element {json.dumps(key)} looks up a port "
                                f"of a protocol without ports")
                (vk, vv), = verdict.items()
                if vk not in ("accept", "drop", "return", "jump", "goto"):
                    raise _Fail(f"unsupported verdict {vk} in a verdict map")
                target = vv.get("target") if isinstance(vv, dict) else None
                if vk in ("jump", "goto") and target not in t["chains"]:
                    raise _Fail(f"{vk} to a missing chain {target!r}")
                elements.append(tuple(element))
                verdicts.append(Action(vk, chain=target))
        except (_Fail, RuleSetError) as e:
            raise RuleSetError(f"{where}: {e}") from None
        except (TypeError, KeyError, ValueError, AttributeError, IndexError):
            raise RuleSetError(f"{where}: malformed element") from None
        return Set(raw.get("name"), keys, tuple(elements), version,
                   verdicts=tuple(verdicts), inline=inline, map=not inline)

    def _vmap(self, t: dict, ctx: "_Rule", v: dict) -> Action:
        """`KEY vmap @map` or `KEY vmap { ... }`, KEY packet fields (one, or a
        concatenation) or `numgen random mod N [offset K]`."""
        key, data = v.get("key"), v.get("data")
        numgen = None
        if isinstance(key, dict) and "numgen" in key:
            numgen = _numgen(key["numgen"])
            fields, keys = ("number",), ("number",)
        else:
            parts = key["concat"] if isinstance(key, dict) and "concat" in key else [key]
            fields = tuple(self._concat_field(ctx, x) for x in parts)
            keys = tuple({"saddr": "addr", "daddr": "addr", "proto": "proto"}.get(f, "port")
                         for f in fields)
        if isinstance(data, str) and data.startswith("@"):
            name = data[1:]
            self._need_set(t, name)
            s = t["sets"][name]
            if not s.is_vmap:
                raise _Fail(f"vmap @{name}: not a verdict map")
        elif isinstance(data, dict) and "set" in data:
            name = f"vmap{next(self.anon)}"
            while name in self.set_names:
                name = f"vmap{next(self.anon)}"
            self.set_names.add(name)
            version = {"ip6": 6}.get(t["family"], 4)
            for item in data["set"]:
                k = item[0]
                first = k["concat"][0] if isinstance(k, dict) and "concat" in k else k
                if "addr" in keys and isinstance(first, str) and ":" in first:
                    version = 6
            s = self._vmap_set(t, {"name": name, "elem": data["set"]}, keys, version,
                               "anonymous verdict map", inline=True)
            t["sets"][name] = s
        else:
            raise _Fail(f"unsupported: vmap on {json.dumps(data)}")
        if s.keys != keys:
            raise _Fail(f"map {name} has keys {' . '.join(s.keys)}, looked up with "
                        f"{' . '.join(fields)}")
        if "port" in keys and "proto" not in keys and ctx.kw.get("proto") not in ("tcp", "udp"):
            # th dport reads any transport header: only a protocol (in the key or
            # the rule) keeps the lookup to the TCP and UDP packets that have ports.
            raise _Fail("unsupported: a verdict map on a port, without tcp or udp in its "
                        "key or its rule")
        return Action("vmap", vmap=SetRef(name, fields), numgen=numgen)

    def _numgen_match(self, ctx: "_Rule", op: str, ng: dict, right) -> None:
        """`numgen random mod N [offset K] OP V` as the model's random match: the
        share of the 2**32 random u32s whose value passes."""
        mod, offset = _numgen(ng)
        weight = numgen_weights(mod, offset)

        def below(c: int) -> int:       # u32s whose value is below offset + c
            c = min(max(c, 0), mod)
            return -(-c * RANDOM_SCALE // mod)
        if isinstance(right, int) and op in ("==", "!="):
            share = weight(right)
            if op == "!=":
                share = RANDOM_SCALE - share
        elif isinstance(right, int) and op in ("<", "<=", ">", ">="):
            c = right - offset + (op in ("<=", ">"))
            share = below(c) if op in ("<", "<=") else RANDOM_SCALE - below(c)
        elif isinstance(right, dict) and "set" in right and op in ("==", "in"):
            share = sum(weight(x) for x in set(right["set"]) if isinstance(x, int))
            if any(not isinstance(x, int) for x in right["set"]):
                raise _Fail("unsupported: numgen against a set with ranges")
        else:
            raise _Fail(f"unsupported: numgen {op} {json.dumps(right)}")
        if not 0 < share < RANDOM_SCALE:
            raise _Fail(f"unsupported: numgen random {op} {json.dumps(right)} always or "
                        f"never holds")
        ctx.set("random", share)

    def _elements(self, keys: tuple[str, ...], version: int, elems,
                  where: str) -> list[tuple]:
        out: list[tuple] = []
        noted: set[str] = set()
        for e in elems:
            if isinstance(e, dict) and "elem" in e:
                for key in e["elem"]:
                    if key in ("comment", "counter"):
                        noted.add(key)
                    elif key not in ("val", "timeout", "expires"):
                        raise _Fail(f"unsupported: element {key}")
                    # timeout, expires: _expires() reads them for the set's note
                e = e["elem"].get("val")
            parts = e["concat"] if isinstance(e, dict) and "concat" in e else [e]
            if len(parts) != len(keys):
                raise _Fail(f"element {json.dumps(e)} does not have {len(keys)} parts")
            choices = [self._element_part(k, version, p) for k, p in zip(keys, parts)]
            count = 1
            for c in choices:
                count *= len(c)
            if count > _MAX_EXPANDED:
                raise _Fail(f"unsupported: element {json.dumps(e)} spells out to "
                            f"{count} elements")
            out.extend(itertools.product(*choices))
        for key in sorted(noted):
            self.notes.append(f"{where}: element {key}s not kept (no verdict depends on "
                              f"them)")
        return out

    def _element_part(self, key: str, version: int, v) -> list:
        if key == "addr":
            return [_elem_text(n) for n in _networks(v, version)]
        if key == "proto":
            return [_proto(v)]
        lo, hi = _port_range(v)
        return list(range(lo, hi + 1))

    # --- rules -------------------------------------------------------------------

    def _rule(self, t: dict, r: dict) -> list[Rule]:
        ctx = _Rule()
        for e in r.get("expr", ()):
            if not isinstance(e, dict) or len(e) != 1:
                raise _Fail("an expression that is not one object")
            (key, val), = e.items()
            if key == "match":
                if ctx.actions:
                    raise _Fail("unsupported: a match after a statement")
                if "quota" in ctx.kw:
                    # It would refuse packets the quota has counted.
                    raise _Fail("unsupported: a match after a quota")
                self._match(t, ctx, val)
            elif key == "counter":
                if val is not None and not isinstance(val, dict):
                    raise _Fail(f"unsupported expression counter (named counter {val})")
                ctx.counter = True
                if val and (val.get("packets") or val.get("bytes")):
                    self.counts = True
            elif key == "limit":
                if ctx.actions:
                    raise _Fail("unsupported: a limit after a statement")
                if "quota" in ctx.kw:
                    raise _Fail("unsupported: a limit after a quota")
                ctx.kw["limit"] = _limit(val)
            elif key == "vmap":
                ctx.actions.append(self._vmap(t, ctx, val))
            elif key == "quota":
                if ctx.actions:
                    raise _Fail("unsupported: a quota after a statement")
                ctx.set("quota", _quota(val))
            else:
                ctx.actions.append(self._action(t, ctx, key, val))
        if ctx.sets:
            ctx.kw["sets"] = tuple(ctx.sets)
        if "limit" in ctx.kw and [k for k, _ in ctx.splits] == ["icmp type . code"]:
            # One rule must hold every pair: a limit is one budget for them all.
            (_, pairs), = ctx.splits
            ctx.splits = []
            ctx.kw["icmp_pairs"] = frozenset(pairs)
        matches = [self._one_match(t, ctx, kw) for kw in _variants(ctx)]
        if len(matches) > 1 and "limit" in ctx.kw:
            # One rule per element would give each element a budget of its own.
            raise _Fail(f"unsupported: a limit in a rule with an anonymous set of "
                        f"{ctx.splits[0][0]} (one budget for every element)")
        comment = r.get("comment")
        rid = None
        if comment:
            head, _, last = comment.rpartition(" ")
            if last.startswith(ID_TAG):
                rid, comment = last[len(ID_TAG):], head or None
        if not rid:
            rid = f"{t['id_prefix']}-{t['n']}"
        actions = ctx.actions or [Action("counter")]
        if any(a.terminal for a in actions[:-1]):
            raise _Fail("unsupported: a statement after a verdict")
        out = []
        for j, match in enumerate(matches, 1):
            vid = rid if j == 1 else f"{rid}:{j}"
            out += [Rule(f"{vid}.{k}", match, a, False, comment)
                    for k, a in enumerate(actions[:-1], 1)]
            out.append(Rule(vid, match, actions[-1], ctx.counter, comment))
        return out

    def _one_match(self, t: dict, ctx: "_Rule", kw: dict) -> Match:
        if ctx.th and kw.get("proto") not in ("tcp", "udp"):
            raise _Fail("unsupported: th port match without meta l4proto tcp or udp")
        if kw.get("proto") == "ah" and t["family"] == "ip6":
            raise _Fail("unsupported: ah in table ip6 (AH is an extension header in IPv6, "
                        "which the protocol match skips)")
        if ctx.pins:
            ctx.kw = kw
            self._pin_version(t, ctx)
        if ctx.fib and t["family"] != "ip" and not (
                set(ctx.pins) == {4} or kw.get("proto") == "icmp" or any(
                    p.version == 4 for p in (kw.get("src"), kw.get("dst")) if p)):
            raise _Fail("unsupported: fib address type of IPv6 packets (a fib match in "
                        "an ip6 or inet rule not pinned to IPv4)")
        return Match(**kw)

    def _match(self, t: dict, ctx: "_Rule", m: dict) -> None:
        op, left, right = m.get("op"), m.get("left"), m.get("right")
        if isinstance(left, dict) and "numgen" in left and left["numgen"].get("mode") == "inc":
            ctx.set("nth", _numgen_inc(op, left["numgen"], right))
            return
        if isinstance(left, dict) and "numgen" in left:
            self._numgen_match(ctx, op, left["numgen"], right)
            return
        if not isinstance(left, dict) or len(left) != 1:
            raise _Fail(f"unsupported match on {json.dumps(left)}")
        exthdr = left.get("exthdr")
        if isinstance(exthdr, dict) and (exthdr.get("field") is not None
                                         or (op == "==" and right is True)):
            # A field of an extension header, or the header's presence: nft's
            # exthdr breaks the rule where the packet has no such header.
            raise _Aside(f"exthdr {exthdr.get('name')} matches only packets with that "
                         f"IPv6 extension header, which the testbed never sends")
        if isinstance(left.get("meta"), dict) and left["meta"].get("key") in _SOCKET_META:
            # nft reads these from the packet's local socket and breaks the rule
            # where there is none (meta_get: sk NULL or not a full socket), for
            # `!=` and ranges alike.
            raise _Aside(f"meta {left['meta']['key']} matches only packets of a local "
                         f"socket, which no packet the testbed sends through the "
                         f"firewall has")
        if "tcp option" in left:
            ctx.proto("tcp")
            ctx.kw["tcp_options"] = ctx.kw.get("tcp_options", ()) + (
                _tcp_option(left["tcp option"], op, right),)
            return
        payload = left.get("payload") if isinstance(left.get("payload"), dict) else {}
        ipsec = f"{payload.get('protocol')} {payload.get('field')}"
        if ipsec in TESTBED_IPSEC:
            ctx.proto(payload["protocol"])
            if any(a.key == ipsec for a in ctx.kw.get("attrs", ())):
                raise _Fail(f"unsupported: two {ipsec} matches")
            ctx.kw["attrs"] = ctx.kw.get("attrs", ()) + (_attr(ipsec, op, right),)
            return
        if isinstance(left.get("meta"), dict) and left["meta"].get("key") in ATTR_KEYS:
            key = left["meta"]["key"]
            if any(a.key == key for a in ctx.kw.get("attrs", ())):
                raise _Fail(f"unsupported: two meta {key} matches")
            ctx.kw["attrs"] = ctx.kw.get("attrs", ()) + (_attr(key, op, right),)
            return
        if _everyday(t, ctx, op, left, right):
            return
        if op not in ("==", "!=", "in"):
            raise _Fail(f"unsupported match operator {op!r}")
        neg = op == "!="
        (lk, lv), = left.items()
        if isinstance(right, dict) and "set" in right and not neg and (
                lk == "meta" and lv.get("key") in _SPLIT_META):
            # One rule per element: the elements are disjoint (a packet has one
            # protocol, one interface), so the verdicts are the same.
            ctx.splits.append((lv["key"], list(right["set"])))
            return
        if lk == "payload":
            self._payload(t, ctx, lv, right, neg)
        elif lk == "meta":
            self._meta(ctx, lv.get("key"), right, neg, t["family"])
        elif lk == "ct" and lv == {"key": "mark"}:
            _mark(ctx, "ct_mark", right, neg)
        elif lk == "ct" and lv == {"key": "status"} and not neg and \
                set([right] if isinstance(right, str) else right or ()) <= {"dnat", "snat"}:
            ctx.set("ct_status", frozenset([right] if isinstance(right, str) else right))
        elif lk == "ct":
            if lv.get("key") != "state" or len(lv) != 1:
                what = " ".join(str(lv[k]) for k in ("dir", "key") if k in lv)
                raise _Fail(f"unsupported expression ct {what}")
            ctx.kw["ct_state"] = _ct_states(right, neg)
        elif lk == "&":
            what, mask = lv
            field = {"meta": "mark", "ct": "ct_mark"}.get(next(iter(what), None)) \
                if isinstance(what, dict) and len(what) == 1 and \
                next(iter(what.values())) == {"key": "mark"} else None
            if field is None or not isinstance(mask, int):
                raise _Fail(f"unsupported expression & on {json.dumps(what)}")
            ctx.set(field, (_int(right), mask & MASK32))
            ctx.kw[f"{field}_negate"] = neg
        elif lk == "concat" and _icmp_pairs(ctx, lv, right, neg):
            return
        elif lk == "concat":
            if not (isinstance(right, str) and right.startswith("@")):
                raise _Fail("unsupported: a concatenation matched against anything but "
                            "a named set")
            fields = [self._concat_field(ctx, x) for x in lv]
            ctx.sets.append(SetRef(right[1:], tuple(fields), neg))
            self._need_set(t, right[1:])
        else:
            raise _Fail(f"unsupported expression {lk}")

    def _payload(self, t: dict, ctx: "_Rule", p: dict, right, neg: bool) -> None:
        proto, field = p.get("protocol"), p.get("field")
        if proto is None:
            raise _Fail("unsupported expression payload (raw)")
        if proto in ("ip", "ip6") and field in ("saddr", "daddr"):
            version = 4 if proto == "ip" else 6
            key = "src" if field == "saddr" else "dst"
            if isinstance(right, str) and right.startswith("@"):
                ctx.sets.append(SetRef(right[1:], (field,), neg))
                self._need_set(t, right[1:])
                return
            fast = canonical4(right) if version == 4 and isinstance(right, str) else None
            if fast:
                ctx.set(key, Prefix(fast, neg))
                return
            nets = _networks(right, version)
            if len(nets) == 1:
                ctx.set(key, Prefix(str(nets[0]), neg))
            else:
                name = self._anon_set(t, nets, version)
                ctx.sets.append(SetRef(name, (field,), neg))
        elif (proto, field) == ("ip", "protocol"):
            if neg:
                raise _Fail(f"unsupported: {proto} {field} !=")
            # An IPv4 header's field: in inet and netdev only IPv4 packets match.
            ctx.proto(_proto(right))
            ctx.pin(4, "ip protocol")
        elif (proto, field) == ("ip6", "nexthdr"):
            raise _Fail("unsupported: ip6 nexthdr (the header after IPv6's own, an "
                        "extension header as likely as the transport: meta l4proto "
                        "is that)")
        elif proto in ("tcp", "udp", "th") and field in ("sport", "dport"):
            if proto == "th":
                ctx.th = True
            else:
                ctx.proto(proto)
            if isinstance(right, str) and right.startswith("@"):
                ctx.sets.append(SetRef(right[1:], (field,), neg))
                self._need_set(t, right[1:])
                return
            items = right["set"] if isinstance(right, dict) and "set" in right else [right]
            ctx.set(field, Ports.of(*(_port_range(x) for x in items), negate=neg))
        elif proto in ("icmp", "icmpv6") and field == "type":
            if neg:
                raise _Fail(f"unsupported: {proto} type !=")
            ctx.proto(proto)
            names = ICMP_TYPES if proto == "icmp" else ICMPV6_TYPES
            if isinstance(right, dict) and "set" in right:
                types = frozenset(_icmp(proto, x, names) for x in right["set"])
                if len(types) == 1:
                    ctx.set("icmp_type", next(iter(types)))
                else:
                    ctx.set("icmp_types", types)
                return
            ctx.set("icmp_type", _icmp(proto, right, names))
        else:
            raise _Fail(f"unsupported expression payload {proto} {field}")

    def _meta(self, ctx: "_Rule", key, right, neg: bool, family: str) -> None:
        if key in ("iifname", "oifname", "iif", "oif"):
            if not isinstance(right, str):
                raise _Fail(f"unsupported: meta {key} against {json.dumps(right)}")
            ctx.set("iif" if key.startswith("i") else "oif", Iface(_iface_name(right), neg))
        elif key == "l4proto":
            if neg:
                raise _Fail("unsupported: meta l4proto !=")
            ctx.proto(_proto(right))
        elif key == "mark":
            _mark(ctx, "mark", right, neg)
        elif key == "nfproto" and right in ("ipv4", "ipv6") and family != "netdev":
            # inet and the ip families see IPv4 and IPv6 only: `!=` is the other.
            ctx.pin(4 if (right == "ipv4") != neg else 6, f"meta nfproto {right}")
        elif key == "protocol" and right in ("ip", "ip6") and not neg:
            ctx.pin(4 if right == "ip" else 6, f"meta protocol {right}")
        else:
            raise _Fail(f"unsupported expression meta {key}")

    def _concat_field(self, ctx: "_Rule", x: dict) -> str:
        if x == {"meta": {"key": "l4proto"}}:
            return "proto"
        if x == {"payload": {"protocol": "ip", "field": "protocol"}}:
            ctx.pin(4, "ip protocol")
            return "proto"
        p = x.get("payload") if isinstance(x, dict) else None
        if p and p.get("protocol") in ("ip", "ip6") and p.get("field") in ("saddr", "daddr"):
            return p["field"]
        if p and p.get("protocol") in ("tcp", "udp", "th") and \
                p.get("field") in ("sport", "dport"):
            if p["protocol"] != "th":
                ctx.proto(p["protocol"])
            return p["field"]
        raise _Fail(f"unsupported expression {json.dumps(x)} in a concatenation")

    def _pin_version(self, t: dict, ctx: "_Rule") -> None:
        """What restricted the rule to one IP version (`meta nfproto ipv6`, `ip
        protocol`, `reject with icmpv6 ...`) as Match.ip_version, where nothing
        else of the rule (addresses, ICMP, address sets) says it already; a rule
        restricted to both versions, or to the other one, matches nothing and is
        refused."""
        kw = ctx.kw
        (v, what), *other = ctx.pins.items()
        if other:
            raise _Fail(f"unsupported: {what} with {other[0][1]} (a rule that never "
                        f"matches)")
        pinned = {p.version for p in (kw.get("src"), kw.get("dst")) if p}
        pinned |= {"ip": {4}, "ip6": {6}}.get(t["family"], set())
        pinned |= {t["sets"][r.name].version for r in ctx.sets
                   if {"saddr", "daddr"} & set(r.fields)}
        if kw.get("proto") in ("icmp", "icmpv6", "ah"):
            pinned.add(6 if kw["proto"] == "icmpv6" else 4)
        if pinned - {v}:
            raise _Fail(f"unsupported: {what} with IPv{(pinned - {v}).pop()} matches (a "
                        f"rule that never matches)")
        if not pinned and t["family"] in ("inet", "netdev"):
            kw["ip_version"] = v

    def _need_set(self, t: dict, name: str) -> None:
        if name not in t["sets"]:
            raise _Fail(f"no set {name!r} in table {t['family']} {t['name']}")

    def _anon_set(self, t: dict, nets: list, version: int) -> str:
        name = f"anon{next(self.anon)}"
        while name in self.set_names:
            name = f"anon{next(self.anon)}"
        self.set_names.add(name)
        elements = tuple((_elem_text(n),) for n in nets)
        t["sets"][name] = Set(name, ("addr",), elements, version,
                              any(n.prefixlen != n.max_prefixlen for n in nets))
        self.notes.append(f"{self.source}: table {t['family']} {t['name']}: an anonymous "
                          f"address set became set {name}")
        return name

    def _action(self, t: dict, ctx: "_Rule", key: str, val) -> Action:
        if key in ("accept", "drop", "return", "notrack"):
            return Action(key)
        if key in ("jump", "goto"):
            target = val.get("target") if isinstance(val, dict) else None
            if target not in t["chains"]:
                raise _Fail(f"{key} to a missing chain {target!r}")
            return Action(key, chain=target)
        if key == "reject":
            with_, version = _reject(val)
            if with_ == "tcp-reset":
                # nft gives `reject with tcp reset` a `meta l4proto tcp` of its
                # own, which it lists as part of the reject.
                ctx.proto("tcp")
            elif version:
                # ... and one of the ICMP types of one IP version a `meta nfproto`
                # (inet) or `meta protocol` (netdev), listed as part of it too.
                ctx.pin(version, f"reject with {val['type']}")
            return Action("reject", reject_with=with_)
        if key == "mangle":
            return _mangle(val)
        if key in ("dnat", "snat"):
            val = dict(val or {})
            random_port = key == "snat" and _fully_random(val)
            extra = set(val) - {"addr", "port", "family"}
            if extra:
                raise _Fail(f"unsupported: {key} {sorted(extra)[0]}")
            addr = val.get("addr")
            if not isinstance(addr, str):
                raise _Fail(f"unsupported: {key} to {json.dumps(addr)}")
            try:
                addr = str(ipaddress.ip_address(addr))
            except ValueError:
                raise _Fail(f"not an address: {addr!r}") from None
            port, port_hi = _nat_ports(key, val.get("port"))
            return Action(key, addr=addr, port=port, random_port=random_port, port_hi=port_hi)
        if key == "redirect" or key == "masquerade":
            val = dict(val or {})
            random_port = _fully_random(val) if key == "masquerade" else False
            port, port_hi = _nat_ports(key, val.pop("port", None))
            if val:
                raise _Fail(f"unsupported: {key} {sorted(val)[0]}")
            # To one port, fully-random has no other to choose.
            return Action(key, port=port, random_port=random_port and (
                port is None or port_hi is not None), port_hi=port_hi)
        if key == "log":
            val = dict(val or {})
            prefix = val.pop("prefix", None)
            if "group" in val:
                # nflog, to a netlink listener, as iptables' NFLOG: held as iptables'
                # is (a rule that only counts), not as a log to the kernel's ring.
                self.notes.append(f"{self.source}: {self.where}: log group {val['group']} "
                                  f"left out (the rule only counts; no verdict depends "
                                  f"on it)")
                return Action("counter")
            if val:
                self.notes.append(f"{self.source}: {self.where}: log "
                                  f"{', '.join(sorted(val))} ignored (only the prefix is kept)")
            return Action("log", log_prefix=prefix)
        if key in ("set", "meter") and isinstance(val, dict):
            # The model's sets are what the file says; these change with traffic.
            what = f"{val.get('op')} {val.get('set')}" if key == "set" \
                else f"meter {val.get('name')}"
            raise _Fail(f"unsupported: {what} (a set the packet path updates)")
        raise _Fail(f"unsupported expression {key}")


class _Rule:
    """What one rule's expressions have said so far."""

    def __init__(self):
        self.kw: dict = {}
        self.sets: list[SetRef] = []
        self.actions: list[Action] = []
        self.counter = False
        self.th = False
        self.pins: dict[int, str] = {}   # IP version -> the expression that said it
        self.fib = False   # an address type match (IPv4 only)
        # Anonymous sets of protocols or interfaces: (meta key, elements); the
        # rule becomes one rule per element.
        self.splits: list[tuple[str, list]] = []

    def pin(self, version: int, what: str) -> None:
        self.pins.setdefault(version, what)

    def set(self, field: str, value) -> None:
        if field in self.kw:
            raise _Fail(f"unsupported: two matches on {field}")
        self.kw[field] = value

    def proto(self, proto: str) -> None:
        have = self.kw.get("proto")
        if have is not None and have != proto:
            raise _Fail(f"unsupported: protocol {have} and {proto} in one rule")
        self.kw["proto"] = proto


# --- the everyday matches ---------------------------------------------------------

_SPLIT_META = {"l4proto": "proto", "iifname": "iif", "oifname": "oif"}
# Meta keys of the packet's local socket: the owner's user and group, its cgroup.
_SOCKET_META = ("skuid", "skgid", "cgroup")
_TCP_FLAGS_PAYLOAD = {"payload": {"protocol": "tcp", "field": "flags"}}
# nft's ICMP and ICMPv6 code names.
ICMP_CODES = {"net-unreachable": 0, "host-unreachable": 1, "prot-unreachable": 2,
              "port-unreachable": 3, "frag-needed": 4, "net-prohibited": 9,
              "host-prohibited": 10, "admin-prohibited": 13}
ICMPV6_CODES = {"no-route": 0, "admin-prohibited": 1, "addr-unreachable": 3,
                "port-unreachable": 4, "policy-fail": 5, "reject-route": 6}
_BOUNDS = {"<": (None, -1), "<=": (None, 0), ">": (1, None), ">=": (0, None)}


def _everyday(t: dict, ctx: "_Rule", op, left: dict, right) -> bool:
    """TCP flags, ICMP codes, TTL / hop limit, length, packet type and fib address
    type; False when `left` is none of them."""
    (lk, lv), = left.items()
    if lk == "&" and lv[0] == _TCP_FLAGS_PAYLOAD:
        ctx.proto("tcp")
        mask = _tcp_flags(lv[1])
        if op not in ("==", "!="):
            raise _Fail(f"unsupported: tcp flags & ... {op}")
        values = right["set"] if isinstance(right, dict) and "set" in right else [right]
        ctx.set("tcp_flags", TcpFlags(mask, frozenset(_tcp_flags(v) & mask for v in values),
                                      op == "!="))
        return True
    if left == _TCP_FLAGS_PAYLOAD:
        ctx.proto("tcp")
        if isinstance(right, dict) and "set" in right:
            if op not in ("==", "!="):
                raise _Fail(f"unsupported: tcp flags {op} a set")
            f = TcpFlags(0xFF, frozenset(_tcp_flags(v) for v in right["set"]), op == "!=")
        elif op in ("==", "!="):
            f = TcpFlags(0xFF, frozenset({_tcp_flags(right)}), op == "!=")
        elif op == "in":        # any of the flags set
            f = TcpFlags(_tcp_flags(right), frozenset({0}), True)
        elif op == "!":         # none of them set
            f = TcpFlags(_tcp_flags(right), frozenset({0}))
        else:
            raise _Fail(f"unsupported: tcp flags {op}")
        ctx.set("tcp_flags", f)
        return True
    if lk == "payload" and lv.get("protocol") in ("icmp", "icmpv6") and             lv.get("field") == "code":
        proto = lv["protocol"]
        ctx.proto(proto)
        if op != "==":
            raise _Fail(f"unsupported: {proto} code {op}")
        names = ICMP_CODES if proto == "icmp" else ICMPV6_CODES
        ctx.set("icmp_code", _icmp(f"{proto} code", right, names))
        return True
    what = None
    if lk == "payload" and (lv.get("protocol"), lv.get("field")) in (("ip", "ttl"),
                                                                    ("ip6", "hoplimit")):
        # An ip/ip6 header field: only packets of that version have it (pinned; a
        # rule pinned to the other too is refused as one that never matches).
        ctx.pin(4 if lv["protocol"] == "ip" else 6, f"{lv['protocol']} {lv['field']}")
        what, top = "ttl", 255
    elif left in ({"meta": {"key": "length"}},
                  {"payload": {"protocol": "ip", "field": "length"}}):
        if "payload" in left:
            ctx.pin(4, "ip length")
        what, top = "length", 65535
    if what is not None:
        if isinstance(right, dict) and "set" in right and op in ("==", "!="):
            # One rule per disjoint range of the set (`!=`: of what it leaves out).
            ranges = merge_ranges(_int_range(x) for x in right["set"])
            if op == "!=":
                ranges = complement_ranges(ranges, 0, top)
            if not ranges or ranges[-1][1] > top:
                raise _Fail(f"unsupported: {what} set {json.dumps(right)} "
                            f"that matches no packet, or past {top}")
            ctx.splits.append((what, [Range(lo, hi) for lo, hi in ranges]))
            return True
        ctx.set(what, _relation(op, right, top))
        return True
    if left == {"meta": {"key": "pkttype"}}:
        if op not in ("==", "!="):
            raise _Fail(f"unsupported: meta pkttype {op}")
        items = right["set"] if isinstance(right, dict) and "set" in right else [right]
        if any(x not in PKT_TYPES for x in items):
            raise _Fail(f"unsupported: meta pkttype {json.dumps(right)}")
        ctx.set("pkttype", frozenset(items))
        ctx.kw["pkttype_negate"] = op == "!="
        return True
    if lk == "fib":
        flags = lv.get("flags") or []
        if lv.get("result") != "type" or flags not in (["saddr"], ["daddr"]) \
                or op not in ("==", "!="):
            raise _Fail(f"unsupported: fib {json.dumps(lv)}")
        items = right["set"] if isinstance(right, dict) and "set" in right else [right]
        if any(x not in ADDR_TYPES for x in items):
            raise _Fail(f"unsupported: fib type {json.dumps(right)}")
        side = "src" if flags == ["saddr"] else "dst"
        have = ctx.kw.get("addrtype") or AddrType()
        if getattr(have, side) is not None:
            raise _Fail(f"unsupported: two fib {flags[0]} type matches")
        ctx.kw["addrtype"] = AddrType(**{**have.__dict__, side: frozenset(items),
                                         f"{side}_negate": op == "!="})
        ctx.fib = True
        return True
    return False


# nft's names for interface groups (iproute2's group file: `default` only, as
# Debian ships it) and types (ARPHRD_*, as nft 1.0.6 names them).
GROUP_NAMES = {"default": 0}
IFTYPE_NAMES = {"ether": 1, "ppp": 512, "ipip": 768, "ipip6": 769, "loopback": 772,
                "sit": 776, "ipgre": 778}


def _attr(key: str, op, right) -> Attr:
    """`meta iifgroup|oifgroup|iiftype|oiftype|priority OP VALUE(S)` as an Attr."""
    items = right["set"] if isinstance(right, dict) and "set" in right else [right]
    ranges = []
    for x in items:
        lo, hi = x["range"] if isinstance(x, dict) and "range" in x else (x, x)
        if key.endswith("type") and (lo, hi) != (x, x):
            # nft 1.0.6 lists such a range's bounds byte-swapped (2-5 as "ppp"-5).
            raise _Fail(f"unsupported: meta {key} range (nft's JSON lists its bounds "
                        f"byte-swapped)")
        ranges.append((_attr_value(key, lo), _attr_value(key, hi)))
    top = 2 ** TESTBED_IPSEC.get(key, (0, 32))[1] - 1
    if op in _BOUNDS and len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        low, high = _BOUNDS[op]
        v = ranges[0][0]
        ranges = [(0, v + high)] if low is None else [(v + low, top)]
        op = "=="
    if op not in ("==", "!=", "in") or not all(0 <= lo <= hi <= top for lo, hi in ranges):
        raise _Fail(f"unsupported: {key if ' ' in key else 'meta ' + key} {op} "
                    f"{json.dumps(right)}")
    # As written (sorted, each once): nft lists a set of single values as such,
    # which merged neighbours (ipip, ipip6) would turn into a range.
    return Attr(key, tuple(sorted(set(ranges))), op == "!=")


def _nat_ports(key: str, port) -> tuple[int | None, int | None]:
    """A NAT statement's port: None, one, or (masquerade and snat) a source port
    range (first, last)."""
    if port is None or (isinstance(port, int) and 0 < port < 65536):
        return port, None
    if key in ("masquerade", "snat") and isinstance(port, dict) and "range" in port:
        lo, hi = port["range"]
        if isinstance(lo, int) and isinstance(hi, int) and 0 < lo <= hi < 65536:
            return lo, (hi if hi > lo else None)
    raise _Fail(f"unsupported: {key} to port {json.dumps(port)}")


def _tcp_option(spec, op, right) -> TcpOption:
    """`tcp option NAME [FIELD] ...` or `tcp option N exists|missing` (nft lists a
    kind without a name as a raw read of its first byte, `base` N)."""
    if not isinstance(spec, dict):
        raise _Fail(f"unsupported: tcp option {json.dumps(spec)}")
    if "base" in spec:
        kind = spec["base"]
        if spec.get("offset") != 0 or spec.get("len") != 8 or not isinstance(kind, int):
            raise _Fail(f"unsupported: tcp option {json.dumps(spec)}")
        field = None
    else:
        name, field = spec.get("name"), spec.get("field")
        kind = TCP_OPTION_KINDS.get(name)
        if kind is None:
            raise _Fail(f"unsupported: tcp option {name}")
    if field is None:
        if op not in ("==", "!=") or not isinstance(right, bool):
            raise _Fail(f"unsupported: tcp option {spec.get('name', kind)} {op} "
                        f"{json.dumps(right)}")
        return TcpOption(kind, negate=right == (op == "!="))
    where = (1, 1) if field == "length" else \
        TCP_OPTION_FIELDS.get(spec.get("name"), {}).get(field)
    if where is None:
        raise _Fail(f"unsupported: tcp option {spec.get('name')} {field}")
    offset, length = where
    top = (1 << (8 * length)) - 1
    items = right["set"] if isinstance(right, dict) and "set" in right else [right]
    ranges = sorted({_int_range(x) for x in items})   # as written, each once
    if op in _BOUNDS and len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        low, high = _BOUNDS[op]
        v = ranges[0][0]
        ranges, op = ([(0, v + high)] if low is None else [(v + low, top)]), "=="
    if op not in ("==", "!=", "in") or not ranges or not all(
            0 <= lo <= hi <= top for lo, hi in ranges):
        raise _Fail(f"unsupported: tcp option {spec.get('name')} {field} {op} "
                    f"{json.dumps(right)}")
    return TcpOption(kind, offset, length, tuple(ranges), op == "!=")


def _attr_value(key: str, v) -> int:
    if isinstance(v, int):
        return v
    if key == "ah nexthdr" and isinstance(v, str) and v in PROTO_NUMBERS:
        return PROTO_NUMBERS[v]
    if key == "ah nexthdr" and v == "ipv6-nonxt":
        return 59
    names = GROUP_NAMES if key.endswith("group") else IFTYPE_NAMES if key.endswith("type") \
        else {"none": 0, "root": 0xFFFFFFFF}
    if isinstance(v, str) and v in names:
        return names[v]
    if key == "priority" and isinstance(v, str) and ":" in v:
        major, _, minor = v.partition(":")
        try:
            return (int(major or "0", 16) << 16) | int(minor or "0", 16)
        except ValueError:
            pass
    raise _Fail(f"unsupported: {key if ' ' in key else 'meta ' + key} {json.dumps(v)}")


def _mark(ctx: "_Rule", field: str, right, neg: bool) -> None:
    """`meta mark` / `ct mark` against a value, a prefix (`0xffffff00/24`: the
    mask of its first bits) or a set of values (one rule per value: a packet has
    one mark, so at most one of them matches)."""
    if isinstance(right, dict) and "prefix" in right:
        bits = _int(right["prefix"].get("len"))
        if not 0 <= bits <= 32:
            raise _Fail(f"unsupported: mark prefix /{bits}")
        mask = (MASK32 << (32 - bits)) & MASK32
        ctx.set(field, (_int(right["prefix"].get("addr")) & mask, mask))
    elif isinstance(right, dict) and "set" in right:
        if neg:
            raise _Fail(f"unsupported: {field.replace('_', ' ')} != a set (the model "
                        f"holds one value under a mask, or its negation)")
        values = sorted({_int(x) & MASK32 for x in right["set"]})
        ctx.splits.append((field, [(v, MASK32) for v in values]))
        return
    elif isinstance(right, dict) and "range" in right:
        raise _Fail(f"unsupported: {field.replace('_', ' ')} range (the model holds "
                    f"a value under a mask)")
    else:
        ctx.set(field, (_int(right) & MASK32, MASK32))
    ctx.kw[f"{field}_negate"] = neg


def _icmp_pairs(ctx: "_Rule", parts: list, right, neg: bool) -> bool:
    """`icmp type . icmp code { t . c, ... }` (fw4 writes it): one rule per pair,
    as the pairs are disjoint. False when `parts` is no ICMP type and code."""
    proto = parts[0].get("payload", {}).get("protocol") if isinstance(parts[0], dict) else None
    if proto not in ("icmp", "icmpv6") or parts != [
            {"payload": {"protocol": proto, "field": "type"}},
            {"payload": {"protocol": proto, "field": "code"}}]:
        return False
    if neg or not (isinstance(right, dict) and "set" in right):
        raise _Fail(f"unsupported: {proto} type . code other than == a set of pairs")
    types, codes = (ICMP_TYPES, ICMP_CODES) if proto == "icmp" else (ICMPV6_TYPES, ICMPV6_CODES)
    pairs = []
    for e in right["set"]:
        t, c = e["concat"]
        pairs.append((_icmp(f"{proto} type", t, types), _icmp(f"{proto} code", c, codes)))
    ctx.proto(proto)
    ctx.splits.append(("icmp type . code", pairs))
    return True


def _tcp_flags(v) -> int:
    """A flag name, a list of them (ORed), an `|` expression or a number."""
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        if v not in TCP_FLAGS:
            raise _Fail(f"unsupported tcp flag {json.dumps(v)}")
        return TCP_FLAGS[v]
    if isinstance(v, dict) and "|" in v:
        v = v["|"]
    if isinstance(v, list):
        out = 0
        for x in v:
            out |= _tcp_flags(x)
        return out
    raise _Fail(f"unsupported tcp flags {json.dumps(v)}")


def _icmp(what: str, v, names: dict) -> int:
    if isinstance(v, int) and 0 <= v <= 255:
        return v
    if isinstance(v, str) and v in names:
        return names[v]
    raise _Fail(f"unsupported {what} {json.dumps(v)}")


def _relation(op, right, top: int) -> Range:
    """`== n`, `!= n`, `== a-b`, `!= a-b`, `< n`, `<= n`, `> n`, `>= n` as a Range."""
    if isinstance(right, dict) and "range" in right:
        lo, hi = (_int(x) for x in right["range"])
    else:
        lo = hi = _int(right)
    if op in _BOUNDS and lo == hi:
        low, high = _BOUNDS[op]
        lo, hi = (0, lo + high) if low is None else (lo + low, top)
        op = "=="
    if op not in ("==", "!="):
        raise _Fail(f"unsupported match operator {op!r}")
    if not 0 <= lo <= hi <= top:
        raise _Fail(f"unsupported: a range {lo}-{hi} that matches no packet")
    return Range(lo, hi, op == "!=")


def _variants(ctx: "_Rule") -> list[dict]:
    """The rule's matches, one per combination of its split sets' elements."""
    out = [dict(ctx.kw)]
    for key, items in ctx.splits:
        field = _SPLIT_META.get(key, key)
        new = []
        for kw in out:
            for x in items:
                if field == "icmp type . code":
                    if "icmp_type" in kw or "icmp_code" in kw or "icmp_types" in kw:
                        raise _Fail("unsupported: two ICMP type matches in one rule")
                    new.append({**kw, "icmp_type": x[0], "icmp_code": x[1]})
                elif field in ("ttl", "length", "mark", "ct_mark"):
                    if field in kw:
                        raise _Fail(f"unsupported: two matches on {field}")
                    new.append({**kw, field: x})
                elif field == "proto":
                    p = _proto(x)
                    if kw.get("proto") not in (None, p):
                        continue    # cannot match: another protocol is required
                    new.append({**kw, "proto": p})
                else:
                    if field in kw or not isinstance(x, str):
                        raise _Fail(f"unsupported: meta {key} set {json.dumps(items)}")
                    new.append({**kw, field: Iface(_iface_name(x))})
        out = new
    if not out:
        raise _Fail("unsupported: a protocol set no element of which fits the rule")
    return out


def _iface_name(name: str) -> str:
    return name[:-1] + "+" if name.endswith("*") and not name.endswith("\\*") \
        else name.replace("\\*", "*")


# --- values ------------------------------------------------------------------------

def _int(v) -> int:
    if isinstance(v, int):
        return v
    try:
        return int(str(v), 0)
    except ValueError:
        raise _Fail(f"not a number: {json.dumps(v)}") from None


def _proto(v) -> str:
    p = _PROTO_NAMES.get(str(v).lower())
    if p is None:
        why = REFUSED_PROTOS.get(str(v).lower())
        raise _Fail(f"unsupported protocol {json.dumps(v)}" + (f": {why}" if why else ""))
    return p


def _int_range(v) -> tuple[int, int]:
    """A number or `{"range": [a, b]}` as an inclusive range."""
    if isinstance(v, dict) and "range" in v and len(v["range"]) == 2:
        lo, hi = (_int(x) for x in v["range"])
        return (lo, hi) if lo <= hi else (hi, lo)
    n = _int(v)
    return n, n


def _port_range(v) -> tuple[int, int]:
    if isinstance(v, dict) and "range" in v:
        lo, hi = v["range"]
        return _int(lo), _int(hi)
    if isinstance(v, int):
        return v, v
    raise _Fail(f"unsupported port {json.dumps(v)}")


def _networks(v, version: int) -> list:
    """An address, prefix, range or anonymous set of them as the networks that
    cover exactly the same addresses."""
    try:
        if isinstance(v, str):
            if v.startswith("@"):
                raise _Fail(f"set {v} where an address was expected")
            nets = [ipaddress.ip_network(v)]
        elif isinstance(v, dict) and "prefix" in v:
            nets = [ipaddress.ip_network(f"{v['prefix']['addr']}/{v['prefix']['len']}",
                                         strict=False)]
        elif isinstance(v, dict) and "range" in v:
            lo, hi = (ipaddress.ip_address(x) for x in v["range"])
            nets = list(ipaddress.summarize_address_range(lo, hi))
        elif isinstance(v, dict) and "set" in v:
            nets = [n for x in v["set"] for n in _networks(x, version)]
        else:
            raise _Fail(f"unsupported address {json.dumps(v)}")
    except (ValueError, TypeError, KeyError):
        raise _Fail(f"not an address: {json.dumps(v)}") from None
    for n in nets:
        if n.version != version:
            raise _Fail(f"IPv{n.version} address {n} where IPv{version} was expected")
    return nets


def _expires(e, default) -> int:
    """In how many seconds a set element expires (0: never): what the kernel's
    listing says is left, else its timeout, else its set's."""
    if isinstance(e, dict) and "elem" in e:
        e = e["elem"]
        left = e.get("expires", e.get("timeout", default))
    else:
        left = default
    if not isinstance(left, int) or isinstance(left, bool) or left < 0:
        raise _Fail(f"unsupported: element timeout {json.dumps(left)}")
    return left


def _elem_text(n) -> str:
    """A set element's address as the model writes it: plain for one address."""
    return str(n.network_address) if n.prefixlen == n.max_prefixlen else str(n)


def _ct_states(v, neg: bool) -> frozenset[str]:
    items = v["set"] if isinstance(v, dict) and "set" in v else \
        v if isinstance(v, list) else [v]
    states = set()
    for s in items:
        if s not in CT_STATES:
            raise _Fail(f"unsupported ct state {json.dumps(s)}")
        states.add(s)
    # Every packet has exactly one of CT_STATES, so a negation is the rest.
    return frozenset(CT_STATES) - states if neg else frozenset(states)


def _limit(v: dict) -> Limit:
    """An anonymous limit, in packets or (held as bytes) in bytes, `over` or not."""
    if not isinstance(v, dict):
        raise _Fail(f"unsupported: named limit {json.dumps(v)}")
    raw, v = v, dict(v)
    over = bool(v.pop("inv", False))
    per = v.pop("per", "second")
    if per not in _LIMIT_PER:
        raise _Fail(f"unsupported: limit per {per}")
    rate_unit, burst_unit = v.pop("rate_unit", "packets"), v.pop("burst_unit", None)
    if rate_unit == "packets":
        if burst_unit not in (None, "packets"):
            raise _Fail(f"unsupported: limit {json.dumps(raw)}")
        rate, burst = _int(v.pop("rate", 0)), _int(v.pop("burst", 5))
        in_bytes = False
    else:
        try:
            rate = _int(v.pop("rate", 0)) * _BYTE_UNITS[rate_unit]
            burst = _int(v.pop("burst", 0)) * _BYTE_UNITS[burst_unit or "bytes"]
        except KeyError:
            raise _Fail(f"unsupported: limit {json.dumps(raw)}") from None
        in_bytes = True
    if v:
        raise _Fail(f"unsupported: limit {sorted(v)[0]}")
    return Limit(rate, per, burst, over=over, bytes=in_bytes)


_BYTE_UNITS = {"bytes": 1, "kbytes": 1024, "mbytes": 1024 ** 2}


def _quota(v) -> Quota:
    """An anonymous quota. A named one (`quota name "q"`) shares its bytes with
    every rule that names it, which the model's one quota per rule cannot say."""
    if not isinstance(v, dict):
        raise _Fail(f"unsupported: named quota {json.dumps(v)}")
    raw, v = v, dict(v)
    over = bool(v.pop("inv", False))
    try:
        total = _int(v.pop("val")) * _BYTE_UNITS[v.pop("val_unit", "bytes")]
        used = _int(v.pop("used", 0)) * _BYTE_UNITS[v.pop("used_unit", "bytes")]
    except KeyError:
        raise _Fail(f"unsupported: quota {json.dumps(raw)}") from None
    if v:
        raise _Fail(f"unsupported: quota {sorted(v)[0]}")
    return Quota(total, over, used)


def _reject(v) -> tuple[str | None, int | None]:
    """A reject's type as the model names it (iptables' --reject-with names, and
    `icmpx-TYPE`), and the IP version it belongs to (None: either)."""
    if not v:
        return None, None
    kind, code = v.get("type"), v.get("expr")
    if kind == "tcp reset" and code is None:
        return "tcp-reset", None
    names = _REJECT_TYPES.get(kind)
    if names is None or code not in names:
        raise _Fail(f"unsupported: reject {json.dumps(v)}")
    return names[code], {"icmp": 4, "icmpv6": 6}.get(kind)


def _fully_random(val: dict) -> bool:
    """Takes nft's `fully-random` flag out of a NAT statement's options (the
    kernel then picks the source port at random); other flags are left to refuse."""
    flags = val.pop("flags", None)
    if flags is None:
        return False
    flags = [flags] if isinstance(flags, str) else list(flags)
    if flags != ["fully-random"]:
        raise _Fail(f"unsupported: NAT flags {', '.join(map(str, flags))}")
    return True


def _numgen_inc(op: str, ng: dict, right) -> tuple[int, int]:
    """`numgen inc mod N [offset K] == V` as the model's (every, phase): the rule's
    counter gives its k-th packet k % N + K."""
    mod, offset = ng.get("mod"), ng.get("offset", 0)
    if not isinstance(mod, int) or not isinstance(offset, int) or not isinstance(right, int) \
            or op != "==":
        raise _Fail(f"unsupported: numgen inc {op} {json.dumps(right)} (only ==)")
    mod &= MASK32
    if mod < 2 or not 0 <= right - offset < mod:
        raise _Fail(f"unsupported: numgen inc mod {mod} == {right}, which always or never "
                    f"holds")
    return mod, right - offset


def _numgen(ng: dict) -> tuple[int, int]:
    """numgen's (mod, offset); nft 1.0.6 lists a modulus of 2**31 or more as a
    negative number (its JSON prints the u32 signed), read back here."""
    if ng.get("mode") != "random":
        # numgen inc counts the packets through the rule: which packet gets which
        # value depends on every packet before it, which no per-packet check sees.
        raise _Fail(f"unsupported: numgen {ng.get('mode')} (only random)")
    mod, offset = ng.get("mod"), ng.get("offset", 0)
    if not isinstance(mod, int) or not isinstance(offset, int):
        raise _Fail("malformed numgen")
    mod, offset = mod & MASK32, offset & MASK32
    if mod == 0:
        raise _Fail("numgen mod 0")
    return mod, offset


def _mangle(v: dict) -> Action:
    """`meta mark set` and `ct mark set` in their forms, as the model's `mark =
    (mark & ~mask) ^ value` on the packet's or the connection's mark, and the
    copies between the two (CONNMARK's save and restore without masks)."""
    key, val = v.get("key"), v.get("value")
    if key == {"tcp option": {"name": "maxseg", "field": "size"}}:
        # MSS clamping: to the route's path MTU, or to a number.
        if val == {"rt": {"key": "mtu"}}:
            return Action("tcpmss")
        if isinstance(val, int) and 0 < val < 65536:
            return Action("tcpmss", mss=val)
        raise _Fail(f"unsupported: tcp option maxseg size set {json.dumps(val)}")
    meta_, ct_ = {"meta": {"key": "mark"}}, {"ct": {"key": "mark"}}
    if key == ct_ and val == meta_:
        return Action("savemark")
    if key == meta_ and val == ct_:
        return Action("restoremark")
    if key == ct_:
        a = _mark_value(val, ct_, "ct mark set")
        return Action("ctmark", mark=a.mark, mark_mask=a.mark_mask)
    if key != meta_:
        raise _Fail(f"unsupported expression mangle {json.dumps(key)}")
    return _mark_value(val, meta_, "meta mark set")


def _mark_value(val, mark_: dict, what: str) -> Action:
    """A mark statement's value: a number, or the mark itself with |, &, ^."""
    if isinstance(val, int):
        return Action("mark", mark=val & MASK32)
    if isinstance(val, dict) and "|" in val:
        a, b = val["|"]
        if a == mark_ and isinstance(b, int):
            return Action("mark", mark=b, mark_mask=b)
        if isinstance(a, dict) and "&" in a and a["&"][0] == mark_ and \
                isinstance(a["&"][1], int) and isinstance(b, int):
            # (mark & keep) | b: nft lists `& 0xffff00ff | 0x100` as `& 0xffff01ff |
            # 0x100`, so the bits b sets may lie in keep as well.
            keep = a["&"][1] & MASK32
            return Action("mark", mark=b, mark_mask=(~keep | b) & MASK32)
    if isinstance(val, dict) and "&" in val:
        a, b = val["&"]
        if a == mark_ and isinstance(b, int):
            return Action("mark", mark=0, mark_mask=~b & MASK32)
    if isinstance(val, dict) and "^" in val:
        a, b = val["^"]
        if a == mark_ and isinstance(b, int):
            return Action("mark", mark=b & MASK32, mark_mask=0)
    raise _Fail(f"unsupported: {what} {json.dumps(val)}")
