"""The backend interface and the verification every backend goes through.

A backend renders a RuleSet for its firewall, loads it into the firewall namespace
in one atomic step, and reads back what the kernel then holds: its counters by rule
id and every way the kernel's rule set differs from the rendered one
(`differences`). A backend declares the features it can hold; `refuse_unsupported`
refuses a rule set needing anything else, before any testbed exists.

Verification is the same for all: the kernel holds exactly what was rendered
(rules in order, set elements as a set, settings), as many entries as asked, and
the rule set's probes plus a sample of its packet corpus, sent through the testbed
for real, are forwarded or dropped, counted by the rules and translated exactly as
the reference evaluator says.
"""
from __future__ import annotations

import abc
import functools
import os
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, TypeVar

from fwbench import proc
from fwbench.errors import FwbenchError, MeasurementInvalid
from fwbench.backends import kernel
from fwbench.ruleset import corpus as corpora
from fwbench.ruleset.evaluate import Evaluator, RateLimits, Verdict
from fwbench.ruleset.model import PORTLESS, ROLES, Interfaces, Packet, RuleSet, Unsupported
from fwbench.testbed import packets
from fwbench.testbed.base import Testbed

T = TypeVar("T")

PROBE_PACKETS = 20
# Corpus packets each verification sends besides the probes.
SAMPLE_PACKETS = 40
# A verification names this many differences and counts the rest.
_DIFFERENCES_SHOWN = 3


@dataclass(frozen=True)
class LoadStats:
    load_time_s: float
    files: dict[str, int]  # rendered file name -> bytes
    form: str | None = None  # Backend.load_form: how it was loaded, where not plain


@dataclass(frozen=True)
class Step:
    """One command of a rule-set update, run in the firewall namespace."""
    argv: tuple[str, ...]
    input: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """What the kernel holds for a rule set, read once: how it differs from the
    rendering, how many entries it holds, and its counters by rule id."""
    differences: list[str]
    entries: int
    counters: dict[str, int]


@dataclass(frozen=True)
class Verification:
    ok: bool
    rules_loaded: int
    reason: str | None
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "rules_loaded": self.rules_loaded, "reason": self.reason,
                **({"details": self.details} if self.details else {})}


