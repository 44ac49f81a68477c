"""Seed 003 in full without root: the INPUT rule set and what the reference evaluator
says of it, the stats (degradation points, the iptables advantage, INPUT against
FORWARD, CPUs) on made-up records, the method's INPUT count and the CPU steering."""
import math

import pytest

from fwbench.errors import FwbenchError
from fwbench.experiments.fixedrate import stats
from fwbench.experiments.fixedrate.experiment import FACTORS, steered_cpus
from fwbench.experiments.fixedrate.method import FixedRate, flow_pps
from fwbench.methods.simulated import SimulatedFirewall
from fwbench.results import SCHEMA_VERSION, TrialRecord
from fwbench.ruleset.evaluate import Evaluator
from fwbench.ruleset.model import Interfaces
from fwbench.ruleset.render import iptables, nft
from fwbench.ruleset.templates.seed000 import seed000
from fwbench.experiments.fixedrate import FixedRateSettings
from fwbench.scenario import from_dict


# --- the INPUT rule set -----------------------------------------------------------------

def test_input_rule_set_sits_at_input_and_is_addressed_to_the_firewall():
    rs = seed000(5, chain="input")
    (table,) = rs.tables
    base = table.chains[0]
    assert (base.name, base.hook, base.policy) == ("input", "input", "drop")
    assert rs.flow.daddr == "198.18.0.1" and rs.name == "seed000-linear-input"
    assert all(p.local for p in rs.probes)
    # The same entries as FORWARD's but for the firewall's address: same size.
    assert rs.rule_count == seed000(5).rule_count
    ifs = Interfaces("c0", "s0", ("198.18.0.1", "198.19.0.1"))
    text = iptables.render(rs, ifs, 4)
    assert ":INPUT DROP" in text and "-A INPUT -i c0" in text and "-A FORWARD" not in text
    assert "-d 198.18.0.1/32 -p udp -m udp --dport 5201" in text
    assert "hook input" in nft.render(rs, ifs)
    with pytest.raises(FwbenchError):
        seed000(5, chain="output")


def test_evaluator_walks_input_for_the_firewalls_own_packets():
    rs = seed000(5, chain="input")
    ev = Evaluator(rs)
    test, disallowed, ping = (ev.evaluate(p.packet) for p in rs.probes)
    assert test.local and not test.forward and test.decided_by == "allow-5"
    assert test.counted == ("from-client", "allow-5")
    assert not disallowed.local and disallowed.policy_of == "input"
    assert ping.local and ping.decided_by == "ping"
    # The FORWARD rule set leaves a packet to the firewall alone: delivered, counted
    # by nothing (no input chain), as before.
    fwd = Evaluator(seed000(5))
    v = fwd.evaluate(rs.flow)
    assert v.local and not v.forward and v.counted == ()
    assert fwd.addressed_to_firewall(rs.flow) and not fwd.addressed_to_firewall(seed000(5).flow)
    # and forwarded packets never see the input chain
    assert Evaluator(rs).evaluate(seed000(5).flow).forward


# --- made-up records --------------------------------------------------------------------

def rec(backend, rules, frame, pps, loss=0.0, chain="forward", cpus=1, rep=0, trials=(),
        status="ok"):
    return TrialRecord(
        schema_version=SCHEMA_VERSION, run_id="r", trial=0,
        factors=dict(zip(FACTORS, (backend, rules, frame, chain, cpus))),
        method="fixedrate", traffic="engine", repetition=rep, status=status, reason=None,
        verification={"ok": True}, load_time_s=0.1,
        metrics={"processed_pps": pps, "loss_ratio": loss,
                 "softirq_share": {"0": 0.1, "1": 0.9 if loss else 0.3}},
        started_at="2026-11-26T00:00:00+00:00", duration_s=2.0, ruleset_sha256=None,
        trials=list(trials))


def capacity(backend, rules, cpus=1):
    """A firewall costing 10 ns (iptables) or 30 ns (nftables) per rule."""
    ns = {"iptables-legacy": 10.0, "nftables": 30.0}[backend]
    return cpus * 1e9 / (5000 + ns * rules)


