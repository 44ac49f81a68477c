"""A real host's state that fwbench changes, saved before the first change and put
back however the run ends.

What is saved (`snapshot`): the firewall as each tool lists it (the listings of
every firewall the registered backends load into, backends.kernel.Firewall:
iptables-save and ip6tables-save of both the legacy and the nft tools, `nft list
ruleset`, `ipset save`), and for each test interface its link settings (up, MTU,
MAC), addresses, permanent neighbours, offloads (`ethtool -k`), RPS masks, attached
XDP programs and qdiscs; the routes and policy rules through the test interfaces; every sysctl
fwbench writes (the ones the build sets, and any other the moment before a caller
first writes it). Beside it, `added` (`no_additions`): what fwbench adds, each
thing recorded before it is added.

`restore_hooks_and_firewall`, then (once every host is past it) `restore_links`
bring the saved state back: a firewall fwbench emptied by flushing every tool's
tables and reloading what was saved (so the host's own rules return even where a
backend replaced them), what `added` names taken away and nothing else, the
interfaces setting by setting, and the sysctls value by value.
`compare` tells what still differs, on the listings with what the kernel changes
by itself taken out: the save tools' time stamps and every packet and byte counter.
"""
from __future__ import annotations

import json
import re
import shlex
from typing import Callable, Protocol, Sequence

from fwbench.errors import FwbenchError
from fwbench.testbed.executor import Executor
from fwbench.testbed.packets import SINK_TABLE


class Firewall(Protocol):
    """What the put-back needs of one kernel firewall: the registered backends'
    (backends.kernel.Firewall, passed down by the caller, registry.firewalls)."""
    listings: dict[str, list[str]]   # listing name -> argv, read-only
    named_by_others: bool

    def empty_host(self, ex: Executor, role: str, saved: dict[str, str], step,
                   zero: bool = True) -> None: ...

    def reload_host(self, saved: dict[str, str], step) -> None: ...

    def emptying_script(self) -> str | None: ...


def parsed(text: str) -> list:
    """The JSON array an `ip -j` or `tc -j` listing prints (empty: none)."""
    return json.loads(text or "[]")


def _link(ex: Executor, role: str, ifname: str) -> dict:
    info = parsed(ex.output(role, ["ip", "-j", "-d", "link", "show", "dev", ifname]))[0]
    out = {k: info.get(k) for k in ("ifname", "mtu", "address", "qdisc", "master")}
    out["up"] = "UP" in info.get("flags", [])
    out["xdp"] = _xdp_modes(info.get("xdp"))
    out["addr_gen_mode"] = info.get("inet6_addr_gen_mode")
    out["rx_queues"] = info.get("num_rx_queues", 1)
    return out


# `ip -d -j link`'s XDP attach modes, and the `ip link set` keyword detaching each.
_XDP_MODES = {1: "xdpdrv", 2: "xdpgeneric", 3: "xdpoffload"}


def _xdp_modes(xdp: dict | None) -> list[str]:
    """The modes an interface has an XDP program attached in ([] for none): one,
    or several ("attached", mode 4) when programs of more than one mode are."""
    if not xdp:
        return []
    if xdp.get("mode") == 4:
        return sorted(_XDP_MODES[a["mode"]] for a in xdp.get("attached", [])
                      if a.get("mode") in _XDP_MODES)
    return [_XDP_MODES.get(xdp.get("mode"), "xdp")]


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
    """The routes through a test interface and the policy rules selecting by one,
    each as a line of JSON: what the put-back brings back if it went. No other
    route is fwbench's business, whatever its destination: the management
    network's, the default route and routes learnt meanwhile are neither
    compared nor touched (removing one could cut the SSH session itself). Routes
    fwbench adds are taken away only because it recorded adding them
    (`restore_links`)."""
    ours = set(ifnames)
    out = []
    for v in ("-4", "-6"):
        for r in parsed(ex.output(role, ["ip", v, "-j", "route", "show", "table", "all"])):
            if r.get("dev") in ours:
                # Flags but onlink are the link's state (linkdown), not the route's.
                onlink = [f for f in r.get("flags", []) if f == "onlink"]
                out.append(json.dumps({"v": v, **{k: r[k] for k in sorted(r)
                                                   if k not in ("expires", "flags")},
                                       **({"flags": onlink} if onlink else {})},
                                      sort_keys=True))
        for r in parsed(ex.output(role, ["ip", v, "-j", "rule", "show"])):
            if r.get("iif") in ours or r.get("oif") in ours:
                out.append(json.dumps({"v": v, "rule": r}, sort_keys=True))
    return sorted(out)


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