class Backend(abc.ABC):
    name: str
    description: str
    tools: tuple[str, ...] = ()
    filters = True                # False only for `none`
    max_rules: int = 1_000_000
    # How a template with the choice holds its entries for this backend: one rule
    # each ("linear") or the elements of one set ("set").
    layout = "linear"
    # How this backend can change a loaded rule set (fwbench.experiments.update): mechanism ->
    # (what it runs, whether the kernel sees the whole change in one step).
    mechanisms: dict[str, tuple[str, bool]] = {}

    # Traits: what the rest of fwbench knows about a backend, read from its class
    # by the registry (fwbench.backends.registry), never by its name.
    # The kernel's kind of firewall: "x_tables", "nf_tables", "ebpf" or "none"
    # (registry.FAMILIES).
    family = "none"
    # The kernel firewalls it loads into (kernel.Firewall), named objects after
    # those naming them: how flush_all empties it, and how a real host's state
    # is saved and put back around it.
    firewalls: tuple = ()
    # Whether its rules see every packet the firewall handles, both ways and its
    # own (netfilter's hooks), or only what arrives on one port (an eBPF hook on
    # the client side's ingress).
    sees_every_packet = True
    # The report's default pairs with this backend first: question -> the
    # backends it is set against (report.analysis).
    compared_with: dict[str, tuple[str, ...]] = {}

    def unavailable(self) -> str | None:
        """None when the backend can run here, else why not (one line)."""
        if os.geteuid() != 0:
            return "needs root"
        for t in self.tools:
            if not proc.have(t):
                return f"{t} not found (install the Debian package: ./scripts/setup.sh)"
        return None

    def versions(self) -> dict[str, str | None]:
        return {}

    def refuse_unsupported(self, rs: RuleSet) -> None:
        """Raise Unsupported (`<backend>: unsupported: <feature> (rule <id>)`) if the
        rule set needs a feature this backend cannot hold. A rule set that passed is
        not looked at again (at 100,000 rules the refusal renders it: seconds)."""
        key = (self.name, rs.digest())
        if key in _supported:
            return
        try:
            self._refuse_unsupported(rs)
        except Unsupported as e:
            raise e.for_backend(self.name) from None
        if len(_supported) > 64:
            _supported.clear()
        _supported.add(key)

    @abc.abstractmethod
    def _refuse_unsupported(self, rs: RuleSet) -> None:
        """The renderer's refusal, without the backend's name."""

    @abc.abstractmethod
    def render(self, rs: RuleSet, ifs: Interfaces) -> dict[str, str]:
        """File name -> text, exactly what load() feeds the kernel."""

    @abc.abstractmethod
    def load(self, tb: Testbed, files: dict[str, str], room: int = 0) -> None:
        """Load the rendered files in one step (restore files, nft -f). `room`: set
        elements the loaded rule set must take later without a reload, for a
        backend whose sets are sized when loaded (eBPF's maps); others ignore it."""

    @abc.abstractmethod
    def counters(self, tb: Testbed, rs: RuleSet) -> dict[str, int]:
        """Rule id -> packets counted, for every rule whose counter this backend
        can read (`counted_ids`). Read around every probe, so it should be cheap."""

    @abc.abstractmethod
    def counted_ids(self, rs: RuleSet) -> frozenset[str]:
        """The rule ids whose counters `counters` reports for this rule set."""

    @abc.abstractmethod
    def entries(self, tb: Testbed, rs: RuleSet) -> int:
        """Rules and set elements the kernel holds for the rule set."""

    @abc.abstractmethod
    def differences(self, tb: Testbed, rs: RuleSet) -> list[str]:
        """Every way what the kernel holds differs from what `render` gives for
        `rs`, one line each naming what differs; empty when identical. Read once
        per verification, from the kernel's own listing."""

    def snapshot(self, tb: Testbed, rs: RuleSet) -> Snapshot:
        """differences, entries and counters together. Backends whose kernel
        listing holds all three read it once here; at 100,000 rules a listing
        costs as much as the load."""
        return Snapshot(self.differences(tb, rs), self.entries(tb, rs),
                        self.counters(tb, rs))

    def expected_entries(self, rs: RuleSet) -> int:
        # An inline set (nft's anonymous `vmap { ... }`) is part of its rule: the
        # kernel's entry count, like the model's rules, does not count its elements.
        return rs.rule_count + sum(len(s.elements) for t in rs.tables for s in t.sets
                                   if not s.inline)

    def rendering(self, rs: RuleSet, ifs: Interfaces) -> dict[str, str]:
        """`render`, remembered for the latest few rule sets and interfaces: a sweep
        loads the same rule set trial after trial, an update trial two, and
        verification compares against them."""
        return remembered(_renderings, (self.name, rs.digest(), ifs),
                          lambda: self.render(rs, ifs))

    def apply(self, tb: Testbed, rs: RuleSet, room: int = 0) -> LoadStats:
        self.refuse_unsupported(rs)
        files = self.rendering(rs, interfaces(tb))
        # Quiet until the verification's exchange ends: a fresh load's counters are
        # taken as zero until then (fresh), and the flush below changes links.
        tb.hush(True)
        with tb.firewall_change():
            kernel.flush_all(tb)
            t0 = time.perf_counter()
            self.load(tb, files, room)
            took = time.perf_counter() - t0
        _fresh[self.name] = (rs.digest(), tb.topo.run_id)
        return LoadStats(took, {k: len(v) for k, v in files.items()}, self.load_form(rs))

    def load_form(self, rs: RuleSet) -> str | None:
        """What the load of `rs` is, in one line, where the rendering writes it
        otherwise than the rule set's own form (a trial records it beside the load
        time); None where it does not."""
        return None

    # True when `snapshot` reads what the kernel holds in one listing, so that
    # verification right after `apply` can read it once, after its packets.
    reads_once = False

    def fresh(self, tb: Testbed, rs: RuleSet) -> bool:
        """Was `rs` the last thing `apply` loaded here, with nothing verified since:
        its counters all zero (a fresh load starts them there; verification follows
        the load with no traffic between)? Asking forgets it."""
        return _fresh.pop(self.name, None) == (rs.digest(), tb.topo.run_id)

    def verify(self, tb: Testbed, rs: RuleSet, sample: int = SAMPLE_PACKETS,
               seed: int = 0) -> Verification:
        return verify(self, tb, rs, sample, seed)

    def charged_memory(self, tb: Testbed) -> dict[str, int]:
        """Bytes the kernel charges for this backend's loaded objects by its own
        accounting, where it keeps one per object (eBPF: each map's memlock);
        empty for the rest, whose memory only /proc/meminfo's totals show."""
        return {}

    def update_steps(self, mechanism: str, tb: Testbed, old: RuleSet, new: RuleSet,
                     rewrite: frozenset[str] = frozenset()) -> list[Step]:
        """The commands that turn the loaded `old` into `new` by `mechanism` (one
        of `mechanisms`), prepared so that running them is all that is left: what
        they need from the kernel (nft rule handles) is read here. `rewrite`: the
        chains (model names) a `sync` writes whole even when unchanged, as a
        control plane writes its own chains at every sync (kube-proxy's iptables
        mode: kubeproxy.SYNC_CHAINS); other mechanisms ignore it. Raises
        FwbenchError when the mechanism cannot make this change."""
        raise FwbenchError(f"{self.name} has no update mechanism {mechanism!r}")


