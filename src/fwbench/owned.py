"""What fwbench owns on a filesystem, on this machine or a real host, and how it
removes that and nothing else.

Every directory fwbench makes carries a marker file, `.fwbench-owned`, written
the moment the directory is made: a JSON object saying what made it (fwbench,
its version), when, for what (a run's private directory of one host, the local
lab, ...) and which of the files in it fwbench writes (names or shell-style
patterns). Removing (`remove`) deletes only directories with the marker, and in
them only regular files whose names the marker lists, bottom up; a directory
left with anything else in it stays, marker and all, and is reported. A
directory fwbench took rather than made (an empty one the user named) gets a
marker too, which says so: removing it empties it of fwbench's files and leaves
the directory.

Standard library only: on a real host this file is the program itself, sent to
its python3 on standard input (`python3 - COMMAND JSON`, see `main`), so the
same code decides what goes on every machine.
"""
from __future__ import annotations

import datetime
import fnmatch
import json
import os
import stat
import sys

MARKER = ".fwbench-owned"
# In a directory a live process uses: "PID START" (START: field 22 of its
# /proc/PID/stat, so a reused PID is never taken for it). `listing` reports it live.
LEASE = "lease"


class NotOurs(Exception):
    """A directory fwbench did not make (or cannot prove it made): left alone."""


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_marker(path: str, marker: dict) -> None:
    tmp = os.path.join(path, MARKER + ".tmp")
    with open(tmp, "w") as f:
        json.dump(marker, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(path, MARKER))


def marker(path: str) -> dict | None:
    """The marker of directory `path`, or None when it has none (or one that is
    not fwbench's)."""
    try:
        with open(os.path.join(path, MARKER)) as f:
            m = json.load(f)
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and m.get("made_by") == "fwbench" else None


def make(path: str, what: str, files: list[str] = (), about: dict | None = None,
         mode: int = 0o700) -> list[str]:
    """Make directory `path`, which must not exist, with its marker; missing
    parents are made too, each with a marker of its own (`what`: the working
    directory above). Returns the directories made, outermost first. Raises
    FileExistsError when `path` exists: fwbench never reuses a directory it did
    not just make."""
    path = os.path.abspath(path)
    missing, p = [], os.path.dirname(path)
    while not os.path.isdir(p):
        missing.append(p)
        p = os.path.dirname(p)
    made = []
    for parent in reversed(missing):
        try:
            os.mkdir(parent, mode)
        except FileExistsError:    # made meanwhile (the lab's hosts share a disk)
            continue
        _write_marker(parent, {"made_by": "fwbench", "what": f"working directory above "
                               f"{path}", "created": _now(), "made_dir": True,
                               "files": [], "about": about or {}})
        made.append(parent)
    os.mkdir(path, mode)
    _write_marker(path, {"made_by": "fwbench", "what": what, "created": _now(),
                         "made_dir": True, "files": list(files), "about": about or {}})
    return made + [path]


def take(path: str, what: str, files: list[str] = (), about: dict | None = None,
         mode: int = 0o700) -> bool:
    """Make directory `path`, or take it if it exists and is empty; anything else
    (a file, a directory holding anything) raises NotOurs and nothing changes.
    Returns whether it was made."""
    path = os.path.abspath(path)
    if os.path.lexists(path):
        if not os.path.isdir(path) or os.path.islink(path):
            raise NotOurs(f"{path} exists and is not a directory")
        held = sorted(os.listdir(path))
        if held:
            shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3
                                            else "")
            raise NotOurs(f"{path} is not empty (it holds {shown})")
        _write_marker(path, {"made_by": "fwbench", "what": what, "created": _now(),
                             "made_dir": False, "files": list(files),
                             "about": about or {}})
        return False
    make(path, what, files, about, mode)
    return True


def ready(path: str, what: str, files: list[str] = (), about: dict | None = None,
          mode: int = 0o755) -> None:
    """A directory for fwbench's outputs: made (with its marker), taken when it is
    empty, or kept when it is fwbench's already (it has the marker). Anything else
    raises NotOurs, and nothing changes: fwbench never writes its files among a
    user's, where a name it uses would replace theirs."""
    path = os.path.abspath(path)
    if os.path.isdir(path) and not os.path.islink(path) and marker(path) is not None:
        return
    take(path, what, files, about, mode)


def own(path: str, *files: str) -> None:
    """Add names (or patterns) to the files fwbench wrote in its directory `path`."""
    m = marker(path)
    if m is None:
        raise NotOurs(f"{path} has no fwbench marker")
    m["files"] = list(dict.fromkeys([*m.get("files", []), *files]))
    _write_marker(path, m)