def free_tables(ex: Executor, role: str, count: int, start: int) -> list[int]:
    """`count` routing-table numbers from `start` up that the host uses neither as
    a table (of a route, or one a rule looks up) nor as a rule's preference: the
    packet injector's own, which the put-back empties (fwbench.testbed.packets).
    Listed numerically (`ip -N`): a table named in rt_tables is a number too."""
    used = set()
    for v in ("-4", "-6"):
        used |= {str(r.get("table", 254)) for r in parsed(ex.output(
            role, ["ip", "-N", v, "-j", "route", "show", "table", "all"]))}
        for r in parsed(ex.output(role, ["ip", "-N", v, "-j", "rule", "show"])):
            used |= {str(r.get("priority")), str(r.get("table"))}
    free = (n for n in range(start, 2 ** 31) if str(n) not in used
            and n not in (253, 254, 255))   # default, main, local
    return [next(free) for _ in range(count)]


def have(ex: Executor, role: str, tools: list[str]) -> set[str]:
    """Which of `tools` the host has on its PATH."""
    script = "for t in " + " ".join(tools) + "; do command -v $t >/dev/null && echo $t; done; true"
    return set(ex.output(role, ["sh", "-c", script]).split())


def snapshot(ex: Executor, role: str, ifnames: list[str], keys: list[str],
             firewalls: Sequence[Firewall]) -> dict:
    """The host's state as `restore` brings it back and `compare` checks it."""
    saves = {name: argv for fw in firewalls for name, argv in fw.listings.items()}
    tools = have(ex, role, sorted({argv[0] for argv in saves.values()}))
    firewall = {}
    for name, argv in saves.items():
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

def nft_tables(text: str) -> list[tuple[str, str, str]]:
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


def nft_xtables(save: str, family: str) -> set[tuple[str, str]]:
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


def no_additions() -> dict:
    """What fwbench has added to a host, recorded (in its saved state) before it
    adds it: per test interface the addresses and the neighbours (by address),
    the routes ({v, dst, gateway}), the routing tables (and rules of the same
    number) the packet injector uses, and whether it emptied the firewall. The
    put-back takes away exactly these; nothing else of a host is fwbench's to
    remove."""
    return {"firewall": False, "addresses": {}, "neighbours": {}, "routes": [],
            "tables": []}


def restore_hooks_and_firewall(ex: Executor, role: str, saved: dict, now: dict,
                               firewalls: Sequence[Firewall],
                               note: Callable[[str], None] = lambda s: None) -> None:
    """The first part of putting a host back as `saved` (a snapshot, with what
    fwbench added) had it, `now` being its snapshot as it stands: XDP programs
    and tc hooks on the test interfaces that were not there before go (a host
    with any there was refused), and a firewall fwbench emptied is reloaded, if
    its listing differs. An end host's firewall, which fwbench never loads, is
    left as it is, whatever it holds now."""
    fw = saved["firewall"]
    step = _stepper(ex, role, note)
    for ifname, s in saved["links"].items():
        cur = now["links"].get(ifname, {})
        had = set(s["link"]["xdp"] or [])
        for mode in cur.get("link", {}).get("xdp") or []:
            if mode not in had:
                step(f"detaching XDP from {ifname}", ["ip", "link", "set", "dev", ifname,
                                                       mode, "off"])
        had = {q.split()[0] for q in s["qdiscs"]}
        has = {q.split()[0] for q in cur.get("qdiscs", [])}
        for kind in ("clsact", "ingress"):
            if kind in has and kind not in had:
                step(f"removing {kind} from {ifname}", ["tc", "qdisc", "del", "dev",
                                                        ifname, kind])
    # The packet injector's drop table on an end host (a run killed while it
    # captured): its name is fwbench's (a host holding one was refused).
    sink = f"table netdev {SINK_TABLE} {{"
    if sink in now["firewall"].get("nft", "") and sink not in fw.get("nft", ""):
        step(f"removing {SINK_TABLE}", ["nft", "delete", "table", "netdev", SINK_TABLE])
    if not saved.get("added", {}).get("firewall"):
        return
    if any(normal(k, fw.get(k, "")) != normal(k, now["firewall"].get(k, ""))
           for k in fw.keys() | now["firewall"].keys()):
        _restore_firewall(ex, role, fw, step, firewalls)