def interfaces(tb: Testbed) -> Interfaces:
    topo = tb.topo
    return Interfaces(topo.fw_client_side.ifname, topo.fw_server_side.ifname,
                      (topo.fw_client_side.ip4, topo.fw_server_side.ip4))


def _quote(line: str, width: int = 90) -> str:
    return repr(line if len(line) <= width else line[:width - 3] + "...")


def ordered_differences(what: str, want: list[str], got: list[str]) -> list[str]:
    """Where an ordered listing (a chain, a rule array) differs from the rendered
    one: lines missing and lines not rendered, or, with the same lines, the first
    place their order differs."""
    if want == got:
        return []
    missing, extra = Counter(want) - Counter(got), Counter(got) - Counter(want)
    if not missing and not extra:
        i = next(i for i, (a, b) in enumerate(zip(want, got)) if a != b)
        return [f"{what}: the rendered {len(want)} lines in another order; line {i + 1} "
                f"is {_quote(got[i])}, rendered {_quote(want[i])}"]
    return unordered_differences(what, missing.elements(), extra.elements(), "line")


def unordered_differences(what: str, want: Iterable[str], got: Iterable[str],
                          noun: str = "element") -> list[str]:
    """Where a set (set elements, a listing whose order means nothing) differs from
    the rendered one: what is missing from the kernel and what it holds unasked.
    With `want` and `got` already the differences, as ordered_differences passes
    them, the same words apply."""
    want, got = Counter(want), Counter(got)
    missing, extra = sorted((want - got).elements()), sorted((got - want).elements())
    out = []
    if missing:
        out.append(f"{what}: {len(missing)} rendered {noun}{'s' * (len(missing) > 1)} "
                   f"missing from the kernel, first {_quote(missing[0])}")
    if extra:
        out.append(f"{what}: {len(extra)} {noun}{'s' * (len(extra) > 1)} in the kernel "
                   f"not rendered, first {_quote(extra[0])}")
    return out


# ICMP types connection tracking opens a connection for; any other type, sent alone,
# is `ct state invalid` (an echo reply without its request, an error quoting no
# known connection).
_ICMP_REQUESTS = {"icmp": {8, 13, 15, 17}, "icmpv6": {128, 139}}


# ICMPv6 types conntrack leaves untracked (MLD and neighbour discovery:
# nf_conntrack_proto_icmpv6.c's noct_valid_new).
_ICMPV6_UNTRACKED = frozenset({130, 131, 132, 133, 134, 135, 136, 143})
# TCP flags (FIN, SYN, RST, ACK, URG; PSH, ECE and CWR are ignored) that conntrack
# takes as a new connection when the packet arrives alone: a SYN, and with
# nf_conntrack_tcp_loose=1 (a new namespace's default, measured in the testbed's
# firewall namespace) a bare ACK, picked up mid-stream. Every other combination,
# valid (SYN+ACK, FIN+ACK, RST) or not, opens nothing: ct state invalid
# (nf_conntrack_proto_tcp.c: tcp_valid_flags, then tcp_conntracks from sNO).
_TCP_NEW = frozenset({0x02, 0x22, 0x10, 0x30})
_TCP_IGNORED = 0x08 | 0x40 | 0x80


def as_tracked(p: Packet) -> Packet:
    """The packet as injected, with the conntrack state the kernel gives it when it
    arrives alone: every injected flow is new and unmarked, but for ICMP types that
    open no connection, ICMPv6 neighbour discovery and MLD (untracked), and TCP
    flags that open no connection."""
    if p.proto == "icmpv6" and p.icmp_type in _ICMPV6_UNTRACKED:
        return replace(p, ct_state="untracked", mark=0)
    if p.proto in _ICMP_REQUESTS and p.icmp_type is not None \
            and p.icmp_type not in _ICMP_REQUESTS[p.proto]:
        return replace(p, ct_state="invalid", mark=0)
    if p.proto == "tcp" and p.tcp_flags & ~_TCP_IGNORED not in _TCP_NEW:
        return replace(p, ct_state="invalid", mark=0)
    return replace(p, ct_state="new", mark=0)


def copies(p: Packet, n: int) -> list[Packet]:
    """n packets of one probe as n distinct flows (source port, or ICMP id by
    packet), so connection tracking sees each as new."""
    if p.sport is None:
        return [p] * n
    return [replace(p, sport=1024 + (p.sport - 1024 + k) % 64512) for k in range(n)]


