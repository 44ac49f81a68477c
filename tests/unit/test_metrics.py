"""The metric registry is the one description of what each method records: the
table that ends a run, adaptive repetitions and the report all read it."""
from __future__ import annotations

import io

from rich.console import Console

from fwbench import adaptive, experiments, metrics, summary
from fwbench.report.data import RunData
from fwbench.results import TrialRecord


def rec(backend: str, rules: int, rep: int, m: dict, method: str = "throughput",
        status: str = "ok") -> TrialRecord:
    return TrialRecord(3, "r", rep, {"backend": backend, "rules": rules, "frame_size": 64},
                       method, "engine", rep, status, None,
                       {}, 0.01, m, "2026-11-23T00:00:00", 1.0, None)


def test_every_method_has_metrics_a_title_and_a_headline():
    methods = list(experiments.REGISTRY)
    for method in methods:
        assert metrics.title(method, []), method
        first, second = metrics.of(method)[:2]
        # the sweeps' and droprate's headline is a packet rate; loadlatency's a latency,
        # echo's a bit rate per client, update's the time until a change took effect,
        # kubeproxy's a connection's first-packet round trip
        assert first is metrics.headline(method)
        assert first.throughput == (method not in ("loadlatency", "echo", "update",
                                                   "kubeproxy"))
        assert first.column and second.column
        assert len({m.key for m in metrics.of(method)}) == len(metrics.of(method))


def test_summary_table_reads_headline_and_second_metric():
    recs = [rec("none", 0, 1, {"ndr_pps": 1000.0, "pdr_pps": 1100.0}),
            rec("nftables", 100, 1, {"ndr_pps": 500.0, "pdr_pps": 600.0}),
            rec("nftables", 100, 2, {"ndr_pps": 700.0, "pdr_pps": 800.0}),
            rec("nftables", 100, 3, {}, status="failed")]
    cells = summary.medians(recs)
    assert cells[("nftables", 100, 64)] == {"primary": 600.0, "secondary": 700.0, "n": 2,
                                            "not_ok": 1}
    out = io.StringIO()
    Console(file=out, width=200).print(summary.table(recs, ["none", "nftables"]))
    text = out.getvalue()
    assert "NDR pps" in text and "PDR pps" in text and "0.60" in text   # 600 / 1000


def test_adaptive_and_report_use_the_same_headline():
    recs = [rec("nftables", 100, i, {"ndr_pps": v, "pdr_pps": 1.0})
            for i, v in enumerate((100.0, 300.0, 200.0), 1)]
    widths = adaptive.cell_widths(recs, "throughput", ("backend", "rules", "frame_size"))
    assert widths[("nftables", 100, 64)] is not None
    # PDR constant: were it the headline, the width would be 0
    assert widths[("nftables", 100, 64)] > 0
    data = RunData(None, {"scenario": {"method": "throughput"}}, recs)
    assert data.headline() is metrics.headline("throughput")


def test_adaptive_repetitions_work_on_a_droprate_run():
    """The stored schema-2 droprate run (3 rounds of 4 treatments): every cell has
    an interval on the disposal rate, and a cap of 4 asks one more of each."""
    from pathlib import Path

    from fwbench.results import RunDir
    rd = RunDir.open(Path(__file__).parent.parent / "data" / "runs" / "schema2-droprate")
    records, factors = rd.records(), rd.factors
    assert factors == ("treatment", "set_size", "frame_size")
    widths = adaptive.cell_widths(records, "droprate", factors)
    assert len(widths) == 4 and all(w is not None and w > 0 for w in widths.values())
    assert {c[0] for c in widths} == {"notrack", "xdp", "raw", "ipset"}
    need = adaptive.cells_needing_more(records, "droprate", factors, 1e-9, 0.95, 4)
    assert need == sorted(widths)
    assert adaptive.cells_needing_more(records, "droprate", factors, 1e-9, 0.95, 3) == []


def test_round_trips_are_labelled_as_such():
    """A run whose engine timed round trips (hosts on separate clocks) shows its
    latency metrics and title as round trips; a one-way run keeps its labels."""
    one_way = [rec("nftables", 10, 0, {"ndr_pps": 1.0, "latency_kind": "one-way",
                                        "latency_us": {"idle": {"p50": 5.0}}}, "latency")]
    round_trip = [rec("nftables", 10, 0, {"ndr_pps": 1.0, "latency_kind": "round trip",
                                           "latency_us": {"idle": {"p50": 9.0}}}, "latency")]
    labels = [m.label for m in metrics.relabelled(metrics.of("latency"), one_way)]
    assert "one-way latency p50, idle" in labels
    labels = [m.label for m in metrics.relabelled(metrics.of("latency"), round_trip)]
    assert "round-trip latency p50, idle" in labels and not any("one-way" in x
                                                                for x in labels)
    assert metrics.title("latency", round_trip).startswith("round-trip latency")
    assert metrics.title("latency", one_way).startswith("one-way latency")
    data = RunData(None, {"scenario": {"method": "latency"},
                          "factors": ["backend", "rules", "frame_size"]}, round_trip)
    assert any(m.label == "round-trip latency p50, idle" for m in data.metrics())
