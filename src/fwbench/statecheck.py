"""Proof that NAT and connection tracking really happened, and background
conntrack entries to measure against.

`prove(tb, backend, rs)` runs after a backend has applied and verified a rule set
(verification sends crafted packets one at a time; this sends a real connection)
and proves, from what the kernel and the sockets report:
(a) a TCP connection from the client to the rule set's TCP service (for seed004-nat
    the port-forwarded SERVICE4:5001; for seed004-forward the server's own :5001)
    is accepted by a listener in the server namespace bound to the server's OWN
    address, which sees that address as its local end and, as its peer, the
    address the reference evaluator says the rule set gives the client's packets
    (the client's, or a SNAT address);
(b) the client sees the address it connected to as its peer, and its message
    echoed back from there;
(c) every NAT rule the evaluator says the connection's first packet meets counted
    it (counters by rule id, through the backend);
(d) conntrack in the firewall namespace holds the connection, original direction
    client -> service, reply direction from the server's own address, in state
    ESTABLISHED while it is open (recorded again after the close: TIME_WAIT,
    since the client closes first).
A rule set without NAT proves (a), (b) and (d) against the server's own address.
Any failure makes `Proof.ok` False with one line naming what failed.

`fill(tb, entries)` makes the firewall track that many background flows: one UDP
datagram per flow from the engine's sender, through the forward path and the rule
set under test, from distinct source addresses and ports, with the firewall
namespace's UDP timeout raised so they outlive the trial; `release` removes them
and restores the timeout. `table_state(tb)` is the table's size and memory.

What this kernel (6.18) does, measured: nf_conntrack_count is per namespace, but
nf_conntrack_max, nf_conntrack_buckets, the hash table and the nf_conntrack slab
are global. nf_conntrack_max is read-only in a non-init namespace (per-namespace
limits are queued for later kernels), so nothing here writes it; a namespace's
count is held to the global limit (262,144 here), and at the limit a new flow
evicts an unreplied entry (`early_drop` in /proc/net/stat/nf_conntrack) rather
than being dropped, as long as one exists.
"""
from __future__ import annotations

import ipaddress
import json
import math
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field

from fwbench import addresses, proc
from fwbench.backends.base import Backend, describe, evaluator
from fwbench.errors import FwbenchError
from fwbench.ruleset.model import Packet, RuleSet
from fwbench.testbed.base import Testbed
from fwbench.traffic.native import send_only

# How long the client waits for its connection; the listener a little longer.
CONNECT_TIMEOUT_S = 2.0
_START_S = 5.0            # a Python probe's start inside a namespace
_PLACEHOLDER_SPORT = 40000
_CT = "/proc/sys/net/netfilter"


@dataclass(frozen=True)
class Proof:
    ok: bool
    reason: str | None      # one line naming what failed; None when ok
    details: dict = field(default_factory=dict)   # JSON-able, recorded in the trial

    def as_dict(self) -> dict:
        return {"ok": self.ok, "reason": self.reason, "details": self.details}


# --- conntrack -L -------------------------------------------------------------------

@dataclass(frozen=True)
class CtTuple:
    src: str
    dst: str
    sport: int | None = None     # tcp, udp (ICMP ids are not kept)
    dport: int | None = None

    def __str__(self) -> str:
        if self.sport is None:
            return f"{self.src} -> {self.dst}"
        return f"{self.src}:{self.sport} -> {self.dst}:{self.dport}"


@dataclass(frozen=True)
class CtEntry:
    """One line of `conntrack -L`."""
    proto: str
    timeout_s: int
    state: str | None            # TCP's (ESTABLISHED, TIME_WAIT, ...); None for UDP
    orig: CtTuple
    reply: CtTuple
    flags: frozenset[str]        # ASSURED, UNREPLIED, ...
    line: str


def parse_conntrack(text: str) -> list[CtEntry]:
    """`conntrack -L` output (default format) as entries; lines it cannot read (a
    summary, another format) are left out."""
    out = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 4 or not words[1].isdigit() or not words[2].isdigit():
            continue
        state = words[3] if "=" not in words[3] and not words[3].startswith("[") else None
        tuples: list[dict[str, str]] = []
        flags = set()
        for w in words[3:]:
            if w.startswith("[") and w.endswith("]"):
                flags.add(w[1:-1])
                continue
            key, eq, val = w.partition("=")
            if not eq:
                continue
            if key == "src":
                tuples.append({})
            if tuples and key in ("src", "dst", "sport", "dport") and key not in tuples[-1]:
                tuples[-1][key] = val
        if len(tuples) < 2 or not all("src" in t and "dst" in t for t in tuples[:2]):
            continue
        orig, reply = (CtTuple(t["src"], t["dst"],
                             int(t["sport"]) if "sport" in t else None,
                             int(t["dport"]) if "dport" in t else None) for t in tuples[:2])
        out.append(CtEntry(words[0], int(words[2]), state, orig, reply, frozenset(flags),
                           line.strip()))
    return out


