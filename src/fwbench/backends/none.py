"""`none`: forwarding with every firewall empty, the baseline each run measures."""
from __future__ import annotations

from fwbench.backends.base import Backend, Snapshot, ruleset_state
from fwbench.ruleset import Interfaces, Policy
from fwbench.testbed.netns import NetnsTestbed


class NoFirewall(Backend):
    name = "none"
    description = "no rules: plain forwarding, the ceiling every backend is compared with"
    filters = False

    def render(self, policy: Policy, ifs: Interfaces) -> dict[str, str]:
        return {}

    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        pass  # apply() has already flushed every firewall

    def snapshot(self, tb: NetnsTestbed, policy: Policy) -> Snapshot:
        state = ruleset_state(tb)
        rules = state.get("iptables-legacy", 0) + state.get("nftables_tables", 0) \
            + state.get("ipsets", 0) + state.get("bpf_programs", 0)
        return Snapshot(rules, None, None, {"firewall_state": state})

    def differences(self, tb: NetnsTestbed, policy: Policy) -> list[str]:
        return [f"{what}: {n} in the kernel, none rendered"
                for what, n in ruleset_state(tb).items() if n]
