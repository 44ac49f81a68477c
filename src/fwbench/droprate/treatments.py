"""The treatments of the drop-position experiment: what each loads into the firewall
namespace, how it is read back, and which counter shows its verdicts.

Every treatment renders what it loads first (pure text: iptables-restore, nft,
ipset restore, or the ip/tc commands that attach a BPF program), loads it in one
step, lists what the kernel then holds, and reads its own packet counter: the
iptables rule's, the nft rule's, or the BPF program's per-CPU map. The flood is the
same for all of them: UDP from the client to the firewall's own client-side address,
at a port nothing listens on, with the payload text after the stamp.

Group "accept" lets the flood reach UDP (which finds no socket); both of its
treatments hold the same two raw rules apart from `--notrack`, and the second rule
(`-p icmp -j CT`) keeps connection tracking's hooks registered in both, as loading
the conntrack modules did on seed 002's kernel: the only difference is whether the
flood is tracked. Group "drop" drops every flood packet (hashlimit: all but ~1k/s).
"""
from __future__ import annotations

import abc
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from fwbench import proc
from fwbench.backends.kernel import flush_all, ruleset_state
from fwbench.ruleset.templates.droprate import (BENCH_V4, FILLER_CAPACITY,  # noqa: F401 (used by tests)
                                                TESTBED_V4, filler_addresses)
from fwbench.errors import FwbenchError
from fwbench.testbed.netns import NetnsTestbed

# Nothing listens on the discard port in the firewall namespace.
FLOOD_PORT = 9
BPF_OBJECT = Path(__file__).resolve().parents[3] / "bpf" / "build" / "drop.bpf.o"

# Set fillers: addresses of the benchmarking range the testbed does not use (its two
# link subnets are 198.18.0.0/24 and 198.19.0.0/24). The range holds 2^17 addresses,
# so no set here can hold seed 002's 265,000 distinct IPv4 addresses.
MAX_SET_SIZE = FILLER_CAPACITY + 1  # every filler plus the client's own address

# Names fwbench gives what it loads; `fwb_` keeps them apart from anything else.
IPSET_NAME = "fwb_bl"
NFT_TABLE = "fwb_drop"
NFT_SET = "fwb_bl"
HASHLIMIT_NAME = "fwb_udp"
HASHLIMIT_BURST = 5        # hashlimit's default, written out so the listing matches
BPF_MAP = "fwb_drops"
XDP_PROG = "fwb_xdp_drop"
TC_PROG = "fwb_tc_drop"

GROUPS = ("accept", "drop")


@dataclass(frozen=True)
class Target:
    """The flood and the firewall's side of it: the same in every treatment."""
    ifname: str                 # the firewall's client-side interface
    client_ip: str              # the flood's source
    fw_ip: str                  # the flood's destination: the firewall itself
    port: int = FLOOD_PORT
    text: str = "foo.com"       # in every packet, right after the stamp
    nonmatching: int = 5        # rules before the drop in `raw-after-rules`
    hashlimit_pps: int = 1000
    bpf_object: str = str(BPF_OBJECT)


@dataclass(frozen=True)
class Expect:
    """Where the flood must end under a treatment; verification checks each."""
    reaches_ip: bool            # Ip InReceives counts it (false: dropped before IP)
    passes: str                 # reaches UDP (Udp NoPorts): "none", "some" or "all"
    conntrack_on: bool = False  # conntrack's hooks run (an ICMP probe gets an entry)
    tracked: bool = False       # conntrack holds the flood's UDP flow


@dataclass
class Listing:
    """What the kernel holds after a load, read back."""
    entries: int                # rules, set elements or programs in place
    problems: list[str] = field(default_factory=list)
    notes: dict = field(default_factory=dict)


