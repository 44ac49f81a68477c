"""The update experiment's reading of the sink's time series, on made-up series
whose answers are known: when the probe flow changed, what the kept flow lost,
its longest gap, latency peak and recovery."""
import numpy as np
import pytest

from fwbench.experiments.update import series

MS = 1_000_000


def stream(packets, first_slot=0, lat_ns=50_000, received=None, first=0, last=0,
           gap=0, gap_end=0):
    packets = np.asarray(packets, dtype=np.int64)
    return series.Stream(int(packets.sum()) if received is None else received, first, last,
                         gap, gap_end, 0, first_slot, packets, packets * lat_ns,
                         np.where(packets > 0, lat_ns, 0))


def test_schedule_counts_every_packet_in_its_slot():
    s = series.Schedule(t0_ns=10 * MS, rate_pps=1000, sent=100)   # 1 ms apart
    per = s.per_slot(base_ns=0, slot_ns=MS, slots=200)
    assert per.sum() == 100 and per[10] == 1 and per[109] == 1 and per[110] == 0
    assert s.per_slot(base_ns=0, slot_ns=10 * MS, slots=20)[1:11].tolist() == [10] * 10


def test_a_starting_probe_is_placed_midway_before_its_first_packet():
    sched = series.Schedule(t0_ns=0, rate_pps=1000, sent=1000)     # due 0..999 ms
    start = 500 * MS
    # The first packet through was due at 503 ms: the change came after 502 ms.
    probe = stream([0] * 503 + [1] * 497, received=497, first=503 * MS, last=999 * MS)
    e = series.probe_effect(probe, sched, True, start, 510 * MS)
    assert e.problem is None and e.at_ns == int(502.5 * MS) and e.half_ns == MS // 2


@pytest.mark.parametrize("received,first,msg", [
    (0, 0, "never passed"),
    (1000, 0, "passed before the update began"),
    (300, 503 * MS, "passed only 300 of the 497"),
])
def test_a_starting_probe_that_cannot_tell(received, first, msg):
    sched = series.Schedule(t0_ns=0, rate_pps=1000, sent=1000)
    probe = stream([1], received=received, first=first, last=999 * MS)
    e = series.probe_effect(probe, sched, True, 500 * MS, 510 * MS)
    assert e.problem and msg in e.problem


def test_a_stopping_probe_is_placed_after_its_last_packet():
    sched = series.Schedule(t0_ns=0, rate_pps=100, sent=100)       # due every 10 ms
    probe = stream([1], received=61, first=0, last=600 * MS)
    e = series.probe_effect(probe, sched, False, 550 * MS, 700 * MS)
    assert e.problem is None and e.at_ns == 605 * MS and e.half_ns == 5 * MS
    still = stream([1], received=100, first=0, last=990 * MS)
    assert "still passed" in series.probe_effect(still, sched, False, 550 * MS, 0).problem
    never = stream([1], received=10, first=560 * MS, last=650 * MS)
    assert "did not pass before" in series.probe_effect(never, sched, False, 550 * MS,
                                                         0).problem
    # Its last packet due at 400 ms, the next by 410 ms at most: stopped before the
    # update began at 550 ms, so lost on the way, not stopped by the change.
    early = stream([1], received=41, first=0, last=400 * MS)
    e = series.probe_effect(early, sched, False, 550 * MS, 700 * MS)
    assert e.problem and "stopped 140.0 ms before the update began" in e.problem
    # Stopped within one interval (and the sender's lag) of the start: it can be the change.
    lagging = stream([1], received=55, first=0, last=540 * MS)
    assert series.probe_effect(lagging, sched, False, 550 * MS, 700 * MS).problem is None


def test_a_lagging_sender_widens_the_interval_to_what_the_packets_prove():
    from dataclasses import replace
    sched = series.Schedule(t0_ns=0, rate_pps=1000, sent=1000)
    # The first packet through was due at 503 ms but sent late, arriving at 507:
    # the change came between 502 ms (the packet before met the firewall no
    # earlier) and 507 ms (the first through had passed it by then).
    probe = replace(stream([0] * 503 + [1] * 497, received=497, first=503 * MS,
                           last=999 * MS), first_arrival_ns=507 * MS)
    e = series.probe_effect(probe, sched, True, 500 * MS, 510 * MS)
    assert e.problem is None and e.at_ns == int(504.5 * MS) and e.half_ns == int(2.5 * MS)
    # Stopping: the next packet due 610 ms may have met the firewall up to the
    # sender's largest lag, 4 ms, later.
    sched = series.Schedule(t0_ns=0, rate_pps=100, sent=100)
    probe = stream([1], received=61, first=0, last=600 * MS)
    e = series.probe_effect(probe, sched, False, 550 * MS, 700 * MS, lag_ns=4 * MS)
    assert e.problem is None and e.at_ns == 607 * MS and e.half_ns == 7 * MS


def test_the_kept_flow_loss_gap_peak_and_recovery():
    # 10 packets a ms for 1 s; the update starts at 500 ms; slots 520..529 lose
    # everything, and slot 530 arrives late (2 ms).
    sched = series.Schedule(t0_ns=0, rate_pps=10_000, sent=10_000)
    packets = np.full(1000, 10)
    packets[520:530] = 0
    kept = stream(packets, lat_ns=40_000, gap=10 * MS, gap_end=530 * MS)
    kept.lat_max_ns[530] = 2 * MS
    kept.lat_sum_ns[530] = 10 * 2 * MS
    m = series.kept_flow(kept, sched, base_ns=0, slot_ns=MS, start_ns=500 * MS,
                         end_ns=510 * MS)
    assert m["lost"] == 100 and m["lost_during"] == 100
    assert m["max_gap_s"] == pytest.approx(0.010) and m["max_gap_end_s"] == pytest.approx(0.030)
    assert m["baseline_latency_us"] == pytest.approx(40.0)
    assert m["peak_latency_us"] == pytest.approx(2000.0)
    assert m["recovery_s"] == pytest.approx(0.031)


def test_an_untouched_kept_flow_recovers_at_once():
    sched = series.Schedule(t0_ns=0, rate_pps=1000, sent=1000)
    m = series.kept_flow(stream(np.ones(1000)), sched, 0, MS, 500 * MS, 510 * MS)
    assert m["lost"] == 0 and m["lost_during"] == 0 and m["recovery_s"] == 0.0


def test_the_recorded_series_is_merged_and_keeps_its_sums():
    sched = series.Schedule(t0_ns=0, rate_pps=1000, sent=5000)
    kept = stream(np.ones(5000))
    probe = stream(np.r_[np.zeros(2500), np.ones(2500)])
    out = series.kept_series(kept, probe, sched, 0, MS, start_ns=2000 * MS)
    assert len(out["kept_due"]) <= series.KEPT_SLOTS
    assert sum(out["kept_due"]) == sum(out["kept_received"]) == 5000
    assert sum(out["probe_received"]) == 2500
    assert out["t0_s"] == pytest.approx(-2.0) and out["slot_s"] == pytest.approx(0.003)
