"""The engine's connection modes from Python: `fwbench-engine accept`, a server that
accepts and at once closes TCP connections on many ports and counts them by the local
endpoint they reached (the one a firewall DNATed them to), and `fwbench-engine
connect`, an open-loop client opening connections at a fixed rate, each timed by the
kernel's own SYN -> SYN-ACK sample (tcpi_rtt) and by user space (connect() to
writable).

`AcceptServer` lives for as long as a `with` block and is read over its stdin;
`connect()` runs the client once and returns a `ConnectResult`.
"""
from __future__ import annotations

import math
import select
import subprocess
import tempfile
from dataclasses import dataclass, field

from fwbench.engine import _one_line, _parse, binary, quit_process
from fwbench.errors import FwbenchError
from fwbench.testbed.base import Testbed
from fwbench.traffic.echo import _splitmix64

_READY_S = 10.0
_READ_S = 5.0
QUANTILES = ("p01", "p50", "p90", "p99", "p99_9")
FAILURES = ("refused", "unreachable", "timeout", "other")


@dataclass(frozen=True)
class Accepted:
    """What the server accepted since the last read: in all, and by local endpoint
    (address, port), nonzero ones only. `errors`: accept() calls that failed
    (out of descriptors); `unlisted`: connections to endpoints past the server's
    table (65,536 endpoints), counted in `accepted` only."""
    accepted: int
    total: int
    errors: int
    unlisted: int
    endpoints: dict[tuple[str, int], int]


class AcceptServer:
    """`fwbench-engine accept` on `role` (the server by default), listening on
    `ports` (ints, or the engine's text "8080-8085,9000"), on the wildcard address of
    both IP versions unless `bind` names one; ready when made. `read()` gives the
    counts since the last read; `close()` ends it (also on leaving a `with` block)."""

    def __init__(self, tb: Testbed, ports, *, bind: str | None = None,
                 role: str = "server", cpu: int | None = None, backlog: int = 65535):
        text = ports if isinstance(ports, str) else ",".join(str(p) for p in ports)
        argv = [str(binary()), "accept", "--ports", text, "--backlog", str(backlog)]
        if bind:
            argv += ["--bind", bind]
        if cpu is not None:
            argv += ["--cpu", str(cpu)]
        self._tb = tb
        # A file, not a pipe: nobody reads stderr while the server runs.
        self._err = tempfile.TemporaryFile("w+")
        self._p = tb.spawn(role, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=self._err, text=True, bufsize=1)
        try:
            self.info = self._reply(_READY_S)
            if not self.info.get("ready"):
                raise FwbenchError(f"accept server did not start: {self.info}")
        except BaseException:
            self.close()
            raise

    def _reply(self, timeout_s: float) -> dict:
        ready, _, _ = select.select([self._p.stdout], [], [], timeout_s)
        line = self._p.stdout.readline() if ready else ""
        if not line:
            if self._p.poll() is None:
                raise FwbenchError(f"accept server: no answer in {timeout_s:g} s")
            self._err.seek(0)
            raise FwbenchError(f"accept server: {_one_line(self._err.read())}")
        return _parse(line, "accept server")

    def read(self) -> Accepted:
        try:
            self._p.stdin.write("read\n")
            self._p.stdin.flush()
        except BrokenPipeError:
            self._err.seek(0)
            raise FwbenchError(f"accept server has stopped: "
                               f"{_one_line(self._err.read())}") from None
        r = self._reply(_READ_S)
        if "accepted" not in r:
            raise FwbenchError(f"accept server: unexpected answer {r}")
        return Accepted(r["accepted"], r["accepted_total"], r["errors"], r["unlisted"],
                        {(e["addr"], e["port"]): e["accepted"] for e in r["endpoints"]})

    def close(self) -> None:
        quit_process(self._tb, self._p)
        if not self._err.closed:
            self._err.close()

    def __enter__(self) -> "AcceptServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def target_index(seed: int, i: int, n: int) -> int:
    """Which of n targets connection i (from 0) goes to, as engine/conn.h's
    conn_pick: (splitmix64(splitmix64(seed) ^ i) * n) >> 64."""
    return (_splitmix64(_splitmix64(seed) ^ i) * n) >> 64


Hist = tuple[tuple[float, int], ...]   # (bucket's lower edge in ns, count), ascending


