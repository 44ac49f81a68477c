"""A simulated firewall and traffic generator: a `Measurer` that answers from a curve.

In the spirit of nfvbench's fake traffic generator, `SimulatedFirewall` gives the
throughput search (and anything else written against `measure(duration, load)`) a
device under test whose true answer is known, so the search is unit-tested without
root, namespaces or a real sender. It models what makes real searches hard:

- trial-to-trial noise in the capacity (`noise`, a relative standard deviation);
- rare loss bursts that have nothing to do with the load (`spike_prob`);
- a sender with its own ceiling (`sender_max_pps`), above which the trial measures
  the generator, not the firewall (`TrialResult.sender_short`);
- an optional gentle loss knee above the capacity (`knee`), so that PDR 0.5 % lies
  visibly above NDR instead of a hair above it.

The firewall is a pipe: below its capacity everything is forwarded; above it, at most
the forwarding curve's rate gets through and the rest is lost.
"""
from __future__ import annotations

import math
import random

from fwbench.measurer import TrialResult

# Latency percentiles as multiples of the mean: a right-skewed, plausible shape.
_LATENCY_SHAPE = {"p50": 0.9, "p90": 1.6, "p99": 2.5, "p99_9": 3.5, "max": 5.0}


def forwarded_rate(load_pps: float, capacity_pps: float, knee: float = 0.0) -> float:
    """Packets per second the pipe forwards at `load_pps`.

    Up to the capacity, everything. With `knee == 0`, nothing more than the capacity.
    With a knee, the forwarded rate keeps rising, ever more slowly, over
    `capacity * knee` more load and levels off at `capacity * (1 + knee/2)`: loss
    starts at the capacity but grows quadratically at first, as on a device whose
    queues start overflowing before its CPU is fully busy.
    """
    if load_pps <= capacity_pps:
        return load_pps
    if knee <= 0:
        return capacity_pps
    span = capacity_pps * knee
    over = min(load_pps - capacity_pps, span)
    return capacity_pps + over - over * over / (2 * span)


