"""Crafted packets through the firewall (fwbench.testbed.packets): what goes in,
what comes out, what the firewall drops or translates, and that the end hosts
never answer."""
import json
import time

import pytest

from fwbench import proc
from fwbench.backends import kernel
from fwbench.errors import FwbenchError
from fwbench.ruleset.model import Packet
from fwbench.testbed import packets
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology

ARB4, ARB6 = "198.18.77.5", "2001:2:0:77::5"       # routed by prepare() only


def kinds(iif: str, saddr4: str, saddr6: str, daddr4: str, daddr6: str,
          port: int) -> list[Packet]:
    """One packet of every kind from `iif`, distinct 5-tuples by `port`."""
    return [
        Packet(4, iif, saddr4, daddr4, "tcp", port, 80),
        Packet(4, iif, saddr4, daddr4, "udp", port, 53),
        Packet(4, iif, saddr4, daddr4, "icmp", icmp_type=8),
        Packet(4, iif, saddr4, daddr4, "icmp", icmp_type=13),      # timestamp
        Packet(6, iif, saddr6, daddr6, "tcp", port, 443),
        Packet(6, iif, saddr6, daddr6, "udp", port, 123),
        Packet(6, iif, saddr6, daddr6, "icmpv6", icmp_type=128),
        Packet(6, iif, saddr6, daddr6, "icmpv6", icmp_type=139),   # node information
    ]


def nft(tb, text: str) -> None:
    tb.exec("fw", ["nft", "-f", "-"], input=text)


def counters(tb, family: str, table: str) -> list[int]:
    """Packet counts of a table's rules, in order."""
    out = json.loads(tb.exec("fw", ["nft", "-j", "list", "table", family, table]))
    found = []
    for item in out["nftables"]:
        for expr in item.get("rule", {}).get("expr", []):
            if "counter" in expr:
                found.append(expr["counter"]["packets"])
    return found


@pytest.fixture
def testbed(firewall):
    """The module's testbed, every firewall (and conntrack) emptied around each test
    (conftest's `firewall`) and `prepare` undone after it: building a testbed per
    test cost ~1.5 s, about what each test takes."""
    yield firewall
    packets.restore(firewall)


@pytest.fixture
def fresh_testbed(netns_of):
    """A testbed of the test's own, as built: for `restore` against a testbed never
    prepared, and for an XDP program left on an end host."""
    with NetnsTestbed(Topology.new()) as tb:
        yield tb
    assert netns_of(tb.topo.run_id) == [], "the testbed left its namespaces"


def test_every_kind_arrives_unchanged_with_no_rules(testbed):
    t = testbed.topo
    packets.prepare(testbed)
    sent = (
        kinds("client", t.client.ip4, t.client.ip6, t.server.ip4, t.server.ip6, 1001)
        + kinds("client", "198.18.200.9", "2001:2:0:1::99", ARB4, ARB6, 1002)   # spoofed
        + kinds("client", t.fw_client_side.ip4, t.fw_client_side.ip6, ARB4, ARB6, 1003)
        + kinds("server", t.server.ip4, t.server.ip6, t.client.ip4, t.client.ip6, 1004)
        + kinds("server", "198.19.200.9", "2001:2:0:2::99", "198.19.8.8", "2001:2:0:88::8",
                1005)
    )
    to_fw = [Packet(4, "client", t.client.ip4, t.fw_client_side.ip4, "udp", 1006, 53),
             Packet(6, "server", t.server.ip6, t.fw_server_side.ip6, "udp", 1006, 53)]
    got = packets.exchange(testbed, sent + to_fw)
    for p, o in zip(sent, got):
        assert o is not None, p
        assert (o.packet, o.oif, o.checksum_ok) == (p, p.oif, True)
    # Addressed to the firewall itself: delivered there, not forwarded.
    assert got[len(sent):] == [None, None]


def test_five_thousand_of_five_thousand_arrive_within_seconds(testbed):
    packets.prepare(testbed)
    sent = [Packet(4, "client", f"198.18.{i // 250}.{i % 250 + 1}", ARB4, "udp", 1024 + i, 9)
            if i % 2 else
            Packet(6, "server", f"2001:2:0:2::{i + 1:x}", ARB6, "tcp", 1024 + i, 80)
            for i in range(5000)]
    for _ in range(3):
        start = time.monotonic()
        got = packets.exchange(testbed, sent)
        elapsed = time.monotonic() - start
        assert [o.packet if o else None for o in got] == sent
        assert elapsed < 5, f"5,000 packets took {elapsed:.1f} s"


