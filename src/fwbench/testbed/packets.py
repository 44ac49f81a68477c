"""Crafted packets through the testbed's firewall, one by one: was each forwarded,
and how did it look when it came out (addresses and ports after NAT)?

The instrument of `fwbench check` (verdict equivalence against the reference
evaluator) and of verification probes. A packet (model.Packet) with iif "client" is
written as a raw Ethernet frame from the client's interface to the firewall's
client-side MAC and looked for in the server namespace; iif "server" the other way.
Each frame's payload is a marker (magic, a per-exchange nonce, the packet's index),
so a packet is recognised however NAT rewrote its header.

Parts:
- `prepare(tb)` / `restore(tb)`: policy routing in the firewall namespace, so any
  destination in the benchmarking ranges is forwarded out of the other side.
- `exchange(tb, packets)`: send, capture, and return one `Observed` or None per
  packet.
- `build_frame` / `parse_frame`: the pure frame codec.
- the agent (testbed.packet_agent), the small process run in each end host's
  namespace; JSON lines on stdin/stdout.
"""
from __future__ import annotations

import ipaddress
import json
import secrets
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fwbench import addresses
from fwbench.errors import FwbenchError, MeasurementInvalid
from fwbench.ruleset.model import (PORTLESS, PROTO_NUMBERS, TESTBED_IPSEC, TESTBED_TCP_OPTIONS,
                                   Packet)

if TYPE_CHECKING:
    from fwbench.testbed.base import IfStats, Testbed

MAGIC = b"FWBp"
MARKER_LEN = len(MAGIC) + 4 + 4   # magic, nonce, index
SINK_TABLE = "fwb_packets_sink"
ALLOWED = (addresses.BENCH[4], addresses.BENCH[6])

_ETHERTYPE = {4: 0x0800, 6: 0x86DD}
_PROTO_NAME = {v: k for k, v in PROTO_NUMBERS.items()}
_ECHO_REQUEST = {"icmp": 8, "icmpv6": 128}
# The portless protocols' headers before the marker: ESP's SPI and sequence
# number; AH's next header (59, none), length (3 words - 2: no ICV), reserved,
# SPI, sequence; GRE version 0 without options and an ethertype from the local
# experimental range, so nothing takes the payload for a packet to decapsulate;
# an IGMPv2 membership report (type 0x16, group 0, checksum left 0).
# A forwarding firewall checks none of them (no SA, no tunnel, not its group).
_PORTLESS_HEAD = {"esp": lambda spi, seq: struct.pack("!II", spi, seq),
                  "ah": lambda spi, seq: struct.pack("!BBHII", 59, 1, 0, spi, seq),
                  "gre": lambda spi, seq: struct.pack("!HH", 0, 0x88B5),
                  "igmp": lambda spi, seq: struct.pack("!BBHI", 0x16, 0, 0, 0)}
_PORTLESS_LEN = {"esp": 8, "ah": 12, "gre": 4, "igmp": 8}


@dataclass(frozen=True)
class Observed:
    """One crafted packet as it left the firewall."""
    # The header as captured: addresses, ports and ICMP type after NAT. `iif` is
    # the side the packet was sent in on (as in the sent Packet), so it compares
    # directly with an evaluator's translated Packet; mark and ct_state are the
    # Packet defaults, not observations.
    packet: Packet
    oif: str              # the side it came out of: "client" or "server"
    checksum_ok: bool     # IPv4 header and L4 checksums valid as captured


# --- the frame codec (pure) -----------------------------------------------------------

