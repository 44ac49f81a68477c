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

A rule set that chooses at random (statistic, numgen) gives some packets several
allowed verdicts: each packet must get one of them, in every backend and the
original, and how the packets fell among them is tested with a chi-square test
at CHANCE_LEVEL (ChanceTest); the corpus then carries copies of those packets,
enough for the test.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable

from fwbench import backends as registry
from fwbench.backends.base import CHANCE_LEVEL, Backend, ChanceTest, Exchange, as_tracked, \
    chance_test, describe, disagreements, evaluator, exchange, fate, fitting, rate_limits
from fwbench.backends.original import NAME as ORIGINAL, OriginalFile
from fwbench.errors import FwbenchError
from fwbench.ruleset import corpus as corpora
from fwbench.ruleset.model import HOOKS, ROLES, Packet, RuleSet, Unsupported, jump_targets
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
    chances: ChanceTest | None = None   # random choices' distribution, where any

    @property
    def disagreements(self) -> int:
        return len(self.per_packet) + len(self.per_rule) + len(self.kernel) + \
            (len(self.chances.failed) if self.chances else 0)

    def as_dict(self) -> dict:
        return {"backend": self.backend, "packets": self.packets,
                "forwarded": self.forwarded, "disagreements": self.disagreements,
                "per_packet": self.per_packet, "per_rule": self.per_rule,
                "kernel": self.kernel, "seconds": round(self.seconds, 3),
                "refused": self.refused,
                "random_choices": self.chances.as_dict() if self.chances else None}


@dataclass
class CheckReport:
    ruleset: str
    corpus: int
    results: list[BackendResult]
    between: list[str]             # packets on which backends disagree among themselves
    limited: int = 0               # packets not judged: a rate limit or quota may decide them
    limit_rules: tuple[str, ...] = ()
    # Packets a packet counter (nth, numgen inc) may decide: either verdict passes.
    counter_choices: int = 0
    # What the import kept in another form or left out, deciding no verdict
    # (RuleSet.notes): NFLOG as a log action, options of LOG, ...
    notes: tuple[str, ...] = ()
    # Rules only the firewall's own packets match (own_traffic_rules): counters
    # not judged.
    own_only: tuple[str, ...] = ()
    # Rules the firewall's own packets may reach besides the corpus's
    # (own_traffic_rules): counters judged as at least the corpus's.
    at_least: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        # A backend that cannot hold the rule set is skipped; an original that does
        # not load leaves the import unproven.
        return not self.between and all(
            r.disagreements == 0 if r.refused is None else r.backend != ORIGINAL
            for r in self.results)

    @property
    def original(self) -> BackendResult | None:
        """The user's file itself, when the rule set came from one."""
        return next((r for r in self.results if r.backend == ORIGINAL), None)

    def as_dict(self) -> dict:
        orig = self.original
        return {"ruleset": self.ruleset, "corpus": self.corpus, "ok": self.ok,
                "not_judged_rate_limited": self.limited, "limit_rules": self.limit_rules,
                "random_choice_test": {"test": "chi-square", "level": CHANCE_LEVEL,
                                       "correction": "Bonferroni over groups"},
                "counter_choice_packets": self.counter_choices,
                "notes": list(self.notes),
                "counters_not_judged": {
                    "rules": list(self.own_only),
                    "why": "only the firewall's own packets can reach them (an input "
                           "interface that is not the testbed's, the output hook)"},
                "counters_at_least": {
                    "rules": list(self.at_least),
                    "why": "the firewall's own packets (its REJECT responses, ICMP "
                           "errors, answers to packets sent to it) reach them too "
                           "(postrouting, chains output jumps to): each counts at least "
                           "the corpus's packets"},
                "original": orig.as_dict() if orig else None,
                "backends": [r.as_dict() for r in self.results if r is not orig],
                "between": self.between}


def with_counters(rs: RuleSet) -> RuleSet:
    """Every rule counting: verdicts stay the same, and every rule can be read."""
    tables = tuple(replace(t, chains=tuple(
        replace(c, rules=tuple(replace(r, counter=True) for r in c.rules))
        for c in t.chains)) for t in rs.tables)
    return rs.with_tables(tables)


