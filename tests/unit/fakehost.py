"""A fake real host for the ssh provider's put-back and pre-flight checks, tested
without a network: `FakeExecutor` answers every read the provider makes (`ip -j`,
`tc -j`, `ethtool -k`, the save tools, sysctl, ...) with canned output in the
shape the real tools print (copied from this machine's iproute2 6.1, ethtool and
iptables 1.8.9), and records every command, so a test can assert the exact
commands that change a host and that a refusal changed nothing.

A host is declared as data (`Host`, `Link`); its listings never change while a
test runs, so a put-back sees the host as it stands mid-run and the test reads
the commands it would send.
"""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field

from fwbench.errors import FwbenchError
from fwbench.testbed.executor import Executor

# The features a veth lists, as `ethtool -k` prints them ("[fixed]": cannot change).
FEATURES = {"rx-checksumming": "on", "tx-checksumming": "on",
            "tcp-segmentation-offload": "on", "generic-segmentation-offload": "on",
            "generic-receive-offload": "off", "large-receive-offload": "off [fixed]"}


@dataclass
class Link:
    ifname: str
    mtu: int = 1500
    up: bool = True
    mac: str = "52:54:00:00:00:01"
    xdp: dict | None = None       # as `ip -d -j link` prints it: {"mode": 1, "prog": ...}
    addresses: list[str] = field(default_factory=list)          # "a/p"
    neighbours: list[tuple[str, str]] = field(default_factory=list)   # permanent ones
    qdiscs: list[dict] = field(default_factory=lambda: [
        {"kind": "noqueue", "handle": "0:", "root": True, "refcnt": 2, "options": {}}])
    features: dict[str, str] = field(default_factory=lambda: dict(FEATURES))
    rps: dict[str, str] = field(default_factory=lambda: {"rx-0": "0", "rx-1": "0"})
    driver: str = "veth"


def route(dst: str, dev: str, v: str = "-4", **kw) -> dict:
    """A route as `ip -j route show table all` lists it (a main-table route has no
    `table` key; an IPv6 one has a metric and a preference)."""
    flags = kw.pop("flags", [])
    r = {"dst": dst, **({"gateway": kw.pop("gateway")} if "gateway" in kw else {}),
         "dev": dev, **kw, "flags": flags}
    if v == "-6":
        r.setdefault("metric", 1024)
        r.setdefault("pref", "medium")
    return r


def rule(pref: int, table: str, **kw) -> dict:
    return {"priority": pref, "src": "all", **kw, "table": table}


# rt_tables' names (and one a host's owner gave a table of theirs)
NUMBERS = {"local": "255", "main": "254", "default": "253", "office": "106"}
BASE_RULES = [rule(0, "local"), rule(32766, "main"), rule(32767, "default")]


