"""Latency probes that keep a time series, to run beside a load (`traffic.tcpload`):
was latency steady over the trial, and what was its distribution.

- `PingSeries`: ICMP echo from the client, as seed 004 pinged through its firewall
  (Appendix F timestamps every reply line); here `ping -D` stamps each reply and
  every reply is kept: (timestamp, icmp_seq, rtt).
- `EngineProbeSeries`: the engine's stamped UDP probes at a low fixed rate, as
  consecutive 1-second engine measurements (`EngineTraffic.measurer().measure`),
  each second's one-way latency percentiles kept, and the whole trial's from the
  seconds' merged histograms.

Both are `begin(...) -> handle`, `handle.wait() -> result`, so they run at the same
time as each other and as the load. Durations are whole seconds (ping's `-w`).
Percentiles of ping RTTs are nearest-rank (the value at rank ceil(q*n)), as the
engine ranks its histogram.
"""
from __future__ import annotations

import math
import re
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

from fwbench import proc
from fwbench.errors import FwbenchError
from fwbench.testbed.base import Testbed
from fwbench.traffic.native import EngineSettings, EngineTraffic, Flow
from fwbench.traffic.tcpload import whole_seconds

_QUANTILES = (("p90", 0.90), ("p99", 0.99), ("p99_9", 0.999))
_END_GRACE_S = 10.0


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The value at rank ceil(q * n) (1-based) of ascending values."""
    n = len(sorted_values)
    return sorted_values[min(n, max(1, math.ceil(q * n - 1e-9))) - 1]


# --- ping ---------------------------------------------------------------------

@dataclass(frozen=True)
class Reply:
    ts: float
    """When the reply arrived: ping -D's stamp, seconds since the epoch."""
    seq: int
    """icmp_seq (wraps at 65,536)."""
    rtt_us: float


@dataclass(frozen=True)
class PingOutput:
    replies: tuple[Reply, ...]
    transmitted: int | None
    """From ping's summary; None when ping printed none (killed)."""
    duplicates: int
    errors: tuple[str, ...]
    """Lines about unanswered echoes ("Destination Host Unreachable", ...)."""


_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from \S+: icmp_seq=(\d+)\b.*? "
                    r"time=([\d.]+) ms(.*)$")
_ERROR = re.compile(r"^\[\d+\.\d+\] From \S+ icmp_seq=\d+ (.+)$")
_SUMMARY = re.compile(r"^(\d+) packets transmitted, (\d+) received")


def parse_ping(text: str) -> PingOutput:
    """Replies, transmitted count and error lines from `ping -D -n` output.
    Duplicates ("(DUP!)") are counted, not kept as replies."""
    replies, errors, dups, transmitted = [], [], 0, None
    for line in text.splitlines():
        line = line.strip()
        if m := _REPLY.match(line):
            if "DUP!" in m.group(4):
                dups += 1
                continue
            replies.append(Reply(float(m.group(1)), int(m.group(2)),
                                 round(float(m.group(3)) * 1000, 3)))
        elif m := _ERROR.match(line):
            errors.append(m.group(1).strip())
        elif m := _SUMMARY.match(line):
            transmitted = int(m.group(1))
    return PingOutput(tuple(replies), transmitted, dups, tuple(errors))


@dataclass(frozen=True)
class PingResult:
    dst: str
    start: float
    """Epoch seconds just before ping started: second 0 of the series."""
    duration_s: int
    interval_s: float
    payload: int
    replies: tuple[Reply, ...]
    transmitted: int | None
    duplicates: int = 0
    errors: tuple[str, ...] = ()

    def summary(self) -> dict:
        """count, lost, mean, median, sd, min, p90, p99, p99_9, max (µs); lost is
        None when ping did not report what it sent."""
        rtts = sorted(r.rtt_us for r in self.replies)
        lost = None if self.transmitted is None else max(0, self.transmitted - len(rtts))
        out: dict = {"count": len(rtts), "transmitted": self.transmitted, "lost": lost}
        if not rtts:
            return out | {k: None for k in ("mean", "median", "sd", "min", "p90", "p99",
                                            "p99_9", "max")}
        out |= {"mean": round(statistics.fmean(rtts), 3),
                "median": statistics.median(rtts),
                "sd": round(statistics.stdev(rtts), 3) if len(rtts) > 1 else None,
                "min": rtts[0]}
        out |= {name: nearest_rank(rtts, q) for name, q in _QUANTILES}
        return out | {"max": rtts[-1]}

    def per_second(self) -> list[dict]:
        """One entry per second of the trial, {t, n, median, p99, max} (µs; None in
        a second with no reply). A reply belongs to the second it arrived in,
        counted from `start`; the last stragglers are kept in the last second."""
        bins: list[list[float]] = [[] for _ in range(self.duration_s)]
        for r in self.replies:
            i = min(self.duration_s - 1, max(0, int(r.ts - self.start)))
            bins[i].append(r.rtt_us)
        out = []
        for t, b in enumerate(bins):
            b.sort()
            out.append({"t": t, "n": len(b),
                        "median": statistics.median(b) if b else None,
                        "p99": nearest_rank(b, 0.99) if b else None,
                        "max": b[-1] if b else None})
        return out

    def as_dict(self) -> dict:
        return {"dst": self.dst, "start": self.start, "duration_s": self.duration_s,
                "interval_s": self.interval_s, "payload": self.payload,
                "summary": self.summary(), "per_second": self.per_second(),
                "duplicates": self.duplicates, "errors": list(self.errors[:5]),
                "replies": [[r.ts, r.seq, r.rtt_us] for r in self.replies]}


