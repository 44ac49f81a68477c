"""Is the connection generator fast and quiet enough? Three figures, measured in one run:

  ceiling          the highest connection rate the generator (`fwbench-engine
                   connect`, one thread) sustains through the testbed with no rules
                   to `accept` on the server: the rate doubles from --start, then is
                   bisected between the last rate that held and the first that did
                   not. A rate holds when every connection is established, none is
                   slow (later than --slow-ms, or its SYN sent again), the starts
                   keep the rate (within 2 %) and the median lag behind schedule is
                   below --lag-fraction of the interval. A step that misses is run
                   once more before it counts (a shared machine stalls now and then).
  ceiling / slowest the ceiling over the rate the slowest configuration holds
                   (--config, by default kube-proxy's iptables mode at 10,000
                   services on iptables-legacy: each new connection walks
                   KUBE-SERVICES' rules to its service), searched alike with each
                   connection to a service drawn at random; in --rounds rounds, the
                   firewall emptied for the ceiling and the configuration loaded and
                   verified for its search in each (target >= 5: the generator is
                   not what limits the experiment's connection rate).
  added / rtt p50  what the generator adds to the kernel's SYN -> SYN-ACK time it
                   reports: for the same connections, its tcpi_rtt minus the wire
                   time, SYN out to SYN-ACK in on the client's interface, taken by an
                   AF_PACKET capture with kernel timestamps (SO_TIMESTAMPNS), matched
                   by source port; the median difference over the smallest p50 the
                   generator reports, the kernel RTT's (target < 0.1). tcpi_rtt is
                   whole microseconds (truncated), so up to -1 µs of the difference
                   is that rounding.

Prints the conditions (CPUs, pinning, conntrack in the firewall, rate steps) and the
figures last; exits 1 if a target is missed.
Run as root:  .venv/bin/python bench/conn_ratios.py
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _ratios import run_main

from fwbench import addresses as ad
from fwbench import backends, environment
from fwbench.backends.kernel import flush_all, flush_conntrack
from fwbench.errors import FwbenchError
from fwbench.ruleset.templates import kubeproxy as kp
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology
from fwbench.traffic.connections import AcceptServer, ConnectResult, connect

PORT = kp.TARGET_PORT      # 8080: the ceiling's server port, and the endpoints' first
TARGET = 0.1
RATE_TARGET = 5.0

# The capture, run in the client's namespace: every TCP SYN the client sends and
# SYN-ACK it receives on its interface, with the kernel's receive timestamps (the
# packet tap's, for outgoing frames), by the client's port; until stdin ends.
CAPTURE = r"""
import json, select, socket, struct, sys
ifname = sys.argv[1]
# ETH_P_ALL: only such taps see outgoing frames (dev_queue_xmit_nit).
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)            # SO_RCVBUFFORCE
s.setsockopt(socket.SOL_SOCKET, 35, 1)                   # SO_TIMESTAMPNS
s.bind((ifname, 3))
print("ready", flush=True)
syn, synack, dup = {}, {}, set()
while True:
    r, _, _ = select.select([s, sys.stdin], [], [])
    if sys.stdin in r and not sys.stdin.readline():
        break
    if s not in r:
        continue
    data, anc, _, addr = s.recvmsg(256, 64)
    ts = next((struct.unpack("qq", d[:16]) for lvl, typ, d in anc
               if lvl == socket.SOL_SOCKET and typ == 35), None)
    if ts is None or len(data) < 14 + 20 + 20 or data[12:14] != b"\x08\x00":
        continue
    ihl = (data[14] & 15) * 4
    if data[14 + 9] != 6:
        continue
    t = 14 + ihl
    sport, dport = struct.unpack("!HH", data[t:t + 4])
    flags = data[t + 13] & 0x3f
    ns = ts[0] * 1_000_000_000 + ts[1]
    if flags == 0x02 and addr[2] == 4:                   # SYN, PACKET_OUTGOING
        if sport in syn:
            dup.add(sport)
        syn.setdefault(sport, ns)
    elif flags == 0x12 and addr[2] != 4:                 # SYN-ACK coming in
        synack.setdefault(dport, ns)
