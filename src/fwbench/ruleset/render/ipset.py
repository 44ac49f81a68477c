"""ipset restore text from a RuleSet: the named sets iptables' `-m set` looks up.

Every set of every table becomes one ipset named rs.ipt_prefix + its name (ipset
names are global to the network namespace, so two tables cannot both hold a set of
one name). The model's key shapes map to ipset types:

    ("addr",)                  hash:ip       (hash:net when the set has prefixes)
    ("addr", "proto", "port")  hash:ip,port  (hash:net,port with prefixes)

Anything else (a port without its protocol, a protocol alone) has no ipset type
that means the same, and raises Unsupported. A set's `size` is its `maxelem`
(else the element count, at least 65,536), `counters` ipset's `counters` option. The iptables renderer uses
`set_type` and `set_name` from here, so both agree on what a set is called and how
it is keyed.
"""
from __future__ import annotations

import ipaddress

from fwbench.ruleset.model import RuleSet, RuleSetError, Set, Unsupported

SUPPORTS: frozenset[str] = frozenset({
    "set addr", "set addr . proto . port", "set with prefixes", "set counters", "ipv6",
})

# IPSET_MAXNAMELEN is 32 with the terminating NUL.
MAX_NAME = 31
# The initial bucket count only; maxelem is what bounds the set.
HASHSIZE = 1024
MIN_MAXELEM = 65536
_PORT_PROTOS = ("tcp", "udp")


def set_type(s: Set) -> str:
    """The ipset type holding `s`, or Unsupported for a key shape ipset lacks."""
    net = s.interval
    if s.keys == ("addr",):
        return "hash:net" if net else "hash:ip"
    if s.keys == ("addr", "proto", "port"):
        return "hash:net,port" if net else "hash:ip,port"
    raise Unsupported("set " + " . ".join(s.keys), f"set {s.name}")


def set_name(rs: RuleSet, s: Set) -> str:
    """The set's name in the kernel."""
    name = rs.ipt_prefix + s.name
    if len(name.encode()) > MAX_NAME:
        raise Unsupported(f"set name longer than {MAX_NAME} characters", f"set {s.name}")
    if not name or any(ch.isspace() or ch in "\"'\\" for ch in name):
        raise Unsupported(f"set name {name!r}", f"set {s.name}")
    return name


def refuse_unsupported(rs: RuleSet) -> None:
    """Raise Unsupported for the first set ipset cannot hold as the model says."""
    _sets(rs)


def _sets(rs: RuleSet) -> list[tuple[str, str, Set]]:
    """(kernel name, ipset type, set) for every set, names checked unique."""
    out, seen = [], set()
    for t in rs.tables:
        for s in t.sets:
            if s.is_vmap:
                continue   # a verdict map: iptables holds it as rules
            name, kind = set_name(rs, s), set_type(s)
            if name in seen:
                raise Unsupported(f"set name {name} in two tables", f"set {s.name}")
            seen.add(name)
            out.append((name, kind, s))
    return out


def render(rs: RuleSet) -> str:
    """`ipset restore` input: one `create` per set, then an `add` per element."""
    lines: list[str] = []
    for name, kind, s in _sets(rs):
        family = "inet6" if s.version == 6 else "inet"
        maxelem = s.size if s.size is not None else max(MIN_MAXELEM, len(s.elements))
        # In the order `ipset save` prints the options.
        lines.append(f"create {name} {kind} family {family} hashsize {HASHSIZE} "
                     f"maxelem {maxelem}{' counters' if s.counters else ''}")
        addr = _Addresses(s)
        head = f"add {name} "
        if len(s.keys) == 1:
            lines.extend(head + addr(e[0]) for e in s.elements)
        else:
            lines.extend(f"{head}{addr(a)},{_proto(s, p)}:{_port(s, port)}"
                         for a, p, port in s.elements)
    return "\n".join(lines) + "\n" if lines else ""


class _Addresses:
    """Element addresses as ipset reads them, each distinct text parsed once (a set
    of 100,000 entries repeats a handful of addresses)."""

    def __init__(self, s: Set):
        self.s, self.seen = s, {}

    def __call__(self, text) -> str:
        out = self.seen.get(text)
        if out is None:
            out = self.seen[text] = self._parse(text)
        return out

    def _parse(self, text) -> str:
        s = self.s
        try:
            net = ipaddress.ip_network(str(text), strict=False)
        except ValueError:
            raise RuleSetError(f"set {s.name}: not an address: {text!r}") from None
        if net.version != s.version:
            raise RuleSetError(f"set {s.name}: IPv{net.version} element {text} in an "
                               f"IPv{s.version} set")
        if net.prefixlen == net.max_prefixlen:
            return str(net.network_address)
        if not s.interval:
            raise RuleSetError(f"set {s.name}: prefix {net} in a set without intervals")
        return str(net)


def _proto(s: Set, proto) -> str:
    if proto not in _PORT_PROTOS:
        raise Unsupported(f"set element protocol {proto}", f"set {s.name}")
    return proto


def _port(s: Set, port) -> int:
    try:
        p = int(port)
    except (TypeError, ValueError):
        raise RuleSetError(f"set {s.name}: not a port: {port!r}") from None
    if not 0 <= p <= 65535:
        raise RuleSetError(f"set {s.name}: not a port: {port!r}")
    return p
