"""The user's file itself in the firewall: the reference for what the import means.

Not a backend a user chooses: `check FILE` (and `run` with a policy file, once
before it measures) loads the original with its own tool, rewritten onto the
testbed by ruleset/original.py, and sends it the corpus every backend gets. It
has no rule ids of fwbench's, so only verdicts and translations are compared;
its counters are not read.
"""
from __future__ import annotations

from fwbench import proc
from fwbench.backends import kernel
from fwbench.backends.base import Backend
from fwbench.errors import CommandError, FwbenchError
from fwbench.ruleset import original
from fwbench.ruleset.model import Interfaces, RuleSet
from fwbench.testbed.base import Testbed

NAME = "original"


class OriginalFile(Backend):
    """One rule-set file, as the tool that reads it loads it."""
    name = NAME
    description = "the rule-set file itself, loaded by its own tool"
    reads_once = False

    def __init__(self, orig: original.Original):
        self.orig = orig

    @property
    def tools(self) -> tuple[str, ...]:
        out = ("ipset",) if self.orig.ipsets_text is not None else ()
        if self.orig.kind == "iptables":
            return out + self._ipts()
        return out + ("nft",)

    @property
    def command(self) -> str:
        """The tool that loads the file here, as it is run."""
        if self.orig.kind == "iptables":
            return " and ".join(self._ipts())
        return "nft -j -f" if self.orig.kind == "nft JSON" else "nft -f"

    def _ipts(self) -> tuple[str, ...]:
        """The restore tools that read the file: both for a dual-stack file
        (version 0), each ignoring the other version's rules."""
        versions = (4, 6) if self.orig.version == 0 else (self.orig.version,)
        return tuple(self._ipt(v) for v in versions)

    @staticmethod
    def _ipt(version: int) -> str:
        # x_tables itself, the interface the file was saved from on most hosts;
        # iptables-nft reads the same syntax into nf_tables.
        head = "iptables" if version == 4 else "ip6tables"
        for tool in (f"{head}-legacy-restore", f"{head}-restore"):
            if proc.have(tool):
                return tool
        return f"{head}-restore"

    def _refuse_unsupported(self, rs: RuleSet) -> None:
        pass    # the kernel's own tool is the judge: a load that fails says why

    def render(self, rs: RuleSet, ifs: Interfaces) -> dict[str, str]:
        return original.rewrite(self.orig, rs, ifs)

    def rendering(self, rs: RuleSet, ifs: Interfaces) -> dict[str, str]:
        # Not remembered by rule-set digest: another file may import to the same model.
        return self.render(rs, ifs)

    def load(self, tb: Testbed, files: dict[str, str], room: int = 0) -> None:
        try:
            if "sets.ipset" in files:
                kernel.ipset_restore(tb, files["sets.ipset"])
            if "original.rules" in files:
                for tool in self._ipts():
                    tb.exec("fw", [tool], input=files["original.rules"])
            elif "original.json" in files:
                tb.exec("fw", ["nft", "-j", "-f", "-"], input=files["original.json"])
            else:
                tb.exec("fw", ["nft", "-f", "-"], input=files["original.nft"])
        except CommandError as e:
            first = next((ln.strip() for ln in e.stderr.splitlines() if ln.strip()),
                         f"exit {e.returncode}")
            raise FwbenchError(f"the original {self.orig.path} does not load here with "
                               f"{self.command}: {first}") from None

    def counters(self, tb: Testbed, rs: RuleSet) -> dict[str, int]:
        return {}

    def counted_ids(self, rs: RuleSet) -> frozenset[str]:
        return frozenset()

    def entries(self, tb: Testbed, rs: RuleSet) -> int:
        return 0

    def differences(self, tb: Testbed, rs: RuleSet) -> list[str]:
        return []