def _sum16(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def _csum(data: bytes) -> int:
    return ~_sum16(data) & 0xFFFF


def _pseudo(version: int, src: bytes, dst: bytes, proto: int, length: int) -> bytes:
    if version == 4:
        return src + dst + struct.pack("!BBH", 0, proto, length)
    return src + dst + struct.pack("!IxxxB", length, proto)


def _address(text: str, version: int, what: str, index: int) -> bytes:
    try:
        a = ipaddress.ip_address(text)
    except ValueError:
        raise FwbenchError(f"packets: packet {index}: {what} {text!r} is not an address") from None
    if a.version != version:
        raise FwbenchError(f"packets: packet {index}: {what} {text} is not IPv{version}")
    # fwbench sends only to and from the benchmarking ranges (DESIGN.md).
    if not any(a in n for n in ALLOWED):
        raise FwbenchError(f"packets: packet {index}: {what} {text} is outside "
                           "198.18.0.0/15 and 2001:2::/48")
    return a.packed


def build_frame(p: Packet, index: int, nonce: bytes, src_mac: str, dst_mac: str) -> bytes:
    """The Ethernet frame that carries packet `p`: TCP with `p.tcp_flags` and the
    options TESTBED_TCP_OPTIONS, UDP,
    ICMP/ICMPv6 of `p.icmp_type` (an echo request when None) and `p.icmp_code`, or
    an ESP, AH or GRE header (_PORTLESS_HEAD); TTL (hop limit) `p.ttl`, checksums
    computed, and as the payload the marker (MAGIC, nonce, index) followed by
    `p.pad` zero bytes."""
    if p.proto not in PROTO_NUMBERS:
        raise FwbenchError(f"packets: packet {index}: protocol {p.proto!r} cannot be sent")
    if (p.proto, p.version) in (("icmp", 6), ("icmpv6", 4), ("ah", 6)):
        raise FwbenchError(f"packets: packet {index}: {p.proto} in an IPv{p.version} packet")
    if p.mark or p.ct_state != "new":
        # The mark does not cross namespaces, and conntrack state comes from earlier
        # traffic, not from the packet itself.
        raise FwbenchError(f"packets: packet {index}: a mark or ct_state "
                           f"{p.ct_state!r} cannot be crafted from outside the firewall")
    src = _address(p.saddr, p.version, "saddr", index)
    dst = _address(p.daddr, p.version, "daddr", index)
    proto = PROTO_NUMBERS[p.proto]
    if not (0 <= p.tcp_flags <= 0xFF and 0 <= p.icmp_code <= 255 and 0 <= p.ttl <= 255
            and 0 <= p.pad <= 1400):
        raise FwbenchError(f"packets: packet {index}: TCP flags, ICMP code, TTL or "
                           f"padding out of range")
    payload = MAGIC + nonce + struct.pack("!I", index) + bytes(p.pad)
    if p.proto in ("tcp", "udp"):
        if p.sport is None or p.dport is None:
            raise FwbenchError(f"packets: packet {index}: {p.proto} needs sport and dport")
        if not (0 <= p.sport <= 65535 and 0 <= p.dport <= 65535):
            raise FwbenchError(f"packets: packet {index}: port out of range")
    if p.proto == "tcp":
        seq = (int.from_bytes(nonce, "big") + index * 0x9E3779B1) & 0xFFFFFFFF
        # With the options the reference assumes of every TCP packet (a SYN's).
        words = 5 + len(TESTBED_TCP_OPTIONS) // 4
        l4 = struct.pack("!HHIIBBHHH", p.sport, p.dport, seq, 0, words << 4, p.tcp_flags,
                         65535, 0, 0) + TESTBED_TCP_OPTIONS
    elif p.proto == "udp":
        l4 = struct.pack("!HHHH", p.sport, p.dport, 8 + len(payload), 0)
    elif p.proto in PORTLESS:
        # The same SPI and sequence in every packet: the reference knows them.
        l4 = _PORTLESS_HEAD[p.proto](TESTBED_IPSEC["esp spi"][0],
                                     TESTBED_IPSEC["esp sequence"][0])
    else:
        t = _ECHO_REQUEST[p.proto] if p.icmp_type is None else p.icmp_type
        if not 0 <= t <= 255:
            raise FwbenchError(f"packets: packet {index}: ICMP type {t} out of range")
        # The echo identifier differs per packet and per exchange: each echo is a
        # connection of its own in conntrack.
        ident = (int.from_bytes(nonce[:2], "big") ^ index) & 0xFFFF
        l4 = struct.pack("!BBHHH", t, p.icmp_code, 0, ident, index & 0xFFFF)
    seg = l4 + payload
    if p.proto not in PORTLESS:        # ESP, AH and GRE carry no checksum of their own
        csum_at = {"tcp": 16, "udp": 6}.get(p.proto, 2)
        if p.proto == "icmp":
            c = _csum(seg)                  # ICMPv4 has no pseudo-header
        else:
            c = _csum(_pseudo(p.version, src, dst, proto, len(seg)) + seg)
            if p.proto == "udp" and c == 0:
                c = 0xFFFF                  # 0 would mean "no checksum"
        seg = seg[:csum_at] + struct.pack("!H", c) + seg[csum_at + 2:]
    if p.version == 4:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), index & 0xFFFF, 0,
                         p.ttl, proto, 0, src, dst)
        ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    else:
        ip = struct.pack("!IHBB16s16s", 6 << 28, len(seg), proto, p.ttl, src, dst)
    eth = _mac(dst_mac) + _mac(src_mac) + struct.pack("!H", _ETHERTYPE[p.version])
    return eth + ip + seg


