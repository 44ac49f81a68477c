"""Loading a user's rule set file: the one entry point for importers.

load_file() tells the format from the content (iptables-save output, nft JSON, or
nft text), parses it, moves it onto the testbed (remap: interfaces to roles,
addresses into the benchmarking ranges) and validates the result. Every problem
is one line naming the file, a RuleSetError.
"""
from __future__ import annotations

import gc
import re
from dataclasses import replace

from fwbench.ruleset.importers import iptables_save, nft_json
from fwbench.ruleset.importers.remap import Remapper, parse_iface_map, remap
from fwbench.ruleset.model import RuleSet, RuleSetError, validate

__all__ = ["load_file", "parse_iface_map", "detect"]

# An IPv6 address after -s/-d or in a NAT target: the file is ip6tables-save's.
_V6_HINT = re.compile(r"(?:^|\s)(?:-[sd]|--to-(?:destination|source))\s+(?:!\s*)?\[?"
                      r"[0-9A-Fa-f]*:[0-9A-Fa-f:.]*[:.][0-9A-Fa-f]", re.M)
# What only ip6tables reads: ICMPv6, the IPv6 header matches, ICMPv6 rejects.
_V6_ONLY = re.compile(r"(?<!\S)(?:(?:-p|--protocol)\s+(?:ipv6-icmp|icmpv6|icmp6|58)(?!\S)|"
                      r"-m\s+(?:icmp6|rt|frag|hl|ipv6header|mh|dst|hbh|eui64)(?!\S)|"
                      r"--icmpv6-type|--hl-(?:eq|gt|lt)|--reject-with\s+icmp6-)")
# A rule for one IP version only (`-4`, `-6`): a dual-stack restore file, read by
# both iptables-restore and ip6tables-restore, each ignoring the other's rules.
_DUAL_HINT = re.compile(r"^\s*(?:\[\d+:\d+\]\s*)?-.*(?<!\S)(?:-4|-6|--ipv4|--ipv6)(?!\S)",
                        re.M)
_NFT_HINT = re.compile(r"^\s*(?:table|flush\s+ruleset|define|include|"
                       r"(?:add|create|insert)\s+(?:table|chain|rule|set|map|element))\s",
                       re.M)
_IPSET_HINT = re.compile(r"^\s*create\s+\S+\s+(?:hash|bitmap|list):", re.M)


def load_file(path: str, iface_map: dict[str, str] | None = None,
              ipsets: str | None = None,
              refused: list[tuple[str, str]] | None = None) -> RuleSet:
    """The rule set in `path`, remapped onto the testbed and validated.
    `iface_map` names the file's interfaces by role ({"eth0": "client"});
    `ipsets` is the path of an `ipset save` file that `-m set` rules need.
    With `refused` (coverage), rules the model cannot hold are left out and
    listed there as (where, why) instead of refusing the file."""
    text = _read(path)
    kind = detect(text)
    if kind[0] == "ipset":
        raise RuleSetError(f"{path}: ipset definitions, not a rule set (they go with an "
                           f"iptables-save file as its ipsets)")
    if ipsets is not None and kind[0] != "iptables":
        raise RuleSetError(f"{ipsets}: ipset definitions go with iptables-save files, "
                           f"{path} is {kind[0]}")
    iface_map = iface_map or {}
    # Nothing here makes reference cycles; the collector would walk the growing
    # heap again and again (a third of the time at 100,000 rules).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if kind[0] == "iptables" and kind[1] == 0:
            rs = _dual(text, path, iface_map)
        elif kind[0] == "iptables":
            rs = _iptables(text, path, kind[1],
                           _read(ipsets) if ipsets is not None else None, ipsets, iface_map,
                           refused)
        elif kind[0] == "nft JSON":
            rs = remap(nft_json.parse(text, path, refused), iface_map)
        elif kind[0] == "nft text":
            rs = remap(nft_json.parse_text(text, path, refused), iface_map)
        else:
            raise RuleSetError(f"{path}: not a rule set (expected iptables-save output, "
                               f"`nft -j list ruleset` JSON or nft text)")
        try:
            validate(rs)
        except RuleSetError as e:
            raise RuleSetError(f"{path}: {e}") from None
        # The rule set lives as long as the command and holds no reference cycles
        # (some 8 tracked objects per rule): out of the collector's sight, later
        # collections do not walk it again (0.3 s each at 100,000 rules).
        gc.freeze()
        return rs
    finally:
        if was_enabled:
            gc.enable()


