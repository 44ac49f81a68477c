"""A real host's state that fwbench changes, saved before the first change and put
back however the run ends.

What is saved (`snapshot`): the firewall as each tool lists it (iptables-save and
ip6tables-save of both the legacy and the nft tools, `nft list ruleset`, `ipset
save`), and for each test interface its link settings (up, MTU, MAC), addresses,
permanent neighbours, offloads (`ethtool -k`), RPS masks, attached XDP program and
qdiscs; the routes and policy rules through the test interfaces or to the
benchmarking ranges; every sysctl fwbench writes (the ones the build sets, and any
other the moment before a caller first writes it).

`restore_hooks_and_firewall`, then (once every host is past it) `restore_links`
bring the saved state back: the firewall by flushing every tool's tables and
reloading what was saved (so the host's own rules return even where a backend
replaced them), the interfaces setting by setting, and the sysctls value by value.
`compare` tells what still differs, on the listings with what the kernel changes
by itself taken out: the save tools' time stamps and every packet and byte counter.
"""
from __future__ import annotations

import ipaddress
import json
import re
import shlex
from typing import Callable

from fwbench.addresses import BENCH
from fwbench.errors import FwbenchError
from fwbench.testbed.executor import Executor

# Firewall listings: name -> argv. Each is read-only.
SAVES = {
    "iptables-legacy": ["iptables-legacy-save"],
    "ip6tables-legacy": ["ip6tables-legacy-save"],
    "iptables-nft": ["iptables-nft-save"],
    "ip6tables-nft": ["ip6tables-nft-save"],
    "nft": ["nft", "list", "ruleset"],
    "ipset": ["ipset", "save"],
}
# The tool each listing needs, and its Debian package.
SAVE_TOOLS = {"iptables-legacy-save": "iptables", "ip6tables-legacy-save": "iptables",
              "iptables-nft-save": "iptables", "ip6tables-nft-save": "iptables",
              "nft": "nftables", "ipset": "ipset"}


def parsed(text: str) -> list:
    """The JSON array an `ip -j` or `tc -j` listing prints (empty: none)."""
    return json.loads(text or "[]")


def _link(ex: Executor, role: str, ifname: str) -> dict:
    info = parsed(ex.output(role, ["ip", "-j", "-d", "link", "show", "dev", ifname]))[0]
    out = {k: info.get(k) for k in ("ifname", "mtu", "address", "qdisc", "master")}
    out["up"] = "UP" in info.get("flags", [])
    out["xdp"] = bool(info.get("xdp"))
    out["addr_gen_mode"] = info.get("inet6_addr_gen_mode")
    out["rx_queues"] = info.get("num_rx_queues", 1)
    return out


def _addresses(ex: Executor, role: str, ifname: str) -> list[str]:
    info = parsed(ex.output(role, ["ip", "-j", "addr", "show", "dev", ifname]))
    return sorted(f"{a['local']}/{a['prefixlen']}" for i in info
                  for a in i.get("addr_info", []))


def _neighbours(ex: Executor, role: str, ifname: str) -> list[str]:
    out = []
    for v in ("-4", "-6"):
        for n in parsed(ex.output(role, ["ip", v, "-j", "neigh", "show", "dev", ifname,
                                        "nud", "permanent"])):
            out.append(f"{n['dst']} {n.get('lladdr', '')}")
    return sorted(out)


def _qdiscs(ex: Executor, role: str, ifname: str) -> list[str]:
    return sorted(f"{q['kind']} {q.get('handle', '')} {q.get('parent', 'root')}"
                  for q in parsed(ex.output(role, ["tc", "-j", "qdisc", "show", "dev",
                                                  ifname])))


def _features(ex: Executor, role: str, ifname: str) -> dict[str, str]:
    """ethtool -k: feature -> "on"/"off", with " fixed" when it cannot change."""
    out = {}
    for line in ex.output(role, ["ethtool", "-k", ifname]).splitlines()[1:]:
        key, sep, val = line.strip().partition(": ")
        if sep:
            state, _, rest = val.partition(" ")
            out[key] = state + (" fixed" if "[fixed]" in rest else "")
    return out


def _rps(ex: Executor, role: str, ifname: str) -> dict[str, str]:
    text = ex.output(role, ["sh", "-c", f"for q in /sys/class/net/{ifname}/queues/rx-*; "
                            "do echo \"${q##*/} $(cat $q/rps_cpus)\"; done"])
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