class Treatment(abc.ABC):
    id: str
    group: str
    expect: Expect
    tools: tuple[str, ...] = ()
    size: int = 1               # rules or set elements loaded (the record's `rules`)

    @abc.abstractmethod
    def label(self, t: Target) -> str:
        """The table's Method column, in seed 002's words where it has the row."""

    @abc.abstractmethod
    def render(self, t: Target) -> dict[str, str]:
        """File name -> text: exactly what load() feeds the kernel."""

    @abc.abstractmethod
    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        ...

    @abc.abstractmethod
    def inspect(self, tb: NetnsTestbed, t: Target, files: dict[str, str]) -> Listing:
        ...

    @abc.abstractmethod
    def hits(self, tb: NetnsTestbed, t: Target) -> int:
        """Packets the treatment's own counter has counted (drops, or for the
        accept group the UDP rule's matches)."""

    def silent(self, tb: NetnsTestbed, t: Target) -> list[int]:
        """Counters that the flood must not move (non-matching rules)."""
        return []

    @property
    def key(self) -> tuple[str, int]:
        return (self.id, self.size)

    def unavailable(self) -> str | None:
        for tool in self.tools:
            if not proc.have(tool):
                return f"{tool} not found (./scripts/setup.sh installs it)"
        return None


# --- iptables-legacy ------------------------------------------------------------

_CHAINS = {"raw": ("PREROUTING", "OUTPUT"), "filter": ("INPUT", "FORWARD", "OUTPUT")}
_COUNTED = re.compile(r"^\[(\d+):(\d+)\] -A (\S+) (.*)$")


def xt_restore(table: str, chain: str, rules: list[str]) -> str:
    """An iptables-restore file that replaces `table` with `rules` in `chain`."""
    lines = [f"*{table}"] + [f":{c} ACCEPT [0:0]" for c in _CHAINS[table]]
    lines += [f"-A {chain} {r}" for r in rules] + ["COMMIT", ""]
    return "\n".join(lines)


def xt_counted(save_text: str, chain: str) -> list[tuple[int, str]]:
    """(packets, rule text after `-A CHAIN `) of `chain` in `iptables-save -c` output."""
    out = []
    for line in save_text.splitlines():
        m = _COUNTED.match(line)
        if m and m.group(3) == chain:
            out.append((int(m.group(1)), m.group(4)))
    return out


class _Xt(Treatment):
    """Rules in one chain, written in iptables-save's own form so the listing can be
    compared with them line by line."""
    table = "raw"
    chain = "PREROUTING"
    hit = -1                    # the rule whose counter is the treatment's
    tools = ("iptables-legacy-restore", "iptables-legacy-save")

    @abc.abstractmethod
    def rules(self, t: Target) -> list[str]:
        ...

    def render(self, t: Target) -> dict[str, str]:
        return {"rules.iptables": xt_restore(self.table, self.chain, self.rules(t))}

    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        tb.exec("fw", ["iptables-legacy-restore"], input=files["rules.iptables"])

    def _counted(self, tb: NetnsTestbed) -> list[tuple[int, str]]:
        text = tb.exec("fw", ["iptables-legacy-save", "-c", "-t", self.table])
        return xt_counted(text, self.chain)

    def inspect(self, tb: NetnsTestbed, t: Target, files: dict[str, str]) -> Listing:
        got = [r for _, r in self._counted(tb)]
        want = self.rules(t)
        lst = Listing(len(got), notes={"table": self.table, "chain": self.chain})
        if got != want:
            lst.problems.append(f"{self.table} {self.chain} holds {len(got)} rule(s) that "
                                f"differ from the {len(want)} loaded")
            lst.notes["kernel_rules"] = got[:10]
        return lst

    def hits(self, tb: NetnsTestbed, t: Target) -> int:
        counted = self._counted(tb)
        if not counted:
            raise FwbenchError(f"{self.id}: no rule in {self.table} {self.chain}")
        return counted[self.hit][0]


