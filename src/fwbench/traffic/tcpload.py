"""Bidirectional TCP bulk load through the firewall, as seed 004's `iperf -d` made
it: the client sends to the server and the server to the client at the same time,
over several TCP connections, while latency is probed.

The tool is iperf3 (`iperf3 --bidir -P N -J`), not iperf 2 and not the engine:
- iperf3 is well kept and packaged everywhere; `--bidir` (since 3.7) runs both
  directions in one test, on connections the client opens, as `iperf -d` did, so
  the return direction crosses the firewall as the reply side of connections it
  tracks, and a DNAT'd address works for both directions;
- its JSON report carries bytes, bits/s and retransmits per direction, read by the
  sender and by the receiver (the client fetches the server's side), so the load
  actually achieved each way is recorded, not assumed;
- the engine sends UDP only: no congestion control, no retransmits, no
  connection tracking of TCP state, which is what this load is for.

The rate each way is the receiving side's bits/s (what got through the firewall);
retransmits are the sending side's count. `shortfall()` compares a trial with a
no-firewall calibration so a trial whose load fell short can be flagged.

Durations are whole seconds: iperf3 3.12 (and ping, for the probes run beside it)
take `-t`/`-w` as whole seconds.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace

from fwbench import proc
from fwbench.errors import FwbenchError
from fwbench.testbed.base import Testbed

PORT = 5001                 # iperf 2's port: the one seed 004's rules accept and DNAT
_START_LIMIT_S = 5.0        # server listening / client connected
_END_GRACE_S = 15.0         # connect, the final exchange of results, a slow machine
MISSING = ("iperf3 not found: install the Debian package iperf3 "
           "(./scripts/setup.sh installs everything)")


def whole_seconds(duration_s: float) -> int:
    """`duration_s` as a whole number of seconds (>= 1), or a one-line error."""
    n = round(duration_s)
    if n < 1 or abs(n - duration_s) > 1e-9:
        raise FwbenchError(f"duration {duration_s:g} s: give a whole number of seconds, "
                           f"at least 1")
    return n


def _require_iperf3() -> None:
    if not proc.have("iperf3"):
        raise FwbenchError(MISSING)


@dataclass(frozen=True)
class LoadResult:
    """The load one trial achieved. Rates in bits per second."""

    up_bps: float
    """Client -> server, as the server received it."""
    down_bps: float
    """Server -> client, as the client received it."""
    up_retransmits: int | None
    """TCP retransmits by the client's sending connections (None: not reported)."""
    down_retransmits: int | None
    """TCP retransmits by the server's sending connections (None: not reported)."""
    streams: int
    """TCP connections per direction."""
    duration_s: float
    """Seconds the receiving side measured over (iperf3's own figure)."""
    up_bytes: int = 0
    down_bytes: int = 0
    congestion: str | None = None
    """The sender's TCP congestion control (the namespace's default)."""
    per_second: tuple[dict, ...] = ()
    """iperf3's intervals as {t, up_bps, down_bps}: the client's view, so up is
    what it sent and down what it received (the server's intervals stay there)."""
    extra: dict = field(default_factory=dict)
    """dst, port, iperf3's CPU utilisation report."""

    def as_dict(self) -> dict:
        d = asdict(self)
        d["per_second"] = list(self.per_second)
        return d


