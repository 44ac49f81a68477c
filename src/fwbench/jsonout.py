"""Machine-readable output, one way for every command: `--json` prints one JSON
document on stdout and nothing else there (as `nft -j` and `iperf3 -J` do), so
`fwbench backends --json | jq ...` works; whatever a person reads (progress,
tables, notes) goes to stderr meanwhile. `--json FILE` writes the same document to
FILE instead, and stdout keeps its human text. FILE is new, or an earlier document
of the same command (the same keys, or a list of objects with the same keys): any
other file, a rule set above all, is refused and left as it is.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, is_dataclass
from pathlib import Path

from fwbench.errors import FwbenchError

STDOUT = "-"          # `--json` with no FILE, or `--json -`


def _plain(obj):
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if isinstance(obj, (Path, set, frozenset)):
        return sorted(obj) if isinstance(obj, (set, frozenset)) else str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def dumps(obj) -> str:
    """The document as every command writes it: indented, keys as given, one
    trailing newline; paths as strings, sets sorted, dataclasses as objects."""
    return json.dumps(obj, indent=2, default=_plain, ensure_ascii=False) + "\n"


def emit(obj, dest: str | os.PathLike | None = STDOUT) -> None:
    """`obj` as JSON on stdout (dest None or "-") or into the file `dest`, replaced
    whole (written aside, then renamed)."""
    text = dumps(obj)
    if dest is None or str(dest) == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(dest)
    if os.path.lexists(path) and not _same_kind(path, obj):
        raise FwbenchError(f"--json {path}: the file exists and is not an earlier output "
                           f"of this command; fwbench replaces no other file (choose a "
                           f"new name)")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as e:
        raise FwbenchError(f"cannot write {path}: {e.strerror}") from None


def _shape(doc) -> tuple:
    """What makes a document one command's: its keys, or its items' keys."""
    if isinstance(doc, dict):
        return ("object", tuple(sorted(doc)))
    if isinstance(doc, list) and doc and all(isinstance(x, dict) for x in doc):
        return ("list", tuple(sorted(doc[0])))
    return (type(doc).__name__,)


def _same_kind(path: Path, obj) -> bool:
    """Whether the file at `path` holds a document of `obj`'s shape (a regular
    file: a symlink or anything else is never replaced)."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return _shape(old) == _shape(json.loads(dumps(obj)))


def to_stdout(dest: str | None) -> bool:
    """Whether a `--json [FILE]` option's value sends the document to stdout."""
    return dest == STDOUT
