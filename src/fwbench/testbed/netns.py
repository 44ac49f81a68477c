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
import os
import signal
from pathlib import Path

from fwbench import owned, proc
from fwbench.testbed.base import Testbed, ports_health
from fwbench.testbed.executor import NetnsExecutor
from fwbench.testbed.topology import NETNS_RE, Topology


class NetnsTestbed(Testbed):
    """Build with `with NetnsTestbed(topo) as tb:`; leaving the block removes it all.
    Commands go through `tb.executor` (or the shorthands of testbed.base.Testbed)."""

    provider = "netns"

    def __init__(self, topo: Topology):
        super().__init__(topo, NetnsExecutor(topo))
        self._created: list[str] = []
        self._lock = None
        self._hushed = False

    # --- lifecycle ------------------------------------------------------------

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
        # The links' reports of coming up (see hush) stay off the wire.
        self.hush(True)
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
            fam = ["-6"] if r.version == 6 else []
            if r.local:
                self.ip(r.host, *fam, "route", "add", "local", r.dst, "dev", "lo")
            else:
                self.ip(r.host, *fam, "route", "add", r.dst, "via", r.via)
        for h in t.hosts:
            if h.kind == "firewall":
                self.sysctl(h.role, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
        self.settle_latency("every host is a namespace of this machine's kernel")
        self.configure()
        self.hush(False)

    def destroy(self) -> None:
        """Stop every process we started, then remove every namespace we created.
        Signals are held off meanwhile so a second Ctrl-C cannot leave half a testbed."""
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.stop_processes()
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

    def hush(self, on: bool) -> None:
        """Block (`on`) or let through again every ICMPv6 message the hosts send to
        a multicast group, by an IPsec policy in each namespace: the route lookup
        drops them, before any netfilter hook sees them.

        With no link-local addresses, no duplicate detection and static neighbours,
        what the hosts still send of their own is multicast listener reports (MLD,
        measured on 6.18): each group an address or forwarding joins, reported
        twice, the second up to a second later, whenever a link comes up or changes
        (an XDP program attached or detached, even `ip link set xdp off` with none).
        A firewall's reports pass its output and postrouting hooks, an end host's
        its ingress and prerouting: a catch-all rule counted one more packet than
        was sent. No setting of 6.18 stops them (`multicast off` does not,
        mld_qrv is the whole machine's). fwbench itself sends only to the
        benchmarking ranges, never to a multicast group. Off while traffic is
        measured: with any outbound policy the kernel looks up every forwarded
        packet in the policy table."""
        if on == self._hushed:
            return
        verb = ["add"] if on else ["delete"]
        for role in self.topo.roles:
            self.ip(role, "xfrm", "policy", *verb, "dir", "out", "src", "::/0",
                    "dst", "ff00::/8", "proto", "ipv6-icmp",
                    *(["action", "block"] if on else []))
        self._hushed = on

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
        return ports_health(self)

    def cpus(self, role: str) -> int:
        return os.cpu_count() or 1   # the namespaces share this machine

    def machine_file(self, role: str, path: str) -> str:
        with open(path) as f:   # the namespaces share this machine
            return f.read()

    def ip(self, role: str, *args: str) -> str:
        # `ip -n` rather than through the executor: one process less per call, and
        # the build makes many.
        return proc.output(["ip", "-n", self.topo.netns(role), *args])


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
    if not path.parent.is_dir():
        try:
            owned.make(str(path.parent), "fwbench's run locks: a live run holds its "
                       "own, so `fwbench clean` leaves its namespaces alone",
                       ["*.lock"], mode=0o755)
        except FileExistsError:     # another run made it meanwhile
            pass
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