# Backend name -> (rule-set digest, testbed) of its latest `apply`, until verified.
_fresh: dict[str, tuple[str, str]] = {}
# (backend name, rule-set digest) of the rule sets `refuse_unsupported` passed.
_supported: set[tuple[str, str]] = set()
# The latest REMEMBERED rule sets' renderings and compiled references: a sweep
# loads one rule set trial after trial, an update trial two, and each is rendered
# and compiled in seconds at 100,000 rules.
REMEMBERED = 4
# (backend name, rule-set digest, interfaces) -> its rendered files.
_renderings: OrderedDict[tuple, dict[str, str]] = OrderedDict()
# Rule-set digest -> (digest, evaluator, rate limits).
_compiled: OrderedDict[str, tuple[str, Evaluator, RateLimits]] = OrderedDict()
_samples: dict[tuple[str, int, int], list[Packet]] = {}


def remembered(cache: OrderedDict, key, make: Callable[[], T], kept: int = REMEMBERED) -> T:
    """cache[key], made by `make` on a miss; the `kept` latest used are kept."""
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    return remember(cache, key, make(), kept)


def remember(cache: OrderedDict, key, value: T, kept: int = REMEMBERED) -> T:
    """cache[key] = value, the oldest dropped past `kept`."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > kept:
        cache.popitem(last=False)
    return value


def _reference(rs: RuleSet) -> tuple[str, Evaluator, RateLimits]:
    key = rs.digest()
    return remembered(_compiled, key, lambda: (key, Evaluator(rs), RateLimits(rs)))


def evaluator(rs: RuleSet) -> Evaluator:
    """The reference evaluator of a rule set, compiled once per rule set."""
    return _reference(rs)[1]


def rate_limits(rs: RuleSet) -> RateLimits:
    """The rule set's rate limits, compiled once per rule set."""
    return _reference(rs)[2]


def corpus_sample(rs: RuleSet, n: int, seed: int) -> list[Packet]:
    key = (rs.digest(), n, seed)
    if key not in _samples:
        _samples.clear()
        _samples[key] = corpora.build(rs, size=n, seed=seed, evaluator=evaluator(rs)) \
            if n else []
    return _samples[key]


@dataclass(frozen=True)
class Exchange:
    """Packets sent through the loaded firewall and what came of each."""
    sent: list[Packet]
    seen: list[Packet | None]        # as observed leaving the firewall; None: dropped
    counts: dict[str, int]           # rule id -> packets counted during the exchange
    # When the instrument lost frames while packets were missing (the firewall's
    # port counters or the captures showed it), the exchange was sent again whole:
    # {"packets": sent in the exchanges given up, "lost": frames lost in them,
    # "rounds": exchanges given up}; empty when none was.
    resent: dict = field(default_factory=dict)


def _rounds(rs: RuleSet, pkts: list[Packet]) -> list[list[int]]:
    """Packets split into rounds that connection tracking cannot link: no two in a
    round with the same flow before or after NAT (the kernel would take the second
    for the first's connection, or move its source port to keep translated flows
    unique), and none the reply of another (a packet from the server side whose
    flow is another's reversed, before or after NAT, would be `established`). Both
    sides' packets share a round when nothing links them: each round costs the
    exchange a fixed part of a second."""
    ev = evaluator(rs)
    rounds: list[tuple[set, list[int]]] = []
    for i, p in enumerate(pkts):
        if p.sport is None and p.proto not in PORTLESS:
            # ICMP: the injector gives every packet its own id. ESP, AH and GRE
            # have no ports: conntrack links them by addresses, as below.
            keys, links = {i}, {i}
        else:
            # Every translation the packet may get (a random choice may have several).
            flows = {(p.proto, p.saddr, p.sport, p.daddr, p.dport)} | {
                (t.proto, t.saddr, t.sport, t.daddr, t.dport)
                for t in (v.translated for _, v in ev.evaluate(p).possible)}
            replies = {(f[0], f[3], f[4], f[1], f[2]) for f in flows}
            keys, links = flows, flows | replies
        for used, members in rounds:
            if not keys & used:
                used |= links
                members.append(i)
                break
        else:
            rounds.append((set(links), [i]))
    return [members for _, members in rounds]


# Whole exchanges tried when the instrument itself lost a packet (the firewall's
# input queue, a veth handover or a capture socket dropped it on a busy machine:
# nothing the firewall did), and the pause before each repeat, times its number
# (a loss comes in bursts, from whatever else fills the CPU's queue).
EXCHANGE_ATTEMPTS = 4
REPEAT_PAUSE_S = 0.2


