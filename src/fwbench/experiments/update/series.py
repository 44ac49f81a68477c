"""What the sink's time series says about one update: when the kernel held the
new rule set (the probe flow), and what the kept flow saw around it. Pure: the
sink's and the senders' reports in, figures out; unit-tested on made-up series.

Times are CLOCK_MONOTONIC nanoseconds throughout, the clock of the senders'
schedule, the sink's stamps and time.monotonic_ns() alike.

The probe flow's packets are due every I = 1/rate. A flow the update lets
through starts with the first packet that reached the rule set after the change:
the change came after the packet before it was due and before it was, so it is
placed midway, within I/2 (the few microseconds a packet takes to reach the
hook are left out). A flow the update stops ends with the last packet that
passed: the change came within the interval after it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Slots kept in a record, at most: longer series are merged into coarser slots.
KEPT_SLOTS = 2000


@dataclass(frozen=True)
class Stream:
    """One stream of the sink's series (engine/common.h: fwb_span, slots)."""
    received: int
    first_sched_ns: int
    last_sched_ns: int
    max_gap_ns: int
    max_gap_end_ns: int
    outside: int
    first_slot: int
    packets: np.ndarray
    lat_sum_ns: np.ndarray
    lat_max_ns: np.ndarray
    first_arrival_ns: int = 0      # the earliest arrival; 0: not known

    @classmethod
    def of(cls, d: dict) -> "Stream":
        return cls(d["received"], d["first_sched_ns"], d["last_sched_ns"], d["max_gap_ns"],
                   d["max_gap_end_ns"], d["outside"], d["first_slot"],
                   np.asarray(d["packets"], dtype=np.int64),
                   np.asarray(d["lat_sum_ns"], dtype=np.int64),
                   np.asarray(d["lat_max_ns"], dtype=np.int64),
                   d.get("first_arrival_ns", 0))


@dataclass(frozen=True)
class Schedule:
    """A sender's schedule: packet i due at t0 + floor(i * 1e9 / rate), `sent` of
    them (engine/send.c)."""
    t0_ns: int
    rate_pps: float
    sent: int

    @property
    def interval_ns(self) -> float:
        return 1e9 / self.rate_pps

    def due(self) -> np.ndarray:
        return self.t0_ns + np.floor(np.arange(self.sent) * self.interval_ns).astype(np.int64)

    def per_slot(self, base_ns: int, slot_ns: int, slots: int) -> np.ndarray:
        """Packets due in each slot from `base_ns`."""
        k = (self.due() - base_ns) // slot_ns
        k = k[(k >= 0) & (k < slots)]
        return np.bincount(k, minlength=slots)[:slots]


@dataclass(frozen=True)
class Effect:
    """When the probe flow showed the new rule set: `at_ns` within +- `half_ns`."""
    at_ns: int
    half_ns: int
    problem: str | None = None


