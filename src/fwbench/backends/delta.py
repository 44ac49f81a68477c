"""What changes between two renderings of a rule set, as the commands an
incremental update gives each firewall tool. Pure: rendered text in, commands
out; the backends run them (`Backend.update_steps`).

A chain's rules are compared as sequences (difflib), so any rule set pair works,
not only the update template's; the changes come out in chain order, which puts
the template's probe entry, the last of the changed ones, last. User chains may
be added and removed whole (ChainChange: kube-proxy's services come and go so);
policies, base chains and set declarations must be the same on both sides:
changing those is a reload. Positions are 1-based and count in the chain as it
is when the change runs, as `iptables -I/-R` take them.

Each family's changes are written three ways: the smallest change (`batch`:
one iptables-restore --noflush or one nft transaction; `commands`: the same,
one command each), and a control plane's sync (`sync`), which writes every
chain it touches whole, as kube-proxy's partial sync does: iptables, a chain
line (which flushes the chain under --noflush) then all its rules, `-X` for the
chains gone (pkg/proxy/iptables/proxier.go); nft, `add chain` and `flush
chain` then all its rules, elements added and deleted, the chains gone flushed
(pkg/proxy/nftables/proxier.go: ensureChain, and its stale chains).
"""
from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class ChainChange:
    """A user chain added or removed whole."""
    op: str                  # "add" or "delete"
    table: str               # iptables: "nat"; nft: "FAMILY TABLE"
    chain: str
    rules: tuple[str, ...]   # add: its rules in order; delete: those it held


@dataclass(frozen=True)
class SetChange:
    """An nft named set or map added or removed whole (its elements are element
    changes: added after it, not deleted before it goes)."""
    op: str                  # "add" or "delete"
    table: str               # "FAMILY TABLE"
    kind: str                # "set" or "map"
    name: str
    declaration: tuple[str, ...]     # its lines but the elements, as rendered


@dataclass(frozen=True)
class Delta:
    """Everything that changes between two renderings: rule changes in the chains
    both have (chain order), chains added (the new rendering's order) and removed
    (the old one's), set elements (nft), and each chain's rules on each side (what
    a sync writes whole)."""
    rules: list[RuleChange]
    chains: list[ChainChange]
    elements: list["ElementChange"]
    old: dict[tuple[str, str], list[str]]
    new: dict[tuple[str, str], list[str]]
    # (table, chain) -> its declaration in the new rendering: iptables, its chain
    # line (":NAME POLICY"); nft, its type and policy lines (none: a user chain).
    frames: dict[tuple[str, str], list[str]]
    # nft: named sets and maps added or removed (kube-proxy's nftables mode has one
    # numgen map per service when there are many: render/nft.py).
    sets: list[SetChange] = field(default_factory=list)

    def changed(self) -> list[tuple[str, str]]:
        """The chains on both sides whose rules differ."""
        return sorted({(c.table, c.chain) for c in self.rules})


def _same_frame(what: str, old: dict, new: dict) -> None:
    if old != new:
        raise FwbenchError(f"{what} differ before and after the update: only a reload "
                           f"can change them")


def _chains_of(old: dict, new: dict, user) -> tuple[list, list]:
    """(table, chain) keys only `new` has and only `old` has, in their orders; each
    must be a user chain (`user(frame)`), else changing it is a reload."""
    added = [k for k in new if k not in old]
    gone = [k for k in old if k not in new]
    for k, frames in [(k, new[k]) for k in added] + [(k, old[k]) for k in gone]:
        if not user(frames):
            raise FwbenchError(f"base chain {k[1]} {'added' if k in new else 'removed'} "
                               f"by the update: only a reload can")
    common = {k for k in old if k in new}
    _same_frame("chain declarations", {k: old[k] for k in common},
                {k: new[k] for k in common})
    return added, gone


def _unchanged_chains(what: str, d: "Delta") -> None:
    if d.chains or d.sets:
        first = d.chains[0].chain if d.chains else d.sets[0].name
        raise FwbenchError(f"{what}: chains or sets added or removed (first {first}): "
                           f"take the whole delta")


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


def _ipt_chain_frames(frames: dict[str, list[str]]) -> dict[tuple[str, str], list[str]]:
    """(table, chain) -> [its chain line], in the rendering's order."""
    return {(t, ln[1:].split()[0]): [ln] for t, lines in frames.items() for ln in lines}


