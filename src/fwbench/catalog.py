"""The experiments, by the scenario's method: each line names the declaration
(experiments.room.Room) of one experiment package. Adding an experiment is its
package and one line here; the scenario, the metric registry, the report, the
findings, the CLI's `--method` and `study list` read everything else from the
declaration. This module imports nothing of fwbench at import time (it imports by
name when asked), so anything may read it."""
from __future__ import annotations

import importlib

# method -> "module:ROOM". The rule-count sweeps share one experiment, one method each.
EXPERIMENTS: dict[str, str] = {
    "maxrate": "fwbench.experiments.sweep:MAXRATE",
    "throughput": "fwbench.experiments.sweep:THROUGHPUT",
    "latency": "fwbench.experiments.sweep:LATENCY",
    "lossload": "fwbench.experiments.sweep:LOSSLOAD",
    # seed 003: the sweep's cells x chain (forward, input) x CPUs
    "fixedrate": "fwbench.experiments.fixedrate:ROOM",
    "cpucost": "fwbench.experiments.sweep:CPUCOST",
    "droprate": "fwbench.experiments.droprate:ROOM",
    "loadlatency": "fwbench.experiments.loadlatency:ROOM",
    "echo": "fwbench.experiments.echo:ROOM",
    "update": "fwbench.experiments.update:ROOM",
    # issue 36: kube-proxy's rule sets, new connections to services
    "kubeproxy": "fwbench.experiments.kubeproxy:ROOM",
}


def resolve(target: str):
    """What "module:attr" names, importing the module."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def rooms() -> dict:
    """Every experiment's declaration, by method, in the catalog's order."""
    return {m: resolve(t) for m, t in EXPERIMENTS.items()}


def room(method: str):
    """The declaration of `method`, or None for a method not in the catalog (a run
    of an experiment since removed)."""
    t = EXPERIMENTS.get(method)
    return None if t is None else resolve(t)


def studies() -> dict:
    """The studies, by id: study id -> (its experiments.room.Study, its method)."""
    return dict(sorted((r.study.id, (r.study, m)) for m, r in rooms().items()
                       if r.study is not None))