def _routes(ex: Executor, role: str, ifnames: list[str]) -> list[str]:
    """The routes and policy rules that are fwbench's business: those through a
    test interface, to the benchmarking ranges, or selecting by a test interface.
    The rest (the management network's, learnt ones that come and go) are neither
    compared nor touched: removing one could cut the SSH session itself."""
    ours = set(ifnames)
    out = []
    for v in ("-4", "-6"):
        for r in parsed(ex.output(role, ["ip", v, "-j", "route", "show", "table", "all"])):
            if r.get("dev") in ours or _benchmarking(r.get("dst", "")):
                out.append(json.dumps({"v": v, **{k: r[k] for k in sorted(r)
                                                   if k not in ("expires", "flags")}},
                                      sort_keys=True))
        for r in parsed(ex.output(role, ["ip", v, "-j", "rule", "show"])):
            if r.get("iif") in ours or r.get("oif") in ours:
                out.append(json.dumps({"v": v, "rule": r}, sort_keys=True))
    return sorted(out)


def _benchmarking(dst: str) -> bool:
    try:
        net = ipaddress.ip_network(dst, strict=False)
    except ValueError:
        return False    # "default", names
    return any(net.version == b.version and net.subnet_of(b) for b in BENCH.values())


def sysctls(ex: Executor, role: str, keys: list[str]) -> dict[str, str]:
    if not keys:
        return {}
    text = ex.output(role, ["sysctl", "-e", *keys])
    got = {}
    for line in text.splitlines():
        k, sep, v = line.partition(" = ")
        if sep:
            got[k.strip()] = v.strip()
    return {k: got.get(k, "") for k in keys}


def have(ex: Executor, role: str, tools: list[str]) -> set[str]:
    """Which of `tools` the host has on its PATH."""
    script = "for t in " + " ".join(tools) + "; do command -v $t >/dev/null && echo $t; done; true"
    return set(ex.output(role, ["sh", "-c", script]).split())


def snapshot(ex: Executor, role: str, ifnames: list[str], keys: list[str]) -> dict:
    """The host's state as `restore` brings it back and `compare` checks it."""
    tools = have(ex, role, sorted({argv[0] for argv in SAVES.values()}))
    firewall = {}
    for name, argv in SAVES.items():
        if argv[0] in tools:
            firewall[name] = ex.output(role, argv)
    links = {}
    for ifname in ifnames:
        links[ifname] = {"link": _link(ex, role, ifname),
                         "addresses": _addresses(ex, role, ifname),
                         "neighbours": _neighbours(ex, role, ifname),
                         "qdiscs": _qdiscs(ex, role, ifname),
                         "features": _features(ex, role, ifname),
                         "rps": _rps(ex, role, ifname)}
    return {"firewall": firewall, "links": links, "routes": _routes(ex, role, ifnames),
            "sysctls": sysctls(ex, role, keys)}


# --- comparing -----------------------------------------------------------------------------

_COUNTERS = re.compile(r"\[\d+:\d+\]")
_NFT_COUNTER = re.compile(r"counter packets \d+ bytes \d+")


def normal(name: str, text: str) -> str:
    """A listing with what the kernel changes by itself taken out: comment lines
    (the save tools' time stamps and nft's warnings) and packet/byte counters."""
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    text = "\n".join(lines)
    return _NFT_COUNTER.sub("counter", _COUNTERS.sub("[0:0]", text))


def compare(before: dict, after: dict) -> list[str]:
    """What differs between two snapshots, one short line each."""
    out = []
    for name in sorted(set(before["firewall"]) | set(after["firewall"])):
        a, b = before["firewall"].get(name, ""), after["firewall"].get(name, "")
        if normal(name, a) != normal(name, b):
            out.append(f"{name} listing differs")
    for ifname, was in before["links"].items():
        now = after["links"].get(ifname, {})
        for what in was:
            if was[what] != now.get(what):
                out.append(f"{ifname} {what}: was {_short(was[what])}, "
                           f"now {_short(now.get(what))}")
    if before["routes"] != after["routes"]:
        gone = set(before["routes"]) - set(after["routes"])
        new = set(after["routes"]) - set(before["routes"])
        out.append(f"routes or rules differ ({len(gone)} gone, {len(new)} new"
                   f"{': ' + _short(sorted(new)[0]) if new else ''})")
    for k, v in before["sysctls"].items():
        if after["sysctls"].get(k) != v:
            out.append(f"sysctl {k}: was {v}, now {after['sysctls'].get(k)}")
    return out


def _short(x) -> str:
    if isinstance(x, dict):
        x = {k: v for k, v in x.items()}
    s = json.dumps(x, sort_keys=True) if not isinstance(x, str) else x
    return s if len(s) <= 120 else s[:117] + "..."


# --- restoring -----------------------------------------------------------------------------

