"""The plan: every trial of a run, in the order they run.

A cell is one value of each of the experiment's factors (its named plan dimensions:
backend, rule count and frame size for the sweeps; treatment, set size and frame
size for droprate), in the experiment's factor order. Cells are shuffled afresh for
each repetition with the scenario's seed: every cell is measured once before any is
measured again, and the order within a round is random, so drift on a noisy machine
spreads over all treatments instead of landing on one.
"""
from __future__ import annotations

import functools
import random
from collections import namedtuple
from dataclasses import dataclass

# One value per factor, in the experiment's factor order: what plans and keys hold
# (run.json and records carry it by name). Code reads it as named_cell(factors).
Cell = tuple


@functools.cache
def named_cell(factors: tuple[str, ...]) -> type:
    """The cell as a named record of `factors` (`c.backend`, `c.rules`): a tuple
    still, equal to and hashed as the plan's."""
    return namedtuple("Cell", factors)

REPETITION = "repetition"   # the key's last part; no factor may take the name


@dataclass(frozen=True, order=True)
class TrialKey:
    """A trial: its cell and its repetition. Run directories hold it as the factors
    by name plus the repetition: {"backend": "nftables", "rules": 100, ...,
    "repetition": 0}."""
    cell: Cell
    repetition: int

    def as_dict(self, factors: tuple[str, ...]) -> dict:
        return {**dict(zip(factors, self.cell, strict=True)), REPETITION: self.repetition}

    @staticmethod
    def from_dict(d: dict, factors: tuple[str, ...]) -> "TrialKey":
        return TrialKey(tuple(d[f] for f in factors), d[REPETITION])


def sweep_cells(backend_names: list[str], rules: list[int],
                frame_sizes: list[int]) -> list[Cell]:
    """Every (backend, rules, frame_size) of a rule-count sweep; `none` (no firewall)
    once per frame size, with rules = 0."""
    return [(b, 0 if b == "none" else n, f)
            for b in backend_names
            for n in (rules if b != "none" else [0])
            for f in frame_sizes]


def interleave(cells: list[Cell], repeat: int, seed: int,
               block=None) -> list[TrialKey]:
    """`repeat` rounds of every cell, each round in its own seeded random order.

    `block(cell)`, if given, groups cells that should run back to back (the sweeps
    with `keep_loaded`: one backend's rule set, measured at every frame size while it
    stays loaded): a round then shuffles the blocks and the cells within each."""
    rng = random.Random(seed)
    plan = []
    for rep in range(repeat):
        plan += [TrialKey(tuple(c), rep) for c in shuffled(cells, rng, block)]
    return plan


def shuffled(cells: list[Cell], rng: random.Random, block=None) -> list[Cell]:
    """The cells in random order; with `block`, each block's cells stay together
    (blocks in random order, and the cells within each)."""
    order = list(cells)
    rng.shuffle(order)
    if block is None:
        return order
    groups: dict = {}
    for c in order:     # blocks in the order of their first cell: random too
        groups.setdefault(block(c), []).append(c)
    return [c for g in groups.values() for c in g]
