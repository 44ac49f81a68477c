"""A user's rule-set file as it is, moved onto the testbed by a lexical rewrite.

`check` proves every backend gives the reference evaluator's verdicts; the
reference is built from the imported model. An import that changed what a rule
means would leave the model, the reference and every backend agreeing with each
other and not with the user's file. So `check` also loads the file itself into
the firewall with its own tool (iptables-restore, ip6tables-restore, nft -f,
ipset restore) and sends it the same corpus.

The file cannot go in unchanged: its interface names are not the testbed's, and
its addresses are moved into the benchmarking ranges (remap). The rewrite here
changes exactly those two things, by the plan the import used (the rule set's
address_map and iface_map), and leaves every other byte as it is:

- every address or network text is moved as remap moved it: one the plan names
  to its pair, one inside a moved network by its offset there (an iprange end, a
  NAT target); addresses the plan kept stay. A network keeps its form: `a/len`,
  `a/dotted-mask` (then written `a'/len'`), a plain address.
- every interface name the map gives a role becomes the testbed's interface for
  that role, where a rule names an interface (iptables -i/-o; nft iifname,
  oifname, iif, oif, device, devices, and a `define` whose value is such a
  name); other names stay literal.

Pure: no root, no kernel. The loading is backends/original.py.
"""
from __future__ import annotations

import copy
import json
import re
import socket
from bisect import bisect_right
from dataclasses import dataclass

from fwbench.ruleset.importers import load as loader
from fwbench.ruleset.model import Interfaces, RuleSet, RuleSetError

_WIDTH = {4: 32, 6: 128}
_AF = {4: socket.AF_INET, 6: socket.AF_INET6}

# An IPv4 address with an optional /len or /dotted-mask, not inside a longer word
# (a version string, a MAC, a hex number).
_V4 = re.compile(r"(?<![\w.:])(\d{1,3}(?:\.\d{1,3}){3})(?:/(\d{1,3}(?:\.\d{1,3}){3}|\d{1,2}))?"
                 r"(?![\w.])")
# A run of hex digits and colons holding at least two colons (an IPv6 address,
# possibly with an embedded IPv4 tail), validated by inet_pton: a port range
# `1000:2000`, a MAC or a time `12:00:00` is no address and stays.
_V6 = re.compile(r"(?<![\w:.])([0-9A-Fa-f]{0,4}:[0-9A-Fa-f:]*:[0-9A-Fa-f:]*"
                 r"(?:\d{1,3}(?:\.\d{1,3}){3})?)(?:/(\d{1,3}))?(?![\w:])")
# iptables: the value of an interface option (after an optional `!`).
_IPT_IFACE = re.compile(r"((?:^|\s)(?:-i|-o|--in-interface|--out-interface|--physdev-in|"
                        r"--physdev-out)\s+(?:!\s+)?)(\S+)")
# nft text: an interface expression's value, one name or a braced set of them.
# A variable's value counts too (`define WAN = "eth0"` ... `iifname $WAN`): only a
# name the map gives a role changes, so a define of anything else stays.
_NFT_IFACE = re.compile(r"(\b(?:iifname|oifname|iif|oif|device|devices|define\s+[\w-]+)"
                        r"\s*(?:=\s*)?(?:!=\s*|==\s*)?)(\{[^}]*\}|\"[^\"]*\"|[^\s;{}]+)")
_NFT_NAME = re.compile(r"\"([^\"]*)\"|([^\s,{}\"]+)")
# nft text comments: left alone (a comment decides no verdict).
_NFT_COMMENT = re.compile(r"(comment\s+\"[^\"]*\")")
# nft JSON keys whose string values are names of the rule set's own objects or
# free text, never an interface or an address.
_JSON_NAMES = frozenset({"comment", "name", "table", "chain", "target", "family", "type",
                         "hook", "policy", "set", "map", "key", "protocol", "field"})


@dataclass(frozen=True)
class Original:
    """A rule-set file as read, and what loads it."""
    path: str
    text: str
    kind: str            # "iptables", "nft JSON" or "nft text"
    version: int         # iptables: 4 or 6; nft: 0
    ipsets_path: str | None = None
    ipsets_text: str | None = None


def read(path: str, ipsets: str | None = None) -> Original:
    """The file (and its ipsets file) as the import read it."""
    text = loader._read(path)
    kind, version = loader.detect(text)
    if kind not in ("iptables", "nft JSON", "nft text"):
        raise RuleSetError(f"{path}: not a rule set file fwbench loads as it is")
    return Original(path, text, kind, version, ipsets,
                    loader._read(ipsets) if ipsets is not None else None)


def rewrite(orig: Original, rs: RuleSet, ifs: Interfaces) -> dict[str, str]:
    """The files that load the original into the testbed's firewall: name -> text
    (`sets.ipset` first where there is one, then the rule set)."""
    mover = Mover(rs)
    names = {name: ifs.resolve(role) for name, role in rs.iface_map}
    files: dict[str, str] = {}
    if orig.ipsets_text is not None:
        files["sets.ipset"] = mover.text(orig.ipsets_text)
    if orig.kind == "iptables":
        files["original.rules"] = _iptables(orig.text, mover, names)
    elif orig.kind == "nft JSON":
        files["original.json"] = _nft_json(orig.text, mover, names)
    else:
        files["original.nft"] = _nft_text(orig.text, mover, names)
    return files


