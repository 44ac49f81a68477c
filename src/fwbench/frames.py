"""Frame sizes as RFC 2544 counts them: the Ethernet frame including its 4-byte FCS.

A 64-byte frame is 14 (Ethernet header) + 20 (IPv4) + 8 (UDP or ICMP) + 18 (payload)
+ 4 (FCS); so over IPv4 the UDP or ICMP payload is the frame size minus 46 bytes.
"""
from __future__ import annotations

from fwbench.errors import FwbenchError

MIN_FRAME = 64
L2_OVERHEAD = 14 + 4            # Ethernet header + FCS
IPV4_UDP_OVERHEAD = L2_OVERHEAD + 20 + 8
STAMP = 18                      # the engine's payload: sequence, stream, time
# IPv6's header is 20 bytes longer: its smallest frame that holds the stamp.
MIN_FRAME_V6 = L2_OVERHEAD + 40 + 8 + STAMP


def max_frame(mtu: int) -> int:
    return mtu + L2_OVERHEAD


def min_frame(version: int) -> int:
    return MIN_FRAME if version == 4 else MIN_FRAME_V6


def validate_frame(size: int, mtu: int, version: int = 4) -> None:
    lo = min_frame(version)
    if not lo <= size <= max_frame(mtu):
        ip = "" if version == 4 else " over IPv6"
        raise FwbenchError(f"frame size {size} is outside {lo}..{max_frame(mtu)}{ip} "
                           f"({lo}..MTU+18 bytes, FCS included; MTU is {mtu})")


def ipv4_payload(frame_size: int) -> int:
    """UDP (or ICMP echo) payload bytes that make an IPv4 frame of `frame_size`."""
    return frame_size - IPV4_UDP_OVERHEAD
