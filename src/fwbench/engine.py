"""The Python side of the traffic engine (`engine/`, C): find the binary, launch its
sender and receivers inside the testbed, and parse their JSON.

The sink (XDP on the server's interface, or the user-space receiver) lives for a
whole testbed session and is driven over its stdin: `arm COOKIE` before a trial,
`read` after it. The sender is one process per trial.
"""
from __future__ import annotations

import json
import select
import signal
import subprocess
from pathlib import Path

from fwbench import __version__, proc
from fwbench.errors import FwbenchError
from fwbench.testbed.base import Testbed

# The policy's test entry (seed 000's iperf3 port): the flow every rule set is built
# to let through after N rules, so the engine sends exactly the flow under test.
ENGINE_PORT = 5201


def binary() -> Path:
    """The engine executable: $FWBENCH_ENGINE, or the one `scripts/setup.sh` built."""
    return proc.built_binary("FWBENCH_ENGINE", "engine/build/fwbench-engine",
                             "traffic engine")


def version() -> str | None:
    """fwbench's version and the binary's hash: the engine is built from this tree."""
    try:
        return f"fwbench-engine {__version__} (sha256 {proc.file_digest(binary())})"
    except FwbenchError:
        return None


# The engine's exit code when the kernel does not allow what was asked at all (XDP
# live frames refused with EPERM by some VM kernels), as opposed to a failed run.
EXIT_UNSUPPORTED = 3


class KernelRefuses(FwbenchError):
    """The kernel does not allow what the engine was asked (its one line says what):
    a feature this machine lacks, not a failed measurement."""


def _one_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