packets, drops = struct.unpack("II", s.getsockopt(263, 6, 8))   # PACKET_STATISTICS
print(json.dumps({"wire_ns": {p: synack[p] - syn[p] for p in syn
                              if p in synack and p not in dup},
                  "syns": len(syn), "synacks": len(synack), "ambiguous": len(dup),
                  "drops": drops}))
"""


def holds(r: ConnectResult, lag_fraction: float) -> str | None:
    """Why this step did not hold, or None."""
    interval_us = 1e6 / r.rate
    if r.failures or r.skipped:
        return f"{r.failures} failed {r.failed}, {r.skipped} skipped"
    if r.slow:
        return f"{r.slow} slow ({r.retransmitted} retransmitted)"
    if r.start_rate is not None and r.start_rate < 0.98 * r.rate:
        return f"started {r.start_rate:,.0f}/s"
    if r.lag.p50 > lag_fraction * interval_us:
        return f"lag p50 {r.lag.p50:.1f} us > {lag_fraction:g} x {interval_us:.1f} us"
    return None


def ceiling(tb, srv, a, targets=None, seed: int = 1) -> tuple[float, list[str]]:
    """The highest rate that holds, to `targets` (default: the server's own
    address), each connection's drawn at random."""
    steps: list[str] = []
    target = targets or [(tb.topo.server.ip4, PORT)]

    def step(rate: float) -> bool:
        why = None
        for attempt in (1, 2):
            flush_conntrack(tb)
            r = connect(tb, target, rate, a.step_s, slow_ms=a.slow_ms, timeout_ms=2000,
                        cpus=[tb.topo.settings.sender_cpu], seed=seed + len(steps))
            got = srv.read()
            why = holds(r, a.lag_fraction)
            note = (f"{rate:>9,.0f}/s: {r.connected:,}/{r.attempted:,} connected, "
                    f"server {got.accepted:,}, lag p50 {r.lag.p50:.1f} us "
                    f"p99 {r.lag.p99:.0f} us, rtt p50 {r.rtt.p50:.0f} us, "
                    f"connect p50 {r.connect.p50:.0f} us: "
                    f"{'holds' if why is None else 'misses (' + why + ')'}")
            steps.append(note + (" [re-run]" if attempt == 2 else ""))
            print(steps[-1], flush=True)
            if why is None:
                return True
        return False

    good, bad, rate = 0.0, None, a.start
    while bad is None and rate <= a.max_rate:
        if step(rate):
            good, rate = rate, rate * 2
        else:
            bad = rate
    if bad is None:
        return good, steps
    for _ in range(a.bisect):
        if good == 0:
            break
        mid = (good + bad) / 2
        if step(mid):
            good = mid
        else:
            bad = mid
    return good, steps


