"""The packet agent of fwbench.testbed.packets: the small process an exchange starts in
each end host's namespace (`python -m fwbench.testbed.packet_agent IFNAME MARKER_HEX`),
spoken to in JSON lines on stdin/stdout. It sends the frames it is given and captures
what arrives, before the end host's kernel drops it.

A module of its own with the standard library alone: it starts twice for every
round of every exchange, and importing it from packets.py cost the rule-set model's
dataclasses (0.1-0.2 s a start); on a real host it runs from fwbench.zip.
"""
from __future__ import annotations

import errno
import json
import socket
import struct
import sys
import threading
import time

_ETH_P_ALL = 0x0003
_PACKET_OUTGOING = 4
_SOL_PACKET = 263
_PACKET_STATISTICS = 6
_SO_RCVBUFFORCE = 33        # not in Python's socket module
_SNDBUF = 128 << 10


def agent(ifname: str, marker: bytes) -> None:
    """Capture on `ifname` (frames carrying `marker`, and a count of all), send
    what it is told, and answer the exchange's commands on stdin."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
    # Room for every frame of a large exchange even if the reader falls behind;
    # overflow is reported (PACKET_STATISTICS), never silent.
    sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, 64 << 20)
    # A frame holds send-buffer space until the firewall has dealt with it, so
    # the buffer bounds the frames in flight: 256 KiB (the kernel doubles this) is
    # about 300 small frames, well under the firewall's input queue (1,000 by
    # default), which the sender therefore rarely overruns.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SNDBUF)
    # A send blocked on that buffer gives up now and then (EAGAIN), so the
    # exchange's time limit holds however slow the firewall is.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 100_000))
    sock.bind((ifname, _ETH_P_ALL))
    captured: list[bytes] = []
    # Every frame received, marked or not: what the firewall's tx counter of the
    # port facing this host must come to (exchange's test of lost frames).
    received = [0]

    def capture() -> None:
        while True:
            data, addr = sock.recvfrom(65535)
            if addr[2] != _PACKET_OUTGOING:
                if marker in data:
                    captured.append(data)
                received[0] += 1

    dropped = [0]

    def drops() -> int:
        # Reading the statistics resets them: the agent keeps the sum.
        _, n = struct.unpack("II", sock.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8))
        dropped[0] += n
        return dropped[0]

    threading.Thread(target=capture, daemon=True).start()
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg["cmd"]
        if cmd == "send":
            reply = _send(sock, [bytes.fromhex(h) for h in msg["frames"]], msg["limit_s"])
        elif cmd == "count":
            reply = {"captured": len(captured), "all": received[0],
                     "socket_drops": drops()}
        elif cmd == "collect":
            # The count first: a frame is in `captured` before it is counted.
            n = received[0]
            reply = {"all": n, "frames": [f.hex() for f in list(captured)],
                     "socket_drops": drops()}
        elif cmd == "quit":
            return
        else:
            raise SystemExit(f"unknown command {cmd!r}")
        out.write(json.dumps(reply) + "\n")
        out.flush()


def _send(sock: socket.socket, frames: list[bytes], limit_s: float) -> dict:
    """Send each frame once. veth refuses a frame (ENOBUFS) when the firewall's
    input queue is full (the queue is per CPU, shared with whatever else runs on
    the machine); such a frame never reached the firewall, so sending it again
    after a pause is exact."""
    deadline = time.monotonic() + limit_s
    retries = 0
    for i, f in enumerate(frames):
        while True:
            try:
                sock.send(f)
                break
            except OSError as e:
                if e.errno not in (errno.ENOBUFS, errno.EAGAIN):
                    raise
                if time.monotonic() > deadline:
                    return {"sent": i, "unsent": len(frames) - i, "retries": retries}
                retries += 1
                time.sleep(0.0002)
    return {"sent": len(frames), "unsent": 0, "retries": retries}


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage: python -m fwbench.testbed.packet_agent IFNAME MARKER_HEX")
    agent(argv[0], bytes.fromhex(argv[1]))


if __name__ == "__main__":
    main(sys.argv[1:])
