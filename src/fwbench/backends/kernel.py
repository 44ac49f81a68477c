"""Kernel I/O in one place: loading, listing and counting every netfilter family
in the firewall namespace, and each kernel firewall (Firewall) emptied and
counted: flush_all goes through those the registered backends load into.

Backends render text and call these; they keep only what differs between them.
Counters are read by rule id (the `fwb:` annotation every rendering carries), never
by re-rendering a rule's text. Adding a family means one entry in FAMILIES.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from fwbench import bpf, proc
from fwbench.addresses import BENCH
from fwbench.backends import registry
from fwbench.ruleset.render import ID_TAG
from fwbench.testbed.base import Testbed
from fwbench.testbed.hoststate import emptying, emptying_shell, nft_tables, nft_xtables


@dataclass(frozen=True)
class XtFamily:
    """One iptables flavour: legacy or nft, IPv4 or IPv6."""
    variant: str    # "legacy" or "nft"
    version: int    # 4 or 6

    @property
    def tool(self) -> str:
        return f"{'ip' if self.version == 4 else 'ip6'}tables-{self.variant}"

    @property
    def proc_name(self) -> str:
        """/proc/net/<name>_tables_names lists x_tables' registered tables."""
        return "ip" if self.version == 4 else "ip6"


XT_FAMILIES = tuple(XtFamily(v, n) for v in ("legacy", "nft") for n in (4, 6))


def xt(variant: str, version: int) -> XtFamily:
    return XtFamily(variant, version)


# A whole rule set loaded, listed or flushed may take this long before it counts as
# hung: nft -f of kube-proxy's nftables mode at 30,000 services took 160 to 190 s
# on Linux 6.18 (the kernel walks a table's sets for each new one: render/nft.py),
# past the 120 s every other command gets.
BULK_TIMEOUT_S = 1800

# --- iptables ---------------------------------------------------------------------

def ipt_restore(tb: Testbed, fam: XtFamily, text: str) -> None:
    tb.exec("fw", [f"{fam.tool}-restore"], input=text, timeout=BULK_TIMEOUT_S)


def ipt_save(tb: Testbed, fam: XtFamily, counters: bool = False) -> str:
    return tb.exec("fw", [f"{fam.tool}-save", *(["-c"] if counters else [])],
                   timeout=BULK_TIMEOUT_S)


_SAVE_COUNTED = re.compile(r"^\[(\d+):(\d+)\] (-A .*)$")
_CHAIN_COUNTERS = re.compile(r" \[\d+:\d+\]$")
_IPT_ID = re.compile(r'-m comment --comment "' + re.escape(ID_TAG) + r'([^"]*)"')


def save_tables(text: str) -> dict[str, list[str]]:
    """iptables-save (or restore) text as table -> its lines in order: chains with
    their policies, then rules; comments, COMMIT and counters left out, so what was
    rendered and what the kernel lists compare line by line."""
    tables: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in text.splitlines():
        if not line or line.startswith("#") or line == "COMMIT":
            continue
        if line.startswith("*"):
            lines = tables.setdefault(line[1:], [])
        elif lines is not None:
            m = _SAVE_COUNTED.match(line)
            lines.append(m.group(3) if m else _CHAIN_COUNTERS.sub("", line))
    return tables


def ipt_counters(save_c_text: str) -> dict[str, int]:
    """Rule id -> packets, from `iptables-save -c` output."""
    out: dict[str, int] = {}
    for packets, rid in _COUNTED_ID.findall(save_c_text):
        out[rid] = out.get(rid, 0) + int(packets)
    return out


# A counted rule line's packets and its id: one pass over the whole text (100,000
# rules in a tenth of a second).
_COUNTED_ID = re.compile(r'^\[(\d+):\d+\] -A [^\n]*?-m comment --comment "'
                         + re.escape(ID_TAG) + r'([^"]*)"', re.M)


def ipt_ids(text: str) -> list[str]:
    """The rule ids of iptables-save (or restore) text, one per rule, in order."""
    return [m.group(1) for m in map(_IPT_ID.search, text.splitlines()) if m]


def register_xt_tables(tb: Testbed, fam: XtFamily, tables: tuple[str, ...]) -> None:
    """Register x_tables tables (empty) by listing them: a legacy table's hooks then
    run for every packet until the namespace goes, whatever is loaded later."""
    for table in tables:
        tb.exec("fw", [fam.tool, "-t", table, "-S"])


def _xt_tables(tb: Testbed, fam: XtFamily) -> list[str]:
    cp = tb.run("fw", ["cat", f"/proc/net/{fam.proc_name}_tables_names"], check=False)
    return cp.stdout.split() if cp.returncode == 0 else []


