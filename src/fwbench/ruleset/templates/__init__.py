"""Rule-set templates: functions that build a RuleSet of the model.

`TEMPLATES` maps a template's name to "module:function"; a template is imported
only when used. Every template takes keyword settings and returns a validated
RuleSet carrying its probes.
"""
from __future__ import annotations

import importlib
from typing import Callable

from fwbench.errors import FwbenchError
from fwbench.ruleset.model import RuleSet

TEMPLATES: dict[str, str] = {
    "seed000": "fwbench.ruleset.templates.seed000:seed000",
    "seed001": "fwbench.ruleset.templates.seed001:seed001",
    "seed004-forward": "fwbench.ruleset.templates.seed004:seed004_forward",
    "seed004-nat": "fwbench.ruleset.templates.seed004:seed004_nat",
    "droprate": "fwbench.ruleset.templates.droprate:droprate",
    "random": "fwbench.ruleset.templates.random:random_ruleset",
}


def get(name: str) -> Callable[..., RuleSet]:
    try:
        module, func = TEMPLATES[name].split(":")
    except KeyError:
        raise FwbenchError(f"unknown template {name!r} (known: {', '.join(TEMPLATES)})") \
            from None
    return getattr(importlib.import_module(module), func)
