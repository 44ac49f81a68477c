"""What of a rule-set file the import holds, rule by rule (`check FILE --coverage`).

An import is exact or refused: a file with one rule the model cannot hold is
refused whole, at that rule. Coverage reads the file on past every such rule and
lists every rule as

- `imported`: held exactly;
- `dropped`: held, but for parts that decide no verdict (a LOG option, an NFLOG
  target, a comment), or set aside whole where no packet of the testbed reaches
  it; the importer's note says which;
- `refused`: the model cannot hold it; the importer's one line says why.

A rule is where the file has it: `FILE:LINE` for iptables-save, `table, chain and
place` for nft. The importers' notes that name a place attach to that rule; the
others are the file's own notes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from fwbench.ruleset.importers import load
from fwbench.ruleset.model import RuleSetError

IMPORTED, DROPPED, REFUSED = "imported", "dropped", "refused"


@dataclass(frozen=True)
class Entry:
    where: str
    status: str              # IMPORTED, DROPPED or REFUSED
    why: str = ""            # refused: the refusal; dropped: the notes

    def as_dict(self) -> dict:
        return {"where": self.where, "status": self.status, "why": self.why}


@dataclass
class Coverage:
    path: str
    entries: list[Entry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # A problem no rule is to blame for (a syntax error, a table the model cannot
    # hold): the file was not read past it.
    error: str | None = None

    def totals(self) -> dict[str, int]:
        out = {IMPORTED: 0, DROPPED: 0, REFUSED: 0}
        for e in self.entries:
            out[e.status] += 1
        return out

    @property
    def whole(self) -> bool:
        """Does the file import whole (every rule imported or dropped)?"""
        return self.error is None and not self.totals()[REFUSED]

    def as_dict(self) -> dict:
        return {"file": self.path, "whole": self.whole, "totals": self.totals(),
                "rules": [e.as_dict() for e in self.entries], "notes": self.notes,
                "error": self.error}


def coverage(path: str, iface_map: dict[str, str] | None = None,
             ipsets: str | None = None) -> Coverage:
    refused: list[tuple[str, str]] = []
    out = Coverage(path)
    try:
        rs = load.load_file(path, iface_map, ipsets, refused=refused)
    except RuleSetError as e:
        rs, out.error = None, str(e)
    notes = list(rs.notes) if rs is not None else []
    entries: dict[str, Entry] = {}
    for _, where in (rs.origins if rs is not None else ()):
        if where not in entries:
            entries[where] = Entry(where, IMPORTED)
    for where, why in refused:
        entries[where] = Entry(where, REFUSED, why)
    for note in notes:
        where = _place(note, entries)
        if where is None:
            out.notes.append(note)
            continue
        e = entries.get(where)
        text = note[len(where):].lstrip(": ")
        if e is None or e.status == IMPORTED:
            entries[where] = Entry(where, DROPPED, text)
        elif e.status == DROPPED:
            entries[where] = Entry(where, DROPPED, f"{e.why}; {text}")
    chains: dict[str, int] = {}   # nft: chains in the order the file has them
    out.entries = sorted(entries.values(), key=lambda e: _order(e.where, chains))
    return out


_LINE = re.compile(r"^(.*?):(\d+)(?=:|$)")
_NFT_PLACE = re.compile(r"^(.*?): (table \S+ \S+ chain \S+ rule (\d+) \(handle [^)]*\))")


def _place(note: str, entries: dict[str, Entry]) -> str | None:
    """The rule a note names, as entries name it: `FILE:LINE` or the nft place."""
    m = _NFT_PLACE.match(note)
    if m:
        return f"{m.group(1)}: {m.group(2)}"
    m = _LINE.match(note)
    return m.group(0) if m else None


def _order(where: str, chains: dict[str, int]) -> tuple:
    m = _NFT_PLACE.match(where)
    if m:
        head = m.group(2).rsplit(" rule ", 1)[0]
        return (0, chains.setdefault(head, len(chains)), int(m.group(3)))
    m = _LINE.match(where)
    if m and m.group(0) == where:
        return (0, 0, int(m.group(2)))
    return (1, 0, 0)
