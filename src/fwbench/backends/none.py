"""`none`: forwarding with every firewall empty, the baseline each run measures."""
from __future__ import annotations

from fwbench.backends import kernel
from fwbench.backends.base import Backend
from fwbench.ruleset.model import Interfaces, RuleSet
from fwbench.testbed.base import Testbed


class NoFirewall(Backend):
    name = "none"
    description = "no rules: plain forwarding, the ceiling every backend is compared with"
    filters = False

    def _refuse_unsupported(self, rs: RuleSet) -> None:
        pass  # holds nothing, so refuses nothing

    def render(self, rs: RuleSet, ifs: Interfaces) -> dict[str, str]:
        return {}

    def load(self, tb: Testbed, files: dict[str, str], room: int = 0) -> None:
        pass  # apply() has already flushed every firewall

    def counters(self, tb: Testbed, rs: RuleSet) -> dict[str, int]:
        return {}

    def counted_ids(self, rs: RuleSet) -> frozenset[str]:
        return frozenset()

    def entries(self, tb: Testbed, rs: RuleSet) -> int:
        return sum(kernel.ruleset_state(tb).values())

    def differences(self, tb: Testbed, rs: RuleSet) -> list[str]:
        return [f"{what}: {n} in the kernel, none rendered"
                for what, n in kernel.ruleset_state(tb).items() if n]
