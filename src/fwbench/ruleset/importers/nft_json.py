"""`nft -j list ruleset` output (libnftables-json, schema version 1) into the
rule-set model, and nft text by way of nft itself.

Tables keep their family and name, chains their hook, priority, type, policy and
device (one; a chain on several keeps none, and a note says so), named sets their
size and elements (address ranges become the prefixes that cover them
exactly; port ranges inside set elements are spelled out). An anonymous set of
addresses in a rule (`ip saddr { a, b/24 }`, or a range that is not one prefix)
becomes a named set `anonN` of its table, which the model can hold and every
backend can render.

Rule ids: a comment `fwb:ID` (or `<user text> fwb:ID`, the form the nft renderer
writes) gives the rule its id and leaves the user text in Rule.comment; any
other rule is `<table>-<n>`, n counting the rules of that table in document
order from 1 (when two tables of different families share a name,
`<family>-<table>-<n>`). A rule holding several actions (`log prefix "x" drop`)
becomes one model rule per action, in order, the last keeping the id and the
others `<id>.1`, `<id>.2`, ... with the same matches: the same packets reach each
of them, so the verdicts do not change.

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

from fwbench.ruleset.model import (CT_STATES, FAMILIES, PRIORITIES, PROTO_NUMBERS, Action,
                                   Chain, Iface, Limit, Match, Ports, Prefix, Quota, Rule,
                                   RuleSet, RuleSetError, Set, SetRef, Table, timeout_note,
                                   validate)
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
                "icmpv6": "icmpv6", "esp": "esp", "ah": "ah", "gre": "gre",
                **{str(v): k for k, v in PROTO_NUMBERS.items()}}
_SET_KEYS = {"ipv4_addr": ("addr", 4), "ipv6_addr": ("addr", 6),
             "inet_proto": ("proto", None), "inet_service": ("port", None)}
# nft reject codes -> the iptables --reject-with names the model uses.
_REJECT_ICMP = {"prot-unreachable": "icmp-proto-unreachable"}
_REJECT_ICMPV6 = {"no-route": "icmp6-no-route", "admin-prohibited": "icmp6-adm-prohibited",
                  "addr-unreachable": "icmp6-addr-unreachable",
                  "port-unreachable": "icmp6-port-unreachable",
                  "policy-fail": "icmp6-policy-fail", "reject-route": "icmp6-reject-route"}
_LIMIT_PER = ("second", "minute", "hour", "day")
_NAMED_OBJECTS = ("counter", "quota", "limit", "ct helper", "ct timeout",
                  "ct expectation", "secmark", "synproxy")
_MAX_EXPANDED = 65536   # elements one set element may spell out into
MASK32 = 0xFFFFFFFF


class _Fail(Exception):
    """A problem in the current rule or set; the caller adds where it is."""


def parse(doc: dict | str, source: str) -> RuleSet:
    """The rule set of `nft -j list ruleset` output, as text or already loaded."""
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
        return _Importer(source).run(doc["nftables"])
    finally:
        if was_enabled:
            gc.enable()


def parse_text(text: str, source: str) -> RuleSet:
    """nft text: nft loads it into a new, empty network namespace and lists it
    as JSON (root only; the namespace goes when nft exits)."""
    from fwbench import proc
    from fwbench.errors import CommandError, FwbenchError
    if os.geteuid() != 0:
        raise RuleSetError(f"{source}: reading nft text needs root (nft loads it into a "
                           f"namespace of its own); or give `nft -j list ruleset` JSON")
    try:
        out = proc.output(["unshare", "-n", "sh", "-c", "nft -f - && nft -j list ruleset"],
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
    return parse(out, source)


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

    def run(self, items: list) -> RuleSet:
        rules: list[dict] = []
        origins: list[tuple[str, str]] = []
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
            elif kind == "set":
                t = self._t(obj, kind)
                if any(s.get("name") == obj.get("name") for s in t["raw_sets"]):
                    raise RuleSetError(f"{self.source}: table {obj.get('family')} "
                                       f"{obj.get('table')}: set {obj.get('name')} "
                                       f"appears twice")
                self.set_names.add(str(obj.get("name")))
                t["raw_sets"].append(obj)
            elif kind == "rule":
                self._t(obj, kind)
                rules.append(obj)
            elif kind in _NAMED_OBJECTS:
                self.notes.append(f"{self.source}: named {kind} {obj.get('name')} in table "
                                  f"{obj.get('family')} {obj.get('table')} not imported")
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
                t["sets"][raw.get("name")] = self._set(t, raw)
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
            try:
                new = self._rule(t, r)
            except (_Fail, RuleSetError) as e:
                raise RuleSetError(f"{self.source}: {where}: {e}") from None
            except (TypeError, KeyError, ValueError, AttributeError, IndexError):
                raise RuleSetError(f"{self.source}: {where}: malformed expression") from None
            t["rules"][chain].append(new)
            origins.extend((x.id, f"{self.source}: {where}") for x in new)
        tables = []
        for t in self.tables.values():
            chains = []
            for name, c in t["chains"].items():
                rules_ = tuple(x for group in t["rules"][name] for x in group)
                chains.append(self._chain(t, c, rules_))
            tables.append(Table(t["family"], t["name"], tuple(chains),
                                tuple(t["sets"].values())))
        size = sum(len(c.rules) for t in tables for c in t.chains)
        rs = RuleSet(self.source, tuple(tables), size=size, ipt_prefix="",
                     notes=tuple(self.notes), origins=tuple(origins))
        try:
            return validate(rs)
        except RuleSetError as e:
            raise RuleSetError(f"{self.source}: {e}") from None

    # --- objects ---------------------------------------------------------------

    def _table(self, obj: dict) -> None:
        fam, name = obj.get("family"), obj.get("name")
        if fam not in FAMILIES:
            raise RuleSetError(f"{self.source}: table {fam} {name}: unsupported family {fam}")
        if (fam, name) in self.tables:
            raise RuleSetError(f"{self.source}: table {fam} {name} appears twice")
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
        if isinstance(dev, list):
            if len(dev) != 1:
                self.notes.append(f"{self.source}: chain {t['family']} {t['name']} {name}: "
                                  f"devices {', '.join(map(str, dev))} not kept (the model "
                                  f"holds one)")
            dev = dev[0] if len(dev) == 1 else None
        if dev is not None and not isinstance(dev, str):
            raise RuleSetError(f"{self.source}: chain {t['family']} {t['name']} {name}: "
                               f"device {dev!r} is not a name")
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
        for flag in raw.get("flags", ()):
            if flag not in ("interval", "constant", "timeout", "dynamic"):
                raise RuleSetError(f"{where}: unsupported flag {flag}")
        try:
            elements = self._elements(tuple(keys), version, raw.get("elem", ()))
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

    def _elements(self, keys: tuple[str, ...], version: int, elems) -> list[tuple]:
        out: list[tuple] = []
        for e in elems:
            if isinstance(e, dict) and "elem" in e:
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
            elif key == "limit":
                if ctx.actions:
                    raise _Fail("unsupported: a limit after a statement")
                if "quota" in ctx.kw:
                    raise _Fail("unsupported: a limit after a quota")
                ctx.kw["limit"] = _limit(val)
            elif key == "quota":
                if ctx.actions:
                    raise _Fail("unsupported: a quota after a statement")
                ctx.set("quota", _quota(val))
            else:
                ctx.actions.append(self._action(t, key, val))
        kw = ctx.kw
        if ctx.sets:
            kw["sets"] = tuple(ctx.sets)
        if ctx.th and kw.get("proto") not in ("tcp", "udp"):
            raise _Fail("unsupported: th port match without meta l4proto tcp or udp")
        if ctx.nfproto:
            self._pin_version(t, ctx)
        if kw.get("proto") == "ah" and t["family"] == "ip6":
            raise _Fail("unsupported: ah in table ip6 (AH is an extension header in IPv6, "
                        "which the protocol match skips)")
        match = Match(**kw)
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
        out = [Rule(f"{rid}.{k}", match, a, False, comment)
               for k, a in enumerate(actions[:-1], 1)]
        out.append(Rule(rid, match, actions[-1], ctx.counter, comment))
        return out

    def _match(self, t: dict, ctx: "_Rule", m: dict) -> None:
        op, left, right = m.get("op"), m.get("left"), m.get("right")
        if op not in ("==", "!=", "in"):
            raise _Fail(f"unsupported match operator {op!r}")
        neg = op == "!="
        if not isinstance(left, dict) or len(left) != 1:
            raise _Fail(f"unsupported match on {json.dumps(left)}")
        (lk, lv), = left.items()
        if lk == "payload":
            self._payload(t, ctx, lv, right, neg)
        elif lk == "meta":
            self._meta(ctx, lv.get("key"), right, neg)
        elif lk == "ct":
            if lv.get("key") != "state" or len(lv) != 1:
                what = " ".join(str(lv[k]) for k in ("dir", "key") if k in lv)
                raise _Fail(f"unsupported expression ct {what}")
            ctx.kw["ct_state"] = _ct_states(right, neg)
        elif lk == "&":
            what, mask = lv
            if what != {"meta": {"key": "mark"}} or not isinstance(mask, int):
                raise _Fail(f"unsupported expression & on {json.dumps(what)}")
            ctx.set("mark", (_int(right), mask & MASK32))
            ctx.kw["mark_negate"] = neg
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
        elif (proto, field) in (("ip", "protocol"), ("ip6", "nexthdr")):
            if neg:
                raise _Fail(f"unsupported: {proto} {field} !=")
            ctx.proto(_proto(right))
            if t["family"] not in ("ip", "ip6"):
                # The field is one IP version's: in inet it matches that version only.
                ctx.pin(4 if proto == "ip" else 6)
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
            if isinstance(right, int) and 0 <= right <= 255:
                typ = right
            elif isinstance(right, str) and right in names:
                typ = names[right]
            else:
                raise _Fail(f"unsupported {proto} type {json.dumps(right)}")
            ctx.set("icmp_type", typ)
        else:
            raise _Fail(f"unsupported expression payload {proto} {field}")

    def _meta(self, ctx: "_Rule", key, right, neg: bool) -> None:
        if key in ("iifname", "oifname", "iif", "oif"):
            if not isinstance(right, str):
                raise _Fail(f"unsupported: meta {key} against {json.dumps(right)}")
            name = right[:-1] + "+" if right.endswith("*") and not right.endswith("\\*") \
                else right.replace("\\*", "*")
            ctx.set("iif" if key.startswith("i") else "oif", Iface(name, neg))
        elif key == "l4proto":
            if neg:
                raise _Fail("unsupported: meta l4proto !=")
            ctx.proto(_proto(right))
        elif key == "mark":
            ctx.set("mark", (_int(right), MASK32))
            ctx.kw["mark_negate"] = neg
        elif key == "nfproto" and right in ("ipv4", "ipv6") and not neg:
            ctx.nfproto = 4 if right == "ipv4" else 6
        else:
            raise _Fail(f"unsupported expression meta {key}")

    def _concat_field(self, ctx: "_Rule", x: dict) -> str:
        if x in ({"meta": {"key": "l4proto"}}, {"payload": {"protocol": "ip", "field": "protocol"}},
                 {"payload": {"protocol": "ip6", "field": "nexthdr"}}):
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
        """`meta nfproto ipv4` (nft adds it to inet rules such as `reject with
        icmp type ...`): the model has no such match, but `ip saddr 0.0.0.0/0`
        matches exactly the IPv4 packets, and pins the rule to IPv4 as well."""
        kw, v = ctx.kw, ctx.nfproto
        pinned = {p.version for p in (kw.get("src"), kw.get("dst")) if p}
        pinned |= {t["sets"][r.name].version for r in ctx.sets
                   if {"saddr", "daddr"} & set(r.fields)}
        if kw.get("proto") in ("icmp", "icmpv6", "ah"):
            pinned.add(6 if kw["proto"] == "icmpv6" else 4)
        if pinned - {v}:
            raise _Fail(f"unsupported: meta nfproto ipv{v} with IPv{(pinned - {v}).pop()} "
                        f"matches (a rule that never matches)")
        if not pinned:
            kw["src"] = Prefix("0.0.0.0/0" if v == 4 else "::/0")

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

    def _action(self, t: dict, key: str, val) -> Action:
        if key in ("accept", "drop", "return", "notrack"):
            return Action(key)
        if key in ("jump", "goto"):
            target = val.get("target") if isinstance(val, dict) else None
            if target not in t["chains"]:
                raise _Fail(f"{key} to a missing chain {target!r}")
            return Action(key, chain=target)
        if key == "reject":
            return Action("reject", reject_with=_reject(val))
        if key == "mangle":
            return _mangle(val)
        if key in ("dnat", "snat"):
            val = val or {}
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
            port = val.get("port")
            if port is not None and not isinstance(port, int):
                raise _Fail(f"unsupported: {key} to port {json.dumps(port)}")
            return Action(key, addr=addr, port=port)
        if key == "redirect" or key == "masquerade":
            val = dict(val or {})
            port = val.pop("port", None)
            if val:
                raise _Fail(f"unsupported: {key} {sorted(val)[0]}")
            if port is not None and not (isinstance(port, int) and 0 < port < 65536):
                raise _Fail(f"unsupported: {key} to port {json.dumps(port)}")
            return Action(key, port=port)
        if key == "log":
            val = dict(val or {})
            prefix = val.pop("prefix", None)
            if "group" in val:
                # nflog: to a netlink listener, as iptables' NFLOG (see there).
                self.notes.append(f"{self.source}: {self.where}: log group {val['group']} "
                                  f"kept as a log action that decides no verdict "
                                  f"({', '.join(sorted(val))} ignored)")
            elif val:
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
        self.nfproto = 0   # 4 or 6 after `meta nfproto ipv4` / `ipv6`

    def set(self, field: str, value) -> None:
        if field in self.kw:
            raise _Fail(f"unsupported: two matches on {field}")
        self.kw[field] = value

    def pin(self, version: int) -> None:
        """The rule matches IPv`version` packets only (_pin_version holds it)."""
        if self.nfproto and self.nfproto != version:
            raise _Fail("unsupported: IPv4 and IPv6 header matches in one rule (a rule "
                        "that never matches)")
        self.nfproto = version

    def proto(self, proto: str) -> None:
        have = self.kw.get("proto")
        if have is not None and have != proto:
            raise _Fail(f"unsupported: protocol {have} and {proto} in one rule")
        self.kw["proto"] = proto


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
    v = dict(v or {})
    if v.pop("inv", False):
        raise _Fail("unsupported: limit rate over")
    if v.pop("rate_unit", "packets") != "packets":
        raise _Fail("unsupported: a limit in bytes")
    v.pop("burst_unit", None)
    per = v.pop("per", "second")
    if per not in _LIMIT_PER:
        raise _Fail(f"unsupported: limit per {per}")
    rate, burst = _int(v.pop("rate", 0)), _int(v.pop("burst", 5))
    if v:
        raise _Fail(f"unsupported: limit {sorted(v)[0]}")
    return Limit(rate, per, burst)


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


def _reject(v) -> str | None:
    if not v:
        return None
    kind, code = v.get("type"), v.get("expr")
    if kind == "tcp reset":
        return "tcp-reset"
    if kind == "icmp" and code:
        return _REJECT_ICMP.get(code, f"icmp-{code}")
    if kind == "icmpv6" and code:
        return _REJECT_ICMPV6.get(code, f"icmp6-{code}")
    if kind == "icmpx" and code:
        return f"icmpx-{code}"
    raise _Fail(f"unsupported: reject {json.dumps(v)}")


def _mangle(v: dict) -> Action:
    """`meta mark set` in its forms, as the model's `mark = (mark & ~mask) | value`."""
    if v.get("key") != {"meta": {"key": "mark"}}:
        raise _Fail(f"unsupported expression mangle {json.dumps(v.get('key'))}")
    val = v.get("value")
    mark_ = {"meta": {"key": "mark"}}
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
    raise _Fail(f"unsupported: meta mark set {json.dumps(val)}")
