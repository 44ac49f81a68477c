"""The echo experiment's plan (cells, what is left out and why, frame checks, the time
estimate) and seed 001's statistics on made-up records (nothing measured): the
decrease against F = 0, the loss per rule, threads against epoll with its turning
point, the paired averages."""
from __future__ import annotations

import random

import pytest

from fwbench.experiments.echo import design
from fwbench.experiments.echo import stats as es
from fwbench.experiments.echo.design import FACTORS
from fwbench.errors import FwbenchError
from fwbench.experiments.base import Trial
from fwbench.plan import TrialKey
from fwbench.scenario import load


def settings(**echo):
    return load(None, {"method": "echo", "echo": echo}).echo


def test_the_full_design_leaves_out_what_has_no_meaning_with_reasons():
    s = settings(clients=[5, 320], protocols=["tcp", "udp", "sctp"], frames=[64, "64-1024"],
                 rules_per_client=[0, 4], transactions=["echo", "crr"],
                 conntrack_entries=[0, 1000])
    cells, left = design.cells(s, ["iptables-legacy"],
                               lambda c: "sctp: no SCTP" if c[1] == "sctp" else None)
    assert cells and len(set(cells)) == len(cells)
    c = [dict(zip(FACTORS, x)) for x in cells]
    assert not any(x["protocol"] == "udp" and x["server"] == "threads" for x in c)
    assert not any(x["transaction"] == "crr" and x["protocol"] != "tcp" for x in c)
    assert not any(x["entries"] and x["transaction"] != "crr" for x in c)
    assert not any(x["protocol"] == "sctp" for x in c)
    assert any(x["transaction"] == "crr" and x["entries"] == 1000 for x in c)
    assert any("thread per client" in why for why in left)
    # what has no meaning is said first: SCTP's crr and entries cells are not "no SCTP"
    assert left["sctp: no SCTP"] == 2 * 2 * 2 * 2 * 2   # n, family, frame, server, F
    total = 2 * 3 * 2 * 2 * 2 * 2 * 1 * 2 * 2
    assert len(cells) + sum(left.values()) == total


def test_designs_are_a_union_without_repeats_and_full_overrides_them():
    s = settings(designs=[{"name": "a", "clients": [5], "protocols": ["udp"]},
                          {"name": "b", "clients": [5, 10], "protocols": ["udp"]}],
                 families=["ipv4"], frames=[64], servers=["epoll"], rules_per_client=[0],
                 protocols=["tcp", "udp"])
    cells, _ = design.cells(s, ["nftables"], lambda c: None)
    assert [c[0] for c in cells] == [5, 10]
    full = load(None, {"method": "echo", "echo": {**s.model_dump(), "full": True}}).echo
    cells, _ = design.cells(full, ["nftables"], lambda c: None)
    assert {(c[0], c[1]) for c in cells} == {(n, p) for n in (5, 10, 20, 40, 80, 160, 320)
                                             for p in ("tcp", "udp")}


@pytest.mark.parametrize("frame, proto, family, says", [
    ("16", "udp", "ipv6", "16 is below the minimum 32 for udp/ipv6 (the message header)"),
    ("31-64", "tcp", "ipv4", "31 is below the minimum 32 for tcp/ipv4"),
    ("1473", "udp", "ipv4", "1473 is above the maximum 1472 for udp/ipv4 (one datagram"),
    ("64-1460", "udp", "ipv6", "1460 is above the maximum 1452 for udp/ipv6"),
    ("70000", "tcp", "ipv6", "70000 is above the maximum 65536 for tcp/ipv6"),
])
def test_frames_outside_the_protocols_bounds_are_one_line(frame, proto, family, says):
    with pytest.raises(FwbenchError, match=says.replace("(", r"\(").replace(")", r"\)")):
        design.validate_frame(frame, proto, family)
    design.validate_frame("32", proto, family)
    design.validate_frame("64-1024", "tcp", family)


@pytest.mark.parametrize("bad, says", [
    ({"clients": [0]}, "echo.clients.0: Input should be greater than or equal to 1"),
    ({"servers": ["fork"]}, "echo.servers.0: Input should be 'threads' or 'epoll'"),
    ({"frames": ["1024-64"]}, "frame '1024-64': a size (64) or a range LO-HI"),
    ({"protocols": ["quic"]}, "echo.protocols.0"),
    ({"designs": [{"name": "a"}, {"name": "a"}]}, "two designs share a name"),
])
def test_bad_echo_settings_are_one_line(bad, says):
    with pytest.raises(FwbenchError, match="^command line: " + ".*" + says.replace(
            "(", r"\(").replace(")", r"\)")):
        load(None, {"method": "echo", "echo": bad})


