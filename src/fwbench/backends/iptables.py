"""iptables backends: legacy (x_tables) and nft (iptables-nft), IPv4 and IPv6
(ip6tables) from one rendering; named sets through ipset. `ipset` is the legacy
backend with templates' entries held in a set.

Rules are rendered in iptables-save's own format, so what the kernel holds is
compared with what was asked line by line, not only counted: every table (policies,
chains, every rule in order), every table not rendered empty, and every set with
its type and elements. Counters are read by the `fwb:` id comment on each rule.
"""
from __future__ import annotations

import functools
from collections import OrderedDict

from fwbench import proc
from fwbench.backends import kernel
from fwbench.backends.base import Backend, Snapshot, Step, interfaces, ordered_differences, \
    remembered, unordered_differences
from fwbench.errors import FwbenchError
from fwbench.ruleset.model import Interfaces, RuleSet
from fwbench.ruleset.render import ipset as ipset_render
from fwbench.ruleset.render import iptables as ipt_render
from fwbench.testbed.base import Testbed
from fwbench.backends import delta


def _file(version: int) -> str:
    return "rules.iptables" if version == 4 else "rules.ip6tables"


def _unasked(lines: list[str]) -> list[str]:
    """The lines of a table fwbench did not render that hold anything: rules, user
    chains, a built-in chain whose policy is not ACCEPT."""
    return [ln for ln in lines
            if ln.startswith("-A ") or (ln.startswith(":") and not ln.endswith(" ACCEPT"))]


def _has_sets(rs: RuleSet) -> bool:
    # Verdict maps are rules in iptables, not ipsets.
    return any(not s.is_vmap for t in rs.tables for s in t.sets)


