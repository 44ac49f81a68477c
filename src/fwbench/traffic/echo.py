"""The engine's echo modes from Python (seed 001): an echo server in the testbed's
server namespace and n echo clients in its client namespace, each client on a socket
of its own from its own source address.

`EchoSpec` is what both ends must agree on (protocol, family, client count, message
sizes and their seed); `EchoServer` runs `fwbench-engine echo-server` for as long as
a `with` block, `run_clients` runs `fwbench-engine echo` once and returns its report.
`frame_size` is the engine's size function, so a caller can say which size every
message had without asking the engine.
"""
from __future__ import annotations

import select
import socket
import subprocess
import tempfile
from dataclasses import dataclass, replace

from fwbench.engine import _one_line, _parse, binary
from fwbench.errors import FwbenchError
from fwbench.testbed.base import Testbed

HEADER_BYTES = 32           # the message header: magic, client, size, flags, seq, sent_ns
MAX_CLIENTS = 4096
STREAM_MAX = 65536          # the engine's largest TCP message
# The largest UDP message that is one datagram on a 1500-byte MTU (no fragments).
UDP_MAX = {4: 1500 - 20 - 8, 6: 1500 - 40 - 8}
FAULTS = ("drop", "foreign", "size", "seq", "delay", "magic")
_READY_S = 10.0             # the server's ready line
_STOP_S = 30.0              # its final report: 320 threads to wind down on 2 cores
_M64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def frame_size(seed: int, client: int, seq: int, lo: int, hi: int) -> int:
    """The size of client `client`'s message `seq` (both from 1), as engine/echo.h
    computes it: lo + splitmix64(seed ^ (client << 40) ^ seq) % (hi - lo + 1)."""
    if lo == hi:
        return lo
    return lo + _splitmix64((seed ^ (client << 40) ^ seq) & _M64) % (hi - lo + 1)


def sctp_missing() -> str | None:
    """Why this kernel cannot run SCTP, in the engine's words, or None."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_SCTP).close()
    except OSError as e:
        return f"this kernel has no SCTP (socket: {e.strerror})"
    return None


@dataclass(frozen=True)
class EchoSpec:
    """What the echo server and its clients agree on. `frame` is (lo, hi) message
    bytes, header included; lo == hi is a fixed size, else each message's size is
    frame_size(seed, client, seq, lo, hi). `server_model`: "threads" (a thread per
    connection, stream protocols only) or "epoll" (one loop). `crr`: a new TCP
    connection per message. Timeouts are the clients': a message not handed to the
    kernel in `send_timeout_ms` counts unsent, one not echoed in `echo_timeout_ms`
    lost."""
    proto: str
    version: int
    clients: int
    frame: tuple[int, int]
    server_model: str = "epoll"
    seed: int = 1
    port: int = 7007
    crr: bool = False
    send_timeout_ms: int = 500
    echo_timeout_ms: int = 500

    @property
    def family(self) -> str:
        return f"ipv{self.version}"

    def validate(self) -> None:
        """The engine's input checks, in its order and words, as one-line errors."""
        if self.proto not in ("tcp", "udp", "sctp"):
            raise FwbenchError(f"echo --proto: unknown protocol {self.proto} "
                               f"(tcp, udp or sctp)")
        if self.version not in (4, 6):
            raise FwbenchError(f"echo: IP version {self.version}: expected 4 or 6")
        if self.proto == "sctp" and (why := sctp_missing()):
            raise FwbenchError(f"echo --proto sctp: {why}")
        if not 1 <= self.clients <= MAX_CLIENTS:
            raise FwbenchError(f"echo --clients: {self.clients} is outside 1..{MAX_CLIENTS}")
        if self.server_model not in ("threads", "epoll"):
            raise FwbenchError(f"echo --server: unknown model {self.server_model} "
                               f"(threads or epoll)")
        if self.server_model == "threads" and self.proto == "udp":
            raise FwbenchError("echo --server threads: udp has no connection per client "
                               "to give a thread (the seed ran threads for stream "
                               "protocols only); use --server epoll")
        if self.crr and self.proto != "tcp":
            raise FwbenchError(f"echo --crr: a connection per message needs tcp, "
                               f"not {self.proto}")
        lo, hi = self.frame
        if lo > hi:
            raise FwbenchError(f"echo --frame-size: {lo}-{hi} runs backwards "
                               f"(LO-HI with LO <= HI)")
        where = f"{self.proto}/{self.family}"
        if lo < HEADER_BYTES:
            raise FwbenchError(f"echo --frame-size: {lo} is below the minimum "
                               f"{HEADER_BYTES} for {where} (the message header)")
        top = UDP_MAX[self.version] if self.proto == "udp" else STREAM_MAX
        if hi > top:
            why = ("one datagram without IP fragmentation on a 1500-byte MTU"
                   if self.proto == "udp" else "the engine's limit for a stream message")
            raise FwbenchError(f"echo --frame-size: {hi} is above the maximum {top} "
                               f"for {where} ({why})")
        if not 1 <= self.port <= 65535:
            raise FwbenchError(f"echo --port: {self.port} is outside 1..65535")
        if not 0 <= self.seed <= _M64:
            raise FwbenchError(f"echo --seed: {self.seed} is outside 0..{_M64}")
        for name, ms in (("send", self.send_timeout_ms), ("echo", self.echo_timeout_ms)):
            if not 1 <= ms <= 3_600_000:
                raise FwbenchError(f"echo --{name}-timeout-ms: {ms} is outside 1..3600000")

    def frame_arg(self) -> str:
        lo, hi = self.frame
        return str(lo) if lo == hi else f"{lo}-{hi}"

    def server_address(self, tb: Testbed) -> str:
        srv = tb.topo.server
        return srv.ip4 if self.version == 4 else srv.ip6


