"""How should seed 001's many clients sit behind one firewall? Three layouts of N
clients, measured interleaved in one run:

  addresses   ONE client namespace, one veth to the firewall carrying N addresses
              (198.18.1.0 upward, /16); each client socket is bound to its own address
  ns-bridge   N client namespaces, one veth each into a bridge in a switch namespace,
              which reaches the firewall over ONE veth: the firewall sees exactly what
              it sees in `addresses` (one ingress interface, N neighbours)
  ns-veth     N client namespaces, each with a veth straight into the firewall
              namespace (N firewall interfaces, a /32 route per client)

Every layout has its own firewall (ip_forward=1, no rules) and server namespace, static
neighbour entries everywhere, IPv6 off. Per layout and N it reports build and teardown
time, the memory the kernel took (MemAvailable, Slab, Percpu deltas), and seed 001's
workload: every client holds its own connection to one echo server (one process, epoll)
and loops send 64 B -> receive the echo. All clients of all layouts are driven by this
one process (sockets made after setns into each client namespace), pinned to CPU 0; the
echo server is pinned to CPU 1; so only the kernel path differs between layouts.

Per measurement: echoes/s, and CPU time per echo of the driver, the echo server and
ksoftirqd (system time, and all): the forwarding runs in softirq inline in the sending
syscall, and without IRQ time accounting the kernel charges it to the task it ran in,
so this is the kernel path's cost without the machine's other tenants (whose CPU use
is printed as `others`). Treatments run in a fresh shuffled order every round; ratios
are layout/addresses from the medians, with a bootstrap interval and the paired
per-round range. Builds run one `ip -batch` per namespace, started after setns (not
`ip -n`, which also mounts sysfs), as a provider would.

Run as root:  .venv/bin/python bench/clients_layout.py [--clients 5 40 320]
              [--proto udp tcp] [--rounds 5] [--duration 0.8]
"""
from __future__ import annotations

import argparse
import ctypes
import ipaddress
import os
import random
import resource
import secrets
import select
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from _ratios import run_main

from fwbench import environment
from fwbench.errors import FwbenchError

LAYOUTS = ("addresses", "ns-bridge", "ns-veth")
PAYLOAD = b"\xa5" * 64
FIRST_CLIENT = ipaddress.IPv4Address("198.18.1.0")
GW, FW_SRV, SERVER, SERVER_NET = "198.18.0.1", "198.19.0.1", "198.19.0.2", "198.19.0.0/24"
ECHO_PORT = 7007
FW_MAC, FW_SRV_MAC, SERVER_MAC = "02:f1:00:00:00:01", "02:f2:00:00:00:01", "02:5e:00:00:00:02"
MAX_CLIENTS = 1000  # a bridge takes at most 1024 ports (BR_MAX_PORTS)
RESEND_S = 0.2      # an unanswered request is sent again (and counted lost) after this

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000

# One process, epoll over a UDP socket and a TCP listener with its connections. UDP is
# drained per wake-up; TCP echoes whatever arrived (64 B requests, one in flight each).
ECHO_SERVER = r"""
import select, socket, sys
ip, port = sys.argv[1], int(sys.argv[2])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
u.bind((ip, port)); u.setblocking(False)
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind((ip, port)); t.listen(4096); t.setblocking(False)
ep = select.epoll(); ep.register(u.fileno(), select.EPOLLIN); ep.register(t.fileno(), select.EPOLLIN)
conns = {}; buf = bytearray(4096); mv = memoryview(buf); uf, tf = u.fileno(), t.fileno()
print("ready", flush=True)
while True:
    for fd, ev in ep.poll():
        if fd == uf:
            while True:
                try:
                    n, a = u.recvfrom_into(buf)
                except BlockingIOError:
                    break
                u.sendto(mv[:n], a)
        elif fd == tf:
            while True:
                try:
                    c, _ = t.accept()
                except BlockingIOError:
                    break
                c.setblocking(False); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns[c.fileno()] = c; ep.register(c.fileno(), select.EPOLLIN)
        else:
            c = conns[fd]
            try:
                n = c.recv_into(buf)
            except BlockingIOError:
                continue
            except ConnectionError:
                n = 0
            if n == 0:
                ep.unregister(fd); c.close(); del conns[fd]
            else:
                c.send(mv[:n])
"""