def test_the_estimate_grows_with_trials_rules_and_entries():
    cells = [(320, "udp", "ipv4", "64", "epoll", 4, "nftables", "echo", 0)]
    one = design.estimate_s(cells, 1, 2.0, 0.5)
    assert one == pytest.approx(design.TRIAL_OVERHEAD_S + 2.5 + 1280 * design.TRIAL_PER_RULE_S)
    assert design.estimate_s(cells, 3, 2.0, 0.5) == pytest.approx(3 * one)
    assert design.hms(59 * 60) == "59 min" and design.hms(3725) == "1 h 02 min"


# --- statistics on made-up records ------------------------------------------------------

def cell(n=40, proto="udp", family="ipv4", server="epoll", f=0, backend="iptables-legacy"):
    return (n, proto, family, "64", server, f, backend, "echo", 0)


def rec(c, rep, bps, status="ok"):
    t = Trial(FACTORS, TrialKey(c, rep), rep)
    if status != "ok":
        t.fail("verification: no")
    t.metrics = {"throughput": {"client_mean_bps": bps}}
    return t.record("r", "echo", "engine-echo", None, {})


def made_up(per_rule=None, noise=0.002, reps=5, seed=1):
    """Cells whose throughput falls by per_rule[family] % per rule (n x F)."""
    per_rule = per_rule or {"ipv4": 0.05, "ipv6": 0.03}
    rng = random.Random(seed)
    out = []
    for fam, slope in per_rule.items():
        for proto in ("tcp", "udp"):
            for n in (5, 40, 80):
                for f in (0, 2, 4):
                    base = 1e6 * (1 - slope * n * f / 100)
                    for i in range(reps):
                        out.append(rec(cell(n, proto, fam, "epoll", f), i,
                                       base * (1 + rng.gauss(0, noise))))
    return out


def test_the_per_rule_slope_recovers_the_made_up_gradient_with_an_interval():
    s = es.samples(made_up())
    for fam, want in (("ipv4", 0.05), ("ipv6", 0.03)):
        sl = es.per_rule_slope(s, fam, "iptables-legacy")
        assert sl.pct_per_rule == pytest.approx(want, rel=0.05)
        assert sl.interval[0] < want < sl.interval[1]
        assert sl.max_rules == 320 and sl.cells == 2 * 2 * 3 and sl.r2 > 0.99
    assert es.per_rule_slope(s, "ipv4", "nftables") is None


def test_decreases_are_against_the_same_cell_without_rules_and_holm_adjusted():
    recs = made_up() + [rec(cell(40, "udp", "ipv4", f=2), 9, 1.0, status="failed")]
    decs = es.decreases(es.samples(recs))
    d = next(d for d in decs if d.cell == cell(40, "udp", "ipv4", f=4))
    assert d.rules == 160 and d.decrease_pct == pytest.approx(8.0, abs=0.5)
    assert d.interval[0] < d.decrease_pct < d.interval[1] and d.n == d.n_ref == 5
    assert d.p_holm < 0.05
    assert all(x.cell[es.F_INDEX] for x in decs)


def test_threads_against_epoll_finds_the_turning_point():
    rng = random.Random(3)
    recs = []
    # threads 3 % faster at 5 and 20 clients, 3 % slower at 80 and 320
    for n, diff in ((5, 3), (20, 3), (80, -3), (320, -3)):
        for i in range(6):
            recs.append(rec(cell(n, "tcp", server="epoll"), i, 1e6 * (1 + rng.gauss(0, 0.003))))
            recs.append(rec(cell(n, "tcp", server="threads"), i,
                            1e6 * (1 + diff / 100 + rng.gauss(0, 0.003))))
    tests = es.server_tests(es.samples(recs))
    assert [t.clients for t in tests] == [5, 20, 80, 320]
    assert [t.verdict for t in tests] == ["threads faster"] * 2 + ["epoll faster"] * 2
    assert 20 < es.turning_point(tests) < 80
    assert es.turning_point(tests[:2]) is None


def test_paired_averages_pair_cells_equal_but_for_the_factor():
    rng = random.Random(5)
    recs = []
    for n in (5, 40, 320):
        for fam in ("ipv4", "ipv6"):
            for i in range(3):
                udp = 1e6 * (0.9 if fam == "ipv6" else 1) * (1 + rng.gauss(0, 0.001))
                recs.append(rec(cell(n, "udp", fam), i, udp))
                recs.append(rec(cell(n, "tcp", fam), i, udp * 0.92))
    s = es.samples(recs)
    a = es.paired_average(s, "protocol", "tcp", "udp", "TCP slower than UDP")
    assert a.pairs == 6 and a.slower_pct == pytest.approx(8.0, abs=0.3)
    assert a.interval[0] < 8.0 < a.interval[1] and a.p < 0.05
    v = es.paired_average(s, "family", "ipv6", "ipv4", "IPv6 slower")
    assert v.slower_pct == pytest.approx(10.0, abs=0.3)
    assert es.paired_average(s, "server", "threads", "epoll", "x") is None


