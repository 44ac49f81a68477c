"""The kubeproxy experiment's pure parts: its settings, its plan, the spread test,
the pooled percentiles and their intervals, and the claims decided on planted
trials."""
from __future__ import annotations

import math
import random

import pytest

from fwbench.errors import FwbenchError
from fwbench.experiments.kubeproxy import DIRECT, KubeProxySettings
from fwbench.experiments.kubeproxy import section as sec
from fwbench.experiments.kubeproxy.experiment import FACTORS, KubeProxy, spread
from fwbench.findings import DOES_NOT_HOLD, HOLDS, NOT_SHOWN
from fwbench.report.data import RunData
from fwbench.results import SCHEMA_VERSION, TrialRecord
from fwbench.scenario import load


def test_settings_refuse_what_cannot_run():
    for bad, said in ((["nftables"], "BACKEND:MODE"), (["nftables:ebpf"], "BACKEND:MODE"),
                      (["nftables:nftables"] * 2, "listed twice")):
        with pytest.raises(ValueError, match=said):
            KubeProxySettings(configs=bad)
    with pytest.raises(ValueError, match="262,144"):
        KubeProxySettings(services=[30000], endpoints=9)
    with pytest.raises(ValueError, match="search_start"):
        KubeProxySettings(search_start=100.0, search_max=50.0)


def test_scenario_refuses_keys_that_do_not_apply():
    with pytest.raises(FwbenchError, match="backends: does not apply to method kubeproxy"):
        load(None, {"method": "kubeproxy", "backends": ["nftables"]})
    with pytest.raises(FwbenchError, match="kubeproxy: applies to method kubeproxy"):
        load(None, {"method": "maxrate", "kubeproxy": {"endpoints": 2}})


def test_plan_is_every_pair_at_every_size_and_the_direct_cell():
    sc = load(None, {"method": "kubeproxy", "kubeproxy": {
        "services": [100, 200], "configs": ["iptables-nft:iptables", "nftables:nftables"]}})
    p = KubeProxy(sc).plan()
    assert p.cells == [("iptables-nft", "iptables", 100), ("iptables-nft", "iptables", 200),
                       ("nftables", "nftables", 100), ("nftables", "nftables", 200),
                       ("none", DIRECT, 0)]
    assert p.scenario.backends == ["iptables-nft", "nftables", "none"]


def test_targets_are_the_services_or_the_endpoints_themselves():
    sc = load(None, {"method": "kubeproxy", "kubeproxy": {
        "services": [50, 20], "endpoints": 2, "configs": ["nftables:nftables"]}})
    exp = KubeProxy(sc)
    cell = exp.cell
    from fwbench.plan import TrialKey
    svc = exp._targets(cell(TrialKey(("nftables", "nftables", 20), 0)))
    assert len(svc) == 20 == len(set(svc)) and {p for _, p in svc} == {80}
    direct = exp._targets(cell(TrialKey(("none", DIRECT, 0), 0)))
    # every endpoint of the largest size, each once
    assert len(direct) == 100 == len(set(direct)) and all(p >= 8080 for _, p in direct)


def test_spread_tests_counts_against_equal_shares():
    even = spread([100, 98, 102])
    assert even["p"] > 0.5 and even["total"] == 300
    skewed = spread([150, 75, 75])
    assert skewed["p"] < 1e-6
    # below 5 expected a cell the approximation fails: no p at all
    assert spread([3, 2, 4])["p"] is None
    assert spread([40])["p"] is None


