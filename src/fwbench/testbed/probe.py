"""Send a few UDP datagrams: `python -m fwbench.testbed.probe DST PORT COUNT PAYLOAD`.

Run inside the client namespace by verification; kept import-light so it starts fast.
"""
import socket
import sys


def main() -> None:
    dst, port, count, payload = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    data = b"fwbench-probe".ljust(payload, b".")[:payload]
    for _ in range(count):
        s.sendto(data, (dst, port))
    s.close()


if __name__ == "__main__":
    main()
