"""The XDP live-frames sender (`send --via xdp`) on a real testbed: its frames are the
packet socket's byte for byte (the stamp's send time apart), every flow and stream is
there, the kernel accepts every checksum, it paces, and without GRO at the firewall's
ingress veth drops its frames, which is why the testbed turns GRO on for it."""
import json
import os
import resource
import subprocess
import sys
import time

import pytest

from fwbench import engine
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import TestbedSettings, Topology
from fwbench.traffic.native import drain

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from test_engine import _CAPTURE, _udp6_checksum_ok, _udp_counters  # noqa: E402


@pytest.fixture(scope="module")
def tb(netns_of):
    with NetnsTestbed(Topology.new(TestbedSettings(ingress_gro=True))) as tb:
        yield tb
    assert netns_of(tb.topo.run_id) == []


@pytest.fixture(scope="module")
def live_frames(tb):
    """The testbed, once this kernel is known to allow XDP live frames: some refuse
    them outright (EPERM, seen on a 6.18 VM kernel), and then the sender cannot
    send at all here, which is a skip with the engine's own line, not a failure."""
    try:
        engine.send(tb, frame_size=64, rate_pps=1000, duration_s=0, count=1, cookie=1,
                    via="xdp")
    except engine.KernelRefuses as e:
        pytest.skip(str(e))