@dataclass
class Host:
    links: dict[str, Link]
    routes: dict[str, list[dict]] = field(default_factory=lambda: {"-4": [], "-6": []})
    rules: dict[str, list[dict]] = field(default_factory=lambda: {
        "-4": list(BASE_RULES), "-6": [rule(0, "local"), rule(32766, "main")]})
    sysctls: dict[str, str] = field(default_factory=dict)
    firewall: dict[str, str] = field(default_factory=dict)   # listing -> its text
    x_tables: dict[str, str] = field(default_factory=dict)   # ip_tables_names -> text
    tools: set[str] = field(default_factory=lambda: {
        "ip", "tc", "ethtool", "sysctl", "taskset", "python3", "sha256sum", "ldconfig",
        "ping", "iperf3", "iptables-legacy", "iptables-nft", "ip6tables-legacy",
        "ip6tables-nft", "iptables-legacy-save", "iptables-nft-save",
        "ip6tables-legacy-save", "ip6tables-nft-save", "nft", "ipset", "conntrack"})
    nft_tables: str = ""
    session: str = "10.0.0.1 50000 10.0.0.2 22"     # $SSH_CONNECTION
    session_route: dict[str, str] = field(default_factory=lambda: {"10.0.0.1": "mgmt0"})
    libraries: str = "\tlibbpf.so.1 (libc6,x86-64) => /lib/libbpf.so.1\n"
    private_dirs: list[dict] = field(default_factory=list)   # fwbench.owned listing
    files: set[str] = field(default_factory=set)     # what `test -e` finds
    machine: str = "x86_64"
    boot_id: str = "b0"
    cpus: int = 4

    # --- the reads --------------------------------------------------------------------

    def link_json(self, ln: Link) -> dict:
        out = {"ifname": ln.ifname, "flags": ["BROADCAST", "MULTICAST"] +
               (["UP", "LOWER_UP"] if ln.up else []), "mtu": ln.mtu, "qdisc": "noqueue",
               "operstate": "UP" if ln.up else "DOWN", "address": ln.mac,
               "linkinfo": {"info_kind": ln.driver}, "inet6_addr_gen_mode": "eui64",
               "num_tx_queues": len(ln.rps), "num_rx_queues": len(ln.rps)}
        if ln.xdp:
            out["xdp"] = ln.xdp
        return out

    def addr_json(self, ln: Link) -> dict:
        info = []
        for a in ln.addresses:
            local, plen = a.split("/")
            info.append({"family": "inet6" if ":" in local else "inet", "local": local,
                         "prefixlen": int(plen), "scope": "link" if
                         local.startswith("fe80:") else "global"})
        return {"ifname": ln.ifname, "addr_info": info}

    def read(self, argv: list[str]) -> str | None:
        """The canned output of a read, or None: a command that changes the host."""
        if argv[:2] == ["ip", "-N"]:     # numeric: tables by number, as ip -N prints
            out = self.read(["ip", *argv[2:]])
            return None if out is None else json.dumps([
                {**r, **({"table": NUMBERS.get(r["table"], r["table"])} if "table" in r
                         else {})} for r in json.loads(out)])
        a = argv
        if a[:4] == ["ip", "-j", "-d", "link"]:
            links = [self.links[a[-1]]] if a[-2:-1] == ["dev"] else self.links.values()
            return json.dumps([self.link_json(ln) for ln in links])
        if a[:4] == ["ip", "-j", "addr", "show"]:
            links = [self.links[a[-1]]] if "dev" in a else self.links.values()
            return json.dumps([self.addr_json(ln) for ln in links])
        if a[0] == "ip" and a[2:4] == ["-j", "neigh"]:
            six = a[1] == "-6"
            return json.dumps([{"dst": d, "lladdr": m, "state": ["PERMANENT"]}
                               for d, m in self.links[a[6]].neighbours
                               if (":" in d) == six])
        if a[0] == "ip" and a[2:5] == ["-j", "route", "show"]:
            rs = self.routes[a[1]]
            if a[5:] == ["default"]:
                rs = [r for r in rs if r["dst"] == "default" and "table" not in r]
            elif a[5:7] == ["table", "all"]:
                pass
            else:
                rs = [r for r in rs if r.get("table", "main") == a[6]]
            return json.dumps(rs)
        if a[0] == "ip" and a[2:5] == ["-j", "rule", "show"]:
            return json.dumps(self.rules[a[1]])
        if a[:3] == ["ip", "-j", "route"] and a[3] == "get":
            return json.dumps([{"dst": a[4], "dev": self.session_route.get(a[4], "lo")}])
        if a[:4] == ["tc", "-j", "qdisc", "show"]:
            return json.dumps(self.links[a[-1]].qdiscs)
        if a[:2] == ["ethtool", "-k"]:
            ln = self.links[a[2]]
            return f"Features for {ln.ifname}:\n" + "".join(
                f"{k}: {v}\n" for k, v in ln.features.items())
        if a[:2] == ["ethtool", "-i"]:
            return f"driver: {self.links[a[2]].driver}\nversion: 1.0\n"
        if a[0] == "sysctl" and a[1] == "-e":
            return "".join(f"{k} = {self.sysctls[k]}\n" for k in a[2:] if k in self.sysctls)
        if a == ["cat", "/proc/net/ip_tables_names"] or \
                a == ["cat", "/proc/net/ip6_tables_names"]:
            return self.x_tables.get(a[1].rsplit("/", 1)[1], "")
        if a == ["nft", "list", "tables"]:
            return self.nft_tables
        listing = {("iptables-legacy-save",): "iptables-legacy",
                   ("ip6tables-legacy-save",): "ip6tables-legacy",
                   ("iptables-nft-save",): "iptables-nft",
                   ("ip6tables-nft-save",): "ip6tables-nft",
                   ("nft", "list", "ruleset"): "nft", ("ipset", "save"): "ipset"}
        if tuple(a) in listing:
            return self.firewall.get(listing[tuple(a)], "")
        if a == ["ldconfig", "-p"]:
            return self.libraries
        if a[:2] == ["python3", "-"] and a[2] == "list":
            return json.dumps(self.private_dirs)
        if a[0] in ("iptables-legacy", "nft", "ipset", "iperf3", "ip") and \
                a[1:] in (["-V"], ["-v"]):
            return "v1\n"
        if a == ["ethtool", "--version"]:
            return "ethtool version 6.1\n"
        if a[:2] == ["sh", "-c"]:
            script = a[2]
            if "command -v" in script:
                named = script.split("for t in ", 1)[1].split(";", 1)[0].split()
                return "".join(t + "\n" for t in named if t in self.tools)
            if "rps_cpus" in script and "echo" in script and ">" not in script:
                ifname = script.split("/sys/class/net/", 1)[1].split("/", 1)[0]
                return "".join(f"{q} {m}\n" for q, m in self.links[ifname].rps.items())
            if script == "echo $SSH_CONNECTION":
                return self.session + "\n"
            if "uname -m" in script:
                return "\n".join([self.machine, "6.18.0", "#1 SMP", self.boot_id,
                                  str(self.cpus), "host", "1", "1", "a CPU",
                                  "Debian GNU/Linux 12"]) + "\n"
        return None


