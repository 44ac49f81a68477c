"""A module imported on first use. scipy.stats alone takes most of a second to import,
and most commands (`fwbench run` until its end, `check`, `clean`, `backends`) never
reach a statistic: they should not wait for it."""
from __future__ import annotations

import importlib
from types import ModuleType


class Module:
    """Stands for the module `name` and imports it at the first attribute asked for."""

    def __init__(self, name: str):
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str):
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)