def resolve(rs: RuleSet, names: list[str] | None,
            allow_none: bool = False) -> tuple[list[Backend], dict[str, str]]:
    """The backends to check: the named ones (each must hold the rule set, else the
    refusal is the error) or every available filtering backend that holds it; with
    `allow_none` (a file's rule set: its original is checked anyway) perhaps none."""
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
            b.refuse_unsupported(rs)
        except Unsupported as e:
            if names:
                raise
            skipped[name] = str(e)
            continue
        chosen.append(b)
    if not chosen and not allow_none:
        raise FwbenchError("no backend here can hold this rule set")
    return chosen, skipped


def check(rs: RuleSet, backends: list[Backend], corpus_size: int = 5000, seed: int = 0,
          progress: Callable[[str], None] = lambda _: None,
          topo: Topology | None = None, original: OriginalFile | None = None,
          tb=None) -> CheckReport:
    """Every backend against the reference; with `original`, the user's file itself
    too (its `original` row): the proof that the import kept its meaning. In a
    testbed of its own, or in `tb` (tests run many checks in one)."""
    rs = with_counters(rs)
    pkts = [as_tracked(p) for p in corpora.build(rs, size=corpus_size, seed=seed)]
    pkts += corpora.chance_copies(rs, pkts, evaluator(rs))
    own_only, at_least = own_traffic_rules(rs)
    results = []
    with nullcontext(tb) if tb is not None else NetnsTestbed(topo or Topology.new().serving(rs.served)) as tb:
        if original is not None:
            progress(f"original: loading {original.orig.path} with {original.command}")
            results.append(against_original(original, tb, rs, pkts))
        for b in backends:
            progress(f"{b.name}: loading {rs.rule_count:,} rules")
            t0 = time.perf_counter()
            res = BackendResult(b.name, len(pkts))
            b.apply(tb, rs)
            res.kernel = b.differences(tb, rs)
            progress(f"{b.name}: sending {len(pkts):,} packets")
            ex = exchange(b, tb, rs, pkts)
            res.per_packet, res.per_rule = disagreements(b, rs, ex, unjudged=own_only,
                                                         at_least=at_least)
            res.per_rule = [line + _attributed(rs, pkts, line) for line in res.per_rule]
            res.chances = _chances(rs, ex)
            res.outcomes = [None if s is None else (s.saddr, s.daddr, s.sport, s.dport)
                            for s in ex.seen]
            res.forwarded = sum(1 for s in ex.seen if s is not None)
            res.seconds = time.perf_counter() - t0
            results.append(res)
    limits, ev = rate_limits(rs), evaluator(rs)
    return CheckReport(rs.name, len(pkts), results, _between(rs, pkts, results),
                       sum(1 for p in pkts if limits.reached(p)), tuple(sorted(limits.ids)),
                       sum(1 for p in pkts if ev.evaluate(p).counter_choice), rs.notes,
                       tuple(sorted(own_only)), tuple(sorted(at_least)))