def probe_effect(probe: Stream, sched: Schedule, starts: bool, start_ns: int,
                 end_ns: int, lag_ns: int = 0) -> Effect:
    """When the update reached the kernel, from the probe flow (`starts`: the
    update lets it through; else it stops it); `problem` says why the probe
    cannot tell (then the trial is not valid).

    A packet meets the firewall at or after its scheduled time (the sender is
    never early, and may lag), and before it arrives. Starting: the change came
    after the last packet dropped met the firewall (at or after its schedule, one
    interval before the first that passed) and before the first that passed
    arrived. Stopping: after the last that passed met the firewall (at or after
    its schedule) and before the next met it: its schedule plus at most `lag_ns`,
    the most the sender fell behind. The middle of that interval, +- half of it."""
    i = sched.interval_ns
    half = int(i / 2)
    if starts:
        if not probe.received:
            return Effect(0, half, "the probe flow never passed: the change did not "
                                   "take effect while the probe ran")
        lo = probe.first_sched_ns - i
        hi = max(probe.first_arrival_ns, probe.first_sched_ns)
        at, half = int((lo + hi) / 2), int((hi - lo) / 2)
        if probe.first_sched_ns < start_ns - i:
            return Effect(at, half, "the probe flow passed before the update began: "
                                    "the rule set before it already let it through")
        # After its first packet every packet must pass: otherwise the flow
        # flickered, and the first packet did not mark the change.
        after = int(np.sum(sched.due() >= probe.first_sched_ns))
        if probe.received < after - max(2, after // 100):
            return Effect(at, half, f"the probe flow passed only {probe.received} of the "
                                    f"{after} packets due after it began")
        return Effect(at, half)
    if not probe.received or probe.first_sched_ns >= start_ns:
        return Effect(0, half, "the probe flow did not pass before the update: the "
                               "rule set before it did not let it through")
    lo, hi = probe.last_sched_ns, probe.last_sched_ns + i + lag_ns
    at, half = int((lo + hi) / 2), int((hi - lo) / 2)
    if probe.last_sched_ns >= sched.due()[-1] - i:
        return Effect(at, half, "the probe flow still passed when it ended: the change "
                                "did not take effect while the probe ran")
    if hi < start_ns:
        # The packet after the last that passed met the firewall before the update
        # began: the rule set before it let the probe through, so the instrument
        # lost what followed (a busy machine), and the stop says nothing.
        return Effect(at, half, f"the probe flow stopped {(start_ns - hi) / 1e6:,.1f} ms "
                                f"before the update began: packets were lost, not stopped")
    return Effect(at, half)


def kept_flow(kept: Stream, sched: Schedule, base_ns: int, slot_ns: int, start_ns: int,
              end_ns: int) -> dict:
    """What the flow the update leaves alone saw: packets lost (all, and those due
    from the update's start to the flow's end), the longest gap between two
    arrivals and when it ended, its latency before the update (median of slot
    means, 99th percentile of slot maxima) and its peak from the update's start
    on, and how long after the start its slots last showed loss or latency above
    twice that 99th percentile (0 when none did)."""
    n = len(kept.packets)
    slots = kept.first_slot + n
    expected = sched.per_slot(base_ns, slot_ns, max(slots, 1))
    got = np.zeros_like(expected)
    got[kept.first_slot:slots] = kept.packets
    lat_max = np.zeros_like(expected)
    lat_max[kept.first_slot:slots] = kept.lat_max_ns
    lat_sum = np.zeros_like(expected)
    lat_sum[kept.first_slot:slots] = kept.lat_sum_ns
    edge = base_ns + np.arange(len(expected)) * slot_ns          # each slot's start
    first_due = sched.t0_ns
    before = (edge >= first_due) & (edge + slot_ns <= start_ns) & (got > 0)
    during = edge + slot_ns > start_ns
    means = lat_sum[before] / got[before]
    base_median = float(np.median(means)) if means.size else None
    base_p99 = float(np.percentile(lat_max[before], 99)) if means.size else None
    lost_slots = np.maximum(expected - got, 0)
    peak = int(lat_max[during].max()) if np.any(during) else None
    recovery = 0.0
    if base_p99 is not None:
        bad = during & ((lost_slots > 0) | (lat_max > 2 * base_p99))
        if np.any(bad):
            last = int(np.nonzero(bad)[0][-1])
            recovery = max(0.0, (edge[last] + slot_ns - start_ns) / 1e9)
    return {
        "sent": sched.sent, "received": kept.received,
        "lost": max(0, sched.sent - kept.received),
        "lost_during": int(lost_slots[during].sum()),
        "max_gap_s": kept.max_gap_ns / 1e9,
        "max_gap_end_s": (kept.max_gap_end_ns - start_ns) / 1e9 if kept.max_gap_end_ns else None,
        "baseline_latency_us": base_median / 1e3 if base_median is not None else None,
        "baseline_p99_slot_max_us": base_p99 / 1e3 if base_p99 is not None else None,
        "peak_latency_us": peak / 1e3 if peak is not None else None,
        "recovery_s": recovery,
        "outside_series": kept.outside,
    }


def kept_series(kept: Stream, probe: Stream, sched: Schedule, base_ns: int, slot_ns: int,
                start_ns: int) -> dict:
    """The series for the record, merged into at most KEPT_SLOTS slots: per slot
    the kept flow's packets due and received, mean and maximum latency (us), and
    the probe flow's packets received; `t0_s` is the first slot's start relative
    to the update's start."""
    n = max(kept.first_slot + len(kept.packets), probe.first_slot + len(probe.packets), 1)
    expected = sched.per_slot(base_ns, slot_ns, n)

    def full(s: Stream, arr: np.ndarray) -> np.ndarray:
        out = np.zeros(n, dtype=np.int64)
        out[s.first_slot:s.first_slot + len(arr)] = arr
        return out

    got, lat_sum = full(kept, kept.packets), full(kept, kept.lat_sum_ns)
    lat_max, probe_got = full(kept, kept.lat_max_ns), full(probe, probe.packets)
    first = int(min(np.nonzero(expected)[0][0] if expected.any() else 0,
                    probe.first_slot if probe.packets.size else n))
    merge = max(1, -(-(n - first) // KEPT_SLOTS))
    groups = -(-(n - first) // merge)

    def merged(a: np.ndarray, how) -> np.ndarray:
        # Zeros pad the last group: no packets, no latency.
        part = np.zeros(groups * merge, dtype=a.dtype)
        part[:n - first] = a[first:n]
        return how(part.reshape(-1, merge), axis=1)

    g, e = merged(got, np.sum), merged(expected, np.sum)
    s = merged(lat_sum, np.sum)
    mean = np.where(g > 0, s / np.maximum(g, 1) / 1e3, np.nan)
    return {
        "t0_s": (base_ns + first * slot_ns - start_ns) / 1e9,
        "slot_s": slot_ns * merge / 1e9,
        "kept_due": e.tolist(), "kept_received": g.tolist(),
        "kept_mean_us": [None if np.isnan(x) else round(float(x), 1) for x in mean],
        "kept_max_us": [round(float(x) / 1e3, 1) for x in merged(lat_max, np.max)],
        "probe_received": merged(probe_got, np.sum).tolist(),
    }