class Mover:
    """remap's plan (RuleSet.address_map), asked for any address text."""

    def __init__(self, rs: RuleSet):
        self.exact: dict[tuple[int, int, int], tuple[int, int, int]] = {}
        for o, m in rs.address_map:
            self.exact[_net(o)] = _net(m)
        # By version, the moved networks sorted by start: containment lookups.
        self._sorted = {v: sorted((k for k in self.exact if k[0] == v),
                                  key=lambda n: (n[1], n[2])) for v in (4, 6)}
        self._starts = {v: [n[1] for n in ns] for v, ns in self._sorted.items()}

    def net(self, n: tuple[int, int, int]) -> tuple[int, int, int]:
        """Where network `n` went; `n` itself when the plan did not move it."""
        got = self.exact.get(n)
        if got is not None:
            return got
        outer = self._within(n)
        if outer is None:
            return n
        m = self.exact[outer]
        offset = n[1] - outer[1]
        if offset >> (_WIDTH[n[0]] - m[2]):
            raise RuleSetError(f"{_text(n)}: inside {_text(outer)}, which the import "
                               f"moved into a smaller block; it has no place there")
        return n[0], m[1] + offset, n[2] + (m[2] - outer[2])

    def _within(self, n: tuple[int, int, int]) -> tuple[int, int, int] | None:
        """The smallest moved network holding `n`."""
        v, x, plen = n
        ns, starts = self._sorted[v], self._starts[v]
        best = None
        for k in ns[:bisect_right(starts, x)][::-1]:
            if k[2] <= plen and x >> (_WIDTH[v] - k[2]) == k[1] >> (_WIDTH[v] - k[2]):
                if best is None or k[2] > best[2]:
                    best = k
                    if k[2] == plen:
                        break
        return best

    def text(self, text: str) -> str:
        """`text` with every address in it moved."""
        text = _V4.sub(lambda m: self._sub(m, 4), text)
        return _V6.sub(lambda m: self._sub(m, 6), text)

    def _sub(self, m: re.Match, version: int) -> str:
        addr, plen = m.group(1), m.group(2)
        try:
            x = int.from_bytes(socket.inet_pton(_AF[version], addr), "big")
        except OSError:
            return m.group(0)     # looked like an address, is none
        if plen is None:
            n = self.net((version, x, _WIDTH[version]))
            return _addr(n[0], n[1])
        length = _mask_len(plen, version)
        if length is None:
            return m.group(0)     # a mask with holes: no network, left as written
        w = _WIDTH[version]
        base = x & ~((1 << (w - length)) - 1) if length else 0
        n = self.net((version, base, length))
        # Host bits written under the mask stay where they were in the network.
        return f"{_addr(version, n[1] | (x - base))}/{n[2]}"


def _iptables(text: str, mover: Mover, names: dict[str, str]) -> str:
    def iface(m: re.Match) -> str:
        return m.group(1) + names.get(m.group(2), m.group(2))
    out = []
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith(("-", "[")):
            line = mover.text(_IPT_IFACE.sub(iface, line))
        out.append(line)
    return "".join(out)


def _nft_text(text: str, mover: Mover, names: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        quoted, bare = m.group(1), m.group(2)
        name = quoted if quoted is not None else bare
        new = names.get(name)
        if new is None:
            return m.group(0)
        return f'"{new}"' if quoted is not None else new

    def iface(m: re.Match) -> str:
        return m.group(1) + _NFT_NAME.sub(one, m.group(2))

    # Comments are kept byte for byte: split them out, rewrite the rest.
    parts = _NFT_COMMENT.split(text)
    return "".join(p if i % 2 else mover.text(_NFT_IFACE.sub(iface, p))
                   for i, p in enumerate(parts))


def _nft_json(text: str, mover: Mover, names: dict[str, str]) -> str:
    doc = copy.deepcopy(json.loads(text))

    def walk(x, key: str | None = None):
        if isinstance(x, dict):
            p = x.get("prefix")
            if isinstance(p, dict) and isinstance(p.get("addr"), str) and \
                    isinstance(p.get("len"), int) and len(x) == 1:
                moved = mover.text(f"{p['addr']}/{p['len']}")
                a, _, n = moved.partition("/")
                return {"prefix": {"addr": a, "len": int(n)}}
            return {k: walk(v, k) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v, key) for v in x]
        if isinstance(x, str) and key not in _JSON_NAMES:
            return names.get(x) or mover.text(x)
        return x

    return json.dumps(walk(doc))


# --- addresses as integers ---------------------------------------------------------

def _net(text: str) -> tuple[int, int, int]:
    addr, _, plen = text.partition("/")
    version = 6 if ":" in addr else 4
    x = int.from_bytes(socket.inet_pton(_AF[version], addr), "big")
    return version, x, int(plen) if plen else _WIDTH[version]


def _addr(version: int, x: int) -> str:
    return socket.inet_ntop(_AF[version], x.to_bytes(_WIDTH[version] // 8, "big"))


def _text(n: tuple[int, int, int]) -> str:
    return f"{_addr(n[0], n[1])}/{n[2]}"


def _mask_len(text: str, version: int) -> int | None:
    """A prefix length, or a dotted IPv4 mask's; None for a mask with holes."""
    if "." not in text:
        n = int(text)
        return n if n <= _WIDTH[version] else None
    if version != 4:
        return None
    try:
        bits = int.from_bytes(socket.inet_aton(text), "big")
    except OSError:
        return None
    n = bin(bits).count("1")
    return n if bits == ((1 << 32) - 1) ^ ((1 << (32 - n)) - 1) else None