def test_dropped_packets_are_reported_none(testbed):
    t = testbed.topo
    packets.prepare(testbed)
    nft(testbed, "table inet fwb_t {\n"
                 "  chain c_forward { type filter hook forward priority 0;\n"
                 "    udp dport 9 counter drop\n  }\n}\n")
    sent = []
    for i in range(40):
        iif = ("client", "server")[i % 2]
        src4, src6 = (t.client.ip4, t.client.ip6) if iif == "client" else (t.server.ip4,
                                                                          t.server.ip6)
        dport = (9, 10, 9)[i % 3]
        proto = "tcp" if i % 5 == 0 else "udp"
        sent.append(Packet(4, iif, src4, ARB4, proto, 2000 + i, dport) if i % 4 < 2 else
                    Packet(6, iif, src6, ARB6, proto, 2000 + i, dport))
    # A busy machine's end host may fail to take a forwarded frame in: exchange then
    # says the instrument lost it (never a None), and the exchange is repeated.
    for attempt in range(3):
        before = counters(testbed, "inet", "fwb_t")[0]
        try:
            got = packets.exchange(testbed, sent)
            break
        except packets.InstrumentLost as e:
            print(f"exchange {attempt + 1}: {e}; again")
    else:
        pytest.fail("the instrument lost packets in three exchanges running")
    dropped = [p.proto == "udp" and p.dport == 9 for p in sent]
    assert [o is None for o in got] == dropped
    assert all(o.packet == p for o, p in zip(got, sent) if o)
    # Each packet entered the firewall exactly once.
    assert counters(testbed, "inet", "fwb_t")[0] - before == sum(dropped)


def test_dnat_shows_in_the_observed_packet(testbed):
    t = testbed.topo
    packets.prepare(testbed)
    nft(testbed, "table ip nat {\n"
                 "  chain pre { type nat hook prerouting priority dstnat;\n"
                 f"    udp dport 5001 dnat to {t.server.ip4}:6001\n  }}\n}}\n")
    sent = [Packet(4, "client", "198.18.200.9", ARB4, "udp", 3001, 5001),
            Packet(4, "client", t.client.ip4, "198.19.9.9", "udp", 3002, 5001),
            Packet(4, "client", t.client.ip4, ARB4, "udp", 3003, 5002)]
    got = packets.exchange(testbed, sent)
    assert [(o.packet.daddr, o.packet.dport) for o in got] == [
        (t.server.ip4, 6001), (t.server.ip4, 6001), (ARB4, 5002)]
    assert [o.packet.saddr for o in got] == [p.saddr for p in sent]
    assert all(o.checksum_ok for o in got)   # NAT rewrote the checksums too

    def entries() -> list[str]:
        return testbed.exec("fw", ["conntrack", "-L"]).splitlines()
    assert len(entries()) == 3
    # A connection of the host's own, outside the benchmarking ranges: on a real
    # host (one carrying its own traffic) only fwbench's go.
    testbed.run("fw", ["ping", "-c", "1", "-W", "1", "127.0.0.1"])
    assert len(entries()) == 4
    testbed.own_traffic = True
    try:
        assert kernel.flush_conntrack(testbed)
        assert [e.split()[0] for e in entries()] == ["icmp"] and "127.0.0.1" in entries()[0]
    finally:
        del testbed.own_traffic
    assert kernel.flush_conntrack(testbed)       # a namespace of fwbench's: all of it
    assert entries() == []


def test_end_hosts_do_not_answer_and_would_without_the_sink(testbed, monkeypatch):
    """Packets to the server's own address would draw a TCP RST, an ICMP port
    unreachable and an echo reply; a counter on the firewall's server side sees
    none of them. Without the end hosts' ingress drop it does see them: the
    check can fail, and the server's kernel took our checksums as valid."""
    t = testbed.topo
    f1 = t.fw_server_side.ifname
    nft(testbed, "table inet fwb_t {\n"
                 "  chain c_pre { type filter hook prerouting priority -300;\n"
                 f"    iifname \"{f1}\" meta l4proto {{ tcp, udp, icmp }} counter\n"
                 f"    iifname \"{f1}\" icmpv6 type {{ echo-reply, destination-unreachable }}"
                 " counter\n  }\n}\n")
    sent = [Packet(4, "client", t.client.ip4, t.server.ip4, "tcp", 4001, 80),
            Packet(4, "client", t.client.ip4, t.server.ip4, "udp", 4001, 9),
            Packet(4, "client", t.client.ip4, t.server.ip4, "icmp", icmp_type=8),
            Packet(6, "client", t.client.ip6, t.server.ip6, "tcp", 4001, 80),
            Packet(6, "client", t.client.ip6, t.server.ip6, "udp", 4001, 9),
            Packet(6, "client", t.client.ip6, t.server.ip6, "icmpv6", icmp_type=128)]
    got = packets.exchange(testbed, sent)
    assert all(o is not None for o in got)
    time.sleep(0.2)                  # a reply, had there been one, is back by now
    assert counters(testbed, "inet", "fwb_t") == [0, 0]

    monkeypatch.setattr(packets, "_sink", lambda tb, role, ifname: None)
    packets.exchange(testbed, [Packet(p.version, p.iif, p.saddr, p.daddr, p.proto,
                                      p.sport and p.sport + 1, p.dport, p.icmp_type)
                               for p in sent])
    time.sleep(0.2)
    assert counters(testbed, "inet", "fwb_t") == [4, 2]   # RST+unreachable+reply, twice


