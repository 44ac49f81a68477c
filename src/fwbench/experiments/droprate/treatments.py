"""The treatments of the drop-position experiment: which rule set each loads into the
firewall namespace, how it is read back, and which counter shows its verdicts.

Every netfilter treatment is a rule set of the `droprate` template
(fwbench.ruleset.templates.droprate), rendered, loaded, listed and counted by a
backend (iptables-legacy, with its ipsets, or nftables) exactly as the main
benchmark's rule sets are: the listing must equal the rendering, and counters are
read by rule id (`flood`, and raw-after-rules' `nonmatching-N`, which the flood
must not move). The xdp and tc treatments attach bpf/drop.bpf.o with iproute2
(fwbench.bpf) and read its program's per-CPU map. The flood is the same for all of
them: UDP from the client to the firewall's own client-side address, at a port
nothing listens on, with the payload text after the stamp.

Group "accept" lets the flood reach UDP (which finds no socket); both of its
treatments hold the same two raw rules apart from `--notrack`, and the second rule
(`-p icmp -j CT`) keeps connection tracking's hooks registered in both, as loading
the conntrack modules did on seed 002's kernel: the only difference is whether the
flood is tracked. Group "drop" drops every flood packet (hashlimit: all but ~1k/s).
"""
from __future__ import annotations

import abc
import functools
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from fwbench import bpf, proc
from fwbench.backends import kernel
from fwbench.backends.base import Backend
from fwbench.backends.iptables import IptablesLegacy
from fwbench.backends.nftables import NftLinear
from fwbench.errors import FwbenchError
from fwbench.ruleset.model import Interfaces, Match, RuleSet
from fwbench.ruleset.templates import droprate as template
from fwbench.ruleset.templates.droprate import (BENCH_V4, FILLER_CAPACITY,  # noqa: F401
                                                FLOOD_PORT, FLOOD_RULE, HASHLIMIT_BURST,
                                                MAX_SET_SIZE, TESTBED_V4, filler_addresses)
from fwbench.testbed.base import Testbed

BPF_OBJECT = bpf.DROP_OBJECT
NONMATCHING = "nonmatching-"    # raw-after-rules' rules the flood passes: `nonmatching-N`

GROUPS = ("accept", "drop")
# A listing problem names this many differences and counts the rest.
_DIFFERENCES_SHOWN = 3


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
    server_ifname: str = ""     # the firewall's other interface (no treatment names it)

    @property
    def interfaces(self) -> Interfaces:
        return Interfaces(self.ifname, self.server_ifname, (self.fw_ip,))


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


@functools.lru_cache(maxsize=32)
def _ruleset(treatment: str, size: int, nonmatching: int, t: Target) -> RuleSet:
    return template.droprate(treatment=treatment, size=size, nonmatching=nonmatching,
                             port=t.port, text=t.text, hashlimit_pps=t.hashlimit_pps)


