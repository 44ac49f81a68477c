"""The experiments, by the scenario's method (fwbench.catalog: each a package under
this one with its declaration, experiments.room), each imported only when chosen,
as the backends are.

An experiment (experiments.base.Experiment) says what a run of it plans, what it
checks before any testbed is built, the testbed it needs, how one trial runs and
what it prints; the one run loop (experiments.loop) does the rest for all of them.
"""
from __future__ import annotations

from fwbench import catalog
from fwbench.catalog import EXPERIMENTS as REGISTRY
from fwbench.errors import FwbenchError


def get(sc):
    """The experiment (an experiments.base.Experiment) that runs scenario `sc`, by
    its method."""
    room = catalog.room(sc.method)
    if room is None:
        raise FwbenchError(f"unknown method {sc.method!r} (known: {', '.join(REGISTRY)})")
    return catalog.resolve(room.experiment)(sc)