class FakeExecutor(Executor):
    """Runs nothing: a read of `hosts[role]` gets its canned answer, every other
    command is recorded in `changes` (with its standard input, if any) and
    succeeds. `lost` roles answer nothing at all, as a host whose SSH session
    a rule set cut."""

    def __init__(self, hosts: dict[str, Host]):
        self.hosts = hosts
        self.commands: list[str] = []
        self.changes: list[str] = []
        self.inputs: dict[str, str] = {}
        self.lost: set[str] = set()
        self.rundir: dict[str, str] = {r: f"/var/tmp/fwbench/{r}-run-0" for r in hosts}
        self.translate: dict = {r: {} for r in hosts}
        self.python: dict = {}

    def run(self, host, argv, *, input=None, check=True, timeout=120):
        argv = [str(x) for x in argv]
        if host in self.lost:
            raise FwbenchError(f"ssh: the connection to {host} is lost")
        line = " ".join(argv)
        self.commands.append(f"{host}: {line}")
        if argv[:2] == ["test", "-e"]:
            return subprocess.CompletedProcess(
                argv, 0 if argv[2] in self.hosts[host].files else 1, "", "")
        try:
            out = self.hosts[host].read(argv)
        except KeyError as e:     # an interface the host does not have
            return subprocess.CompletedProcess(argv, 1, "", f"Cannot find device {e}")
        if out is None:
            self.changes.append(line if len(self.hosts) == 1 else f"{host}: {line}")
            if input is not None:
                self.inputs[line] = input
            out = ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    def spawn(self, host, argv, *, cpu=None, **popen_kw):
        line = " ".join(str(x) for x in argv)
        self.changes.append(f"spawn {line}" if len(self.hosts) == 1
                            else f"{host}: spawn {line}")
        return FakeProcess(argv)

    def put(self, host, data: bytes, path: str, mode: int = 0o600) -> None:
        self.changes.append(f"put {path}")

    def get(self, host, path: str) -> bytes | None:
        return None

    def close(self) -> None:
        pass


class FakeProcess:
    """A process that has ended (what stopping a spawned command needs)."""

    def __init__(self, argv):
        self.args, self.returncode, self.pid = argv, 0, 1
        self.stdin = self.stdout = self.stderr = None

    def poll(self):
        return 0

    def wait(self, timeout=None):
        return 0

    def communicate(self, input=None, timeout=None):
        return None, None

    def send_signal(self, sig):
        pass

    terminate = kill = lambda self: None