class Treatment(abc.ABC):
    id: str
    group: str
    expect: Expect
    tools: tuple[str, ...] = ()
    size: int = 1               # rules or set elements loaded (the record's `rules`)

    @abc.abstractmethod
    def label(self, t: Target) -> str:
        """The table's Method column, in seed 002's words where it has the row."""

    def ruleset(self, t: Target) -> RuleSet:
        """The treatment as a rule set of the model (the template's)."""
        size = self.size if self.id in SIZED else 1
        nonmatching = self.size - 1 if self.id == "raw-after-rules" else 0
        return _ruleset(self.id, size, nonmatching, t)

    @abc.abstractmethod
    def render(self, t: Target) -> dict[str, str]:
        """File name -> text: exactly what load() feeds the kernel."""

    @abc.abstractmethod
    def load(self, tb: Testbed, files: dict[str, str]) -> None:
        """Feed the kernel `files` (render()'s) in one step."""

    def apply(self, tb: Testbed, t: Target) -> float | None:
        """Load the treatment into the cleared firewall, as a trial does; its load
        time, or None when the caller's wall time is it."""
        self.load(tb, self.render(t))
        return None

    @abc.abstractmethod
    def inspect(self, tb: Testbed, t: Target, files: dict[str, str]) -> Listing:
        ...

    @abc.abstractmethod
    def counters(self, tb: Testbed, t: Target) -> dict[str, int]:
        """Rule id -> packets counted, for the rules the kernel holds."""

    def hits(self, tb: Testbed, t: Target) -> int:
        """Packets the treatment's own counter (rule `flood`'s) has counted: drops, or
        for the accept group the UDP rule's matches."""
        got = self.counters(tb, t)
        if FLOOD_RULE not in got:
            raise FwbenchError(f"{self.id}: no rule {FLOOD_RULE} in the kernel "
                               f"({self.where(t)})")
        return got[FLOOD_RULE]

    def silent(self, tb: Testbed, t: Target) -> list[int]:
        """Counters that the flood must not move (the non-matching rules)."""
        ids = [r.id for _, _, r in self.ruleset(t).rules() if r.id.startswith(NONMATCHING)]
        if not ids:
            return []
        got = self.counters(tb, t)
        missing = [i for i in ids if i not in got]
        if missing:
            raise FwbenchError(f"{self.id}: no rule {missing[0]} in the kernel "
                               f"({self.where(t)})")
        return [got[i] for i in ids]

    def where(self, t: Target) -> str:
        """Where the flood's rule is: `raw PREROUTING`, `netdev fwbench ingress`."""
        for table, chain, r in self.ruleset(t).rules():
            if r.id == FLOOD_RULE:
                fam = "" if table.family in ("ip", "ip6") else f"{table.family} "
                return f"{fam}{table.name} {chain.name}"
        return "nowhere"

    @property
    def key(self) -> tuple[str, int]:
        return (self.id, self.size)

    def unavailable(self) -> str | None:
        for tool in self.tools:
            if not proc.have(tool):
                return f"{tool} not found (./scripts/setup.sh installs it)"
        return None


# --- netfilter: rendered, loaded and read back by a backend ---------------------------

def _entries(n: int) -> str:
    return "1 entry" if n == 1 else f"{n:,} entries"


class _Netfilter(Treatment):
    """A rule set the backend renders and loads in one step; the listing must equal
    the rendering (rules in order, set elements as a set, hooks, priorities and
    devices), and as many rules (or set elements) as the treatment's size."""
    backend: Backend

    def __init__(self):
        self._files: dict[Target, dict[str, str]] = {}

    def render(self, t: Target) -> dict[str, str]:
        if t not in self._files:   # once a run: a large set takes a second to render
            rs = self.ruleset(t)
            self.backend.refuse_unsupported(rs)
            self._files[t] = self.backend.render(rs, t.interfaces)
        return dict(self._files[t])

    def load(self, tb: Testbed, files: dict[str, str]) -> None:
        self.backend.load(tb, files)

    def apply(self, tb: Testbed, t: Target) -> float | None:
        # As the sweeps load a rule set: the backend flushes every firewall and
        # loads its rendering (render()'s text: only the interface names of the
        # Target reach it) in one step, timing the load alone. It hushes the hosts
        # until a verification's packet exchange, which droprate does not make: an
        # outbound IPsec policy would stand through the probe and the flood, and
        # the kernel would look up every packet in it, so the hush ends here.
        try:
            return self.backend.apply(tb, self.ruleset(t)).load_time_s
        finally:
            tb.hush(False)

    def counters(self, tb: Testbed, t: Target) -> dict[str, int]:
        return self.backend.counters(tb, self.ruleset(t))

    def inspect(self, tb: Testbed, t: Target, files: dict[str, str]) -> Listing:
        rs = self.ruleset(t)
        diffs = self.backend.differences(tb, rs)
        held = self.backend.entries(tb, rs)      # rules and set elements
        sets = [s for table in rs.tables for s in table.sets]
        entries = held - rs.rule_count if sets else held
        lst = Listing(entries, notes={"backend": self.backend.name, "where": self.where(t),
                                      "differences": diffs[:10]})
        if diffs:
            more = len(diffs) - _DIFFERENCES_SHOWN
            lst.problems.append("the kernel's rule set differs from the rendered one: "
                                + "; ".join(diffs[:_DIFFERENCES_SHOWN])
                                + (f"; and {more} more" if more > 0 else ""))
        if entries != self.size:
            what = f"set {sets[0].name} holds {entries:,} entries" if sets else \
                f"{self.where(t)} holds {entries:,} rule(s)"
            lst.problems.append(f"{what}, {self.size:,} asked")
        return lst