def exchange(backend: Backend, tb: Testbed, rs: RuleSet,
             pkts: list[Packet], before: dict[str, int] | None = None,
             after: Callable[[], dict[str, int]] | None = None) -> Exchange:
    """Send `pkts` through the firewall as it is loaded, in rounds connection
    tracking cannot link (emptied before each), reading the counters around
    (`before`: already read, nothing having passed since; `after`: how to read
    them afterwards, `backend.counters` by default).

    When the instrument loses a frame while a packet is missing, that packet's
    fate is unknown, and so are the counters: it may have been lost before the
    rules (never counted) or after them (counted). The whole exchange is then
    sent again, counters read afresh, up to EXCHANGE_ATTEMPTS times, and the
    record says so (`resent`); lost every time, the exchange is invalid."""
    _fresh.pop(backend.name, None)   # its counters move now
    packets.prepare(tb)
    resent = {"packets": 0, "lost": 0, "rounds": 0}
    last: MeasurementInvalid | None = None
    try:
        for attempt in range(EXCHANGE_ATTEMPTS):
            if attempt:
                time.sleep(REPEAT_PAUSE_S * attempt)
            try:
                ex = _exchange_once(backend, tb, rs, pkts,
                                    before if attempt == 0 else None, after)
            except MeasurementInvalid as e:     # InstrumentLost, or a stalled send
                resent["packets"] += getattr(e, "sent", len(pkts))
                resent["lost"] += getattr(e, "lost", 0)
                resent["rounds"] += 1
                last = e
                continue
            return replace(ex, resent=resent) if resent["rounds"] else ex
    finally:
        packets.restore(tb)
    raise MeasurementInvalid(
        f"packets: the instrument failed in each of {EXCHANGE_ATTEMPTS} exchanges "
        f"({resent['lost']} frames lost by the firewall's port counters and the "
        f"captures), so no missing packet can be read as a verdict; the last: {last}")


def _exchange_once(backend: Backend, tb: Testbed, rs: RuleSet,
                   pkts: list[Packet], before: dict[str, int] | None,
                   after_read: Callable[[], dict[str, int]] | None) -> Exchange:
    """One exchange, every round; packets.InstrumentLost from the first round in
    which the instrument lost a frame while a packet was missing, its `sent`
    the packets sent so far."""
    seen: list[Packet | None] = [None] * len(pkts)
    if before is None:
        before = backend.counters(tb, rs)
    sent = 0
    for members in _rounds(rs, pkts):
        kernel.flush_conntrack(tb)
        # The injector crafts new, unmarked packets; their conntrack state is
        # the kernel's own (as_tracked), which only the evaluator is told.
        try:
            got = packets.exchange(tb, [replace(pkts[i], ct_state="new", mark=0)
                                        for i in members])
        except packets.InstrumentLost as e:
            e.sent = sent + len(members)
            raise
        sent += len(members)
        for i, o in zip(members, got):
            seen[i] = o.packet if o else None
    after = after_read() if after_read is not None else backend.counters(tb, rs)
    counts = {k: after.get(k, 0) - before.get(k, 0) for k in after.keys() | before.keys()}
    return Exchange(pkts, seen, counts)


# The hooks a firewall host's own packets pass (its SSH session on a real host).
HOST_HOOKS = frozenset({"prerouting", "input", "output", "postrouting"})


def host_traffic_rules(rs: RuleSet) -> frozenset[str]:
    """Ids of the rules a firewall host's own traffic may reach and count: those of
    chains at HOST_HOOKS and of the chains they jump or go to, except where the
    rule, or every way into its chain, names a test interface (the client or the
    server side) as the packet's input or output interface: the host's own
    traffic never crosses those."""
    def pinned(r) -> bool:
        return any(i is not None and not i.negate and i.name in ROLES
                   for i in (r.match.iif, r.match.oif))
    chains = {c.name: c for t in rs.tables for c in t.chains}
    reach = [c.name for c in chains.values() if c.hook in HOST_HOOKS]
    seen, out = set(reach), set()
    while reach:
        for r in chains[reach.pop()].rules:
            if pinned(r):
                continue
            out.add(r.id)
            if r.action.chain and r.action.chain not in seen and r.action.chain in chains:
                seen.add(r.action.chain)
                reach.append(r.action.chain)
    return frozenset(out)


def fits(v: Verdict, got: Packet | None) -> bool:
    """Whether what came out of the firewall (None: nothing) is verdict `v`:
    dropped, or forwarded with v's addresses and ports (any source port where the
    kernel picked it at random)."""
    if not v.forward:
        return got is None
    if got is None:
        return False
    want = v.translated
    if v.sport_random:
        return (want.saddr, want.daddr, want.dport) == (got.saddr, got.daddr, got.dport)
    return _addresses(want) == _addresses(got)


