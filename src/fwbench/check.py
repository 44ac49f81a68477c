"""Verdict equivalence: one rule set, one packet corpus, every backend, for real.

`check` builds a corpus from the rule set (a packet for every rule, the edges of
every prefix and port range, near misses, seeded random packets), loads the rule
set into each backend in turn inside one testbed, sends the whole corpus through
the firewall and records per packet whether it was forwarded and how it left (its
addresses after NAT), and per rule how many packets its counter saw. The reference
evaluator (ruleset/evaluate.py) gives the expected answer; every disagreement,
with the reference or between backends, is listed with its packet.

Counters compare rule by rule over the whole corpus (one read before, one after):
exact per-packet attribution would cost a counter read per packet. A rule whose
count differs is listed with the packets the reference gives it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from fwbench import backends as registry
from fwbench.backends.base import Backend, as_tracked, describe, disagreements, \
    evaluator, exchange, rate_limits
from fwbench.errors import FwbenchError
from fwbench.ruleset import corpus as corpora
from fwbench.ruleset.model import Packet, RuleSet, Unsupported
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology

# Listed per backend; the rest are counted.
SHOWN = 20


@dataclass
class BackendResult:
    backend: str
    packets: int = 0
    forwarded: int = 0
    per_packet: list[str] = field(default_factory=list)   # vs the reference
    per_rule: list[str] = field(default_factory=list)
    kernel: list[str] = field(default_factory=list)       # kernel vs rendering
    outcomes: list[tuple | None] = field(default_factory=list)
    seconds: float = 0.0
    refused: str | None = None

    @property
    def disagreements(self) -> int:
        return len(self.per_packet) + len(self.per_rule) + len(self.kernel)

    def as_dict(self) -> dict:
        return {"backend": self.backend, "packets": self.packets,
                "forwarded": self.forwarded, "disagreements": self.disagreements,
                "per_packet": self.per_packet, "per_rule": self.per_rule,
                "kernel": self.kernel, "seconds": round(self.seconds, 3),
                "refused": self.refused}


@dataclass
class CheckReport:
    ruleset: str
    corpus: int
    results: list[BackendResult]
    between: list[str]             # packets on which backends disagree among themselves
    limited: int = 0               # packets not judged: a rate limit may decide them
    limit_rules: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.between and all(r.disagreements == 0 for r in self.results
                                        if r.refused is None)

    def as_dict(self) -> dict:
        return {"ruleset": self.ruleset, "corpus": self.corpus, "ok": self.ok,
                "not_judged_rate_limited": self.limited, "limit_rules": self.limit_rules,
                "backends": [r.as_dict() for r in self.results], "between": self.between}


def with_counters(rs: RuleSet) -> RuleSet:
    """Every rule counting: verdicts stay the same, and every rule can be read."""
    tables = tuple(replace(t, chains=tuple(
        replace(c, rules=tuple(replace(r, counter=True) for r in c.rules))
        for c in t.chains)) for t in rs.tables)
    return rs.with_tables(tables)


def resolve(rs: RuleSet, names: list[str] | None) -> tuple[list[Backend], dict[str, str]]:
    """The backends to check: the named ones (each must hold the rule set, else the
    refusal is the error) or every available filtering backend that holds it."""
    chosen, skipped = [], {}
    for name in names or [n for n in registry.names() if n != "none"]:
        b = registry.get(name)
        why = b.unavailable()
        if why:
            if names:
                raise FwbenchError(f"backend {name} cannot run here: {why}")
            skipped[name] = why
            continue
        try:
            b.check(rs)
        except Unsupported as e:
            if names:
                raise
            skipped[name] = str(e)
            continue
        chosen.append(b)
    if not chosen:
        raise FwbenchError("no backend here can hold this rule set")
    return chosen, skipped


def check(rs: RuleSet, backends: list[Backend], corpus_size: int = 5000, seed: int = 0,
          progress: Callable[[str], None] = lambda _: None,
          topo: Topology | None = None) -> CheckReport:
    rs = with_counters(rs)
    pkts = [as_tracked(p) for p in corpora.build(rs, size=corpus_size, seed=seed)]
    evaluator(rs)  # compile once, before any testbed exists
    results = []
    with NetnsTestbed(topo or Topology.new()) as tb:
        for b in backends:
            progress(f"{b.name}: loading {rs.rule_count:,} rules")
            t0 = time.perf_counter()
            res = BackendResult(b.name, len(pkts))
            b.apply(tb, rs)
            res.kernel = b.differences(tb, rs)
            progress(f"{b.name}: sending {len(pkts):,} packets")
            ex = exchange(b, tb, rs, pkts)
            res.per_packet, res.per_rule = disagreements(b, rs, ex)
            res.per_rule = [line + _attributed(rs, pkts, line) for line in res.per_rule]
            res.outcomes = [None if s is None else (s.saddr, s.daddr, s.sport, s.dport)
                            for s in ex.seen]
            res.forwarded = sum(1 for s in ex.seen if s is not None)
            res.seconds = time.perf_counter() - t0
            results.append(res)
    limits = rate_limits(rs)
    return CheckReport(rs.name, len(pkts), results, _between(rs, pkts, results),
                       sum(1 for p in pkts if limits.reached(p)), tuple(sorted(limits.ids)))


def _attributed(rs: RuleSet, pkts: list[Packet], line: str) -> str:
    """The packets the reference gives a rule whose count differs (the first few)."""
    rid = line.split()[1]
    ev = evaluator(rs)
    mine = [p for p in pkts if rid in ev.evaluate(p).counted]
    if not mine:
        return ""
    return "; its packets include " + ", ".join(describe(p) for p in mine[:3])


def _between(rs: RuleSet, pkts: list[Packet], results: list[BackendResult]) -> list[str]:
    out = []
    limits = rate_limits(rs)
    for i, p in enumerate(pkts):
        if limits.reached(p):
            continue   # a spent limit may decide it, in each kernel at its own time
        seen = {r.backend: r.outcomes[i] for r in results}
        if len(set(seen.values())) > 1:
            parts = [f"{name} {'dropped' if o is None else 'forwarded'}"
                     for name, o in seen.items()]
            out.append(f"{describe(p)}: {', '.join(parts)}")
    return out


def template_params(items: list[str]) -> dict[str, int | str]:
    """`key=value` settings of a template; integers become int."""
    out: dict[str, int | str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FwbenchError(f"template setting {item!r}: expected KEY=VALUE")
        out[key.replace("-", "_")] = int(value) if value.lstrip("-").isdigit() else value
    return out


def ruleset_from(*, path: str | None = None, template: str | None = None,
                 params: dict | None = None, iface: str | None = None,
                 ipsets: str | None = None) -> RuleSet:
    """The rule set a command names: a file to import, or a template and settings."""
    from fwbench.ruleset import templates
    if (path is None) == (template is None):
        raise FwbenchError("give a rule-set file or --template NAME (one of them)")
    if template is not None:
        fn = templates.get(template)
        try:
            return fn(**(params or {}))
        except TypeError as e:
            raise FwbenchError(f"template {template}: {e}") from None
    from fwbench.ruleset.importers import load
    return load.load_file(path, load.parse_iface_map(iface) if iface else None, ipsets)