class _Conntrack(_Xt):
    group = "accept"
    hit = 0
    notrack: bool

    def rules(self, t: Target) -> list[str]:
        udp = "-p udp -j CT --notrack" if self.notrack else "-p udp -j CT"
        # The ICMP rule registers conntrack in this namespace in both treatments.
        return [udp, "-p icmp -j CT"]


class Notrack(_Conntrack):
    id = "notrack"
    notrack = True
    size = 2
    expect = Expect(reaches_ip=True, passes="all", conntrack_on=True, tracked=False)

    def label(self, t: Target) -> str:
        return "Conntrack disabled (raw CT --notrack)"


class Conntrack(_Conntrack):
    id = "conntrack"
    notrack = False
    size = 2
    expect = Expect(reaches_ip=True, passes="all", conntrack_on=True, tracked=True)

    def label(self, t: Target) -> str:
        return "Conntrack enabled (raw CT)"


class RawDrop(_Xt):
    id = "raw"
    group = "drop"
    expect = Expect(reaches_ip=True, passes="none")

    def label(self, t: Target) -> str:
        return "Drop at very start of raw table"

    def rules(self, t: Target) -> list[str]:
        return [f"-i {t.ifname} -p udp -j DROP"]


class RawAfterRules(_Xt):
    """The raw drop behind `nonmatching` rules the flood never matches (sources it
    never uses); each of their counters must stay at zero."""
    id = "raw-after-rules"
    group = "drop"
    expect = Expect(reaches_ip=True, passes="none")

    def __init__(self, nonmatching: int = 5):
        self.size = nonmatching + 1

    def label(self, t: Target) -> str:
        return f"Drop after {self.size - 1} rules (raw)"

    def rules(self, t: Target) -> list[str]:
        fill = [f"-s {a}/32 -i {t.ifname} -p udp -j DROP"
                for a in filler_addresses(self.size - 1)]
        return fill + [f"-i {t.ifname} -p udp -j DROP"]

    def silent(self, tb: NetnsTestbed, t: Target) -> list[int]:
        return [n for n, _ in self._counted(tb)[:-1]]


class FilterInput(_Xt):
    id = "filter-input"
    group = "drop"
    table = "filter"
    chain = "INPUT"
    expect = Expect(reaches_ip=True, passes="none")

    def label(self, t: Target) -> str:
        return "Drop in filter table (INPUT)"

    def rules(self, t: Target) -> list[str]:
        return [f"-i {t.ifname} -p udp -j DROP"]


class StringMatch(_Xt):
    group = "drop"
    expect = Expect(reaches_ip=True, passes="none")

    def __init__(self, algo: str):
        if algo not in ("bm", "kmp"):
            raise FwbenchError(f"string match algorithm {algo!r}: expected bm or kmp")
        self.algo = algo
        self.id = f"string-{algo}"

    def label(self, t: Target) -> str:
        return f"String matching: {self.algo}"

    def rules(self, t: Target) -> list[str]:
        return [f'-p udp -m string --string "{t.text}" --algo {self.algo} -j DROP']


class Hashlimit(_Xt):
    """Seed 002's rule: each /16 of sources may send `hashlimit_pps`; the rest is
    dropped, so about that many packets a second reach UDP."""
    id = "hashlimit"
    group = "drop"
    expect = Expect(reaches_ip=True, passes="some")

    def label(self, t: Target) -> str:
        return f"Hashlimit ({t.hashlimit_pps:,} pps accepted)"

    def rules(self, t: Target) -> list[str]:
        return [f"-p udp -m hashlimit --hashlimit-above {t.hashlimit_pps}/sec "
                f"--hashlimit-burst {HASHLIMIT_BURST} --hashlimit-mode srcip "
                f"--hashlimit-name {HASHLIMIT_NAME} --hashlimit-srcmask 16 -j DROP"]


def _entries(n: int) -> str:
    return "1 entry" if n == 1 else f"{n:,} entries"


