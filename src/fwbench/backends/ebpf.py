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
from collections import OrderedDict

from fwbench import bpf, proc
from fwbench.backends import kernel
from fwbench.backends.base import Backend, Snapshot, Step, interfaces, \
    ordered_differences, remembered, unordered_differences
from fwbench.errors import FwbenchError
from fwbench.ruleset.model import Interfaces, RuleSet
from fwbench.ruleset.render import bpf as bpf_render
from fwbench.testbed.base import Testbed

_probe_cache: dict[tuple[str, str], str | None] = {}
# (set mode, rule-set digest) -> its rendering, the latest few.
_renderings: OrderedDict[tuple, bpf_render.BpfRendering] = OrderedDict()


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
    family = "ebpf"
    firewalls = (kernel.BPF_HOOKS,)
    sees_every_packet = False   # attached at the client side's ingress alone
    reads_once = True
    mechanisms = {
        "reload": ("fwbench-bpf load: a new program and maps attached in place of the "
                   "old", True),
    }

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
            probe = f"{'set' if self.set_mode else 'rule'} 198.18.0.1 17 9"
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

    def _refuse_unsupported(self, rs: RuleSet) -> None:
        bpf_render.refuse_unsupported(rs)

    def _rendering(self, rs: RuleSet) -> bpf_render.BpfRendering:
        """The rendering with its counter slots, remembered (a verification reads it
        for the listing, the entries and every counter: seconds a time at 100,000
        rules)."""
        return remembered(_renderings, (self.set_mode, rs.digest()),
                          lambda: bpf_render.render(rs, self.set_mode))

    def render(self, rs: RuleSet, ifs: Interfaces) -> dict[str, str]:
        return {"rules.bpf": self._rendering(rs).text}

    def load(self, tb: Testbed, files: dict[str, str], room: int = 0) -> None:
        ifs = interfaces(tb)
        bpf.load(tb.executor, "fw", self.hook, self.mode, ifs.client_side,
                 files["rules.bpf"], ifs.local4, room=room)

    def update_steps(self, mechanism: str, tb: Testbed, old: RuleSet, new: RuleSet,
                     rewrite: frozenset[str] = frozenset()) -> list[Step]:
        ifs = interfaces(tb)
        if mechanism == "reload":
            return [Step(tuple(bpf.load_argv(self.hook, self.mode, ifs.client_side,
                                             ifs.local4)),
                         self._rendering(new).text)]
        if mechanism != "map" or mechanism not in self.mechanisms:
            return super().update_steps(mechanism, tb, old, new)
        return [Step(tuple(bpf.update_argv(self.hook, ifs.client_side)),
                     map_changes(self._rendering(old).text, self._rendering(new).text))]

    def charged_memory(self, tb: Testbed) -> dict[str, int]:
        return {"bpf_maps": sum(self._dump(tb)["map_memlock"].values())}

    def _dump(self, tb: Testbed) -> dict:
        return bpf.dump(tb.executor, "fw", self.hook, interfaces(tb).client_side)

    def counters(self, tb: Testbed, rs: RuleSet) -> dict[str, int]:
        return self._counters(self._dump(tb), rs)

    def _counters(self, d: dict, rs: RuleSet) -> dict[str, int]:
        """A rule's packets: the sum of its slots (a set rule has one per element)."""
        counts = d["counters"]
        return {rid: sum(counts[s][0] for s in slots if s < len(counts))
                for rid, slots in self._rendering(rs).slots.items()}

    def snapshot(self, tb: Testbed, rs: RuleSet) -> Snapshot:
        """differences, entries and counters from one dump (at 100,000 rules a dump
        takes seconds)."""
        d = self._dump(tb)
        return Snapshot(self._differences(tb, d, rs), len(d["set"]) + len(d["rules"]),
                        self._counters(d, rs))

    def counted_ids(self, rs: RuleSet) -> frozenset[str]:
        """Rules with a slot: the skeleton (the jumps by interface, the return path)
        is the program's own structure and counts nothing."""
        return frozenset(rid for rid, slots in self._rendering(rs).slots.items() if slots)

    def entries(self, tb: Testbed, rs: RuleSet) -> int:
        d = self._dump(tb)
        return len(d["set"]) + len(d["rules"])

    def expected_entries(self, rs: RuleSet) -> int:
        return len(self._rendering(rs).text.splitlines())

    def differences(self, tb: Testbed, rs: RuleSet) -> list[str]:
        return self._differences(tb, self._dump(tb), rs)

    def _differences(self, tb: Testbed, d: dict, rs: RuleSet) -> list[str]:
        """The set as a set (it dumps in hash order), the rule array in scan order,
        and the settings the program was loaded with."""
        ifs = interfaces(tb)
        want = self._rendering(rs).text.splitlines()
        n_set = sum(1 for line in want if line.startswith("set "))
        out = unordered_differences("BPF set", want[:n_set], _lines(d["set"], "set"))
        out += ordered_differences("BPF rules", want[n_set:], _lines(d["rules"], "rule"))
        if d["mode"] != self.mode:
            out.append(f"BPF program in {d['mode']} mode, rendered for {self.mode}")
        out += unordered_differences("BPF local addresses", ifs.local4, d["local"],
                                     "address")
        return out


