"""What changes between two renderings of a rule set, as the commands an
incremental update gives each firewall tool. Pure: rendered text in, commands
out; the backends run them (`Backend.update_steps`).

A chain's rules are compared as sequences (difflib), so any rule set pair works,
not only the update template's; the changes come out in chain order, which puts
the template's probe entry, the last of the changed ones, last. Chains, policies
and set declarations must be the same on both sides: changing those is a reload.
Positions are 1-based and count in the chain as it is when the change runs, as
`iptables -I/-R` take them.
"""
from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass

from fwbench.backends import kernel
from fwbench.errors import FwbenchError


@dataclass(frozen=True)
class RuleChange:
    """One rule's change in one chain."""
    op: str          # "append", "insert", "replace" or "delete"
    table: str       # iptables: "filter"; nft: "FAMILY TABLE"
    chain: str
    position: int    # 1-based, in the chain when the change runs
    rule: str        # the rule's text as rendered (for delete: the rule deleted)
    old: str | None = None   # replace: the rule replaced


def sequence_changes(table: str, chain: str, old: list[str],
                     new: list[str]) -> list[RuleChange]:
    """The changes that turn the rules `old` into `new`, in chain order."""
    out: list[RuleChange] = []
    sm = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        # Before each opcode the chain holds new[:j1] + old[i1:].
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            out += [RuleChange("replace", table, chain, j1 + t + 1, new[j1 + t], old[i1 + t])
                    for t in range(i2 - i1)]
            continue
        if tag in ("delete", "replace"):
            out += [RuleChange("delete", table, chain, j1 + 1, old[i]) for i in range(i1, i2)]
        if tag in ("insert", "replace"):
            after = len(old) - i2       # rules of old still after the inserted ones
            for m in range(j1, j2):
                op = "append" if after == 0 else "insert"
                out.append(RuleChange(op, table, chain, m + 1, new[m]))
    return out


def _same_frame(what: str, old: dict, new: dict) -> None:
    if old != new:
        raise FwbenchError(f"{what} differ before and after the update: only a reload "
                           f"can change them")


# --- iptables ------------------------------------------------------------------------

def _ipt_parts(text: str) -> tuple[dict, dict]:
    """iptables-restore text as (table -> its chain lines, (table, chain) -> its
    rules' specs in order)."""
    frames: dict[str, list[str]] = {}
    rules: dict[tuple[str, str], list[str]] = {}
    for table, lines in kernel.save_tables(text).items():
        frames[table] = [ln for ln in lines if ln.startswith(":")]
        for ln in lines:
            if ln.startswith("-A "):
                chain, _, spec = ln[3:].partition(" ")
                rules.setdefault((table, chain), []).append(spec)
    return frames, rules


def iptables_changes(old: str, new: str) -> list[RuleChange]:
    """The rule changes between two iptables-restore renderings."""
    old_frames, old_rules = _ipt_parts(old)
    new_frames, new_rules = _ipt_parts(new)
    _same_frame("iptables chains and policies", old_frames, new_frames)
    out: list[RuleChange] = []
    for table, chain in sorted(old_rules.keys() | new_rules.keys()):
        out += sequence_changes(table, chain, old_rules.get((table, chain), []),
                                new_rules.get((table, chain), []))
    return out


def iptables_line(c: RuleChange) -> str:
    """The change as iptables(-restore) takes it, without the table."""
    if c.op == "append":
        return f"-A {c.chain} {c.rule}"
    if c.op == "insert":
        return f"-I {c.chain} {c.position} {c.rule}"
    if c.op == "replace":
        return f"-R {c.chain} {c.position} {c.rule}"
    return f"-D {c.chain} {c.rule}"


def iptables_restore_text(changes: list[RuleChange]) -> str:
    """The changes as one `iptables-restore --noflush` input: one commit per table."""
    out: list[str] = []
    for table in dict.fromkeys(c.table for c in changes):
        out.append(f"*{table}")
        out += [iptables_line(c) for c in changes if c.table == table]
        out.append("COMMIT")
    return "\n".join(out) + "\n"


def iptables_argv(tool: str, c: RuleChange) -> list[str]:
    """One change as one iptables command."""
    return [tool, "-t", c.table, *shlex.split(iptables_line(c))]


# --- ipset ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ElementChange:
    op: str          # "add" or "delete"
    set: str         # ipset: its name; nft: "FAMILY TABLE SET"
    element: str     # as rendered


def element_changes(sets_old: dict[str, list[str]],
                    sets_new: dict[str, list[str]]) -> list[ElementChange]:
    """Elements deleted (in the old rendering's order), then added (in the new
    one's), set by set."""
    out: list[ElementChange] = []
    for name in sorted(sets_old.keys() | sets_new.keys()):
        old, new = sets_old.get(name, []), sets_new.get(name, [])
        gone, came = set(old) - set(new), set(new) - set(old)
        out += [ElementChange("delete", name, e) for e in old if e in gone]
        out += [ElementChange("add", name, e) for e in new if e in came]
    return out


def ipset_changes(old: str, new: str) -> list[ElementChange]:
    """The element changes between two `ipset restore` renderings."""
    o, n = kernel.ipsets(old), kernel.ipsets(new)
    _same_frame("ipset declarations", {k: v[0] for k, v in o.items()},
                {k: v[0] for k, v in n.items()})
    return element_changes({k: v[1] for k, v in o.items()}, {k: v[1] for k, v in n.items()})