def tracked(tb: Testbed, proto: str, src: str, sport: int) -> list[CtEntry]:
    """The firewall namespace's entries whose original direction comes from
    src:sport, asked of the kernel by those keys (a filled table is large)."""
    cp = tb.run("fw", ["conntrack", "-L", "-p", proto, "--orig-src", src,
                       "--orig-port-src", str(sport)], check=False)
    return parse_conntrack(cp.stdout) if cp.returncode == 0 else []


# --- the proof ----------------------------------------------------------------------

def _target(rs: RuleSet) -> tuple[str, int] | None:
    """The TCP service a client reaches through the rule set: a forwarded TCP
    probe from the client side, a translated one first."""
    probes = [p for p in rs.probes if p.forward and p.packet.proto == "tcp"
              and p.packet.iif == "client" and p.packet.version == 4]
    probes.sort(key=lambda p: p.translated is None)
    return (probes[0].packet.daddr, probes[0].packet.dport) if probes else None


def nat_rule_ids(rs: RuleSet) -> frozenset[str]:
    """The ids of the rules in NAT chains."""
    return frozenset(r.id for _, c, r in rs.rules() if c.type == "nat")


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


class _Probe:
    """A tcpprobe process and its JSON lines."""

    def __init__(self, tb: Testbed, role: str, args: list[str]):
        self.tb = tb
        self.p = tb.spawn(role, [sys.executable, "-m", "fwbench.testbed.tcpprobe", *args],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, bufsize=1)

    def line(self, timeout_s: float) -> dict:
        ready, _, _ = select.select([self.p.stdout], [], [], timeout_s)
        text = self.p.stdout.readline() if ready else ""
        if not text:
            return {"error": f"no answer within {timeout_s:g} s"}
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return {"error": f"unreadable: {text.strip()[:60]!r}"}

    def release(self) -> None:
        """Let a waiting client close its connection."""
        try:
            self.p.stdin.write("\n")
            self.p.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def stop(self) -> None:
        self.tb.forget(self.p)
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            f.close()


def prove(tb: Testbed, backend: Backend, rs: RuleSet, *,
          target: tuple[str, int] | None = None,
          timeout_s: float = CONNECT_TIMEOUT_S) -> Proof:
    """Prove (a)-(d) of the module docstring for `rs`, already applied and verified
    by `backend`. `target` (address, port) overrides the TCP service taken from the
    rule set's probes. Nothing may listen on the server's port meanwhile (start a
    load's server afterwards)."""
    t0 = time.monotonic()
    target = target or _target(rs)
    if target is None:
        return Proof(False, f"{rs.name}: no forwarded TCP probe from the client side, "
                            f"nothing to connect to", {})
    if not proc.have("conntrack"):
        return Proof(False, "conntrack not found: connection tracking cannot be shown", {})
    server, client = tb.topo.server.ip4, tb.topo.client.ip4
    dst, dport = target
    ev = evaluator(rs)
    problems: list[str] = []

    def first_packet(sport: int) -> Packet:
        return Packet(4, "client", client, dst, "tcp", sport, dport)

    # Where the rule set sends the connection decides the listener's port; whether
    # it reaches the server's own address is what the probe then shows.
    verdict = ev.evaluate(first_packet(_PLACEHOLDER_SPORT))
    port = verdict.translated.dport or dport
    details: dict = {"target": f"{dst}:{dport}", "server": f"{server}:{port}",
                     "reference": {"forward": verdict.forward,
                                   "translated": describe(verdict.translated, iif=False)}}
    if not verdict.forward:
        problems.append(f"the rule set drops {describe(verdict.translated, iif=False)} "
                        f"({verdict.reason})")
    elif verdict.translated.daddr != server:
        problems.append(f"the rule set sends {dst}:{dport} to "
                        f"{verdict.translated.daddr}:{port}, not to the server {server}")

    before = backend.counters(tb, rs)
    listener = _Probe(tb, "server", ["listen", server, str(port), f"{timeout_s + 3:g}"])
    client_probe: _Probe | None = None
    try:
        ready = listener.line(_START_S)
        if "listening" not in ready:
            details["elapsed_s"] = round(time.monotonic() - t0, 3)
            return Proof(False, "; ".join([f"listener at {server}:{port} in the server "
                                           f"namespace: {ready.get('error')}", *problems]),
                         details)
        client_probe = _Probe(tb, "client", ["connect", dst, str(dport), f"{timeout_s:g}"])
        got = client_probe.line(_START_S + timeout_s)
        details["client_saw"] = got
        connected = "error" not in got
        if connected:
            local_addr, sport = _split(got["local"])
            verdict = ev.evaluate(first_packet(sport))
            problems[:0] = _check_ends(listener, details, got, dst, dport, server, port,
                                       verdict.translated.saddr)
        else:
            problems.insert(0, f"(a) tcp {client} -> {dst}:{dport}: no connection "
                               f"({got['error']})")
        # (c): every NAT rule the first packet meets counted it, connected or not
        problems += _check_counted(tb, backend, rs, verdict.counted, before, details)
        if connected:
            # (d): the connection in conntrack, while open, then after the close
            problems += _check_tracked(tb, details, local_addr, sport, dst, dport, server,
                                       port, verdict.translated.saddr)
            client_probe.release()
            closed = client_probe.line(2.0), listener.line(2.0)
            details["closed"] = all(c.get("closed") for c in closed)
            after_close = tracked(tb, "tcp", local_addr, sport)
            details["conntrack"]["after_close"] = after_close[0].state if after_close else None
    finally:
        for p in (client_probe, listener):
            if p is not None:
                p.stop()
    details["elapsed_s"] = round(time.monotonic() - t0, 3)
    return Proof(not problems, "; ".join(problems) or None, details)