def _nft_tables(text: str) -> list[tuple[str, str, str]]:
    """(family, name, block) of every table of an `nft list ruleset` listing."""
    out, cur, head = [], [], None
    for line in text.splitlines():
        if head is None:
            m = re.match(r"^table (\S+) (\S+) \{", line)
            if m:
                head, cur = (m.group(1), m.group(2)), [line]
            continue
        cur.append(line)
        if line == "}" or line.startswith("}"):
            out.append((*head, "\n".join(cur) + "\n"))
            head = None
    return out


def _xtables(save: str, family: str) -> set[tuple[str, str]]:
    """The nf_tables tables an iptables-nft listing holds: (family, table)."""
    return {(family, ln[1:].strip()) for ln in save.splitlines() if ln.startswith("*")}


def _stepper(ex: Executor, role: str, note: Callable[[str], None]):
    """A runner of restore steps: one that fails is noted, and the rest still run
    (the caller compares afterwards)."""
    def step(what: str, argv: list[str], input: str | None = None) -> None:
        cp = ex.run(role, argv, input=input, check=False, timeout=600)
        if cp.returncode:
            err = (cp.stderr or cp.stdout).strip().splitlines()
            note(f"{role}: {what}: {err[0] if err else f'exit {cp.returncode}'}")
    return step


def restore_hooks_and_firewall(ex: Executor, role: str, saved: dict, now: dict,
                               note: Callable[[str], None] = lambda s: None) -> None:
    """The first part of putting a host back as `saved` (a snapshot) had it, `now`
    being its snapshot as it stands: XDP programs and tc hooks it did not have go,
    and the firewall is reloaded, only when a listing differs (an end host's,
    which fwbench never loads, stays as it is)."""
    fw = saved["firewall"]
    step = _stepper(ex, role, note)
    for ifname, s in saved["links"].items():
        cur = now["links"].get(ifname, {})
        if not s["link"]["xdp"] and cur.get("link", {}).get("xdp"):
            for mode in ("xdp", "xdpgeneric", "xdpdrv"):
                step(f"detaching XDP from {ifname}", ["ip", "link", "set", "dev", ifname,
                                                       mode, "off"])
        had = {q.split()[0] for q in s["qdiscs"]}
        has = {q.split()[0] for q in cur.get("qdiscs", [])}
        for kind in ("clsact", "ingress"):
            if kind in has and kind not in had:
                step(f"removing {kind} from {ifname}", ["tc", "qdisc", "del", "dev",
                                                        ifname, kind])
    if any(normal(k, fw.get(k, "")) != normal(k, now["firewall"].get(k, ""))
           for k in fw.keys() | now["firewall"].keys()):
        _restore_firewall(ex, role, fw, step)


def restore_links(ex: Executor, role: str, saved: dict,
                  note: Callable[[str], None] = lambda s: None) -> None:
    """The second part: the test interfaces setting by setting, the routes and
    rules, the sysctls."""
    step = _stepper(ex, role, note)
    for ifname, s in saved["links"].items():
        _restore_link(ex, role, ifname, s, step)
    _restore_routes(ex, role, saved["routes"], list(saved["links"]), step)
    now = sysctls(ex, role, list(saved["sysctls"]))
    for k, v in saved["sysctls"].items():
        if v != "" and now.get(k) != v:
            step(f"sysctl {k}", ["sysctl", "-q", "-w", f"{k}={v}"])


def _emptying(tool: str, table: str) -> str:
    """Shell: empty one x_tables table, policies to ACCEPT first. `table` is a word
    of the shell (a name, or a variable)."""
    t = f"{tool} -t {table}"
    return (f"for c in $({t} -S | awk '$1 == \"-P\" && $3 != \"ACCEPT\" {{print $2}}'); "
            f"do {t} -P \"$c\" ACCEPT || exit 1; done; {t} -F && {t} -X")


def emptying(tool: str, table: str, zero: bool = False) -> list[str]:
    """A command emptying one x_tables table: policies to ACCEPT first, then rules
    and chains, in one command. The other way round, flushed rules under an INPUT
    policy of drop drop the SSH session before the next command arrives."""
    t = f"{shlex.quote(tool)} -t {shlex.quote(table)}"
    return ["sh", "-c", _emptying(shlex.quote(tool), shlex.quote(table))
            + (f" && {t} -Z" if zero else "")]


# Shell: every firewall of the host emptied (legacy x_tables of both families, then
# nftables, iptables-nft's tables with it): what the watchdog does to a host whose
# new rule set cut fwbench off (hosts.SshTestbed.firewall_change).
EMPTY_FIREWALL = "; ".join(
    f"for t in $(cat /proc/net/{names} 2>/dev/null); do {_emptying(tool, '$t')}; done"
    for names, tool in (("ip_tables_names", "iptables-legacy"),
                        ("ip6_tables_names", "ip6tables-legacy"))) + "; nft flush ruleset"