def grid(rules=(1000, 2000, 4000, 6000, 10000, 20000), frames=(128, 512, 1280),
         chains=("forward",), cpus=(1,), reps=3, jitter=0.01):
    out = []
    for rep in range(reps):
        for b in ("iptables-legacy", "nftables"):
            for n in rules:
                for f in frames:
                    for c in chains:
                        for k in cpus:
                            offered = flow_pps(f)
                            cap = capacity(b, n, k) * (1 + jitter * (rep - 1))
                            got = min(offered, cap)
                            out.append(rec(b, n, f, got, 1 - got / offered, c, k, rep))
    return out


def test_degradation_points_bracket_where_loss_begins():
    pts = stats.degradation_points(grid())
    for b, ns in (("iptables-legacy", 10.0), ("nftables", 30.0)):
        for f in (128, 512, 1280):
            true_n = (1e9 / flow_pps(f) - 5000) / ns
            d = pts[(b, f, "forward", 1)]
            lo, hi = d.bracket
            assert d.rules == lo
            if hi is None:   # no loss up to the largest count
                assert true_n >= 20000 * 0.99 and lo == 20000
            else:
                assert lo is None or lo <= true_n * 1.02
                assert hi >= true_n * 0.98
    # nftables degrades at fewer rules than iptables, for every flow
    for f in (128, 512, 1280):
        ipt, nf = pts[("iptables-legacy", f, "forward", 1)], pts[("nftables", f, "forward", 1)]
        assert nf.bracket[1] <= (ipt.bracket[1] or math.inf)


def test_degradation_uses_the_search_steps_and_ignores_failed_trials():
    steps = [{"rules": n, "loss_ratio": 0.0 if n <= 5400 else 0.01}
             for n in (1, 141, 1000, 5400, 5600, 7000)]
    recs = [rec("iptables-legacy", 20000, 128, 9000.0, 0.4, trials=steps),
            rec("iptables-legacy", 1000, 128, 14648.0),
            rec("iptables-legacy", 6000, 128, 1.0, 0.9, status="failed")]
    (d,) = stats.degradation_points(recs).values()
    assert d == stats.Degradation(5400, (5400, 5600))
    assert stats.bracket_text(d) == "5,400-5,600"


def test_degradation_across_repetitions_takes_the_medians():
    recs = []
    for rep, (lo, hi) in enumerate([(4000, 6000), (6000, 10000), (4000, 6000)]):
        recs += [rec("nftables", lo, 128, 100.0, 0.0, rep=rep),
                 rec("nftables", hi, 128, 90.0, 0.1, rep=rep)]
    (d,) = stats.degradation_points(recs).values()
    assert d.bracket == (4000, 6000)
    # no loss anywhere: no upper end
    (d,) = stats.degradation_points([rec("nftables", 100, 128, 1.0)]).values()
    assert d.bracket == (100, None) and stats.bracket_text(d) == "none up to 100"


def test_advantage_at_6000_is_largest_for_small_packets_with_an_interval():
    adv = stats.advantage_at(grid())
    assert set(adv) == {(f, "forward", 1) for f in (128, 512, 1280)}
    r128, r512, r1280 = (adv[(f, "forward", 1)] for f in (128, 512, 1280))
    # 128 B: iptables carries the whole flow, nftables its capacity
    want = min(flow_pps(128), capacity("iptables-legacy", 6000)) / capacity("nftables", 6000)
    assert r128.value == pytest.approx(want, rel=0.01)
    lo, hi = r128.interval
    assert lo < r128.value < hi and hi / lo < 1.2
    assert r128.value > r512.value > r1280.value >= 0.99
    # one trial a side: a ratio, no interval
    one = stats.advantage_at(grid(reps=1, jitter=0))
    assert one[(128, "forward", 1)].interval is None