def test_jain_index_and_percentile():
    assert es.jain([5.0] * 10) == pytest.approx(1.0)
    assert es.jain([1.0] + [0.0] * 9) == pytest.approx(0.1)
    assert es.percentile([1, 2, 3, 4, 5], 0.5) == 3 and es.percentile([1, 2], 0.05) == 1.05


# --- bad input through the command line -------------------------------------------------

# Bad settings are checked in-process above; these two are found when the run plans.
@pytest.mark.parametrize("echo, says", [
    ('frames = [16]', "echo frame 16: 16 is below the minimum 32 for tcp/ipv4 (the message "
                      "header)"),
    ('protocols = ["sctp"]', "echo: no cell can run here: sctp: this kernel has no SCTP"),
])
def test_bad_echo_input_is_one_line_and_a_nonzero_exit(tmp_path, echo, says):
    import subprocess
    import sys
    if "sctp" in echo and design.engine_echo.sctp_missing() is None:
        pytest.skip("this kernel has SCTP")
    base = {"clients": "[2]", "protocols": '["tcp"]', "families": '["ipv4"]',
            "frames": "[64]", "servers": '["epoll"]', "rules_per_client": "[0]"}
    key, _, value = echo.partition(" = ")
    base[key] = value
    sc = tmp_path / "s.toml"
    sc.write_text('method = "echo"\nbackends = ["nftables"]\n[echo]\n' +
                  "".join(f"{k} = {v}\n" for k, v in base.items()))
    cp = subprocess.run([sys.executable, "-m", "fwbench", "run", str(sc), "--out",
                         str(tmp_path / "run")], capture_output=True, text=True, timeout=60)
    assert cp.returncode != 0
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], cp.stderr
    assert "Traceback" not in cp.stderr and not (tmp_path / "run").exists()


def test_connection_rates_compare_with_no_rules_and_no_entries():
    def crr(f, entries, rep, rate):
        t = Trial(FACTORS, TrialKey((40, "tcp", "ipv4", "64", "epoll", f, "iptables-legacy",
                                     "crr", entries), rep), rep)
        t.metrics = {"throughput": {"client_mean_bps": 1.0, "msgs_per_s": rate}}
        return t.record("r", "echo", "engine-echo", None, {})
    recs = [crr(f, e, i, base * (1 + 0.001 * i)) for f, e, base in
            ((0, 0, 10000.0), (4, 0, 9000.0), (4, 50000, 8000.0)) for i in range(4)]
    rates = {(x.cell[es.F_INDEX], x.cell[-1]): x for x in es.conn_rates(recs)}
    assert rates[(0, 0)].change_pct is None and rates[(0, 0)].rate == pytest.approx(10015)
    assert rates[(4, 0)].change_pct == pytest.approx(-10.0, abs=0.01)
    assert rates[(4, 50000)].change_pct == pytest.approx(-20.0, abs=0.01)
    assert rates[(4, 50000)].p_holm < 0.05 and rates[(4, 50000)].interval[1] < 0
    # the ratio on the log scale: its interval holds its estimate, from the same test
    lo, hi = rates[(4, 0)].interval
    assert lo < -10.0 < hi and hi < 0


def test_a_client_starved_of_every_echo_makes_the_trial_invalid_not_a_traceback():
    """The engine reports no round-trip percentiles (null) for a client that
    completed no echo in the counted window; that is the machine's doing, so the
    trial is invalid (and runs again), with the client named."""
    from fwbench.errors import MeasurementInvalid
    from fwbench.experiments.echo.experiment import summarise
    fed = {"id": 1, "msgs_per_s": 900.0, "bytes_per_s": 9e5, "msgs": 450,
           "rtt_p50_ns": 40_000, "rtt_p99_ns": 90_000}
    starved = {**fed, "id": 2, "msgs_per_s": 0.0, "bytes_per_s": 0.0, "msgs": 0,
               "rtt_p50_ns": None, "rtt_p99_ns": None}
    rep = {"per_client": [fed, starved], "duration_s": 0.5, "rtt_ns": {},
           "totals": {"msgs": 450, "bytes_per_s": 9e5, "msgs_per_s": 900.0}}
    with pytest.raises(MeasurementInvalid, match="1 of 2 clients completed no echo.*client 2"):
        summarise(rep, {}, None, None, 0, 1.0, {}, {})
