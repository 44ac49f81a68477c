"""The `ssh` provider: the scenario's topology on real hosts, driven over SSH.

Building (`SshTestbed.build`), in order, each step on the hosts in parallel:

1. connect to every host (fwbench.testbed.ssh); a host that cannot be reached
   or refuses the key is one line, and nothing has changed anywhere;
2. check, reading only: the tools and kernel features the host's part needs, its
   architecture against this machine's builds, the test interfaces (they exist,
   carry neither the SSH session nor a default route, have no XDP program or tc
   hook of another's), that no run, live or killed, holds it, and on the
   firewall the routing tables the packet injector may use;
3. make fwbench's private directory there afresh (fwbench.owned: its marker
   names what fwbench writes in it), start its lease (a process that ends with
   this run's SSH session), and save the host's state (fwbench.testbed.hoststate)
   there, before any change; what fwbench adds later is recorded there first;
4. copy the engine, the eBPF loader and the packet agent's Python there, each
   checked by its sha256 on the host;
5. empty the firewall's tables, as a fresh namespace's are; give the test
   interfaces fwbench's addresses, static neighbours and routes, forwarding on
   the firewall; offloads and RPS as the scenario says.

`destroy` (normal end, error, SIGINT, SIGTERM) ends every process fwbench
started on the hosts, puts each host's state back, checks it against the saved
one and removes the private directory (only what fwbench wrote there). After a
SIGKILL, `fwbench clean --inventory` does the same from the saved state on each
host (`clean`), and leaves a host alone while a live run's lease holds it.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import platform
import secrets
import signal
import subprocess
import sys
import time
import zipfile
from typing import Sequence
from dataclasses import replace
from pathlib import Path

from fwbench import __version__, owned
from fwbench.errors import FwbenchError
from fwbench.testbed import hoststate
from fwbench.testbed import packets
from fwbench.testbed.base import PROBE_TABLES, Testbed, ports_health
from fwbench.testbed.inventory import Host, Inventory
from fwbench.testbed.ssh import SshExecutor, connect_all, parallel
from fwbench.testbed.topology import Link, Topology

# Every host runs these (tool -> Debian package); per kind, more.
TOOLS = {"ip": "iproute2", "tc": "iproute2", "ethtool": "ethtool", "sysctl": "procps",
         "taskset": "util-linux", "python3": "python3", "sha256sum": "coreutils",
         "ldconfig": "libc-bin"}
KIND_TOOLS = {
    "client": {"ping": "iputils-ping", "iperf3": "iperf3"},
    "server": {"iperf3": "iperf3"},
    "firewall": {"iptables-legacy": "iptables", "iptables-nft": "iptables",
                 "ip6tables-legacy": "iptables", "ip6tables-nft": "iptables",
                 "iptables-legacy-save": "iptables", "iptables-nft-save": "iptables",
                 "nft": "nftables", "ipset": "ipset", "conntrack": "conntrack"},
}
# Shared libraries of the copied binaries, by Debian package, for a clear message.
LIBRARIES = {"libbpf.so": "libbpf1", "libelf.so": "libelf1", "libz.so": "zlib1g",
             "libnftnl.so": "libnftnl11", "libmnl.so": "libmnl0"}
STATE = "state.json"


def private_dir(h: Host, run_id: str) -> str:
    """A fresh name for fwbench's private directory on the host, in its workdir:
    made anew for every testbed, never one that exists (the role is in the name
    because the lab's hosts share a filesystem; the marker says it too)."""
    return f"{h.workdir.rstrip('/')}/{h.role}-{run_id}-{secrets.token_hex(3)}"


def owned_call(ex: SshExecutor, h: Host, cmd: str, **args):
    """fwbench.owned's `cmd` run on the host by its python3 (that module is the
    program, on standard input): the one decider of what fwbench may remove."""
    cp = ex.run(h.role, ["python3", "-", cmd, json.dumps(args)], input=owned.source(),
                check=False)
    if cp.returncode:
        why = next((ln for ln in (cp.stderr or "").splitlines() if ln.strip()),
                   f"exit {cp.returncode}")
        raise FwbenchError(f"{h.where}: {why}")
    return json.loads(cp.stdout)


# How long a lease may outlive its run's session: sshd notices a controller killed
# with SIGKILL and ends the session's processes within about a second (seen here).
LEASE_GRACE_S = 5.0


def private_dirs(ex: SshExecutor, h: Host) -> list[dict]:
    """fwbench's private directories of this host's role in its workdir, oldest
    first: a live run's (`live`: its lease's PID), or a killed run's, which could
    not remove its own (fwbench.owned.listing). A lease still alive is given
    LEASE_GRACE_S to end, as a just-killed run's does."""
    end = time.monotonic() + LEASE_GRACE_S
    while True:
        dirs = owned_call(ex, h, "list", top=h.workdir, match={"role": h.role})
        if not any(d["live"] for d in dirs) or time.monotonic() > end:
            return dirs
        time.sleep(0.25)


def make_private(ex: SshExecutor, h: Host, run_id: str, files: list[str]) -> str:
    """Make the host's private directory (and its workdir, if missing), each with
    fwbench's marker; `files` are the names the run copies into its bin/."""
    d = private_dir(h, run_id)
    about = {"role": h.role, "host": h.address, "run": run_id,
             "controller": platform.node(), "fwbench": __version__}
    owned_call(ex, h, "make", about=about, dirs=[
        {"path": d, "what": f"fwbench's private directory of {h.role} for run {run_id}",
         "files": [STATE, "watchdog-[0-9]*", owned.LEASE, owned.LEASE + ".tmp"]},
        {"path": f"{d}/pids", "what": "the PIDs of what fwbench started", "files": ["[0-9]*"]},
        {"path": f"{d}/bin", "what": "what fwbench copied to the host", "files": files}])
    return d


def artifacts(programs: list[Path]) -> dict[str, bytes]:
    """What the hosts need from this machine: local path -> bytes. The packet
    agent's Python goes as one zip of fwbench's pure-Python modules."""
    out = {str(p): Path(p).read_bytes() for p in programs}
    out["fwbench.zip"] = python_zip()
    return out


def shared_libraries(programs: list[Path]) -> set[str]:
    """The shared libraries (sonames) the programs load, as ldd lists them here,
    but the C library's own."""
    out = set()
    for p in programs:
        cp = subprocess.run(["ldd", str(p)], capture_output=True, text=True)
        for line in cp.stdout.splitlines():
            name = line.split()[0] if "=>" in line else ""
            if name and not name.startswith(("libc.so", "libm.so", "ld-linux")):
                out.add(name)
    return out


def python_zip() -> bytes:
    root = Path(__file__).resolve().parents[1]   # src/fwbench
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(root.rglob("*.py")):
            info = zipfile.ZipInfo(str(Path("fwbench") / f.relative_to(root)),
                                   (2020, 1, 1, 0, 0, 0))   # same bytes every time
            z.writestr(info, f.read_bytes())
    return buf.getvalue()


def _name(local: str) -> str:
    return Path(local).name


class SshTestbed(Testbed):
    provider = "ssh"
    own_traffic = True    # the SSH session itself

    def __init__(self, topo: Topology, inventory: Inventory, programs: list[Path],
                 firewalls: Sequence[hoststate.Firewall]):
        """`programs`: the files the hosts run (the engine, the eBPF loader and
        objects), copied there; a command naming one runs the host's copy.
        `firewalls`: every kernel firewall a backend may load into
        (backends.registry.firewalls), each saved, emptied and put back."""
        super().__init__(topo, None)   # the executor comes with the connections
        self.inventory = inventory
        self.programs = programs
        self.firewalls = tuple(firewalls)
        self.libraries = shared_libraries(programs)
        self.hosts = {r: inventory.host(r) for r in topo.roles}
        self.executor: SshExecutor | None = None
        self._saved: dict[str, dict] = {}      # role -> the state saved on it
        self._tracked: dict[str, set[str]] = {r: set() for r in topo.roles}
        self._made: set[str] = set()           # roles whose private directory we made
        self._dogs = 0                         # watchdogs armed (firewall_change)
        self.notes: list[str] = []

    def port_name(self, port) -> str:
        return f"{port.host}:{port.ifname}"

    @contextlib.contextmanager
    def firewall_change(self):
        """A rule set can drop the SSH session fwbench drives the firewall host by
        (an INPUT chain of policy drop, say), leaving the host with it until someone
        reaches it another way. So, as iptables-apply does, a watchdog is armed on
        the host first: unless disarmed within the inventory's watchdog_s (90 s by
        default; a load of 100,000 rules takes seconds), it marks that it fired and
        empties the host's firewall, and the session comes back. Disarming it is the
        proof the session survived."""
        dogs = {}
        empty = hoststate.emptying_script(self.firewalls)
        for r in (h.role for h in self.topo.hosts if h.kind == "firewall"):
            self._dogs += 1
            mark = f"{self.executor.rundir[r]}/watchdog-{self._dogs}"
            # One process while it waits (a shell's `sleep` would outlive a killed
            # shell, holding the session's channel): any signal ends it whole.
            dogs[r] = (mark, self.spawn(r, [sys.executable, "-c", (
                f"import subprocess, time; time.sleep({self.hosts[r].watchdog_s:g}); "
                f"open({mark!r}, 'w').close(); "
                f"subprocess.run(['sh', '-c', {empty!r}])")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        try:
            yield
        finally:
            for r, (mark, dog) in dogs.items():
                h = self.hosts[r]
                try:
                    self.forget(dog)
                    fired = self.executor.run(r, ["test", "-e", mark], check=False,
                                              timeout=h.watchdog_s + 60).returncode == 0
                except (FwbenchError, OSError, subprocess.TimeoutExpired) as e:
                    raise FwbenchError(f"{h.where}: lost after a rule-set change ({e}); "
                                       f"its watchdog empties the host's firewall "
                                       f"{h.watchdog_s:g} s after the change began, then "
                                       f"`fwbench clean --inventory {self.inventory.path}` "
                                       f"puts the host back") from None
                if fired:
                    raise FwbenchError(f"{h.where}: the rule set cut fwbench's SSH session "
                                       f"to the host, and after {h.watchdog_s:g} s its "
                                       f"watchdog emptied the host's firewall")

    # --- building ----------------------------------------------------------------------

    def build(self) -> None:
        roles = list(self.topo.roles)
        conns = connect_all([self.hosts[r] for r in roles])
        self.executor = SshExecutor(conns, {})   # private directories: _prepare
        facts = parallel(self._preflight, roles)
        for r in roles:
            self.probe_tables = facts[r].get("probe_tables", self.probe_tables)
        self.topo = _on_hosts(self.topo, self.hosts, facts)
        self.recorded["hosts"] = {r: f["environment"] for r, f in facts.items()}
        here = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        self.other_clocks = [r for r in roles if facts[r]["boot_id"] != here]
        ends = [h.role for h in self.topo.hosts if h.kind in ("client", "server")]
        self.one_clock, clocks = shared_clock(self.hosts, {r: facts[r]["boot_id"]
                                                            for r in ends})
        self.settle_latency(clocks)
        files = artifacts(self.programs)
        parallel(lambda r: self._prepare(r, files), roles)
        parallel(self._links, roles)
        self.configure()

    def _preflight(self, role: str) -> dict:
        """Read-only checks of one host; its facts for the build."""
        h, ex = self.hosts[role], self.executor
        kind = self.topo.host(role).kind
        hoststate.require_tools(ex, role, {**TOOLS, **KIND_TOOLS.get(kind, {})}, h.where)
        env = _environment(ex, role, list(h.ports.values()))
        if env["machine"] != platform.machine():
            raise FwbenchError(f"{h.where} is {env['machine']}; fwbench's engine and "
                               f"eBPF loader here are built for {platform.machine()}: "
                               f"run fwbench from a {env['machine']} machine")
        if not env["python_ok"]:
            raise FwbenchError(f"{h.where}: python3 is older than 3.11 (the packet agent "
                               f"needs 3.11)")
        if not env["btf"]:
            raise FwbenchError(f"{h.where}: kernel {env['kernel']} has no BTF "
                               f"(/sys/kernel/btf/vmlinux), which the engine's XDP "
                               f"programs need")
        # Another fwbench run first: what a live run has made there (its sink table,
        # its XDP programs) must be named as that run's, not as the host's own.
        dirs = private_dirs(ex, h)
        live = [d for d in dirs if d["live"]]
        if live:
            m = live[0]["marker"]
            raise FwbenchError(f"{h.where} is in use by another fwbench run (started "
                               f"{m.get('created', '?')} from {m['about'].get('controller', '?')}, "
                               f"its process {live[0]['live']} there): wait for it to end")
        waiting = [d["path"] for d in dirs if STATE in d["holds"]]
        if waiting:
            raise FwbenchError(f"{h.where} still holds the saved state of a run that did "
                               f"not end (in {waiting[0]}): put it back first with "
                               f"fwbench clean --inventory {self.inventory.path}")
        links = {x["ifname"]: x for x in hoststate.parsed(
            ex.output(role, ["ip", "-j", "-d", "link", "show"]))}
        session = ex.output(role, ["sh", "-c", "echo $SSH_CONNECTION"]).split()
        carrying = _carrying(ex, role, session)
        defaults = {r.get("dev") for v in ("-4", "-6") for r in hoststate.parsed(
            ex.output(role, ["ip", v, "-j", "route", "show", "default"]))}
        for peer, ifname in h.ports.items():
            if ifname not in links:
                raise FwbenchError(f"{h.where}: test interface {ifname} (facing {peer}) "
                                   f"does not exist")
            if ifname in carrying:
                raise FwbenchError(f"{h.where}: test interface {ifname} carries the SSH "
                                   f"session; fwbench will not touch it")
            if ifname in defaults:
                raise FwbenchError(f"{h.where}: test interface {ifname} carries the "
                                   f"host's default route; fwbench will not touch it")
            if links[ifname].get("xdp"):
                raise FwbenchError(f"{h.where}: test interface {ifname} has an XDP "
                                   f"program attached; fwbench would replace it")
            kinds = {q["kind"] for q in hoststate.parsed(
                ex.output(role, ["tc", "-j", "qdisc", "show", "dev", ifname]))}
            if kinds & {"clsact", "ingress"}:
                raise FwbenchError(f"{h.where}: test interface {ifname} has a tc "
                                   f"{'/'.join(sorted(kinds & {'clsact', 'ingress'}))} "
                                   f"hook; fwbench would replace it")
        have = ex.output(role, ["ldconfig", "-p"])
        missing = sorted(lib for lib in self.libraries if f"\t{lib} (" not in have)
        if missing:
            pkgs = sorted({p for lib, p in LIBRARIES.items()
                           if any(m.startswith(lib) for m in missing)})
            raise FwbenchError(f"{h.where} lacks the libraries {', '.join(missing)} "
                               f"(Debian: apt-get install {' '.join(pkgs)})")
        out = {}
        if kind == "firewall":
            out["probe_tables"] = dict(zip(PROBE_TABLES, hoststate.free_tables(
                ex, role, len(PROBE_TABLES), min(PROBE_TABLES.values()))))
        elif f"table netdev {packets.SINK_TABLE}" in ex.output(
                role, ["nft", "list", "tables"]).splitlines():
            raise FwbenchError(f"{h.where} holds an nftables table netdev "
                               f"{packets.SINK_TABLE}, a name fwbench's packet injector "
                               f"uses and removes; fwbench will not touch it")
        return {**out, "macs": {n: links[n]["address"] for n in h.ports.values()},
                "boot_id": env.pop("boot_id"), "cpus": env["cpus"], "environment": env}

    def _prepare(self, role: str, files: dict[str, bytes]) -> None:
        """Save the host's state, then copy what it runs."""
        h, ex = self.hosts[role], self.executor
        d = make_private(ex, h, self.topo.run_id, sorted({_name(f) for f in files}))
        ex.rundir[role] = d
        self._made.add(role)
        # The directory's lease: a process that lives as long as this run's SSH
        # session, so `fwbench clean --inventory` and another run can tell a live
        # run's directory from a killed one's, and leave it alone.
        self.spawn(role, ["python3", "-c", owned.source(), "hold", json.dumps({"path": d})],
                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
        keys = self._sysctl_keys(role)
        self._tracked[role] |= set(keys)
        saved = hoststate.snapshot(ex, role, list(h.ports.values()), keys, self.firewalls)
        saved["ifnames"] = list(h.ports.values())
        # What fwbench adds from here on, recorded before it is added: the put-back
        # takes away only what is written here (hoststate.restore_links).
        saved["added"] = hoststate.no_additions()
        if self.topo.host(role).kind == "firewall":
            saved["added"]["tables"] = list(self.probe_tables.values())
        self._saved[role] = saved
        self._write_state(role)
        digests = {}
        for local, data in files.items():
            remote = f"{d}/bin/{_name(local)}"
            ex.put(role, data, remote, 0o700)
            digests[remote] = hashlib.sha256(data).hexdigest()
        got = dict(reversed(ln.split(maxsplit=1)) for ln in
                   ex.output(role, ["sha256sum", *digests]).splitlines())
        for remote, want in digests.items():
            if got.get(remote) != want:
                raise FwbenchError(f"{h.where}: the copy of {_name(remote)} does not hash "
                                   f"to what was sent")
        ex.translate[role] = {local: f"{d}/bin/{_name(local)}" for local in files}
        ex.python[role] = ["env", f"PYTHONPATH={d}/bin/fwbench.zip", "python3"]

    def _sysctl_keys(self, role: str) -> list[str]:
        """The sysctls the build writes on this host."""
        ifs = list(self.hosts[role].ports.values())
        keys = [f"net.ipv6.conf.{i}.{k}" for i in ifs for k in ("accept_dad", "addr_gen_mode")]
        if self.topo.host(role).kind == "firewall":
            keys += ["net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"]
        return keys

    def _write_state(self, role: str) -> None:
        state = {"role": role, "saved": self._saved[role],
                 "tracked": sorted(self._tracked[role])}
        self.executor.put(role, json.dumps(state).encode(),
                          f"{self.executor.rundir[role]}/{STATE}")

    def _links(self, role: str) -> None:
        """fwbench's addresses, neighbours and routes on the host's test interfaces;
        forwarding on, and the tables empty, on a firewall."""
        t = self.topo
        h = self.topo.host(role)
        added = self._saved[role]["added"]
        if h.kind == "firewall":
            added["firewall"] = True
            self._write_state(role)
            _empty_firewall(self.executor, role, self.firewalls)
        ports = t.ports_of(role)
        self.sysctl(role, *[f"net.ipv6.conf.{p.ifname}.{k}={v}" for p in ports
                            for k, v in (("accept_dad", 0), ("addr_gen_mode", 1))])
        lines = []
        for p in ports:
            ours = [f"{p.ip4}/{p.prefix4}", f"{p.ip6}/{p.prefix6}",
                    *(f"{a}/32" for a in p.extra4), *(f"{a}/128" for a in p.extra6)]
            added["addresses"].setdefault(p.ifname, []).extend(ours)
            lines.append(f"link set dev {p.ifname} mtu {t.settings.mtu}")
            lines += [f"addr add {a} dev {p.ifname}{' nodad' if ':' in a else ''}"
                      for a in ours]
            lines.append(f"link set dev {p.ifname} up")
        for port, peer in t.neighbours():
            if port.host == role:
                for a in (peer.ip4, peer.ip6):
                    added["neighbours"].setdefault(port.ifname, []).append(a)
                    lines.append(f"neigh replace {a} lladdr {peer.mac} dev {port.ifname} "
                                 f"nud permanent")
        for r in t.routes_of(role):
            if r.local:
                # Undoing one on a real host is not written yet; nothing asks for it.
                raise FwbenchError(f"{role}: the ssh provider adds no local routes "
                                   f"({r.dst}); use the netns provider")
            added["routes"].append({"v": f"-{r.version}", "dst": r.dst, "gateway": r.via})
            lines.append(f"route add {r.dst} via {r.via}")
        self._write_state(role)
        self.executor.run(role, ["ip", "-batch", "-"],
                          input="".join(ln + "\n" for ln in lines))
        if h.kind == "firewall":
            self.sysctl(role, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")

    # --- what callers ask ---------------------------------------------------------------

    def sysctl(self, role: str, *settings: str) -> None:
        """Write sysctls; one fwbench has not written before is saved first."""
        keys = [s.split("=", 1)[0] for s in settings]
        new = [k for k in keys if k not in self._tracked[role]]
        if new:
            self._saved[role]["sysctls"].update(hoststate.sysctls(self.executor, role, new))
            self._tracked[role] |= set(new)
            self._write_state(role)
        super().sysctl(role, *settings)

    def cpus(self, role: str) -> int:
        return self.recorded["hosts"][role]["cpus"]

    def taken_in(self) -> None:
        """None: a real host has no count that proves its IP layer took fwbench's
        packets in. Its host-wide one counts the management traffic too (this SSH
        session's, so it never stands still), and its test interfaces' receive
        counts are taken a queue earlier: with them, a firewall busy for 50 ms
        (the settle time after the count) had packets declared dropped that were
        only late (2 of 168 trials of a full quick run). Verification then waits
        until nothing was captured for its quiet time, as it does for packets the
        firewall drops."""
        return None

    def health(self) -> str | None:
        for role, c in self.executor.conns.items():
            if c.client is None or not c.client.get_transport() \
                    or not c.client.get_transport().is_active():
                return f"the SSH connection to {self.hosts[role].where} is lost"
        return ports_health(self)

    # --- taking it down -------------------------------------------------------------------

    def destroy(self) -> None:
        """Stop what fwbench started on the hosts and put every host back as it was.
        Signals are held off meanwhile: a second Ctrl-C must not leave a host half
        restored."""
        if self.executor is None:
            return
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            try:
                self.stop_processes()
            except FwbenchError as e:
                self.notes.append(str(e))
            results = put_back(self.executor, self.hosts, self._saved, self.notes.append,
                               self.firewalls) if self._saved else {}
            self.recorded["restored"] = {r: (not left) for r, left in results.items()}
            for r in self._made - set(self._saved):   # stopped before its state was saved
                remove_private(self.executor, r, self.hosts[r], self.notes.append)
        finally:
            self.executor.close()
            self.executor = None
            for s, h in old.items():
                signal.signal(s, h)
        for line in self.notes:
            print(f"fwbench: {line}", file=sys.stderr)


def shared_clock(hosts: dict[str, Host], boot_ids: dict[str, str]) -> tuple[bool, str]:
    """Whether the hosts of `boot_ids` (the clients and servers) read one
    CLOCK_MONOTONIC, and why.

    The engine stamps each packet with the sender's CLOCK_MONOTONIC; the sink
    times its arrival with its own. Only one kernel gives one CLOCK_MONOTONIC,
    and what tells is the boot_id. On separate clocks the engine times round
    trips instead (Testbed.round_trip)."""
    if len(set(boot_ids.values())) <= 1:
        return True, "the clients and servers run on one kernel (one boot_id)"
    where = ", ".join(hosts[r].where for r in boot_ids)
    return False, f"{where} run on separate kernels (their boot_ids differ)"


def put_back(ex: SshExecutor, hosts: dict[str, Host], saved: dict[str, dict],
             note, firewalls: Sequence[hoststate.Firewall]) -> dict[str, list[str]]:
    """Put every host of `saved` back, in phases, each on all hosts at once before
    the next: end fwbench's processes, detach its XDP programs and tc hooks and
    restore the firewall; then interfaces, routes and sysctls; then compare, and
    remove a host's private directory when everything is back. Interfaces wait for
    the hooks of every host: a veth's peer with an XDP program holds its TSO off.
    Returns what still differs per host (noted)."""
    roles = list(saved)

    def unhook(role: str) -> None:
        stop_leftovers(ex, role, ex.rundir[role])
        now = hoststate.snapshot(ex, role, saved[role]["ifnames"], [], firewalls)
        hoststate.restore_hooks_and_firewall(ex, role, saved[role], now, firewalls, note)

    def compare_restored(role: str) -> list[str]:
        h, keys = hosts[role], list(saved[role]["sysctls"])
        left = hoststate.compare(saved[role], hoststate.snapshot(
            ex, role, saved[role]["ifnames"], keys, firewalls))
        if left:
            note(f"{h.where} is not as it was: {'; '.join(left[:3])}"
                 f"{f' (and {len(left) - 3} more)' if len(left) > 3 else ''}; its saved "
                 f"state stays in {ex.rundir[role]} for fwbench clean --inventory")
        else:
            remove_private(ex, role, h, note)
        return left
    parallel(unhook, roles)
    parallel(lambda r: hoststate.restore_links(ex, r, saved[r], note), roles)
    return parallel(compare_restored, roles)


def remove_private(ex: SshExecutor, role: str, h: Host, note=lambda s: None,
                   d: str | None = None) -> None:
    """The host's private directory `d` (the executor's, by default): only what
    fwbench wrote there (fwbench.owned.remove), then the workdir above it if
    fwbench made it and it is empty. What stays is noted."""
    d = d or ex.rundir[role]
    try:
        left = owned_call(ex, h, "remove", path=d, prune=True)
    except FwbenchError as e:
        note(str(e))
        return
    if left:
        note(f"{h.where}: {d} holds what fwbench did not write ({', '.join(left[:3])}); "
             f"left there")


def stop_leftovers(ex: SshExecutor, role: str, d: str) -> None:
    """Kill every process a pid file in `d` names that still runs, the same process
    (its start time matches), then the pid files."""
    # The directory is the script's argument, never part of its text; the start
    # time is field 22 of /proc/PID/stat, counted after the command's name (which
    # may hold spaces and parentheses).
    script = ('for pf in "$1"/pids/*; do [ -f "$pf" ] || continue; '
              'read -r pid start < "$pf"; [ "$pid" = "$$" ] && continue; '
              'if [ -r "/proc/$pid/stat" ]; then '
              'now=$(sed "s/.*) //" "/proc/$pid/stat" | cut -d " " -f 20); '
              '[ "$now" = "$start" ] && kill -KILL "$pid"; fi; rm -f "$pf"; done; true')
    # (This command runs in the pid-recording wrapper too: it skips its own file.)
    ex.run(role, ["sh", "-c", script, "sh", d], check=False)


def _empty_firewall(ex: SshExecutor, role: str,
                    firewalls: Sequence[hoststate.Firewall]) -> None:
    """Every table empty, as in a new namespace: the host's own rules would be a
    second firewall in the path. They are saved and come back at the end. A
    command that fails ends the run (the host has every firewall's tools:
    KIND_TOOLS)."""
    every = {name: "" for fw in firewalls for name in fw.listings}
    for fw in firewalls:
        fw.empty_host(ex, role, every, lambda what, argv: ex.run(role, argv), zero=False)


def _carrying(ex: SshExecutor, role: str, session: list[str]) -> set[str]:
    """The interfaces the SSH session runs over: the one holding the address we
    reached, and the one the host answers us through."""
    if len(session) < 4:
        return set()
    peer, local = session[0], session[2]
    # A link-local session names its interface (fe80::1%mgmt0): that is the one.
    scoped = {a.partition("%")[2] for a in (peer, local) if "%" in a}
    if scoped:
        return scoped - {"lo"}
    out = set()
    route = hoststate.parsed(ex.output(role, ["ip", "-j", "route", "get", peer], check=False))
    out |= {r.get("dev") for r in route}
    for link in hoststate.parsed(ex.output(role, ["ip", "-j", "addr", "show"])):
        if any(a.get("local") == local for a in link.get("addr_info", [])):
            out.add(link["ifname"])
    return out - {None, "lo"}


def _environment(ex: SshExecutor, role: str, ifnames: list[str]) -> dict:
    """What run.json keeps of a host: kernel, CPU, NIC drivers and firmware,
    offloads, tool versions."""
    script = ("uname -m; uname -r; uname -v; cat /proc/sys/kernel/random/boot_id; "
              "nproc --all; hostname; "
              "python3 -c 'import sys; print(int(sys.version_info >= (3, 11)))'; "
              "[ -e /sys/kernel/btf/vmlinux ] && echo 1 || echo 0; "
              "sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1; "
              "sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '\"'")
    lines = ex.output(role, ["sh", "-c", script]).splitlines() + [""] * 10
    env = {"machine": lines[0], "kernel": f"Linux {lines[1]} {lines[2]}",
           "boot_id": lines[3], "cpus": int(lines[4] or 1), "hostname": lines[5],
           "python_ok": lines[6] == "1", "btf": lines[7] == "1", "cpu_model": lines[8],
           "os": lines[9]}
    nics = {}
    for ifname in ifnames:
        info = ex.run(role, ["ethtool", "-i", ifname], check=False).stdout
        fields = dict(ln.split(": ", 1) for ln in info.splitlines() if ": " in ln)
        nics[ifname] = {"driver": fields.get("driver"), "version": fields.get("version"),
                        "firmware": fields.get("firmware-version"),
                        "bus": fields.get("bus-info")}
    env["nics"] = nics
    versions = {}
    for name, argv in (("ip", ["ip", "-V"]), ("iptables", ["iptables-legacy", "-V"]),
                       ("nft", ["nft", "-v"]), ("ipset", ["ipset", "-v"]),
                       ("iperf3", ["iperf3", "-v"]), ("ethtool", ["ethtool", "--version"])):
        cp = ex.run(role, argv, check=False)
        text = (cp.stdout or cp.stderr).strip()
        if cp.returncode == 0 and text:
            versions[name] = text.splitlines()[0]
    env["tools"] = versions
    return env


def _on_hosts(t: Topology, hosts: dict[str, Host], facts: dict) -> Topology:
    """The topology with the inventory's interfaces (and their MACs) for its ports
    and the inventory's CPUs for its hosts."""
    def port(p, peer_role):
        h = hosts[p.host]
        try:
            ifname = h.ports[peer_role]
        except KeyError:
            raise FwbenchError(f"{h.where}: the testbed links {p.host} to {peer_role}, "
                               f"but the inventory names no port of {p.host} facing "
                               f"{peer_role}") from None
        return replace(p, ifname=ifname, mac=facts[p.host]["macs"][ifname])
    links = tuple(Link(port(a, b.host), port(b, a.host)) for a, b in t.links)
    new_hosts = tuple(replace(h, cpu=hosts[h.role].cpu if hosts[h.role].cpu is not None
                              else h.cpu) for h in t.hosts)
    s = t.settings
    by_kind = {h.kind: hosts[h.role].cpu for h in t.hosts if hosts[h.role].cpu is not None}
    settings = s.model_copy(update={
        "sender_cpu": by_kind.get("client", s.sender_cpu),
        "firewall_cpu": by_kind.get("firewall", s.firewall_cpu),
        "server_cpu": by_kind.get("server", s.server_cpu)})
    return Topology(t.run_id, new_hosts, links, t.routes, settings, t.firewall_rps,
                    t.server_rps, t.shape + (("provider", "ssh"),))


# --- after a SIGKILL -------------------------------------------------------------------------

def clean(inventory: Inventory, firewalls: Sequence[hoststate.Firewall]) -> dict[str, str]:
    """Put back every host of the inventory that holds a saved state (a run killed
    before it could), and remove fwbench's private directories there (those
    carrying its marker, and in them only what it wrote): role -> what was done."""
    hosts = list(inventory.hosts.values())
    conns = connect_all(hosts)
    ex = SshExecutor(conns, {})
    notes: list[str] = []
    done: dict[str, str] = {}

    def saved_state(role: str) -> dict | None:
        """The saved state of the killed run on this host, if any; its other
        private directories (runs killed before they saved anything) go."""
        h = inventory.hosts[role]
        dirs = private_dirs(ex, h)
        live = [d for d in dirs if d["live"]]
        if live:    # a run that lives (its lease's process): nothing of it is touched
            m = live[0]["marker"]
            done[role] = (f"left alone: a live fwbench run uses it (started "
                          f"{m.get('created', '?')} from {m['about'].get('controller', '?')})")
            return None
        with_state = [d for d in dirs if STATE in d["holds"]]
        if len(with_state) > 1:
            raise FwbenchError(f"{h.where} holds the saved states of {len(with_state)} "
                               f"killed runs ({', '.join(d['path'] for d in with_state)}); "
                               f"fwbench cannot tell which came first: put the host back "
                               f"by hand")
        for d in dirs:
            if d not in with_state:
                stop_leftovers(ex, role, d["path"])
                remove_private(ex, role, h, notes.append, d["path"])
        gone = len(dirs) - len(with_state)
        done[role] = f"removed {gone} private director{'y' if gone == 1 else 'ies'}" \
            if gone else "nothing to put back"
        if not with_state:
            return None
        ex.rundir[role] = with_state[0]["path"]
        raw = ex.get(role, f"{with_state[0]['path']}/{STATE}")
        try:
            return json.loads(raw)["saved"]
        except (TypeError, ValueError, KeyError):
            raise FwbenchError(f"{h.where}: {with_state[0]['path']}/{STATE} is not "
                               f"fwbench's saved state; left alone") from None
    try:
        saved = {r: s for r, s in parallel(saved_state, list(inventory.hosts)).items()
                 if s is not None}
        left = put_back(ex, inventory.hosts, saved, notes.append, firewalls) if saved else {}
        for r in saved:
            done[r] = "put back as it was" if not left[r] else \
                f"still differs: {'; '.join(left[r])}"
        return {r: done[r] for r in inventory.hosts}
    finally:
        ex.close()
        for line in notes:
            print(f"fwbench: {line}", file=sys.stderr)