def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


@dataclass(frozen=True)
class Parsed:
    """What a captured frame carried: the marker's index and the header."""
    index: int
    version: int
    saddr: str
    daddr: str
    proto: str
    sport: int | None
    dport: int | None
    icmp_type: int | None
    checksum_ok: bool


def parse_frame(frame: bytes, nonce: bytes) -> Parsed | None:
    """The packet in `frame` if it is one of ours: IPv4/IPv6 carrying TCP, UDP,
    ICMP, ESP, AH or GRE whose payload starts with this exchange's marker. The
    marker must sit exactly at the start of the L4 payload, so an ICMP error
    quoting one of our packets is not mistaken for the packet itself."""
    if len(frame) < 14:
        return None
    ethertype = struct.unpack_from("!H", frame, 12)[0]
    ip = frame[14:]
    if ethertype == 0x0800 and len(ip) >= 20 and ip[0] >> 4 == 4:
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack_from("!H", ip, 2)[0]
        if ihl < 20 or total < ihl or len(ip) < total:
            return None
        version, proto, src, dst = 4, ip[9], ip[12:16], ip[16:20]
        ip_ok = _sum16(ip[:ihl]) == 0xFFFF
        seg = ip[ihl:total]
    elif ethertype == 0x86DD and len(ip) >= 40 and ip[0] >> 4 == 6:
        plen = struct.unpack_from("!H", ip, 4)[0]
        if len(ip) < 40 + plen:
            return None
        # No extension headers: we send none, and NAT adds none.
        version, proto, src, dst = 6, ip[6], ip[8:24], ip[24:40]
        ip_ok = True
        seg = ip[40:40 + plen]
    else:
        return None
    name = _PROTO_NAME.get(proto)
    if name is None or (name, version) in (("icmp", 6), ("icmpv6", 4)):
        return None
    if name == "tcp":
        if len(seg) < 20:
            return None
        off = (seg[12] >> 4) * 4
    else:
        off = _PORTLESS_LEN.get(name, 8)
    marker = seg[off:off + MARKER_LEN]
    if len(marker) != MARKER_LEN or marker[:8] != MAGIC + nonce:
        return None
    index = struct.unpack("!I", marker[8:])[0]
    if name in PORTLESS:
        l4_ok = True
    elif name == "icmp":
        l4_ok = _sum16(seg) == 0xFFFF
    elif name == "udp" and version == 4 and seg[6:8] == b"\0\0":
        l4_ok = True
    else:
        l4_ok = _sum16(_pseudo(version, src, dst, proto, len(seg)) + seg) == 0xFFFF
    ports = struct.unpack_from("!HH", seg) if name in ("tcp", "udp") else (None, None)
    return Parsed(index, version, str(ipaddress.ip_address(src)),
                  str(ipaddress.ip_address(dst)), name, ports[0], ports[1],
                  seg[0] if name in ("icmp", "icmpv6") else None, ip_ok and l4_ok)


