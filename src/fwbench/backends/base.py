"""The backend interface and the verification every backend goes through.

A backend loads one Policy into the firewall namespace in one atomic step and
reports what the kernel then holds: its counters (a Snapshot) and every way the
kernel's rule set differs from the rendered one (`differences`). Verification is
the same for all: the kernel holds exactly what was rendered (rules in order, set
elements as a set, settings), the number of entries equals what was asked, a probe
of the test flow is counted by the rule meant for it and forwarded, a probe no rule
allows is dropped, and a ping is counted by the ICMP rule and answered.
"""
from __future__ import annotations

import abc
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from fwbench import bpf, proc
from fwbench.ruleset import Interfaces, Policy
from fwbench.testbed.netns import NetnsTestbed

PROBE_PACKETS = 20
PROBE_PINGS = 3
# A verification names this many differences and counts the rest.
_DIFFERENCES_SHOWN = 3
# Packets sent into a veth are forwarded from softirq right away; this is ample.
_SETTLE_S = 0.05


@dataclass(frozen=True)
class LoadStats:
    load_time_s: float
    files: dict[str, int]  # rendered file name -> bytes


@dataclass(frozen=True)
class Snapshot:
    """What the kernel holds after a load, as the backend reads it back."""
    entries: int                 # rules matching an entry, or set elements
    test_hits: int | None        # packets counted by the rule the test flow must hit
    ping_hits: int | None        # packets counted by the ICMP echo-request rule
    notes: dict = field(default_factory=dict)


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

    @abc.abstractmethod
    def render(self, policy: Policy, ifs: Interfaces) -> dict[str, str]:
        """File name -> text, exactly what load() feeds the kernel."""

    @abc.abstractmethod
    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        """Load the rendered files in one step (restore files, nft -f)."""

    @abc.abstractmethod
    def snapshot(self, tb: NetnsTestbed, policy: Policy) -> Snapshot:
        """The counters verification reads, and the number of entries loaded. Read
        before and after every probe, so it should be cheap."""

    @abc.abstractmethod
    def differences(self, tb: NetnsTestbed, policy: Policy) -> list[str]:
        """Every way what the kernel holds differs from what `render` gives for
        `policy`, one line each naming what differs; empty when identical. Read
        once per verification, from the kernel's own listing."""

    def apply(self, tb: NetnsTestbed, policy: Policy) -> LoadStats:
        files = self.render(policy, interfaces(tb))
        flush_all(tb)
        t0 = time.perf_counter()
        self.load(tb, files)
        return LoadStats(time.perf_counter() - t0, {k: len(v) for k, v in files.items()})

    def verify(self, tb: NetnsTestbed, policy: Policy) -> Verification:
        return verify(self, tb, policy)


def interfaces(tb: NetnsTestbed) -> Interfaces:
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


