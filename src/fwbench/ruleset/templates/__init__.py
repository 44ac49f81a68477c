"""Rule-set templates: functions that build a RuleSet of the model.

`TEMPLATES` maps a template's name to "module:function"; a template is imported
only when used. Every template takes keyword settings, each with a default, and
returns a validated RuleSet carrying its probes; `build` takes the settings a user
wrote as text and refuses an unknown or ill-typed one by name.
"""
from __future__ import annotations

import importlib
import inspect
import typing
from typing import Callable

from fwbench.errors import FwbenchError
from fwbench.ruleset.model import RuleSet, RuleSetError

TEMPLATES: dict[str, str] = {
    "seed000": "fwbench.ruleset.templates.seed000:seed000",
    "seed001": "fwbench.ruleset.templates.seed001:seed001",
    "seed004-forward": "fwbench.ruleset.templates.seed004:seed004_forward",
    "seed004-nat": "fwbench.ruleset.templates.seed004:seed004_nat",
    "droprate": "fwbench.ruleset.templates.droprate:droprate",
    "random": "fwbench.ruleset.templates.random:random_ruleset",
    "kube-proxy": "fwbench.ruleset.templates.kubeproxy:kube_proxy",
}


def get(name: str) -> Callable[..., RuleSet]:
    try:
        module, func = TEMPLATES[name].split(":")
    except KeyError:
        raise FwbenchError(f"unknown template {name!r} (known: {', '.join(TEMPLATES)})") \
            from None
    return getattr(importlib.import_module(module), func)


_KINDS = {int: "an integer", bool: "true or false", str: "a word"}


def settings(name: str) -> dict[str, tuple[type, object]]:
    """A template's settings: name -> (type, default)."""
    fn = get(name)
    hints = typing.get_type_hints(fn)
    return {k: (hints.get(k, str), p.default) for k, p in inspect.signature(fn).parameters.items()}


def _describe(name: str) -> str:
    return ", ".join(f"{k}={d}" if d is not inspect.Parameter.empty else k
                     for k, (_, d) in settings(name).items())


def _convert(template: str, key: str, kind: type, text: str):
    if kind is bool:
        if text.lower() in ("true", "yes", "1"):
            return True
        if text.lower() in ("false", "no", "0"):
            return False
    elif kind is int:
        try:
            return int(text)
        except ValueError:
            pass
    else:
        return text
    raise FwbenchError(f"template {template}: setting {key} takes {_KINDS[kind]}, "
                       f"got {text!r}")


def build(name: str, params: dict[str, str] | None = None) -> RuleSet:
    """The template's rule set with the settings given as text (`--param k=v`),
    each converted to the type the template declares; the rest take their
    defaults."""
    known = settings(name)
    kw = {}
    for key, text in (params or {}).items():
        if key not in known:
            raise FwbenchError(f"template {name} has no setting {key!r} "
                               f"(its settings: {_describe(name)})")
        kind = known[key][0]
        kw[key] = _convert(name, key, kind if kind in _KINDS else str, text)
    missing = [k for k, (_, d) in known.items() if d is inspect.Parameter.empty and k not in kw]
    if missing:
        raise FwbenchError(f"template {name}: give --param {missing[0]}=VALUE "
                           f"({_KINDS.get(known[missing[0]][0], 'a word')})")
    try:
        return get(name)(**kw)
    except RuleSetError as e:
        raise FwbenchError(f"template {name}: {e}") from None