# --- the firewall namespace's routing ---------------------------------------------------

def prepare(tb: "Testbed") -> None:
    """Make the firewall forward whatever arrives from one side out of the other,
    whatever its destination or (spoofed) source: policy routing by input interface,
    a default route per side to the far end host (whose neighbour entry is static),
    no reverse-path filter, and local addresses accepted as sources; and no host
    sends anything of its own meanwhile (Testbed.hush), so rule counters count
    the exchange alone. Only the firewall namespace's routing and settings change;
    `restore` undoes it all. Idempotent."""
    t = tb.topo
    sides = {"client": (t.fw_client_side, t.fw_server_side, t.server),
             "server": (t.fw_server_side, t.fw_client_side, t.client)}
    for side, (iif, oif, far) in sides.items():
        table = str(tb.probe_tables[side])
        for fam, via in (("-4", far.ip4), ("-6", far.ip6)):
            tb.ip("fw", fam, "route", "replace", "default", "via", via, "dev", oif.ifname,
                  "table", table)
            tb.run("fw", ["ip", fam, "rule", "del", "pref", table, "table", table],
                   check=False)
            tb.ip("fw", fam, "rule", "add", "pref", table, "iif", iif.ifname, "table", table)
    tb.sysctl("fw", *_sysctls(tb, rp_filter=0, accept_local=1))
    tb.hush(True)


def restore(tb: "Testbed") -> None:
    """Undo `prepare`: the rules and tables go, the sysctls return to a new
    namespace's defaults (rp_filter 0, accept_local 0), which the testbed keeps,
    and the hosts may talk again."""
    for side in ("client", "server"):
        table = str(tb.probe_tables[side])
        for fam in ("-4", "-6"):
            tb.run("fw", ["ip", fam, "rule", "del", "pref", table, "table", table],
                   check=False)
            tb.run("fw", ["ip", fam, "route", "flush", "table", table], check=False)
    tb.sysctl("fw", *_sysctls(tb, rp_filter=0, accept_local=0))
    tb.hush(False)


def _sysctls(tb: "Testbed", rp_filter: int, accept_local: int) -> list[str]:
    # rp_filter takes the larger of `all` and the device's value, accept_local
    # either's: set both.
    names = ["all", tb.topo.fw_client_side.ifname, tb.topo.fw_server_side.ifname]
    return [f"net.ipv4.conf.{n}.{k}={v}" for n in names
            for k, v in (("rp_filter", rp_filter), ("accept_local", accept_local))]


# --- the exchange -------------------------------------------------------------------------