def added_latency(tb, a, rep: int) -> dict:
    """One trial at --latency-rate: the generator's samples against the capture."""
    with tempfile.TemporaryDirectory() as d:
        samples = Path(d) / "samples"
        cap = tb.spawn("client", [sys.executable, "-c", CAPTURE, tb.topo.client.ifname],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
        try:
            if cap.stdout.readline().strip() != "ready":
                raise FwbenchError(f"capture did not start: {cap.stderr.read().strip()}")
            r = connect(tb, [(tb.topo.server.ip4, PORT)], a.latency_rate, a.latency_s,
                        slow_ms=a.slow_ms, seed=rep, cpus=[tb.topo.settings.sender_cpu],
                        samples=str(samples))
            out, err = cap.communicate("\n", timeout=30)
        finally:
            tb.forget(cap)
        if cap.returncode:
            raise FwbenchError(f"capture: {err.strip().splitlines()[-1:]}")
        got = json.loads(out.strip().splitlines()[-1])
        wire = {int(p): ns for p, ns in got["wire_ns"].items()}
        diffs, wires, rtts, users = [], [], [], []
        for line in samples.read_text().splitlines():
            _src, sport, _dst, _dport, rtt_us, user_ns, retrans = line.split()
            w = wire.get(int(sport))
            if w is None or int(retrans):
                continue
            diffs.append(int(rtt_us) * 1000 - w)
            wires.append(w)
            rtts.append(int(rtt_us) * 1000)
            users.append(int(user_ns))
    if len(diffs) < 0.9 * r.connected:
        raise FwbenchError(f"only {len(diffs)} of {r.connected} connections matched "
                           f"the capture ({got['drops']} dropped by it)")
    q = lambda v, p: statistics.quantiles(v, n=100)[p - 1] / 1000  # noqa: E731
    res = {"matched": len(diffs), "connected": r.connected, "drops": got["drops"],
           "syns": got["syns"], "synacks": got["synacks"], "ambiguous": got["ambiguous"],
           "added_p50": statistics.median(diffs) / 1000, "added_p10": q(diffs, 10),
           "added_p90": q(diffs, 90), "wire_p50": statistics.median(wires) / 1000,
           "rtt_p50": r.rtt.p50, "rtt_p50_matched": statistics.median(rtts) / 1000,
           "connect_p50": r.connect.p50,
           "user_minus_wire_p50": statistics.median(
               u - w for u, w in zip(users, wires)) / 1000}
    res["ratio"] = abs(res["added_p50"]) / min(r.rtt.p50, r.connect.p50)
    print(f"rep {rep}: {res['matched']:,} of {r.connected:,} matched "
          f"(capture: {res['syns']:,} SYNs, {res['synacks']:,} SYN-ACKs, "
          f"{res['ambiguous']} ports twice, {res['drops']} dropped): wire p50 {res['wire_p50']:.1f} us, kernel rtt "
          f"p50 {res['rtt_p50']:.1f} us, added p50 {res['added_p50']:+.2f} us "
          f"(p10 {res['added_p10']:+.2f}, p90 {res['added_p90']:+.2f}); user-space "
          f"connect p50 {res['connect_p50']:.1f} us, {res['user_minus_wire_p50']:.1f} us "
          f"over the wire", flush=True)
    return res


def config_of(text: str):
    """BACKEND:MODE:SERVICES -> (backend, mode, services)."""
    try:
        name, mode, n = text.split(":")
        if mode not in kp.MODES:
            raise ValueError
        return backends.get(name), mode, int(n)
    except (ValueError, FwbenchError):
        raise SystemExit(f"--config: {text!r} is not BACKEND:MODE:SERVICES with MODE "
                         f"iptables or nftables (e.g. iptables-legacy:iptables:10000)")


def accept_ports(services: int, endpoints: int) -> str:
    """The endpoints' target ports: the template's 8080 + k // (pod addresses)."""
    last = kp.TARGET_PORT + (services * endpoints - 1) // ad.KUBE_PODS.num_addresses
    return f"{kp.TARGET_PORT}-{last}" if last > kp.TARGET_PORT else str(kp.TARGET_PORT)


def conntrack(tb) -> str:
    cp = tb.run("fw", ["cat", "/proc/sys/net/netfilter/nf_conntrack_count"], check=False)
    return cp.stdout.strip() if cp.returncode == 0 else "no conntrack module"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=float, default=1000, help="first rate, connections/s")
    ap.add_argument("--max-rate", type=float, default=1_024_000)
    ap.add_argument("--bisect", type=int, default=4, help="bisection steps after doubling")
    ap.add_argument("--step-s", type=float, default=0.5, help="seconds per rate step")
    ap.add_argument("--slow-ms", type=int, default=50)
    ap.add_argument("--lag-fraction", type=float, default=0.5)
    ap.add_argument("--latency-rate", type=float, default=1000)
    ap.add_argument("--latency-s", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--config", default="iptables-legacy:iptables:10000",
                    help="the slowest configuration, BACKEND:MODE:SERVICES")
    ap.add_argument("--endpoints", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of (ceiling, the configuration's rate)")
    a = ap.parse_args()
    backend, mode, n = config_of(a.config)
    if why := backend.unavailable():
        raise SystemExit(f"--config: {backend.name} cannot run here: {why}")
    rs = kp.kube_proxy(services=n, endpoints=a.endpoints, mode=mode)
    services = [(s.cluster_ip, kp.SERVICE_PORT) for s in kp.services(n, a.endpoints, 0)]
    env = environment.collect({})
    print(f"machine: {env['cpu_model']}, {env['cpus']} CPUs; kernel {env['kernel']}; "
          f"load average {Path('/proc/loadavg').read_text().split()[0]} (shared)")
    topo = Topology.line().serving((kp.POD_CIDR,))
    s = topo.settings
    with NetnsTestbed(topo) as tb:
        print(f"testbed: line, the server holding {kp.POD_CIDR}; generator (1 thread) "
              f"pinned to CPU {s.sender_cpu}, accept server to CPU {s.server_cpu}, "
              f"firewall ingress RPS to CPU {s.firewall_cpu}; conntrack entries in the "
              f"firewall before: {conntrack(tb)}, emptied before each step")
        # PORT is the endpoints' first port too (kp.TARGET_PORT).
        with AcceptServer(tb, accept_ports(n, a.endpoints), cpu=s.server_cpu) as srv:
            print(f"searches: doubling from {a.start:,.0f}/s, then {a.bisect} bisections; "
                  f"{a.step_s:g} s a step; slow > {a.slow_ms} ms; lag p50 limit "
                  f"{a.lag_fraction:g} x interval")
            tops, helds = [], []
            for rnd in range(1, a.rounds + 1):
                flush_all(tb)
                print(f"round {rnd}: ceiling (no rules)", flush=True)
                tops.append(ceiling(tb, srv, a, seed=1000 * rnd)[0])
                load = backend.apply(tb, rs).load_time_s
                v = backend.verify(tb, rs, 0)
                if not v.ok:
                    raise FwbenchError(f"{a.config}: not verified: {v.reason}")
                print(f"round {rnd}: {backend.name} {mode} mode, {n:,} services "
                      f"({rs.rule_count:,} rules, loaded in {load:.2f} s, verified)",
                      flush=True)
                helds.append(ceiling(tb, srv, a, services, seed=1000 * rnd + 500)[0])
            flush_all(tb)
            top = statistics.median(tops)
            print(f"conntrack entries in the firewall after the steps: {conntrack(tb)}")
            print(f"added latency: {a.reps} trials of {a.latency_rate:,.0f}/s for "
                  f"{a.latency_s:g} s, capture on {tb.topo.client.ifname} (client)")
            got = [added_latency(tb, a, rep + 1) for rep in range(a.reps)]
    ratios = [g["ratio"] for g in got]
    r = statistics.median(ratios)
    passed = r < TARGET and max(ratios) < TARGET
    over = [t / h if h else float("inf") for t, h in zip(tops, helds)]
    rate_ok = min(over) >= RATE_TARGET
    print(f"ceiling = {top:,.0f} connections/s sustained (1 thread, no rules; per round "
          f"{', '.join(f'{t:,.0f}' for t in tops)})")
    print(f"ceiling / slowest = {statistics.median(over):.2f} (the configuration "
          f"{a.config} held {', '.join(f'{h:,.0f}' for h in helds)}/s; per round "
          f"{', '.join(f'{x:.2f}' for x in over)}; target >= {RATE_TARGET:g}: "
          f"{'met' if rate_ok else 'MISSED'})")
    print(f"added / rtt p50 = {r:.3f} (median added {statistics.median(g['added_p50'] for g in got):+.2f} us "
          f"over kernel rtt p50 {statistics.median(g['rtt_p50'] for g in got):.1f} us; "
          f"per trial {min(ratios):.3f}..{max(ratios):.3f}; target < {TARGET:g}: "
          f"{'met' if passed else 'MISSED'})")
    return 0 if passed and rate_ok else 1


if __name__ == "__main__":
    run_main(main, "conn_ratios")