def send(tb, *args, family=4):
    t = tb.topo
    src, dst = (t.client.ip4, t.server.ip4) if family == 4 else (t.client.ip6, t.server.ip6)
    cp = subprocess.run(["ip", "netns", "exec", t.netns("client"), str(engine.binary()),
                         "send", "--ifname", t.client.ifname, "--src-mac", t.client.mac,
                         "--dst-mac", t.fw_client_side.mac, "--src", src, "--dst", dst,
                         "--dport", str(engine.ENGINE_PORT), *args],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def captured(tb, n, *args, family=4):
    """(the sender's report, the n frames the server's interface received)."""
    cap = tb.spawn("server", [sys.executable, "-c", _CAPTURE, tb.topo.server.ifname, str(n)],
                   stdout=subprocess.PIPE, text=True)
    try:
        assert cap.stdout.readline().strip() == "ready"
        rep = send(tb, *args, family=family)
        frames = [bytes.fromhex(h) for h in json.loads(cap.stdout.readline())]
    finally:
        tb.forget(cap)
    return rep, frames


def by_stamp(frames, family):
    """(stream, seq) -> the frame with its send time (and IPv6's UDP checksum, which
    covers it) zeroed: what must be the same from either sender."""
    at = 42 if family == 4 else 62
    out = {}
    for f in frames:
        key = (int.from_bytes(f[at + 4:at + 6], "little"), int.from_bytes(f[at + 6:at + 10], "little"))
        g = bytearray(f)
        g[at + 10:at + 18] = bytes(8)
        if family == 6:
            g[60:62] = bytes(2)
        out[key] = bytes(g)
    return out


@pytest.mark.usefixtures("live_frames")
@pytest.mark.parametrize("family", [4, 6])
def test_frames_are_the_packet_sockets_and_the_kernel_takes_every_checksum(tb, family):
    args = ["--frame-size", "128", "--rate", "4000", "--count", "48", "--threads", "2",
            "--cpus", "0,1", "--src-count", "3", "--sport-count", "4", "--cookie", "5",
            "--payload-text", "fwbench-xdp"]
    before = _udp_counters(tb, family)
    a, fa = captured(tb, 48, *args, family=family)
    b, fb = captured(tb, 48, *args, "--via", "xdp", family=family)
    after = _udp_counters(tb, family)
    assert (a["via"], b["via"]) == ("packet", "xdp") and a["sent"] == b["sent"] == 48
    assert after["no_ports"] - before["no_ports"] == 96
    assert after["csum_errors"] == before["csum_errors"]
    if family == 6:
        assert all(_udp6_checksum_ok(f) for f in fb)
    pa, pb = by_stamp(fa, family), by_stamp(fb, family)
    assert len(pa) == len(pb) == 48 and pa == pb
    # 12 flows (3 sources x 4 ports), each seen
    assert len({(f[26:30] if family == 4 else f[22:38], f[34 if family == 4 else 54:][:2])
                for f in fb}) == 12


def idlest_cpu(window_s: float = 0.2) -> int:
    """The CPU that was idle longest over `window_s` (/proc/stat): a paced sender
    pinned to a CPU another process keeps busy falls behind its schedule."""
    def idle() -> dict[int, int]:
        out = {}
        for ln in open("/proc/stat"):
            f = ln.split()
            if f[0].startswith("cpu") and f[0] != "cpu":
                out[int(f[0][3:])] = int(f[4]) + int(f[5])
        return out
    a = idle()
    time.sleep(window_s)
    b = idle()
    return max(b, key=lambda c: b[c] - a.get(c, 0))


def cpu_busy_s(cpu: int) -> float:
    """Seconds CPU `cpu` spent in user and system mode, any process's (/proc/stat)."""
    for ln in open("/proc/stat"):
        f = ln.split()
        if f[0] == f"cpu{cpu}":
            return (int(f[1]) + int(f[2]) + int(f[3])) / os.sysconf("SC_CLK_TCK")
    raise AssertionError(f"no cpu{cpu} in /proc/stat")


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


@pytest.mark.usefixtures("live_frames")
def test_paced_stamps_and_counts(tb):
    """Every packet sent is received once and stamped, and the pacing holds (on
    schedule at the deadline, median lag under 50 us), judged on a try in which no other
    process took the sender's CPU: that CPU's user and system time beyond the
    sender's own under 5 % of the send (/proc/stat against the sender's rusage).
    Up to three tries, each on the then idlest CPU, until one keeps the pacing; it
    fails when a try on a CPU of its own never did, and where every try shared its
    CPU (a busy machine) the counts alone are judged, saying so."""
    judged = None
    for attempt in range(3):
        cpu = idlest_cpu()
        rx = engine.Receiver(tb, "sink")
        try:
            rx.arm(21)
            busy0, own0, t0 = cpu_busy_s(cpu), children_cpu_s(), time.monotonic()
            rep = send(tb, "--frame-size", "64", "--rate", "50000", "--duration", "0.4",
                       "--cookie", "21", "--cpus", str(cpu), "--via", "xdp")
            others = (cpu_busy_s(cpu) - busy0) - (children_cpu_s() - own0)
            window = time.monotonic() - t0
            got = drain(rx)
        finally:
            rx.close()
        # A stalled sender sends in bursts the firewall's input queue may overflow:
        # on a shared CPU some loss; never a copy or a mangled stamp.
        assert 0 < got["received"] <= rep["sent"] <= 20000, (rep, got)
        assert got["duplicated"] == 0 and got["malformed"] == 0, got
        # it waits for every due time: never early
        assert rep["send_lag_ns"]["p50"] > 0 and rep["send_lag_ns"]["min"] >= 0
        if others >= 0.05 * window:
            print(f"other processes took {others:.2f} s of CPU {cpu} in the sender's "
                  f"{window:.2f} s: not judged")
            continue
        judged = (rep, got)
        paced = rep["sent"] == got["received"] == 20000 and \
            rep["achieved_pps"] == pytest.approx(50000, rel=0.01) and \
            rep["send_lag_ns"]["p50"] < 50_000 and got["latency_ns"]["p50"] < 1_000_000
        if paced:
            return
        # A stall this measure misses (the softirq work of a busy machine): again.
        print(f"off its schedule on CPU {cpu} with {others:.2f} s of others' use in "
              f"{window:.2f} s (sent {rep['sent']}, median lag "
              f"{rep['send_lag_ns']['p50'] / 1e3:.0f} us): tried again")
    if judged is None:
        print("every try shared its CPU: the pacing not judged, the counts were")
        return
    rep, got = judged
    assert rep["sent"] == 20000 and rep["achieved_pps"] == pytest.approx(50000, rel=0.01), rep
    assert got["received"] == 20000, got
    # on a CPU of its own it is rarely much late
    assert rep["send_lag_ns"]["p50"] < 50_000, rep["send_lag_ns"]
    assert got["latency_ns"]["p50"] < 1_000_000


@pytest.mark.usefixtures("live_frames")
def test_without_gro_at_the_firewall_veth_drops_every_frame(tb):
    port = tb.topo.fw_client_side
    rx = engine.Receiver(tb, "sink")
    try:
        tb.exec(port.host, ["ethtool", "-K", port.ifname, "gro", "off"])
        rx.arm(31)
        rep = send(tb, "--frame-size", "64", "--rate", "10000", "--count", "1000",
                   "--cookie", "31", "--cpus", "0", "--via", "xdp")
        time.sleep(0.2)
        got = rx.read()
    finally:
        tb.exec(port.host, ["ethtool", "-K", port.ifname, "gro", "on"])
        rx.close()
    assert rep["sent"] == 1000 and got["received"] == 0


@pytest.mark.parametrize("args, message", [
    (["--via", "xdp"], "--cpus"),
    (["--via", "xdp", "--threads", "2", "--cpus", "0,0"], "share CPU 0"),
    (["--via", "xdp", "--cpus", "0", "--batch", "8"], "--batch"),
    (["--via", "warp"], "not packet or xdp"),
])
def test_bad_xdp_options_are_one_line(tb, args, message):
    t = tb.topo
    cp = subprocess.run(["ip", "netns", "exec", t.netns("client"), str(engine.binary()),
                         "send", "--ifname", t.client.ifname, "--src-mac", t.client.mac,
                         "--dst-mac", t.fw_client_side.mac, "--src", t.client.ip4,
                         "--dst", t.server.ip4, "--count", "1", *args],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2 and message in cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1


@pytest.mark.usefixtures("live_frames")
def test_every_packet_of_an_open_throttle_trial_is_accounted_for(tb):
    """The XDP sender at open throttle through no firewall overruns the firewall's
    backlog: the record says so, and every sent packet is placed (received, dropped
    at the firewall's ingress, ...) with no gap beyond 0.1 %."""
    from fwbench.backends.kernel import flush_all
    from fwbench.traffic.native import EngineTraffic
    flush_all(tb)
    tr = EngineTraffic()
    tr.via = "xdp"
    try:
        r = tr.measurer(tb, 64).measure(1.0, 0)
    finally:
        tr.close()
    acct = r.extra["accounting"]
    assert r.extra["sender"] == "xdp" and acct["sent"] == r.sent > 100_000
    assert "gap" not in acct, acct
    stages = [k for k in acct if k != "sent"]
    assert sum(acct[k] for k in stages) == acct["sent"]
    assert acct["received"] == r.received
    for k in ("lost_before_firewall", "lost_after_firewall", "not_counted_by_receiver"):
        assert abs(acct[k]) <= 0.001 * acct["sent"], (k, acct)