def _iptables(text: str, path: str, version: int, ipsets_text: str | None,
              ipsets: str | None, iface_map: dict[str, str],
              refused: list[tuple[str, str]] | None = None) -> RuleSet:
    """An iptables-save file, remapped as it is parsed: the plan is made from the
    networks read by pattern first, and the parser builds each rule where it
    goes. Where that guess was not exactly the networks the rules name (a quoted
    comment that reads as an address, say), the file is parsed again and
    remapped afterwards, as the other formats are: the result is the same."""
    def parse(mover=None) -> RuleSet:
        if refused is not None:
            refused.clear()   # a second reading lists them again
        return iptables_save.parse(text, path, version, ipsets_text, ipsets or "ipsets",
                                   mover, refused)
    try:
        mover = Remapper(iface_map, iptables_save.networks(text, version, ipsets_text))
    except RuleSetError:
        mover = None   # something read as an address is none: parse() says what
    if mover is not None:
        rs = parse(mover)
        if mover.complete:
            return mover.finish(rs)
    return remap(parse(), iface_map)


def _dual(text: str, path: str, iface_map: dict[str, str]) -> RuleSet:
    """A dual-stack restore file as one rule set: its tables as iptables-restore
    reads them (family ip) and as ip6tables-restore does (family ip6). The IPv6
    rules' ids carry `ip6-`, as both reads number the rules alike."""
    v4 = _iptables(text, path, 4, None, None, iface_map)
    v6 = _iptables(text, path, 6, None, None, iface_map)
    renamed = {r.id: "ip6-" + r.id for _, _, r in v6.rules()}
    tables = tuple(replace(t, chains=tuple(
        replace(c, rules=tuple(replace(r, id=renamed[r.id]) for r in c.rules))
        for c in t.chains)) for t in v6.tables)
    return replace(v4, tables=v4.tables + tables, size=v4.size + v6.size,
                   address_map=v4.address_map + v6.address_map,
                   iface_map=tuple(dict(v4.iface_map + v6.iface_map).items()),
                   notes=v4.notes + tuple(f"IPv6: {n}" for n in v6.notes),
                   origins=v4.origins + tuple((renamed.get(rid, rid), where)
                                              for rid, where in v6.origins))


def detect(text: str) -> tuple[str, int]:
    """(format, IP version): "iptables" with 4, 6 or 0 (a dual-stack file whose
    rules carry -4 or -6: both), "nft JSON", "nft text", "ipset" or "unknown"
    (version 0 where it does not apply)."""
    head = text.lstrip()
    for line in head.splitlines():
        line = line.strip()
        if line.startswith("# Generated by ip6tables"):
            return "iptables", 6
        if line.startswith("# Generated by iptables"):
            return "iptables", 4
        if line and not line.startswith("#"):
            if line.startswith("*"):
                if _DUAL_HINT.search(text):
                    return "iptables", 0
                return "iptables", 6 if _V6_HINT.search(text) or _V6_ONLY.search(text) \
                    else 4
            break
    if head.startswith("{"):
        return "nft JSON", 0   # nft_json.parse says so in one line if it is not
    if _IPSET_HINT.search(text):
        return "ipset", 0
    if _NFT_HINT.search(text):
        return "nft text", 0
    return "unknown", 0


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise RuleSetError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise RuleSetError(f"{path}: is a directory") from None
    except PermissionError:
        raise RuleSetError(f"{path}: permission denied") from None
    except UnicodeDecodeError:
        raise RuleSetError(f"{path}: not a rule set (not UTF-8 text)") from None
    except OSError as e:
        raise RuleSetError(f"{path}: cannot read: {e.strerror or e}") from None