def test_pooled_percentiles_and_their_intervals_cover_the_truth():
    rng = random.Random(3)
    # two trials' histograms of 1 ns buckets below 128 ns, 128 a power of two above:
    # values drawn from a known distribution, binned as the engine bins them
    from fwbench.traffic.connections import bucket_width

    def hist(values):
        out = {}
        for v in values:
            lo = v if v < 128 else (2 ** math.floor(math.log2(v))) + \
                ((v - 2 ** math.floor(math.log2(v))) // bucket_width(v)) * bucket_width(v)
            out[float(lo)] = out.get(float(lo), 0) + 1
        return sorted(out.items())

    a = [int(rng.expovariate(1 / 40000)) + 20000 for _ in range(4000)]
    b = [int(rng.expovariate(1 / 40000)) + 20000 for _ in range(4000)]
    d = sec.pooled([hist(a), hist(b)])
    assert d.count == 8000
    every = sorted(a + b)
    for q in (0.01, 0.5, 0.9, 0.99):
        truth = every[math.ceil(q * len(every)) - 1] / 1000
        lo, hi = d.percentile_interval(q)
        assert lo <= truth <= hi
        assert abs(sec.quantile(d, q) - truth) / truth < 0.01
    assert sec.pooled([[], []]) is None


def _record(i, backend, mode, n, rep, p01, p50, p99):
    rtt = {"count": 1000, "p01": p01, "p50": p50, "p90": p50 * 1.3, "p99": p99}
    return TrialRecord(
        schema_version=SCHEMA_VERSION, run_id="k", trial=i,
        factors=dict(zip(FACTORS, (backend, mode, n))), method="kubeproxy",
        traffic="engine-connect", repetition=rep, status="ok", reason=None,
        verification={"ok": True}, load_time_s=0.01 * n / 1000,
        metrics={"connect": {"connected": 1000, "rtt": rtt,
                             "rtt_hist": [[1000 * p50, 1000]]},
                 "search": {"held": 5000.0, "limited_by": None, "steps": []},
                 "spread": {"service": {"p": 0.5}}, "position": {"p": 0.4}},
        started_at="2026-01-01T00:00:00Z", duration_s=5.0, ruleset_sha256=None,
        conditions={})


def _run(model) -> RunData:
    rng = random.Random(7)
    recs, plan, i = [], [], 0
    for rep in range(5):
        for (b, mode, n), (p01, p50, p99) in model.items():
            j = lambda v: v * (1 + 0.02 * rng.gauss(0, 1))  # noqa: E731
            recs.append(_record(i, b, mode, n, rep, j(p01), j(p50), j(p99)))
            plan.append({"backend": b, "mode": mode, "services": n, "repetition": rep})
            i += 1
    sc = load(None, {"method": "kubeproxy"}).dump()
    return RunData(None, {"scenario": sc, "factors": list(FACTORS), "plan": plan}, recs)


def test_claims_are_decided_on_the_trials():
    # As published: nft p50 = iptables p01 at 5k and 10k, nft p99 below iptables p01
    # at 30k, iptables grows 5.7x, nftables flat.
    model = {("iptables-nft", "iptables", 5000): (40, 47, 150),
             ("iptables-nft", "iptables", 10000): (50, 62, 260),
             ("iptables-nft", "iptables", 30000): (200, 270, 710),
             ("nftables", "nftables", 5000): (30, 40, 60),
             ("nftables", "nftables", 10000): (40, 50, 70),
             ("nftables", "nftables", 30000): (31, 41, 62)}
    found = {f.claim.key: f.verdict for f in sec.findings(sec.Cells(_run(model)))}
    assert found == {"nft-p50-at-iptables-p01": HOLDS, "nft-p99-below-iptables-p01": HOLDS,
                     "iptables-grows": HOLDS, "nft-flat": HOLDS}
    # The opposite world: nftables as slow as iptables everywhere, iptables flat.
    flat = {k: (40, 47, 150) for k in model}
    found = {f.claim.key: f.verdict for f in sec.findings(sec.Cells(_run(flat)))}
    assert found == {"nft-p50-at-iptables-p01": DOES_NOT_HOLD,
                     "nft-p99-below-iptables-p01": DOES_NOT_HOLD,
                     "iptables-grows": DOES_NOT_HOLD, "nft-flat": HOLDS}
    # Without 30,000 services the claims about it are not shown.
    small = {k: v for k, v in model.items() if k[2] != 30000}
    found = {f.claim.key: f.verdict for f in sec.findings(sec.Cells(_run(small)))}
    assert found["nft-p99-below-iptables-p01"] == NOT_SHOWN == found["iptables-grows"]
    assert found["nft-p50-at-iptables-p01"] == HOLDS


def test_control_table_gives_each_mechanisms_medians_and_the_memory():
    data = _run({("iptables-legacy", "iptables", 1000): (40, 47, 150),
                 ("nftables", "nftables", 1000): (30, 40, 60)})
    for r in data.ok:
        k = r.repetition + 1            # 1..5: medians 3 (ms), 3 MiB
        r.metrics["control"] = {
            "mechanisms": {"sync": {"add": {"command_s": k / 1e3},
                                    "remove": {"command_s": 2 * k / 1e3}}},
            "listing": {"s": 0.1 * k}}
        r.metrics["memory"] = {"held_bytes": k * 2**20}
    t = sec.control_table(sec.Cells(data))
    assert t.header == ["mode", "backend", "services", "sync add ms", "sync remove ms",
                      "listing s", "kernel memory MiB", "trials"]
    assert t.rows[0] == ["iptables", "iptables-legacy", "1,000", "3.0 (1.0..5.0)",
                         "6.0 (2.0..10.0)", "0.30 (0.10..0.50)", "3.0 (1.0..5.0)", "5"]
    assert [r[0] for r in t.rows] == ["iptables", "nftables"]
    for r in data.ok:
        del r.metrics["control"]
    assert sec.control_table(sec.Cells(data)) is None


def test_the_control_mechanisms_are_checked_before_any_testbed():
    with pytest.raises(ValueError, match="'sync', 'batch', 'commands' or 'reload'"):
        KubeProxySettings(control=["swap"])
    with pytest.raises(ValueError, match="listed twice"):
        KubeProxySettings(control=["sync", "sync"])
    sc = load(None, {"method": "kubeproxy", "kubeproxy": {
        "services": [20], "configs": ["xdp-linear:iptables"], "control": ["sync"]}})
    with pytest.raises(FwbenchError, match="control: xdp-linear has no update mechanism "
                                           "'sync'"):
        KubeProxy(sc).preflight()


def test_flows_table_gives_the_message_rate_by_cell():
    data = _run({("nftables", "nftables", 1000): (30, 40, 60)})
    for r in data.ok:
        r.metrics["flows"] = {"flows": 16, "msgs": 100, "msgs_per_s": 1000.0 * (r.repetition + 1),
                              "rtt": {"p50": 50_000.0, "p99": 90_000.0}}
    t = sec.flows_table(sec.Cells(data))
    assert t.rows == [["nftables", "nftables", "1,000", "3,000 (1,000..5,000)",
                       "50.0 (50.0..50.0)", "16", "5"]]


def test_the_flows_go_to_a_service_whose_endpoints_share_one_port():
    # 6,000 services of 3: 18,000 endpoints past the 16,384 pod addresses, so some
    # services' endpoints are on 8081 and one straddles 8080 and 8081.
    sc = load(None, {"method": "kubeproxy", "seed": 1, "kubeproxy": {
        "services": [6000], "endpoints": 3, "configs": ["nftables:nftables"]}})
    exp = KubeProxy(sc)
    from fwbench.plan import TrialKey
    svcs = exp.services(6000)
    ports = [{p for _, p in s.endpoints} for s in svcs]
    assert {8080} in ports and {8081} in ports and {8080, 8081} in ports
    for key in (("nftables", "nftables", 6000), ("none", DIRECT, 0)):
        svc = exp._flow_service(exp.cell(TrialKey(key, 0)))
        assert len({p for _, p in svc.endpoints}) == 1
        assert svc == next(s for s, p in zip(svcs, ports) if len(p) == 1)