class _Iptables(Backend):
    variant: str  # "legacy" or "nft"
    reads_once = True
    mechanisms = {
        "reload": ("iptables-restore of the whole rule set", True),
        "batch": ("iptables-restore --noflush of the changed rules and chains, one commit",
                  True),
        "commands": ("one iptables -A/-I/-R/-D/-N/-F/-X per changed rule or chain", False),
        "sync": ("iptables-restore --noflush of every changed chain whole, chains gone "
                 "deleted, one commit (kube-proxy's partial sync)", True),
    }

    @property
    def tools(self) -> tuple[str, ...]:
        return (f"iptables-{self.variant}-restore", f"iptables-{self.variant}-save",
                f"ip6tables-{self.variant}-restore", f"ip6tables-{self.variant}-save")

    def versions(self) -> dict[str, str | None]:
        out = {"iptables": proc.version_line([f"iptables-{self.variant}", "-V"])}
        if proc.have("ipset"):
            out["ipset"] = proc.version_line(["ipset", "-v"])
        return out

    def _refuse_unsupported(self, rs: RuleSet) -> None:
        ipt_render.refuse_unsupported(rs)
        if _has_sets(rs):
            ipset_render.refuse_unsupported(rs)

    def render(self, rs: RuleSet, ifs: Interfaces) -> dict[str, str]:
        files = {}
        if _has_sets(rs):
            files["sets.ipset"] = ipset_render.render(rs)
        for v in sorted(rs.versions):
            files[_file(v)] = ipt_render.render(rs, ifs, v)
        return files

    def load(self, tb: Testbed, files: dict[str, str], room: int = 0) -> None:
        # A set must exist before the rule that names it.
        if "sets.ipset" in files:
            kernel.ipset_restore(tb, files["sets.ipset"])
        for v in (4, 6):
            if _file(v) in files:
                kernel.ipt_restore(tb, kernel.xt(self.variant, v), files[_file(v)])

    def update_steps(self, mechanism: str, tb: Testbed, old: RuleSet, new: RuleSet,
                     rewrite: frozenset[str] = frozenset()) -> list[Step]:
        ifs = interfaces(tb)
        before, after = self.rendering(old, ifs), self.rendering(new, ifs)
        if "sets.ipset" in before or "sets.ipset" in after:
            return self._set_steps(mechanism, before, after)
        if mechanism not in self.mechanisms:
            return super().update_steps(mechanism, tb, old, new)
        steps: list[Step] = []
        for v in (4, 6):
            f = _file(v)
            if f not in after:
                continue
            tool = kernel.xt(self.variant, v).tool
            if mechanism == "reload":
                steps.append(Step((f"{tool}-restore",), after[f]))
                continue
            d = delta.iptables_delta(before.get(f, ""), after[f])
            if mechanism == "batch":
                steps.append(Step((f"{tool}-restore", "--noflush"),
                                  delta.iptables_restore_text(d)))
            elif mechanism == "sync":
                # As kube-proxy runs it (utiliptables: NoFlushTables, RestoreCounters).
                names = frozenset(new.ipt_prefix + c for c in rewrite)
                steps.append(Step((f"{tool}-restore", "--noflush", "--counters"),
                                  delta.iptables_sync_text(d, names)))
            else:
                steps += [Step(tuple(argv)) for argv in delta.iptables_commands(tool, d)]
        return steps

    def _set_steps(self, mechanism: str, before: dict[str, str],
                   after: dict[str, str]) -> list[Step]:
        """An ipset-held rule set: element changes by ipset; a reload swaps a new
        set in, then restores the rules."""
        if mechanism == "reload":
            return [Step(("ipset", "restore"), delta.ipset_swap_text(after["sets.ipset"])),
                    *(Step((f"{kernel.xt(self.variant, v).tool}-restore",), after[_file(v)])
                      for v in (4, 6) if _file(v) in after)]
        if any(before.get(_file(v)) != after.get(_file(v)) for v in (4, 6)):
            raise FwbenchError(f"{self.name}: the update changes rules, not only set "
                               f"elements: only a reload can")
        changes = delta.ipset_changes(before.get("sets.ipset", ""), after["sets.ipset"])
        if mechanism == "batch":
            return [Step(("ipset", "restore"),
                         "".join(delta.ipset_line(c) + "\n" for c in changes))]
        if mechanism == "commands":
            return [Step(("ipset", *delta.ipset_line(c).split(" "))) for c in changes]
        raise FwbenchError(f"{self.name} has no update mechanism {mechanism!r}")

    def counters(self, tb: Testbed, rs: RuleSet) -> dict[str, int]:
        return _counted(kernel.ipt_save(tb, kernel.xt(self.variant, v), counters=True)
                        for v in sorted(rs.versions))

    def counted_ids(self, rs: RuleSet) -> frozenset[str]:
        # iptables counts every rule; remembered for the latest rule set (100,000
        # ids are read twice a verification).
        key = rs.digest()
        if _ids[0] != key:
            _ids[:] = [key, frozenset(r.id for _, _, r in rs.rules())]
        return _ids[1]

    def entries(self, tb: Testbed, rs: RuleSet) -> int:
        return self.snapshot(tb, rs).entries

    def expected_entries(self, rs: RuleSet) -> int:
        """Rules of an inet table land in both iptables and ip6tables unless their
        addresses pin one version: counted in the rendering (remembered per rule set,
        as it takes a second at 100,000 rules)."""
        return remembered(_expected, rs.digest(), lambda: sum(
            len(kernel.ipt_ids(ipt_render.render(rs, Interfaces("a", "b"), v)))
            for v in sorted(rs.versions)) + sum(len(s.elements) for t in rs.tables
                                                 for s in t.sets if not s.is_vmap))

    def differences(self, tb: Testbed, rs: RuleSet) -> list[str]:
        return self.snapshot(tb, rs).differences

    def snapshot(self, tb: Testbed, rs: RuleSet) -> Snapshot:
        """One `iptables-save -c` per IP version and one `ipset save`: every table
        line by line against the rendering, every other table this family has
        registered empty, the sets as sets, and the counters from the same text."""
        files = self.rendering(rs, interfaces(tb))
        saved = {v: kernel.ipt_save(tb, kernel.xt(self.variant, v), counters=True)
                 for v in (4, 6)}
        out = []
        for v in (4, 6):
            want = _rendered_tables(files.get(_file(v), ""))
            got = kernel.save_tables(saved[v])
            name = "" if v == 4 else "ip6 "
            for table in sorted(want.keys() | got.keys()):
                if table in want:
                    out += ordered_differences(f"{name}{table} table", want[table],
                                               got.get(table, []))
                else:
                    out += unordered_differences(f"{name}{table} table", [],
                                                 _unasked(got[table]), "line")
        sets = kernel.ipsets(kernel.ipset_save(tb))
        out += _set_differences(kernel.ipsets(files.get("sets.ipset", "")), sets)
        rules = sum(len(kernel.ipt_ids(saved[v])) for v in sorted(rs.versions))
        held = sum(len(elems) for _, elems in sets.values()) if _has_sets(rs) else 0
        return Snapshot(out, rules + held,
                        _counted(saved[v] for v in sorted(rs.versions)))


