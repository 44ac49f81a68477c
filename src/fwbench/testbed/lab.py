"""A three-host lab on this machine for the `ssh` provider: real hosts in all but
hardware.

`fwbench lab up DIR` makes a client, a firewall and a server, each a network
namespace running its own OpenSSH server (Debian's sshd, with a host key of its
own), and a management namespace that reaches them over management links, as a
real lab's controller reaches its hosts over a management network. The test
links between the hosts are veth pairs, up and without addresses, as a lab's
spare NICs would be. Each host's default route goes out its management link, so
the provider's refusal to touch that interface can be tried.

The hosts are lived in: before fwbench ever sees them, each holds firewall
state of its own (an iptables rule in both tools, an nftables table, an ipset)
and a non-default sysctl, so a run that does not put everything back is seen.

DIR, which `lab up` makes (or takes, if it is empty: any other is refused and
left as it is), gets the key fwbench logs in with, the hosts' keys
(known_hosts), each sshd's configuration and `inventory.toml`, which `fwbench
run --inventory` takes. It carries fwbench's marker (fwbench.owned), which lists
every file the lab wrote there; `fwbench lab down DIR` ends the sshds, removes
the namespaces and then exactly those files (and DIR, if `lab up` made it).

Nothing touches the root namespace: every link is made inside the lab's
namespaces. The management links carry no address of fwbench's: the hosts are
reached at the IPv6 link-local address each management link has anyway
(fe80::...%m-ROLE from the management namespace), so the management network
lies outside the benchmarking ranges, as a real lab's does, and uses no other.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from fwbench import owned, proc
from fwbench.errors import FwbenchError

LAB_PREFIX = "fwblab-"
ROLES = ("client", "fw", "server")
# Test links: (host, its interface, peer host, peer's interface).
LINKS = (("client", "test0", "fw", "test0"), ("fw", "test1", "server", "test0"))
SSHD = "/usr/sbin/sshd"
STATE = "lab.json"
PRIVSEP = "/run/sshd"   # sshd's privilege separation directory (compiled in)
# The files `lab up` writes: in DIR, and in DIR/ROLE.
FILES = ["id_ed25519", "id_ed25519.pub", "authorized_keys", "known_hosts",
         "inventory.toml", STATE]
HOST_FILES = ["ssh_host_ed25519_key", "ssh_host_ed25519_key.pub", "sshd_config",
              "sshd.pid", "sshd.log"]


# What a lived-in host holds before fwbench comes (per role); restored exactly after.
LIVED_IN = {
    "iptables-legacy-restore": "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n"
                               ":OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 22 "
                               "-m comment --comment site-ssh -j ACCEPT\nCOMMIT\n",
    "ip6tables-nft-restore": "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n"
                             ":OUTPUT ACCEPT [0:0]\n-A INPUT -p ipv6-icmp -m comment "
                             "--comment site-icmp -j ACCEPT\nCOMMIT\n",
    "nft": "table inet site {\n\tset admins {\n\t\ttype ipv4_addr\n\t\t"
           "elements = { 198.19.254.1 }\n\t}\n\tchain input {\n\t\ttype filter hook "
           "input priority 10; policy accept;\n\t\tip saddr @admins counter accept\n"
           "\t}\n}\n",
    "ipset": "create site-blocklist hash:net family inet hashsize 64 maxelem 1024\n"
             "add site-blocklist 198.18.200.0/24\n",
}
LIVED_IN_SYSCTL = "net.ipv4.conf.all.log_martians=1"


def up(directory: str | Path) -> Path:
    """Build the lab; returns the inventory's path. Undone entirely if it fails.
    DIR must be new or empty: any other is refused, and nothing changes."""
    d = Path(directory).resolve()
    if (d / STATE).exists():
        raise FwbenchError(f"{d}: a lab is already up there (fwbench lab down {d})")
    if not os.access(SSHD, os.X_OK):
        raise FwbenchError(f"{SSHD} not found: install the Debian package openssh-server "
                           f"(./scripts/setup.sh installs everything)")
    lab_id = secrets.token_hex(3)
    state = {"id": lab_id, "netns": [], "sshd": {}, "made": []}
    try:
        owned.take(str(d), f"the local lab {lab_id} (fwbench lab up)", FILES,
                   {"lab": lab_id})
    except owned.NotOurs as e:
        raise FwbenchError(f"lab up: {e}; it takes a new or empty directory") from None
    except OSError as e:
        raise FwbenchError(f"lab up: cannot make {d}: {e.strerror}") from None
    try:
        _build(d, lab_id, state)
    except BaseException:
        _save(d, state)
        down(d)
        raise
    _save(d, state)
    return d / "inventory.toml"


def _save(d: Path, state: dict) -> None:
    (d / STATE).write_text(json.dumps(state, indent=1) + "\n")


def _ns(lab_id: str, role: str) -> str:
    return f"{LAB_PREFIX}{lab_id}-{role}"


def _build(d: Path, lab_id: str, state: dict) -> None:
    mgmt = _ns(lab_id, "mgmt")
    for name in (mgmt, *(_ns(lab_id, r) for r in ROLES)):
        proc.run(["ip", "netns", "add", name])
        state["netns"].append(name)
        proc.run(["ip", "-n", name, "link", "set", "lo", "up"])
    key = d / "id_ed25519"
    proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"fwbench-lab-{lab_id}",
              "-f", str(key)])
    (d / "authorized_keys").write_text((d / "id_ed25519.pub").read_text())
    known = []
    if not os.path.isdir(PRIVSEP):
        state["made"] += owned.make(PRIVSEP, "sshd's privilege separation directory, "
                                    "for the local lab's sshds", about={"lab": lab_id},
                                    mode=0o755)
    for role in ROLES:
        ns = _ns(lab_id, role)
        proc.run(["ip", "-n", mgmt, "link", "add", f"m-{role}", "type", "veth", "peer",
                  "name", "mgmt0", "netns", ns])
        proc.run(["ip", "-n", mgmt, "link", "set", f"m-{role}", "up"])
        proc.run(["ip", "-n", ns, "link", "set", "mgmt0", "up"])
    _wait_addresses(mgmt)
    addrs = {}
    for role in ROLES:
        ns = _ns(lab_id, role)
        _wait_addresses(ns)
        near, far = _link_local(mgmt, f"m-{role}"), _link_local(ns, "mgmt0")
        addrs[role] = f"{far}%m-{role}"    # as the management namespace reaches it
        # The default route out of the management link, in both families, with no
        # address: the provider's refusal to touch that interface can be tried.
        proc.run(["ip", "-n", ns, "-6", "route", "add", "default", "via", near, "dev",
                  "mgmt0"])
        proc.run(["ip", "-n", ns, "-4", "route", "add", "default", "dev", "mgmt0"])
        hd = d / role
        owned.make(str(hd), f"the lab's host {role}", HOST_FILES, {"lab": lab_id})
        hk = hd / "ssh_host_ed25519_key"
        proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{role}",
                  "-f", str(hk)])
        kind, blob = (hd / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        known.append(f"{addrs[role]} {kind} {blob}")
        (hd / "sshd_config").write_text(
            # Every address of the host, as a real host's sshd: its management
            # link's link-local one, and any a test gives it.
            f"ListenAddress 0.0.0.0\nListenAddress ::\nPort 22\nHostKey {hk}\n"
            f"PidFile {hd}/sshd.pid\n"
            f"AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nMaxSessions 100\nMaxStartups 100\n"
            # The lab's root is this machine's, home and all; bash runs ~/.bashrc
            # for every ssh command unless it is a sub-shell, and this machine's
            # is none of a lab host's business (here it cost 120 ms a command).
            "SetEnv SHLVL=1\n"
            "Subsystem sftp internal-sftp\n")
    for a, ai, b, bi in LINKS:
        proc.run(["ip", "-n", _ns(lab_id, a), "link", "add", ai, "type", "veth", "peer",
                  "name", bi, "netns", _ns(lab_id, b)])
    for a, ai, b, bi in LINKS:
        for host, ifname in ((a, ai), (b, bi)):
            proc.run(["ip", "-n", _ns(lab_id, host), "link", "set", ifname, "up"])
    for role in ROLES:
        _live_in(_ns(lab_id, role))
        _wait_addresses(_ns(lab_id, role))
    (d / "known_hosts").write_text("".join(ln + "\n" for ln in known))
    for role in ROLES:
        hd = d / role
        # Its own session, so a Ctrl-C at the terminal does not reach it; `down`
        # ends it by the PID recorded here.
        p = subprocess.Popen(proc.in_netns(_ns(lab_id, role), [
            SSHD, "-D", "-e", "-f", str(hd / "sshd_config")]),
            stdout=subprocess.DEVNULL, stderr=open(hd / "sshd.log", "ab"),
            start_new_session=True)
        state["sshd"][role] = p.pid
        _wait_listening(_ns(lab_id, role), p)
    hosts = "".join(
        f'\n[hosts.{role}]\naddress = "{addrs[role]}"\n'
        f'ports = {{ {", ".join(f"{peer} = {ifname!r}" for peer, ifname in _ports(role))} }}\n'
        .replace("'", '"')
        for role in ROLES)
    (d / "inventory.toml").write_text(
        f"# The local lab {lab_id} (fwbench lab up): three hosts, each a network\n"
        "# namespace with its own sshd, reached from the management namespace.\n"
        "[ssh]\nuser = \"root\"\nkey = \"id_ed25519\"\nknown_hosts = \"known_hosts\"\n"
        f"netns = \"{mgmt}\"\n"
        f"workdir = \"{workdir(lab_id)}\"\n" + hosts)


def workdir(lab_id: str) -> str:
    """Where fwbench keeps its private directories on the lab's hosts (which share
    this machine's filesystem); it goes with the lab."""
    return f"/var/tmp/fwbench-lab-{lab_id}"