def restore_links(ex: Executor, role: str, saved: dict,
                  note: Callable[[str], None] = lambda s: None) -> None:
    """The second part: the test interfaces setting by setting, what fwbench
    added to them taken away and what they had put back; the routes and rules;
    the sysctls."""
    step = _stepper(ex, role, note)
    added = saved.get("added") or no_additions()
    ifnames = list(saved["links"])
    _take_routes(ex, role, ifnames, saved["routes"], added, step)
    for ifname, s in saved["links"].items():
        _restore_link(ex, role, ifname, s, added, step)
    _give_routes_back(ex, role, ifnames, saved["routes"], step)
    now = sysctls(ex, role, list(saved["sysctls"]))
    for k, v in saved["sysctls"].items():
        if v != "" and now.get(k) != v:
            step(f"sysctl {k}", ["sysctl", "-q", "-w", f"{k}={v}"])


def emptying_shell(tool: str, table: str) -> str:
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
    return ["sh", "-c", emptying_shell(shlex.quote(tool), shlex.quote(table))
            + (f" && {t} -Z" if zero else "")]


def emptying_script(firewalls: Sequence[Firewall]) -> str:
    """Shell: every firewall of the host emptied (legacy x_tables of both families,
    then nftables, iptables-nft's tables with it): what the watchdog does to a host
    whose new rule set cut fwbench off (hosts.SshTestbed.firewall_change)."""
    return "; ".join(filter(None, (fw.emptying_script() for fw in firewalls)))


def _restore_firewall(ex: Executor, role: str, fw: dict, step,
                      firewalls: Sequence[Firewall]) -> None:
    """Empty every firewall, then reload what was saved, the firewalls whose
    objects others name (sets) before the rules that name them."""
    for f in firewalls:
        f.empty_host(ex, role, fw, step)
    for f in sorted(firewalls, key=lambda f: not f.named_by_others):
        f.reload_host(fw, step)


def _restore_link(ex: Executor, role: str, ifname: str, s: dict, added: dict,
                  step) -> None:
    """One test interface back as `s` had it. The MTU first (IPv6 addresses need
    1280), and up or down before addresses and neighbours; an address or a
    neighbour goes only if fwbench added it, and one the interface had comes back
    (a neighbour fwbench replaced gets its own link-layer address again)."""
    link = s["link"]
    cur = _link(ex, role, ifname)
    if cur["mtu"] != link["mtu"]:
        step(f"MTU of {ifname}", ["ip", "link", "set", "dev", ifname, "mtu",
                                  str(link["mtu"])])
    if cur["up"] != link["up"]:
        step(f"{ifname} {'up' if link['up'] else 'down'}",
             ["ip", "link", "set", "dev", ifname, "up" if link["up"] else "down"])
    have = _addresses(ex, role, ifname)
    for a in added["addresses"].get(ifname, []):
        if a in have and a not in s["addresses"]:
            step(f"removing {a} from {ifname}", ["ip", "addr", "del", a, "dev", ifname])
    for a in s["addresses"]:
        if a not in have and not a.startswith("fe80:"):
            step(f"adding {a} back to {ifname}", ["ip", "addr", "add", a, "dev", ifname])
    had = dict(n.split(" ", 1) for n in s["neighbours"])
    now = dict(n.split(" ", 1) for n in _neighbours(ex, role, ifname))
    for dst in added["neighbours"].get(ifname, []):
        if dst in now and dst not in had:
            step(f"removing neighbour {dst} of {ifname}",
                 ["ip", "neigh", "del", dst, "dev", ifname])
    for dst, mac in had.items():
        if now.get(dst) != mac:
            step(f"neighbour {dst} of {ifname}", ["ip", "neigh", "replace", dst, "lladdr",
                                                  mac, "dev", ifname, "nud", "permanent"])
    features = _features(ex, role, ifname)
    change = []
    for k, v in s["features"].items():
        if not v.endswith("fixed") and features.get(k) != v:
            change += [k, v]
    if change:
        step(f"offloads of {ifname}", ["ethtool", "-K", ifname, *change])
    rps = _rps(ex, role, ifname)
    for q, mask in s["rps"].items():
        if rps.get(q) != mask:
            step(f"RPS of {ifname} {q}", ["sh", "-c", f"echo {mask} > "
                                          f"/sys/class/net/{ifname}/queues/{q}/rps_cpus"])