def _delta(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else b - a


def verify(backend: Backend, tb: NetnsTestbed, policy: Policy) -> Verification:
    test = policy.test_entry
    problems: list[str] = []
    details: dict = {}

    def forwarded(action) -> int:
        before = tb.ipv4_transmits()
        action()
        time.sleep(_SETTLE_S)
        return tb.ipv4_transmits() - before

    differs = backend.differences(tb, policy)
    details["differences"] = differs
    if differs:
        more = len(differs) - _DIFFERENCES_SHOWN
        problems.append("the kernel's rule set differs from the rendered one: "
                        + "; ".join(differs[:_DIFFERENCES_SHOWN])
                        + (f"; and {more} more" if more > 0 else ""))
    s0 = backend.snapshot(tb, policy)
    expected = policy.size if backend.filters else 0
    if s0.entries != expected:
        problems.append(f"{s0.entries} entries in the kernel, {expected} asked")
    if backend.filters and s0.test_hits is None:
        problems.append("no rule in the kernel for the test flow")
    details.update(s0.notes)

    # 1. The test flow: forwarded, and counted by its own rule.
    fwd = forwarded(lambda: tb.send_udp(test.daddr, test.dport, PROBE_PACKETS))
    s1 = backend.snapshot(tb, policy)
    hits = _delta(s0.test_hits, s1.test_hits)
    details["allowed_probe"] = {"sent": PROBE_PACKETS, "forwarded": fwd, "rule_hits": hits}
    if fwd < PROBE_PACKETS:
        problems.append(f"test-flow probe: {fwd} of {PROBE_PACKETS} forwarded")
    if backend.filters and hits is not None and hits != PROBE_PACKETS:
        problems.append(f"test-flow probe: its rule counted {hits} of {PROBE_PACKETS}")

    # 2. A flow no rule allows: the next port up. Dropped, unless there is no firewall.
    fwd = forwarded(lambda: tb.send_udp(test.daddr, test.dport + 1, PROBE_PACKETS))
    s2 = backend.snapshot(tb, policy)
    details["disallowed_probe"] = {"sent": PROBE_PACKETS, "forwarded": fwd,
                                   "test_rule_hits": _delta(s1.test_hits, s2.test_hits)}
    if backend.filters and fwd != 0:
        problems.append(f"disallowed probe: {fwd} of {PROBE_PACKETS} forwarded, expected 0")
    if not backend.filters and fwd < PROBE_PACKETS:
        problems.append(f"no firewall, yet {fwd} of {PROBE_PACKETS} probes forwarded")
    if backend.filters and _delta(s1.test_hits, s2.test_hits) not in (0, None):
        problems.append("disallowed probe was counted by the test-flow rule")

    # 3. ICMP echo-request: counted by the ICMP rule and answered.
    cp = tb.ping(policy.ping_daddr, PROBE_PINGS, interval_s=0.01, timeout_s=1)
    replies = cp.stdout.count("bytes from")
    s3 = backend.snapshot(tb, policy)
    ping_hits = _delta(s2.ping_hits, s3.ping_hits)
    details["ping_probe"] = {"sent": PROBE_PINGS, "replies": replies, "rule_hits": ping_hits}
    if replies != PROBE_PINGS:
        problems.append(f"ping probe: {replies} of {PROBE_PINGS} answered")
    if backend.filters and ping_hits != PROBE_PINGS:
        problems.append(f"ping probe: ICMP rule counted {ping_hits} of {PROBE_PINGS}")

    return Verification(not problems, s0.entries, "; ".join(problems) or None, details)


# --- flushing every firewall --------------------------------------------------

def _loaded_xt_tables(tb: NetnsTestbed, family: str) -> list[str]:
    path = f"/proc/net/{family}_tables_names"
    cp = tb.run("fw", ["cat", path], check=False)
    return cp.stdout.split() if cp.returncode == 0 else []


def flush_all(tb: NetnsTestbed) -> None:
    """Empty every firewall in the firewall namespace: legacy and nft rules would
    otherwise stack, and both would apply."""
    for family, tool in (("ip", "iptables-legacy"), ("ip6", "ip6tables-legacy")):
        if not proc.have(tool):
            continue
        # Only tables already registered: touching nat would register it, and with
        # it connection tracking, for every later trial in this namespace.
        for table in _loaded_xt_tables(tb, family):
            tb.exec("fw", [tool, "-t", table, "-F"])
            tb.exec("fw", [tool, "-t", table, "-X"])
            if table == "filter":
                for chain in ("INPUT", "FORWARD", "OUTPUT"):
                    tb.exec("fw", [tool, "-t", "filter", "-P", chain, "ACCEPT"])
    if proc.have("nft"):
        tb.exec("fw", ["nft", "flush", "ruleset"])  # also removes iptables-nft's tables
    if proc.have("ipset"):
        tb.exec("fw", ["ipset", "destroy"])
    for port in (tb.topo.fw_client_side, tb.topo.fw_server_side):
        bpf.detach_all(tb.topo.netns("fw"), port.ifname)


def ruleset_state(tb: NetnsTestbed) -> dict[str, int]:
    """How many rules of any kind the firewall namespace holds, per firewall."""
    out = {}
    if proc.have("iptables-legacy-save"):
        text = tb.exec("fw", ["iptables-legacy-save"])
        out["iptables-legacy"] = sum(1 for ln in text.splitlines() if ln.startswith("-A "))
    if proc.have("nft"):
        text = tb.exec("fw", ["nft", "list", "ruleset"])
        out["nftables_tables"] = sum(1 for ln in text.splitlines() if ln.startswith("table "))
    if proc.have("ipset"):
        out["ipsets"] = len(tb.exec("fw", ["ipset", "list", "-n"]).split())
    out["bpf_programs"] = sum(len(bpf.attached(tb.topo.netns("fw"), port.ifname))
                              for port in (tb.topo.fw_client_side, tb.topo.fw_server_side))
    return out
