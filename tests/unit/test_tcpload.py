"""The TCP load's report parsing and its failures, without root.

The fixtures under tests/data/traffic are real iperf3 3.12 output from the
testbed: `iperf3 -c 198.19.0.2 -p 5001 --bidir -P 2 -t 2 -J` through an empty
firewall, and the same towards a port nobody listens on.
"""
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from fwbench.errors import FwbenchError
from fwbench.traffic import tcpload
from fwbench.traffic.tcpload import (LoadResult, TcpBidirLoad, parse_bidir, shortfall,
                                     whole_seconds)

DATA = Path(__file__).parent.parent / "data" / "traffic"
BIDIR = DATA / "iperf3_bidir_P2_t2.json"
REFUSED = DATA / "iperf3_bidir_refused.json"


def test_bidir_report_gives_each_direction_as_received_and_its_retransmits():
    r = parse_bidir(json.loads(BIDIR.read_text()), streams=2)
    # forward: the server's receiving; reverse: the client's receiving
    assert r.up_bps == pytest.approx(2031336086.8784814)
    assert r.down_bps == pytest.approx(1675921812.5401008)
    assert (r.up_bytes, r.down_bytes) == (512098304, 422498632)
    # retransmits are the senders': the client's forward, the server's reverse
    assert (r.up_retransmits, r.down_retransmits) == (0, 3)
    assert r.streams == 2
    assert r.duration_s == pytest.approx(2.016794)   # the receivers' own
    assert r.congestion == "bbr"
    assert [s["t"] for s in r.per_second] == [0, 1.003]
    assert all(s["up_bps"] > 0 and s["down_bps"] > 0 for s in r.per_second)
    d = r.as_dict()
    assert json.loads(json.dumps(d))["up_bps"] == r.up_bps


def test_a_report_without_the_reverse_direction_is_refused():
    doc = json.loads(BIDIR.read_text())
    del doc["end"]["sum_sent_bidir_reverse"], doc["end"]["sum_received_bidir_reverse"]
    with pytest.raises(FwbenchError, match="--bidir"):
        parse_bidir(doc, 2)


def test_iperf3s_own_error_is_the_message():
    with pytest.raises(FwbenchError) as e:
        tcpload._report(REFUSED.read_text(), "", 1, "iperf3 client to 198.19.0.2:5002")
    assert str(e.value) == ("iperf3 client to 198.19.0.2:5002: unable to connect to "
                            "server: Connection refused")
    with pytest.raises(FwbenchError, match="^x: iperf3: error - boom$"):
        tcpload._report("", "iperf3: error - boom\nmore\n", 1, "x")


def _result(up: float, down: float) -> LoadResult:
    return LoadResult(up, down, 0, 0, 4, 3.0)


def test_shortfall_names_each_short_direction_in_one_line():
    ref = _result(2e9, 1e9)
    assert shortfall(_result(1.9e9, 0.85e9), ref) is None
    line = shortfall(_result(1.5e9, 0.85e9), ref)
    assert line and "\n" not in line and "up 1.50" in line and "down" not in line
    both = shortfall(_result(0.1e9, 0.1e9), ref, fraction=0.5)
    assert "up 0.10" in both and "down 0.10" in both and "0.5 x" in both


def test_durations_are_whole_seconds():
    assert whole_seconds(3) == 3 and whole_seconds(3.0) == 3
    for bad in (0, 2.5, -1):
        with pytest.raises(FwbenchError, match="whole number"):
            whole_seconds(bad)


def test_missing_iperf3_is_one_line_before_anything_starts(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    load = TcpBidirLoad()
    nothing = object()   # any use of the testbed would fail differently
    for call in (lambda: load.start_server(nothing), lambda: load.begin(nothing, "x", 3)):
        with pytest.raises(FwbenchError) as e:
            call()
        assert str(e.value) == ("iperf3 not found: install the Debian package iperf3 "
                                "(./scripts/setup.sh installs everything)")


class FakeTestbed:
    """Runs `command` on the host in place of the argv it is given, and records
    what it was asked to run."""

    def __init__(self, command: list[str]):
        self.command = command
        self.topo = SimpleNamespace(settings=SimpleNamespace(sender_cpu=0, server_cpu=0))
        self.asked: list[tuple[str, list[str], int | None]] = []
        self.forgotten: list = []

    def spawn(self, role, argv, cpu=None, **kw):
        self.asked.append((role, argv, cpu))
        return subprocess.Popen(self.command, **kw)

    def forget(self, p):
        if p.poll() is None:
            p.kill()
            p.wait()
        self.forgotten.append(p)


def test_a_run_reads_its_report_from_a_file_and_records_where_it_went():
    tb = FakeTestbed(["cat", str(BIDIR)])
    run = TcpBidirLoad(streams=2).begin(tb, "198.19.0.100", 2)
    r = run.wait()
    role, argv, cpu = tb.asked[0]
    assert role == "client" and cpu == 0
    assert argv[:3] == ["iperf3", "-c", "198.19.0.100"]
    assert {"--bidir", "-J"} <= set(argv) and argv[argv.index("-P") + 1] == "2"
    assert argv[argv.index("-p") + 1] == "5001" and argv[argv.index("-t") + 1] == "2"
    assert r.extra["dst"] == "198.19.0.100" and r.extra["port"] == 5001
    assert run.wait() is r and len(tb.forgotten) == 1


def test_a_failed_client_raises_with_iperf3s_text_every_time_asked():
    tb = FakeTestbed(["sh", "-c", f"cat {REFUSED}; exit 1"])
    run = TcpBidirLoad().begin(tb, "198.19.0.2", 1)
    for _ in range(2):
        with pytest.raises(FwbenchError, match="Connection refused$"):
            run.wait()


def test_a_client_that_never_ends_times_out_in_one_line(monkeypatch):
    monkeypatch.setattr(tcpload, "_END_GRACE_S", 0.2)
    tb = FakeTestbed(["sleep", "30"])
    run = TcpBidirLoad().begin(tb, "198.19.0.2", 1)
    with pytest.raises(FwbenchError, match=r"^iperf3 client to 198.19.0.2:5001: no result "
                                           r"after 1 s$"):
        run.wait()
    assert tb.forgotten and tb.forgotten[0].poll() is not None