def map_changes(old: str, new: str) -> str:
    """The set elements between two renderings as `fwbench-bpf update` input:
    deletions, then additions, each new element given the next counter slot past
    the old rendering's drop slot (the loader's room). The rules must be the same."""
    before, after = old.splitlines(), new.splitlines()
    rules = lambda lines: [ln for ln in lines if ln.startswith("rule ")]  # noqa: E731
    if rules(before) != rules(after):
        raise FwbenchError("a map update changes set elements; these rule sets differ "
                           "in their rules: only a reload can")
    was, now = set(before), set(after)
    out = [f"del {ln[4:]}" for ln in before if ln.startswith("set ") and ln not in now]
    added = [ln for ln in after if ln.startswith("set ") and ln not in was]
    out += [f"add {ln[4:]} {len(before) + 1 + i}" for i, ln in enumerate(added)]
    return "".join(line + "\n" for line in out)


_SET_MECHANISMS = {
    **_Ebpf.mechanisms,
    "map": ("fwbench-bpf update: one hash-map update or delete per element, in place "
            "(the set loaded with room for the additions)", False),
}


class XdpLinear(_Ebpf):
    name = "xdp-linear"
    hook, mode = "xdp", "linear"
    description = "eBPF at XDP (native), rules in an array scanned in order (bpf_loop)"
    compared_with = {"linear vs indexed": ("xdp-set",),
                     "eBPF vs netfilter": ("iptables-legacy",)}


class XdpSet(_Ebpf):
    name = "xdp-set"
    hook, mode = "xdp", "set"
    layout = "set"
    mechanisms = _SET_MECHANISMS
    description = "eBPF at XDP (native), entries in a hash keyed (daddr, proto, port)"
    compared_with = {"eBPF vs netfilter": ("ipset", "nftset"), "XDP vs tc": ("tc-set",)}


class TcLinear(_Ebpf):
    name = "tc-linear"
    hook, mode = "tc", "linear"
    description = "eBPF at tc ingress (cls_bpf), rules in an array scanned in order"
    compared_with = {"linear vs indexed": ("tc-set",),
                     "eBPF vs netfilter": ("iptables-legacy",)}


class TcSet(_Ebpf):
    name = "tc-set"
    hook, mode = "tc", "set"
    layout = "set"
    mechanisms = _SET_MECHANISMS
    description = "eBPF at tc ingress (cls_bpf), entries in a hash keyed (daddr, proto, port)"
    compared_with = {"eBPF vs netfilter": ("ipset",)}