class PingRun:
    def __init__(self, tb: Testbed, p: subprocess.Popen, out, series: "PingSeries",
                 dst: str, start: float, seconds: int):
        self._tb, self._p, self._out = tb, p, out
        self._series, self.dst, self.start, self.seconds = series, dst, start, seconds
        self._started = time.monotonic()
        self._result: PingResult | None = None

    def wait(self) -> PingResult:
        if self._result is not None:
            return self._result
        limit = self.seconds + _END_GRACE_S
        try:
            try:
                self._p.wait(max(0.0, limit - (time.monotonic() - self._started)))
            except subprocess.TimeoutExpired:
                raise FwbenchError(f"ping {self.dst}: no end after {limit:.0f} s") from None
            self._out.seek(0)
            text = self._out.read()
        finally:
            self._tb.forget(self._p)
            self._out.close()
        got = parse_ping(text)
        if got.transmitted is None:
            # rc 1 is "some echo unanswered", which a lossy trial may be; anything
            # else is ping's own failure.
            first = next((ln for ln in text.splitlines() if ln.strip()), "no output")
            raise FwbenchError(f"ping {self.dst}: exited {self._p.returncode}: {first}")
        s = self._series
        self._result = PingResult(self.dst, self.start, self.seconds, s.interval_s,
                                  s.payload, got.replies, got.transmitted,
                                  got.duplicates, got.errors)
        return self._result


class PingSeries:
    """`ping -D -n -i interval_s -s payload -w duration` from the client, pinned to
    the sender CPU (as `traffic.ping` pins it). Seed 004 pinged once a second; the
    default here is 100 per second, for enough replies in a minutes-long trial."""
    name = "ping-series"

    def __init__(self, interval_s: float = 0.01, payload: int = 56):
        if interval_s < 0.002:
            raise FwbenchError(f"ping interval {interval_s:g} s: at least 0.002 s")
        self.interval_s = interval_s
        self.payload = payload

    def versions(self) -> dict[str, str | None]:
        return {"ping": proc.version_line(["ping", "-V"])}

    def begin(self, tb: Testbed, dst: str, duration_s: float) -> PingRun:
        if not proc.have("ping"):
            raise FwbenchError("ping not found: install the Debian package iputils-ping")
        seconds = whole_seconds(duration_s)
        argv = ["ping", "-D", "-n", "-i", f"{self.interval_s:g}", "-s", str(self.payload),
                "-w", str(seconds), dst]
        # A file, not a pipe: minutes of replies outgrow a pipe and ping would block.
        out = tempfile.TemporaryFile("w+")
        start = time.time()
        try:
            p = tb.spawn("client", argv, cpu=tb.topo.settings.sender_cpu,
                         stdout=out, stderr=subprocess.STDOUT, text=True)
        except BaseException:
            out.close()
            raise
        return PingRun(tb, p, out, self, dst, start, seconds)


# --- engine probes --------------------------------------------------------------

_SUB_BITS = 7   # engine/common.h FWB_SUB_BITS: 128 linear sub-buckets per power of two


def bucket_mid(low_ns: float) -> float:
    """The midpoint of the engine histogram bucket whose lower edge is `low_ns`
    (engine/hist.c hist_bucket_mid): below 128 ns buckets are 1 ns wide and stand
    for their own value."""
    low = int(low_ns)
    if low < (1 << _SUB_BITS):
        return float(low)
    width = 1 << (low.bit_length() - 1 - _SUB_BITS)
    return low + width / 2