class _Xt(_Netfilter):
    """iptables-legacy (and its ipsets), as the iptables-legacy backend loads them."""
    backend = IptablesLegacy()
    tools = ("iptables-legacy-restore", "iptables-legacy-save")


class _Nft(_Netfilter):
    """nftables, as the nftables backend loads it."""
    backend = NftLinear()
    tools = ("nft",)

    def counters(self, tb: Testbed, t: Target) -> dict[str, int]:
        # The flood's chain alone: the whole ruleset would list a large set's
        # elements at every read.
        rs = self.ruleset(t)
        out: dict[str, int] = {}
        for table in rs.tables:
            for chain in table.chains:
                try:
                    items = kernel.nft_json(tb, "chain", table.family, table.name, chain.name)
                except FwbenchError:
                    continue   # not loaded: hits() says which rule is missing
                out.update(kernel.nft_counters(items))
        return out


class _Conntrack(_Xt):
    group = "accept"


class Notrack(_Conntrack):
    id = "notrack"
    size = 2
    expect = Expect(reaches_ip=True, passes="all", conntrack_on=True, tracked=False)

    def label(self, t: Target) -> str:
        return "Conntrack disabled (raw CT --notrack)"


class Conntrack(_Conntrack):
    id = "conntrack"
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


class RawAfterRules(_Xt):
    """The raw drop behind `nonmatching` rules the flood never matches (sources it
    never uses); each of their counters must stay at zero."""
    id = "raw-after-rules"
    group = "drop"
    expect = Expect(reaches_ip=True, passes="none")

    def __init__(self, nonmatching: int = 5):
        super().__init__()
        self.size = nonmatching + 1

    def label(self, t: Target) -> str:
        return f"Drop after {self.size - 1} rules (raw)"


class FilterInput(_Xt):
    id = "filter-input"
    group = "drop"
    expect = Expect(reaches_ip=True, passes="none")

    def label(self, t: Target) -> str:
        return "Drop in filter table (INPUT)"


class StringMatch(_Xt):
    group = "drop"
    expect = Expect(reaches_ip=True, passes="none")

    def __init__(self, algo: str):
        super().__init__()
        if algo not in ("bm", "kmp"):
            raise FwbenchError(f"string match algorithm {algo!r}: expected bm or kmp")
        self.algo = algo
        self.id = f"string-{algo}"

    def label(self, t: Target) -> str:
        return f"String matching: {self.algo}"


class Hashlimit(_Xt):
    """Seed 002's rule: each /16 of sources may send `hashlimit_pps`; the rest is
    dropped, so about that many packets a second reach UDP."""
    id = "hashlimit"
    group = "drop"
    expect = Expect(reaches_ip=True, passes="some")

    def label(self, t: Target) -> str:
        return f"Hashlimit ({t.hashlimit_pps:,} pps accepted)"


class Ipset(_Xt):
    """Seed 002's set: hash:ip with per-element counters, the client's address and
    fillers, looked up from raw PREROUTING."""
    id = "ipset"
    group = "drop"
    expect = Expect(reaches_ip=True, passes="none")
    tools = _Xt.tools + ("ipset",)

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def label(self, t: Target) -> str:
        return f"ipset hash:ip, {_entries(self.size)}"


class NftIngress(_Nft):
    """Drop in the netdev family's ingress hook: before IP, after the skb exists."""
    id = "nft-ingress"
    group = "drop"
    expect = Expect(reaches_ip=False, passes="none")

    def label(self, t: Target) -> str:
        return "nft netdev ingress drop"


class NftSet(_Nft):
    """The nft analogue of seed 002's ipset rule in raw PREROUTING: an ipv4_addr set
    looked up from a chain at raw's priority (-300)."""
    id = "nftset"
    group = "drop"
    expect = Expect(reaches_ip=True, passes="none")

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def label(self, t: Target) -> str:
        return f"nft set, {_entries(self.size)}"


# --- BPF, attached by iproute2 ----------------------------------------------------

def _digest(path: str) -> str | None:
    try:
        return proc.file_digest(Path(path))
    except OSError:
        return None


