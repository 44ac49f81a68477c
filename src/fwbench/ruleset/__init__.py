"""The policy model, its generators and one renderer per backend family.

Everything here is pure: no root, no kernel, no subprocess. Renderers turn a Policy
into the exact text a backend loads, so they are tested with golden files.
"""
from fwbench.ruleset.policy import Entry, Interfaces, Policy
from fwbench.ruleset.seed000 import MAX_ENTRIES, seed000

__all__ = ["Entry", "Interfaces", "Policy", "seed000", "MAX_ENTRIES"]
