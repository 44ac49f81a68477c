"""What an experiment declares about itself, in one place: its scenario section and
the checks a scenario of its method must pass, its metrics and the title of the
table that ends a run, its report section, the study it runs and the function
deciding that study's claims, and the class that runs it.

A declaration is light (settings models, metrics, strings, and "module:attr" names
of what is imported only when used), so the scenario, the metric registry, the
report, the findings and the CLI read every experiment's through fwbench.catalog
without importing any experiment's code.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Study:
    """A study as `fwbench study` runs it: the seed's design as one scenario."""
    id: str
    title: str
    scenario: str         # under scenarios/
    runs: str             # what it measures, in a line
    scale: str            # against the seed's own design
    minutes: float        # measured here from a fresh clone (2 vCPU VM), for planning


@dataclass(frozen=True)
class Room:
    method: str                     # the scenario's `method`
    experiment: str                 # "module:Class" of its experiments.base.Experiment
    help: str                       # the method, in a line, for `fwbench run --method`
    title: str                      # what its headline means (the end-of-run table's title)
    metrics: tuple                  # its metrics.Metric, headline first
    # Scenario sections it reads: name -> pydantic model, defaults and validation
    # there. A section shared by several methods is the same model in each.
    settings: dict[str, type] = field(default_factory=dict)
    # Scenario keys whose default differs for this method (laid under what is given).
    defaults: dict[str, Any] = field(default_factory=dict)
    # Checks across keys of a scenario of this method; raise ValueError.
    validate: Callable[[Any], None] | None = None
    # Checks of its sections whatever the method (e.g. a key of its own set elsewhere).
    validate_any: Callable[[Any], None] | None = None
    # Scenario keys that do not apply to it ("section.key" for a section's) -> why,
    # refused as given, before validation; and whether its own sections are refused
    # in a scenario of another method.
    refuses: dict[str, str] = field(default_factory=dict)
    exclusive: bool = False
    traffics: tuple[str, ...] = ("engine",)     # the scenario's `traffic` values it takes
    keep_loaded: bool = False       # whether `keep_loaded` applies (the rule-count sweeps)
    report: str | None = None       # "module:function" RunData -> report.cells.CellReport;
                                    # None: the sweep's report, or report.cells' own
    study: Study | None = None      # the study whose scenario runs this method
    study_always: bool = True       # its runs are that study's whatever the scenario says
    claims: tuple = ()              # the study's claims (findings.Claim), in its order
    findings: str | None = None     # "module:function" RunData -> [findings.Finding],
                                    # one per claim it decides