class _Bpf(Treatment):
    """bpf/build/drop.bpf.o: drops every IPv4 UDP packet and counts it in a per-CPU
    map, passes the rest: the template's rule set (raw `-p udp -j DROP`, rule
    `flood`) at XDP or tc ingress. No renderer writes the program; render() checks
    the rule set is the one it implements."""
    group = "drop"
    hook: str
    tools = ("ip", "tc", "bpftool")
    expect = Expect(reaches_ip=False, passes="none")

    @property
    def prog_name(self) -> str:
        return bpf.DROP_PROGRAMS[self.hook]

    def render(self, t: Target) -> dict[str, str]:
        rules = [r for _, _, r in self.ruleset(t).rules()]
        if len(rules) != 1 or rules[0].id != FLOOD_RULE or rules[0].action.kind != "drop" \
                or rules[0].match != Match(proto="udp"):
            raise FwbenchError(f"{self.id}: the rule set is not the one "
                               f"{BPF_OBJECT.name} implements (drop every UDP packet)")
        cmds = bpf.drop_commands(self.hook, t.ifname, t.bpf_object)
        return {"commands": "".join(shlex.join(argv) + "\n" for argv in cmds)}

    def load(self, tb: Testbed, files: dict[str, str]) -> None:
        bpf.attach_drop(tb.executor, "fw",
                        [shlex.split(line) for line in files["commands"].splitlines()])

    def unavailable(self) -> str | None:
        if not BPF_OBJECT.exists():
            return f"{BPF_OBJECT} is missing: build it with ./scripts/setup.sh"
        return super().unavailable()

    def _attached(self, tb: Testbed, t: Target) -> dict:
        return bpf.drop_attachment(tb.executor, "fw", self.hook, t.ifname)

    def counters(self, tb: Testbed, t: Target) -> dict[str, int]:
        """The program's map counts the one rule it implements, `flood`."""
        prog = self._attached(tb, t).get("prog")
        if prog is None:
            raise FwbenchError(f"{self.id}: no program attached to {t.ifname}")
        return {FLOOD_RULE: bpf.drop_count(tb.executor, "fw", prog["id"])}

    def inspect(self, tb: Testbed, t: Target, files: dict[str, str]) -> Listing:
        att = self._attached(tb, t)
        prog = att.get("prog")
        lst = Listing(0, notes={"object_sha256": _digest(t.bpf_object)})
        if not prog or prog.get("name") != self.prog_name:
            lst.problems.append(f"{self.prog_name} is not attached to {t.ifname}")
        else:
            lst.entries = 1
            lst.notes["prog"] = {k: prog.get(k) for k in ("id", "name", "tag", "jited")}
        if self.hook == "xdp":
            # iproute2's attach modes: 1 native (driver), 2 generic (skb), 3 offload.
            lst.notes["xdp_mode"] = att.get("mode")
            if att and att.get("mode") != 1:
                lst.problems.append(f"XDP is attached in mode {att.get('mode')}, not native")
        elif att and not att.get("direct_action"):
            lst.problems.append("the tc filter is not in direct-action mode")
        return lst


class XdpDrop(_Bpf):
    id = "xdp"
    hook = "xdp"

    def label(self, t: Target) -> str:
        return "XDP drop (native, veth)"


class TcDrop(_Bpf):
    id = "tc"
    hook = "tc"

    def label(self, t: Target) -> str:
        return "tc ingress drop (BPF)"


# --- the catalogue ------------------------------------------------------------------

# In the order of the table: seed 002's groups, earliest drop first.
NAMES = template.TREATMENTS
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

def clear(tb: Testbed, t: Target) -> None:
    """Remove every treatment: all firewalls, netfilter and eBPF (flush_all removes
    XDP programs and clsact qdiscs too), and the conntrack table's entries."""
    kernel.flush_all(tb)


def leftovers(tb: Testbed, t: Target) -> list[str]:
    """What is still loaded in the firewall namespace: empty after clear()."""
    left = [f"{k}: {v}" for k, v in kernel.ruleset_state(tb).items() if v]
    if "xdp" in bpf.attached(tb.executor, "fw", t.ifname):
        left.append("an XDP program")
    if bpf.has_clsact(tb.executor, "fw", t.ifname):
        left.append("a clsact qdisc")
    return left