@dataclass(frozen=True)
class Latency:
    """A distribution from the engine's log-linear histogram, in µs: count, min,
    mean, p01 ... p99.9 (bucket midpoints, within 0.4 %), max; None without
    samples. `hist` keeps the buckets for intervals (`percentile_interval`)."""
    count: int
    min: float | None
    mean: float | None
    p01: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    p99_9: float | None
    max: float | None
    hist: Hist = field(repr=False, default=())

    @classmethod
    def parse(cls, d: dict, hist: list) -> "Latency":
        us = lambda k: None if d.get(k) is None else d[k] / 1000  # noqa: E731
        return cls(d["count"], us("min"), us("mean"), *(us(q) for q in QUANTILES),
                   us("max"), tuple((float(lo), int(n)) for lo, n in hist))

    def percentile_interval(self, q: float, z: float = 1.96) -> tuple[float, float]:
        """A distribution-free interval (µs) for the q-quantile: the order statistics
        at ranks nq -+ z sqrt(nq(1-q)) (the binomial's normal approximation), each
        read as its bucket's edges, so the interval also covers the bucket width."""
        if not self.hist or not 0 < q < 1:
            raise FwbenchError(f"percentile interval: no samples or q={q} outside (0, 1)")
        n = sum(c for _, c in self.hist)
        half = z * math.sqrt(n * q * (1 - q))
        lo_rank, hi_rank = max(1, math.floor(n * q - half)), min(n, math.ceil(n * q + half))
        seen, lo_v = 0, None
        for lo, c in self.hist:
            seen += c
            if lo_v is None and seen >= lo_rank:
                lo_v = lo
            if seen >= hi_rank:
                return lo_v / 1000, (lo + bucket_width(lo)) / 1000
        raise FwbenchError("percentile interval: histogram counts do not add up")


def bucket_width(low_ns: float) -> float:
    """The width of the engine's histogram bucket starting at `low_ns`
    (engine/common.h: exact below 128 ns, then 128 buckets per power of two)."""
    if low_ns < 128:
        return 1.0
    return float(2 ** (math.floor(math.log2(low_ns)) - 7))


@dataclass(frozen=True)
class ConnectResult:
    """One run of the connection generator. `failed` by class (refused,
    unreachable, timeout, other); `slow`: established later than slow_ms or with
    the SYN sent again (`retransmitted`, left out of `rtt`, Karn); `skipped`:
    connections the generator could not even start (more in flight than it holds).
    `rtt` is the kernel's SYN -> SYN-ACK time, `connect` user space's connect() to
    writable, `lag` how late each connect() was against its schedule, all in µs."""
    rate: float
    scheduled: int
    attempted: int
    connected: int
    failed: dict[str, int]
    slow: int
    retransmitted: int
    skipped: int
    start_rate: float | None
    elapsed_s: float
    rtt: Latency
    connect: Latency
    lag: Latency
    first_other_error: str | None
    raw: dict = field(repr=False, compare=False)

    @property
    def failures(self) -> int:
        return sum(self.failed.values())

    @classmethod
    def parse(cls, r: dict) -> "ConnectResult":
        return cls(r["rate"], r["scheduled"], r["attempted"], r["connected"],
                   {k: r["failed"][k] for k in FAILURES}, r["slow"], r["retransmitted"],
                   r["skipped"], r["start_rate"], r["elapsed_s"],
                   Latency.parse(r["rtt_ns"], r["rtt_hist"]),
                   Latency.parse(r["connect_ns"], r["connect_hist"]),
                   Latency.parse(r["lag_ns"], r["lag_hist"]),
                   r["first_other_error"], r)


def connect(tb: Testbed, targets, rate: float, duration_s: float | None = None, *,
            count: int | None = None, src: str | list[str] | None = None,
            seed: int = 1, timeout_ms: int = 2000, slow_ms: int = 50,
            threads: int = 1, cpus: list[int] | None = None, spin_us: int | None = None,
            samples: str | None = None, role: str = "client") -> ConnectResult:
    """Run `fwbench-engine connect` on `role` (the client) and return its result.

    `targets`: (address, port) pairs, each connection's drawn uniformly with `seed`;
    `rate` connections a second for `duration_s` or `count` connections; `src` the
    source address(es), taken in turn (default: the client's address of the targets'
    IP version). `samples`: a file the engine writes a line per established
    connection to (SRC SPORT DST DPORT RTT_US USER_NS RETRANS)."""
    targets = list(targets)
    if not targets:
        raise FwbenchError("connect: no targets")
    if (duration_s is None) == (count is None):
        raise FwbenchError("connect: give duration_s or count (one of them)")
    if src is None:
        c = tb.topo.client
        src = c.ip6 if ":" in targets[0][0] else c.ip4
    sources = [src] if isinstance(src, str) else list(src)
    argv = [str(binary()), "connect", "--targets", "-", "--rate", f"{rate:.6g}",
            "--src", ",".join(sources), "--seed", str(seed),
            "--timeout-ms", str(timeout_ms), "--slow-ms", str(slow_ms),
            "--threads", str(threads)]
    if count is not None:
        argv += ["--count", str(count)]
    else:
        argv += ["--duration", f"{duration_s:g}"]
    if cpus:
        argv += ["--cpus", ",".join(map(str, cpus))]
    if spin_us is not None:
        argv += ["--spin-us", str(spin_us)]
    if samples:
        argv += ["--samples", samples]
    planned_s = count / rate if count is not None else duration_s
    text = "".join(f"{a} {p}\n" for a, p in targets)
    # The schedule, then the last connections' timeout, and room to start.
    cp = tb.executor.run(role, argv, input=text, check=False,
                         timeout=planned_s + timeout_ms / 1000 + 30)
    if cp.returncode != 0:
        raise FwbenchError(f"connect: {_one_line(cp.stderr)}")
    return ConnectResult.parse(_parse(cp.stdout, "connect"))
