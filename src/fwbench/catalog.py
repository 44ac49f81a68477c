"""Which experiment runs each method: the table `fwbench.experiments.get` imports
from, and the scenario checks `method` against. Adding an experiment touches its
module and this table. It imports nothing, so the scenario below the experiments
can read it."""

# method -> "module:Class". The rule-count sweeps share one experiment, one method each.
EXPERIMENTS: dict[str, str] = {
    "maxrate": "fwbench.experiments.sweep:Sweep",
    "throughput": "fwbench.experiments.sweep:Sweep",
    "latency": "fwbench.experiments.sweep:Sweep",
    "lossload": "fwbench.experiments.sweep:Sweep",
    # seed 003: the sweep's cells x chain (forward, input) x CPUs
    "fixedrate": "fwbench.fixedrate.experiment:FixedRateSweep",
    "cpucost": "fwbench.experiments.sweep:Sweep",
    "droprate": "fwbench.droprate.experiment:DropRate",
    "loadlatency": "fwbench.loadlatency.experiment:LoadLatency",
    "echo": "fwbench.echo.experiment:Echo",
    "update": "fwbench.update.experiment:Update",
}