# --- ipset --------------------------------------------------------------------------

def ipset_restore(tb: Testbed, text: str) -> None:
    tb.exec("fw", ["ipset", "restore"], input=text, timeout=BULK_TIMEOUT_S)


def ipset_save(tb: Testbed) -> str:
    return tb.exec("fw", ["ipset", "save"], timeout=BULK_TIMEOUT_S)


def ipsets(text: str) -> dict[str, tuple[tuple[str, ...], list[str]]]:
    """ipset save/restore text as name -> ((type, family, maxelem[, counters]),
    elements); hashsize grows with the elements, so it is left out, and so are the
    values of a set's per-element counters (save prints `packets N bytes M`)."""
    sets: dict[str, tuple[tuple[str, ...], list[str]]] = {}
    counted: set[str] = set()
    for line in text.splitlines():
        if line.startswith("add ") and "  " not in line:
            # The fast path for a million elements: `add NAME ELEMENT...`.
            name, _, elem = line[4:].partition(" ")
            if name in sets and elem and name not in counted:
                sets[name][1].append(elem)
                continue
        words = line.split()
        if len(words) >= 3 and words[0] == "create":
            opts = {w: words[i + 1] for i, w in enumerate(words[:-1])
                    if w in ("family", "maxelem")}
            kind = (words[2], f"family {opts.get('family')}", f"maxelem {opts.get('maxelem')}")
            if "counters" in words[3:]:
                kind += ("counters",)
                counted.add(words[1])
            sets[words[1]] = (kind, [])
        elif len(words) >= 3 and words[0] == "add" and words[1] in sets:
            elem = words[2:]
            if words[1] in counted:
                elem = [w for i, w in enumerate(elem)
                        if w not in ("packets", "bytes")
                        and (i == 0 or elem[i - 1] not in ("packets", "bytes"))]
            sets[words[1]][1].append(" ".join(elem))
    return sets


# --- nftables -----------------------------------------------------------------------

def nft_load(tb: Testbed, text: str) -> None:
    tb.exec("fw", ["nft", "-f", "-"], input=text, timeout=BULK_TIMEOUT_S)


def nft_list(tb: Testbed) -> str:
    return tb.exec("fw", ["nft", "list", "ruleset"], timeout=BULK_TIMEOUT_S)


def nft_json(tb: Testbed, *what: str) -> list[dict]:
    """`nft -j list` of the ruleset, or of `what` (e.g. "chain", "ip", "raw",
    "PREROUTING": one chain's rules and counters without its table's set
    elements, which a large set makes slow to list)."""
    return json.loads(tb.exec("fw", ["nft", "-j", "list", *(what or ("ruleset",))],
                              timeout=BULK_TIMEOUT_S))["nftables"]


def nft_rule_id(comment: str | None) -> str | None:
    """The id in an nft rule comment: `fwb:ID`, or a user's text then ` fwb:ID`."""
    if not comment:
        return None
    last = comment.rsplit(" ", 1)[-1]
    return last[len(ID_TAG):] if last.startswith(ID_TAG) else None


def nft_counters(items: list[dict]) -> dict[str, int]:
    """Rule id -> packets, for every rule with an id and a counter."""
    out: dict[str, int] = {}
    for item in items:
        rule = item.get("rule")
        if not rule:
            continue
        rid = nft_rule_id(rule.get("comment"))
        if rid is None:
            continue
        for e in rule.get("expr", []):
            c = e.get("counter") if isinstance(e, dict) else None
            if isinstance(c, dict):
                out[rid] = out.get(rid, 0) + c.get("packets", 0)
    return out


def nftdump_binary() -> Path:
    """fwbench-nftdump: nf_tables read over netlink (engine/nftdump.c)."""
    return proc.built_binary("FWBENCH_NFTDUMP", "engine/build/fwbench-nftdump",
                             "nf_tables reader fwbench-nftdump")


@dataclass(frozen=True)
class NftRule:
    where: tuple[str, str, str]    # family, table, chain
    handle: int
    packets: int
    comment: str | None
    exprs: str                     # libnftnl's text of its expressions, counters' values out


