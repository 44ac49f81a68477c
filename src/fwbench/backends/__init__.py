"""The backends: one module each, behind one interface (base.Backend); the registry
(registry.py) maps names to classes and imports a backend only when chosen."""
from __future__ import annotations

from fwbench.backends.registry import REGISTRY, cls, firewalls, get, groups, listing, \
    names, pair_kinds, register

__all__ = ["REGISTRY", "cls", "firewalls", "get", "groups", "listing", "names",
           "pair_kinds", "register"]