def _ports(role: str) -> list[tuple[str, str]]:
    out = []
    for a, ai, b, bi in LINKS:
        if a == role:
            out.append((b, ai))
        if b == role:
            out.append((a, bi))
    return out


def _live_in(ns: str) -> None:
    for tool, text in LIVED_IN.items():
        argv = {"nft": ["nft", "-f", "-"], "ipset": ["ipset", "restore"]}.get(tool, [tool])
        proc.run(argv, netns=ns, input=text)
    proc.run(["sysctl", "-q", "-w", LIVED_IN_SYSCTL], netns=ns)


def _wait_addresses(ns: str, limit_s: float = 10) -> None:
    """Until the host's IPv6 link-local addresses are past duplicate detection, as
    a real host's long are: its state is then what a run will find, and leave."""
    end = time.monotonic() + limit_s
    while proc.run(["ip", "-6", "addr", "show", "tentative"], netns=ns).stdout.strip():
        if time.monotonic() > end:
            raise FwbenchError(f"lab: {ns}'s addresses still tentative after {limit_s:g} s")
        time.sleep(0.1)


def _link_local(ns: str, ifname: str) -> str:
    """The IPv6 link-local address interface `ifname` of namespace `ns` has."""
    info = json.loads(proc.output(["ip", "-n", ns, "-6", "-j", "addr", "show", "dev",
                                   ifname, "scope", "link"]))
    return next(a["local"] for i in info for a in i.get("addr_info", []))