def _ours(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def remove(path: str) -> list[str]:
    """Remove fwbench's directory `path`: in it and in every marked directory
    below it, the files the marker names, then the marker, then the directory
    (unless fwbench took it rather than made it). What it leaves (anything else,
    or all of `path` when it has no marker) is returned; its marker stays with
    it, so a later clean can try again. A directory already gone leaves nothing."""
    path = os.path.abspath(path)
    if not os.path.lexists(path):
        return []
    if os.path.islink(path) or not os.path.isdir(path):
        return [path]
    m = marker(path)
    if m is None:
        return [path]
    left = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.name == MARKER:
            continue
        st = os.lstat(entry.path)
        if stat.S_ISDIR(st.st_mode):
            left += remove(entry.path)
        elif stat.S_ISREG(st.st_mode) and _ours(entry.name, m.get("files", [])):
            os.unlink(entry.path)
        else:
            left.append(entry.path)
    if left:
        return left
    try:
        os.unlink(os.path.join(path, MARKER))
        if m.get("made_dir", True):
            os.rmdir(path)
    except FileNotFoundError:   # removed meanwhile, by another host of the lab
        pass
    except OSError:             # something arrived meanwhile
        return [path]
    return []


def prune(path: str) -> None:
    """Remove the directories above `path` that fwbench made and that hold
    nothing but their marker, innermost first (the working directory, once its
    last private directory is gone, and any parent made for it)."""
    p = os.path.dirname(os.path.abspath(path))
    while p != os.path.dirname(p):
        m = marker(p)
        try:
            if m is None or not m.get("made_dir") or set(os.listdir(p)) != {MARKER}:
                return
        except FileNotFoundError:
            return
        if remove(p):
            return
        p = os.path.dirname(p)


def listing(top: str, **match) -> list[dict]:
    """The marked directories directly in `top` whose marker's `about` holds
    every key=value of `match`, each as {"path", "marker", "holds"} (the names
    in it), oldest first."""
    out = []
    try:
        entries = sorted(os.scandir(top), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        m = marker(entry.path)
        if m is None or any(m.get("about", {}).get(k) != v for k, v in match.items()):
            continue
        out.append({"path": entry.path, "marker": m, "holds": sorted(os.listdir(entry.path)),
                    "live": held(entry.path)})
    return sorted(out, key=lambda d: (d["marker"].get("created", ""), d["path"]))


def _start_time(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def held(path: str) -> int | None:
    """The PID of the live process holding directory `path` by its lease, or None."""
    try:
        with open(os.path.join(path, LEASE)) as f:
            pid, start = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(pid) if _start_time(pid) == start else None


def hold(path: str) -> None:
    """Hold directory `path` while this process lives: write its lease, then wait
    for the end of standard input (a run's SSH session closing, by its end or its
    controller's death) and go."""
    pid = str(os.getpid())
    tmp = os.path.join(path, LEASE + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"{pid} {_start_time(pid)}\n")
    os.replace(tmp, os.path.join(path, LEASE))
    sys.stdin.read()


def main(argv: list[str] | None = None) -> int:
    """`python3 - COMMAND JSON` on a host, this file on standard input: COMMAND is
    make, own, remove, list or hold; JSON its arguments (see the branches). (A
    lease, `hold`, cannot read its stdin for the end of a session, as it is the
    program: it runs as `python3 -c SOURCE hold JSON`.) Prints the result as JSON; a
    refusal is one line on standard error and exit 3."""
    argv = sys.argv[1:] if argv is None else argv
    cmd, args = argv[0], json.loads(argv[1])
    try:
        if cmd == "make":    # {"dirs": [{"path", "what", "files"}, ...], "about"}
            out = [d for spec in args["dirs"] for d in
                   make(spec["path"], spec["what"], spec.get("files", []), args.get("about"))]
        elif cmd == "own":
            own(args["path"], *args["files"])
            out = None
        elif cmd == "remove":
            out = remove(args["path"])
            if not out and args.get("prune"):
                prune(args["path"])
        elif cmd == "list":
            out = listing(args["top"], **args.get("match", {}))
        elif cmd == "hold":
            hold(args["path"])
            out = None
        else:
            raise NotOurs(f"unknown command {cmd}")
    except FileExistsError as e:
        print(f"{e.filename} exists already; fwbench makes its directories afresh",
              file=sys.stderr)
        return 3
    except (NotOurs, OSError) as e:
        print(str(e) if isinstance(e, NotOurs) else f"{e.filename}: {e.strerror}",
              file=sys.stderr)
        return 3
    print(json.dumps(out))
    return 0


def source() -> str:
    """This module as a program for a host's python3 (`python3 -` with it on
    stdin, or `python3 -c` with it as the argument)."""
    with open(__file__) as f:
        return f.read() + "\nsys.exit(main())\n"
