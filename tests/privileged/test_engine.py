"""The engine in a real testbed: what it counts is what the kernel forwarded, its
latency agrees with an independent reference, and its receivers tell loss,
duplicates and stale packets apart."""
import json
import statistics
import subprocess
import sys
import time

import pytest

from fwbench import backends, engine
from fwbench.ruleset.templates.seed000 import seed000
from fwbench.errors import FwbenchError
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import TestbedSettings, Topology
from fwbench.traffic.native import EngineSettings, EngineTraffic, Flow, drain


@pytest.fixture
def testbed(firewall):
    """The module's tests share one testbed, every firewall emptied around each test
    (conftest's `firewall`), as a run's trials share one: building a testbed per test
    cost ~1.5 s, more than most of these tests take. Each test stops what it started."""
    return firewall


@pytest.fixture
def eng(testbed):
    t = EngineTraffic()
    t.start(testbed)
    yield t
    t.close()


def server_rx(tb):
    return tb.stats(tb.topo.server).rx_packets


def on_schedule(measure, full: int, sent=lambda r: r.sent, attempts: int = 3):
    """`measure()` (a send bounded by a duration), run again while its sender got
    out fewer than its `full` schedule, at most `attempts` times in all, each retry
    printed: on a busy machine a sender that falls behind stops at the deadline
    (1,499 of 1,500 seen), which says nothing of what these tests check; a
    measurement that keeps falling short fails with the last one's counts."""
    for i in range(attempts):
        r = measure()
        if sent(r) == full:
            return r
        print(f"the sender was not on schedule ({sent(r)} of {full} counted): measured again")
    raise AssertionError(f"the sender was off its schedule {attempts} times running; last: "
                         f"{sent(r)} of {full}")


def test_paced_trial_counts_every_packet(testbed, eng):
    r = on_schedule(lambda: eng.measurer(testbed, 64).measure(0.5, 20_000), 10_000)
    assert r.sent == 10_000 and r.received == 10_000 and not r.sender_short
    assert r.duplicated == 0 and r.reordered == 0 and r.extra["stale"] == 0
    lat = r.latency_us
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99_9"] <= lat["max"]


@pytest.mark.parametrize("frame", [64, 512, 1518])
def test_received_matches_the_server_interface(testbed, eng, frame):
    def measure():
        before = server_rx(testbed)
        r = eng.measurer(testbed, frame).measure(0.3, 5_000)
        return r, server_rx(testbed) - before
    r, rx = on_schedule(measure, 1500, sent=lambda m: m[0].sent)
    # The interface also counts the odd stray (an IPv6 multicast report, say).
    assert r.received == r.sent == 1500
    assert 0 <= rx - r.received <= 3


def ipv4_transmits(tb) -> int:
    """IPv4 packets the firewall has put on a wire (Ip: OutTransmits of its host).

    The firewall originates no IPv4 itself, so during a probe this counts what it
    forwarded. Unlike a link's tx counter it ignores ARP, ND and MLD chatter, which
    can fall inside a short probe window. (ForwDatagrams will not do: on 6.18
    it counts before the FORWARD hook, so dropped packets too.) Kernels older
    than 6.3 lack the counter; there the server-side link's tx count stands in.
    """
    n = tb.snmp("fw").get("Ip:OutTransmits")
    return tb.stats(tb.topo.fw_server_side).tx_packets if n is None else n


def test_loss_is_counted_against_what_was_sent(testbed, eng):
    """5,000 linear rules cannot forward 300k pps here: loss, and received equals
    what the firewall put on its server-side interface."""
    pol = seed000(5000)
    backends.get("iptables-legacy").apply(testbed, pol)
    # IPv4 the firewall put on a wire: a link's tx count would include its ARP/ND.
    fw_tx0 = ipv4_transmits(testbed)
    r = eng.measurer(testbed, 64).measure(0.5, 300_000)
    fw_tx = ipv4_transmits(testbed) - fw_tx0
    assert r.loss_ratio > 0.3 and r.received == fw_tx