def ipset_restore(size: int, client_ip: str) -> str:
    """Seed 002's set: hash:ip with counters, the client's address plus fillers."""
    head = f"create {IPSET_NAME} hash:ip family inet counters maxelem {max(size, 1)}\n"
    addrs = (client_ip,) + filler_addresses(size - 1)
    return head + "".join(f"add {IPSET_NAME} {a}\n" for a in addrs)


class Ipset(_Xt):
    id = "ipset"
    group = "drop"
    expect = Expect(reaches_ip=True, passes="none")
    tools = _Xt.tools + ("ipset",)

    def __init__(self, size: int):
        self.size = size

    def label(self, t: Target) -> str:
        return f"ipset hash:ip, {_entries(self.size)}"

    def rules(self, t: Target) -> list[str]:
        return [f"-m set --match-set {IPSET_NAME} src -j DROP"]

    def render(self, t: Target) -> dict[str, str]:
        return {"set.ipset": ipset_restore(self.size, t.client_ip), **super().render(t)}

    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        tb.exec("fw", ["ipset", "restore"], input=files["set.ipset"])  # before its rule
        super().load(tb, files)

    def inspect(self, tb: NetnsTestbed, t: Target, files: dict[str, str]) -> Listing:
        lst = super().inspect(tb, t, files)
        head = tb.run("fw", ["ipset", "list", "-t", IPSET_NAME], check=False).stdout
        m = re.search(r"^Number of entries: (\d+)$", head, re.M)
        lst.entries = int(m.group(1)) if m else 0
        if lst.entries != self.size:
            lst.problems.append(f"set {IPSET_NAME} holds {lst.entries:,} entries, "
                                f"{self.size:,} asked")
        if tb.run("fw", ["ipset", "test", IPSET_NAME, t.client_ip],
                  check=False).returncode != 0:
            lst.problems.append(f"the client's address is not in set {IPSET_NAME}")
        hdr = re.search(r"^Header: (.*)$", head, re.M)
        lst.notes["ipset_header"] = hdr.group(1) if hdr else None
        return lst


# --- nftables -------------------------------------------------------------------

def _nft_json(tb: NetnsTestbed, *what: str) -> list[dict]:
    cp = tb.run("fw", ["nft", "-j", "list", *what], check=False)
    if cp.returncode != 0:
        return []
    return json.loads(cp.stdout).get("nftables", [])


def _nft_counter(expr: list[dict]) -> int | None:
    for e in expr:
        if isinstance(e.get("counter"), dict):
            return e["counter"].get("packets")
    return None


class _Nft(Treatment):
    family: str
    chain = "c"
    hook: str
    priority: int
    tools = ("nft",)

    @abc.abstractmethod
    def rule(self, t: Target) -> str:
        ...

    def _hook_line(self, t: Target) -> str:
        return f"type filter hook {self.hook} priority {self.priority}; policy accept;"

    def _set_block(self, t: Target) -> list[str]:
        return []

    def render(self, t: Target) -> dict[str, str]:
        lines = [f"table {self.family} {NFT_TABLE} {{", *self._set_block(t),
                 f"\tchain {self.chain} {{", f"\t\t{self._hook_line(t)}",
                 f"\t\t{self.rule(t)}", "\t}", "}", ""]
        return {"rules.nft": "\n".join(lines)}

    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        tb.exec("fw", ["nft", "-f", "-"], input=files["rules.nft"])

    def _chain(self, tb: NetnsTestbed) -> tuple[dict, list[list[dict]]]:
        items = _nft_json(tb, "chain", self.family, NFT_TABLE, self.chain)
        chain = next((i["chain"] for i in items if "chain" in i), {})
        return chain, [i["rule"]["expr"] for i in items if "rule" in i]

    def inspect(self, tb: NetnsTestbed, t: Target, files: dict[str, str]) -> Listing:
        chain, rules = self._chain(tb)
        lst = Listing(len(rules), notes={"chain": {k: chain.get(k) for k in
                                                   ("hook", "prio", "dev", "policy")}})
        if chain.get("hook") != self.hook or chain.get("prio") != self.priority:
            lst.problems.append(f"no {self.family} chain on hook {self.hook} priority "
                                f"{self.priority}")
        if len(rules) != 1:
            lst.problems.append(f"the chain holds {len(rules)} rules, 1 loaded")
        elif _nft_counter(rules[0]) is None or not any("drop" in e for e in rules[0]):
            lst.problems.append("the rule lacks its counter or its drop verdict")
        return lst

    def hits(self, tb: NetnsTestbed, t: Target) -> int:
        _, rules = self._chain(tb)
        n = _nft_counter(rules[0]) if rules else None
        if n is None:
            raise FwbenchError(f"{self.id}: no counted rule in {self.family} {NFT_TABLE}")
        return n