def ipset_line(c: ElementChange) -> str:
    return f"{'add' if c.op == 'add' else 'del'} {c.set} {c.element}"


def ipset_swap_text(new: str, suffix: str = "_n") -> str:
    """The whole new rendering into a fresh set per set, each swapped in for the
    loaded one in one step (`ipset swap`), the old contents destroyed after."""
    out: list[str] = []
    names = [ln.split()[1] for ln in new.splitlines() if ln.startswith("create ")]
    for ln in new.splitlines():
        words = ln.split(" ", 2)
        if len(words) >= 2 and words[0] in ("create", "add") and words[1] in names:
            out.append(f"{words[0]} {words[1]}{suffix} {words[2] if len(words) > 2 else ''}"
                       .rstrip())
    for name in names:
        out += [f"swap {name}{suffix} {name}", f"destroy {name}{suffix}"]
    return "\n".join(out) + "\n"


# --- nftables ------------------------------------------------------------------------

@dataclass(frozen=True)
class NftParts:
    """A rendered nft ruleset taken apart: each chain's declaration lines, each
    chain's rules in order, each set's declaration and elements."""
    frames: dict
    rules: dict[tuple[str, str], list[str]]      # ("ip fwbench", chain) -> rules
    elements: dict[str, list[str]]               # "ip fwbench allowed" -> elements


def nft_parts(text: str) -> NftParts:
    """The renderer's layout: `table F T {`, `chain C {` or `set S {` one level in,
    their contents one level further, `elements = {` one element a line."""
    frames: dict[str, list[str]] = {}
    rules: dict[tuple[str, str], list[str]] = {}
    elements: dict[str, list[str]] = {}
    table = block = None
    in_elements = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("table ") and line.endswith("{"):
            table = " ".join(line.split()[1:3])
        elif line.startswith(("chain ", "set ", "map ")) and line.endswith("{"):
            # A verdict map's elements (`key : verdict`) change as a set's do.
            block = (line.split()[0], line.split()[1])
            frames[f"{table} {' '.join(block)}"] = []
            if block[0] in ("set", "map"):
                elements[f"{table} {block[1]}"] = []
        elif line.startswith("elements = {"):
            in_elements = True
            rest = line[len("elements = {"):].strip()
            if rest:
                raise FwbenchError("nft rendering: elements expected one a line")
        elif in_elements:
            if line.startswith("}"):
                in_elements = False
            else:
                elements[f"{table} {block[1]}"].append(line.rstrip(","))
        elif line == "}":
            if block is not None:
                block = None
            else:
                table = None
        elif block is not None and block[0] == "chain" and not _declaration(line):
            rules.setdefault((table, block[1]), []).append(line)
        elif block is not None:
            frames[f"{table} {' '.join(block)}"].append(line)
    return NftParts(frames, rules, elements)


def _declaration(line: str) -> bool:
    """A chain's own lines: its hook and policy, not a rule."""
    return line.startswith(("type ", "policy "))


def nft_changes(old: str, new: str) -> tuple[list[RuleChange], list[ElementChange]]:
    o, n = nft_parts(old), nft_parts(new)
    _same_frame("nft tables, chains and set declarations", o.frames, n.frames)
    rules: list[RuleChange] = []
    for table, chain in sorted(o.rules.keys() | n.rules.keys()):
        rules += sequence_changes(table, chain, o.rules.get((table, chain), []),
                                  n.rules.get((table, chain), []))
    return rules, element_changes(o.elements, n.elements)


_COMMENT = re.compile(r'comment "([^"]*)"')


def nft_rule_id(rule: str) -> str | None:
    """The id in a rendered nft rule's comment."""
    m = _COMMENT.search(rule)
    return kernel.nft_rule_id(m.group(1)) if m else None


def nft_rule_command(c: RuleChange, handles: dict[str, int]) -> str:
    """One rule change as an nft command. `handles`: rule id -> its handle in the
    kernel, for the rules a delete or replace names."""
    where = f"{c.table} {c.chain}"
    if c.op == "append":
        return f"add rule {where} {c.rule}"
    if c.op == "insert":
        # `insert` without a position puts it first; `add ... index i` after the
        # rule at 0-based index i.
        return (f"insert rule {where} {c.rule}" if c.position == 1 else
                f"add rule {where} index {c.position - 2} {c.rule}")
    target = nft_rule_id(c.old if c.op == "replace" else c.rule)
    try:
        handle = handles[target]
    except KeyError:
        raise FwbenchError(f"nft: no rule with id {target!r} in the kernel to {c.op}") \
            from None
    if c.op == "replace":
        return f"replace rule {where} handle {handle} {c.rule}"
    return f"delete rule {where} handle {handle}"


def nft_element_command(changes: list[ElementChange]) -> str:
    """Element changes of one set and one kind as one nft command."""
    first = changes[0]
    verb = "add" if first.op == "add" else "delete"
    return f"{verb} element {first.set} {{ {', '.join(c.element for c in changes)} }}"


def nft_transaction(rules: list[RuleChange], elements: list[ElementChange],
                    handles: dict[str, int]) -> str:
    """Every change as one `nft -f` input: one transaction, all or nothing."""
    out = [nft_rule_command(c, handles) for c in rules]
    for s in dict.fromkeys(c.set for c in elements):
        for op in ("delete", "add"):
            group = [c for c in elements if c.set == s and c.op == op]
            if group:
                out.append(nft_element_command(group))
    return "\n".join(out) + "\n"