def merge_hists(hists: Sequence[Sequence[Sequence[float]]]) -> list[tuple[float, int]]:
    """Engine histograms ([lower edge ns, count] pairs) added bucket by bucket."""
    total: dict[float, int] = {}
    for h in hists:
        for low, n in h:
            total[low] = total.get(low, 0) + int(n)
    return sorted(total.items())


def hist_percentile(hist: Sequence[tuple[float, int]], q: float, lo: float,
                    hi: float) -> float:
    """As the engine computes it: the bucket midpoint at rank ceil(q*n), clamped to
    the exact extremes `lo`, `hi` (ns)."""
    count = sum(n for _, n in hist)
    rank = max(1, math.ceil(q * count - 1e-9))
    seen = 0
    for low, n in hist:
        seen += n
        if seen >= rank:
            return min(hi, max(lo, bucket_mid(low)))
    return hi


def _us(lat_ns: dict) -> dict | None:
    """The engine's own latency report (ns) in µs; None when nothing arrived."""
    if not lat_ns.get("count"):
        return None
    return {k: round(v / 1000, 3) for k, v in lat_ns.items() if k != "count"}


_PCTS = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p99_9", 0.999))


def latency_summary(reads: Sequence[dict]) -> dict | None:
    """Whole-trial one-way latency (µs) from engine receiver reads: count, min, max
    and mean exact (the mean weighted by count), percentiles from the merged
    histograms. None when no probe arrived."""
    reads = [r for r in reads if r["latency_ns"].get("count")]
    if not reads:
        return None
    hist = merge_hists([r["hist"] for r in reads])
    lat = [r["latency_ns"] for r in reads]
    count = sum(x["count"] for x in lat)
    lo, hi = min(x["min"] for x in lat), max(x["max"] for x in lat)
    out = {"count": count, "min": lo,
           "mean": sum(x["mean"] * x["count"] for x in lat) / count}
    out |= {k: hist_percentile(hist, q, lo, hi) for k, q in _PCTS}
    out["max"] = hi
    return {k: (v if k == "count" else round(v / 1000, 3)) for k, v in out.items()}


@dataclass(frozen=True)
class ProbeSecond:
    """One 1-second engine measurement. Latency in µs, one-way, from each probe's
    scheduled send time to its arrival at the server-side receiver (so the sender's
    own lateness is in it: `send_lag_p99` shows how much); on a testbed timing
    round trips, to its return to the client (Testbed.round_trip)."""
    t: int
    start: float
    """Epoch seconds when this second's measurement began."""
    sent: int
    received: int
    latency_us: dict | None
    """p50, p90, p99, p99_9, max, min, mean; None when no probe arrived."""
    send_lag_p99: float | None
    sender_short: bool
    """The sender fell short of the fixed rate this second."""

    def row(self) -> dict:
        lat = self.latency_us or {}
        return {"t": self.t, "sent": self.sent, "received": self.received,
                **{k: lat.get(k) for k in ("p50", "p90", "p99", "p99_9", "max")},
                "send_lag_p99": self.send_lag_p99, "sender_short": self.sender_short}


@dataclass(frozen=True)
class EngineProbeResult:
    dst: str
    dport: int
    sink_port: int
    rate_pps: float
    frame_size: int
    start: float
    seconds: tuple[ProbeSecond, ...]
    latency_us: dict | None
    """The whole trial: count, min, mean, p50, p90, p99, p99_9, max; percentiles
    from the seconds' merged histograms (bucket midpoints, < 0.4 % off)."""
    gaps_s: float = 0.0
    """Time between the seconds (sender start-up, drain): not probed."""
    extra: dict = field(default_factory=dict)

    @property
    def sent(self) -> int:
        return sum(s.sent for s in self.seconds)

    @property
    def received(self) -> int:
        return sum(s.received for s in self.seconds)

    def per_second(self) -> list[dict]:
        return [s.row() for s in self.seconds]

    def summary(self) -> dict:
        return {"sent": self.sent, "received": self.received,
                "lost": max(0, self.sent - self.received),
                "seconds_sender_short": sum(s.sender_short for s in self.seconds),
                **(self.latency_us or {"count": 0})}

    def as_dict(self) -> dict:
        return {"dst": self.dst, "dport": self.dport, "sink_port": self.sink_port,
                "rate_pps": self.rate_pps, "frame_size": self.frame_size,
                "start": self.start, "gaps_s": round(self.gaps_s, 3),
                "summary": self.summary(), "per_second": self.per_second(), **self.extra}


