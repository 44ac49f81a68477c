"""The update experiment's rule sets: for each kind of update, the rule set a
firewall holds before it and the one it must hold after.

Both are seed 000's skeleton (FORWARD, policy drop, jumps by interface) around N
entries, the first of them the *kept* flow's (UDP to the server's port 5201, the
engine's): the fixed-rate flow that runs through every update and that no update
touches. Its entry comes first, so it costs the same few rules in every rule set
and whatever it suffers during an update is the update's doing, not the rule
count's. The other entries are seed 000's fillers (TCP, never matched by the
flows).

Every update decides one more flow, the *probe* (UDP to port 5202): the rule or
element the update adds, replaces in or deletes is the probe's, done last among
its changes, so the moment the probe flow starts or stops passing is the moment
the kernel holds the new rule set (fwbench.experiments.update). Ids stay stable across the
pair: an entry unchanged by the update has the same id before and after.

Size: N is the entries (rules, or set elements) the firewall holds before the
update.
"""
from __future__ import annotations

from dataclasses import dataclass

from fwbench import addresses
from fwbench.ruleset.model import (Match, Packet, Probe, Rule, RuleSet, RuleSetError, Set,
                                   SetRef, validate)
from fwbench.ruleset.templates.seed000 import (PING_RULE, PROBE_SPORT, SET_NAME, SET_RULE,
                                               entry_rule, filler, skeleton)

KEEP_PORT = 5201
PROBE_PORT = 5202
KEEP_RULE, PROBE_RULE = "keep", "probe"
# Entries are at least these two: the kept flow's and one more.
MIN_ENTRIES = 2
# A set's declared capacity, at least (ipset's default maxelem).
SET_CAPACITY = 65536


@dataclass(frozen=True)
class Kind:
    """One kind of update."""
    name: str
    layout: str             # "linear" (rules), "set" (elements) or "any"
    probe: str              # "starts" or "stops": what the update does to the probe flow
    description: str
    fraction: float = 0.0   # bulk kinds: the share of N added or deleted

    def changed(self, n: int) -> int:
        """Entries the update adds, deletes or replaces at size n."""
        if self.name == "replace-all":
            return n
        return max(1, round(n * self.fraction)) if self.fraction else 1


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("add-end", "linear", "starts", "add one rule at the end of the chain"),
    Kind("add-front", "linear", "starts", "insert one rule at the front of the chain"),
    Kind("delete", "linear", "stops", "delete one rule (the chain's last)"),
    Kind("replace", "linear", "starts", "replace one rule in place (the chain's last)"),
    Kind("add-1pct", "linear", "starts", "add 1 % more rules at the end", 0.01),
    Kind("add-10pct", "linear", "starts", "add 10 % more rules at the end", 0.10),
    Kind("delete-1pct", "linear", "stops", "delete 1 % of the rules (the last)", 0.01),
    Kind("delete-10pct", "linear", "stops", "delete 10 % of the rules (the last)", 0.10),
    Kind("element-add", "set", "starts", "add one set element"),
    Kind("element-delete", "set", "stops", "delete one set element"),
    Kind("elements-add-1pct", "set", "starts", "add 1 % more set elements", 0.01),
    Kind("elements-add-10pct", "set", "starts", "add 10 % more set elements", 0.10),
    Kind("elements-delete-1pct", "set", "stops", "delete 1 % of the set elements", 0.01),
    Kind("elements-delete-10pct", "set", "stops", "delete 10 % of the set elements",
         0.10),
    Kind("replace-all", "any", "starts",
         "replace the whole rule set with another of the same size"),
)}