def _check_ends(listener: _Probe, details: dict, got: dict, dst: str, dport: int,
                server: str, port: int, peer: str) -> list[str]:
    """(a) the server's end of the connection, (b) the client's."""
    out = []
    seen = listener.line(2.0)
    details["server_saw"] = seen
    details["expected_peer"] = peer
    if "error" in seen:
        out.append(f"(a) the server's listener at {server}:{port} accepted nothing "
                   f"({seen['error']})")
    else:
        if seen["local"] != f"{server}:{port}":
            out.append(f"(a) the server accepted at {seen['local']}, not its own "
                       f"address {server}:{port}")
        if _split(seen["peer"])[0] != peer:
            out.append(f"(a) the server's peer is {_split(seen['peer'])[0]}, the rule "
                       f"set implies {peer}")
    if got["peer"] != f"{dst}:{dport}":
        out.append(f"(b) the client's peer is {got['peer']}, not {dst}:{dport}")
    if not got.get("echoed"):
        out.append(f"(b) the client got no echo from {dst}:{dport}")
    return out


def _check_counted(tb: Testbed, backend: Backend, rs: RuleSet,
                   counted: tuple[str, ...], before: dict[str, int],
                   details: dict) -> list[str]:
    """(c) the NAT rules the reference says the first packet meets, by their
    counters' change over the probe (one packet: later ones follow conntrack)."""
    after = backend.counters(tb, rs)
    nat = [rid for rid in counted if rid in nat_rule_ids(rs)]
    ids = backend.counted_ids(rs)
    counts = {rid: after.get(rid, 0) - before.get(rid, 0) for rid in nat if rid in ids}
    details["nat_rules"] = {"expected": nat, "counted": counts}
    out = []
    for rid in nat:
        if rid not in ids:
            out.append(f"(c) NAT rule {rid} has no counter in {backend.name}")
        elif counts[rid] < 1:
            out.append(f"(c) NAT rule {rid} counted {counts[rid]} packets over the probe")
    return out


def _check_tracked(tb: Testbed, details: dict, src: str, sport: int, dst: str,
                   dport: int, server: str, port: int, peer: str) -> list[str]:
    entries = [e for e in tracked(tb, "tcp", src, sport)
               if e.orig.dst == dst and e.orig.dport == dport]
    what = f"tcp {src}:{sport} -> {dst}:{dport}"
    if not entries:
        details["conntrack"] = {"entry": None}
        return [f"(d) conntrack in the firewall holds no entry for {what}"]
    e = entries[0]
    details["conntrack"] = {"entry": e.line, "state": e.state}
    out = []
    if (e.reply.src, e.reply.sport) != (server, port):
        out.append(f"(d) conntrack's reply for {what} comes from {e.reply.src}:"
                   f"{e.reply.sport}, not the server {server}:{port}")
    if e.reply.dst != peer:
        out.append(f"(d) conntrack's reply for {what} goes to {e.reply.dst}, "
                   f"the rule set implies {peer}")
    if e.state != "ESTABLISHED":
        out.append(f"(d) conntrack holds {what} in state {e.state}, not ESTABLISHED")
    return out