def _same_route(r: dict, ours: dict) -> bool:
    """Whether listed route `r` is the one fwbench added as `ours`
    ({v, dst, gateway}, in the main table)."""
    return (r["v"], r.get("dst"), r.get("gateway"), r.get("table", "main")) == \
        (ours["v"], ours["dst"], ours["gateway"], "main")


def _route_argv(verb: str, r: dict) -> list[str]:
    """`ip route VERB` of route `r` as `ip -j route` lists it: type, destination,
    gateway, device, table and what else it carries."""
    argv = ["ip", r["v"], "route", verb]
    if r.get("type", "unicast") != "unicast":
        argv.append(r["type"])
    argv.append(r["dst"])
    if r.get("gateway"):
        argv += ["via", r["gateway"]]
    if r.get("dev"):
        argv += ["dev", r["dev"]]
    argv += ["table", str(r.get("table", "main"))]
    if verb == "add":
        for key, word in (("protocol", "proto"), ("scope", "scope"), ("metric", "metric"),
                          ("prefsrc", "src"), ("pref", "pref")):
            if r.get(key) not in (None, "") and not (key == "scope" and r[key] == "global"):
                argv += [word, str(r[key])]
        argv += [f for f in r.get("flags", []) if f == "onlink"]
    return argv


def _kernels(r: dict) -> bool:
    """A route the kernel makes and takes away itself, with an address or a link:
    it comes back with them and is never added by hand."""
    return r.get("protocol") == "kernel" or r.get("table") == "local" or \
        r.get("type") in ("local", "broadcast", "anycast", "multicast")


def _take_routes(ex: Executor, role: str, ifnames: list[str], saved: list[str],
                 added: dict, step) -> None:
    """The routes and rules fwbench recorded adding go: its routes (unless the
    host had the same one before), and in the packet injector's tables (empty
    when fwbench chose them) every route and the rule of the same number.
    Nothing else is touched, so a management route or the default route never
    is."""
    for line in _routes(ex, role, ifnames):
        r = json.loads(line)
        if "rule" not in r and line not in saved and \
                any(_same_route(r, a) for a in added["routes"]):
            step(f"removing route {r['dst']}", _route_argv("del", r))
    for table in added["tables"]:
        for v in ("-4", "-6"):
            for rule in parsed(ex.output(role, ["ip", v, "-j", "rule", "show"])):
                if rule.get("priority") == table and str(rule.get("table")) == str(table):
                    step(f"removing rule {table}", ["ip", v, "rule", "del", "pref",
                                                    str(table), "table", str(table)])
            if parsed(ex.output(role, ["ip", v, "-j", "route", "show", "table",
                                       str(table)])):
                step(f"emptying table {table}", ["ip", v, "route", "flush", "table",
                                                 str(table)])


def _give_routes_back(ex: Executor, role: str, ifnames: list[str], saved: list[str],
                      step) -> None:
    """A route or rule through a test interface that the host had and lost (a
    link reset drops IPv4 routes) comes back, as it was listed."""
    have = set(_routes(ex, role, ifnames))
    for line in saved:
        if line in have:
            continue
        r = json.loads(line)
        if "rule" in r:
            rule = r["rule"]
            argv = ["ip", r["v"], "rule", "add", "pref", str(rule["priority"])]
            for key, word in (("iif", "iif"), ("oif", "oif"), ("src", "from"),
                              ("dst", "to"), ("fwmark", "fwmark")):
                if key in rule and rule[key] != "all":
                    plen = rule.get(f"{key}len")
                    argv += [word, f"{rule[key]}/{plen}" if plen is not None
                             else str(rule[key])]
            argv += ["table", str(rule.get("table", "main"))]
            step(f"adding rule {rule['priority']} back", argv)
        elif not _kernels(r):
            step(f"adding route {r['dst']} back", _route_argv("add", r))


def require_tools(ex: Executor, role: str, needed: dict[str, str], where: str) -> None:
    """One line naming every missing tool of `needed` ({tool: Debian package})."""
    got = have(ex, role, sorted(needed))
    missing = [t for t in needed if t not in got]
    if missing:
        pkgs = sorted({needed[t] for t in missing})
        raise FwbenchError(f"{where} lacks {', '.join(missing)} (Debian: apt-get install "
                           f"{' '.join(pkgs)})")