def fitting(v: Verdict, got: Packet | None) -> list[Verdict]:
    """The verdicts among those `v` allows (one, or a random choice's) that fit
    what came out."""
    return [o for _, o in v.possible if fits(o, got)]


def disagreements(backend: Backend, rs: RuleSet, ex: Exchange,
                  unjudged: frozenset[str] = frozenset(),
                  at_least: frozenset[str] = frozenset()) -> tuple[list[str], list[str]]:
    """Where the exchange differs from the reference evaluator: (per packet, per
    rule counter). With no firewall, every packet must pass unchanged. A packet
    that reaches a rate limit, and a counter such packets may change, are not
    judged (RateLimits), nor are the counters of `unjudged` rules; an `at_least`
    rule's counter must hold the corpus's count, and may hold more (the
    firewall's own packets reach it too). A packet that
    meets a random choice must get one of its verdicts; the counters of the
    verdicts that fit what came out count, and a rule counted by some of them
    only is not judged (which one happened is not seen)."""
    ev = evaluator(rs)
    limits = rate_limits(rs) if backend.filters else None
    per_packet: list[str] = []
    expected: Counter[str] = Counter()
    unsure: set[str] = set()
    for p, got in zip(ex.sent, ex.seen):
        if limits is not None and limits.reached(p):
            # Its counts still hold for every rule a limit cannot change.
            expected.update(ev.evaluate(p).counted)
            continue
        if backend.filters:
            v = ev.evaluate(p)
            if v.outcomes or v.sport_random:
                fit = fitting(v, got)
                counts = [Counter(o.counted) for o in (fit or [o for _, o in v.possible])]
                common = functools.reduce(lambda a, b: a & b, counts)
                expected.update(common)
                unsure.update(rid for c in counts for rid in c if c[rid] != common[rid])
                if not fit:
                    per_packet.append(f"{describe(p)}: {fate(got)}, expected one of: "
                                      + "; ".join(f"{q:.3f} {_outcome(o)}"
                                                  for q, o in v.possible))
                continue
            want = v.translated if v.forward else None
            expected.update(v.counted)
        else:
            # With no firewall a packet still is not forwarded when it is the
            # firewall's own: delivered to it.
            want = None if ev.addressed_to_firewall(p) else p
        if (want is None) != (got is None):
            per_packet.append(f"{describe(p)}: {'forwarded' if got else 'dropped'}, "
                              f"expected {'forwarded' if want else 'dropped'}"
                              + (f" ({v.reason})" if backend.filters else ""))
        elif want is not None and _addresses(want) != _addresses(got):
            per_packet.append(f"{describe(p)}: left as {describe(got, iif=False)}, "
                              f"expected {describe(want, iif=False)}")
    per_rule = []
    if limits is not None:
        unsure |= limits.unsure_rules(ex.sent)
    for rid in sorted(backend.counted_ids(rs) - unsure - unjudged):
        got = ex.counts.get(rid, 0)
        if got != expected.get(rid, 0) and not (rid in at_least and got > expected[rid]):
            per_rule.append(f"rule {rid} counted {ex.counts.get(rid, 0)}, "
                            f"expected {expected.get(rid, 0)}")
    return per_packet, per_rule


def _addresses(p: Packet) -> tuple:
    return (p.saddr, p.daddr, p.sport, p.dport)


def fate(got: Packet | None) -> str:
    """What came out of the firewall, in a few words."""
    return "dropped" if got is None else "left as " + describe(got, iif=False)


def _outcome(v: Verdict) -> str:
    if not v.forward:
        return "dropped"
    return "forwarded as " + describe(v.translated, iif=False) + \
        (" (any source port)" if v.sport_random else "")


# Random choices are tested at this level, over every group of packets that share
# their outcomes' probabilities (Bonferroni: each group at CHANCE_LEVEL / groups).
CHANCE_LEVEL = 0.001
# A group is tested when every outcome expects at least this many packets (the
# chi-square approximation's usual condition).
CHANCE_MIN_EXPECTED = 5


@dataclass(frozen=True)
class ChanceTest:
    """How the packets that met random choices fell among their outcomes: per
    group of packets with the same outcome probabilities, the counts seen against
    the expected ones, a chi-square test at `level` (Bonferroni-corrected per
    group). Outcomes that leave the firewall alike are one outcome here."""
    level: float
    groups: list[dict]
    failed: list[str]

    def as_dict(self) -> dict:
        return {"level": self.level, "groups": self.groups, "failed": self.failed}