def test_log_ratio_interval_is_welchs_on_the_logs():
    a, b = [110.0, 100.0, 120.0], [50.0, 55.0, 45.0]
    r = stats.log_ratio(a, b)
    gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    assert r.value == pytest.approx(gm(a) / gm(b))
    lo, hi = r.interval
    # symmetric on the log scale, and wide with three a side (t at ~4 df)
    assert math.log(r.value) - math.log(lo) == pytest.approx(math.log(hi) - math.log(r.value))
    assert lo < 2.0 < hi
    # a difference this large is outside: the interval can exclude 1
    assert lo > 1.5
    assert stats.log_ratio([1.0, 1.0], [2.0, 2.0]) == stats.Ratio(0.5, (0.5, 0.5))
    assert stats.log_ratio([], [1.0]) is None


def test_input_vs_forward_and_cpus():
    recs = grid(rules=(1000, 10000), frames=(128,), chains=("forward", "input"),
                cpus=(1, 2))
    ivf = stats.input_vs_forward(recs)
    assert set(ivf) == {(b, 128, k) for b in ("iptables-legacy", "nftables") for k in (1, 2)}
    for r in ivf.values():   # the same capacity in both chains: ratio 1, interval about it
        assert r.value == pytest.approx(1.0) and r.interval[0] <= 1 <= r.interval[1]
    # an INPUT that is half as fast shows
    slow = [rec(r.factors["backend"], r.factors["rules"], 128,
                r.metrics["processed_pps"] / (2 if r.factors["chain"] == "input" else 1),
                chain=r.factors["chain"], cpus=r.factors["cpus"], rep=r.repetition)
            for r in recs]
    assert stats.input_vs_forward(slow)[("nftables", 128, 1)].value == pytest.approx(0.5)
    cpu = stats.cpus_effect(recs)
    # at 10,000 rules both backends are CPU-bound: two CPUs carry twice as much
    assert cpu[("nftables", 128, "forward")].value == pytest.approx(2.0, rel=0.02)
    assert stats.cpus_effect(grid(frames=(128,))) == {}
    soft = stats.softirq_by_cpu(recs)
    assert soft[("nftables", 10000, 128, "forward", 1)] == {"0": 0.1, "1": 0.9}


def test_old_records_without_chain_or_cpus_count_as_forward_on_one_cpu():
    r = rec("nftables", 100, 128, 10.0)
    r.factors.pop("chain")
    r.factors.pop("cpus")
    assert list(stats.degradation_points([r])) == [("nftables", 128, "forward", 1)]


# --- the method and the steering --------------------------------------------------------

