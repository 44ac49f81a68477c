"""The experiments that run their own plan, by name, imported only when chosen
(as the backends are): the rule-count sweeps run in fwbench.runner, and an
experiment listed here has a module with `start(scenario, out, console)` and
`execute(run_dir, console)`, both returning a runloop.RunOutcome. The runner
dispatches to it by the scenario's method, and nothing here imports it until then,
so an experiment may use the runner's pieces without a cycle.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from fwbench.errors import FwbenchError

# method name -> module; adding an experiment touches its module and this table.
REGISTRY: dict[str, str] = {
    "droprate": "fwbench.droprate.experiment",
}


def get(name: str) -> ModuleType:
    try:
        return importlib.import_module(REGISTRY[name])
    except KeyError:
        raise FwbenchError(f"unknown experiment {name!r} (known: {', '.join(REGISTRY)})") \
            from None
