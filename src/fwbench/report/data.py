"""What a report reads: a run directory's records and conditions, and the metrics
(fwbench.metrics) its ok trials recorded.

A metric is one number per trial. A cell is one value of each of the run's factors
(run.json's `factors`: backend, rules, frame_size for the sweeps; treatment,
set_size, frame_size for droprate); a cell's sample is the metric over its ok trials
(one per repetition).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from fwbench.metrics import Metric, known, relabelled
from fwbench.plan import Cell, named_cell
from fwbench.results import SWEEP_FACTORS, RunDir, SweepCell, TrialRecord


# Percentiles of a latency histogram, in the order a percentile curve draws them.
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99_9", 99.9))


@dataclass
class RunData:
    path: Path
    meta: dict
    records: list[TrialRecord]

    @property
    def scenario(self) -> dict:
        return self.meta.get("scenario", {})

    @property
    def method(self) -> str:
        return self.scenario.get("method", "maxrate")

    @property
    def name(self) -> str:
        return self.scenario.get("name", self.path.name)

    @property
    def factors(self) -> tuple[str, ...]:
        return tuple(self.meta["factors"])

    @property
    def is_sweep(self) -> bool:
        """backend x rules x frame size: the report with cost per rule and pairs."""
        return self.factors == SWEEP_FACTORS

    def cell(self, r: TrialRecord) -> Cell:
        """The record's cell, read by the run's factor names (`c.backend`,
        `c.frame_size`): every dict a report keys by cell is keyed by these."""
        return named_cell(self.factors)(*r.cell(self.factors))

    def label(self, cell: Cell) -> str:
        """A cell in a few words: `nftables N=1,000 64 B`, `raw set_size=0 64 B`."""
        if self.is_sweep:
            c = SweepCell(*cell)    # a plain tuple too: a finding's cells, run.json's
            return (f"{c.backend} {c.frame_size} B" if c.backend == "none" else
                    f"{c.backend} N={c.rules:,} {c.frame_size} B")
        return " ".join(f"{v} B" if name == "frame_size" else
                        (str(v) if i == 0 else f"{name}={v}")
                        for i, (name, v) in enumerate(zip(self.factors, cell)))

    def levels(self, factor: str) -> list:
        """The values `factor` took in the plan, sorted."""
        return sorted({k[factor] for k in self.meta.get("plan", [])})

    @property
    def ok(self) -> list[TrialRecord]:
        return [r for r in self.records if r.status == "ok"]

    def metrics(self) -> list[Metric]:
        """The method's metrics that at least one ok trial recorded."""
        return [m for m in relabelled(known(self.method), self.ok)
                if any(m.value(r) is not None for r in self.ok)]

    def headline(self) -> Metric | None:
        return next((m for m in self.metrics() if m.throughput), None)

    def samples(self, metric: Metric) -> dict[Cell, list[float]]:
        """Cell -> the metric over its ok trials, in repetition order."""
        return {c: [v for _, v in rv] for c, rv in self.samples_by_round(metric).items()}

    def samples_by_round(self, metric: Metric) -> dict[Cell, list[tuple[int, float]]]:
        """Cell -> (round, the metric) over its ok trials, in repetition order: the
        round each trial ran in, so two cells' trials of one round can be paired."""
        rounds = self.rounds()
        out: dict[Cell, list[tuple[int, float]]] = defaultdict(list)
        for r in sorted(self.ok, key=lambda r: r.repetition):
            v = metric.value(r)
            if v is not None:
                c = self.cell(r)
                out[c].append((rounds.get((c, r.repetition), r.repetition), v))
        return dict(out)

    def rounds(self) -> dict[tuple[Cell, int], int]:
        """(cell, repetition) -> the round its trial ran in. The planned rounds run
        every cell once each (plan.interleave), so there a repetition is its round;
        an adaptive round (run.json's adaptive.rounds) runs only the cells still
        wide, each at its own next repetition, so those trials get the round's own
        number, after the planned ones."""
        adaptive = self.meta.get("adaptive", {}).get("rounds", [])
        if not adaptive:
            return {}
        plan = [tuple(k[f] for f in self.factors) + (k.get("repetition", 0),)
                for k in self.meta.get("plan", [])]
        added = sum(len(a.get("cells", [])) for a in adaptive)
        planned = plan[:len(plan) - added] if added else plan
        first = 1 + max((p[-1] for p in planned), default=-1)
        nxt: dict[Cell, int] = defaultdict(lambda: first)
        for p in planned:
            nxt[p[:-1]] = max(nxt[p[:-1]], p[-1] + 1)
        out = {}
        for k, a in enumerate(adaptive):
            for c in a.get("cells", []):
                c = tuple(c)
                out[(c, nxt[c])] = first + k
                nxt[c] += 1
        return out

    def backends(self) -> list[str]:
        """In the order the scenario planned them."""
        planned = self.scenario.get("backends") or []
        seen = {r.factors["backend"] for r in self.records}
        return [b for b in planned if b in seen] + sorted(seen - set(planned))

    def frame_sizes(self) -> list[int]:
        return sorted({r.factors["frame_size"] for r in self.records})

    def rule_counts(self) -> list[int]:
        return sorted({r.factors["rules"] for r in self.records
                       if r.factors["backend"] != "none"})


def load(path: str | Path) -> RunData:
    rd = RunDir.open(path)
    return RunData(Path(path), rd.meta(), rd.records())