def _restore_firewall(ex: Executor, role: str, fw: dict, step) -> None:
    """Empty every tool's tables, then reload what was saved, sets before the
    rules that name them."""
    for name, table_file in (("iptables-legacy", "ip_tables_names"),
                             ("ip6tables-legacy", "ip6_tables_names")):
        if name not in fw:
            continue
        tool = name.removesuffix("-legacy") + "-legacy"
        tables = ex.run(role, ["cat", f"/proc/net/{table_file}"], check=False).stdout.split()
        for t in tables:
            step(f"emptying {name} {t}", emptying(tool, t, zero=True))
    if "nft" in fw:
        step("flushing nftables", ["nft", "flush", "ruleset"])
    if "ipset" in fw:
        step("destroying ipsets", ["ipset", "destroy"])
        if fw["ipset"].strip():
            step("restoring ipsets", ["ipset", "restore"], fw["ipset"])
    for name in ("iptables-legacy", "ip6tables-legacy", "iptables-nft", "ip6tables-nft"):
        if fw.get(name, "").strip():
            step(f"restoring {name}", [SAVES[name][0].replace("-save", "-restore")],
                 fw[name])
    if fw.get("nft", "").strip():
        managed = _xtables(fw.get("iptables-nft", ""), "ip") \
            | _xtables(fw.get("ip6tables-nft", ""), "ip6")
        native = "".join(block for fam, name, block in _nft_tables(fw["nft"])
                         if (fam, name) not in managed)
        if native:
            step("restoring nftables", ["nft", "-f", "-"], native)


def _restore_link(ex: Executor, role: str, ifname: str, s: dict, step) -> None:
    now = {"addresses": _addresses(ex, role, ifname),
           "neighbours": _neighbours(ex, role, ifname)}
    for a in now["addresses"]:
        if a not in s["addresses"]:
            step(f"removing {a} from {ifname}", ["ip", "addr", "del", a, "dev", ifname])
    for a in s["addresses"]:
        if a not in now["addresses"] and not a.startswith("fe80:"):
            step(f"adding {a} back to {ifname}", ["ip", "addr", "add", a, "dev", ifname])
    for n in _neighbours(ex, role, ifname):
        if n not in s["neighbours"]:
            step(f"removing neighbour {n} of {ifname}",
                 ["ip", "neigh", "del", n.split()[0], "dev", ifname])
    link = s["link"]
    cur = _link(ex, role, ifname)
    if cur["mtu"] != link["mtu"]:
        step(f"MTU of {ifname}", ["ip", "link", "set", "dev", ifname, "mtu",
                                  str(link["mtu"])])
    features = _features(ex, role, ifname)
    change = []
    for k, v in s["features"].items():
        if not v.endswith("fixed") and features.get(k) != v:
            change += [k, v]
    if change:
        step(f"offloads of {ifname}", ["ethtool", "-K", ifname, *change])
    for q, mask in s["rps"].items():
        step(f"RPS of {ifname} {q}", ["sh", "-c", f"echo {mask} > "
                                      f"/sys/class/net/{ifname}/queues/{q}/rps_cpus"])
    if cur["up"] != link["up"]:
        step(f"{ifname} {'up' if link['up'] else 'down'}",
             ["ip", "link", "set", "dev", ifname, "up" if link["up"] else "down"])


def _restore_routes(ex: Executor, role: str, saved: list[str], ifnames: list[str],
                    step) -> None:
    keep = set(saved)
    for line in _routes(ex, role, ifnames):
        if line in keep:
            continue
        r = json.loads(line)
        v = r.pop("v")
        if "rule" in r:
            pref = r["rule"].get("priority")
            step(f"removing rule {pref}", ["ip", v, "rule", "del", "pref", str(pref)])
            continue
        argv = ["ip", v, "route", "del", r["dst"]]
        if r.get("type") and r["type"] != "unicast":
            argv = ["ip", v, "route", "del", r["type"], r["dst"]]
        if r.get("gateway"):
            argv += ["via", r["gateway"]]
        if r.get("dev"):
            argv += ["dev", r["dev"]]
        argv += ["table", str(r.get("table", "main"))]
        step(f"removing route {r['dst']}", argv)


def check_tools(ex: Executor, role: str, needed: dict[str, str], where: str) -> None:
    """One line naming every missing tool of `needed` ({tool: Debian package})."""
    got = have(ex, role, sorted(needed))
    missing = [t for t in needed if t not in got]
    if missing:
        pkgs = sorted({needed[t] for t in missing})
        raise FwbenchError(f"{where} lacks {', '.join(missing)} (Debian: apt-get install "
                           f"{' '.join(pkgs)})")
