"""eBPF backends: the filter of bpf/filter.bpf.c on the firewall's client-facing
interface, at XDP (native, on veth) or tc ingress (cls_bpf, direct action), in
linear mode (an iptables chain's analogue) or set mode (ipset's).

The filter replaces the FORWARD chain's client-side rules and nothing else:
allowed packets go on through the kernel's forwarding, return traffic from the
server side meets no filter (as the netfilter renderings accept it). What the
kernel holds is read back from the interface (rules, set elements, settings and
per-rule counters) and compared with what was asked, so the foundation's
verification applies unchanged.
"""
from __future__ import annotations

import platform

from fwbench import bpf, proc
from fwbench.backends.base import (Backend, Snapshot, interfaces, ordered_differences,
                                   unordered_differences)
from fwbench.errors import FwbenchError
from fwbench.ruleset import Interfaces, Policy
from fwbench.ruleset import policy_render as r
from fwbench.testbed.netns import NetnsTestbed

_probe_cache: dict[tuple[str, str], str | None] = {}


def _lines(rows: list[list], kind: str) -> list[str]:
    """Dumped [slot, daddr, proto, port] rows as the lines they were loaded from."""
    return [f"{kind} {daddr} {proto} {port}" for _, daddr, proto, port in rows]


def _libbpf_version() -> str | None:
    try:
        return proc.version_line([str(bpf.binary()), "--version"])
    except FwbenchError:
        return None


class _Ebpf(Backend):
    hook: str     # "xdp" or "tc"
    mode: str     # "linear" or "set"
    tools = ("ip", "tc")
    max_rules = 1_000_000

    @property
    def set_mode(self) -> bool:
        return self.mode == "set"

    def unavailable(self) -> str | None:
        why = super().unavailable()
        if why:
            return why
        try:
            bpf.binary()
        except FwbenchError as e:
            return str(e)
        key = (self.hook, self.mode)
        if key not in _probe_cache:
            # Load (not attach) the program with one rule: the verifier's answer.
            probe = r.bpf_line("set" if self.set_mode else "rule", "198.18.0.1", "udp", 9)
            try:
                bpf.test_run(self.hook, self.mode, probe + "\n", [])
                _probe_cache[key] = None
            except FwbenchError as e:
                _probe_cache[key] = f"this kernel will not load the {self.hook} filter: {e}"
        return _probe_cache[key]

    def versions(self) -> dict[str, str | None]:
        return {"kernel": platform.release(), "loader": bpf.version(),
                "libbpf": _libbpf_version(),
                "clang": proc.version_line(["clang", "--version"])}

    def render(self, policy: Policy, ifs: Interfaces) -> dict[str, str]:
        return {"rules.bpf": r.bpf_rules(policy, self.set_mode)}

    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        ifs = interfaces(tb)
        bpf.load(tb.topo.netns("fw"), self.hook, self.mode, ifs.client_side,
                 files["rules.bpf"], ifs.local4)

    def snapshot(self, tb: NetnsTestbed, policy: Policy) -> Snapshot:
        ifs = interfaces(tb)
        d = bpf.dump(tb.topo.netns("fw"), self.hook, ifs.client_side)
        aux = set(r.bpf_aux_lines(policy))
        entries = len(d["set"]) if self.set_mode else \
            sum(1 for line in _lines(d["rules"], "rule") if line not in aux)
        counters = d["counters"]

        def hits(slot: int | None) -> int | None:
            return None if slot is None or slot >= len(counters) else counters[slot][0]

        t = policy.test_entry
        test_key = (t.daddr, r.BPF_PROTO[t.proto], t.dport)
        ping_key = (policy.ping_daddr, r.BPF_PROTO["icmp"], r.ICMP_ECHO_REQUEST)
        return Snapshot(
            entries=entries,
            test_hits=hits(_first_slot(d, test_key)),
            ping_hits=hits(_first_slot(d, ping_key, rules_only=True)),
            notes={"program": d["prog"], "default_drops": hits(d["drop_slot"])})

    def differences(self, tb: NetnsTestbed, policy: Policy) -> list[str]:
        """The set as a set (it dumps in hash order), the rule array in scan order,
        and the settings the program was loaded with."""
        ifs = interfaces(tb)
        d = bpf.dump(tb.topo.netns("fw"), self.hook, ifs.client_side)
        want = r.bpf_rules(policy, self.set_mode).splitlines()
        n_set = policy.size if self.set_mode else 0
        out = unordered_differences("BPF set", want[:n_set], _lines(d["set"], "set"))
        out += ordered_differences("BPF rules", want[n_set:], _lines(d["rules"], "rule"))
        if d["mode"] != self.mode:
            out.append(f"BPF program in {d['mode']} mode, rendered for {self.mode}")
        out += unordered_differences("BPF local addresses", ifs.local4, d["local"],
                                     "address")
        return out


def _first_slot(d: dict, key: tuple, rules_only: bool = False) -> int | None:
    """The counter slot of the rule a packet with `key` matches first."""
    if not rules_only:
        for slot, daddr, proto, port in d["set"]:
            if (daddr, proto, port) == key:
                return slot
    for slot, daddr, proto, port in d["rules"]:  # scan order
        if (daddr, proto, port) == key:
            return slot
    return None


class XdpLinear(_Ebpf):
    name = "xdp-linear"
    hook, mode = "xdp", "linear"
    description = "eBPF at XDP (native), rules in an array scanned in order (bpf_loop)"


class XdpSet(_Ebpf):
    name = "xdp-set"
    hook, mode = "xdp", "set"
    description = "eBPF at XDP (native), entries in a hash keyed (daddr, proto, port)"


class TcLinear(_Ebpf):
    name = "tc-linear"
    hook, mode = "tc", "linear"
    description = "eBPF at tc ingress (cls_bpf), rules in an array scanned in order"


class TcSet(_Ebpf):
    name = "tc-set"
    hook, mode = "tc", "set"
    description = "eBPF at tc ingress (cls_bpf), entries in a hash keyed (daddr, proto, port)"