def iptables_delta(old: str, new: str) -> Delta:
    """Everything that changes between two iptables-restore renderings."""
    old_frames, old_rules = _ipt_parts(old)
    new_frames, new_rules = _ipt_parts(new)
    _same_frame("iptables tables", set(old_frames), set(new_frames))
    of, nf = _ipt_chain_frames(old_frames), _ipt_chain_frames(new_frames)
    # A user chain's line has no policy: ":NAME -".
    added, gone = _chains_of(of, nf, lambda f: f[0].split()[1] == "-")
    out: list[RuleChange] = []
    for table, chain in sorted(k for k in of if k in nf):
        a, b = old_rules.get((table, chain), []), new_rules.get((table, chain), [])
        if a != b:   # most chains of a large rule set are as they were
            out += sequence_changes(table, chain, a, b)
    chains = [ChainChange("add", t, c, tuple(new_rules.get((t, c), []))) for t, c in added]
    chains += [ChainChange("delete", t, c, tuple(old_rules.get((t, c), []))) for t, c in gone]
    return Delta(out, chains, [], old_rules, new_rules, nf)


def iptables_changes(old: str, new: str) -> list[RuleChange]:
    """The rule changes between two iptables-restore renderings with the same
    chains (iptables_delta takes chains added and removed too)."""
    d = iptables_delta(old, new)
    _unchanged_chains("iptables", d)
    return d.rules


def iptables_line(c: RuleChange) -> str:
    """The change as iptables(-restore) takes it, without the table."""
    if c.op == "append":
        return f"-A {c.chain} {c.rule}"
    if c.op == "insert":
        return f"-I {c.chain} {c.position} {c.rule}"
    if c.op == "replace":
        return f"-R {c.chain} {c.position} {c.rule}"
    return f"-D {c.chain} {c.rule}"


def iptables_lines(d: Delta) -> list[tuple[str, str]]:
    """The smallest change as (table, iptables command without the table), in the
    order they run: chains added (-N) and their rules, the rule changes, then the
    chains removed emptied (-F) and deleted (-X): a chain is deleted once no rule
    names it, and a rule names a chain only once it exists."""
    out = [(c.table, f"-N {c.chain}") for c in d.chains if c.op == "add"]
    out += [(c.table, f"-A {c.chain} {r}") for c in d.chains if c.op == "add"
            for r in c.rules]
    out += [(c.table, iptables_line(c)) for c in d.rules]
    gone = [c for c in d.chains if c.op == "delete"]
    out += [(c.table, f"-F {c.chain}") for c in gone if c.rules]
    out += [(c.table, f"-X {c.chain}") for c in gone]
    return out


def _by_table(lines: list[tuple[str, str]]) -> str:
    out: list[str] = []
    for table in dict.fromkeys(t for t, _ in lines):
        out.append(f"*{table}")
        out += [ln for t, ln in lines if t == table]
        out.append("COMMIT")
    return "\n".join(out) + "\n"


def iptables_restore_text(changes: list[RuleChange] | Delta) -> str:
    """The changes as one `iptables-restore --noflush` input: one commit per table.
    A chain added is declared by its chain line, as iptables-save writes it."""
    if not isinstance(changes, Delta):
        return _by_table([(c.table, iptables_line(c)) for c in changes])
    return _by_table([(t, f":{ln[3:]} - [0:0]" if ln.startswith("-N ") else ln)
                      for t, ln in iptables_lines(changes)])


def iptables_sync_text(d: Delta, rewrite: frozenset[str] = frozenset()) -> str:
    """The change as kube-proxy's partial sync writes it, one `iptables-restore
    --noflush` input: per table, the chain line of every chain it writes (the
    changed ones, those added, those in `rewrite`, which it writes at every sync,
    and those gone: a chain line empties an existing user chain), then every rule
    of the chains it writes, then `-X` for each chain gone; COMMIT. A base
    chain's line keeps its policy and does not empty it: `-F` does."""
    changed = set(d.changed()) | {(c.table, c.chain) for c in d.chains if c.op == "add"}
    out: list[tuple[str, str]] = []
    for table in dict.fromkeys(t for t, _ in d.frames):
        write = [k for k in d.frames if k[0] == table
                 and (k in changed or k[1] in rewrite)]
        gone = [c.chain for c in d.chains if c.op == "delete" and c.table == table]
        if not write and not gone:
            continue
        body = [f"{d.frames[k][0]} [0:0]" for k in write]
        body += [f":{c} - [0:0]" for c in gone]
        for k in write:
            if d.frames[k][0].split()[1] != "-":
                body.append(f"-F {k[1]}")
            body += [f"-A {k[1]} {r}" for r in d.new.get(k, [])]
        body += [f"-X {c}" for c in gone]
        out += [(table, ln) for ln in body]
    return _by_table(out)