class NftIngress(_Nft):
    """Drop in the netdev family's ingress hook: before IP, after the skb exists."""
    id = "nft-ingress"
    group = "drop"
    family = "netdev"
    hook = "ingress"
    priority = 0
    expect = Expect(reaches_ip=False, passes="none")

    def label(self, t: Target) -> str:
        return "nft netdev ingress drop"

    def _hook_line(self, t: Target) -> str:
        return (f'type filter hook ingress device "{t.ifname}" priority 0; '
                f"policy accept;")

    def rule(self, t: Target) -> str:
        return "meta l4proto udp counter drop"

    def inspect(self, tb: NetnsTestbed, t: Target, files: dict[str, str]) -> Listing:
        lst = super().inspect(tb, t, files)
        # nft 1.0.6's JSON leaves a netdev chain's device out; its text has it.
        text = tb.run("fw", ["nft", "list", "chain", self.family, NFT_TABLE, self.chain],
                      check=False).stdout
        m = re.search(r'hook ingress device "?([^";\s]+)"?', text)
        lst.notes["chain"]["dev"] = m.group(1) if m else None
        if lst.notes["chain"]["dev"] != t.ifname:
            lst.problems.append(f"the ingress chain is not bound to {t.ifname}")
        return lst


class NftSet(_Nft):
    """The nft analogue of seed 002's ipset rule in raw PREROUTING: an ipv4_addr set
    looked up from a chain at raw's priority (-300)."""
    id = "nftset"
    group = "drop"
    family = "ip"
    hook = "prerouting"
    priority = -300
    expect = Expect(reaches_ip=True, passes="none")

    def __init__(self, size: int):
        self.size = size

    def label(self, t: Target) -> str:
        return f"nft set, {_entries(self.size)}"

    def _set_block(self, t: Target) -> list[str]:
        addrs = (t.client_ip,) + filler_addresses(self.size - 1)
        return [f"\tset {NFT_SET} {{", "\t\ttype ipv4_addr", f"\t\tsize {max(self.size, 1)}",
                f"\t\telements = {{ {', '.join(addrs)} }}", "\t}"]

    def rule(self, t: Target) -> str:
        return f"ip saddr @{NFT_SET} counter drop"

    def inspect(self, tb: NetnsTestbed, t: Target, files: dict[str, str]) -> Listing:
        lst = super().inspect(tb, t, files)
        items = _nft_json(tb, "set", self.family, NFT_TABLE, NFT_SET)
        s = next((i["set"] for i in items if "set" in i), {})
        elems = s.get("elem", [])
        lst.entries = len(elems)
        if lst.entries != self.size:
            lst.problems.append(f"set {NFT_SET} holds {lst.entries:,} elements, "
                                f"{self.size:,} asked")
        if t.client_ip not in elems:
            lst.problems.append(f"the client's address is not in set {NFT_SET}")
        lst.notes["set"] = {k: s.get(k) for k in ("type", "size", "flags")}
        return lst


# --- BPF, attached by iproute2 ----------------------------------------------------