def _cpus_arg(cpus: list[int] | None) -> list[str]:
    return ["--cpus", ",".join(map(str, cpus))] if cpus else []


def server_argv(spec: EchoSpec, bind: str, *, cpus: list[int] | None = None,
                faults: tuple[str, ...] = ()) -> list[str]:
    """The echo server's command line (no checks: the engine makes them too)."""
    argv = [str(binary()), "echo-server", "--proto", spec.proto, "--bind", bind,
            "--port", str(spec.port), "--server", spec.server_model,
            "--clients", str(spec.clients), "--frame-size", spec.frame_arg(),
            "--seed", str(spec.seed), *_cpus_arg(cpus)]
    for f in faults:
        argv += ["--fault", f]
    return argv


def client_argv(spec: EchoSpec, server: str, sources: list[str], *,
                duration_s: float | None = None, warmup_s: float = 0.0,
                count: int | None = None, threads: int = 1,
                cpus: list[int] | None = None) -> list[str]:
    """The echo clients' command line (no checks: the engine makes them too)."""
    argv = [str(binary()), "echo", "--proto", spec.proto, "--server", server,
            "--port", str(spec.port), "--clients", str(spec.clients),
            "--sources", ",".join(sources), "--frame-size", spec.frame_arg(),
            "--seed", str(spec.seed), "--threads", str(threads),
            "--send-timeout-ms", str(spec.send_timeout_ms),
            "--echo-timeout-ms", str(spec.echo_timeout_ms), *_cpus_arg(cpus)]
    if count is not None:
        argv += ["--count", str(count)]
    if duration_s is not None:
        argv += ["--duration", f"{duration_s:g}"]
    if warmup_s:
        argv += ["--warmup", f"{warmup_s:g}"]
    if spec.crr:
        argv.append("--crr")
    return argv