def _seen_as(v: Verdict) -> tuple:
    """What a capture sees of verdict `v`: dropped, or the packet's addresses and
    ports (the source port only where the firewall did not pick it at random)."""
    if not v.forward:
        return (False,)
    t = v.translated
    return (True, t.saddr, t.daddr, t.dport) + (() if v.sport_random else (t.sport,))


def chance_test(rs: RuleSet, ex: Exchange, level: float = CHANCE_LEVEL) -> ChanceTest:
    """The chi-square test of the random choices over an exchange (see ChanceTest).
    A packet whose result fits none of its outcomes is left out: `disagreements`
    lists it."""
    from scipy.stats import chisquare
    ev = evaluator(rs)
    tally: dict[tuple[float, ...], list[int]] = {}
    for p, got in zip(ex.sent, ex.seen):
        v = ev.evaluate(p)
        if not v.outcomes or v.counter_choice:
            continue   # certain, or a packet counter's choice: no distribution
        # Outcomes as what leaves the firewall; alike ones merged.
        shares: dict[tuple, list] = {}
        for q, o in v.possible:
            entry = shares.setdefault(_seen_as(o), [0.0, []])
            entry[0] += q
            entry[1].append(o)
        if len(shares) < 2:
            continue
        ranked = sorted(shares.values(), key=lambda e: -e[0])
        key = tuple(round(q, 9) for q, _ in ranked)
        hit = next((i for i, (_, alike) in enumerate(ranked)
                    if any(fits(o, got) for o in alike)), None)
        if hit is None:
            continue
        tally.setdefault(key, [0] * len(key))[hit] += 1
    groups, failed = [], []
    testable = [k for k, c in tally.items() if min(k) * sum(c) >= CHANCE_MIN_EXPECTED]
    each = level / max(1, len(testable))
    for key, counts in tally.items():
        n = sum(counts)
        expected = [q * n for q in key]
        rec = {"probabilities": list(key), "packets": n, "seen": counts,
               "expected": [round(e, 2) for e in expected]}
        if key in testable:
            # The shares sum to 1 up to float rounding; chisquare wants equal sums.
            scale = n / sum(expected)
            stat, pvalue = chisquare(counts, [e * scale for e in expected])
            rec.update(chi2=round(float(stat), 3), p_value=float(pvalue),
                       rejected=bool(pvalue < each))
            if pvalue < each:
                failed.append(f"{n} packets with outcome probabilities "
                              f"{', '.join(f'{q:.3f}' for q in key)} fell {counts}, "
                              f"expected {[round(e, 1) for e in expected]} "
                              f"(chi-square p = {pvalue:.2g} < {each:.2g})")
        else:
            rec["tested"] = "too few packets (an outcome expects fewer than " \
                            f"{CHANCE_MIN_EXPECTED})"
        groups.append(rec)
    return ChanceTest(level, groups, failed)


def describe(p: Packet, iif: bool = True) -> str:
    """One packet in one short phrase: `udp 198.18.0.2:40404 -> 198.19.0.2:5201`."""
    if p.sport is not None:
        text = f"{p.proto} {p.saddr}:{p.sport} -> {p.daddr}:{p.dport}"
    else:
        kind = f" type {p.icmp_type}" if p.icmp_type is not None else ""
        text = f"{p.proto}{kind} {p.saddr} -> {p.daddr}"
    text += _everyday_text(p)
    return f"{text} from the {p.iif} side" if iif else text


def _everyday_text(p: Packet) -> str:
    """What sets the packet apart from the injector's defaults: TCP flags other
    than a SYN, an ICMP code, a TTL other than 64, padding."""
    out = ""
    if p.proto == "tcp" and p.tcp_flags != 0x02:
        out += f" flags {p.tcp_flags:#04x}"
    if p.proto in ("icmp", "icmpv6") and p.icmp_code:
        out += f" code {p.icmp_code}"
    if p.ttl != 64:
        out += f" ttl {p.ttl}"
    if p.pad:
        out += f" +{p.pad} bytes"
    return out