def _digest(path: str) -> str | None:
    try:
        return proc.file_digest(Path(path))
    except OSError:
        return None


class _Bpf(Treatment):
    """bpf/build/drop.bpf.o: drops every IPv4 UDP packet and counts it in a per-CPU
    map, passes the rest."""
    group = "drop"
    prog_name: str
    tools = ("ip", "tc", "bpftool")
    expect = Expect(reaches_ip=False, passes="none")

    def __init__(self):
        self._maps: dict[int, int] = {}  # program id -> its counter map's id

    @abc.abstractmethod
    def commands(self, t: Target) -> list[str]:
        ...

    @abc.abstractmethod
    def prog_id(self, tb: NetnsTestbed, t: Target) -> int | None:
        ...

    def render(self, t: Target) -> dict[str, str]:
        return {"commands": "\n".join(self.commands(t)) + "\n"}

    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        for line in files["commands"].splitlines():
            tb.exec("fw", shlex.split(line))

    def unavailable(self) -> str | None:
        if not BPF_OBJECT.exists():
            return f"{BPF_OBJECT} is missing: build it with ./scripts/setup.sh"
        return super().unavailable()

    def _map_id(self, tb: NetnsTestbed, prog: int) -> int:
        if prog not in self._maps:
            info = json.loads(tb.exec("fw", ["bpftool", "-j", "prog", "show", "id", str(prog)]))
            for m in info.get("map_ids", []):
                meta = json.loads(tb.exec("fw", ["bpftool", "-j", "map", "show", "id", str(m)]))
                if meta.get("name") == BPF_MAP:
                    self._maps[prog] = m
                    break
            else:
                raise FwbenchError(f"{self.id}: program {prog} has no {BPF_MAP} map")
        return self._maps[prog]

    def hits(self, tb: NetnsTestbed, t: Target) -> int:
        prog = self.prog_id(tb, t)
        if prog is None:
            raise FwbenchError(f"{self.id}: no program attached to {t.ifname}")
        dump = json.loads(tb.exec("fw", ["bpftool", "-j", "map", "dump", "id",
                                         str(self._map_id(tb, prog))]))
        return sum(v["value"] for e in dump for v in e["formatted"]["values"])

    def _check(self, lst: Listing, prog: dict | None, t: Target) -> Listing:
        lst.notes["object_sha256"] = _digest(t.bpf_object)
        if not prog or prog.get("name") != self.prog_name:
            lst.problems.append(f"{self.prog_name} is not attached to {t.ifname}")
        else:
            lst.entries = 1
            lst.notes["prog"] = {k: prog.get(k) for k in ("id", "name", "tag", "jited")}
        return lst


class XdpDrop(_Bpf):
    id = "xdp"
    prog_name = XDP_PROG

    def label(self, t: Target) -> str:
        return "XDP drop (native, veth)"

    def commands(self, t: Target) -> list[str]:
        return [f"ip link set dev {t.ifname} xdpdrv obj {t.bpf_object} sec xdp"]

    def _xdp(self, tb: NetnsTestbed, t: Target) -> dict:
        return json.loads(tb.exec("fw", ["ip", "-j", "link", "show", "dev", t.ifname]))[0] \
            .get("xdp", {})

    def prog_id(self, tb: NetnsTestbed, t: Target) -> int | None:
        return self._xdp(tb, t).get("prog", {}).get("id")

    def inspect(self, tb: NetnsTestbed, t: Target, files: dict[str, str]) -> Listing:
        xdp = self._xdp(tb, t)
        lst = self._check(Listing(0), xdp.get("prog"), t)
        # iproute2's attach modes: 1 native (driver), 2 generic (skb), 3 offload.
        lst.notes["xdp_mode"] = xdp.get("mode")
        if xdp and xdp.get("mode") != 1:
            lst.problems.append(f"XDP is attached in mode {xdp.get('mode')}, not native")
        return lst