def test_a_stream_past_two_to_the_21_counts_every_packet(testbed, eng):
    """2,600,000 packets (more if the firewall's input refused many) on one stream
    through no firewall, paced below the path's
    capacity: every one that the firewall's input took is received once. The old detector (one bit per sequence
    number in a 2^21-packet bitmap, never cleared) called every packet after the
    2,097,152nd a duplicate. Then copies of 1,000 numbers past that point, sent
    again (100,000 behind the end, within the window), are exactly 1,000
    duplicates, and nothing else moves."""
    rx = eng.receiver(testbed)
    # On a shared machine the firewall's CPU may stall and its input queue refuse
    # frames (0.13 % on a busy run; 5 to 24 % beside a one-core load); the sender
    # counts each, so the account is exact. A stream that refusals left short of
    # the mark proves nothing about the detector: it is sent again, once, under a
    # new cookie, long enough for the refused share the first one measured.
    mark, want = 2**21 + 101_000, 2_600_000
    for cookie in (31, 32):
        rx.arm(cookie)
        count = want
        sent = engine.send(testbed, frame_size=64, rate_pps=300_000, duration_s=0,
                           count=count, cookie=cookie)
        got = drain(rx)
        refused = sent["refused_by_next_hop"]
        assert sent["sent"] == count and got["received"] == count - refused, (sent, got)
        if got["received"] > mark:
            break
        print(f"stream {cookie}: {refused:,} of {count:,} refused left "
              f"{got['received']:,} received, short of 2^21 + 101,000; sending it again")
        want = min(8_000_000, int(1.25 * mark * count / max(got["received"], 0.3 * count)))
    assert got["received"] > mark, got
    assert got["duplicated"] == got["out_of_window"] == got["reordered"] == 0, got
    copies = engine.send(testbed, frame_size=64, rate_pps=20_000, duration_s=0,
                         count=1000, cookie=cookie, seq_start=count - 100_000)
    again = drain(rx)
    # Each copy taken is a duplicate, or new where its first was refused: never
    # both, never neither, and at most `refused` new ones.
    new = again["received"] - got["received"]
    assert again["duplicated"] + new == 1000 - copies["refused_by_next_hop"], again
    assert 0 <= new <= refused, again
    assert again["out_of_window"] == again["reordered"] == 0, again


@pytest.mark.parametrize("kind", ["sink", "recv"])
def test_copies_reorders_and_stragglers_across_the_wire_wrap(testbed, kind):
    """Real packets through the XDP sink and the socket receiver, numbered across
    the stamp's 32-bit wrap (numbers 2^32 - 500 .. 2^32 + 999 on the wire as
    4294966796 .. 999): copies of all of them, a gap filled late, and packets from
    far behind the window. Each kind of packet lands in its own count only."""
    t = EngineTraffic(EngineSettings(receiver=kind))
    t.start(testbed)
    try:
        rx = t.receiver(testbed)
        rx.arm(41)

        def send(first: int, count: int) -> dict:
            engine.send(testbed, frame_size=64, rate_pps=20_000, duration_s=0,
                        count=count, cookie=41, seq_start=first % 2**32)
            return drain(rx)

        top = 2**32 - 500
        got = send(top, 1000)                       # 2^32-500 .. 2^32+499
        assert (got["received"], got["duplicated"]) == (1000, 0), got
        got = send(top, 1000)                       # the same again
        assert (got["received"], got["duplicated"]) == (1000, 1000), got
        got = send(2**32 + 600, 400)                # ahead, leaving 500..599 out
        assert (got["received"], got["reordered"]) == (1400, 0), got
        got = send(2**32 + 500, 100)                # the gap, late
        assert (got["received"], got["reordered"], got["duplicated"]) == (1500, 100, 1000)
        got = send(2**32 + 999 - 300_000, 10)       # beyond the 262,144-number window
        assert (got["out_of_window"], got["received"]) == (10, 1500), got
        assert got["stale"] == got["malformed"] == 0, got
    finally:
        t.close()


