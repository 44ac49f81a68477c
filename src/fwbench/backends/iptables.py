"""iptables backends: legacy (x_tables) and nft (iptables-nft), linear chains, and
the ipset variant (hash:ip,port set matched by one iptables-legacy rule).

Rules are rendered in iptables-save's own format, so what the kernel holds is
compared with what was asked line by line, not only counted: the whole filter table
(policies, chains, every rule in order), every other table empty, and for ipset the
set's type and elements.
"""
from __future__ import annotations

import re

from fwbench import proc
from fwbench.backends.base import (Backend, Snapshot, interfaces, ordered_differences,
                                   unordered_differences)
from fwbench.ruleset import Interfaces, Policy
from fwbench.ruleset import policy_render as r
from fwbench.testbed.netns import NetnsTestbed

_COUNTED = re.compile(r"^\[(\d+):(\d+)\] (-A .*)$")
_CHAIN_COUNTERS = re.compile(r" \[\d+:\d+\]$")


def save_tables(text: str) -> dict[str, list[str]]:
    """iptables-save (or restore) text as table -> its lines in order: chains with
    their policies, then rules; comments, COMMIT and counters left out, so what was
    rendered and what the kernel lists compare line by line."""
    tables: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in text.splitlines():
        if not line or line.startswith("#") or line == "COMMIT":
            continue
        if line.startswith("*"):
            lines = tables.setdefault(line[1:], [])
        elif lines is not None:
            m = _COUNTED.match(line)
            lines.append(m.group(3) if m else _CHAIN_COUNTERS.sub("", line))
    return tables


def _unasked(lines: list[str]) -> list[str]:
    """The lines of a table fwbench did not render that hold anything: rules, user
    chains, a built-in chain whose policy is not ACCEPT."""
    return [ln for ln in lines
            if ln.startswith("-A ") or (ln.startswith(":") and not ln.endswith(" ACCEPT"))]


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

    def _snapshot(self, tb: NetnsTestbed, policy: Policy, count_entries) -> Snapshot:
        rules = _chain_rules(self._save(tb), r.IPT_FROM_CLIENT)
        texts = [t for _, t in rules]
        by_text = {t: n for n, t in rules}
        icmp = r.ipt_aux_rules(policy)[1]
        return Snapshot(entries=count_entries(texts, policy, tb),
                        test_hits=by_text.get(self._test_rule(policy)),
                        ping_hits=by_text.get(icmp))

    def differences(self, tb: NetnsTestbed, policy: Policy) -> list[str]:
        """The filter table line by line against the rendering; every other table
        this family has registered must hold nothing."""
        want = save_tables(self.render(policy, interfaces(tb))["rules.iptables"])["filter"]
        got = save_tables(tb.exec("fw", [f"iptables-{self.variant}-save"]))
        out = ordered_differences("filter table", want, got.pop("filter", []))
        for table, lines in sorted(got.items()):
            out += unordered_differences(f"{table} table", [], _unasked(lines), "line")
        return out

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

        return self._snapshot(tb, policy, entries)


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

        snap = self._snapshot(tb, policy, entries)
        t = policy.test_entry
        member = tb.run("fw", ["ipset", "test", r.IPSET_NAME,
                               f"{t.daddr},{t.proto}:{t.dport}"], check=False).returncode == 0
        # The set rule is the test flow's rule only if the test entry is in the set.
        return Snapshot(snap.entries, snap.test_hits if member else None, snap.ping_hits,
                        {"test_entry_in_set": member})

    def differences(self, tb: NetnsTestbed, policy: Policy) -> list[str]:
        """The rule table as for the linear chain, then every set: the rendered one
        with its type, family and size limit (hashsize grows with the elements, so
        it is not compared) and exactly the rendered elements; no other set."""
        out = super().differences(tb, policy)
        want, got = _ipsets(r.ipset_restore(policy)), _ipsets(tb.exec("fw", ["ipset", "save"]))
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


def _ipsets(text: str) -> dict[str, tuple[tuple[str, ...], list[str]]]:
    """ipset save/restore text as name -> ((type, family, maxelem), elements)."""
    sets: dict[str, tuple[tuple[str, ...], list[str]]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "create":
            opts = {w: words[i + 1] for i, w in enumerate(words[:-1])
                    if w in ("family", "maxelem")}
            sets[words[1]] = ((words[2], f"family {opts.get('family')}",
                               f"maxelem {opts.get('maxelem')}"), [])
        elif len(words) >= 3 and words[0] == "add" and words[1] in sets:
            sets[words[1]][1].append(" ".join(words[2:]))
    return sets