def parse_bidir(doc: dict, streams: int) -> LoadResult:
    """A LoadResult from the client's `iperf3 --bidir -J` report.

    With --bidir the client's `end` holds the forward direction in `sum_sent`
    (its own sending) and `sum_received` (the server's receiving), and the reverse
    in `sum_sent_bidir_reverse` (the server's sending, with its retransmits) and
    `sum_received_bidir_reverse` (its own receiving): verified on iperf3 3.12.
    """
    if doc.get("error"):
        raise FwbenchError(f"iperf3: {doc['error']}")
    end = doc.get("end") or {}
    need = ("sum_sent", "sum_received", "sum_sent_bidir_reverse",
            "sum_received_bidir_reverse")
    if missing := [k for k in need if k not in end]:
        raise FwbenchError(f"iperf3 report lacks {', '.join(missing)}: was --bidir "
                           f"given (iperf3 >= 3.7)?")
    up_tx, up_rx = end["sum_sent"], end["sum_received"]
    down_tx, down_rx = end["sum_sent_bidir_reverse"], end["sum_received_bidir_reverse"]
    per_second = tuple(
        {"t": round(iv["sum"]["start"], 3),
         "up_bps": iv["sum"]["bits_per_second"],
         "down_bps": iv.get("sum_bidir_reverse", {}).get("bits_per_second")}
        for iv in doc.get("intervals", []) if "sum" in iv)
    return LoadResult(
        up_bps=float(up_rx["bits_per_second"]),
        down_bps=float(down_rx["bits_per_second"]),
        up_retransmits=up_tx.get("retransmits"),
        down_retransmits=down_tx.get("retransmits"),
        streams=streams,
        duration_s=float(min(up_rx["seconds"], down_rx["seconds"])),
        up_bytes=int(up_rx["bytes"]),
        down_bytes=int(down_rx["bytes"]),
        congestion=end.get("sender_tcp_congestion"),
        per_second=per_second,
        extra={"cpu_utilization_percent": end.get("cpu_utilization_percent")},
    )


def _report(out: str, err: str, rc: int | None, what: str) -> dict:
    """iperf3's JSON document, or a one-line error with iperf3's own text."""
    try:
        doc = json.loads(out)
    except (json.JSONDecodeError, TypeError):
        lines = [ln.strip() for ln in (err or out or "").splitlines() if ln.strip()]
        raise FwbenchError(f"{what}: {lines[0] if lines else f'exited {rc}, no report'}"
                           ) from None
    if doc.get("error"):
        raise FwbenchError(f"{what}: {doc['error']}")
    if rc:
        raise FwbenchError(f"{what}: exited {rc}")
    return doc


def shortfall(result: LoadResult, reference: LoadResult, fraction: float = 0.8
              ) -> str | None:
    """One line naming each direction that fell below `fraction` of the reference
    (a no-firewall calibration in the same run), else None."""
    short = [f"{name} {got / 1e9:.2f} Gbit/s < {fraction:g} x {ref / 1e9:.2f}"
             for name, got, ref in (("up", result.up_bps, reference.up_bps),
                                    ("down", result.down_bps, reference.down_bps))
             if got < fraction * ref]
    if not short:
        return None
    return "TCP load fell short of the calibration: " + "; ".join(short)


class LoadRun:
    """A running client; `wait()` collects its result."""

    def __init__(self, tb: Testbed, client: subprocess.Popen, out, err,
                 load: "TcpBidirLoad", dst: str, seconds: int):
        self._tb, self._p, self._out, self._err = tb, client, out, err
        self._load, self.dst, self.seconds = load, dst, seconds
        self.started = time.monotonic()
        self._outcome: LoadResult | FwbenchError | None = None

    def connected(self) -> int:
        """Established TCP connections of this test from the client (control and
        data): 2 x streams + 1 once both directions are up."""
        port = self._load.port
        ss = self._tb.run("client", ["ss", "-Htn", "state", "established",
                                     f"dport = :{port}"], check=False).stdout
        return sum(1 for ln in ss.splitlines() if ln.strip())

    def wait_connected(self, timeout_s: float = _START_LIMIT_S) -> None:
        """Return once every connection is up: data flows both ways from here on.
        A client that stopped or never connected: one-line error."""
        want = 2 * self._load.streams + 1
        deadline = time.monotonic() + timeout_s
        while self.connected() < want:
            if self._p.poll() is not None:
                self.wait()             # raises with iperf3's own message
                raise FwbenchError(f"iperf3 client to {self.dst} ended before its load")
            if time.monotonic() > deadline:
                raise FwbenchError(f"iperf3 client to {self.dst}:{self._load.port}: not "
                                   f"connected after {timeout_s:g} s")
            time.sleep(0.02)

    def wait(self) -> LoadResult:
        """Wait for the client's end and parse its report (once; later calls give
        the same result or raise the same error)."""
        if self._outcome is None:
            try:
                self._outcome = self._collect()
            except FwbenchError as e:
                self._outcome = e
        if isinstance(self._outcome, FwbenchError):
            raise self._outcome
        return self._outcome

    def abort(self) -> None:
        """Stop the client now (a probe failed); `wait()` then raises. The server
        may stay busy with the broken test: restart it before the next one."""
        if self._outcome is None:
            self._tb.forget(self._p)
            self._out.close()
            self._err.close()
            self._outcome = FwbenchError(f"iperf3 client to {self.dst}: aborted")

    def _collect(self) -> LoadResult:
        what = f"iperf3 client to {self.dst}:{self._load.port}"
        limit = self.seconds + _END_GRACE_S
        try:
            try:
                self._p.wait(max(0.0, limit - (time.monotonic() - self.started)))
            except subprocess.TimeoutExpired:
                raise FwbenchError(f"{what}: no result after {limit:.0f} s") from None
            self._out.seek(0)
            self._err.seek(0)
            doc = _report(self._out.read(), self._err.read(), self._p.returncode, what)
        finally:
            self._tb.forget(self._p)
            self._out.close()
            self._err.close()
        r = parse_bidir(doc, self._load.streams)
        return replace(r, extra={**r.extra, "dst": self.dst, "port": self._load.port})


