"""nftables backends: a linear chain (seed 000's `nftables` treatment) and a set
keyed on address . protocol . port (its `nft set` treatment), loaded with `nft -f`
as one transaction.

What the kernel holds is compared with the rendering in nft's own text form, the
form the renderer writes: the whole ruleset line by line (tables, chains with hook,
priority and policy, every rule in order; counters' values left out, so no other
table may exist), and each set's elements as a set.
"""
from __future__ import annotations

import json
import re

from fwbench import proc
from fwbench.backends.base import (Backend, Snapshot, interfaces, ordered_differences,
                                   unordered_differences)
from fwbench.ruleset import Entry, Interfaces, Policy
from fwbench.ruleset import policy_render as r
from fwbench.testbed.netns import NetnsTestbed


_COUNTER_VALUES = re.compile(r"\bcounter packets \d+ bytes \d+")
_ELEMENTS = "elements = {"


def nft_lines(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """An nft ruleset, as `nft -f` reads it or `nft list` prints it, made comparable:
    its lines stripped, blank ones and counters' values left out, and each set's
    `elements = { ... }` block (one element a line when rendered, several when
    listed, in hash order) taken out as set name -> elements."""
    lines: list[str] = []
    elements: dict[str, list[str]] = {}
    current_set = None
    it = iter(text.splitlines())
    for raw in it:
        line = _COUNTER_VALUES.sub("counter", raw.strip())
        if not line:
            continue
        if line.startswith("set ") and line.endswith("{"):
            current_set = line.split()[1]
        if line.startswith(_ELEMENTS):
            body = line[len(_ELEMENTS):]
            while "}" not in body:
                body += " " + next(it, "}").strip()
            inside = body.partition("}")[0]
            elements.setdefault(current_set or "?", []).extend(
                e.strip() for e in inside.split(",") if e.strip())
            line = _ELEMENTS + " ... }"
        lines.append(line)
    return lines, elements


def _rule_match(expr: list[dict]) -> tuple | None:
    """The (daddr, proto, dport) or ("icmp", daddr) an nft JSON rule matches; the
    packet counter it holds is read separately."""
    daddr = proto = dport = None
    icmp = False
    for e in expr:
        m = e.get("match")
        if not m:
            continue
        left = m.get("left", {}).get("payload", {})
        if left.get("protocol") == "ip" and left.get("field") == "daddr":
            daddr = m["right"]
        elif left.get("field") == "dport":
            proto, dport = left.get("protocol"), m["right"]
        elif left.get("protocol") == "icmp" and left.get("field") == "type":
            icmp = True
    if icmp:
        return ("icmp", daddr)
    if daddr and proto and isinstance(dport, int):
        return (daddr, proto, dport)
    return None


def _packets(expr: list[dict]) -> int | None:
    for e in expr:
        if "counter" in e and isinstance(e["counter"], dict):
            return e["counter"].get("packets")
    return None


class _Nft(Backend):
    tools = ("nft",)

    def versions(self) -> dict[str, str | None]:
        return {"nft": proc.version_line(["nft", "-v"])}

    def load(self, tb: NetnsTestbed, files: dict[str, str]) -> None:
        (name, text), = files.items()
        tb.exec("fw", ["nft", "-f", "-"], input=text)

    def differences(self, tb: NetnsTestbed, policy: Policy) -> list[str]:
        (rendered,) = self.render(policy, interfaces(tb)).values()
        want_lines, want_elems = nft_lines(rendered)
        got_lines, got_elems = nft_lines(tb.exec("fw", ["nft", "list", "ruleset"]))
        out = ordered_differences("nft ruleset", want_lines, got_lines)
        for name in sorted(want_elems.keys() | got_elems.keys()):
            out += unordered_differences(f"nft set {name}", want_elems.get(name, []),
                                         got_elems.get(name, []))
        return out

    def _chain(self, tb: NetnsTestbed) -> list[list[dict]]:
        cp = tb.run("fw", ["nft", "-j", "list", "chain", "ip", r.NFT_TABLE, r.NFT_FROM_CLIENT],
                    check=False)
        if cp.returncode != 0:
            return []
        items = json.loads(cp.stdout)["nftables"]
        return [i["rule"]["expr"] for i in items if "rule" in i]


class NftLinear(_Nft):
    name = "nftables"
    description = "nftables, one rule per entry in a linear chain (counters per scenario)"
    max_rules = 200_000

    def render(self, policy: Policy, ifs: Interfaces) -> dict[str, str]:
        return {"rules.nft": r.nft_linear(policy, ifs)}

    def snapshot(self, tb: NetnsTestbed, policy: Policy) -> Snapshot:
        rules = self._chain(tb)
        t = policy.test_entry
        aux = {_key(policy.control), ("icmp", policy.ping_daddr)}
        keys = [_rule_match(x) for x in rules]
        test_hits = ping_hits = None
        for k, x in zip(keys, rules):
            if k == _key(t):
                test_hits = _packets(x)
            elif k == ("icmp", policy.ping_daddr):
                ping_hits = _packets(x)
        entries = sum(1 for k in keys if k not in aux)
        return Snapshot(entries, test_hits, ping_hits, {"chain_rules": len(rules)})


class NftSet(_Nft):
    name = "nftset"
    description = "nftables set (ipv4_addr . inet_proto . inet_service), one rule"

    def render(self, policy: Policy, ifs: Interfaces) -> dict[str, str]:
        return {"rules.nft": r.nft_set(policy, ifs)}

    def snapshot(self, tb: NetnsTestbed, policy: Policy) -> Snapshot:
        rules = self._chain(tb)
        cp = tb.run("fw", ["nft", "-j", "list", "set", "ip", r.NFT_TABLE, r.NFT_SET],
                    check=False)
        elems = []
        if cp.returncode == 0:
            for i in json.loads(cp.stdout)["nftables"]:
                if "set" in i:
                    elems = i["set"].get("elem", [])
        t = policy.test_entry
        member = {"concat": [t.daddr, t.proto, t.dport]} in elems
        set_rule = next((x for x in rules
                         if any("match" in e and e["match"].get("right") == f"@{r.NFT_SET}"
                                for e in x)), None)
        ping = next((x for x in rules if _rule_match(x) == ("icmp", policy.ping_daddr)), None)
        return Snapshot(len(elems), _packets(set_rule) if set_rule and member else None,
                        _packets(ping) if ping else None,
                        {"test_entry_in_set": member, "chain_rules": len(rules)})


def _key(e: Entry) -> tuple:
    return (e.daddr, e.proto, e.dport)