# --- namespaces ------------------------------------------------------------------

def setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            raise FwbenchError(f"setns {path}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


class InNetns:
    """`with InNetns(name):` this thread is in namespace `name`, and back after."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> None:
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        setns(f"/run/netns/{self.name}")

    def __exit__(self, *exc) -> None:
        try:
            if _libc.setns(self._home, CLONE_NEWNET) != 0:
                raise FwbenchError(f"setns back: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(self._home)


def ip_batch(cmds: list[str], netns: str | None = None) -> None:
    """`ip -batch` in `netns`, or where this thread is (to add and delete namespaces)."""
    if netns is not None:
        return ip_batches([(netns, cmds)])
    cp = subprocess.run(["ip", "-batch", "-"], input="\n".join(cmds) + "\n",
                        capture_output=True, text=True)
    if cp.returncode != 0:
        first = (cp.stderr or cp.stdout).strip().splitlines()[:1]
        raise FwbenchError(f"ip -batch: {first[0] if first else 'exit ' + str(cp.returncode)}")


def ip_batches(jobs: list[tuple[str, list[str]]], parallel: int = 8) -> None:
    """One `ip -batch` per namespace, several at a time: starting `ip` costs
    milliseconds, more than the few commands each runs, and the starts overlap."""
    running: list[tuple[str, subprocess.Popen]] = []

    def reap(ns: str, p: subprocess.Popen) -> None:
        err = p.stderr.read()
        p.stderr.close()
        if p.wait() != 0:
            first = err.strip().splitlines()[:1]
            raise FwbenchError(f"ip -batch in {ns}: {first[0] if first else 'failed'}")

    try:
        for ns, cmds in jobs:
            if len(running) >= parallel:
                reap(*running.pop(0))
            # Started from inside the namespace rather than with `ip -n`, which would also
            # unshare a mount namespace and mount sysfs: most of its cost here.
            with InNetns(ns):
                p = subprocess.Popen(["ip", "-batch", "-"], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
            p.stdin.write("\n".join(cmds) + "\n")
            p.stdin.close()
            running.append((ns, p))
        while running:
            reap(*running.pop(0))
    finally:
        for _, p in running:
            p.stderr.close()
            p.wait()


def write_sysctls(netns: str, settings: dict[str, str]) -> None:
    # /proc/sys/net follows the writing thread's namespace: no process per namespace.
    with InNetns(netns):
        for key, value in settings.items():
            with open("/proc/sys/" + key.replace(".", "/"), "w") as f:
                f.write(value)


def client_ip(i: int) -> str:
    return str(FIRST_CLIENT + i)


def mac(kind: int, i: int) -> str:
    return f"02:{kind:02x}:00:00:{i >> 8:02x}:{i & 0xff:02x}"


def meminfo() -> dict[str, int]:
    got = {}
    with open("/proc/meminfo") as f:
        for ln in f:
            k, v = ln.split(":")
            got[k] = int(v.split()[0])  # kB
    return got


def cpu_ticks() -> dict[str, int]:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return {"user": user + nice, "sys": system, "irq": irq + softirq, "idle": idle + iowait,
            "steal": steal}


# --- the three layouts ---------------------------------------------------------------

_LETTER = {"addresses": "a", "ns-bridge": "b", "ns-veth": "v"}
NO_IPV6 = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}


@dataclass
class Layout:
    """One layout's namespaces for N clients; build() and teardown() time themselves."""
    kind: str
    n: int
    tag: str
    created: list[str] = field(default_factory=list)
    echo: subprocess.Popen | None = None
    socks: dict[str, list[socket.socket]] = field(default_factory=dict)
    eps: dict[str, select.epoll] = field(default_factory=dict)
    build_s: float = 0.0
    teardown_s: float = 0.0
    freed_s: float | None = None  # until the kernel gave back most of the Slab taken
    slab_built_kb: int = 0
    mem_kb: dict[str, int] = field(default_factory=dict)

    def ns(self, role: str) -> str:
        return f"fwb-{self.tag}-{_LETTER[self.kind]}-{role}"

    @property
    def fw(self) -> str:
        return self.ns("fw")

    @property
    def srv(self) -> str:
        return self.ns("srv")

    def client_ns(self, i: int) -> str:
        return self.ns("c") if self.kind == "addresses" else self.ns(f"c{i}")

    def namespaces(self) -> list[str]:
        names = [self.fw, self.srv]
        if self.kind == "ns-bridge":
            names.append(self.ns("sw"))
        if self.kind == "addresses":
            names.append(self.client_ns(0))
        else:
            names += [self.client_ns(i) for i in range(self.n)]
        return names

    def build(self, created: list[str]) -> None:
        m0, t0 = meminfo(), time.perf_counter()
        names = self.namespaces()
        # Recorded before the command, so a half-done batch still gets cleaned up:
        # so first make sure none is someone else's already.
        have = set(subprocess.run(["ip", "netns", "list"], capture_output=True,
                                  text=True).stdout.split())
        if have & set(names):
            raise FwbenchError(f"namespace {sorted(have & set(names))[0]} exists already; "
                               f"this script removes only the namespaces it makes")
        created += names
        self.created = names
        ip_batch([f"netns add {x}" for x in names])
        for x in names:
            write_sysctls(x, NO_IPV6)
        write_sysctls(self.fw, {"net.ipv4.ip_forward": "1"})
        fw = ["link set lo up",
              f"link add srv0 address {FW_SRV_MAC} type veth peer name eth0 "
              f"address {SERVER_MAC} netns {self.srv}",
              f"addr add {FW_SRV}/24 dev srv0", "link set srv0 up",
              f"neigh replace {SERVER} lladdr {SERVER_MAC} dev srv0 nud permanent"]
        clients: list[tuple[str, list[str]]] = []
        if self.kind == "addresses":
            fw += [f"link add cli0 address {FW_MAC} type veth peer name eth0 "
                   f"address {mac(0xc1, 0)} netns {self.client_ns(0)}",
                   f"addr add {GW}/16 dev cli0", "link set cli0 up"]
            fw += [f"neigh replace {client_ip(i)} lladdr {mac(0xc1, 0)} dev cli0 nud permanent"
                   for i in range(self.n)]
            clients.append((self.client_ns(0), [
                "link set lo up", *[f"addr add {client_ip(i)}/16 dev eth0" for i in range(self.n)],
                "link set eth0 up",
                f"neigh replace {GW} lladdr {FW_MAC} dev eth0 nud permanent",
                f"route add {SERVER_NET} via {GW}"]))
        elif self.kind == "ns-bridge":
            sw = self.ns("sw")
            # No firewall in the switch: bridged frames skip netfilter there. These
            # keys are the switch namespace's own since Linux 5.3; before, they
            # were the whole machine's, which this script never changes.
            if tuple(int(x) for x in os.uname().release.split(".")[:2]) < (5, 3):
                raise FwbenchError("ns-bridge needs Linux 5.3 or later: before, the "
                                   "bridge's netfilter sysctls are machine-wide")
            write_sysctls(sw, {"net.bridge.bridge-nf-call-iptables": "0",
                               "net.bridge.bridge-nf-call-ip6tables": "0",
                               "net.bridge.bridge-nf-call-arptables": "0"})
            swc = ["link set lo up", "link add br0 type bridge mcast_snooping 0",
                   f"link add up0 type veth peer name cli0 address {FW_MAC} netns {self.fw}",
                   "link set up0 master br0", "link set up0 up"]
            for i in range(self.n):
                swc += [f"link add p{i} type veth peer name eth0 address {mac(0xc1, i)} "
                        f"netns {self.client_ns(i)}",
                        f"link set p{i} master br0", f"link set p{i} up"]
            swc.append("link set br0 up")
            ip_batch(swc, sw)
            fw += [f"addr add {GW}/16 dev cli0", "link set cli0 up"]
            fw += [f"neigh replace {client_ip(i)} lladdr {mac(0xc1, i)} dev cli0 nud permanent"
                   for i in range(self.n)]
            for i in range(self.n):
                clients.append((self.client_ns(i), [
                    "link set lo up", f"addr add {client_ip(i)}/16 dev eth0", "link set eth0 up",
                    f"neigh replace {GW} lladdr {FW_MAC} dev eth0 nud permanent",
                    f"route add {SERVER_NET} via {GW}"]))
        else:  # ns-veth: the gateway address on every firewall port, a /32 route per client
            for i in range(self.n):
                fw += [f"link add c{i} address {mac(0xf1, i)} type veth peer name eth0 "
                       f"address {mac(0xc1, i)} netns {self.client_ns(i)}",
                       f"addr add {GW}/32 dev c{i}", f"link set c{i} up",
                       f"route add {client_ip(i)}/32 dev c{i}",
                       f"neigh replace {client_ip(i)} lladdr {mac(0xc1, i)} dev c{i} nud permanent"]
                clients.append((self.client_ns(i), [
                    "link set lo up", f"addr add {client_ip(i)}/32 dev eth0", "link set eth0 up",
                    f"route add {GW}/32 dev eth0",
                    f"neigh replace {GW} lladdr {mac(0xf1, i)} dev eth0 nud permanent",
                    f"route add {SERVER_NET} via {GW}"]))
        ip_batch(fw, self.fw)
        ip_batches(clients)
        ip_batch(["link set lo up", f"addr add {SERVER}/24 dev eth0", "link set eth0 up",
                  f"neigh replace {FW_SRV} lladdr {FW_SRV_MAC} dev eth0 nud permanent",
                  f"route add 198.18.0.0/16 via {FW_SRV}"], self.srv)
        self.build_s = time.perf_counter() - t0
        time.sleep(0.2)  # let deferred (RCU) work of the build land in the figures
        m1 = meminfo()
        self.slab_built_kb = m1["Slab"]
        self.mem_kb = {k: m0[k] - m1[k] if k == "MemAvailable" else m1[k] - m0[k]
                       for k in ("MemAvailable", "Slab", "Percpu")}

    def start(self, protos: list[str]) -> None:
        """Start the echo server and open every client's socket(s)."""
        self.echo = subprocess.Popen(
            ["ip", "netns", "exec", self.srv, "taskset", "-c", "1", sys.executable, "-c",
             ECHO_SERVER, SERVER, str(ECHO_PORT)],
            stdout=subprocess.PIPE, text=True, start_new_session=True)
        if self.echo.stdout.readline().strip() != "ready":
            raise FwbenchError(f"{self.kind}: the echo server did not start")
        for proto in protos:
            socks = []
            for i in range(self.n):
                with InNetns(self.client_ns(i)):
                    s = socket.socket(socket.AF_INET,
                                      socket.SOCK_DGRAM if proto == "udp" else socket.SOCK_STREAM)
                s.bind((client_ip(i), 0))
                if proto == "tcp":
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.connect((SERVER, ECHO_PORT))
                s.setblocking(False)
                socks.append(s)
            ep = select.epoll()
            for s in socks:
                ep.register(s.fileno(), select.EPOLLIN)
            self.socks[proto], self.eps[proto] = socks, ep

    def teardown(self, created: list[str]) -> None:
        if not (self.created or self.echo or self.socks):
            return
        t0 = time.perf_counter()
        stop(self.echo)
        self.echo = None
        for ep in self.eps.values():
            ep.close()
        for socks in self.socks.values():
            for s in socks:
                s.close()
        self.socks.clear()
        self.eps.clear()
        if self.created:
            delete_netns(self.created)
            for x in self.created:
                created.remove(x)
            self.created = []
        self.teardown_s = time.perf_counter() - t0
        # `ip netns del` returns at once; the kernel dismantles namespaces later in a
        # work queue (cleanup_net), which costs CPU and memory until it is done.
        took = self.mem_kb.get("Slab", 0)
        if took > 4096:
            goal = self.slab_built_kb - 0.8 * took
            while time.perf_counter() - t0 < 30:
                if meminfo()["Slab"] <= goal:
                    self.freed_s = time.perf_counter() - t0
                    break
                time.sleep(0.02)


def stop(p: subprocess.Popen | None) -> None:
    if p is not None and p.poll() is None:
        p.kill()  # by the PID we started
        p.wait(timeout=5)


def delete_netns(names: list[str]) -> None:
    # The firewall first: deleting it takes the veth pairs with it in one go.
    cp = subprocess.run(["ip", "-force", "-batch", "-"], capture_output=True, text=True,
                        input="".join(f"netns del {x}\n" for x in names))
    if cp.returncode != 0:
        print(f"warning: ip netns del: {cp.stderr.strip()[:200]}", file=sys.stderr)


# --- the workload ----------------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    echoes_per_s: float
    kernel_ns: float   # system CPU time per echo (softirq included) of the driver, the
                       # echo server and ksoftirqd: the kernel path this layout costs
    ours_ns: float     # all CPU time per echo of those (user space included)
    driver_cpu: float  # this process's CPU use, in CPUs (1.0 = saturated)
    echo_cpu: float    # the echo server's
    others_cpu: float  # busy CPU time of everything else on the machine, in CPUs
    lost: int


def proc_cpu_s(pid: int) -> tuple[float, float]:
    """(user, system) seconds of a process; system includes softirq work that ran
    in its context (without IRQ time accounting the kernel charges it to the task)."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    hz = os.sysconf("SC_CLK_TCK")
    return int(parts[11]) / hz, int(parts[12]) / hz


def ksoftirqd_pids() -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().startswith("ksoftirqd/"):
                        pids.append(int(d))
            except OSError:
                pass
    return pids


def cpu_snapshot(echo_pid: int, softirqd: list[int]) -> tuple[float, float, float]:
    """(user, system, machine busy) seconds: ours = this process, the echo server,
    ksoftirqd (which takes over softirq work under load)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    u, s = r.ru_utime, r.ru_stime
    for pid in (echo_pid, *softirqd):
        pu, ps = proc_cpu_s(pid)
        u, s = u + pu, s + ps
    c = cpu_ticks()
    busy = (c["user"] + c["sys"] + c["irq"] + c["steal"]) / os.sysconf("SC_CLK_TCK")
    return u, s, busy


def drive(lay: Layout, proto: str, duration: float, warmup: float,
          softirqd: list[int]) -> Sample:
    """Every client keeps one 64 B request in flight for warmup + duration seconds;
    counts the echoes of the last `duration`, then drains what is still in flight."""
    socks, ep = lay.socks[proto], lay.eps[proto]
    by_fd = {s.fileno(): i for i, s in enumerate(socks)}
    got = [0] * len(socks)           # TCP: bytes of the current echo received so far
    sent_at = [0.0] * len(socks)
    now = time.perf_counter()
    for i, s in enumerate(socks):
        s.send(PAYLOAD)
        sent_at[i] = now
    n, lost = 0, 0
    t_start = now + warmup
    t_end = t_start + duration
    counting = False
    next_check = now + RESEND_S
    tcp = proto == "tcp"
    while True:
        now = time.perf_counter()
        if not counting and now >= t_start:
            counting, n = True, 0
            c0, r0, e0 = (cpu_snapshot(lay.echo.pid, softirqd),
                          resource.getrusage(resource.RUSAGE_SELF), proc_cpu_s(lay.echo.pid))
            w0 = now
        if now >= t_end:
            break
        if now >= next_check and not tcp:  # TCP retransmits by itself
            for i, s in enumerate(socks):
                if now - sent_at[i] > RESEND_S:
                    s.send(PAYLOAD)
                    sent_at[i] = now
                    lost += 1
            next_check = now + RESEND_S
        for fd, _ in ep.poll(0.05):
            i = by_fd[fd]
            s = socks[i]
            try:
                k = len(s.recv(4096))
            except BlockingIOError:
                continue
            if tcp:
                got[i] += k
                if got[i] < len(PAYLOAD):
                    continue
                got[i] -= len(PAYLOAD)
            n += 1
            s.send(PAYLOAD)
            sent_at[i] = now
    c1, r1, e1 = (cpu_snapshot(lay.echo.pid, softirqd),
                  resource.getrusage(resource.RUSAGE_SELF), proc_cpu_s(lay.echo.pid))
    wall = now - w0
    # Drain: nothing of this treatment may still be on the wire when the next starts.
    outstanding = len(socks)
    deadline = time.perf_counter() + 0.5
    while outstanding > 0 and time.perf_counter() < deadline:
        for fd, _ in ep.poll(0.05):
            s = socks[by_fd[fd]]
            try:
                k = len(s.recv(4096))
            except BlockingIOError:
                continue
            if tcp:
                got[by_fd[fd]] += k
                while got[by_fd[fd]] >= len(PAYLOAD):
                    got[by_fd[fd]] -= len(PAYLOAD)
                    outstanding -= 1
            else:
                outstanding -= 1
    if tcp and any(got):
        raise FwbenchError(f"{lay.kind}: TCP echo out of step")
    per = 1e9 / max(n, 1)
    du, ds, dbusy = (c1[i] - c0[i] for i in range(3))
    drv = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / wall
    return Sample(n / wall, ds * per, (du + ds) * per, drv,
                  (sum(e1) - sum(e0)) / wall, max(dbusy - du - ds, 0.0) / wall, lost)


# --- the run -------------------------------------------------------------------------

def ratio_line(label: str, num: list[float], den: list[float]) -> str:
    """Median ratio, the 95 % bootstrap interval of the paired per-round ratios'
    median, and their range: a round another tenant disturbed widens the range
    but hardly the interval."""
    paired = [x / y for x, y in zip(num, den)]
    r = statistics.median(num) / statistics.median(den)
    rng = random.Random(0)
    boots = sorted(statistics.median(rng.choices(paired, k=len(paired))) for _ in range(2000))
    lo, hi = boots[50], boots[1949]
    return (f"{label} {r:.2f} (CI {lo:.2f}..{hi:.2f}, paired range "
            f"{min(paired):.2f}..{max(paired):.2f})")


def one_size(n: int, a, rng: random.Random, created: list[str], tag: str) -> list[str]:
    order = list(LAYOUTS)
    rng.shuffle(order)
    lays = {k: Layout(k, n, tag) for k in LAYOUTS}
    rows: list[str] = []
    softirqd = ksoftirqd_pids()
    try:
        for k in order:
            lays[k].build(created)
        print(f"\n== N = {n} clients ==  built in order {' '.join(order)}", flush=True)
        for k in LAYOUTS:
            lays[k].start(a.proto)
        treatments = [(k, p) for p in a.proto for k in LAYOUTS]
        got: dict[tuple[str, str], list[Sample]] = {t: [] for t in treatments}
        for k, p in treatments:  # one unrecorded pass: caches, bridge learning, TCP windows
            drive(lays[k], p, 0.2, 0.05, softirqd)
        for rnd in range(a.rounds):
            rng.shuffle(treatments)
            for t in treatments:
                got[t].append(drive(lays[t[0]], t[1], a.duration, a.warmup, softirqd))
            print(f"round {rnd + 1}: " + "  ".join(
                f"{k}/{p} {got[(k, p)][-1].echoes_per_s / 1e3:.1f}k"
                for p in a.proto for k in LAYOUTS)
                  + f"   (order: {' '.join(k + '/' + p for k, p in treatments)})", flush=True)
        tord = list(LAYOUTS)
        rng.shuffle(tord)
        for k in tord:
            lays[k].teardown(created)
        for p in a.proto:
            base = got[("addresses", p)]
            for k in LAYOUTS:
                ss = got[(k, p)]
                rate = [s.echoes_per_s for s in ss]
                kern = [s.kernel_ns for s in ss]
                ours = [s.ours_ns for s in ss]
                line = (f"{n:>4} {p:<4} {k:<10} {statistics.median(rate) / 1e3:7.1f}k "
                        f"[{min(rate) / 1e3:.1f}..{max(rate) / 1e3:.1f}]  kern "
                        f"{statistics.median(kern):6.0f} ns  all {statistics.median(ours):6.0f} ns"
                        f"  drv {statistics.median(s.driver_cpu for s in ss):.2f} "
                        f"echo {statistics.median(s.echo_cpu for s in ss):.2f} "
                        f"others {statistics.median(s.others_cpu for s in ss):.2f} CPU"
                        f"  lost {sum(s.lost for s in ss)}")
                if k != "addresses":
                    line += ("   " + ratio_line("rate B/A", rate, [s.echoes_per_s for s in base])
                             + "  " + ratio_line("kern B/A", kern, [s.kernel_ns for s in base]))
                rows.append(line)
        for k in LAYOUTS:
            L = lays[k]
            freed = "-" if L.freed_s is None else f"{L.freed_s:.2f} s"
            rows.append(f"{n:>4} build {k:<10} {L.build_s:6.2f} s  teardown {L.teardown_s:5.2f} s"
                        f" (80 % of Slab back after {freed})  Slab {L.mem_kb['Slab'] / 1024:+6.1f} MiB"
                        f"  Percpu {L.mem_kb['Percpu'] / 1024:+5.1f} MiB  MemAvailable "
                        f"{-L.mem_kb['MemAvailable'] / 1024:+6.1f} MiB  (Slab "
                        f"{L.mem_kb['Slab'] / n:+.0f} KiB/client)")
    finally:
        for L in lays.values():
            L.teardown(created)
    return rows


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a SIGTERM too goes through the finally that cleans up


def main() -> int:
    ap = argparse.ArgumentParser(
        description="Seed 001: N clients as addresses in one namespace or as namespaces, "
                    "measured interleaved.")
    ap.add_argument("--clients", type=int, nargs="+", default=[5, 40, 320])
    ap.add_argument("--proto", nargs="+", choices=["udp", "tcp"], default=["udp", "tcp"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=0.8, help="seconds counted per measurement")
    ap.add_argument("--warmup", type=float, default=0.1, help="seconds before counting starts")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise FwbenchError("needs root (network namespaces)")
    if (os.cpu_count() or 1) < 2:
        raise FwbenchError("needs 2 CPUs: the driver runs on CPU 0, the echo server on CPU 1")
    if any(not 1 <= n <= MAX_CLIENTS for n in a.clients):
        raise FwbenchError(f"--clients: each between 1 and {MAX_CLIENTS}")
    rng = random.Random(a.seed)
    env = environment.collect({})
    tag = secrets.token_hex(3)
    print(f"machine: {env['cpu_model']}, {env['cpus']} CPUs; kernel {env['kernel']}; "
          f"{env['collected_at']}")
    print(f"namespaces fwb-{tag}-*; {a.rounds} rounds x {len(LAYOUTS) * len(a.proto)} treatments, "
          f"{a.duration:g} s each; 64 B echo, one request in flight per client; "
          f"driver on CPU 0, echo server on CPU 1; CPU from /proc/stat, "
          f"{os.sysconf('SC_CLK_TCK')} ticks/s")
    os.sched_setaffinity(0, {0})
    signal.signal(signal.SIGTERM, _interrupted)
    created: list[str] = []
    rows: list[str] = []
    try:
        for n in a.clients:
            rows += one_size(n, a, rng, created, tag)
    finally:
        if created:
            delete_netns(created)
        left = [ln.split()[0] for ln in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()
                if ln.startswith(f"fwb-{tag}-")]
        if left:
            print(f"LEFT OVER: {len(left)} namespaces fwb-{tag}-*", file=sys.stderr)
    print("\nN    proto layout     echoes/s median [min..max]; CPU per echo (median) of driver + "
          "echo server + ksoftirqd: kern = system incl. softirq, all = user + system; "
          "CPUs used; ratios B/A = layout/addresses, of medians")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    run_main(main, "clients_layout")