def _wait_listening(ns: str, p: subprocess.Popen, port: int = 22,
                    limit_s: float = 10) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if p.poll() is not None:
            raise FwbenchError(f"lab: sshd in {ns} exited {p.returncode} (its log: "
                               f"sshd.log)")
        out = proc.run(["ss", "-Hltn", f"sport = :{port}"], netns=ns, check=False).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise FwbenchError(f"lab: sshd in {ns} is not listening on port {port} after "
                       f"{limit_s:g} s")


def down(directory: str | Path) -> list[str]:
    """End the lab's sshds and remove its namespaces, then what `up` recorded
    making: the files its markers list (DIR itself if `up` made it), the runs'
    workdir, /run/sshd if `up` made it and nothing else needs it. Returns the
    namespaces removed; what is left (files fwbench did not write) is named on
    stderr."""
    d = Path(directory).resolve()
    try:
        state = json.loads((d / STATE).read_text())
    except FileNotFoundError:
        raise FwbenchError(f"{d}: no lab is up there (no {STATE})") from None
    except ValueError:
        raise FwbenchError(f"{d}/{STATE}: not a lab's record") from None
    for role, pid in state.get("sshd", {}).items():
        if _is_our_sshd(pid, d / role / "sshd_config"):
            os.kill(pid, signal.SIGTERM)
            _reap(pid)
    gone = []
    for ns in reversed(state.get("netns", [])):
        if not ns.startswith(LAB_PREFIX):
            continue
        cp = proc.run(["ip", "netns", "pids", ns], check=False)
        for pid in (int(x) for x in cp.stdout.split() if x.isdigit()):
            try:   # a lab namespace holds only what the lab and its sessions started
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.run(["ip", "netns", "del", ns], check=False).returncode == 0:
            gone.append(ns)
    left = []
    if state.get("id"):     # what runs left there (a killed run's private directory)
        left += owned.remove(workdir(state["id"]))
    for made in reversed(state.get("made", [])):
        if made == PRIVSEP and (leftover() or _sshd_running()):
            continue        # another lab's, or this machine's own sshd, needs it
        left += owned.remove(made)
    left += owned.remove(str(d))    # the files up wrote, then DIR if up made it
    for path in left:
        print(f"fwbench: lab down: left {path}: fwbench did not write it", file=sys.stderr)
    return gone


def _sshd_running(limit_s: float = 3.0) -> bool:
    """Whether any sshd runs on this machine (in any namespace). The lab's own,
    just killed, may take a moment to go: an exiting or dead one (a zombie) does
    not count, and a live one is given `limit_s` to end."""
    end = time.monotonic() + limit_s
    while True:
        running = False
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            name, _, rest = stat.partition(" (")[2].rpartition(") ")
            if name == "sshd" and rest[:1] not in ("Z", "X"):
                running = True
                break
        if not running or time.monotonic() > end:
            return running
        time.sleep(0.1)


def _is_our_sshd(pid: int, config: Path) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(config).encode() in cmd


def _reap(pid: int) -> None:
    for _ in range(100):
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:   # not our child (another fwbench made the lab)
            if not Path(f"/proc/{pid}").exists():
                return
        time.sleep(0.02)


def leftover() -> list[str]:
    """Lab namespaces on this machine (e.g. of a lab never taken down)."""
    cp = proc.run(["ip", "netns", "list"], check=False)
    return [ln.split()[0] for ln in cp.stdout.splitlines()
            if ln.startswith(LAB_PREFIX)]