def exchange(tb: "Testbed", packets: list[Packet], timeout_s: float = 10.0,
             quiet_s: float = 0.3) -> list[Observed | None]:
    """Send every packet into the firewall from its `iif` side and return, per
    packet, how it came out, or None when it did not (dropped, or delivered to the
    firewall itself).

    Both end hosts capture with a packet socket opened before anything is sent, and
    their kernels drop everything arriving meanwhile (an nft netdev ingress chain
    in the end hosts' namespaces, after the capture tap, removed afterwards), so no
    RST, ICMP error or echo reply travels back through the firewall. The two
    directions are sent at once, each in list order; order between them is not
    kept. The sender is paced by its socket's send buffer, which a frame holds
    until the firewall has dealt with it; a frame the firewall's input queue
    refuses never entered it and is sent again. Capture ends when everything
    arrived, or when neither the captures nor the firewall's IP input counters
    have moved for `quiet_s` (SETTLE_S once those counters show every packet
    taken in: the rest are dropped or the firewall's own).

    Packets must be craftable: tcp/udp with both ports, mark 0, ct_state "new",
    addresses in the benchmarking ranges. An ICMP packet without `icmp_type` is
    sent as an echo request and observed with its type. Packets sharing a 5-tuple
    share a conntrack entry (and its NAT binding); one matching another's reverse
    makes it `established`. Observed addresses are in canonical text.

    The firewall's own counters tell a packet it dropped from one the instrument
    lost: every frame the firewall hands to an end host counts in its port's
    tx_packets, so the capture waits until it has seen as many frames (any frame,
    marked or not) as the firewall's ports count. Raises InstrumentLost (a
    MeasurementInvalid, holding what was seen) when a packet is missing and the
    instrument lost frames (the firewall's input queue refused one, a capture
    socket overflowed, the firewall could not hand a frame to an end host, or
    frames the firewall counted never reached the capture), since a None would
    then be a lie. `prepare(tb)` first for
    destinations beyond the two end hosts' addresses; conntrack keeps what earlier
    exchanges left (fwbench.backends.kernel.flush_conntrack)."""
    if not packets:
        return []
    t = tb.topo
    ends = {"client": (t.client, t.fw_client_side), "server": (t.server, t.fw_server_side)}
    nonce = secrets.token_bytes(4)
    frames: dict[str, list[str]] = {"client": [], "server": []}
    for i, p in enumerate(packets):
        if p.iif not in ends:
            raise FwbenchError(f"packets: packet {i}: iif {p.iif!r} is not client or server")
        host, gw = ends[p.iif]
        frames[p.iif].append(build_frame(p, i, nonce, host.mac, gw.mac).hex())
    start = time.monotonic()
    agents: dict[str, _Agent] = {}
    sinks: list[str] = []
    try:
        for role, (host, _) in ends.items():
            _refuse_xdp(tb, host.host, host.ifname)
            agents[role] = _Agent(tb, role, host.ifname, MAGIC + nonce)
        for a in agents.values():
            a.read()                                   # ready: the socket is bound
        for role, (host, _) in ends.items():
            _sink(tb, role, host.ifname)
            sinks.append(role)
        handed_before = _handed(tb)
        start_in = tb.taken_in()
        taken_in = None if start_in is None else start_in + len(packets)
        for role, a in agents.items():
            a.write({"cmd": "send", "frames": frames[role],
                     "limit_s": max(0.5, timeout_s - (time.monotonic() - start))})
        unsent = sum(a.read()["unsent"] for a in agents.values())
        if unsent:
            raise MeasurementInvalid(f"packets: {unsent} of {len(packets)} packets were not "
                                     f"taken in by the firewall within {timeout_s:g} s")
        _wait_quiet(tb, agents, len(packets), start + timeout_s, quiet_s, taken_in,
                    handed_before)
        got = {role: a.ask({"cmd": "collect"}) for role, a in agents.items()}
        handed = _handed(tb)
        dropped = sum(handed[r].tx_dropped - handed_before[r].tx_dropped for r in handed)
        # Frames the firewall's port took from an end host but its input queue
        # refused (the per-CPU backlog, shared with everything else on the machine,
        # was full): they never met a rule. veth counts them as received and
        # dropped, and the sender is not told.
        refused = sum(handed[r].rx_dropped - handed_before[r].rx_dropped for r in handed)
        socket_drops = sum(g["socket_drops"] for g in got.values())
        # Frames the firewall counted out of a port that its end host's capture
        # neither saw nor counted as dropped: lost on the way (still in flight when
        # the wait ended, on a machine too busy to deliver them).
        unseen = sum(max(0, handed[r].tx_packets - handed_before[r].tx_packets
                         - got[r]["all"] - got[r]["socket_drops"]) for r in handed)
    finally:
        for a in agents.values():   # both told first: they end side by side
            a.quit()
        for a in agents.values():
            a.close()
        for role in sinks:
            tb.run(role, ["nft", "delete", "table", "netdev", SINK_TABLE], check=False)
    out: list[Observed | None] = [None] * len(packets)
    for role, g in got.items():
        for h in g["frames"]:
            f = parse_frame(bytes.fromhex(h), nonce)
            if f is None or f.index >= len(packets) or out[f.index] is not None:
                continue
            sent = packets[f.index]
            # An echo reply to a request sent is the firewall's answer too, on
            # whichever side its route for the (spoofed) source points.
            answer = (sent.proto, sent.icmp_type, f.icmp_type) in _ECHO_ANSWERS
            if role == sent.iif or answer:
                # Back on the side it came from: the firewall's own answer to a
                # packet addressed to it (an echo reply carries the request's
                # payload, marker and all), never a forwarded packet, which the
                # routing of `prepare` sends out of the other side.
                continue
            pkt = Packet(f.version, sent.iif, f.saddr, f.daddr, f.proto, f.sport, f.dport,
                         f.icmp_type)
            out[f.index] = Observed(pkt, role, f.checksum_ok)
    if (refused or dropped or socket_drops or unseen) and None in out:
        raise InstrumentLost(
            f"packets: the instrument lost packets ({refused} refused by the firewall's "
            f"full input queue, {dropped} between firewall and end host, {socket_drops} "
            f"in the capture sockets, {unseen} counted out of the firewall but never "
            f"captured); repeat the exchange",
            out, refused + dropped + socket_drops + unseen)
    return out