def verify(backend: Backend, tb: Testbed, rs: RuleSet, sample: int = SAMPLE_PACKETS,
           seed: int = 0) -> Verification:
    problems: list[str] = []
    details: dict = {}
    tb.hush(True)   # before the counters are first read; the exchange ends it

    # The probes, as many distinct flows each, and a sample of the corpus: forwarded
    # or dropped, counted and translated as the probe and the reference say.
    pkts, owners = [], []
    for probe in rs.probes:
        for p in copies(as_tracked(probe.packet), PROBE_PACKETS):
            pkts.append(p)
            owners.append(probe)
    # A sample packet that is one of the probes' is checked with them already; sent
    # again it would share their flow, and need a round of its own.
    sent = set(pkts)
    pkts += [q for q in (as_tracked(p) for p in corpus_sample(rs, sample, seed))
             if q not in sent]

    if backend.fresh(tb, rs) and backend.reads_once:
        # Counters start at zero on a fresh load: the kernel is read once, after
        # the packets, for the comparison, the entries and the counters alike (at
        # 100,000 rules a listing costs as much as the load).
        read: list[Snapshot] = []

        def after() -> dict[str, int]:
            read[:] = [backend.snapshot(tb, rs)]
            return read[0].counters
        ex = exchange(backend, tb, rs, pkts, before={}, after=after)
        snap = read[0]
    else:
        snap = backend.snapshot(tb, rs)
        ex = exchange(backend, tb, rs, pkts, before=snap.counters)

    differs = snap.differences
    details["differences"] = differs
    if differs:
        more = len(differs) - _DIFFERENCES_SHOWN
        problems.append("the kernel's rule set differs from the rendered one: "
                        + "; ".join(differs[:_DIFFERENCES_SHOWN])
                        + (f"; and {more} more" if more > 0 else ""))
    loaded = snap.entries
    expected = backend.expected_entries(rs) if backend.filters else 0
    if loaded != expected:
        problems.append(f"{loaded} entries in the kernel, {expected} asked")

    ids = backend.counted_ids(rs)
    # On a real host the firewall's own traffic (its SSH session) passes its input
    # and output chains: their counters hold more than the packets sent here.
    unjudged = host_traffic_rules(rs) if tb.own_traffic else frozenset()
    if unjudged & ids:
        details["counters_not_judged"] = {
            "rules": sorted(unjudged & ids),
            "why": "the firewall host's own traffic (its SSH session) may reach them"}
    probes = {}
    for probe in rs.probes:
        got = [s for s, o in zip(ex.seen, owners) if o is probe]
        fwd = sum(1 for s in got if s is not None)
        # A local probe is delivered to the firewall or dropped: never forwarded.
        want = 0 if probe.local else \
            PROBE_PACKETS if (probe.forward or not backend.filters) else 0
        rec = probes[probe.name] = {"sent": len(got), "forwarded": fwd}
        if fwd != want:
            problems.append(f"{probe.name} probe: {fwd} of {len(got)} forwarded, "
                            f"expected {want}")
        if backend.filters and probe.rule is not None:
            if probe.rule not in ids:
                problems.append(f"{probe.name} probe: rule {probe.rule} has no counter "
                                f"in {backend.name}")
            else:
                hits = rec["rule_hits"] = ex.counts.get(probe.rule, 0)
                rec["rule"] = probe.rule
                short = hits < len(got) if probe.rule in unjudged else hits != len(got)
                if probe.local and probe.forward and short:
                    # Delivery leaves no trace a capture sees: the rule's count is
                    # the proof that the firewall accepted the probe.
                    problems.append(f"{probe.name} probe: rule {probe.rule} counted "
                                    f"{hits} of {len(got)} packets addressed to the "
                                    f"firewall")
        if backend.filters and probe.translated is not None and fwd:
            first = next(s for s in got if s is not None)
            if _addresses(first)[:2] != _addresses(probe.translated)[:2] or \
                    first.dport != probe.translated.dport:
                problems.append(f"{probe.name} probe: left as {describe(first, False)}, "
                                f"expected {describe(probe.translated, False)}")
        if backend.filters and probe.choices and fwd:
            allowed = {(c.saddr, c.daddr, c.dport) for c in probe.choices}
            wrong = [s for s in got if s is not None
                     and (s.saddr, s.daddr, s.dport) not in allowed]
            if wrong:
                problems.append(f"{probe.name} probe: left as {describe(wrong[0], False)}, "
                                f"none of its {len(allowed)} allowed translations")
    details["probes"] = probes
    per_packet, per_rule = disagreements(backend, rs, ex, unjudged)
    details["sample"] = {"sent": len(pkts), "disagreements": per_packet[:10] + per_rule[:10]}
    if ex.resent:
        # The instrument lost frames while these packets were missing: their fate is
        # the one seen when they were sent again (their counts, the first sending's).
        details["resent"] = ex.resent
    if per_packet:
        problems.append(f"{len(per_packet)} of {len(pkts)} packets not as the reference "
                        f"evaluator says, first: {per_packet[0]}")
    if per_rule:
        problems.append(f"{len(per_rule)} rule counters not as the reference evaluator "
                        f"says, first: {per_rule[0]}")
    return Verification(not problems, loaded, "; ".join(problems) or None, details)