# --- background entries -------------------------------------------------------------

# Flows come from the client link's addresses past the client's own (198.18.0.3,
# .4, ...: nobody holds them, and no probe or load uses them), one per source port
# from the engine's first port up.
FILL_SRC = addresses.STRANGER[4]
_PORTS_PER_SRC = 50000      # the sender's ports run from 10000 to 65535
FILL_PORT = 5001            # seed 004's service: the port its rule sets let through
# NAT fills of 100,000 took 3-5 rounds on 2 cores; beside a busy CPU 8 rounds each
# still adding 0.3 % reached 97,874 (a full input queue drops the open-throttle
# sends): rounds go on while each adds more than _LITTLE, to this cap (~0.2 s each).
_ROUNDS = 16
_LITTLE = 0.002             # of the entries asked: a round that adds less is the last
_SETTLE_S = 2.0


@dataclass(frozen=True)
class FillResult:
    """Background entries made by `fill`, and the table around it."""
    entries: int                 # asked
    created: int                 # nf_conntrack_count after minus before
    reached: bool                # created within `tolerance` of entries
    fill_s: float                # sending and settling, every round
    rounds: int                  # sends of the whole set (each tops up what was lost)
    packets_sent: int
    src: str                     # the first source address
    src_count: int
    sport_count: int             # source ports per address, from 10000 up
    dst: str
    dport: int
    udp_timeout_s: int           # set in the firewall namespace for the fill's life
    previous_udp_timeout_s: int
    before: dict                 # table_state before and after
    after: dict

    @property
    def sources(self) -> list[str]:
        first = ipaddress.ip_address(self.src)
        return [str(first + i) for i in range(self.src_count)]

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        slab_b, slab_a = self.before.get("slab"), self.after.get("slab")
        if slab_b and slab_a:
            delta = slab_a["bytes"] - slab_b["bytes"]
            out["slab_delta"] = {
                "bytes": delta, "objects": slab_a["num_objs"] - slab_b["num_objs"],
                "bytes_per_entry": round(delta / self.created, 1) if self.created else None,
                "all_slabs_bytes": self.after.get("all_slabs_bytes", 0)
                - self.before.get("all_slabs_bytes", 0),
                "scope": "global: other namespaces' entries and other caches count too"}
        return out


def _read(tb: Testbed, name: str) -> int:
    return int(tb.exec("fw", ["cat", f"{_CT}/{name}"]).strip())


def count(tb: Testbed) -> int:
    """nf_conntrack_count of the firewall namespace (0 before conntrack loads)."""
    cp = tb.run("fw", ["cat", f"{_CT}/nf_conntrack_count"], check=False)
    return int(cp.stdout.strip()) if cp.returncode == 0 else 0


def parse_slabinfo(text: str, cache: str = "nf_conntrack") -> dict | None:
    """One cache's line of /proc/slabinfo (2.1), with the memory its slabs hold;
    None when it is absent (merged into another cache)."""
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == cache and ":" in words:
            try:
                active, num, size, per_slab, pages = map(int, words[1:6])
                num_slabs = int(words[words.index("slabdata") + 2])
            except (ValueError, IndexError):
                return None
            return {"cache": cache, "active_objs": active, "num_objs": num,
                    "objsize": size, "objperslab": per_slab, "pagesperslab": pages,
                    "num_slabs": num_slabs,
                    "bytes": num_slabs * pages * os.sysconf("SC_PAGE_SIZE")}
    return None