class TcDrop(_Bpf):
    id = "tc"
    prog_name = TC_PROG

    def label(self, t: Target) -> str:
        return "tc ingress drop (BPF)"

    def commands(self, t: Target) -> list[str]:
        return [f"tc qdisc add dev {t.ifname} clsact",
                f"tc filter add dev {t.ifname} ingress bpf da obj {t.bpf_object} sec tc"]

    def _filter(self, tb: NetnsTestbed, t: Target) -> dict:
        cp = tb.run("fw", ["tc", "-j", "filter", "show", "dev", t.ifname, "ingress"],
                    check=False)
        items = json.loads(cp.stdout) if cp.returncode == 0 and cp.stdout.strip() else []
        return next((i.get("options", {}) for i in items if i.get("kind") == "bpf"
                     and "options" in i), {})

    def prog_id(self, tb: NetnsTestbed, t: Target) -> int | None:
        return self._filter(tb, t).get("prog", {}).get("id")

    def inspect(self, tb: NetnsTestbed, t: Target, files: dict[str, str]) -> Listing:
        opts = self._filter(tb, t)
        lst = self._check(Listing(0), opts.get("prog"), t)
        if opts and not opts.get("direct-action"):
            lst.problems.append("the tc filter is not in direct-action mode")
        return lst


# --- the catalogue ------------------------------------------------------------------

# In the order of the table: seed 002's groups, earliest drop first.
NAMES = ("notrack", "conntrack", "xdp", "tc", "nft-ingress", "raw", "raw-after-rules",
         "filter-input", "ipset", "nftset", "string-bm", "string-kmp", "hashlimit")
SIZED = ("ipset", "nftset")  # one treatment per set size


def build(names: list[str], set_sizes: list[int], nonmatching: int) -> list[Treatment]:
    """The treatments asked for, in table order, sets once per size."""
    make = {
        "notrack": lambda: [Notrack()], "conntrack": lambda: [Conntrack()],
        "xdp": lambda: [XdpDrop()], "tc": lambda: [TcDrop()],
        "nft-ingress": lambda: [NftIngress()], "raw": lambda: [RawDrop()],
        "raw-after-rules": lambda: [RawAfterRules(nonmatching)],
        "filter-input": lambda: [FilterInput()],
        "ipset": lambda: [Ipset(n) for n in set_sizes],
        "nftset": lambda: [NftSet(n) for n in set_sizes],
        "string-bm": lambda: [StringMatch("bm")], "string-kmp": lambda: [StringMatch("kmp")],
        "hashlimit": lambda: [Hashlimit()],
    }
    out: list[Treatment] = []
    for name in NAMES:
        if name in names:
            out += make[name]()
    return out


# --- clearing the firewall between treatments ---------------------------------------

def clear(tb: NetnsTestbed, t: Target) -> None:
    """Remove every treatment: all firewalls, netfilter and eBPF (flush_all removes
    XDP programs and clsact qdiscs too), and the conntrack table's entries."""
    flush_all(tb)
    if proc.have("conntrack"):
        tb.run("fw", ["conntrack", "-F"], check=False)


def _has_clsact(tb: NetnsTestbed, t: Target) -> bool:
    cp = tb.run("fw", ["tc", "-j", "qdisc", "show", "dev", t.ifname], check=False)
    if cp.returncode != 0 or not cp.stdout.strip():
        return False
    return any(q.get("kind") == "clsact" for q in json.loads(cp.stdout))


def leftovers(tb: NetnsTestbed, t: Target) -> list[str]:
    """What is still loaded in the firewall namespace: empty after clear()."""
    left = [f"{k}: {v}" for k, v in ruleset_state(tb).items() if v]
    link = json.loads(tb.exec("fw", ["ip", "-j", "link", "show", "dev", t.ifname]))[0]
    if link.get("xdp"):
        left.append("an XDP program")
    if _has_clsact(tb, t):
        left.append("a clsact qdisc")
    return left
