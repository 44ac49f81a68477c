"""Proving a treatment with a short probe and measuring it with the flood.

The model (checked by every trial): the sender and the firewall share one CPU and
RPS is off, so veth hands each frame to that CPU's backlog and the firewall
namespace processes it in the sender's own softirq, before the sender's next frame.
The sender's achieved rate minus the frames the firewall's input refused is then
the rate at which the firewall namespace disposes of the flood. Each trial checks
that it held: the sender and that CPU's ksoftirqd used (nearly) the whole CPU for
the whole window (nothing else ran there), and the firewall's own counters account
for every disposed packet (its drop counter, UDP's NoPorts, IP's InReceives).
"""
from __future__ import annotations

import os
import resource
import time
from dataclasses import asdict, dataclass

from fwbench import cpu
from fwbench.backends import kernel
from fwbench.backends.base import Verification
from fwbench.experiments.droprate.treatments import (HASHLIMIT_BURST, Expect, Listing, Target,
                                                    Treatment)
from fwbench.errors import FwbenchError
from fwbench.testbed.base import Testbed
from fwbench.traffic.native import send_only

PING_PROBES = 3
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# A long flood may differ from its counters by a packet or two in flight.
_FLOOD_SLACK = 1e-3


@dataclass(frozen=True)
class Counters:
    """The firewall namespace's counters that say where flood packets went."""
    if_rx_packets: int          # the firewall's client-side interface
    if_rx_dropped: int
    ip_in_receives: int         # reached IP
    udp_no_ports: int           # reached UDP, no socket
    udp_in_datagrams: int       # reached a socket (must stay 0)
    udp_in_errors: int
    icmp_out_dest_unreachs: int  # port unreachables sent back (rate-limited)
    hits: int                   # the treatment's own counter
    silent: tuple[int, ...]     # counters that must not move

    def minus(self, other: "Counters") -> dict:
        a, b = asdict(self), asdict(other)
        out = {k: a[k] - b[k] for k in a if k != "silent"}
        out["silent"] = [x - y for x, y in zip(self.silent, other.silent)]
        return out


def read(tb: Testbed, tr: Treatment, t: Target) -> Counters:
    s = tb.snmp("fw")
    link = tb.stats(tb.topo.fw_client_side)
    return Counters(link.rx_packets, link.rx_dropped, s["Ip:InReceives"],
                    s["Udp:NoPorts"], s["Udp:InDatagrams"], s["Udp:InErrors"],
                    s["Icmp:OutDestUnreachs"], tr.hits(tb, t), tuple(tr.silent(tb, t)))


def conntrack_entries(tb: Testbed, t: Target) -> dict[str, int]:
    """Entries in the firewall namespace's conntrack table: the flood's UDP flow and
    ICMP (from the ping probe)."""
    lines = kernel.conntrack_entries(tb)
    return {"udp_flood": sum(1 for ln in lines if ln.startswith("udp")
                             and f"dport={t.port} " in ln),
            "icmp": sum(1 for ln in lines if ln.startswith("icmp")),
            "total": len(lines)}


def account(e: Expect, disposed: int, d: dict, slack: float = 0.0,
            hashlimit_max: float | None = None) -> list[str]:
    """Problems with where `disposed` flood packets went, from counter deltas `d`.
    `slack` is the relative tolerance (0: exact, for probes)."""
    tol = slack * disposed + (2 if slack else 0)
    out = []

    def near(a: int, b: int) -> bool:
        return abs(a - b) <= tol

    passed = d["udp_no_ports"]
    if e.passes == "all":
        if not near(d["hits"], disposed):
            out.append(f"its rule counted {d['hits']:,} of {disposed:,}")
        if not near(passed, disposed):
            out.append(f"{passed:,} of {disposed:,} reached UDP")
    elif e.passes == "none":
        if not near(d["hits"], disposed):
            out.append(f"{d['hits']:,} of {disposed:,} dropped by it")
        if passed > tol:
            out.append(f"{passed:,} reached UDP")
    else:  # some: the limit's share passes, the rest is dropped
        if not near(d["hits"] + passed, disposed):
            out.append(f"dropped {d['hits']:,} + passed {passed:,} != {disposed:,}")
        if passed < 1:
            out.append("none passed the limit")
        if hashlimit_max is not None and passed > hashlimit_max:
            out.append(f"{passed:,} passed the limit, at most {hashlimit_max:.0f} expected")
    if e.reaches_ip and not near(d["ip_in_receives"], disposed):
        out.append(f"IP received {d['ip_in_receives']:,} of {disposed:,}")
    if not e.reaches_ip and d["ip_in_receives"] > tol:
        out.append(f"IP received {d['ip_in_receives']:,}, expected none")
    if d["udp_in_datagrams"] > tol:
        out.append(f"a socket received {d['udp_in_datagrams']:,}")
    if any(x != 0 for x in d["silent"]):
        out.append(f"non-matching rules counted {sum(d['silent']):,}")
    return out


def send(tb: Testbed, t: Target, frame_size: int, *, duration_s: float = 0,
         count: int | None = None) -> dict:
    """The flood at open throttle from the sender's CPU: for a duration or a count."""
    return send_only(tb, frame_size=frame_size, duration_s=duration_s, count=count,
                     dst=t.fw_ip, dport=t.port, payload_text=t.text)


def _hashlimit_max(t: Target, active_s: float) -> float:
    """The most a probe or flood may pass: the burst, the rate for its time, margin."""
    return HASHLIMIT_BURST + t.hashlimit_pps * active_s * 1.5 + 5


