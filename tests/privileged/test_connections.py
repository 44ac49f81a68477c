"""The engine's connection generator on a real testbed: `connect` from the client and
`accept` on the server, straight through the forwarding firewall and through a small
iptables DNAT, with every connection's fate counted on both ends; and the failure
classes (refused, timeout) where the path makes them certain.

The direct tests share one testbed; the DNAT test builds its own, since a nat table
registers connection tracking in the firewall's namespace for every later test. Short
runs: the file takes ~20 s."""
import subprocess
import time

import pytest

from fwbench import engine
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology
from fwbench.traffic.connections import AcceptServer, connect, target_index

PORTS = (8080, 8081)


def counted(srv: AcceptServer, want: int) -> dict:
    """The server's endpoint counts once they add up to `want`: the last ACKs may
    still be on their way to it when the client ends. Waits while the count grows,
    and stops at the first read that adds nothing after one that did not either."""
    got: dict = {}
    idle = 0
    while sum(got.values()) < want and idle < 2:
        time.sleep(0.05)
        r = srv.read()
        assert r.errors == 0 and r.unlisted == 0, r
        idle = idle + 1 if r.accepted == 0 else 0
        for k, n in r.endpoints.items():
            got[k] = got.get(k, 0) + n
    return got


def test_direct_every_connection_counted_and_the_kernel_rtt_below_user_space(firewall):
    tb = firewall
    srv_ip = tb.topo.server.ip4
    with AcceptServer(tb, PORTS) as srv:
        assert srv.info["listeners"] == 2 * len(PORTS)   # both IP versions per port
        r = connect(tb, [(srv_ip, p) for p in PORTS], rate=1000, duration_s=1.0, seed=7)
        got = counted(srv, r.connected)
    assert r.scheduled == r.attempted == r.connected == 1000, r
    assert r.failures == 0 and r.skipped == 0, r.failed
    # Exactly the connections established, each at the port its seed drew.
    n0 = sum(target_index(7, i, 2) == 0 for i in range(1000))
    assert got == {(srv_ip, 8080): n0, (srv_ip, 8081): 1000 - n0}
    assert r.rtt.count == r.connected - r.retransmitted
    assert r.connect.count == r.connected and r.lag.count == r.attempted
    assert 0 < r.rtt.p50 < r.connect.p50, (r.rtt, r.connect)
    assert r.rtt.min >= 1          # tcpi_rtt is whole µs: none of 0


def test_failures_by_class(firewall):
    """No listener: every one refused (the server's RST); SYNs dropped in the
    firewall: every one timed out (200 ms, before the first SYN retransmission at
    1 s, so no retransmission either)."""
    tb = firewall
    srv_ip = tb.topo.server.ip4
    r = connect(tb, [(srv_ip, 9)], rate=1000, count=50)
    assert r.failed == {"refused": 50, "unreachable": 0, "timeout": 0, "other": 0}
    assert r.connected == 0 and r.rtt.count == 0
    tb.exec("fw", ["iptables-legacy", "-A", "FORWARD", "-p", "tcp", "--dport", "9",
                   "-j", "DROP"])
    r = connect(tb, [(srv_ip, 9)], rate=1000, count=20, timeout_ms=200)
    assert r.failed == {"refused": 0, "unreachable": 0, "timeout": 20, "other": 0}
    assert r.elapsed_s >= 0.2


def test_dnat_counts_show_the_endpoints_connections_were_translated_to(testbed):
    """Two services on the server side, 198.19.128.10:80 DNATed to the server's
    198.19.0.2:8080 and 198.19.128.11:80 to 198.19.200.5:8081, an address of a
    `local` route on the server (the wildcard listener takes it). The server counts
    each connection at the endpoint its target was translated to."""
    tb = testbed
    srv_ip, local_net, local_ip = tb.topo.server.ip4, "198.19.200.0/24", "198.19.200.5"
    vips = ["198.19.128.10", "198.19.128.11"]
    for vip, to in zip(vips, (f"{srv_ip}:8080", f"{local_ip}:8081")):
        tb.exec("fw", ["iptables-legacy", "-t", "nat", "-A", "PREROUTING", "-d", vip,
                       "-p", "tcp", "--dport", "80", "-j", "DNAT", "--to-destination", to])
    # The client routes 198.19.0.0/16 through the firewall already; the firewall
    # needs the way to the server's local prefix.
    tb.ip("server", "route", "add", "local", local_net, "dev", "lo")
    tb.ip("fw", "route", "add", local_net, "via", srv_ip)
    with AcceptServer(tb, PORTS) as srv:
        r = connect(tb, [(v, 80) for v in vips], rate=1000, count=600, seed=3)
        got = counted(srv, r.connected)
    assert r.connected == 600 and r.failures == 0, r.failed
    n0 = sum(target_index(3, i, 2) == 0 for i in range(600))
    assert got == {(srv_ip, 8080): n0, (local_ip, 8081): 600 - n0}


def run(*args):
    return subprocess.run([str(engine.binary()), *args], capture_output=True, text=True,
                          timeout=10)


@pytest.mark.parametrize("args, says", [
    (["accept"], "--ports is required"),
    (["accept", "--ports", "0"], "--ports: 0 is outside 1..65535"),
    (["accept", "--ports", "9-3"], "9-3 runs backwards"),
    (["accept", "--ports", "80,80"], "port 80 twice"),
    (["accept", "--ports", "80", "--bind", "10.0.0.1"], "outside the benchmarking ranges"),
    (["connect", "--rate", "10", "--count", "1"], "--targets and --rate are required"),
    (["connect", "--targets", "/nonexistent", "--rate", "10", "--count", "1"],
     "cannot read /nonexistent"),
    (["connect", "--targets", "-", "--rate", "-1", "--count", "1"], "--rate: -1 is outside"),
    (["connect", "--targets", "-", "--rate", "10"], "give --duration or --count"),
    (["connect", "--targets", "-", "--rate", "10", "--count", "1", "--threads", "0"],
     "--threads: 0 is outside 1..64"),
    (["connect", "--targets", "-", "--rate", "10", "--count", "1", "--bogus"],
     "unknown option or missing value: --bogus"),
])
def test_bad_options_are_one_line_and_exit_2(args, says):
    cp = run(*args)
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1, cp.stderr
    assert lines[0].startswith("fwbench-engine: ") and says in lines[0], lines[0]


@pytest.mark.parametrize("text, says", [
    ("10.0.0.1 80\n", "line 1: 10.0.0.1 is outside the benchmarking ranges"),
    ("# only a comment\n", "holds no target"),
    ("198.19.0.2\n", "line 1: expected ADDR PORT"),
    ("198.19.0.2 80\n2001:2:0:2::2 80\n", "line 2: 2001:2:0:2::2 is of the other IP version"),
    ("198.19.0.2 70000\n", "70000 is outside 1..65535"),
])
def test_bad_targets_are_one_line_and_exit_2(text, says):
    cp = subprocess.run([str(engine.binary()), "connect", "--targets", "-", "--rate", "10",
                         "--count", "1", "--src", "198.18.0.2"], input=text,
                        capture_output=True, text=True, timeout=10)
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1, cp.stderr
    assert says in lines[0], lines[0]