def iptables_argv(tool: str, c: RuleChange) -> list[str]:
    """One change as one iptables command."""
    return [tool, "-t", c.table, *shlex.split(iptables_line(c))]


def iptables_commands(tool: str, d: Delta) -> list[list[str]]:
    """The smallest change as one iptables command each (iptables_lines)."""
    return [[tool, "-t", t, *shlex.split(ln)] for t, ln in iptables_lines(d)]


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
    """A rendered nft ruleset taken apart: each chain's, set's and map's
    declaration lines, each chain's rules in order, each set's and map's
    elements."""
    frames: dict                                 # "ip fwbench chain C" -> its lines
    rules: dict[tuple[str, str], list[str]]      # ("ip fwbench", chain) -> rules
    elements: dict[str, list[str]]               # "ip fwbench allowed" -> elements


def nft_parts(text: str) -> NftParts:
    """The renderer's layout: `table F T {`, `chain C {`, `set S {` or `map M {`
    one level in, their contents one level further, `elements = {` one element a
    line."""
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
            if block[0] != "chain":
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


def _nft_chain_frames(p: NftParts) -> dict[tuple[str, str], list[str]]:
    """(table, chain) -> its declaration lines, in the rendering's order."""
    out = {}
    for key, lines in p.frames.items():
        family, name, kind, obj = key.split(" ", 3)
        if kind == "chain":
            out[(f"{family} {name}", obj)] = lines
    return out


def nft_delta(old: str, new: str) -> Delta:
    """Everything that changes between two nft renderings."""
    o, n = nft_parts(old), nft_parts(new)
    of, nf = _nft_chain_frames(o), _nft_chain_frames(n)
    os_, ns = ({k: v for k, v in p.frames.items() if k.split(" ")[2] != "chain"}
               for p in (o, n))
    common = os_.keys() & ns.keys()
    _same_frame("nft set and map declarations", {k: os_[k] for k in common},
                {k: ns[k] for k in common})
    sets = [_set_change("add", k, ns[k]) for k in ns if k not in os_]
    sets += [_set_change("delete", k, os_[k]) for k in os_ if k not in ns]
    gone_sets = {f"{c.table} {c.name}" for c in sets if c.op == "delete"}
    # A user chain has no declaration lines.
    added, gone = _chains_of(of, nf, lambda f: not f)
    rules: list[RuleChange] = []
    for table, chain in sorted(k for k in of if k in nf):
        a, b = o.rules.get((table, chain), []), n.rules.get((table, chain), [])
        if a != b:
            rules += sequence_changes(table, chain, a, b)
    chains = [ChainChange("add", t, c, tuple(n.rules.get((t, c), []))) for t, c in added]
    chains += [ChainChange("delete", t, c, tuple(o.rules.get((t, c), []))) for t, c in gone]
    # A set removed goes with its elements: none is deleted one by one.
    elements = [e for e in element_changes(o.elements, n.elements)
                if not (e.op == "delete" and e.set in gone_sets)]
    return Delta(rules, chains, elements, o.rules, n.rules, nf, sets)


def _set_change(op: str, key: str, lines: list[str]) -> SetChange:
    family, table, kind, name = key.split(" ", 3)
    return SetChange(op, f"{family} {table}", kind, name, tuple(lines))


def _set_command(c: SetChange) -> str:
    if c.op == "delete":
        return f"delete {c.kind} {c.table} {c.name}"
    return f"add {c.kind} {c.table} {c.name} {{ {' ; '.join(c.declaration)} ; }}"


def nft_changes(old: str, new: str) -> tuple[list[RuleChange], list[ElementChange]]:
    """The rule and element changes between two nft renderings with the same
    chains (nft_delta takes chains added and removed too)."""
    d = nft_delta(old, new)
    _unchanged_chains("nft", d)
    return d.rules, d.elements


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