def listing(tb: Testbed, tr: Treatment, t: Target, files: dict[str, str]) -> Verification:
    """The trial's verification: the kernel holds the treatment (a netfilter rule set
    read back by its backend against its rendering; the program attached where it
    belongs), as many rules or set elements as the treatment's size."""
    lst: Listing = tr.inspect(tb, t, files)
    return Verification(not lst.problems, lst.entries, "; ".join(lst.problems) or None,
                        {"listing": lst.notes})


@dataclass(frozen=True)
class Proof:
    """Where a probe of flood packets ended, against where the treatment says."""
    ok: bool
    reason: str | None
    details: dict


def prove(tb: Testbed, tr: Treatment, t: Target, frame_size: int, packets: int) -> Proof:
    """A probe of `packets` flood packets ends where the treatment says: counted by
    its own counter, accounted for by the firewall's counters as the flood must be
    (`account`), and conntrack holds the flood's flow exactly when the treatment
    tracks it."""
    problems: list[str] = []
    details: dict = {}
    try:
        before = read(tb, tr, t)
    except FwbenchError as e:  # no counter to read: nothing of it is loaded
        return Proof(False, str(e), details)
    rep = send(tb, t, frame_size, count=packets)
    time.sleep(0.02)  # processed in the sender's softirq already; margin only
    d = read(tb, tr, t).minus(before)
    disposed = rep["sent"] - rep["refused_by_next_hop"]
    details["probe"] = {"sent": rep["sent"], "refused": rep["refused_by_next_hop"],
                        "counters": d}
    max_passed = _hashlimit_max(t, rep["active_s"]) if tr.expect.passes == "some" else None
    problems += [f"probe: {p}" for p in account(tr.expect, disposed, d,
                                                 hashlimit_max=max_passed)]
    if tr.expect.conntrack_on:
        replies = tb.ping(t.fw_ip, PING_PROBES, interval_s=0.01, timeout_s=1) \
            .stdout.count("bytes from")
        details["ping_replies"] = replies
    ct = conntrack_entries(tb, t)
    details["conntrack"] = ct
    if tr.expect.conntrack_on and ct["icmp"] < 1:
        problems.append("conntrack is not running: a ping left no entry")
    if not tr.expect.conntrack_on and ct["total"]:
        problems.append(f"conntrack holds {ct['total']} entries, though nothing loaded "
                        f"needs it")
    if tr.expect.tracked and ct["udp_flood"] < 1:
        problems.append("conntrack holds no entry for the flood")
    if not tr.expect.tracked and ct["udp_flood"]:
        problems.append("conntrack tracks the flood")
    return Proof(not problems, "; ".join(problems) or None, details)


def _ksoftirqd_s(cpu_id: int) -> float:
    """CPU seconds of the path CPU's ksoftirqd so far (softirq work it took over)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != f"ksoftirqd/{cpu_id}":
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S
        except (OSError, IndexError, ValueError):
            continue
    return 0.0


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def flood(tb: Testbed, tr: Treatment, t: Target, frame_size: int, duration_s: float,
          path_cpu: int, min_cpu_share: float) -> tuple[dict, list[str]]:
    """One measurement: the flood for `duration_s`; returns its metrics and what, if
    anything, makes it unusable (the path CPU was shared, counters do not add up)."""
    before = read(tb, tr, t)
    c0, k0, e0, w0 = cpu.CpuSample.now(), _ksoftirqd_s(path_cpu), _children_cpu_s(), \
        time.monotonic()
    rep = send(tb, t, frame_size, duration_s=duration_s)
    w1, e1, k1, c1 = time.monotonic(), _children_cpu_s(), _ksoftirqd_s(path_cpu), \
        cpu.CpuSample.now()
    d = read(tb, tr, t).minus(before)
    disposed = rep["sent"] - rep["refused_by_next_hop"]
    if disposed <= 0:
        raise FwbenchError(f"{tr.id}: the sender sent nothing")
    active = rep["active_s"]
    per = cpu.delta(c0, c1, disposed, path_cpu)["per_cpu"]
    mine = per[str(path_cpu)]
    busy = sum(mine.values())
    sender_s, ksoft_s = e1 - e0, k1 - k0
    share = (sender_s + ksoft_s) / active
    m = {
        "disposed_pps": disposed / active,
        "sent": rep["sent"],
        "refused": rep["refused_by_next_hop"],
        "disposed": disposed,
        "active_s": active,
        "passed_pps": d["udp_no_ports"] / active,
        "cpu_ns_per_pkt": busy / disposed,
        "softirq_ns_per_pkt": mine["softirq_ns"] / disposed,
        "system_ns_per_pkt": mine["system_ns"] / disposed,
        "path_cpu": {"cpu": path_cpu, "busy_share": busy / ((w1 - w0) * 1e9),
                     "sender_cpu_s": round(sender_s, 4), "ksoftirqd_s": round(ksoft_s, 4),
                     "owned_share": share, **mine},
        "cpu_per_cpu": per,
        "counters": d,
    }
    problems = []
    if share < min_cpu_share:
        problems.append(f"the path CPU was shared: the sender and ksoftirqd/{path_cpu} "
                        f"ran {100 * share:.0f} % of the window")
    max_passed = _hashlimit_max(t, active) if tr.expect.passes == "some" else None
    problems += [f"counters: {p}" for p in account(tr.expect, disposed, d, _FLOOD_SLACK,
                                                    hashlimit_max=max_passed)]
    return m, problems