class EngineProbeRun:
    """The measurements running in a thread; `wait()` joins it."""

    def __init__(self, series: "EngineProbeSeries", tb: Testbed, seconds: int):
        self._series, self._tb, self.seconds = series, tb, seconds
        self._stop = threading.Event()
        self._done: list = []
        self._reads: list[dict] = []
        self._rows: list[ProbeSecond] = []
        self.kind = "one-way"       # how the probes were timed: set by _run
        self.start = self._end = time.time()
        self._thread = threading.Thread(target=self._run, name="engine-probes",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        s = self._series
        m = s.traffic.measurer(self._tb, s.frame_size)
        rx = s.traffic.receiver(self._tb)
        try:
            back = s.traffic.returns(self._tb)     # round trips: the client's sink times
            if back is not None:
                self.kind = "round trip"
            for t in range(self.seconds):
                if self._stop.is_set():
                    break
                began = time.time()
                r = m.measure(1.0, s.rate_pps)
                # The receiver's read does not reset it: read again for the
                # histogram the TrialResult leaves out, to merge the seconds.
                got = rx.read()
                timed = back.read() if back is not None else got
                self._reads.append(timed)
                lag = r.extra.get("send_lag_us") or {}
                self._rows.append(ProbeSecond(
                    t, began, r.sent, got["received"],
                    _us(timed["latency_ns"]), lag.get("p99"), r.sender_short))
            self._done.append(None)
        except BaseException as e:  # handed to wait(), in the caller's thread
            self._done.append(e)
        self._end = time.time()

    def stop(self) -> None:
        """Finish after the current second; `wait()` returns what was measured."""
        self._stop.set()

    def wait(self) -> EngineProbeResult:
        limit = self.seconds * 1.5 + _END_GRACE_S
        self._thread.join(max(0.0, limit - (time.time() - self.start)))
        if self._thread.is_alive():
            self._stop.set()
            raise FwbenchError(f"engine probes: not finished after {limit:.0f} s")
        if self._done and self._done[0] is not None:
            raise self._done[0]
        s, flow = self._series, self._series.traffic.flow
        rows = tuple(self._rows)
        busy = self._end - self.start
        return EngineProbeResult(
            dst=flow.dst or self._tb.topo.server.ip4, dport=flow.dport,
            sink_port=flow.sink_port, rate_pps=s.rate_pps, frame_size=s.frame_size,
            start=self.start, seconds=rows, latency_us=latency_summary(self._reads),
            gaps_s=max(0.0, busy - len(rows)) if rows else 0.0,
            extra={"receiver": s.traffic.settings.receiver,
                   "latency_kind": self.kind})


class EngineProbeSeries:
    """The engine's stamped probes at `rate_pps` (default 1,000 pps of 64-byte
    frames) along `flow`: for NAT, `Flow(dst=SERVICE4, dport=5001,
    sink_port=5001)` sends to the DNAT'd address while the server-side receiver
    counts the translated packets on `sink_port`.

    The receiver (XDP sink by default) stays attached between trials; `close()`
    detaches it. Only one engine receiver can hold the server's interface, so
    close any other EngineTraffic first (or pass it as `traffic`)."""
    name = "engine-probes"

    def __init__(self, flow: Flow | None = None, rate_pps: float = 1000,
                 frame_size: int = 64, settings: EngineSettings | None = None,
                 traffic: EngineTraffic | None = None):
        if rate_pps <= 0:
            raise FwbenchError(f"engine probe rate {rate_pps:g} pps: must be positive")
        self.traffic = traffic or EngineTraffic(settings, flow)
        self.rate_pps = rate_pps
        self.frame_size = frame_size

    def versions(self) -> dict[str, str | None]:
        return self.traffic.versions()

    def start(self, tb: Testbed) -> None:
        """Attach the receiver now (it takes a moment), so a later `begin()` starts
        sending at once."""
        self.traffic.start(tb)

    def begin(self, tb: Testbed, duration_s: float) -> EngineProbeRun:
        """Start `duration_s` consecutive 1-second measurements in a thread. The
        receiver starts here, in the caller's thread, so a failure to attach it is
        raised at once."""
        seconds = whole_seconds(duration_s)
        self.traffic.start(tb)
        return EngineProbeRun(self, tb, seconds)

    def close(self) -> None:
        self.traffic.close()