# (protocol, type sent, type seen) of an echo request answered with an echo reply.
_ECHO_ANSWERS = {("icmp", 8, 0), ("icmp", None, 0), ("icmpv6", 128, 129),
                 ("icmpv6", None, 129)}


class InstrumentLost(MeasurementInvalid):
    """The exchange lost frames that were not the firewall's doing, and some packet
    is missing: `seen` is what was observed (a None there may be the firewall's
    verdict or the loss), `lost` how many frames the counters show lost; `sent`,
    for a caller sending in rounds, the packets sent when it happened."""

    def __init__(self, message: str, seen: list[Observed | None], lost: int):
        super().__init__(message)
        self.seen, self.lost = seen, lost
        self.sent = len(seen)


def _sink(tb: "Testbed", role: str, ifname: str) -> None:
    # nft's netdev ingress hook runs after the packet taps, so the capture still
    # sees every frame (this kernel has no cls_matchall or act_gact for a tc drop).
    tb.exec(role, ["nft", "-f", "-"], input=(
        f"table netdev {SINK_TABLE} {{\n"
        f"  chain ingress {{ type filter hook ingress device \"{ifname}\" priority -500; "
        "policy drop; }\n}\n"))


def _refuse_xdp(tb: "Testbed", role: str, ifname: str) -> None:
    # An XDP program runs before the packet taps: the capture would see nothing.
    info = json.loads(tb.ip(role, "-j", "link", "show", "dev", ifname))[0]
    if "xdp" in info:
        raise FwbenchError(f"packets: an XDP program on {ifname} ({role}) hides packets "
                           "from the capture; detach it first")


def _handed(tb: "Testbed") -> dict[str, "IfStats"]:
    """The firewall's counters of its ports facing each end host: tx_packets, the
    frames it handed to that host (veth counts a frame once the peer's input queue
    took it); tx_dropped, those it could not (that queue was full); rx_dropped,
    frames from that host its own input queue refused."""
    t = tb.topo
    ports = {"client": t.fw_client_side, "server": t.fw_server_side}
    if t.fw_client_side.host != t.fw_server_side.host:
        return {role: tb.stats(p) for role, p in ports.items()}
    # Both in one listing: one command where each port's own costs one apiece.
    from fwbench.testbed.base import IfStats
    now = time.monotonic()
    links = {ln["ifname"]: ln["stats64"] for ln in
             json.loads(tb.ip(t.fw_client_side.host, "-s", "-j", "link", "show"))}
    out = {}
    for role, p in ports.items():
        s = links[p.ifname]
        out[role] = IfStats(s["rx"]["packets"], s["tx"]["packets"], s["rx"]["dropped"],
                            s["tx"]["dropped"], now)
    return out


