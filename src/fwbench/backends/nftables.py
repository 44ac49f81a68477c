"""nftables backends: any rule set of the model, loaded with `nft -f` as one
transaction. `nftables` holds templates' entries as one rule each (seed 000's
`nftables` treatment), `nftset` as the elements of one set keyed on address .
protocol . port (its `nft set` treatment).

What the kernel holds is compared with the rendering in nft's own text form, the
form the renderer writes: the whole ruleset line by line (tables, chains with hook,
priority and policy, every rule in order; counters' values left out, so no other
table may exist), and each set's elements as a set. Counters are read by the
`fwb:` id in each rule's comment.
"""
from __future__ import annotations

from fwbench import proc
from fwbench.backends import kernel
from fwbench.backends.base import Backend, interfaces, ordered_differences, \
    unordered_differences
from fwbench.ruleset.model import Interfaces, RuleSet
from fwbench.ruleset.render import nft as nft_render
from fwbench.testbed.netns import NetnsTestbed


class _Nft(Backend):
    tools = ("nft",)

    def versions(self) -> dict[str, str | None]:
        return {"nft": proc.version_line(["nft", "-v"])}

    def _check(self, rs: RuleSet) -> None:
        nft_render.check(rs)

    def render(self, rs: RuleSet, ifs: Interfaces) -> dict[str, str]:
        return {"rules.nft": nft_render.render(rs, ifs)}

    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        kernel.nft_load(tb, files["rules.nft"])

    def counters(self, tb: NetnsTestbed, rs: RuleSet) -> dict[str, int]:
        return kernel.nft_counters(kernel.nft_json(tb))

    def counted_ids(self, rs: RuleSet) -> frozenset[str]:
        return frozenset(r.id for _, _, r in rs.rules() if r.counter)

    def entries(self, tb: NetnsTestbed, rs: RuleSet) -> int:
        items = kernel.nft_json(tb)
        rules = sum(1 for i in items
                    if "rule" in i and kernel.nft_rule_id(i["rule"].get("comment")))
        elements = sum(len(i["set"].get("elem", [])) for i in items if "set" in i)
        return rules + elements

    def differences(self, tb: NetnsTestbed, rs: RuleSet) -> list[str]:
        want_lines, want_elems = kernel.nft_lines(self.render(rs, interfaces(tb))["rules.nft"])
        got_lines, got_elems = kernel.nft_lines(kernel.nft_list(tb))
        out = ordered_differences("nft ruleset", want_lines, got_lines)
        for name in sorted(want_elems.keys() | got_elems.keys()):
            out += unordered_differences(f"nft set {name}", want_elems.get(name, []),
                                         got_elems.get(name, []))
        return out


class NftLinear(_Nft):
    name = "nftables"
    description = "nftables, one rule per entry in a linear chain (counters per scenario)"
    max_rules = 200_000


class NftSet(_Nft):
    name = "nftset"
    layout = "set"
    description = "nftables set (ipv4_addr . inet_proto . inet_service), one rule"
