"""The `netns` provider: builds any Topology from network namespaces (one per host)
and veth pairs (one per link) on this machine, gives the executor that runs
commands inside it, and always takes it down again.

Nothing here touches the root namespace: veth pairs are created inside the client
and firewall namespaces directly (`ip -n NS link add ... peer ... netns PEER`),
sysctls are written from inside the namespace they belong to, and routes cover only
the benchmarking ranges.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fwbench import proc
from fwbench.errors import FwbenchError
from fwbench.testbed.executor import NetnsExecutor
from fwbench.testbed.topology import NETNS_RE, Port, Topology


@dataclass(frozen=True)
class IfStats:
    rx_packets: int
    tx_packets: int
    rx_dropped: int
    tx_dropped: int
    t: float  # time.monotonic() when read


class NetnsTestbed:
    """Build with `with NetnsTestbed(topo) as tb:`; leaving the block removes it all.
    Commands go through `tb.executor` (or the shorthands run/exec/spawn here)."""

    def __init__(self, topo: Topology):
        self.topo = topo
        self.executor = NetnsExecutor(topo)
        self._procs: list[subprocess.Popen] = []
        self._created: list[str] = []
        self._lock = None
        self.recorded: dict = {}

    # --- lifecycle ------------------------------------------------------------

    def __enter__(self) -> "NetnsTestbed":
        try:
            self.build()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def build(self) -> None:
        t = self.topo
        # Held while this testbed lives (the kernel drops it if we are killed), so
        # `fwbench clean` can tell a live run's namespaces from a dead one's.
        self._lock = _hold(_lock_path(t.run_id))
        for role in t.roles:
            ns = t.netns(role)
            proc.run(["ip", "netns", "add", ns])
            self._created.append(ns)
            self.ip(role, "link", "set", "lo", "up")
            # No link-local addresses and no duplicate detection: the test links carry
            # only what fwbench sends, so verification can count packets exactly.
            self.sysctl(role, "net.ipv6.conf.default.addr_gen_mode=1",
                        "net.ipv6.conf.default.accept_dad=0",
                        "net.ipv6.conf.all.accept_dad=0")
        for a, b in t.links:
            self.ip(a.host, "link", "add", a.ifname, "address", a.mac, "mtu", str(t.settings.mtu),
                    "type", "veth", "peer", "name", b.ifname, "address", b.mac,
                    "mtu", str(t.settings.mtu), "netns", t.netns(b.host))
        for p in t.ports:
            self.ip(p.host, "addr", "add", f"{p.ip4}/{p.prefix4}", "dev", p.ifname)
            # nodad: the address is usable at once, no duplicate detection traffic.
            self.ip(p.host, "-6", "addr", "add", f"{p.ip6}/{p.prefix6}", "dev", p.ifname,
                    "nodad")
            if p.extra4 or p.extra6:
                # One `ip` for all of them: hundreds of clients' addresses would
                # otherwise cost a process each.
                lines = [f"addr add {a}/32 dev {p.ifname}" for a in p.extra4] \
                    + [f"addr add {a}/128 dev {p.ifname} nodad" for a in p.extra6]
                proc.run(["ip", "-n", t.netns(p.host), "-batch", "-"],
                         input="".join(ln + "\n" for ln in lines))
            self.ip(p.host, "link", "set", p.ifname, "up")
        for port, peer in t.neighbours():
            for addr in (peer.ip4, peer.ip6):
                self.ip(port.host, "neigh", "replace", addr, "lladdr", peer.mac, "dev",
                        port.ifname, "nud", "permanent")
        for r in t.routes:
            self.ip(r.host, *(["-6"] if r.version == 6 else []), "route", "add", r.dst,
                    "via", r.via)
        for h in t.hosts:
            if h.kind == "firewall":
                self.sysctl(h.role, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
        self._set_offloads()
        self._set_rps()
        self._wait_quiet()

    def destroy(self) -> None:
        """Stop every process we started, then remove every namespace we created.
        Signals are held off meanwhile so a second Ctrl-C cannot leave half a testbed."""
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            for p in self._procs:
                _stop(p)
            self._procs.clear()
            for ns in reversed(self._created):
                remove_netns(ns)
            self._created.clear()
            if self._lock is not None:
                _lock_path(self.topo.run_id).unlink(missing_ok=True)
                self._lock.close()
                self._lock = None
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def health(self) -> str | None:
        """Why this is no longer the testbed that was built, or None: a namespace
        gone, a port gone, down or without its address, forwarding off. Asked by the
        run loop after a trial that failed, to tell a broken testbed from a failing
        treatment."""
        t = self.topo
        have = set(leftover_netns())
        for role in t.roles:
            if t.netns(role) not in have:
                return f"namespace {t.netns(role)} is gone"
        for role in t.roles:
            cp = proc.run(["ip", "-n", t.netns(role), "-j", "addr", "show"], check=False)
            if cp.returncode:
                return f"cannot read the links of {role}: {cp.stderr.strip()}"
            links = {x["ifname"]: x for x in json.loads(cp.stdout or "[]")}
            for p in t.ports_of(role):
                link = links.get(p.ifname)
                if link is None:
                    return f"{role}'s port {p.ifname} is gone"
                if "UP" not in link.get("flags", []) or "LOWER_UP" not in link["flags"]:
                    return f"{role}'s port {p.ifname} is down"
                if p.ip4 not in {a.get("local") for a in link.get("addr_info", [])}:
                    return f"{role}'s port {p.ifname} lost its address {p.ip4}"
        for h in t.hosts:
            if h.kind == "firewall":
                on = self.exec(h.role, ["sysctl", "-n", "net.ipv4.ip_forward"]).strip()
                if on != "1":
                    return f"forwarding is off in {h.role}"
        return None

    def _wait_quiet(self, quiet_s: float = 0.5, limit_s: float = 5.0) -> None:
        """Wait until no interface has sent anything for `quiet_s`: links that just
        came up may still announce themselves (multicast reports)."""
        ports = self.topo.ports
        last, since, start = None, time.monotonic(), time.monotonic()
        while time.monotonic() - start < limit_s:
            now = [self.stats(p).tx_packets for p in ports]
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return
            time.sleep(0.1)

    # --- settings -------------------------------------------------------------

    def _set_offloads(self) -> None:
        t = self.topo
        state = "on" if t.settings.offloads else "off"
        ingress = {port.ifname for port in self.firewall_ingress()}
        got = {}
        for p in t.ports:
            gro = "on" if t.settings.ingress_gro and p.ifname in ingress else state
            self.exec(p.host, ["ethtool", "-K", p.ifname, "gro", gro, "gso", state,
                               "tso", state])
            got[p.ifname] = _read_offloads(self.exec(p.host, ["ethtool", "-k", p.ifname]))
        self.recorded["offloads"] = got

    def firewall_ingress(self) -> list:
        """The firewall's ports that face a client: where the traffic under test enters."""
        t = self.topo
        kind = {h.role: h.kind for h in t.hosts}
        return [port for a, b in t.links for port, peer in ((a, b), (b, a))
                if kind[port.host] == "firewall" and kind[peer.host] == "client"]

    def _set_rps(self) -> None:
        s = self.topo.settings
        ncpu = os.cpu_count() or 1
        for cpu in (s.sender_cpu, s.firewall_cpu, s.server_cpu):
            if not 0 <= cpu < ncpu:
                raise FwbenchError(f"testbed: CPU {cpu} does not exist (this machine has {ncpu})")
        # CPU mask per port; 0 turns RPS off explicitly. The firewall's ingress from
        # the clients, and the servers' ingress.
        t = self.topo
        kind = {h.role: h.kind for h in t.hosts}
        cpu = {h.role: h.cpu for h in t.hosts}
        steer = {}
        for a, b in t.links:
            for port, peer in ((a, b), (b, a)):
                if kind[port.host] == "firewall" and kind[peer.host] == "client":
                    c = s.firewall_cpu if cpu[port.host] is None else cpu[port.host]
                    steer[port] = 1 << c if t.firewall_rps else 0
        for port in t.ports:
            if kind[port.host] == "server" and t.server_rps:
                c = s.server_cpu if cpu[port.host] is None else cpu[port.host]
                steer[port] = 1 << c
        rps = {}
        for port, mask in steer.items():
            path = f"/sys/class/net/{port.ifname}/queues/rx-0/rps_cpus"
            self.exec(port.host, ["sh", "-c", f"echo {mask:x} > {path}"])
            rps[port.ifname] = self.exec(port.host, ["cat", path]).strip()
        self.recorded["rps_cpus"] = rps
        self.recorded["pinning"] = {"sender_cpu": s.sender_cpu, "server_cpu": s.server_cpu}

    # --- running things inside -------------------------------------------------

    def ip(self, role: str, *args: str) -> str:
        # `ip -n` rather than through the executor: one process less per call, and
        # the build makes many.
        return proc.output(["ip", "-n", self.topo.netns(role), *args])

    def exec(self, role: str, argv: list[str], **kw) -> str:
        return self.executor.output(role, argv, **kw)

    def run(self, role: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return self.executor.run(role, argv, **kw)

    def sysctl(self, role: str, *settings: str) -> None:
        self.exec(role, ["sysctl", "-q", "-w", *settings])

    def spawn(self, role: str, argv: list[str], cpu: int | None = None,
              **popen_kw) -> subprocess.Popen:
        """Start a process in a namespace; it is stopped when the testbed goes."""
        p = self.executor.spawn(role, argv, cpu=cpu, **popen_kw)
        self._procs.append(p)
        return p

    def forget(self, p: subprocess.Popen) -> None:
        _stop(p)
        if p in self._procs:
            self._procs.remove(p)

    def stats(self, port: Port) -> IfStats:
        out = self.ip(port.host, "-s", "-j", "link", "show", "dev", port.ifname)
        t = time.monotonic()
        s = json.loads(out)[0]["stats64"]
        return IfStats(s["rx"]["packets"], s["tx"]["packets"], s["rx"]["dropped"],
                       s["tx"]["dropped"], t)

    def ipv4_transmits(self) -> int:
        """IPv4 packets the firewall has put on a wire (Ip: OutTransmits of its netns).

        The firewall originates no IPv4 itself, so during a probe this counts what it
        forwarded. Unlike a link's tx counter it ignores ARP, ND and MLD chatter, which
        can fall inside a short probe window. (ForwDatagrams will not do: on 6.18
        it counts before the FORWARD hook, so dropped packets too.) Kernels older
        than 6.3 lack the counter; there the server-side link's tx count stands in.
        """
        n = self.snmp("fw").get("Ip:OutTransmits")
        return self.stats(self.topo.fw_server_side).tx_packets if n is None else n

    def snmp(self, role: str) -> dict[str, int]:
        """/proc/net/snmp of a namespace as {"Ip:InReceives": n, ...}."""
        lines = self.exec(role, ["cat", "/proc/net/snmp"]).splitlines()
        out = {}
        for head, vals in zip(lines[::2], lines[1::2]):
            proto, *names = head.split()
            for n, v in zip(names, vals.split()[1:]):
                out[f"{proto}{n}"] = int(v)
        return out

    def send_udp(self, dst: str, port: int, count: int, payload: int = 18) -> None:
        """Send `count` UDP datagrams from the client; used by verification probes."""
        self.exec("client", [sys.executable, "-m", "fwbench.testbed.probe", dst, str(port),
                             str(count), str(payload)])

    def ping(self, dst: str, count: int, interval_s: float = 0.01, payload: int = 56,
             timeout_s: float = 2.0) -> subprocess.CompletedProcess:
        return self.run("client", ["ping", "-n", "-c", str(count), "-i", f"{interval_s:g}",
                                   "-s", str(payload), "-W", f"{timeout_s:g}", dst],
                        check=False, timeout=count * interval_s + timeout_s + 10)


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is not None:
        return
    p.terminate()
    try:
        p.wait(2)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(2)


def _read_offloads(text: str) -> dict[str, str]:
    want = {"generic-receive-offload": "gro", "generic-segmentation-offload": "gso",
            "tcp-segmentation-offload": "tso"}
    got = {}
    for line in text.splitlines():
        key, _, val = line.partition(":")
        if key.strip() in want:
            got[want[key.strip()]] = val.strip()
    return got


def remove_netns(ns: str) -> None:
    """Remove one fwbench namespace, first ending the processes still inside it.
    Only called for namespaces fwbench created, so every PID inside is ours."""
    cp = proc.run(["ip", "netns", "pids", ns], check=False)
    for pid in (int(x) for x in cp.stdout.split() if x.isdigit()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.run(["ip", "netns", "del", ns], check=False)


def leftover_netns() -> list[str]:
    cp = proc.run(["ip", "netns", "list"], check=False)
    names = [ln.split()[0] for ln in cp.stdout.splitlines() if ln.strip()]
    return [n for n in names if NETNS_RE.match(n)]


_LOCK_DIR = Path("/run/fwbench")


def _lock_path(run_id: str) -> Path:
    return _LOCK_DIR / f"{run_id}.lock"


def _hold(path: Path, wait: bool = True):
    """An exclusive flock on path (created if need be), or None if another holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        f.close()
        return None
    return f


def clean_leftovers() -> list[str]:
    """Remove what earlier runs left behind (e.g. after SIGKILL); the namespaces of a
    testbed whose process still lives are left alone."""
    gone = []
    for ns in leftover_netns():
        run_id = ns.split("-")[1]
        lock = _hold(_lock_path(run_id), wait=False)
        if lock is None:
            continue   # a live run's
        remove_netns(ns)
        gone.append(ns)
        lock.close()
    for ns in gone:
        _lock_path(ns.split("-")[1]).unlink(missing_ok=True)
    return gone
