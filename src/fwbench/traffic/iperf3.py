"""The maximum packet rate through the firewall, with iperf3 as seed 000 used it
(`iperf3 -u -b 0 -P 4 -l <payload>`): the sender at full throttle.

The rate is read from kernel interface counters, not from iperf3's own report:
packets that reached the server's interface per second over a window inside the
send period (so start-up and the tail are excluded), and what the client sent in
the same window. iperf3's own figures are kept beside them for comparison; its
loss percentage miscounts reordered and in-flight packets.
"""
from __future__ import annotations

import json
import math
import subprocess
import time

from fwbench import proc
from fwbench.errors import FwbenchError, MeasurementInvalid
from fwbench.frames import ipv4_payload
from fwbench.testbed.base import Testbed

PORT = 5201
_START_LIMIT_S = 3.0   # time allowed for the control connection and the first packets
_WARMUP_S = 0.2        # discard the first packets of the flow
_TAIL_S = 0.3          # keep sending a little past the window


class Iperf3Rate:
    name = "iperf3"

    def __init__(self, streams: int = 4):
        self.streams = streams
        self._server: subprocess.Popen | None = None

    def versions(self) -> dict[str, str | None]:
        return {"iperf3": proc.version_line(["iperf3", "-v"])}

    def start(self, tb: Testbed) -> None:
        """Start the iperf3 server in the server namespace (once per testbed)."""
        if self._server and self._server.poll() is None:
            return
        srv = tb.topo.server
        self._server = tb.spawn("server", ["iperf3", "-s", "-B", srv.ip4, "-p", str(PORT)],
                                cpu=tb.topo.settings.server_cpu,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            ss = tb.run("server", ["ss", "-Hltn", f"sport = :{PORT}"], check=False).stdout
            if ss.strip():
                return
            if self._server.poll() is not None:
                break
            time.sleep(0.05)
        raise FwbenchError("iperf3 server did not start in the server namespace")

    def restart(self, tb: Testbed) -> None:
        if self._server:
            tb.forget(self._server)
            self._server = None
        self.start(tb)

    def measure(self, tb: Testbed, frame_size: int, duration_s: float) -> dict:
        topo = tb.topo
        # iperf3's -t clock starts when data flows, as does our window; iperf3 3.12
        # reads -t as a whole number of seconds.
        send_s = math.ceil(_WARMUP_S + duration_s + _TAIL_S)
        argv = ["iperf3", "-c", topo.server.ip4, "-B", topo.client.ip4, "-p", str(PORT),
                "-u", "-b", "0", "-l", str(ipv4_payload(frame_size)), "-P", str(self.streams),
                "-t", str(send_s), "--udp-counters-64bit", "-J"]
        client = tb.spawn("client", argv, cpu=topo.settings.sender_cpu,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            window = self._window(tb, client, duration_s)
            out, err = client.communicate(timeout=_START_LIMIT_S + send_s + 10)
        finally:
            tb.forget(client)
        report = _iperf3_report(out, err, client.returncode)
        if window is None:
            raise MeasurementInvalid(f"iperf3 sent nothing within {_START_LIMIT_S:.0f} s"
                                     f"{': ' + report['error'] if report.get('error') else ''}")
        (c0, s0), (c1, s1) = window
        dt = s1.t - s0.t
        tx, rx = c1.tx_packets - c0.tx_packets, s1.rx_packets - s0.rx_packets
        return {
            "rx_pps": rx / dt,
            "tx_pps": tx / dt,
            "window_loss_ratio": (tx - rx) / tx if tx else None,
            "window_s": dt,
            "iperf3_streams": self.streams,
            "udp_payload_bytes": ipv4_payload(frame_size),
            **{k: v for k, v in report.items() if k != "error"},
        }

    def _window(self, tb: Testbed, client: subprocess.Popen, duration_s: float):
        """Wait for the flow to start, skip the warm-up, then read counters at both
        ends of a `duration_s` window. None when nothing was sent in time."""
        topo = tb.topo
        first = tb.stats(topo.client).tx_packets
        deadline = time.monotonic() + _START_LIMIT_S
        while True:
            # Data packets, not the handful of control-connection segments.
            if tb.stats(topo.client).tx_packets - first > 50:
                break
            if time.monotonic() > deadline or client.poll() is not None:
                return None
            time.sleep(0.02)
        time.sleep(_WARMUP_S)
        start = (tb.stats(topo.client), tb.stats(topo.server))
        time.sleep(duration_s)
        end = (tb.stats(topo.client), tb.stats(topo.server))
        if client.poll() is not None:
            raise MeasurementInvalid("iperf3 stopped before the measuring window ended")
        return start, end


def _iperf3_report(out: str, err: str, rc: int | None) -> dict:
    try:
        doc = json.loads(out)
    except (json.JSONDecodeError, TypeError):
        first = (err or out or "").strip().splitlines()
        return {"error": first[0] if first else f"iperf3 exited {rc} with no report"}
    if doc.get("error"):
        return {"error": doc["error"]}
    s = doc.get("end", {}).get("sum", {})
    return {"iperf3_packets": s.get("packets"), "iperf3_lost_percent": s.get("lost_percent"),
            "iperf3_bits_per_second": s.get("bits_per_second"),
            "iperf3_seconds": s.get("seconds")}