class EchoServer:
    """`fwbench-engine echo-server` in the testbed's server namespace, on the server's
    address of the spec's family; started (and ready) when made. `stop()` ends it and
    returns its report; leaving a `with` block without stop() aborts it.

    `faults` are the server's --fault options, "KIND:EVERY:CLIENT" (tests only):
    drop, foreign, size, seq or delay the echo of client CLIENT's every EVERY-th
    message, or break its magic."""

    def __init__(self, tb: Testbed, spec: EchoSpec, *, cpus: list[int] | None = None,
                 faults: tuple[str, ...] = (), bind: str | None = None):
        spec.validate()
        self.spec = spec
        self._tb = tb
        self._report: dict | None = None
        # bind: another address, or the family's wildcard (every address the server
        # holds as local: DNAT's endpoints in a prefix).
        argv = server_argv(spec, bind or spec.server_address(tb), cpus=cpus, faults=faults)
        # A file, not a pipe: nobody reads stderr while the server runs.
        self._err = tempfile.TemporaryFile("w+")
        self._p = tb.spawn("server", argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=self._err, text=True, bufsize=1)
        try:
            self.info = self._ready()
        except BaseException:
            self.abort()
            raise

    def _stderr(self) -> str:
        self._err.seek(0)
        return self._err.read()

    def _ready(self) -> dict:
        ready, _, _ = select.select([self._p.stdout], [], [], _READY_S)
        line = self._p.stdout.readline() if ready else ""
        if not line:
            if self._p.poll() is None:
                raise FwbenchError(f"echo server: not ready after {_READY_S:.0f} s")
            raise FwbenchError(f"echo server: {_one_line(self._stderr())}")
        info = _parse(line, "echo server")
        if not info.get("ready"):
            raise FwbenchError(f"echo server did not start: {line.strip()[:80]}")
        return info

    def stop(self) -> dict:
        """End of input: the server stops, prints its report and exits."""
        if self._report is not None:
            return self._report
        try:
            try:
                out, _ = self._p.communicate(timeout=_STOP_S)   # closes stdin
            except subprocess.TimeoutExpired:
                raise FwbenchError(f"echo server: no report {_STOP_S:.0f} s after "
                                   f"its input ended") from None
            if self._p.returncode != 0:
                raise FwbenchError(f"echo server exited {self._p.returncode}: "
                                   f"{_one_line(self._stderr())}")
            lines = out.strip().splitlines()
            if not lines:
                raise FwbenchError("echo server: no report")
            self._report = _parse(lines[-1], "echo server")
            return self._report
        finally:
            self.abort()

    def abort(self) -> None:
        """Stop it now, however it is (for error paths); always forgotten by tb."""
        self._tb.forget(self._p)
        if not self._err.closed:
            self._err.close()

    def __enter__(self) -> "EchoServer":
        return self

    def __exit__(self, *exc) -> None:
        if self._report is None:
            self.abort()


def run_clients(tb: Testbed, spec: EchoSpec, sources: list[str], *,
                duration_s: float | None = None, warmup_s: float = 0.0,
                count: int | None = None, threads: int = 1,
                cpus: list[int] | None = None, server: tuple[str, int] | None = None) -> dict:
    """Run `fwbench-engine echo` in the client namespace and return its report.

    `sources`: one address per client (client i binds sources[i-1]) or one for all.
    `server`: the (address, port) the clients send to, when not the server's own
    at the spec's port (a service address DNAT translates to the server's).
    Either `duration_s` (cycles run warmup_s + duration_s, counted in the last
    duration_s) or `count` (every client runs exactly that many cycles)."""
    spec.validate()
    if (duration_s is None) == (count is None):
        raise FwbenchError("echo clients: give duration_s or count (one of them)")
    if warmup_s and duration_s is None:
        raise FwbenchError("echo clients: warmup_s only with duration_s")
    if len(sources) not in (1, spec.clients):
        raise FwbenchError(f"echo clients: {len(sources)} sources for {spec.clients} "
                           f"clients (give one per client or one for all)")
    to = spec if server is None else replace(spec, port=server[1])
    argv = client_argv(to, spec.server_address(tb) if server is None else server[0],
                       sources, duration_s=duration_s, warmup_s=warmup_s, count=count,
                       threads=threads, cpus=cpus)
    cycle_s = (spec.send_timeout_ms + spec.echo_timeout_ms) / 1000
    # Every cycle could time out (count), or the last (duration); connecting (5 s
    # at most) and the END messages besides.
    limit = (count * cycle_s if count is not None else warmup_s + duration_s + cycle_s) + 60
    cp = tb.executor.run("client", argv, check=False, timeout=limit)
    if cp.returncode != 0:
        raise FwbenchError(f"echo clients: {_one_line(cp.stderr)}")
    return _parse(cp.stdout, "echo clients")
