"""The backend registry: names to classes, imported only when chosen, and what the
rest of fwbench derives from the traits the classes declare (Backend's "Traits"):
the firewalls flush_all empties and a real host's put-back saves, the report's
backend groups and default pairs, the backends of a family.

Adding a backend touches its module and one line of REGISTRY. A module of its own
(a toy in a test, a plug-in) is a "module:Class" string like the rest; `register`
adds one at run time.
"""
from __future__ import annotations

import importlib

from fwbench.errors import FwbenchError

# name -> "module:Class". The order is the listing's (`fwbench backends`), a run's
# with `backends = "all"`, the report's within a group, and flush_all's.
REGISTRY: dict[str, str] = {
    "none": "fwbench.backends.none:NoFirewall",
    "iptables-legacy": "fwbench.backends.iptables:IptablesLegacy",
    "iptables-nft": "fwbench.backends.iptables:IptablesNft",
    "nftables": "fwbench.backends.nftables:NftLinear",
    "ipset": "fwbench.backends.iptables:Ipset",
    "nftset": "fwbench.backends.nftables:NftSet",
    "xdp-linear": "fwbench.backends.ebpf:XdpLinear",
    "xdp-set": "fwbench.backends.ebpf:XdpSet",
    "tc-linear": "fwbench.backends.ebpf:TcLinear",
    "tc-set": "fwbench.backends.ebpf:TcSet",
}

# A backend's family (Backend.family) -> the kind of firewall the report groups it
# under (None: no firewall).
FAMILIES = {"x_tables": "netfilter", "nf_tables": "netfilter", "ebpf": "eBPF",
            "none": None}


def register(name: str, target: str) -> None:
    """Add backend `name` as "module:Class", after the built-in ones."""
    REGISTRY[name] = target


def names(**traits) -> list[str]:
    """Every backend's name, or those whose class has each trait given, a tuple
    meaning any of its values: names(family=("x_tables", "nf_tables"))."""
    return [n for n in REGISTRY
            if all(getattr(cls(n), k) in (v if isinstance(v, tuple) else (v,))
                   for k, v in traits.items())]


def cls(name: str) -> type:
    """The class of backend `name`, its module imported on first use."""
    try:
        target = REGISTRY[name]
    except KeyError:
        raise FwbenchError(f"unknown backend {name!r} (known: {', '.join(REGISTRY)})") from None
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise FwbenchError(f"backend {name}: cannot load {target}: {e}") from None


def get(name: str):
    """A new instance of backend `name`."""
    return cls(name)()


def firewalls() -> list:
    """The kernel firewalls the registered backends load into, each once, in the
    order of their first backend (kernel.Firewall): what flush_all empties and
    counts, and what a real host's saved state lists and puts back. A backend
    whose rules name another's objects (ipset's iptables rule its set) declares
    the named one after the naming one, so emptying in this order never meets an
    object still in use."""
    out = []
    for n in REGISTRY:
        for fw in cls(n).firewalls:
            if fw not in out:
                out.append(fw)
    return out


def groups() -> list[tuple[str, list[str]]]:
    """The report's backend groups, (label, names), in the order of their first
    backend: one per kind of firewall (FAMILIES) and layout ("netfilter, linear");
    a backend that filters nothing is in none."""
    out: dict[str, list[str]] = {}
    for n in REGISTRY:
        c = cls(n)
        if kind := FAMILIES[c.family]:
            out.setdefault(f"{kind}, {'linear' if c.layout == 'linear' else 'indexed'}",
                           []).append(n)
    return list(out.items())


def pair_kinds() -> list[tuple[str, list[tuple[str, str]]]]:
    """The report's default pairs, by the question each answers (Backend.compared_with),
    questions in the order of their first backend; within one, a linear backend's
    pairs before an indexed one's, each in registry order."""
    out: dict[str, list[tuple[int, int, str, str]]] = {}
    for i, n in enumerate(REGISTRY):
        c = cls(n)
        for question, others in c.compared_with.items():
            out.setdefault(question, []).extend(
                (c.layout != "linear", i, n, b) for b in others)
    return [(q, [(a, b) for _, _, a, b in sorted(ps, key=lambda p: p[:2])])
            for q, ps in out.items()]


def listing() -> list[dict]:
    """Every backend, as `fwbench backends --json` prints it: name, available,
    reason (why it cannot run here, else None), versions (tool -> version or None),
    description and its update mechanisms (name -> what it runs, and whether the
    kernel sees the whole change in one step: atomic)."""
    out = []
    for name in names():
        b = get(name)
        why = b.unavailable()
        out.append({"name": name, "available": why is None, "reason": why,
                    "versions": b.versions(), "description": b.description,
                    "mechanisms": {m: {"runs": runs, "atomic": atomic}
                                   for m, (runs, atomic) in b.mechanisms.items()}})
    return out
