"""The latency probes' parsers and bookkeeping, without root.

Fixtures under tests/data/traffic are real output from the testbed:
- ping_D_i0.05_w1.txt: `ping -D -n -i 0.05 -w 1 198.19.0.2` through an empty firewall;
- ping_D_unanswered.txt: `ping -D -n -i 0.2 -w 4 198.19.0.99` (nobody holds it);
- engine_sink_read_*.json: the XDP sink's `read` after 1 s of 1,000 pps of 64-byte
  probes, idle and under the bidirectional TCP load.
"""
import json
import math
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from fwbench.errors import FwbenchError, MeasurementInvalid
from fwbench.measurer import TrialResult
from fwbench.traffic import latency_series as ls
from fwbench.traffic.native import EngineSettings, Flow

DATA = Path(__file__).parent.parent / "data" / "traffic"
PING = (DATA / "ping_D_i0.05_w1.txt").read_text()
UNANSWERED = (DATA / "ping_D_unanswered.txt").read_text()
READS = [json.loads((DATA / f"engine_sink_read_{k}.json").read_text())
         for k in ("idle", "tcpload")]


def test_every_reply_is_kept_with_its_stamp_seq_and_rtt():
    got = ls.parse_ping(PING)
    assert got.transmitted == 18 and len(got.replies) == 18
    assert got.replies[0] == ls.Reply(1795455979.356009, 1, 69.0)
    assert got.replies[1] == ls.Reply(1795455979.414297, 2, 87.0)
    assert [r.seq for r in got.replies] == list(range(1, 19))
    assert got.duplicates == 0 and got.errors == ()


def test_unanswered_echoes_are_counted_not_replies():
    got = ls.parse_ping(UNANSWERED)
    assert got.replies == () and got.transmitted == 16
    assert got.errors == ("Destination Host Unreachable",) * 6


def test_a_duplicate_is_counted_once_and_not_kept():
    # ping's format for a duplicate reply (a DUP could not be provoked on the testbed)
    text = ("[1795455979.356009] 64 bytes from 198.19.0.2: icmp_seq=1 ttl=63 time=0.069 ms\n"
            "[1795455979.356100] 64 bytes from 198.19.0.2: icmp_seq=1 ttl=63 time=0.160 ms"
            " (DUP!)\n"
            "[1795455979.414297] 64 bytes from 198.19.0.2: icmp_seq=2 ttl=63 time=112 ms\n"
            "2 packets transmitted, 2 received, +1 duplicates, 0% packet loss, time 58ms\n")
    got = ls.parse_ping(text)
    assert [r.rtt_us for r in got.replies] == [69.0, 112000.0]
    assert got.duplicates == 1 and got.transmitted == 2


def test_nearest_rank():
    v = list(range(1, 101))
    assert [ls.nearest_rank(v, q) for q in (0.5, 0.9, 0.99, 0.999, 1.0)] == \
        [50, 90, 99, 100, 100]
    assert ls.nearest_rank([7.0], 0.99) == 7.0


def _result(text: str, start: float, seconds: int) -> ls.PingResult:
    got = ls.parse_ping(text)
    return ls.PingResult("198.19.0.2", start, seconds, 0.05, 56, got.replies,
                         got.transmitted, got.duplicates, got.errors)


def test_summary_of_real_replies():
    r = _result(PING, 1795455979.3, 1)
    rtts = sorted(x.rtt_us for x in ls.parse_ping(PING).replies)
    s = r.summary()
    assert s["count"] == 18 and s["lost"] == 0
    assert s["min"] == 67.0 and s["max"] == 107.0 == rtts[-1]
    assert s["median"] == (rtts[8] + rtts[9]) / 2
    assert s["p90"] == rtts[math.ceil(0.9 * 18) - 1] and s["p99"] == rtts[-1]
    assert s["sd"] > 0 and s["min"] < s["mean"] < s["max"]


def test_summary_of_no_reply_says_lost_and_none():
    s = _result(UNANSWERED, 1795455998.9, 4).summary()
    assert s["count"] == 0 and s["lost"] == 16 and s["median"] is None


def test_per_second_has_one_entry_per_second_with_stragglers_in_the_last():
    r = _result(PING, 1795455979.3, 3)
    rows = r.per_second()
    assert [x["t"] for x in rows] == [0, 1, 2]
    assert rows[0]["n"] + rows[1]["n"] == 18 and rows[2]["n"] == 0
    assert rows[2]["median"] is None and rows[0]["max"] >= rows[0]["p99"]
    # a series shorter than the replies: later ones land in its last second
    assert _result(PING, 1795455979.3, 1).per_second()[0]["n"] == 18
    d = r.as_dict()
    assert len(d["replies"]) == 18 and d["summary"]["count"] == 18


@pytest.mark.parametrize("low,mid", [(0, 0), (127, 127), (128, 128.5), (255, 255.5),
                                     (256, 257), (8192, 8224), (8512, 8544)])
def test_bucket_midpoints_follow_the_engines_geometry(low, mid):
    assert ls.bucket_mid(low) == mid