# The latest rule set's digest and its rule ids.
_ids: list = [None, frozenset()]


@functools.lru_cache(maxsize=8)
def _rendered_tables(text: str) -> dict[str, list[str]]:
    """save_tables of a rendered file, which every verification of a rule set
    compares with: the same text trial after trial. Not to be changed."""
    return kernel.save_tables(text)


# Rule-set digest -> its expected entries (the latest few).
_expected: OrderedDict[str, int] = OrderedDict()


def _counted(saves) -> dict[str, int]:
    """Rule id -> packets over several `iptables-save -c` texts (an inet rule is in
    both iptables and ip6tables)."""
    out: dict[str, int] = {}
    for text in saves:
        for rid, n in kernel.ipt_counters(text).items():
            out[rid] = out.get(rid, 0) + n
    return out


def _set_differences(want: dict, got: dict) -> list[str]:
    """Every set (`kernel.ipsets` of the rendering and of `ipset save`): the rendered
    one with its type, family and size limit and exactly the rendered elements; no
    other set."""
    out = []
    for name in sorted(want.keys() | got.keys()):
        if name not in got:
            out.append(f"ipset {name}: rendered, not in the kernel")
        elif name not in want:
            out.append(f"ipset {name}: in the kernel ({len(got[name][1])} elements), "
                       f"not rendered")
        else:
            (want_kind, want_elems), (got_kind, got_elems) = want[name], got[name]
            if want_kind != got_kind:
                out.append(f"ipset {name}: kernel has {' '.join(got_kind)}, rendered "
                           f"{' '.join(want_kind)}")
            out += unordered_differences(f"ipset {name}", want_elems, got_elems)
    return out


class IptablesLegacy(_Iptables):
    name = "iptables-legacy"
    variant = "legacy"
    description = "iptables (x_tables), one rule per entry in a linear chain"
    max_rules = 200_000
    family = "x_tables"
    firewalls = (kernel.XT_LEGACY,)
    compared_with = {"seed 000": ("nftables",), "linear vs indexed": ("ipset",)}


class IptablesNft(_Iptables):
    name = "iptables-nft"
    variant = "nft"
    description = "iptables-nft (nf_tables kernel, iptables syntax), linear chain"
    max_rules = 100_000
    family = "nf_tables"
    firewalls = (kernel.XT_NFT, kernel.NF_TABLES)


class Ipset(_Iptables):
    name = "ipset"
    variant = "legacy"
    layout = "set"
    description = "ipset hash:ip,port holding every entry, one iptables-legacy rule"
    max_rules = 1_000_000
    family = "x_tables"
    # The rule first: a set an iptables rule names cannot be destroyed.
    firewalls = (kernel.XT_LEGACY, kernel.IPSET)
    compared_with = {"seed 000": ("nftset",)}
    mechanisms = {
        "reload": ("ipset restore of a new set swapped in (ipset swap), then "
                   "iptables-restore of the rules", True),
        "batch": ("one ipset restore of the added and deleted elements", False),
        "commands": ("one ipset add/del per element", False),
    }

    @property
    def tools(self) -> tuple[str, ...]:
        return super().tools + ("ipset",)