@dataclass(frozen=True)
class NftDump:
    """What nf_tables holds, read over netlink by fwbench-nftdump: every chain (its
    declaration), every rule in order, every set (its size and a hash of its
    elements). Much faster than `nft list` at 100,000 rules: no translation back
    into nft's language."""
    chains: tuple[str, ...]          # "family table chain type hooknum priority policy"
    rules: tuple[NftRule, ...]
    sets: tuple[str, ...]            # "family table set flags key_type key_len n hash"
    elements: int                    # elements of the named (not anonymous) sets

    def counters(self) -> dict[str, int]:
        """Rule id -> packets, for every rule with an id and a counter."""
        out: dict[str, int] = {}
        for r in self.rules:
            rid = nft_rule_id(r.comment)
            if rid is not None and "[ counter ]" in r.exprs:
                out[rid] = out.get(rid, 0) + r.packets
        return out

    def entries(self) -> int:
        """Rules with an id, and the named sets' elements: what `entries` counts."""
        return sum(1 for r in self.rules if nft_rule_id(r.comment)) + self.elements

    @functools.cached_property
    def chain_rules(self) -> dict[tuple[str, str, str], list[str]]:
        """(family, table, chain) -> its rules in order, each as comment and
        expressions, anonymous sets' kernel-given numbers left out. Worked out once
        per dump: a proven dump is compared with trial after trial."""
        out: dict[tuple[str, str, str], list[str]] = {}
        for r in self.rules:
            out.setdefault(r.where, []).append(
                _ANON_SET.sub("__set", f"{r.comment or '-'} {r.exprs}"))
        return out


_ANON_SET = re.compile(r"__set\d+")
_NFT_SET_ANONYMOUS = 0x1


def nft_dump(tb: Testbed) -> NftDump:
    chains, rules, sets, elements = [], [], [], 0
    for line in tb.exec("fw", [str(nftdump_binary())], timeout=BULK_TIMEOUT_S).splitlines():
        kind, _, rest = line.partition("\t")
        f = rest.split("\t")
        if kind == "C":
            chains.append(" ".join(f))
        elif kind == "R":
            rules.append(NftRule((f[0], f[1], f[2]), int(f[3]), int(f[4]),
                                 None if f[6] == "-" else f[6], f[7]))
        elif kind == "S":
            anonymous = int(f[3]) & _NFT_SET_ANONYMOUS
            if not anonymous:
                elements += int(f[6])
            sets.append(" ".join([f[0], f[1], "__set" if anonymous else f[2], *f[3:]]))
    return NftDump(tuple(chains), tuple(rules), tuple(sets), elements)


_COUNTER_VALUES = re.compile(r"\bcounter packets \d+ bytes \d+")
_ELEMENTS = "elements = {"


# An anonymous set in a rule line: no braces or quotes inside.
_ANON_ELEMENTS = re.compile(r"\{ ([^{}\"]*) \}")


def _sorted_set(m: re.Match) -> str:
    return "{ " + ", ".join(sorted(e.strip() for e in m.group(1).split(","))) + " }"