def test_stale_packets_are_not_counted(testbed, eng):
    rx = eng.receiver(testbed)
    rx.arm(7)
    # Every packet the sender got out (1,000 on schedule; fewer when a busy machine
    # made it fall behind) is stale, none received.
    sent = engine.send(testbed, frame_size=64, rate_pps=10_000, duration_s=0.1,
                       cookie=8)["sent"]
    got = drain(rx)
    assert got["received"] == 0 and got["stale"] == sent and 0 < sent <= 1000


def test_ipv6_and_many_flows(testbed, eng):
    t = testbed.topo
    rx = eng.receiver(testbed)
    rx.arm(11)
    cp = subprocess.run(["ip", "netns", "exec", t.netns("client"), str(engine.binary()),
                         "send", "--ifname", t.client.ifname, "--src-mac", t.client.mac,
                         "--dst-mac", t.fw_client_side.mac, "--src", t.client.ip6,
                         "--dst", t.server.ip6, "--dport", str(engine.ENGINE_PORT),
                         "--frame-size", "128", "--rate", "20000", "--count", "4000",
                         "--threads", "2", "--sport-count", "64", "--cookie", "11"],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    sent = json.loads(cp.stdout)
    got = drain(rx)
    assert sent["sent"] == 4000 and sent["flows"] == 64
    assert got["received"] == 4000 and got["duplicated"] == 0


def test_user_space_receiver_agrees_with_the_sink(testbed):
    t = EngineTraffic(EngineSettings(receiver="recv"))
    t.start(testbed)
    try:
        r = on_schedule(lambda: t.measurer(testbed, 64).measure(0.3, 10_000), 3000)
    finally:
        t.close()
    assert r.extra["receiver"] == "recv" and r.received == r.sent == 3000


def test_idle_latency_agrees_with_ping(testbed, eng):
    """At low load the engine's one-way median sits between 0.8 and 3 times ping's
    RTT/2 on the same path, an independent instrument: wrong units, clocks or stamps
    would put it orders of magnitude off. Ping runs at the engine's packet interval
    (1 ms): on a VM an idle CPU's wake-up dominates latency, so only equal gaps
    compare. Three interleaved rounds; medians compared. Measured on this project's
    machines: 1.18..1.50 over eight runs (engine 15.6..20.8 us, ping RTT/2 13..17 us)
    on quiet days; on 2026-11-26 the same machine gave 1.3..2.9 (engine 32..66 us,
    ping RTT/2 17..31 us, its send lag 0.1 us), failing the old 1.8 bound in half the
    runs with the code of a day before as well: the VM's wake-up latency, not the
    instrument."""
    from fwbench.traffic.ping import PingRtt
    ping = PingRtt(200, 0.001)
    m = eng.measurer(testbed, 64)
    one_way, half_rtt = [], []
    for _ in range(3):
        one_way.append(m.measure(0.5, 1000).latency_us["p50"])
        half_rtt.append(ping.measure(testbed, 64)["rtt_us_median"] / 2)
    a, b = statistics.median(one_way), statistics.median(half_rtt)
    assert 0.8 * b <= a <= 3 * b, (one_way, half_rtt)


def test_reflect_gives_round_trips(testbed):
    """Across hosts one-way latency needs two clocks; `recv --reflect` on the far end
    sends each packet back, and a `recv` on the sending host, bound to the sender's
    source port, measures the round trip against the original schedule."""
    t = testbed.topo
    exe = str(engine.binary())
    far = testbed.spawn("server", [exe, "recv", "--bind", t.server.ip4, "--port",
                                   str(engine.ENGINE_PORT), "--reflect"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    near = testbed.spawn("client", [exe, "recv", "--bind", t.client.ip4, "--port", "10000"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for p in (far, near):
            assert json.loads(p.stdout.readline())["ready"]
        near.stdin.write("arm 21\n")
        near.stdin.flush()
        assert json.loads(near.stdout.readline())["armed"] == 21
        sent = engine.send(testbed, frame_size=64, rate_pps=2000, duration_s=0.5,
                           cookie=21)["sent"]
        # Read until every packet sent came back, or 5 s (not a fixed pause: the
        # way back may take longer on a busy machine).
        deadline = time.monotonic() + 5
        while True:
            near.stdin.write("read\n")
            near.stdin.flush()
            got = json.loads(near.stdout.readline())
            if got["received"] >= sent or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        testbed.forget(far)
        testbed.forget(near)
    # A sender that fell behind on a busy machine stops short of its 1,000 at the
    # deadline: what it sent is what must come back.
    assert got["mode"] == "recv" and got["received"] == sent and 0 < sent <= 1000
    assert got["latency_ns"]["p50"] > 0 and got["duplicated"] == 0


def test_round_trips_time_reflected_packets_against_the_senders_schedule():
    """Across machines the engine times round trips: the server's XDP sink sends a
    sample of the packets back, a sink on the client times them. On one machine the
    one-way times of the same packets are there to check them against."""
    with NetnsTestbed(Topology.new(TestbedSettings(latency="round-trip"))) as tb:
        assert tb.round_trip and tb.recorded["timing"]["kind"] == "round trip"
        eng = EngineTraffic()
        try:
            m = eng.measurer(tb, 64)
            # What the sender got out (1,000 on schedule; fewer where a busy machine
            # made it fall behind) is what every count below is held to.
            r = m.measure(0.5, 2000)
            assert r.sent == r.received and 0 < r.sent <= 1000
            # below 5,000 pps every packet goes back, and every one came back
            assert r.extra["reflected"] == r.extra["returned"] == r.sent, r.extra
            assert r.extra["latency_kind"] == "round trip"
            rt, ow = r.latency_us, r.extra["one_way_latency_us"]
            # each packet's round trip holds its one-way trip: so do the extremes, and
            # every percentile (from histogram buckets: equal where they share one)
            assert rt["min"] > ow["min"] and rt["max"] > ow["max"], (rt, ow)
            assert all(rt[k] >= ow[k] for k in ("p50", "p90", "p99")), (rt, ow)
            r = m.measure(0.5, 50_000)
            assert r.sent == r.received and 0 < r.sent <= 25_000
            # 1 in 16: sequence numbers 0, 16, .. (1,563 of 25,000 on schedule)
            assert r.extra["reflected"] == r.extra["returned"] == -(-r.sent // 16), r.extra
            assert r.latency_us["p50"] > 0
            # A firewall dropping the way back leaves nothing to time: one clear error.
            tb.exec("fw", ["nft", "add table inet fwbrt; add chain inet fwbrt f { type "
                                  "filter hook forward priority 0; }; add rule inet fwbrt f "
                                  f"udp sport {engine.ENGINE_PORT} drop"])
            with pytest.raises(FwbenchError, match="must let the return path through"):
                m.measure(0.3, 2000)
            tb.exec("fw", ["nft", "delete table inet fwbrt"])
        finally:
            eng.close()
        # IPv6: the sink swaps 16-byte addresses
        t = tb.topo
        eng = EngineTraffic(flow=Flow(src=t.client.ip6, dst=t.server.ip6))
        try:
            r = eng.measurer(tb, 84).measure(0.3, 2000)
            assert r.sent == r.received == r.extra["returned"] and 0 < r.sent <= 600, \
                r.extra
        finally:
            eng.close()


_CAPTURE = """
import json, socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.bind((sys.argv[1], 0))
s.settimeout(0.2)
print("ready", flush=True)
frames, deadline = [], time.monotonic() + 5
while len(frames) < int(sys.argv[2]) and time.monotonic() < deadline:
    try:
        f, addr = s.recvfrom(4096)
    except socket.timeout:
        continue
    if addr[2] == socket.PACKET_HOST and f[12:14] in (b"\\x08\\x00", b"\\x86\\xdd"):
        frames.append(f.hex())
print(json.dumps(frames), flush=True)
"""


def _udp6_checksum_ok(frame: bytes) -> bool:
    """RFC 8200 pseudo-header sum over the whole UDP datagram, computed here
    independently of the engine: a correct checksum sums to 0xffff."""
    ip6, udp = frame[14:54], frame[54:]
    ulen = int.from_bytes(udp[4:6], "big")
    data = ip6[8:40] + ulen.to_bytes(4, "big") + b"\0\0\0\x11" + udp[:ulen]
    if len(data) % 2:
        data += b"\0"
    s = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return s == 0xffff and udp[6:8] != b"\0\0"


def _udp_counters(tb, family: int) -> dict[str, int]:
    """The server namespace's UDP counters: NoPorts counts a datagram for no socket
    only once its checksum verified; a bad one counts in InCsumErrors instead."""
    if family == 6:
        text = tb.exec("server", ["cat", "/proc/net/snmp6"])
        rows = dict(line.split() for line in text.splitlines() if line.strip())
        return {"no_ports": int(rows["Udp6NoPorts"]), "csum_errors": int(rows["Udp6InCsumErrors"])}
    row = tb.snmp("server")
    return {"no_ports": row["Udp:NoPorts"], "csum_errors": row["Udp:InCsumErrors"]}


@pytest.mark.parametrize("family", [4, 6])
def test_payload_text_follows_the_stamp_with_a_valid_checksum(testbed, family):
    """`--payload-text` bytes sit right after the 18-byte stamp, the rest is zeros;
    over IPv6 the UDP checksum covers them: checked here independently of the engine,
    and by the server's kernel, which counts a datagram for no socket (NoPorts) only
    after its checksum verified."""
    t = testbed.topo
    text = "odd-length.example1"  # 19 bytes: the checksum's odd tail is exercised
    src, dst = (t.client.ip4, t.server.ip4) if family == 4 else (t.client.ip6, t.server.ip6)
    cap = testbed.spawn("server", [sys.executable, "-c", _CAPTURE, t.server.ifname, "20"],
                        stdout=subprocess.PIPE, text=True)
    try:
        assert cap.stdout.readline().strip() == "ready"
        before = _udp_counters(testbed, family)
        cp = subprocess.run(["ip", "netns", "exec", t.netns("client"), str(engine.binary()),
                             "send", "--ifname", t.client.ifname, "--src-mac", t.client.mac,
                             "--dst-mac", t.fw_client_side.mac, "--src", src, "--dst", dst,
                             "--dport", str(engine.ENGINE_PORT), "--frame-size", "128",
                             "--rate", "2000", "--count", "20", "--payload-text", text],
                            capture_output=True, text=True, timeout=30)
        assert cp.returncode == 0, cp.stderr
        assert json.loads(cp.stdout)["payload_text_len"] == len(text)
        frames = [bytes.fromhex(h) for h in json.loads(cap.stdout.readline())]
        time.sleep(0.05)
        after = _udp_counters(testbed, family)
    finally:
        testbed.forget(cap)
    assert after["no_ports"] - before["no_ports"] == 20
    assert after["csum_errors"] == before["csum_errors"]
    assert len(frames) == 20
    l4 = 14 + (20 if family == 4 else 40)
    for f in frames:
        payload = f[l4 + 8:]
        assert len(f) == 124  # 128 with the FCS
        assert payload[18:18 + len(text)] == text.encode()
        assert payload[18 + len(text):] == bytes(len(payload) - 18 - len(text))
        if family == 6:
            assert _udp6_checksum_ok(f)