class FakeTb:
    """A testbed whose firewall IP layer delivers `delivered` per point; a real host
    (`own_traffic`) also delivers its SSH session's TCP segments."""

    def __init__(self, delivered, own_traffic=False):
        self.delivered, self.n, self.own_traffic = delivered, 0, own_traffic

    def snmp(self, role):
        assert role == "fw"
        self.n += 1
        d = self.delivered * (self.n // 2)
        tcp = 900 * self.n if self.own_traffic else 0
        return {"Ip:InDelivers": d + tcp, "Udp:InDatagrams": d - 10 * self.n,
                "Udp:RcvbufErrors": 10 * self.n, "Udp:InErrors": 10 * self.n,
                "Udp:NoPorts": 0}


class FakeEngine:
    name = "simulated"

    def __init__(self, fw):
        self.fw = fw

    def measurer(self, tb, frame_size):
        return self.fw


def test_input_points_count_what_passed_the_input_hook():
    fw = SimulatedFirewall(true_ndr_pps=1e9, seed=1)      # the socket gets everything
    m = FixedRate(FakeEngine(fw), FixedRateSettings(find_degradation=False), 1000,
                  count_delivered=True)
    out = m.run(FakeTb(7000), 128, 1.0, rules=1000)
    sent = round(flow_pps(128))
    assert out["delivered"] == 7000 and out["received_by_socket"] == pytest.approx(sent, abs=1)
    assert out["processed_pps"] == 7000 and out["loss_ratio"] == pytest.approx(1 - 7000 / sent,
                                                                                 rel=1e-3)
    assert out["fw_counters"]["Ip_InDelivers"] == 7000


def test_on_a_host_with_its_own_traffic_the_input_flow_is_counted_by_udp():
    """A real firewall's SSH session (TCP) moves IP's InDelivers; what UDP took in
    (sockets, full sockets, no socket) counts the flow alone."""
    fw = SimulatedFirewall(true_ndr_pps=1e9, seed=1)
    m = FixedRate(FakeEngine(fw), FixedRateSettings(find_degradation=False), 1000,
                  count_delivered=True)
    out = m.run(FakeTb(7000, own_traffic=True), 128, 1.0, rules=1000)
    assert out["fw_counters"]["Ip_InDelivers"] == 7900      # the session's 900 in it
    assert out["delivered"] == 7000 and out["processed_pps"] == 7000


def test_steered_cpus():
    assert steered_cpus(1, 1, 2) == [1]
    assert steered_cpus(2, 1, 2) == [1, 0]
    assert steered_cpus(2, 0, 4) == [0, 1]
    with pytest.raises(FwbenchError, match="the firewall's machine has 2"):
        steered_cpus(3, 1, 2)


def test_scenario_takes_chains_and_cpus():
    sc = from_dict({"method": "fixedrate", "frame_sizes": [128],
                    "fixedrate": {"chains": ["forward", "input"], "cpus": [1, 2]}})
    assert sc.fixedrate.chains == ["forward", "input"] and sc.fixedrate.cpus == [1, 2]
    for bad in ({"chains": ["output"]}, {"cpus": [0]}, {"chains": []}):
        with pytest.raises(Exception):
            from_dict({"method": "fixedrate", "frame_sizes": [128], "fixedrate": bad})


# --- the report ----------------------------------------------------------------------

def test_report_shows_seed003s_figures(tmp_path):
    from fwbench.plan import TrialKey
    from fwbench.report.data import RunData
    from fwbench.report.document import Table, markdown
    from fwbench.experiments.fixedrate.section import report
    recs = grid(rules=(1000, 6000, 20000), frames=(128, 1280), chains=("forward", "input"),
                cpus=(1, 2))
    plan = [TrialKey(r.cell(FACTORS), r.repetition).as_dict(FACTORS) for r in recs]
    meta = {"scenario": {"name": "seed003-test", "method": "fixedrate"},
            "factors": list(FACTORS), "plan": plan}
    data = RunData(tmp_path, meta, recs)
    assert not data.is_sweep
    text = markdown(report(data).blocks(Table(["", "value"], [], id="environment")))
    assert "Seed 003's figures" in text and "Where loss begins" in text
    adv = stats.advantage_at(recs)[(128, "forward", 1)]
    # the advantage with its interval, beside the seed's 5.2
    assert f"{adv.value:.2f} [{adv.interval[0]:.2f}, {adv.interval[1]:.2f}]" in text
    assert "| 5.2 |" in text
    assert "INPUT over FORWARD" in text and "2 CPUs over 1" in text
    assert "Softirq per CPU" in text


def test_degradation_ratio_from_the_brackets():
    recs = []
    for b, (lo, hi) in (("iptables-legacy", (4000, 6000)), ("nftables", (1000, 1500))):
        recs += [rec(b, lo, 128, 100.0, 0.0), rec(b, hi, 128, 90.0, 0.1)]
    r = stats.degradation_ratio(recs)[(128, "forward", 1)]
    assert r.value == pytest.approx(math.sqrt(4000 * 6000) / math.sqrt(1000 * 1500))
    assert r.interval == (4000 / 1500, 6000 / 1000)
    # iptables never lost up to 6,000, nftables from 2,000: at least 3x, open above
    recs = [rec("iptables-legacy", 6000, 128, 1.0), rec("nftables", 1000, 128, 1.0),
            rec("nftables", 2000, 128, 0.5, 0.5)]
    assert stats.degradation_ratio(recs) == {(128, "forward", 1): (None, (3.0, math.inf))}
    # nftables never lost up to 6,000, iptables from 2,000: at most 2,000 / 6,000, a
    # flow that contradicts the claim, kept (it was dropped, and the claim "held in
    # every flow")
    recs = [rec("nftables", 6000, 128, 1.0), rec("iptables-legacy", 1000, 128, 1.0),
            rec("iptables-legacy", 2000, 128, 0.5, 0.5)]
    assert stats.degradation_ratio(recs) == {(128, "forward", 1): (None, (0.0, 2000 / 6000))}
    # neither lost: the range says nothing
    recs = [rec("nftables", 6000, 128, 1.0), rec("iptables-legacy", 6000, 128, 1.0)]
    assert stats.degradation_ratio(recs) == {}


def test_a_sender_held_back_counts_as_degraded():
    # RPS over the sender's CPU: the firewall slows the sender instead of dropping
    r = rec("nftables", 20000, 128, 5000.0, 0.0)
    r.metrics["sender_short"] = True
    recs = [rec("nftables", 1000, 128, flow_pps(128)), r]
    (d,) = stats.degradation_points(recs).values()
    assert d.bracket == (1000, 20000)
    fw = SimulatedFirewall(true_ndr_pps=1e9, sender_max_pps=10_000, seed=1)
    m = FixedRate(FakeEngine(fw), FixedRateSettings(rules_width=0.5), 20_000)
    loads = []
    out = m.run(None, 128, 1.0, rules=20_000, reload=loads.append)
    assert out["loss_ratio"] == 0 and out["sender_short"]
    # degraded at one rule twice over before it says so
    assert out["degradation_bounds"] == [None, 1] and loads == [1, 1, 20_000]
    assert [t["rules"] for t in out["trials"]] == [1, 1]


def test_one_hiccup_at_one_rule_does_not_end_the_search():
    class Hiccup:
        """Capacity 1e9 / (500 + 10 N) pps, but the first trial at one rule hiccups."""
        def __init__(self):
            self.n, self.hiccups = 20_000, 1

        def reload(self, n):
            self.n = n

        def measure(self, duration_s, offered_pps):
            cap = 1e9 / (500 + 10.0 * self.n)
            if self.n == 1 and self.hiccups:
                self.hiccups, cap = 0, offered_pps / 2
            return SimulatedFirewall(true_ndr_pps=cap, seed=self.n).measure(duration_s,
                                                                            offered_pps)
    fw = Hiccup()
    m = FixedRate(FakeEngine(fw), FixedRateSettings(rules_width=0.1), 20_000)
    out = m.run(None, 128, 1.0, rules=20_000, reload=fw.reload)
    lo, hi = out["degradation_bounds"]
    assert lo is not None and lo <= (1e9 / flow_pps(128) - 500) / 10 <= hi


def test_processed_rate_under_overload_is_over_the_arrival_span():
    from fwbench.experiments.fixedrate.method import processed_rate
    # keeping up: count over the trial
    assert processed_rate(7324, 0.5, 0.5, False) == (14648.0, "trial duration")
    # overloaded: 1,100 processed in the trial and 1,000 more from the backlog after
    # it, over 0.9 s of arrivals: the rate, not (1,100 + 1,000) / 0.5
    rate, how = processed_rate(2100, 0.5, 0.9, True)
    assert how == "arrival span" and rate == pytest.approx(2099 / 0.9)
    # a span too short to trust (a burst at the end): back to the trial's duration
    assert processed_rate(2100, 0.5, 0.1, True) == (4200.0, "trial duration")


def test_a_firewall_that_fell_behind_is_degraded_without_loss():
    from fwbench.experiments.fixedrate.method import degraded, fell_behind
    assert not fell_behind(0.52, 0.5) and fell_behind(0.76, 0.5) and not fell_behind(None, 1)
    # 2,197 packets of the 1280 B flow, none lost, the last 260 ms late
    assert degraded({"loss_ratio": 0.0, "sender_short": False, "fell_behind": True})
    assert not degraded({"loss_ratio": 0.0, "sender_short": False, "fell_behind": False})
    r = rec("nftables", 20000, 1280, 4394.0, 0.0)
    r.metrics["fell_behind"] = True
    (d,) = stats.degradation_points([rec("nftables", 10000, 1280, 4394.0), r]).values()
    assert d.bracket == (10000, 20000)