def own_traffic_rules(rs: RuleSet) -> tuple[frozenset[str], frozenset[str]]:
    """The rules whose counters the firewall's own packets (its REJECT responses,
    ICMP errors, answers to packets delivered to it) move, at their own time:
    (those only they can reach, not judged: the reference expects 0 of the
    corpus; those they may reach besides the corpus, judged as at least the
    corpus's count). Only they reach a rule with an input interface that is
    neither side of the testbed (`-i lo`) and the rules of the output hook's
    chains (and of chains only those reach); they pass the postrouting hook too,
    and their REJECT resets its nat chains (measured: fw4's `oifname "wan"` in
    srcnat counted every reset the firewall sent out there), and a user chain
    both output and forward jump to."""
    chains = {(t.family, t.name, c.name): c for t in rs.tables for c in t.chains}
    maps = {(t.family, t.name): {s.name: s for s in t.sets} for t in rs.tables}

    def reach(hooks: set[str]) -> set[str]:
        todo = [k for k, c in chains.items() if c.hook in hooks]
        seen, out = set(todo), set()
        while todo:
            fam, table, name = todo.pop()
            for r in chains[(fam, table, name)].rules:
                out.add(r.id)
                for target in jump_targets(r, maps[(fam, table)]):
                    k = (fam, table, target)
                    if k in chains and k not in seen:
                        seen.add(k)
                        todo.append(k)
        return out

    others = reach({h for h in HOOKS if h != "output"})
    only = {r.id for _, _, r in rs.rules()
            if r.match.iif is not None and not r.match.iif.negate
            and r.match.iif.name not in ROLES and not r.match.iif.name.endswith("+")}
    own = reach({"output", "postrouting", "egress"})
    only |= own - others
    # The client's stack answers what the firewall sends it (measured: a kube-proxy
    # node's `-A INPUT -j KUBE-FIREWALL` counted one packet more than the corpus
    # sent to the firewall, on both iptables backends, and its `ct state new` rules
    # beside it did not): those answers belong to a connection and reach the input
    # hook's rules that take such packets.
    answered = {r.id for _, _, r in rs.rules()
                if r.match.ct_state is None or not r.match.ct_state <= {"new"}}
    own |= reach({"input"}) & answered - only
    return frozenset(only), frozenset(own - only)


def against_original(orig: OriginalFile, tb, rs: RuleSet,
                     pkts: list[Packet]) -> BackendResult:
    """The user's file itself in the firewall, sent `pkts`: each packet's verdict and
    translation against the reference's. A disagreement names the packet and the
    file's rule the import says decides it."""
    t0 = time.perf_counter()
    res = BackendResult(ORIGINAL, len(pkts))
    try:
        orig.apply(tb, rs)
    except FwbenchError as e:
        res.refused = str(e)
        res.seconds = time.perf_counter() - t0
        return res
    ex = exchange(orig, tb, rs, pkts)
    res.per_packet = original_disagreements(rs, ex)
    res.chances = _chances(rs, ex)
    res.outcomes = [None if s is None else (s.saddr, s.daddr, s.sport, s.dport)
                    for s in ex.seen]
    res.forwarded = sum(1 for s in ex.seen if s is not None)
    res.seconds = time.perf_counter() - t0
    return res


# Runs: (file, rule-set digest) -> the record of its comparison with the original.
_confirmed: dict[tuple[str, str], dict] = {}


def confirm_original(rs: RuleSet, path: str, ipsets: str | None = None,
                     corpus_size: int = 5000, seed: int = 0,
                     progress: Callable[[str], None] = lambda _: None) -> dict:
    """Before a run measures a user's rule set: its original, in a firewall of a
    testbed of its own on this machine (the run's may be real hosts, which a
    rule set can cut off), sent `check`'s corpus, must give the reference's
    verdict and translation for every packet. Once per file and import in a
    process. Returns the record for run.json; raises FwbenchError (one line)
    when the original contradicts the import or does not load."""
    key = (path, rs.digest())
    if key not in _confirmed:
        orig = original_of(path, ipsets)
        pkts = [as_tracked(p) for p in corpora.build(rs, size=corpus_size, seed=seed)]
        evaluator(rs)
        progress(f"comparing {path} itself with its import: {len(pkts):,} packets "
                 f"(as fwbench check does)")
        with NetnsTestbed(Topology.new().serving(rs.served)) as tb:
            res = against_original(orig, tb, rs, pkts)
        if res.refused is not None:
            raise FwbenchError(f"{res.refused}; fwbench measures only a rule set whose "
                               f"import is proven against its original")
        if res.per_packet:
            raise FwbenchError(f"{path}: the import does not mean what the file means: "
                               f"{len(res.per_packet)} of {len(pkts)} packets differ, "
                               f"first: {res.per_packet[0]}; not measured (fwbench "
                               f"check {path} lists them)")
        _confirmed[key] = {"tool": orig.command, "packets": len(pkts),
                           "forwarded": res.forwarded, "disagreements": 0,
                           "not_judged_rate_limited":
                               sum(1 for p in pkts if rate_limits(rs).reached(p)),
                           "seconds": round(res.seconds, 3)}
    return _confirmed[key]