def _element_key(c: ElementChange) -> str:
    """What names an element in a delete: a map element's key without its
    verdict."""
    return c.element.partition(" : ")[0] if c.op == "delete" else c.element


def nft_element_command(changes: list[ElementChange]) -> str:
    """Element changes of one set and one kind as one nft command."""
    first = changes[0]
    verb = "add" if first.op == "add" else "delete"
    return f"{verb} element {first.set} {{ {', '.join(_element_key(c) for c in changes)} }}"


def _element_commands(elements: list[ElementChange], order=("delete", "add"),
                      each: bool = False) -> list[str]:
    out = []
    for s in dict.fromkeys(c.set for c in elements):
        for op in order:
            group = [c for c in elements if c.set == s and c.op == op]
            if group:
                out += [nft_element_command([c]) for c in group] if each else \
                    [nft_element_command(group)]
    return out


def nft_commands(d: Delta, handles: dict[str, int], each: bool = False) -> list[str]:
    """The smallest change as nft commands in the order they run: chains added,
    sets added, the added chains' rules, the rule changes, the elements deleted
    then added, the chains removed emptied, the sets removed, then those chains
    deleted (a chain or set is deleted once nothing names it, and named only once
    it exists: a map's elements name chains, a rule its set). `each`: one command
    per element, not per set."""
    added = [c for c in d.chains if c.op == "add"]
    gone = [c for c in d.chains if c.op == "delete"]
    out = [f"add chain {c.table} {c.chain}" for c in added]
    out += [_set_command(c) for c in d.sets if c.op == "add"]
    out += [f"add rule {c.table} {c.chain} {r}" for c in added for r in c.rules]
    out += [nft_rule_command(c, handles) for c in d.rules]
    out += _element_commands(d.elements, each=each)
    out += [f"flush chain {c.table} {c.chain}" for c in gone if c.rules]
    out += [_set_command(c) for c in d.sets if c.op == "delete"]
    out += [f"delete chain {c.table} {c.chain}" for c in gone]
    return out


def nft_transaction(rules: list[RuleChange] | Delta, elements: list[ElementChange] = (),
                    handles: dict[str, int] | None = None) -> str:
    """Every change as one `nft -f` input: one transaction, all or nothing. Given
    a Delta, its chains added and removed too (nft_commands)."""
    if isinstance(rules, Delta):
        return "\n".join(nft_commands(rules, handles or {})) + "\n"
    out = [nft_rule_command(c, handles or {}) for c in rules]
    out += _element_commands(list(elements))
    return "\n".join(out) + "\n"


def nft_sync_text(d: Delta, rewrite: frozenset[str] = frozenset()) -> str:
    """The change as kube-proxy's nftables partial sync writes it, one `nft -f`
    transaction: every chain it writes (the changed ones, those added, those in
    `rewrite`) made sure of and emptied (`add chain`, `flush chain`), the sets
    added, then all the chains' rules; the elements added; the chains gone
    emptied; the elements gone deleted; the sets gone; then the chains gone
    deleted. kube-proxy deletes those in a later
    transaction, a second on, because before Linux 6.2 a chain a deleted map
    element named was still held for a moment; here they go in the same one."""
    write = set(d.changed()) | {(c.table, c.chain) for c in d.chains if c.op == "add"}
    gone = [c for c in d.chains if c.op == "delete"]
    chains = [k for k in d.frames if k in write or k[1] in rewrite]
    # Every chain and set made sure of first: a rule may name one written after it.
    out = [f"{verb} chain {k[0]} {k[1]}" for k in chains for verb in ("add", "flush")]
    out += [_set_command(c) for c in d.sets if c.op == "add"]
    out += [f"add rule {k[0]} {k[1]} {r}" for k in chains for r in d.new.get(k, [])]
    out += _element_commands([e for e in d.elements if e.op == "add"])
    out += [f"flush chain {c.table} {c.chain}" for c in gone]
    out += _element_commands([e for e in d.elements if e.op == "delete"])
    out += [_set_command(c) for c in d.sets if c.op == "delete"]
    out += [f"delete chain {c.table} {c.chain}" for c in gone]
    return "\n".join(out) + "\n"
