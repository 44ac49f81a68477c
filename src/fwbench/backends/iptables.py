"""iptables backends: legacy (x_tables) and nft (iptables-nft), linear chains, and
the ipset variant (hash:ip,port set matched by one iptables-legacy rule).

Rules are rendered in iptables-save's own format, so what the kernel holds is
compared with what was asked line by line, not only counted.
"""
from __future__ import annotations

import re

from fwbench import proc
from fwbench.backends.base import Backend, Snapshot, interfaces
from fwbench.ruleset import Interfaces, Policy
from fwbench.ruleset import render as r
from fwbench.testbed.netns import NetnsTestbed

_COUNTED = re.compile(r"^\[(\d+):(\d+)\] (-A .*)$")


def _chain_rules(save_text: str, chain: str) -> list[tuple[int, str]]:
    """(packets, rule text) for each rule of `chain` in `iptables-save -c` output."""
    out = []
    for line in save_text.splitlines():
        m = _COUNTED.match(line)
        if m and m.group(3).startswith(f"-A {chain} "):
            out.append((int(m.group(1)), m.group(3)))
    return out


class _Iptables(Backend):
    variant: str  # "legacy" or "nft"

    @property
    def tools(self) -> tuple[str, ...]:
        return (f"iptables-{self.variant}-restore", f"iptables-{self.variant}-save")

    def versions(self) -> dict[str, str | None]:
        return {"iptables": proc.version_line([f"iptables-{self.variant}", "-V"])}

    def _save(self, tb: NetnsTestbed) -> str:
        return tb.exec("fw", [f"iptables-{self.variant}-save", "-c", "-t", "filter"])

    def _restore(self, tb: NetnsTestbed, text: str) -> None:
        tb.exec("fw", [f"iptables-{self.variant}-restore"], input=text)

    def _snapshot(self, tb: NetnsTestbed, policy: Policy, rendered: str,
                  count_entries) -> Snapshot:
        rules = _chain_rules(self._save(tb), r.IPT_FROM_CLIENT)
        texts = [t for _, t in rules]
        want = [ln for ln in rendered.splitlines() if ln.startswith(f"-A {r.IPT_FROM_CLIENT} ")]
        by_text = {t: n for n, t in rules}
        icmp = r.ipt_aux_rules(policy)[1]
        return Snapshot(entries=count_entries(texts, policy, tb),
                        test_hits=by_text.get(self._test_rule(policy)),
                        ping_hits=by_text.get(icmp),
                        notes={"identical_to_rendered": texts == want})

    def _test_rule(self, policy: Policy) -> str:
        return r.ipt_entry(policy.test_entry)


class IptablesLinear(_Iptables):
    description = "iptables, one rule per entry in a linear chain"

    def render(self, policy: Policy, ifs: Interfaces) -> dict[str, str]:
        return {"rules.iptables": r.iptables_linear(policy, ifs)}

    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        self._restore(tb, files["rules.iptables"])

    def snapshot(self, tb: NetnsTestbed, policy: Policy) -> Snapshot:
        aux = set(r.ipt_aux_rules(policy))

        def entries(texts, *_):
            return sum(1 for t in texts if t not in aux)

        rendered = r.iptables_linear(policy, interfaces(tb))
        return self._snapshot(tb, policy, rendered, entries)


class IptablesLegacy(IptablesLinear):
    name = "iptables-legacy"
    variant = "legacy"
    max_rules = 200_000


class IptablesNft(IptablesLinear):
    name = "iptables-nft"
    variant = "nft"
    description = "iptables-nft (nf_tables kernel, iptables syntax), linear chain"
    max_rules = 100_000


class Ipset(_Iptables):
    name = "ipset"
    variant = "legacy"
    description = "ipset hash:ip,port holding every entry, one iptables-legacy rule"
    max_rules = 1_000_000

    @property
    def tools(self) -> tuple[str, ...]:
        return super().tools + ("ipset",)

    def versions(self) -> dict[str, str | None]:
        return {**super().versions(), "ipset": proc.version_line(["ipset", "-v"])}

    def render(self, policy: Policy, ifs: Interfaces) -> dict[str, str]:
        return {"set.ipset": r.ipset_restore(policy),
                "rules.iptables": r.iptables_ipset(policy, ifs)}

    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        # The set must exist before the rule that names it.
        tb.exec("fw", ["ipset", "restore"], input=files["set.ipset"])
        self._restore(tb, files["rules.iptables"])

    def _test_rule(self, policy: Policy) -> str:
        return r.ipset_set_rule()

    def snapshot(self, tb: NetnsTestbed, policy: Policy) -> Snapshot:
        def entries(texts, policy, tb):
            out = tb.run("fw", ["ipset", "list", "-t", r.IPSET_NAME], check=False).stdout
            m = re.search(r"^Number of entries: (\d+)$", out, re.M)
            return int(m.group(1)) if m else 0

        snap = self._snapshot(tb, policy, r.iptables_ipset(policy, interfaces(tb)), entries)
        t = policy.test_entry
        member = tb.run("fw", ["ipset", "test", r.IPSET_NAME,
                               f"{t.daddr},{t.proto}:{t.dport}"], check=False).returncode == 0
        # The set rule is the test flow's rule only if the test entry is in the set.
        return Snapshot(snap.entries, snap.test_hits if member else None, snap.ping_hits,
                        {**snap.notes, "test_entry_in_set": member})
