"""The TCP load and the latency probes together in a real testbed with no firewall
rules: the load reaches both directions, the probes run beside it with one entry per
second, and latency is recorded with and without the load, interleaved."""
import random

import pytest

from fwbench.traffic.native import Flow
from fwbench.traffic.latency_series import EngineProbeSeries, PingSeries
from fwbench.traffic.tcpload import PORT, TcpBidirLoad

LOAD_S, PROBE_S = 3, 2


def probe(tb, probes: EngineProbeSeries, load: TcpBidirLoad | None):
    """Ping and engine probes for PROBE_S seconds, under a LOAD_S-second load when
    `load` is given (started first, the probes once every connection is up)."""
    dst = tb.topo.server.ip4
    run = None
    if load:
        run = load.begin(tb, dst, LOAD_S)
        run.wait_connected()
    try:
        ping = PingSeries().begin(tb, dst, PROBE_S)
        eng = probes.begin(tb, PROBE_S)
        p, e = ping.wait(), eng.wait()
    except BaseException:
        if run:
            run.abort()
        raise
    return p, e, run.wait() if run else None


def test_load_both_ways_with_probes_beside_it_and_without(testbed):
    tb = testbed
    load = TcpBidirLoad(streams=4)
    # The probes' flow is the seed's service port, as seed004-forward lets through.
    probes = EngineProbeSeries(Flow(dport=PORT, sink_port=PORT))
    rng = random.Random()
    got = {"idle": [], "load": []}
    try:
        load.start_server(tb)
        load.start_server(tb)   # idempotent
        probes.start(tb)
        for _ in range(2):
            for which in rng.sample(["idle", "load"], 2):
                got[which].append(probe(tb, probes, load if which == "load" else None))
    finally:
        probes.close()
        load.stop_server(tb)

    for which, trials in got.items():
        for p, e, r in trials:
            assert len(p.per_second()) == PROBE_S and len(e.per_second()) == PROBE_S
            s = p.summary()
            assert s["count"] > 0 and s["median"] > 0 and s["p99"] > 0, (which, s)
            assert all(row["n"] > 0 for row in p.per_second()), (which, p.per_second())
            es = e.summary()
            assert es["received"] > 0 and es["p50"] > 0 and es["p99"] >= es["p50"], es
            assert all(row["received"] > 0 and row["p50"] > 0 for row in e.per_second())
            if which == "idle":
                assert r is None
                continue
            assert r.up_bps > 50e6 and r.down_bps > 50e6, r.as_dict()
            assert r.up_retransmits is not None and r.down_retransmits is not None
            assert r.duration_s == pytest.approx(LOAD_S, abs=0.5)
            assert len(r.per_second) == LOAD_S
            print(f"\nload: up {r.up_bps / 1e9:.2f} Gbit/s ({r.up_retransmits} retr), "
                  f"down {r.down_bps / 1e9:.2f} Gbit/s ({r.down_retransmits} retr)")
    for which, trials in got.items():
        for p, e, _ in trials:
            s, es = p.summary(), e.summary()
            print(f"{which}: ping median {s['median']:.0f} p99 {s['p99']:.0f} us (n {s['count']}); "
                  f"engine p50 {es['p50']:.0f} p99 {es['p99']:.0f} us, "
                  f"send lag p99 max {max(x['send_lag_p99'] or 0 for x in e.per_second()):.0f} us")
