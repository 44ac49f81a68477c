"""nftables backends: any rule set of the model, loaded with `nft -f` as one
transaction. `nftables` holds templates' entries as one rule each (seed 000's
`nftables` treatment), `nftset` as the elements of one set keyed on address .
protocol . port (its `nft set` treatment).

What the kernel holds is compared with the rendering in nft's own text form, the
form the renderer writes: the whole ruleset line by line (tables, chains with hook,
priority and policy, every rule in order; counters' values left out, so no other
table may exist), and each set's elements as a set. Counters are read by the
`fwb:` id in each rule's comment, over netlink (fwbench-nftdump).

`nft list ruleset` takes longer than the load itself at 100,000 rules (5.7 s
against 3.6 s here), so past TEXT_CHECK_ENTRIES a rendering is compared in nft's
text once, at its first load in this process, and every later load of the same
rendering is compared with that proven one over netlink: every chain's declaration,
every rule's expressions in order, every set's elements (count and hash).
"""
from __future__ import annotations

from collections import OrderedDict

from fwbench import proc
from fwbench.backends import kernel
from fwbench.backends.base import Backend, Snapshot, Step, interfaces, ordered_differences, \
    remember, unordered_differences
from fwbench.errors import FwbenchError
from fwbench.ruleset.model import Interfaces, RuleSet
from fwbench.ruleset.render import nft as nft_render
from fwbench.testbed.base import Testbed
from fwbench.backends import delta


class _Nft(Backend):
    tools = ("nft",)
    family = "nf_tables"
    firewalls = (kernel.NF_TABLES,)
    reads_once = True
    mechanisms = {
        "reload": ("one nft -f: flush ruleset, then the whole rule set", True),
        "batch": ("one nft -f of the changed rules, chains and elements, one transaction",
                  True),
        "commands": ("one nft add/insert/replace/delete rule, add/flush/delete chain or "
                     "add/delete element per change, rules by handle", False),
        "sync": ("one nft -f of every changed chain whole (add, flush, its rules), the "
                 "elements, chains gone deleted (kube-proxy's partial sync)", True),
    }

    def versions(self) -> dict[str, str | None]:
        return {"nft": proc.version_line(["nft", "-v"])}

    def _refuse_unsupported(self, rs: RuleSet) -> None:
        nft_render.refuse_unsupported(rs)

    def render(self, rs: RuleSet, ifs: Interfaces) -> dict[str, str]:
        return {"rules.nft": nft_render.render(rs, ifs)}

    def load(self, tb: Testbed, files: dict[str, str], room: int = 0) -> None:
        kernel.nft_load(tb, files["rules.nft"])

    def load_form(self, rs: RuleSet) -> str | None:
        n = nft_render.named_numgen_maps(rs)
        if not n:
            return None
        return (f"one nft -f; its {n} numgen maps named, not anonymous (the same "
                f"lookup per packet; the kernel scans a table's sets for each new "
                f"one, twice for an anonymous one: see render/nft.py)")

    def update_steps(self, mechanism: str, tb: Testbed, old: RuleSet, new: RuleSet,
                     rewrite: frozenset[str] = frozenset()) -> list[Step]:
        ifs = interfaces(tb)
        after = self.rendering(new, ifs)["rules.nft"]
        if mechanism == "reload":
            return [Step(("nft", "-f", "-"), "flush ruleset\n" + after)]
        if mechanism not in self.mechanisms:
            return super().update_steps(mechanism, tb, old, new)
        d = delta.nft_delta(self.rendering(old, ifs)["rules.nft"], after)
        if mechanism == "sync":
            # Chains are written whole: no rule is named by its handle.
            return [Step(("nft", "-f", "-"), delta.nft_sync_text(d, rewrite))]
        handles: dict[str, int] = {}
        if any(c.op in ("delete", "replace") for c in d.rules):
            # What a tool that keeps no state of its own does: list the handles.
            handles = {rid: r.handle for r in kernel.nft_dump(tb).rules
                       if (rid := kernel.nft_rule_id(r.comment)) is not None}
        if mechanism == "batch":
            return [Step(("nft", "-f", "-"), delta.nft_transaction(d, handles=handles))]
        return [Step(("nft", cmd)) for cmd in delta.nft_commands(d, handles, each=True)]

    def unavailable(self) -> str | None:
        why = super().unavailable()
        if why is None:
            try:
                kernel.nftdump_binary()
            except FwbenchError as e:
                return str(e)
        return why

    def counters(self, tb: Testbed, rs: RuleSet) -> dict[str, int]:
        return kernel.nft_dump(tb).counters()

    def counted_ids(self, rs: RuleSet) -> frozenset[str]:
        return frozenset(r.id for _, _, r in rs.rules() if r.counter)

    def entries(self, tb: Testbed, rs: RuleSet) -> int:
        return kernel.nft_dump(tb).entries()

    def differences(self, tb: Testbed, rs: RuleSet) -> list[str]:
        return self.snapshot(tb, rs).differences

    def snapshot(self, tb: Testbed, rs: RuleSet) -> Snapshot:
        dump = kernel.nft_dump(tb)
        files = self.rendering(rs, interfaces(tb))
        key = (self.name, rs.digest(), interfaces(tb))
        proven = _proven.get(key)
        if self.expected_entries(rs) > TEXT_CHECK_ENTRIES and proven is not None:
            out = dump_differences(proven, dump)
        else:
            out = self._text_differences(tb, files["rules.nft"])
            if not out:
                remember(_proven, key, dump, PROVEN_KEPT)
        return Snapshot(out, dump.entries(), dump.counters())

    def _text_differences(self, tb: Testbed, rendered: str) -> list[str]:
        want_lines, want_elems = kernel.nft_lines(rendered)
        got_lines, got_elems = kernel.nft_lines(kernel.nft_list(tb))
        out = ordered_differences("nft ruleset", want_lines, got_lines)
        for name in sorted(want_elems.keys() | got_elems.keys()):
            out += unordered_differences(f"nft set {name}", want_elems.get(name, []),
                                         got_elems.get(name, []))
        return out


# Past this many rules and set elements, a rendering is compared in nft's text only
# at its first load (see the module's docstring); up to it, at every load.
TEXT_CHECK_ENTRIES = 20_000
# (backend, rule-set digest, interfaces) -> the netlink dump of a load of that
# rendering that matched it in nft's text; the latest PROVEN_KEPT (an update trial
# loads one rule set and changes it into another, trial after trial).
_proven: OrderedDict[tuple, kernel.NftDump] = OrderedDict()
PROVEN_KEPT = 8


def dump_differences(proven: kernel.NftDump, got: kernel.NftDump) -> list[str]:
    """Where the kernel's nf_tables differs from a proven load of the same
    rendering: chains, every chain's rules in order, sets (each by its element
    count and hash)."""
    out = unordered_differences("nft chains", proven.chains, got.chains, "chain")
    want, have = proven.chain_rules, got.chain_rules
    for where in sorted(want.keys() | have.keys()):
        out += ordered_differences(f"nft chain {' '.join(where)}", want.get(where, []),
                                   have.get(where, []))
    out += unordered_differences("nft sets", proven.sets, got.sets, "set")
    return out


class NftLinear(_Nft):
    name = "nftables"
    description = "nftables, one rule per entry in a linear chain (counters per scenario)"
    max_rules = 200_000
    compared_with = {"linear vs indexed": ("nftset",)}


class NftSet(_Nft):
    name = "nftset"
    layout = "set"
    description = "nftables set (ipv4_addr . inet_proto . inet_service), one rule"