def _parse(text: str, who: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise FwbenchError(f"{who}: unreadable report: {text.strip()[:80]!r}") from None


class Receiver:
    """A long-lived engine receiver, by default in the server namespace.

    `kind` is "sink" (XDP: counts in the kernel, the receiver is off the measured
    path) or "recv" (a user-space UDP socket; slower, for comparison). `at` is the
    testbed port the flow is addressed to (default the server's); a flow to the
    firewall's own address (seed 003's INPUT chain) is received by a socket there,
    as an XDP sink on that port would count frames before the firewall's rules.
    `returns` True: a sink on the client (`at`) counting the packets the server's
    sink reflects, *from* `port`: their latency is the round trip. `reflect_via`
    is how the server's sink sends packets back when asked to (`reflect()`):
    "tx" (XDP_TX) or "redirect" (to its own interface, which veth needs).
    `xdp_mode` "generic" runs the sink in the stack's receive path instead of the
    driver's.
    """

    def __init__(self, tb: Testbed, kind: str = "sink", late_us: int = 1_000_000,
                 port: int = ENGINE_PORT, version: int = 4, at=None, ports: int = 1,
                 returns: bool = False, reflect_via: str = "tx", xdp_mode: str = "native"):
        if kind not in ("sink", "recv"):
            raise FwbenchError(f"engine receiver {kind!r}: expected sink or recv")
        srv = at if at is not None else tb.topo.server
        if kind == "sink" and srv.host == "fw":
            raise FwbenchError("engine sink: an XDP sink on the firewall would count "
                               "before its rules; receive there with recv")
        argv = [str(binary()), kind, "--port", str(port), "--late-us", str(late_us)]
        if kind == "sink":
            argv += ["--ifname", srv.ifname, "--ports", str(ports)]
            if xdp_mode != "native":
                argv += ["--xdp-mode", xdp_mode]
            if returns:
                argv += ["--match-source"]
            elif reflect_via != "tx":
                argv += ["--reflect-via", reflect_via]
        elif ports != 1:
            raise FwbenchError("engine recv: one port only; count several with the sink")
        else:
            argv += ["--bind", srv.ip4 if version == 4 else srv.ip6,
                     "--cpu", str(tb.topo.settings.server_cpu)]
        self.kind = kind
        self.host = srv.host
        self._tb = tb
        self._reflect_every = 0
        self._p = tb.spawn(srv.host, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, bufsize=1)
        self.info = self._reply(10.0)
        if not self.info.get("ready"):
            raise FwbenchError(f"engine {kind} did not start: {self.info}")

    def _reply(self, timeout_s: float) -> dict:
        ready, _, _ = select.select([self._p.stdout], [], [], timeout_s)
        line = self._p.stdout.readline() if ready else ""
        if not line:
            self._p.poll()
            err = ""
            if self._p.returncode is not None:
                err = self._p.stderr.read()
            raise FwbenchError(f"engine {self.kind}: {_one_line(err) if err else 'no answer'}")
        return _parse(line, f"engine {self.kind}")

    def _ask(self, command: str, timeout_s: float = 5.0) -> dict:
        try:
            self._p.stdin.write(command + "\n")
            self._p.stdin.flush()
        except BrokenPipeError:
            raise FwbenchError(f"engine {self.kind} has stopped: "
                               f"{_one_line(self._p.stderr.read())}") from None
        return self._reply(timeout_s)

    def arm(self, cookie: int) -> None:
        got = self._ask(f"arm {cookie}")
        if got.get("armed") != cookie:
            raise FwbenchError(f"engine {self.kind} did not arm: {got}")

    def read(self) -> dict:
        return self._ask("read")

    def reflect(self, every: int) -> None:
        """From the next arm, send every packet whose sequence number is a multiple
        of `every` (a power of two; 0: none) back to its source (the sink only)."""
        if every == self._reflect_every:
            return
        got = self._ask(f"reflect {every}")
        if "error" in got:
            raise FwbenchError(f"engine {self.kind}: {got['error']}")
        self._reflect_every = every

    def series(self, base_ns: int, slot_ns: int) -> None:
        """Keep a time series from the next arm on (the sink only): per slot of
        `slot_ns` of scheduled send time from `base_ns` (CLOCK_MONOTONIC, as
        time.monotonic_ns() reads it), for streams 0 and 1. 0, 0: none."""
        got = self._ask(f"series {base_ns} {slot_ns}")
        if "error" in got:
            raise FwbenchError(f"engine {self.kind}: {got['error']}")

    def read_series(self) -> dict:
        """The armed trial's series: base_ns, slot_ns and per stream its span
        (received, first/last scheduled time received, longest gap between
        arrivals) and its slots from `first_slot` on (packets, latency sum and
        maximum), engine/common.h's fwb_span and fwb_series_slot."""
        got = self._ask("read-series", timeout_s=30.0)
        if "error" in got:
            raise FwbenchError(f"engine {self.kind}: {got['error']}")
        return got

    def close(self) -> None:
        quit_process(self._tb, self._p)


def quit_process(tb: Testbed, p: subprocess.Popen) -> None:
    """End a long-lived engine process driven over its stdin (a receiver, the accept
    server): `quit`, a few seconds to go, and the testbed forgets it either way."""
    if p.poll() is None:
        try:
            p.stdin.write("quit\n")
            p.stdin.flush()
            p.wait(3)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            pass
    tb.forget(p)


def send(tb: Testbed, *, frame_size: int, rate_pps: float, duration_s: float,
         cookie: int, **kw) -> dict:
    """Run the sender in the client namespace for one trial and return its report.

    By default it sends seed 000's test flow from the client to the server;
    `src`/`dst`/`dport` send another (the rule set's measured flow, IPv6, or at the
    firewall itself). `count` sends that many packets instead of
    running for `duration_s` (give 0); `payload_text` follows the stamp in every
    packet; `seq_start` is every stream's first sequence number (for tests of
    the receivers' duplicate and reorder window); `via` "xdp" sends with XDP live
    frames instead of an AF_PACKET socket (the testbed must have GRO on the
    firewall's ingress: TestbedSettings.ingress_gro); `stream` numbers the
    threads' streams from there."""
    argv = _send_argv(tb, frame_size=frame_size, rate_pps=rate_pps,
                      duration_s=duration_s, cookie=cookie, **kw)
    cp = tb.executor.run("client", argv, check=False, timeout=duration_s + 30)
    if cp.returncode == EXIT_UNSUPPORTED:
        raise KernelRefuses(f"engine sender: {_one_line(cp.stderr)}")
    if cp.returncode != 0:
        raise FwbenchError(f"engine sender: {_one_line(cp.stderr)}")
    return _parse(cp.stdout, "engine sender")


class Sender:
    """A sender in the client namespace that runs until `stop()` (or for at most
    `duration_s`): for trials whose end is not known when they start, such as a
    rule-set update under traffic. Arguments as send()'s; `stop()` returns its
    report (`stopped` true when the signal ended it, its rate then over the time
    it ran)."""

    def __init__(self, tb: Testbed, *, frame_size: int, rate_pps: float,
                 duration_s: float, cookie: int, **kw):
        self._tb = tb
        argv = _send_argv(tb, frame_size=frame_size, rate_pps=rate_pps,
                          duration_s=duration_s, cookie=cookie, **kw)
        self._p = tb.spawn("client", argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)

    def stop(self, timeout_s: float = 10.0) -> dict:
        if self._p.poll() is None:
            self._p.send_signal(signal.SIGTERM)
        try:
            out, err = self._p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._tb.forget(self._p)
            raise FwbenchError("engine sender: did not stop within "
                               f"{timeout_s:g} s of SIGTERM") from None
        self._tb.forget(self._p)
        if self._p.returncode != 0:
            raise FwbenchError(f"engine sender: {_one_line(err)}")
        return _parse(out, "engine sender")


def _send_argv(tb: Testbed, *, frame_size: int, rate_pps: float, duration_s: float,
               cookie: int, threads: int = 1, cpus: list[int] | None = None,
               sport_count: int = 1, src_count: int = 1, src: str | None = None,
               dst: str | None = None, dport: int = ENGINE_PORT, count: int | None = None,
               payload_text: str | None = None, seq_start: int = 0, via: str = "packet",
               stream: int = 0, spin_us: int | None = None) -> list[str]:
    t = tb.topo
    cpus = cpus if cpus is not None else [t.settings.sender_cpu]
    argv = [str(binary()), "send", "--ifname", t.client.ifname, "--src-mac", t.client.mac,
            "--dst-mac", t.fw_client_side.mac, "--src", src or t.client.ip4,
            "--dst", dst or t.server.ip4, "--dport", str(dport),
            "--frame-size", str(frame_size),
            "--mtu", str(t.settings.mtu), "--rate", f"{rate_pps:.3f}",
            "--duration", f"{duration_s:g}", "--cookie", str(cookie),
            "--threads", str(threads), "--cpus", ",".join(map(str, cpus)),
            "--sport-count", str(sport_count), "--src-count", str(src_count)]
    if count:
        argv += ["--count", str(count)]
    if payload_text:
        argv += ["--payload-text", payload_text]
    if seq_start:
        argv += ["--seq-start", str(seq_start)]
    if via != "packet":
        argv += ["--via", via]
    if stream:
        argv += ["--stream", str(stream)]
    if spin_us is not None:
        argv += ["--spin-us", str(spin_us)]
    return argv