class SimulatedFirewall:
    """A fake firewall plus traffic generator implementing the `Measurer` protocol.

    All parameters are keywords:

    - `true_ndr_pps`: the capacity; the noiseless curve loses nothing up to here.
    - `noise`: relative standard deviation of the capacity from trial to trial.
    - `spike_prob`: chance that a trial suffers a loss burst whatever the load.
    - `spike_loss_ratio`: size of that burst as a share of the trial's packets (at
      least one packet); the default stays below a 0.5 % PDR, so spikes hurt NDR only.
    - `knee`: relative width of the gentle loss knee above the capacity (0 = a pipe).
    - `sender_max_pps`: the generator's own ceiling; above it the sender falls short.
    - `base_latency_us`, `queue_latency_us`: latency at no load, and with full queues.
    - `seed`: seeds the private `random.Random`, so every run is reproducible.

    `calls`, `total_duration_s` and `loads` record what the caller asked for, so tests
    can check how a method spends its time.
    """

    def __init__(self, *, true_ndr_pps: float = 100_000.0, noise: float = 0.0,
                 spike_prob: float = 0.0, spike_loss_ratio: float = 0.001,
                 knee: float = 0.0, sender_max_pps: float = math.inf,
                 base_latency_us: float = 20.0, queue_latency_us: float = 2_000.0,
                 seed: int = 0):
        if not true_ndr_pps > 0:
            raise ValueError(f"true_ndr_pps must be > 0, got {true_ndr_pps!r}")
        if not 0 <= noise < 1:
            raise ValueError(f"noise must be in [0, 1), got {noise!r}")
        if not 0 <= spike_prob <= 1:
            raise ValueError(f"spike_prob must be in [0, 1], got {spike_prob!r}")
        if not 0 <= spike_loss_ratio <= 1:
            raise ValueError(f"spike_loss_ratio must be in [0, 1], got {spike_loss_ratio!r}")
        if not knee >= 0:
            raise ValueError(f"knee must be >= 0, got {knee!r}")
        if not sender_max_pps > 0:
            raise ValueError(f"sender_max_pps must be > 0, got {sender_max_pps!r}")
        if not 0 < base_latency_us <= queue_latency_us:
            raise ValueError("need 0 < base_latency_us <= queue_latency_us")
        self.true_ndr_pps = float(true_ndr_pps)
        self.noise = noise
        self.spike_prob = spike_prob
        self.spike_loss_ratio = spike_loss_ratio
        self.knee = knee
        self.sender_max_pps = sender_max_pps
        self.base_latency_us = base_latency_us
        self.queue_latency_us = queue_latency_us
        self.rng = random.Random(seed)
        self.calls = 0
        self.total_duration_s = 0.0
        self.loads: list[float] = []

    def loss_ratio_at(self, load_pps: float) -> float:
        """The noiseless curve's loss ratio at `load_pps` (no spikes, no sender limit)."""
        return 1 - forwarded_rate(load_pps, self.true_ndr_pps, self.knee) / load_pps

    def true_rate(self, loss_ratio: float) -> float:
        """The offered load at which the noiseless curve's loss first exceeds
        `loss_ratio`: the answer a perfect search for that goal would give."""
        if not 0 <= loss_ratio < 1:
            raise ValueError(f"loss_ratio must be in [0, 1), got {loss_ratio!r}")
        low = self.true_ndr_pps
        if loss_ratio == 0:
            return low
        # The loss ratio grows monotonically above the capacity; bisect for the crossing.
        high = low * (1 + self.knee) / (1 - loss_ratio) * 2
        for _ in range(200):
            mid = (low + high) / 2
            if self.loss_ratio_at(mid) > loss_ratio:
                high = mid
            else:
                low = mid
        return high

    def measure(self, duration_s: float, offered_pps: float) -> TrialResult:
        """One simulated trial: integer counts, noisy capacity, maybe a spike."""
        if not duration_s > 0 or not offered_pps > 0:
            raise ValueError(f"need duration_s > 0 and offered_pps > 0, "
                             f"got {duration_s!r}, {offered_pps!r}")
        self.calls += 1
        self.total_duration_s += duration_s
        self.loads.append(offered_pps)

        # Draw both random numbers every trial, so one parameter's value does not
        # shift the random sequence that another parameter sees.
        capacity = self.true_ndr_pps * max(0.01, 1 + self.rng.gauss(0, 1) * self.noise)
        spike = self.rng.random() < self.spike_prob

        sent = round(min(offered_pps, self.sender_max_pps) * duration_s)
        achieved = sent / duration_s
        if achieved <= capacity:
            received = sent
        else:
            forwarded = forwarded_rate(achieved, capacity, self.knee)
            received = min(sent, math.floor(forwarded * duration_s))
        if spike and received:
            received -= min(received, max(1, round(sent * self.spike_loss_ratio)))

        return TrialResult(
            offered_pps=offered_pps, duration_s=duration_s, sent=sent, received=received,
            achieved_pps=achieved, latency_us=self._latency(achieved / capacity),
            extra={"simulated": True, "capacity_pps": capacity, "spike": spike})

    def _latency(self, utilisation: float) -> dict[str, float]:
        """Latency that grows as the load nears the capacity (M/D/1-like waiting)
        and sits at the full-queue delay beyond it."""
        if utilisation < 1:
            wait = self.base_latency_us * utilisation / (2 * (1 - utilisation))
            mean = min(self.queue_latency_us, self.base_latency_us + wait)
        else:
            mean = self.queue_latency_us
        latency = {name: round(mean * k, 1) for name, k in _LATENCY_SHAPE.items()}
        latency.update(mean=round(mean, 1), min=round(self.base_latency_us * 0.8, 1))
        return latency
