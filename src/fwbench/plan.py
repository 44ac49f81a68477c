"""The plan: every trial of a run, in the order they run.

Cells (backend x rule count x frame size) are shuffled afresh for each repetition
with the scenario's seed: every cell is measured once before any is measured again,
and the order within a round is random, so drift on a noisy machine spreads over all
treatments instead of landing on one. `none` has no rules: it is one cell per frame
size, recorded with rules = 0.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass


@dataclass(frozen=True, order=True)
class TrialKey:
    backend: str
    rules: int
    frame_size: int
    repetition: int

    def as_dict(self) -> dict:
        return asdict(self)


def sweep_cells(backend_names: list[str], rules: list[int],
                frame_sizes: list[int]) -> list[tuple[str, int, int]]:
    """Every (backend, rules, frame_size) of a rule-count sweep; `none` once per
    frame size, with rules = 0."""
    return [(b, 0 if b == "none" else n, f)
            for b in backend_names
            for n in (rules if b != "none" else [0])
            for f in frame_sizes]


def make_plan(backend_names: list[str], rules: list[int], frame_sizes: list[int],
              repeat: int, seed: int) -> list[TrialKey]:
    return interleave(sweep_cells(backend_names, rules, frame_sizes), repeat, seed)


def interleave(cells: list[tuple[str, int, int]], repeat: int, seed: int) -> list[TrialKey]:
    """`repeat` rounds of every (backend, rules, frame_size) cell, each round in its
    own seeded random order."""
    rng = random.Random(seed)
    plan = []
    for rep in range(repeat):
        order = list(cells)
        rng.shuffle(order)
        plan += [TrialKey(b, n, f, rep) for b, n, f in order]
    return plan