def test_restore_undoes_prepare(fresh_testbed):
    testbed = fresh_testbed
    t = testbed.topo
    probe = [Packet(4, "client", "198.18.200.9", ARB4, "udp", 5001, 9),
             Packet(6, "server", "2001:2:0:2::99", ARB6, "udp", 5001, 9),
             Packet(4, "client", t.client.ip4, t.server.ip4, "udp", 5002, 9)]
    assert [o is not None for o in packets.exchange(testbed, probe)] == [False, False, True]
    packets.prepare(testbed)
    packets.prepare(testbed)                               # idempotent
    assert all(packets.exchange(testbed, probe))
    packets.restore(testbed)
    for fam in ("-4", "-6"):
        rules = testbed.ip("fw", fam, "rule")
        assert "lookup 101" not in rules and "lookup 102" not in rules
    f0 = t.fw_client_side.ifname
    assert testbed.exec("fw", ["sysctl", "-n", f"net.ipv4.conf.{f0}.accept_local"]).strip() == "0"
    assert [o is not None for o in packets.exchange(testbed, probe)] == [False, False, True]


@pytest.mark.parametrize("bad, why", [
    (Packet(4, "client", "198.18.0.2", "192.0.2.1", "udp", 1, 2), "outside"),
    (Packet(4, "client", "198.18.0.2", "2001:2::1", "udp", 1, 2), "is not IPv4"),
    (Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", None, 2), "needs sport"),
    (Packet(6, "client", "2001:2::1", "2001:2::2", "icmp"), "icmp in an IPv6"),
    (Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2, ct_state="established"),
     "cannot be crafted"),
])
def test_packets_that_cannot_be_sent_are_refused(bad, why):
    with pytest.raises(FwbenchError, match=why):
        packets.build_frame(bad, 0, b"\0" * 4, "02:00:00:00:00:01", "02:00:00:00:00:02")


def test_an_xdp_program_on_an_end_host_is_refused(fresh_testbed):
    """XDP runs before the capture's tap: the exchange would call every packet
    dropped. It refuses instead."""
    testbed = fresh_testbed
    obj = proc.REPO / "engine/build/sink.bpf.o"
    if not obj.exists():
        pytest.skip(f"{obj} not built (./scripts/setup.sh)")
    s0 = testbed.topo.server.ifname
    testbed.ip("server", "link", "set", "dev", s0, "xdp", "obj", str(obj), "sec", "xdp")
    p = Packet(4, "client", testbed.topo.client.ip4, testbed.topo.server.ip4, "udp", 1, 9)
    with pytest.raises(FwbenchError, match=f"XDP program on {s0}"):
        packets.exchange(testbed, [p])


@pytest.fixture
def lossy_server(testbed, monkeypatch):
    """`lossy_server(on)`: an XDP program dropping every IPv4 UDP packet on the
    server's interface (on), or none (off). XDP runs before the capture's tap, so a
    frame the firewall hands to the server is lost to the instrument after the
    firewall counted it out: the loss a busy machine causes, made certain. The
    exchange's refusal of XDP is lifted here."""
    obj = proc.REPO / "bpf/build/drop.bpf.o"
    if not obj.exists():
        pytest.skip(f"{obj} not built (./scripts/setup.sh)")
    monkeypatch.setattr(packets, "_refuse_xdp", lambda tb, role, ifname: None)
    s0 = testbed.topo.server.ifname

    def set_(on: bool) -> None:
        if on:
            testbed.ip("server", "link", "set", "dev", s0, "xdpgeneric", "obj", str(obj),
                       "sec", "xdp")
        else:
            testbed.ip("server", "link", "set", "dev", s0, "xdpgeneric", "off")
    yield set_
    set_(False)