def _settled(agents: dict[str, "_Agent"], handed: dict[str, "IfStats"],
             before: dict[str, "IfStats"]) -> bool:
    """Whether each end host's capture has seen (or counted as dropped) every frame
    the firewall's counters `handed` show handed to it since `before`."""
    for role, a in agents.items():
        c = a.ask({"cmd": "count"})
        if c["all"] + c["socket_drops"] < handed[role].tx_packets - before[role].tx_packets:
            return False
    return True


# Once the firewall's IP layer has taken in every packet sent, this long without a
# capture or the firewall moving ends the wait: the last packet is then at most one
# rule-set traversal (2 ms at 100,000 nft rules) from its capture.
SETTLE_S = 0.05


# After the quiet wait, at most this long more for frames the firewall's counters
# show handed to an end host but not yet captured (a busy machine delays the end
# host's input queue); what is still missing then is counted lost.
IN_FLIGHT_S = 2.0


def _wait_quiet(tb: "Testbed", agents: dict[str, "_Agent"], expected: int,
                deadline: float, quiet_s: float, taken_in: int | None = None,
                handed_before: dict[str, "IfStats"] | None = None) -> None:
    """Until every packet is captured, or nothing has moved for `quiet_s` (SETTLE_S
    once the firewall's IP input counter has reached `taken_in`) and the captures
    have seen every frame the firewall's ports counted out since `handed_before`
    (for at most IN_FLIGHT_S more)."""
    last, since = None, time.monotonic()
    in_flight_until = None
    while True:
        captured = [a.ask({"cmd": "count"})["captured"] for a in agents.values()]
        if sum(captured) >= expected:
            return
        fw_in = tb.taken_in()
        now_state = (*captured, fw_in)
        now = time.monotonic()
        if now_state != last:
            last, since = now_state, now
        elif now - since >= (SETTLE_S if taken_in is not None and fw_in >= taken_in
                             else quiet_s):
            if handed_before is None or _settled(agents, _handed(tb), handed_before):
                return
            in_flight_until = in_flight_until or min(deadline, now + IN_FLIGHT_S)
            if now >= in_flight_until:
                return          # the rest is counted lost (exchange)
        if now >= deadline:
            raise MeasurementInvalid("packets: packets were still arriving when the "
                                     "exchange's time ran out; give it a longer timeout")
        time.sleep(0.02)


class _Agent:
    """The agent process in one end host's namespace, spoken to in JSON lines."""

    def __init__(self, tb: "Testbed", role: str, ifname: str, marker: bytes):
        self.tb, self.role = tb, role
        self._quit = False
        self.p = tb.spawn(role, [sys.executable, "-m", "fwbench.testbed.packet_agent",
                                 ifname, marker.hex()],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)

    def write(self, msg: dict) -> None:
        try:
            self.p.stdin.write(json.dumps(msg) + "\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            self._died()

    def read(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            self._died()
        return json.loads(line)

    def ask(self, msg: dict) -> dict:
        self.write(msg)
        return self.read()

    def _died(self):
        self.p.wait(5)
        err = [ln for ln in self.p.stderr.read().splitlines() if ln.strip()]
        raise FwbenchError(f"packets: the {self.role} agent exited {self.p.returncode}: "
                           f"{err[-1] if err else 'no message'}")

    def quit(self) -> None:
        """Tell the agent to end, without waiting for it (close waits)."""
        if self.p.poll() is None and not self._quit:
            self._quit = True
            try:
                self.write({"cmd": "quit"})
            except (FwbenchError, OSError):
                pass

    def close(self) -> None:
        self.quit()
        if self.p.poll() is None:
            try:
                self.p.wait(2)
            except subprocess.TimeoutExpired:
                pass
        self.tb.forget(self.p)
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            try:
                f.close()
            except OSError:
                pass