class TcpBidirLoad:
    """iperf3 --bidir with `streams` connections each way, server on `port`."""
    name = "iperf3-bidir"

    def __init__(self, streams: int = 4, port: int = PORT):
        if not 1 <= streams <= 128:
            raise FwbenchError(f"TCP load streams {streams}: expected 1..128")
        self.streams = streams
        self.port = port
        self._server: subprocess.Popen | None = None
        self._server_err = None

    def preflight(self) -> None:
        """One line naming iperf3 and its package when it is missing."""
        _require_iperf3()

    def versions(self) -> dict[str, str | None]:
        return {"iperf3": proc.version_line(["iperf3", "-v"])}

    def start_server(self, tb: Testbed) -> None:
        """iperf3 -s in the server namespace on the server's address and `port`,
        pinned to the server CPU; returns once it listens. Idempotent."""
        _require_iperf3()
        if self._server and self._server.poll() is None:
            return
        self.stop_server(tb)    # one that died: its stderr file goes with it
        srv = tb.topo.server
        # stderr to a file: a server living through many tests may write more than
        # a pipe holds, and nobody reads it until something fails.
        self._server_err = tempfile.TemporaryFile("w+")
        self._server = tb.spawn("server", ["iperf3", "-s", "-B", srv.ip4, "-p",
                                           str(self.port)],
                                cpu=tb.topo.settings.server_cpu,
                                stdout=subprocess.DEVNULL, stderr=self._server_err, text=True)
        deadline = time.monotonic() + _START_LIMIT_S
        while time.monotonic() < deadline:
            ss = tb.run("server", ["ss", "-Hltn", f"sport = :{self.port}"],
                        check=False).stdout
            if ss.strip():
                return
            if self._server.poll() is not None:
                self._server_err.seek(0)
                err = self._server_err.read().strip().splitlines()
                self.stop_server(tb)
                raise FwbenchError(f"iperf3 server did not start: "
                                   f"{err[0] if err else 'no message'}")
            time.sleep(0.05)
        self.stop_server(tb)
        raise FwbenchError(f"iperf3 server not listening on port {self.port} after "
                           f"{_START_LIMIT_S:g} s")

    def stop_server(self, tb: Testbed) -> None:
        if self._server is not None:
            tb.forget(self._server)
            self._server = None
        if self._server_err is not None:
            self._server_err.close()
            self._server_err = None

    def begin(self, tb: Testbed, dst: str, duration_s: float) -> LoadRun:
        """Start the client in the client namespace towards `dst`:`port` (the server,
        or an address the firewall DNATs to it) and return at once. The client is
        pinned to the sender CPU, as every client-side tool is."""
        _require_iperf3()
        seconds = whole_seconds(duration_s)
        argv = ["iperf3", "-c", dst, "-p", str(self.port), "--bidir",
                "-P", str(self.streams), "-t", str(seconds), "-J"]
        # Reports go to files, not pipes: a long run's JSON outgrows a pipe's
        # buffer and iperf3 would block on it until wait().
        out = tempfile.TemporaryFile("w+")
        err = tempfile.TemporaryFile("w+")
        try:
            client = tb.spawn("client", argv, cpu=tb.topo.settings.sender_cpu,
                              stdout=out, stderr=err, text=True)
        except BaseException:
            out.close()
            err.close()
            raise
        return LoadRun(tb, client, out, err, self, dst, seconds)