@pytest.mark.parametrize("read", READS, ids=["idle", "tcpload"])
def test_percentiles_from_a_histogram_are_the_engines_own(read):
    lat = read["latency_ns"]
    for name, q in (("p50", .5), ("p90", .9), ("p99", .99), ("p99_9", .999)):
        got = ls.hist_percentile(read["hist"], q, lat["min"], lat["max"])
        # the engine prints 6 significant digits
        assert got == pytest.approx(lat[name], rel=1e-5), name


def test_merged_histograms_give_the_percentiles_of_all_probes():
    whole = ls.latency_summary(READS)
    mids = sorted(ls.bucket_mid(low) for r in READS for low, n in r["hist"]
                  for _ in range(n))
    lo = min(r["latency_ns"]["min"] for r in READS)
    hi = max(r["latency_ns"]["max"] for r in READS)
    assert whole["count"] == len(mids) == 2000
    assert whole["min"] == lo / 1000 and whole["max"] == hi / 1000
    for name, q in (("p50", .5), ("p90", .9), ("p99", .99), ("p99_9", .999)):
        want = min(hi, max(lo, ls.nearest_rank(mids, q)))
        assert whole[name] == pytest.approx(want / 1000, abs=1e-3), name
    mean = sum(r["latency_ns"]["mean"] for r in READS) / 2
    assert whole["mean"] == pytest.approx(mean / 1000, abs=1e-3)
    assert ls.latency_summary([{"latency_ns": {"count": 0}, "hist": []}]) is None


class FakeEngine:
    """Stands for EngineTraffic: each measurement returns the next real read."""

    def __init__(self, reads, fail_at: int | None = None):
        self.reads, self.fail_at, self.i = reads, fail_at, 0
        self.flow, self.settings = Flow(dst="198.19.0.100", dport=5001,
                                        sink_port=5001), EngineSettings()
        self.started = self.closed = False

    def start(self, tb):
        self.started = True

    def close(self):
        self.closed = True

    def versions(self):
        return {}

    def returns(self, tb):
        return None     # one clock: the server's receiver times the probes

    def receiver(self, tb):
        return SimpleNamespace(read=lambda: self.reads[(self.i - 1) % len(self.reads)])

    def measurer(self, tb, frame_size):
        def measure(duration_s, rate):
            if self.i == self.fail_at:
                raise MeasurementInvalid("the sender sent nothing")
            self.i += 1
            return TrialResult(rate, duration_s, 1000, 1000, 1000.0,
                               extra={"send_lag_us": {"p99": 5.0}})
        return SimpleNamespace(measure=measure)


def test_engine_series_keeps_each_second_and_merges_them():
    eng = FakeEngine(READS)
    series = ls.EngineProbeSeries(traffic=eng, rate_pps=1000)
    tb = SimpleNamespace(topo=None)
    r = series.begin(tb, 4).wait()
    assert eng.started
    rows = r.per_second()
    assert [x["t"] for x in rows] == [0, 1, 2, 3]
    assert rows[0]["p99"] == READS[0]["latency_ns"]["p99"] / 1000
    assert rows[1]["p99"] == READS[1]["latency_ns"]["p99"] / 1000
    assert rows[0]["send_lag_p99"] == 5.0 and not rows[0]["sender_short"]
    s = r.summary()
    assert s["sent"] == s["received"] == s["count"] == 4000 and s["lost"] == 0
    assert s["p99"] == ls.latency_summary(READS)["p99"]
    assert (r.dst, r.dport, r.sink_port) == ("198.19.0.100", 5001, 5001)
    series.close()
    assert eng.closed


def test_engine_series_failure_reaches_the_caller():
    series = ls.EngineProbeSeries(traffic=FakeEngine(READS, fail_at=1))
    with pytest.raises(MeasurementInvalid, match="sent nothing"):
        series.begin(SimpleNamespace(topo=None), 3).wait()


class FakeTestbed:
    def __init__(self, command):
        self.command = command
        self.topo = SimpleNamespace(settings=SimpleNamespace(sender_cpu=0))
        self.asked = []

    def spawn(self, role, argv, cpu=None, **kw):
        self.asked.append((role, argv, cpu))
        return subprocess.Popen(self.command, **kw)

    def forget(self, p):
        if p.poll() is None:
            p.kill()
            p.wait()


def test_ping_series_runs_ping_with_stamps_and_reads_its_file():
    tb = FakeTestbed(["cat", str(DATA / "ping_D_i0.05_w1.txt")])
    r = ls.PingSeries(interval_s=0.05).begin(tb, "198.19.0.2", 2).wait()
    role, argv, cpu = tb.asked[0]
    assert role == "client" and cpu == 0 and argv[-1] == "198.19.0.2"
    assert {"-D", "-n"} <= set(argv) and argv[argv.index("-w") + 1] == "2"
    assert argv[argv.index("-i") + 1] == "0.05"
    assert r.summary()["count"] == 18 and len(r.per_second()) == 2


def test_ping_that_fails_says_why_in_one_line():
    tb = FakeTestbed(["sh", "-c", "echo 'ping: 198.19.0.999: Name or service not known'; "
                                  "exit 2"])
    with pytest.raises(FwbenchError, match=r"^ping 198.19.0.999: exited 2: ping: "
                                           r"198.19.0.999: Name or service not known$"):
        ls.PingSeries().begin(tb, "198.19.0.999", 1).wait()