def table_state(tb: Testbed) -> dict:
    """The firewall namespace's conntrack table: its count, the limit and buckets
    (global on this kernel), the hash table's size and the nf_conntrack slab
    (global: every namespace's entries), and every slab cache together
    (`all_slabs_bytes`, from /proc/meminfo), which also holds what is kmalloc'd
    beside an entry (extensions such as NAT's)."""
    out: dict = {"count": count(tb)}
    cp = tb.run("fw", ["stat", "-c", "%a", f"{_CT}/nf_conntrack_max"], check=False)
    if cp.returncode != 0:       # conntrack not loaded in this namespace yet
        return out
    buckets = _read(tb, "nf_conntrack_buckets")
    out.update({
        "max": _read(tb, "nf_conntrack_max"),
        "max_writable_in_netns": cp.stdout.strip() != "444",
        "buckets": buckets,
        "hash_table_bytes": buckets * 8,   # one hlist_nulls_head per bucket
        "scope": "count per namespace; max, buckets, hash table and slab global",
        "udp_timeout_s": _read(tb, "nf_conntrack_udp_timeout"),
    })
    try:
        out["slab"] = parse_slabinfo(tb.machine_file("fw", "/proc/slabinfo"))
    except (OSError, FwbenchError):
        out["slab"] = None
    # Every slab cache, so extensions kmalloc'd beside each entry (NAT's) show in
    # a delta; the machine's other work moves it too.
    meminfo = tb.machine_file("fw", "/proc/meminfo").splitlines()
    kb = next((int(ln.split()[1]) for ln in meminfo if ln.startswith("Slab:")), 0)
    out["all_slabs_bytes"] = kb * 1024
    return out


def fill(tb: Testbed, entries: int, *, dst: str | None = None,
         dport: int = FILL_PORT, src: str = FILL_SRC, hold_s: int = 3600,
         tolerance: float = 0.02, rate_pps: float = 0) -> FillResult:
    """Make the firewall namespace track `entries` more UDP flows, sent by the
    engine from the client to dst:dport (default the server; give the
    port-forwarded address to make NAT bindings too) through the loaded rule set,
    which must forward them. Each round sends every flow once (rate_pps 0: as
    fast as the sender goes); a flow already tracked is only refreshed, so rounds
    repeat until the count stops short by no more than `tolerance`. The namespace's
    nf_conntrack_udp_timeout becomes `hold_s` until `release`.

    Call it after applying and verifying (both empty the table), and before
    arming a receiver on dport (the fill's datagrams would reach it)."""
    if entries < 0:
        raise FwbenchError(f"conntrack fill: {entries} entries asked")
    dst = dst or tb.topo.server.ip4
    src_count = max(1, math.ceil(entries / _PORTS_PER_SRC))
    sport_count = max(1, math.ceil(entries / src_count))
    before = table_state(tb)
    if "max" in before and entries + before["count"] > before["max"]:
        raise FwbenchError(
            f"conntrack fill: {entries:,} entries asked, the table holds at most "
            f"{before['max']:,} (nf_conntrack_max, global and read-only in a namespace "
            f"on this kernel) and already {before['count']:,}")
    previous = before.get("udp_timeout_s")
    # conntrack loads with the first rule set that uses it; a namespace without it
    # tracks nothing, and the count below says so.
    if previous is not None:
        tb.sysctl("fw", f"net.netfilter.nf_conntrack_udp_timeout={hold_s}")
    t0 = time.monotonic()
    rounds = sent = 0
    created = 0
    while entries and rounds < _ROUNDS:
        rounds += 1
        rep = send_only(tb, frame_size=64, rate_pps=rate_pps, count=entries, src=src,
                        src_count=src_count, sport_count=sport_count, dst=dst, dport=dport)
        sent += rep["sent"]
        last, created = created, _settle(tb) - before["count"]
        # Another round costs as much as the first: stop when one adds little.
        if created >= entries or created - last < entries * _LITTLE:
            break
    fill_s = time.monotonic() - t0
    return FillResult(entries, created, created >= entries * (1 - tolerance),
                      round(fill_s, 3), rounds, sent, src, src_count, sport_count, dst,
                      dport, hold_s if previous is not None else 0, previous or 0,
                      before, table_state(tb))


def _settle(tb: Testbed) -> int:
    """The count once it stops moving: datagrams still queued in the firewall
    are tracked after the sender returns."""
    last, deadline = count(tb), time.monotonic() + _SETTLE_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = count(tb)
        if now == last:
            return now
        last = now
    return last


def release(tb: Testbed, result: FillResult) -> dict:
    """Remove the fill's entries (by source address; other flows stay) and
    restore the namespace's UDP timeout. Returns the table's state after."""
    for addr in result.sources:
        # exits 1 when nothing matched: entries may have expired meanwhile
        tb.run("fw", ["conntrack", "-D", "-p", "udp", "--orig-src", addr], check=False,
               timeout=300)
    if result.previous_udp_timeout_s:
        tb.sysctl("fw", f"net.netfilter.nf_conntrack_udp_timeout="
                        f"{result.previous_udp_timeout_s}")
    return table_state(tb)
