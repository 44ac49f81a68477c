"""One real TCP connection through the firewall, for statecheck's proof of NAT and
connection tracking: `python -m fwbench.testbed.tcpprobe listen ADDR PORT TIMEOUT`
in the server's namespace, `... connect DST PORT TIMEOUT` in the client's.

Each end prints JSON lines on stdout, addresses as the kernel reports them
(getsockname, getpeername): what the socket really saw, after any translation.
- listen: `{"listening": ...}` once bound, then `{"local": ..., "peer": ...,
  "echoed": n}` after echoing the first message, then `{"closed": true}` once
  the peer has closed.
- connect: `{"local": ..., "peer": ..., "echoed": bool}` once the message came
  back, then waits for a line (or end of file) on stdin before closing, so the
  caller can read the connection's state while it is open; `{"closed": true}`.
Either prints `{"error": "..."}` and exits 1 on failure. Import-light: it starts
in every proof.
"""
import json
import socket
import sys

MESSAGE = b"fwbench-statecheck"


def _say(**kw) -> None:
    print(json.dumps(kw), flush=True)


def _addr(pair) -> str:
    return f"{pair[0]}:{pair[1]}"


def listen(addr: str, port: int, timeout: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(1)
    s.settimeout(timeout)
    _say(listening=_addr(s.getsockname()))
    c, _ = s.accept()
    c.settimeout(timeout)
    data = c.recv(len(MESSAGE))
    c.sendall(data)
    _say(local=_addr(c.getsockname()), peer=_addr(c.getpeername()), echoed=len(data))
    while c.recv(4096):   # until the peer closes
        pass
    c.close()
    s.close()
    _say(closed=True)


def connect(dst: str, port: int, timeout: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect((dst, port))
    s.sendall(MESSAGE)
    got = b""
    while len(got) < len(MESSAGE):
        more = s.recv(len(MESSAGE) - len(got))
        if not more:
            break
        got += more
    _say(local=_addr(s.getsockname()), peer=_addr(s.getpeername()), echoed=got == MESSAGE)
    sys.stdin.readline()
    s.close()
    _say(closed=True)


def main() -> None:
    mode, addr, port, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    try:
        {"listen": listen, "connect": connect}[mode](addr, port, timeout)
    except (OSError, KeyError) as e:
        _say(error=f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
        sys.exit(1)


if __name__ == "__main__":
    main()
