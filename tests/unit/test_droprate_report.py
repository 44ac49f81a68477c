"""The drop-position table's arithmetic on fixed records: medians, the best of each
group, cost = best / pps - 1 with its interval, seed 002's figures, the orderings."""
import pytest

from fwbench.experiments.droprate import report
from fwbench.results import SCHEMA_VERSION, TrialRecord


def rec(tid, rep, pps, group="drop", size=1, status="ok", cpu_ns=1000.0, reason=None):
    return TrialRecord(
        schema_version=SCHEMA_VERSION, run_id="abc123", trial=0,
        factors={"treatment": tid, "set_size": size, "frame_size": 128}, method="droprate", traffic="engine", repetition=rep,
        status=status, reason=reason, verification={"ok": status != "failed"},
        load_time_s=0.01,
        metrics={"disposed_pps": pps, "cpu_ns_per_pkt": cpu_ns,
                 "softirq_ns_per_pkt": cpu_ns / 3} if status == "ok" else {},
        started_at="2026-01-01T00:00:00+00:00", duration_s=1.0, ruleset_sha256=None,
        conditions={"group": group, "label": f"label {tid}"})


def five(tid, values, **kw):
    return [rec(tid, i, v, **kw) for i, v in enumerate(values)]


def test_cost_is_the_extra_time_per_packet():
    assert report.cost(280_000, 250_000) == pytest.approx(0.12)
    assert report.cost(100, 100) == 0


@pytest.mark.parametrize("tid, printed, recomputed", [
    ("conntrack", 20, 21.8),        # 106k / 87k - 1
    ("raw-after-rules", 12, 12.0),  # 280k / 250k - 1: as printed
    ("filter-input", 12, 12.0),
    ("ipset", 10, 9.8),             # 280k / 255k - 1
    ("string-bm", 10, 9.8),
    ("string-kmp", 17, 19.1),       # the seed's 17 % is nearer 1 - 235/280 = 16.1 %
    ("hashlimit", 20, 24.4),        # ... and its 20 % is 1 - 225/280 = 19.6 %
])
def test_seed_costs_recomputed_from_the_seeds_own_pps(tid, printed, recomputed):
    pps, got_printed, got = report.seed_figures(tid, 6 if tid == "raw-after-rules" else 1)
    assert got_printed == printed and round(got, 1) == recomputed


def test_seed_rows_only_where_the_seed_has_them():
    assert report.seed_figures("xdp", 1) is None
    assert report.seed_figures("raw-after-rules", 11) is None  # the seed had 5 rules
    assert report.seed_figures("raw", 1) == (280_000, None, 0.0)


def test_rows_medians_best_and_costs_per_group():
    records = (five("raw", [800, 810, 790, 805, 795]) +
               five("filter-input", [700, 720, 690, 710, 705]) +
               five("notrack", [350, 355, 345, 352, 348], group="accept") +
               five("conntrack", [320, 325, 315, 322, 318], group="accept"))
    rows = {r.tid: r for r in report.rows(records, resamples=2000)}
    raw, inp = rows["raw"], rows["filter-input"]
    assert raw.median == 800 and raw.is_best and raw.cost == 0 and raw.cost_interval is None
    assert inp.median == 705 and not inp.is_best
    assert inp.cost == pytest.approx(800 / 705 - 1)
    assert inp.cost_interval.low <= inp.cost <= inp.cost_interval.high
    assert (raw.interval.low, raw.interval.high) == (790, 810)
    # Groups are separate: conntrack is measured against notrack, not against raw.
    assert rows["notrack"].is_best and rows["conntrack"].cost == pytest.approx(350 / 320 - 1)


def test_not_ok_trials_stay_out_of_the_figures_and_are_listed():
    records = five("raw", [800, 810, 790, 805, 795]) + [
        rec("xdp", 0, 0, status="failed", reason="verification: probe: 0 of 2,000 dropped"),
        rec("xdp", 1, 700), rec("xdp", 2, 0, status="invalid", reason="the path CPU was shared")]
    rows = {r.tid: r for r in report.rows(records, resamples=500)}
    assert rows["xdp"].pps == {1: 700} and rows["xdp"].median == 700
    lines = report.not_ok_lines(list(rows.values()))
    assert len(lines) == 1 and "2 trial(s) not counted" in lines[0] and "shared" in lines[0]


def test_rows_follow_the_table_order_and_set_sizes():
    records = (five("ipset", [1, 2, 3, 4, 5], size=65536) + five("ipset", [1, 2, 3, 4, 5]) +
               five("xdp", [1, 2, 3, 4, 5]) + five("notrack", [1, 2, 3, 4, 5], group="accept"))
    assert [(r.tid, r.size) for r in report.rows(records, resamples=100)] == \
        [("notrack", 1), ("xdp", 1), ("ipset", 1), ("ipset", 65536)]


@pytest.mark.parametrize("xdp, verdict", [
    ([900, 905, 895, 910, 890], "holds"),
    ([700, 705, 695, 710, 690], "does not hold"),
    ([790, 830, 770, 820, 800], "not resolved"),
])
def test_orderings_read_the_interval(xdp, verdict):
    records = five("raw", [800, 810, 790, 805, 795]) + five("xdp", xdp)
    got = {o.text: o for o in report.orderings(report.rows(records, resamples=2000),
                                                resamples=2000)}
    o = got["XDP >= raw PREROUTING"]
    assert o.verdict == verdict
    assert got["NOTRACK >= conntrack"].verdict == "not measured"
    assert verdict in o.line()
