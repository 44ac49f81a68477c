"""The backend registry: names to classes, imported only when chosen."""
from __future__ import annotations

import importlib

from fwbench.backends.base import Backend
from fwbench.errors import FwbenchError

# name -> "module:Class"; adding a backend touches its module and this table.
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


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str) -> Backend:
    try:
        target = REGISTRY[name]
    except KeyError:
        raise FwbenchError(f"unknown backend {name!r} (known: {', '.join(REGISTRY)})") from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)()


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