def test_frames_the_firewall_counted_out_but_the_capture_lost_are_instrument_loss(
        testbed, lossy_server, monkeypatch):
    """A packet missing while the firewall's port counted it out is the instrument's
    loss (InstrumentLost, with what was seen); one the firewall dropped, with the
    same loss of the capture in place, is its verdict (None, no error)."""
    monkeypatch.setattr(packets, "IN_FLIGHT_S", 0.3)
    t = testbed.topo
    packets.prepare(testbed)
    back = Packet(4, "server", t.server.ip4, t.client.ip4, "udp", 6001, 10)
    there = Packet(4, "client", t.client.ip4, t.server.ip4, "udp", 6002, 10)
    lossy_server(True)
    with pytest.raises(packets.InstrumentLost, match="1 counted out of the firewall") as e:
        packets.exchange(testbed, [back, there])
    assert e.value.lost == 1
    assert e.value.seen[0] is not None and e.value.seen[0].packet == back
    assert e.value.seen[1] is None
    # The firewall drops it: nothing counted out, nothing lost, the None is a verdict.
    nft(testbed, "table inet fwb_t {\n"
                 "  chain c_forward { type filter hook forward priority 0;\n"
                 "    udp dport 10 ip daddr " + t.server.ip4 + " counter drop\n  }\n}\n")
    got = packets.exchange(testbed, [back, there])
    assert got[0] is not None and got[1] is None
    assert counters(testbed, "inet", "fwb_t") == [1]


def test_frames_the_firewalls_input_queue_refused_are_instrument_loss(testbed, monkeypatch):
    """veth counts a frame its firewall-side port took but the CPU's full input queue
    refused as received and dropped (rx_dropped), and the sender is not told: the
    packet never met a rule, so its absence is the instrument's loss. The counter is
    read as the kernel gives it, with one refusal added to the last reading (a full
    queue cannot be made certain here without changing the machine's sysctls)."""
    from dataclasses import replace as dc_replace
    t = testbed.topo
    packets.prepare(testbed)
    real, reads = packets._handed, []

    def one_refused(tb):
        got = real(tb)
        reads.append(got)
        if len(reads) > 1:
            got["client"] = dc_replace(got["client"], rx_dropped=got["client"].rx_dropped + 1)
        return got
    monkeypatch.setattr(packets, "_handed", one_refused)
    nft(testbed, "table inet fwb_t {\n"
                 "  chain c_forward { type filter hook forward priority 0;\n"
                 "    udp dport 11 counter drop\n  }\n}\n")
    p = Packet(4, "client", t.client.ip4, t.server.ip4, "udp", 6003, 11)
    with pytest.raises(packets.InstrumentLost, match="1 refused by the firewall's full input"):
        packets.exchange(testbed, [p])
    # Nothing missing: nothing to doubt, whatever the counters say.
    reads.clear()
    ok = Packet(4, "client", t.client.ip4, t.server.ip4, "udp", 6003, 12)
    assert packets.exchange(testbed, [ok])[0] is not None


def test_verification_sends_again_what_the_instrument_lost(testbed, lossy_server,
                                                           backend_named, monkeypatch):
    """The instrument loses the first sending's frames to the server; verification
    sends the whole exchange again (the sink gone by then: the counters of the lossy
    one cannot say which packets met the rules), passes, and says so in its record.
    With the loss lasting, it is invalid, never a verdict."""
    from fwbench.backends import base
    from fwbench.errors import MeasurementInvalid
    from fwbench.ruleset.templates.seed000 import seed000
    monkeypatch.setattr(packets, "IN_FLIGHT_S", 0.3)
    monkeypatch.setattr(base, "REPEAT_PAUSE_S", 0)
    b = backend_named("none")
    rs = seed000(1)
    b.apply(testbed, rs)
    real, calls, lossy = packets.exchange, [], []

    def first_lossy(tb, pkts, *a, **kw):
        calls.append(len(pkts))
        try:
            return real(tb, pkts, *a, **kw)
        except packets.InstrumentLost:
            lossy.append(len(calls))
            raise
        finally:
            lossy_server(False)
    monkeypatch.setattr(packets, "exchange", first_lossy)
    lossy_server(True)
    v = b.verify(testbed, rs, sample=8)
    assert v.ok, v.reason
    resent = v.details["resent"]
    # One exchange given up at its first round (the lossy one), then all of it again.
    assert lossy == [1], lossy
    assert resent == {"packets": calls[0], "lost": resent["lost"], "rounds": 1}, resent
    assert resent["lost"] > 0
    assert sum(calls) == v.details["sample"]["sent"] + resent["packets"]

    # Lost every time: invalid after the repeats, not "dropped, expected forwarded".
    monkeypatch.setattr(packets, "exchange", real)
    lossy_server(True)
    with pytest.raises(MeasurementInvalid, match=f"in each of {base.EXCHANGE_ATTEMPTS} "
                                                 "exchanges"):
        b.verify(testbed, rs, sample=8)