def nft_lines(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """An nft ruleset, as `nft -f` reads it or `nft list` prints it, made comparable:
    its lines stripped, blank ones and counters' values left out, each anonymous
    set in a rule (`{ a, b }`, listed in its hash's order) with its elements
    sorted, and each set's `elements = { ... }` block (one element a line when
    rendered, several when listed, in hash order) taken out as (table, set) name
    -> elements."""
    lines: list[str] = []
    elements: dict[str, list[str]] = {}
    table = current_set = None
    it = iter(text.splitlines())
    for raw in it:
        line = _COUNTER_VALUES.sub("counter", raw.strip())
        if not line:
            continue
        if "{ " in line and not line.endswith("{"):
            line = _ANON_ELEMENTS.sub(_sorted_set, line)
        if line.startswith("table "):
            table = " ".join(line.split()[1:3])
        if line.startswith("set ") and line.endswith("{"):
            current_set = f"{table} {line.split()[1]}"
        if line.startswith(_ELEMENTS):
            # Piece by piece: a rendered set has one element a line, and looking for
            # the closing brace in the text gathered so far would take quadratic time.
            pieces = [line[len(_ELEMENTS):]]
            while "}" not in pieces[-1]:
                pieces.append(next(it, "}").strip())
            inside = " ".join(pieces).partition("}")[0]
            elements.setdefault(current_set or "?", []).extend(
                e.strip() for e in inside.split(",") if e.strip())
            line = _ELEMENTS + " ... }"
        lines.append(line)
    return lines, elements


# --- every firewall at once ---------------------------------------------------------

class Firewall:
    """One of the kernel's firewalls as fwbench empties and counts it in the
    firewall namespace, and as a real host's state saves and puts it back
    (testbed.hoststate, testbed.hosts). Backends name the ones they load into
    (Backend.firewalls); flush_all, ruleset_state and the put-back go through
    every registered backend's (registry.firewalls)."""
    name: str
    # A real host's listings of it, for its saved state: name -> argv, read-only.
    listings: dict[str, list[str]] = {}
    # Holds objects other firewalls' rules name (ipset's sets): the put-back
    # reloads it before the others.
    named_by_others = False

    def empty_host(self, ex, role: str, saved: dict[str, str], step,
                   zero: bool = True) -> None:
        """Empty it on a real host whose saved listings are `saved`, each command
        through `step(what, argv)`: before a run, and in the put-back, where
        counters are zeroed too (`zero`), as a fresh table's are."""

    def reload_host(self, saved: dict[str, str], step) -> None:
        """Load `saved`'s listings of it back, after every firewall was emptied."""

    def emptying_script(self) -> str | None:
        """Shell emptying it on a real host, tool by tool; None when emptying
        another (nf_tables) empties it too, or it is not a table of rules."""
        return None

    def flush(self, tb: Testbed) -> None:
        """Empty it; a firewall whose tool is missing holds nothing to empty."""

    def held(self, tb: Testbed) -> dict[str, int]:
        """What it holds, counted: listing name -> rules (or tables, sets,
        programs); empty when its tool is missing."""
        return {}

    def __repr__(self) -> str:
        return f"<firewall {self.name}>"


class XtLegacy(Firewall):
    """x_tables through iptables-legacy and ip6tables-legacy."""
    name = "x_tables"

    def flush(self, tb: Testbed) -> None:
        for fam in XT_FAMILIES:
            if fam.variant != "legacy" or not proc.have(fam.tool):
                continue
            # Only tables already registered: touching nat would register it, and
            # with it connection tracking, for every later trial in this namespace.
            # Policies first, in one command (hoststate.emptying says why).
            for table in _xt_tables(tb, fam):
                tb.exec("fw", emptying(fam.tool, table), timeout=BULK_TIMEOUT_S)

    def held(self, tb: Testbed) -> dict[str, int]:
        out = {}
        for fam in XT_FAMILIES:
            if fam.variant == "legacy" and proc.have(f"{fam.tool}-save"):
                text = ipt_save(tb, fam)
                out[fam.tool] = sum(1 for ln in text.splitlines() if ln.startswith("-A "))
        return out

    listings = {"iptables-legacy": ["iptables-legacy-save"],
                "ip6tables-legacy": ["ip6tables-legacy-save"]}
    # Listing -> the file naming its registered tables.
    _TABLES = {"iptables-legacy": "ip_tables_names", "ip6tables-legacy": "ip6_tables_names"}

    def empty_host(self, ex, role: str, saved: dict[str, str], step,
                   zero: bool = True) -> None:
        for name, table_file in self._TABLES.items():
            if name not in saved:
                continue
            tables = ex.run(role, ["cat", f"/proc/net/{table_file}"], check=False)
            for t in tables.stdout.split():
                step(f"emptying {name} {t}", emptying(name, t, zero=zero))

    def reload_host(self, saved: dict[str, str], step) -> None:
        _reload_saves(self.listings, saved, step)

    def emptying_script(self) -> str:
        return "; ".join(
            f"for t in $(cat /proc/net/{names} 2>/dev/null); do "
            f"{emptying_shell(tool, '$t')}; done" for tool, names in self._TABLES.items())


class XtNft(Firewall):
    """iptables-nft's tables: nf_tables tables in iptables' terms, emptied and
    counted with the rest of nf_tables (NfTables), listed and reloaded with its
    own tools."""
    name = "x_tables over nf_tables"
    listings = {"iptables-nft": ["iptables-nft-save"],
                "ip6tables-nft": ["ip6tables-nft-save"]}

    def reload_host(self, saved: dict[str, str], step) -> None:
        _reload_saves(self.listings, saved, step)


def _reload_saves(listings: dict[str, list[str]], saved: dict[str, str], step) -> None:
    """iptables-restore each saved iptables-save listing that holds anything."""
    for name, argv in listings.items():
        if saved.get(name, "").strip():
            step(f"restoring {name}", [argv[0].replace("-save", "-restore")], saved[name])


class NfTables(Firewall):
    name = "nf_tables"

    def flush(self, tb: Testbed) -> None:
        if proc.have("nft"):
            # also removes iptables-nft's tables
            tb.exec("fw", ["nft", "flush", "ruleset"], timeout=BULK_TIMEOUT_S)

    def held(self, tb: Testbed) -> dict[str, int]:
        if not proc.have("nft"):
            return {}
        return {"nftables_tables": sum(1 for ln in nft_list(tb).splitlines()
                                       if ln.startswith("table "))}

    listings = {"nft": ["nft", "list", "ruleset"]}

    def empty_host(self, ex, role: str, saved: dict[str, str], step,
                   zero: bool = True) -> None:
        if "nft" in saved:
            step("flushing nftables", ["nft", "flush", "ruleset"])

    def reload_host(self, saved: dict[str, str], step) -> None:
        """The tables of the listing that iptables-nft's listings do not hold
        (those came back with iptables-nft-restore)."""
        if saved.get("nft", "").strip():
            managed = nft_xtables(saved.get("iptables-nft", ""), "ip") \
                | nft_xtables(saved.get("ip6tables-nft", ""), "ip6")
            native = "".join(block for fam, name, block in nft_tables(saved["nft"])
                             if (fam, name) not in managed)
            if native:
                step("restoring nftables", ["nft", "-f", "-"], native)

    def emptying_script(self) -> str:
        return "nft flush ruleset"


class Ipsets(Firewall):
    name = "ipset"

    def flush(self, tb: Testbed) -> None:
        if proc.have("ipset"):
            tb.exec("fw", ["ipset", "destroy"])

    def held(self, tb: Testbed) -> dict[str, int]:
        if not proc.have("ipset"):
            return {}
        return {"ipsets": len(tb.exec("fw", ["ipset", "list", "-n"]).split())}

    listings = {"ipset": ["ipset", "save"]}
    named_by_others = True

    def empty_host(self, ex, role: str, saved: dict[str, str], step,
                   zero: bool = True) -> None:
        if "ipset" in saved:
            step("destroying ipsets", ["ipset", "destroy"])

    def reload_host(self, saved: dict[str, str], step) -> None:
        if saved.get("ipset", "").strip():
            step("restoring ipsets", ["ipset", "restore"], saved["ipset"])


class BpfHooks(Firewall):
    """eBPF programs at XDP and tc on the firewall's two ports."""
    name = "eBPF"

    def flush(self, tb: Testbed) -> None:
        for port in (tb.topo.fw_client_side, tb.topo.fw_server_side):
            bpf.detach_all(tb.executor, "fw", port.ifname)

    def held(self, tb: Testbed) -> dict[str, int]:
        return {"bpf_programs": sum(len(bpf.attached(tb.executor, "fw", port.ifname))
                                    for port in (tb.topo.fw_client_side,
                                                 tb.topo.fw_server_side))}


XT_LEGACY, XT_NFT, NF_TABLES, IPSET, BPF_HOOKS = XtLegacy(), XtNft(), NfTables(), \
    Ipsets(), BpfHooks()


def flush_all(tb: Testbed) -> None:
    """Empty every firewall in the firewall namespace, every registered backend's
    (registry.firewalls): legacy and nft rules would otherwise stack, and both
    would apply. Connection tracking's table goes too, so an earlier trial's
    flows are not `established` in the next."""
    for fw in registry.firewalls():
        fw.flush(tb)
    flush_conntrack(tb)


def flush_conntrack(tb: Testbed) -> bool:
    """Forget fwbench's tracked connections on the firewall; False when the
    conntrack tool is missing (the table then empties only by timeout).

    In a namespace of fwbench's every entry is fwbench's: the table is flushed. A
    real host's table also holds its own connections (its services', containers',
    what it routes for others, the SSH session's), which nothing could put back:
    there only the entries from or to the benchmarking ranges go, where all of
    fwbench's traffic, NAT included, lives (fwbench.addresses)."""
    if not proc.have("conntrack"):
        return False
    if not tb.own_traffic:
        tb.run("fw", ["conntrack", "-F"], check=False)  # exits 1 when nothing is loaded
        return True
    for version, net in BENCH.items():
        for side in ("src", "dst"):   # exits 1 when none matched
            tb.run("fw", ["conntrack", "-D", "-f", f"ipv{version}", f"--orig-{side}",
                          str(net.network_address), f"--mask-{side}", str(net.netmask)],
                   check=False)
    return True


def conntrack_entries(tb: Testbed) -> list[str]:
    """The firewall namespace's conntrack table, one `conntrack -L` line per
    entry; empty when nothing is tracked (or conntrack cannot be listed)."""
    cp = tb.run("fw", ["conntrack", "-L"], check=False)
    return cp.stdout.splitlines() if cp.returncode == 0 else []


def ruleset_state(tb: Testbed) -> dict[str, int]:
    """How many rules of any kind the firewall namespace holds, per firewall."""
    out: dict[str, int] = {}
    for fw in registry.firewalls():
        out.update(fw.held(tb))
    return out