def _chances(rs: RuleSet, ex: Exchange) -> ChanceTest | None:
    """The chi-square test of the exchange's random choices; None when the rule
    set makes none."""
    test = chance_test(rs, ex)
    return test if test.groups else None


def original_disagreements(rs: RuleSet, ex: Exchange) -> list[str]:
    """Where the original's verdicts and translations differ from the reference's,
    one line per packet, naming where the file has the rule that should decide."""
    ev, limits = evaluator(rs), rate_limits(rs)
    out = []
    for p, got in zip(ex.sent, ex.seen):
        if limits.reached(p):
            continue   # a spent limit may decide it, in each kernel at its own time
        v = ev.evaluate(p)
        if fitting(v, got):
            continue
        if v.outcomes:
            out.append(f"{describe(p)}: the original {fate(got)}, the import allows only: "
                       + "; ".join(f"{q:.3f} " + ("dropped" if not o.forward else
                                                  describe(o.translated, iif=False))
                                   for q, o in v.possible))
            continue
        want = v.translated if v.forward else None
        what = ("dropped" if got is None else "forwarded") if (want is None) != (got is None) \
            else f"left as {describe(got, iif=False)}"
        expected = "forwarded" if want is not None else "dropped"
        if want is not None and got is not None:
            expected = f"as {describe(want, iif=False)}"
        out.append(f"{describe(p)}: the original {what}, the import says {expected} "
                   f"({_decider(rs, v)})")
    return out


def _decider(rs: RuleSet, v) -> str:
    """The imported rule (and where the file has it), or the policy, that decides."""
    if v.decided_by is None:
        return f"chain {v.policy_of}'s policy" if v.policy_of else v.reason
    where = rs.origin(v.decided_by)
    return f"rule {v.decided_by}" + (f" at {where}" if where else "")


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
    limits, ev = rate_limits(rs), evaluator(rs)
    for i, p in enumerate(pkts):
        if limits.reached(p):
            continue   # a spent limit may decide it, in each kernel at its own time
        v = ev.evaluate(p)
        if v.outcomes or v.sport_random:
            continue   # chosen at random: each backend is judged against the reference
        seen = {r.backend: r.outcomes[i] for r in results if r.refused is None}
        if len(set(seen.values())) > 1:
            parts = [f"{name} {'dropped' if o is None else 'forwarded'}"
                     for name, o in seen.items()]
            out.append(f"{describe(p)}: {', '.join(parts)}")
    return out


def original_of(path: str | None, ipsets: str | None = None) -> OriginalFile | None:
    """The file a rule set was imported from, ready to load as it is (None for a
    template); refused in one line where it cannot be loaded here."""
    if path is None:
        return None
    from fwbench.ruleset import original
    orig = OriginalFile(original.read(path, ipsets))
    why = orig.unavailable()
    if why:
        raise FwbenchError(f"the original {path} cannot be loaded here to compare with "
                           f"its import: {why}")
    return orig


def template_params(items: list[str]) -> dict[str, str]:
    """`key=value` settings of a template, as written (templates.build types them)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FwbenchError(f"template setting {item!r}: expected KEY=VALUE")
        out[key.replace("-", "_")] = value
    return out


def ruleset_from(*, path: str | None = None, template: str | None = None,
                 params: dict | None = None, iface: str | None = None,
                 ipsets: str | None = None) -> RuleSet:
    """The rule set a command names: a file to import, or a template and settings."""
    from fwbench.ruleset import templates
    if (path is None) == (template is None):
        raise FwbenchError("give a rule-set file or --template NAME (one of them)")
    if template is not None:
        return templates.build(template, {k: str(v) for k, v in (params or {}).items()})
    from fwbench.ruleset.importers import load
    return load.load_file(path, load.parse_iface_map(iface) if iface else None, ipsets)