def kind(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        raise RuleSetError(f"unknown update kind {name!r} (known: {', '.join(KINDS)})") \
            from None


def fits(k: Kind, layout: str) -> bool:
    """Whether a backend holding its entries as `layout` has this kind of update."""
    return k.layout in ("any", layout)


def pair(kind_name: str, n: int, *, layout: str, version: int = 4) -> tuple[RuleSet, RuleSet]:
    """The rule sets before and after an update of kind `kind_name` to a firewall
    holding n entries as `layout` ("linear": one rule each; "set": the elements
    of one set)."""
    k = kind(kind_name)
    if not fits(k, layout):
        raise RuleSetError(f"update kind {k.name} changes "
                           f"{'rules' if k.layout == 'linear' else 'set elements'}; "
                           f"a {layout} rule set has none to change")
    if n < MIN_ENTRIES:
        raise RuleSetError(f"an update needs at least {MIN_ENTRIES} entries, got {n}")
    c = k.changed(n)
    if k.name != "replace-all" and c >= n:
        raise RuleSetError(f"update kind {k.name} at {n} entries changes {c}: "
                           f"too few entries")
    server = addresses.SERVER[version]
    keep = (KEEP_RULE, server, "udp", KEEP_PORT)
    probe = [(PROBE_RULE, server, "udp", PROBE_PORT)]

    def fillers(first: int, count: int) -> list[Entry]:
        return [(f"fill-{first + i}", *filler(first + i, server)) for i in range(count)]

    def build(base: int, tail: list[Entry], front: bool = False,
              other: bool = False) -> RuleSet:
        # base entries: keep + base-1 fillers (from index 0, or past every index
        # this size uses when `other`); tail: entries appended after them (after
        # the skeleton's own rules in the linear layout, as `iptables -A` would),
        # the probe's last; front: the probe's before everything.
        body = [keep] + fillers(2 * n if other else 0, base - 1)
        if front:
            body = probe + body
        return _ruleset(k, version, layout, body, tail, capacity)

    # One capacity before and after, room for the larger: a set's declared size
    # (ipset's maxelem) is part of what the kernel must hold unchanged.
    capacity = max(SET_CAPACITY, n + c)
    if k.name in ("add-end", "element-add"):
        return build(n, []), build(n, probe)
    if k.name == "add-front":
        return build(n, []), build(n, [], front=True)
    if k.name in ("delete", "element-delete"):
        return build(n - 1, probe), build(n - 1, [])
    if k.name == "replace":
        # The chain's last rule, a filler past the base's, becomes the probe's.
        return build(n - 1, fillers(n, 1)), build(n - 1, probe)
    if k.name == "replace-all":
        # Every filler replaced by another; the probe's entry in the last's place.
        return build(n, []), build(n - 1, probe, other=True)
    added = fillers(n, c - 1) + probe
    if k.probe == "starts":
        return build(n, []), build(n, added)
    return build(n - c, added), build(n - c, [])


# An entry: (rule id, daddr, proto, port).
Entry = tuple[str, str, str, int]


def _ruleset(k: Kind, version: int, layout: str, body: list[Entry],
             tail: list[Entry], capacity: int) -> RuleSet:
    server = addresses.SERVER[version]
    client = addresses.CLIENT[version]
    has_probe = any(e[0] == PROBE_RULE for e in body + tail)
    sets: tuple[Set, ...] = ()
    if layout == "linear":
        entries = [entry_rule(*e) for e in body]
        tail_rules = tuple(entry_rule(*e) for e in tail)
        keep_rule, probe_rule = KEEP_RULE, PROBE_RULE
    else:
        elements = tuple(e[1:] for e in body + tail)
        sets = (Set(SET_NAME, ("addr", "proto", "port"), elements, version,
                    size=capacity),)
        entries = [Rule(SET_RULE, Match(sets=(SetRef(SET_NAME, ("daddr", "proto", "dport")),)))]
        tail_rules = ()
        keep_rule = probe_rule = SET_RULE
    table = skeleton(version, entries, sets, server=server, tail=tail_rules)
    kept = Packet(version, "client", client, server, "udp", PROBE_SPORT, KEEP_PORT)
    probe = Packet(version, "client", client, server, "udp", PROBE_SPORT, PROBE_PORT)
    icmp, echo = ("icmp", 8) if version == 4 else ("icmpv6", 128)
    probes = (
        Probe("kept flow", kept, True, keep_rule),
        Probe("probe flow", probe, has_probe, probe_rule if has_probe else None),
        Probe("ping", Packet(version, "client", client, server, icmp, icmp_type=echo),
              True, PING_RULE),
    )
    return validate(RuleSet(f"update-{k.name}-{layout}", (table,), probes, flow=kept,
                            flow_rule=keep_rule, size=len(body) + len(tail), layout=layout,
                            ipt_prefix="fwb_"))
