"""What every provider's testbed offers its callers, built on its executor alone:
the backends, verification, instruments and experiments ask a testbed (a
`netns.NetnsTestbed` or an `hosts.SshTestbed`) for commands, processes, counters
and settings through this class and cannot tell which provider built it.

A provider builds and removes the topology (`build`, `destroy`) and says whether
it is still the one built (`health`); `configure` here sets what both providers
set the same way once the links are there: offloads, RPS and a quiet start.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

from fwbench.errors import FwbenchError
from fwbench.testbed.executor import Executor
from fwbench.testbed.topology import Port, Topology


# Round trips (Testbed.round_trip): how many packets a second the server's sink
# sends back, at most, and the share at open throttle, where the rate is not known
# before the trial (traffic.native.reflect_every).
REFLECT_PPS = 5_000
OPEN_THROTTLE_EVERY = 256


@dataclass(frozen=True)
class IfStats:
    rx_packets: int
    tx_packets: int
    rx_dropped: int
    tx_dropped: int
    t: float  # time.monotonic() when read


PROBE_TABLES = {"client": 101, "server": 102}


class Testbed(ABC):
    """Build with `with SomeTestbed(...) as tb:`; leaving the block removes it all.
    `recorded` is what the build measured or set, for the session record."""

    provider = "?"
    # Traffic of the firewall host's own passes its input and output chains (a
    # real host's SSH session): their rule counters hold more than fwbench sent.
    own_traffic = False

    def __init__(self, topo: Topology, executor: Executor):
        self.topo = topo
        self.executor = executor
        self._procs: list[subprocess.Popen] = []
        self.recorded: dict = {}
        # The client and the server read one CLOCK_MONOTONIC (one kernel): the
        # engine can time a packet from the sender's stamp to the sink's arrival.
        self.one_clock = True
        # The hosts whose kernel is not this machine's (their boot_ids differ): they
        # read another CLOCK_MONOTONIC than fwbench's own process.
        self.other_clocks: list[str] = []
        # The firewall's policy-routing tables (and rule preferences of the same
        # numbers) the packet injector uses, per side packets come in from
        # (fwbench.testbed.packets). A namespace of fwbench's has none of its own;
        # on a real host the ssh provider chooses numbers the host does not use.
        self.probe_tables = dict(PROBE_TABLES)

    @property
    def round_trip(self) -> bool:
        """Whether the engine times round trips (the server's sink reflecting a sample
        of the packets to a sink on the client) rather than one-way latency."""
        mode = self.topo.settings.latency
        return mode == "round-trip" or (mode == "auto" and not self.one_clock)

    def settle_latency(self, clocks: str) -> None:
        """Record how latency is timed, given `clocks` (why the client and server
        share a clock or not); refuse one-way latency across clocks."""
        if self.topo.settings.latency == "one-way" and not self.one_clock:
            raise FwbenchError(f"latency = \"one-way\" needs the client and the server on "
                               f"one clock, and {clocks}: use \"round-trip\" or \"auto\"")
        if self.round_trip:
            why = ("as the scenario asks" if self.one_clock
                   else "as they are on separate clocks")
            self.recorded["timing"] = {
                "kind": "round trip", "clocks": clocks,
                "how": f"round trips, {why}: the server's XDP sink sends every packet "
                       f"whose sequence number is a multiple of a power of two back to "
                       f"its source (about {REFLECT_PPS:,} packets/s, 1 in "
                       f"{OPEN_THROTTLE_EVERY} at open throttle) and a sink on the client "
                       f"times them against the sender's schedule; loss is still counted "
                       f"one way, at the server, and the firewall's CPU per packet holds "
                       f"the reflected packets' way back"}
        else:
            self.recorded["timing"] = {
                "kind": "one-way", "clocks": clocks,
                "how": "one-way, from the sender's stamp to the server sink's arrival"}

    # --- lifecycle ------------------------------------------------------------

    def __enter__(self):
        try:
            self.build()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    @abstractmethod
    def build(self) -> None:
        """Make the topology, ready for traffic."""

    @abstractmethod
    def destroy(self) -> None:
        """Stop what was started and undo everything the build and the run did."""

    @abstractmethod
    def health(self) -> str | None:
        """Why this is no longer the testbed that was built, or None."""

    def cpus(self, role: str) -> int:
        """How many CPUs the machine of host `role` has."""
        return int(self.exec(role, ["nproc", "--all"]).strip())

    def machine_file(self, role: str, path: str) -> str:
        """A machine-wide file (/proc/stat, /proc/meminfo) of the machine host
        `role` runs on."""
        return self.exec(role, ["cat", path])

    def hush(self, on: bool) -> None:
        """Stop (`on`) or allow again the IP traffic the hosts send of their own
        accord on the test links, so that rule counters count fwbench's packets
        alone. On from the start of a rule-set load (Backend.apply) or of a
        verification until the end of the packet exchange that follows
        (testbed.packets.restore); off while traffic is measured, where stopping it
        may cost. Here nothing: a provider that cannot stop it says so in
        `own_traffic`, and the counters that traffic may reach are not judged."""

    def firewall_change(self) -> contextlib.AbstractContextManager:
        """Around a change of the firewall's rules: on a real host, a guard against
        a rule set that cuts fwbench off it (hosts.SshTestbed); here nothing."""
        return contextlib.nullcontext()

    def driver(self, port: Port) -> str:
        """The driver of a test interface, as `ethtool -i` names it ("veth", "ice")."""
        info = self.exec(port.host, ["ethtool", "-i", port.ifname])
        return next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                     if ln.startswith("driver:")), "")

    def port_name(self, port: Port) -> str:
        """How records name a port: its interface (unique on one machine)."""
        return port.ifname

    def stop_processes(self) -> None:
        for p in self._procs:
            stop(p)
        self._procs.clear()

    # --- settings both providers make alike -----------------------------------------

    def configure(self) -> None:
        """Offloads and RPS on the test interfaces, then wait for quiet links."""
        self._set_offloads()
        self._set_rps()
        self._wait_quiet()

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

    def _set_offloads(self) -> None:
        t = self.topo
        state = "on" if t.settings.offloads else "off"
        # GRO puts veth's receive path in NAPI mode, without which veth drops the
        # XDP frames sent into it: the XDP sender's on the firewall's client side,
        # the server sink's reflected ones on its server side (a NIC needs none).
        napi = ({(p.host, p.ifname) for p in self.firewall_ingress()}
                if t.settings.ingress_gro else set())
        if self.round_trip:
            napi |= {(p.host, p.ifname) for p in self.firewall_ports("server")
                     if self.driver(p) == "veth"}
        got = {}
        for p in t.ports:
            gro = "on" if (p.host, p.ifname) in napi else state
            self.exec(p.host, ["ethtool", "-K", p.ifname, "gro", gro, "gso", state,
                               "tso", state])
            got[self.port_name(p)] = _read_offloads(self.exec(p.host, ["ethtool", "-k", p.ifname]))
        self.recorded["offloads"] = got

    def firewall_ingress(self) -> list:
        """The firewall's ports that face a client: where the traffic under test enters."""
        return self.firewall_ports("client")

    def firewall_ports(self, facing: str) -> list:
        """The firewall's ports whose peer is a host of kind `facing`."""
        t = self.topo
        kind = {h.role: h.kind for h in t.hosts}
        return [port for a, b in t.links for port, peer in ((a, b), (b, a))
                if kind[port.host] == "firewall" and kind[peer.host] == facing]

    def _set_rps(self) -> None:
        s = self.topo.settings
        t = self.topo
        kind = {h.role: h.kind for h in t.hosts}
        cpu = {h.role: h.cpu for h in t.hosts}
        for role in t.roles:
            ncpu = self.cpus(role)
            want = cpu[role] if cpu[role] is not None else {
                "client": s.sender_cpu, "firewall": s.firewall_cpu,
                "server": s.server_cpu}[kind[role]]
            if not 0 <= want < ncpu:
                raise FwbenchError(f"testbed: CPU {want} does not exist on {role} (it "
                                   f"has {ncpu})")
        # CPU mask per port; 0 turns RPS off explicitly. The firewall's ingress from
        # the clients, and the servers' ingress.
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
            rps[self.port_name(port)] = self.exec(port.host, ["cat", path]).strip()
        self.recorded["rps_cpus"] = rps
        self.recorded["pinning"] = {"sender_cpu": s.sender_cpu, "server_cpu": s.server_cpu}

    # --- running things inside -------------------------------------------------

    def ip(self, role: str, *args: str) -> str:
        return self.exec(role, ["ip", *args])

    def exec(self, role: str, argv: list[str], **kw) -> str:
        return self.executor.output(role, argv, **kw)

    def run(self, role: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return self.executor.run(role, argv, **kw)

    def sysctl(self, role: str, *settings: str) -> None:
        self.exec(role, ["sysctl", "-q", "-w", *settings])

    def spawn(self, role: str, argv: list[str], cpu: int | None = None,
              **popen_kw) -> subprocess.Popen:
        """Start a process on a host; it is stopped when the testbed goes."""
        p = self.executor.spawn(role, argv, cpu=cpu, **popen_kw)
        self._procs.append(p)
        return p

    def forget(self, p: subprocess.Popen) -> None:
        stop(p)
        if p in self._procs:
            self._procs.remove(p)

    def stats(self, port: Port) -> IfStats:
        out = self.ip(port.host, "-s", "-j", "link", "show", "dev", port.ifname)
        t = time.monotonic()
        s = json.loads(out)[0]["stats64"]
        return IfStats(s["rx"]["packets"], s["tx"]["packets"], s["rx"]["dropped"],
                       s["tx"]["dropped"], t)

    def taken_in(self) -> int | None:
        """IPv4 + IPv6 packets the firewall's IP layer has taken in: it grows while
        the firewall still works through its input queue, even when it drops them
        all (verification waits on it); None when the testbed has no such count."""
        text = self.exec("fw", ["cat", "/proc/net/snmp", "/proc/net/snmp6"])
        lines = text.splitlines()
        n = 0
        for head, vals in zip(lines, lines[1:]):
            if head.startswith("Ip: ") and vals.startswith("Ip: ") and not head[4].isdigit():
                n += int(vals.split()[head.split().index("InReceives")])
        for ln in lines:
            if ln.startswith("Ip6InReceives"):
                n += int(ln.split()[1])
        return n

    def snmp(self, role: str) -> dict[str, int]:
        """/proc/net/snmp of a host as {"Ip:InReceives": n, ...}."""
        lines = self.exec(role, ["cat", "/proc/net/snmp"]).splitlines()
        out = {}
        for head, vals in zip(lines[::2], lines[1::2]):
            proto, *names = head.split()
            for n, v in zip(names, vals.split()[1:]):
                out[f"{proto}{n}"] = int(v)
        return out

    def ping(self, dst: str, count: int, interval_s: float = 0.01, payload: int = 56,
             timeout_s: float = 2.0) -> subprocess.CompletedProcess:
        return self.run("client", ["ping", "-n", "-c", str(count), "-i", f"{interval_s:g}",
                                   "-s", str(payload), "-W", f"{timeout_s:g}", dst],
                        check=False, timeout=count * interval_s + timeout_s + 10)


def ports_health(tb: Testbed) -> str | None:
    """Why the built ports are not as built (one gone, down or without its address)
    or the firewall no longer forwards, or None."""
    t = tb.topo
    for role in t.roles:
        cp = tb.run(role, ["ip", "-j", "addr", "show"], check=False)
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
            on = tb.exec(h.role, ["sysctl", "-n", "net.ipv4.ip_forward"]).strip()
            if on != "1":
                return f"forwarding is off in {h.role}"
    return None


def stop(p: subprocess.Popen) -> None:
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
