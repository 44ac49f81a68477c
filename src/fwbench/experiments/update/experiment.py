"""The update experiment: `fwbench run` with `method = "update"`.

A cell is (backend, rules, kind, mechanism): a firewall holding `rules` entries
changes its rule set by an update of `kind` (fwbench.ruleset.templates.updates)
made with `mechanism` (reload, batch, commands or map: what the backend declares
in `mechanisms`). One trial:

1. flush every firewall, load the rule set before the update in one step and
   verify it: the kernel holds exactly its rendering, and its probes (the kept
   flow passes, the probe flow as the rule set says, ping) are counted by their
   rules;
2. prepare the update's commands (rendered differences; nft's rule handles read);
3. start the XDP sink on the server with a time series (per slot of scheduled send
   time) and two senders: the kept flow at `flow_pps`, whose rule no update
   touches, and the probe flow, which the update starts or stops;
4. after `before_s`, run the commands; `after_s` after the last one ends, stop
   the senders and read the series;
5. prove the kernel holds exactly the new rule set (its listing against the
   rendering, entry count).

Update latency is from the first command's start to the moment the probe flow
changed (fwbench.experiments.update.series), not to the command's exit. What the kept flow
saw is the loss, the longest gap between arrivals, the latency peak and the time
until it returned to its baseline.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections import defaultdict

from rich.console import Console, RenderableType
from rich.table import Table

from fwbench import backends as registry
from fwbench import engine
from fwbench import summary
from fwbench.backends.base import Backend, Step
from fwbench.backends.kernel import flush_all, flush_conntrack
from fwbench.errors import FwbenchError
from fwbench.experiments.base import Experiment, Planned, Refusal, Trial
from fwbench.plan import TrialKey, named_cell
from fwbench.results import TrialRecord
from fwbench.ruleset.model import RuleSet, Unsupported
from fwbench.ruleset.templates import updates as tpl
from fwbench.scenario import Scenario, from_dict
from fwbench.testbed.base import Testbed
from fwbench.testbed.topology import Topology
from fwbench.traffic import accounting
from fwbench.traffic.native import PacedStreams
from fwbench.experiments.update import series
from fwbench.onhost import memory

METHOD = "update"
FACTORS = ("backend", "rules", "kind", "mechanism")
# The senders run until stopped; this only bounds a run that lost its way.
SENDER_LIMIT_S = 3600
# The two senders share a CPU: each sleeps until this close to its next packet.
# With the engine's default (150 us, above the kept flow's 100 us interval) the
# kept flow's sender never slept, and the probe's fell ~4 ms (p99) behind its
# schedule; at 20 us both keep it to ~0.1 ms (p99) here.
SENDER_SPIN_US = 20
# After the senders stop, for the last packets to reach the sink.
DRAIN_S = 0.05
# A command of an update may take this long before the trial gives up on it.
STEP_TIMEOUT_S = 900
# After emptying the firewall, before reading memory: RCU frees what it held.
SETTLE_S = 0.2


def cells_of(b: Backend, s, sizes: list[int]) -> tuple[list[tuple], list[str]]:
    """The cells the scenario's update settings `s` give backend `b`, and why each
    (kind, mechanism) it asks for but `b` cannot make was left out."""
    cells, left = [], []
    for kname in s.kinds:
        k = tpl.KINDS[kname]
        if not tpl.fits(k, b.layout):
            left.append(f"{b.name} {kname}: it holds its entries as "
                        f"{'set elements' if b.layout == 'set' else 'rules'}, and "
                        f"{kname} changes {'rules' if k.layout == 'linear' else 'elements'}")
            continue
        for mech in s.mechanisms:
            if mech not in b.mechanisms:
                left.append(f"{b.name} {kname} by {mech}: {b.name} has no such update "
                            f"mechanism (it has {', '.join(b.mechanisms)})")
            elif kname == "replace-all" and mech != "reload":
                left.append(f"{b.name} replace-all by {mech}: a whole new rule set is a "
                            f"reload")
            elif mech == "reload" and s.reload_kinds == "replace-all" \
                    and kname != "replace-all" \
                    and set(b.mechanisms) & set(s.mechanisms) != {"reload"}:
                # A reload's cost hardly depends on what changed (the whole rule set
                # is loaded again): it is measured on replace-all, and on the other
                # kinds only where it is the one way asked of the backend.
                continue
            else:
                fits = sizes
                if mech == "commands" and k.layout == "linear":
                    fits = [n for n in sizes if k.changed(n) * n <= s.commands_max_work]
                    left += [f"{b.name} {kname} by commands at {n:,} rules: "
                             f"{k.changed(n):,} commands, each one process that reads "
                             f"the whole rule set (changes x rules {k.changed(n) * n:,} "
                             f"> commands_max_work {s.commands_max_work:,}); batch makes "
                             f"the same changes in one" for n in sizes if n not in fits]
                cells += [(b.name, n, kname, mech) for n in fits]
    return cells, left


def path_drops(before: dict, after: dict) -> dict[str, int]:
    """Frames the path's counters show dropped on the way but not by a rule: the
    firewall's input queue full, its handover to the server refused, the server's
    input queue full (a busy machine's doing, not the update's)."""
    def d(place: str, field: str) -> int:
        return getattr(after[place], field) - getattr(before[place], field)
    return {"dropped_at_firewall_ingress": d("fw_in", "rx_dropped"),
            "dropped_at_firewall_egress": d("fw_out", "tx_dropped"),
            "dropped_at_receiver_ingress": d("receiver", "rx_dropped")}


def _memory(tb: Testbed) -> dict[str, int]:
    """The firewall machine's kernel memory (memory.FIELDS), bytes."""
    return memory.parse(tb.machine_file(tb.topo.fw_client_side.host, "/proc/meminfo"))


def leave_cpu(cpu: int):
    """Take this process (fwbench's, on this machine) off this machine's CPU `cpu`,
    onto the others it may use; what puts it back. Nothing is changed when it may use
    no other, or not `cpu` in the first place: only CPUs it already has are asked for,
    so a machine with fewer CPUs than the firewall's host is no error."""
    mine = os.sched_getaffinity(0)
    away = mine - {cpu}
    if not away or away == mine:
        return lambda: None
    try:
        os.sched_setaffinity(0, away)
    except OSError:     # its cpuset shrank meanwhile: it stays where it was
        return lambda: None

    def back() -> None:
        try:
            os.sched_setaffinity(0, mine)
        except OSError:
            pass
    return back


def probe_rate(s, layout: str, n: int) -> float:
    """The probe flow's rate: `probe_pps`, held down for a linear rule set so that
    the rules its packets cross (all of them, before a rule lets it through) cost
    at most `probe_rule_checks_pps` rule checks a second."""
    crossed = n + 3 if layout == "linear" else 4
    # Whole packets a second: the sender reports its rate in six digits, and the
    # schedule rebuilt from that report must be the one it kept.
    return float(max(1, math.floor(min(s.probe_pps, s.probe_rule_checks_pps / crossed))))


class Update(Experiment):
    """Backends x sizes x kinds x mechanisms; one update under traffic a trial."""
    tools = {"ip": "iproute2", "taskset": "util-linux"}
    factors = FACTORS

    def __init__(self, sc: Scenario):
        super().__init__(sc)
        self.s = sc.update
        self.pairs: dict[tuple, tuple[RuleSet, RuleSet]] = {}
        # The trial's kernel memory with every firewall empty, and what the rule
        # set before the update holds over it (prepare() and load()).
        self._empty: dict = {}
        self._held: dict = {}

    # --- before any testbed ----------------------------------------------------------

    def over_ssh(self) -> str | None:
        return None

    def preflight(self) -> None:
        if self.sc.version != 4:
            # The engine's two flows and the eBPF filters are IPv4: an IPv6 rule set
            # would let neither flow through, and every trial would fail.
            raise FwbenchError(f"{METHOD}: IPv4 only (family = \"ipv4\")")
        super().preflight()
        if len(self.sc.frame_sizes) != 1:
            raise FwbenchError(f"{METHOD} sends one frame size per run; "
                               f"{len(self.sc.frame_sizes)} given")
        small = [n for n in self.sc.rules if n < tpl.MIN_ENTRIES]
        if small:
            raise FwbenchError(f"{METHOD}: rule sets of at least {tpl.MIN_ENTRIES} "
                               f"entries, not {small[0]}")
        self.choose_backends((), Refusal.unavailable)   # those it names, here

    def plan(self) -> Planned:
        made: dict[str, tuple[list, list]] = {}
        named = named_cell(FACTORS)

        def refusal(b: Backend) -> Refusal | None:
            why = b.unavailable() or (None if b.filters else "it holds no rule set")
            if why is None and max(self.sc.rules) > b.max_rules:
                why = f"it holds at most {b.max_rules:,} rules in fwbench"
            if why:
                return Refusal(why, f"backend {b.name} cannot run {METHOD}: {why}")
            got, left = cells_of(b, self.s, list(self.sc.rules))
            if not got:
                return Refusal.same(f"backend {b.name} can make none of the updates "
                                    f"asked: " + "; ".join(left))
            # The template holds what every backend renders; checked once a kind, at
            # the smallest size (a pair at 100,000 entries takes seconds to render).
            for kname in dict.fromkeys(named(*c).kind for c in got):
                self._refuse_unsupported_pair(b, kname, min(self.sc.rules))
            made[b.name] = got, left
            return None

        chosen, skipped = self.choose_backends(registry.names(), refusal)
        cells, notes = [], []
        for name in chosen:
            got, left = made[name]
            cells += got
            notes += [f"leaving out {why}" for why in left]
        if not cells:
            raise FwbenchError("no backend can make the updates asked: "
                               + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
        names = list(dict.fromkeys(named(*c).backend for c in cells))
        self.sc = resolved = from_dict({**self.sc.dump(), "backends": names})
        return Planned(resolved, cells, {"skipped_backends": skipped, "left_out": notes},
                       notes + [f"skipping backend {n}: {why}" for n, why in skipped.items()])

    def _refuse_unsupported_pair(self, b: Backend, kname: str, n: int) -> None:
        try:
            old, new = self._pair(kname, n, b.layout)
            b.refuse_unsupported(old)
            b.refuse_unsupported(new)
        except Unsupported as e:
            raise FwbenchError(str(e)) from None

    def _pair(self, kname: str, n: int, layout: str) -> tuple[RuleSet, RuleSet]:
        key = (kname, n, layout)
        if key not in self.pairs:
            if len(self.pairs) > 8:
                self.pairs.clear()
            self.pairs[key] = tpl.pair(kname, n, layout=layout, version=self.sc.version)
        return self.pairs[key]

    def versions(self, planned: Planned) -> dict[str, str | None]:
        out = {"fwbench-engine": engine.version()}
        out.update(self.backend_versions(planned.scenario.backends))
        return out

    # --- the testbed session -----------------------------------------------------------

    def topology(self) -> Topology:
        # The XDP sink counts in the firewall's softirq: no RPS on the server.
        return Topology.new(self.sc.testbed, server_rps=False)

    def open(self, tb: Testbed, plan: list[TrialKey], console: Console) -> dict:
        if tb.other_clocks:
            raise FwbenchError(
                f"method update sets the kept flow's time slots by this machine's clock "
                f"and compares the firewall's command times with the flow's arrivals "
                f"at the server: every host must run on this machine's kernel, and "
                f"{', '.join(tb.other_clocks)} do{'es' * (len(tb.other_clocks) == 1)} not")
        # The runner pins the update to the firewall's CPU on the firewall's host:
        # one it has, checked before any trial rather than failing every one.
        fw, cpu = tb.topo.fw_client_side.host, tb.topo.settings.firewall_cpu
        ncpu = tb.cpus(fw)
        if not 0 <= cpu < ncpu:
            raise FwbenchError(f"{METHOD} runs its updates on the firewall's CPU {cpu}, "
                               f"and {fw}'s machine has {ncpu} CPU"
                               f"{'s' * (ncpu != 1)} (0-{ncpu - 1}): set "
                               f"testbed.firewall_cpu (or the inventory's cpu of {fw}) "
                               f"below {ncpu}")
        flush_all(tb)
        return {"flows": {
            "kept": {"dport": tpl.KEEP_PORT, "pps": self.s.flow_pps, "stream": 0,
                     "rule": "the chain's first entry (linear) or a set element"},
            "probe": {"dport": tpl.PROBE_PORT, "pps_at_most": self.s.probe_pps, "stream": 1,
                      "rule_checks_pps": self.s.probe_rule_checks_pps}}}

    def blocks(self):
        # One size's cells back to back in each round (in a shuffled order, the
        # sizes in one too): the rule-set pairs of a size are built once a round,
        # not once a trial (seconds each at 100,000 entries).
        named = named_cell(self.factors)
        return lambda cell: named(*cell).rules

    def cell_label(self, key: TrialKey) -> str:
        c = self.cell(key)
        return f"{c.backend} N={c.rules:,} {c.kind} by {c.mechanism}"

    # --- the trial's hooks (Experiment.run_trial) ------------------------------------

    def ruleset(self, c) -> RuleSet:
        """The rule set before the update: what the trial loads and verifies."""
        return self._pair(c.kind, c.rules, self.backend(c.backend).layout)[0]

    def prepare(self, tb: Testbed, t: Trial, c, step) -> None:
        self._held = {}
        flush_conntrack(tb)
        flush_all(tb)
        time.sleep(SETTLE_S)
        self._empty = _memory(tb)

    def load(self, tb: Testbed, c) -> float:
        b = self.backend(c.backend)
        # A map update adds in place: the set is loaded with room for it.
        room = tpl.KINDS[c.kind].changed(c.rules) if c.mechanism == "map" else 0
        took = b.apply(tb, self.ruleset(c), room).load_time_s
        self._held = memory.delta(_memory(tb), self._empty)
        self._held.update(b.charged_memory(tb))
        return took

    def verify(self, tb: Testbed, c):
        # The probes only: the flows that matter here (a corpus sample costs
        # seconds at 100,000 rules, every trial).
        return self.backend(c.backend).verify(tb, self.ruleset(c), 0)

    def measure(self, tb: Testbed, t: Trial, c, say) -> None:
        b, k, n = self.backend(c.backend), tpl.KINDS[c.kind], c.rules
        old, new = self._pair(c.kind, n, b.layout)
        pps = probe_rate(self.s, b.layout, n)
        steps = t.timed("prepare_s", b.update_steps, c.mechanism, tb, old, new)
        say(f"updating under traffic ({len(steps)} command"
            f"{'s' * (len(steps) != 1)})")
        ran = t.timed("traffic_s", self._under_traffic, tb, steps, pps)
        t.metrics = self._metrics(k, n, ran, pps)
        if "memory" in ran:
            t.metrics["memory"] = {"held_bytes": self._held["kernel"], "held": self._held,
                                   **ran["memory"]}
        measured = t.metrics.pop("problem", None)
        if ran.get("problem"):     # a command failed: the update did not happen
            t.fail(ran["problem"])
        elif measured:             # the instrument cannot say when it did
            t.fail(measured, "invalid")
        say("checking the kernel holds the new rule set")
        after = t.timed("after_s", b.snapshot, tb, new)
        t.metrics["after"] = self._after(b, new, after)
        if not t.metrics["after"]["ok"] and t.status == "ok":
            t.fail(f"after the update: {t.metrics['after']['reason']}")

    def recorded_as(self, c) -> tuple[str, str]:
        return METHOD, "engine"

    def digest(self, c) -> str:
        return self._pair(c.kind, c.rules, self.backend(c.backend).layout)[1].digest()

    def conditions(self, tb: Testbed, c) -> dict:
        s, b, k, n = self.s, self.backend(c.backend), tpl.KINDS[c.kind], c.rules
        old, new = self._pair(c.kind, n, b.layout)
        return {
            "frame_size": self.sc.frame_sizes[0], "flow_pps": s.flow_pps,
            "probe_pps": probe_rate(s, b.layout, n), "probe_starts": k.probe == "starts",
            "changed_entries": k.changed(n), "entries_after": new.size,
            "mechanism": b.mechanisms.get(c.mechanism, ("", False))[0],
            "atomic": b.mechanisms.get(c.mechanism, ("", False))[1],
            "before_s": s.before_s, "after_s": s.after_s, "slot_ms": s.slot_ms,
            "ruleset_before": old.name, "ruleset_before_sha256": old.digest()}

    def _under_traffic(self, tb: Testbed, steps: list[Step], pps: float) -> dict:
        """Both flows running, the update's commands between `before_s` and
        `after_s` of them; what the senders, the sink and the commands reported."""
        s = self.s
        path0 = accounting.path_counters(tb)
        flows = PacedStreams(tb, ((tpl.KEEP_PORT, s.flow_pps), (tpl.PROBE_PORT, pps)),
                             frame_size=self.sc.frame_sizes[0],
                             slot_ns=int(s.slot_ms * 1e6), limit_s=SENDER_LIMIT_S,
                             spin_us=SENDER_SPIN_US)
        restore: list = []
        try:
            # This process leaves the sender's CPU to the sender (when the sender
            # runs on this machine): when it ran the commands and sampled memory
            # itself, it delayed the sending on it by up to 16 ms at every reload;
            # the runner it starts in namespaces begins on its CPUs. It never takes
            # the firewall's CPU number: that is the firewall host's, which may
            # have more CPUs than this machine (the runner pins there, below).
            if tb.topo.client.host not in tb.other_clocks:
                restore.append(leave_cpu(tb.topo.settings.sender_cpu))
            time.sleep(s.before_s)
            out: dict = {"steps": len(steps)}
            # The update runs on the firewall's host, on its CPU, beside its packet
            # processing, as a firewall's own control plane would (runner.py).
            fw = tb.topo.fw_client_side.host
            spec = {"cpu": tb.topo.settings.firewall_cpu, "timeout_s": STEP_TIMEOUT_S,
                    "steps": [{"argv": tb.executor.on_host(fw, st.argv), "input": st.input}
                              for st in steps]}
            with tb.firewall_change():
                cp = tb.run(fw, [sys.executable, "-m", "fwbench.onhost.update_runner"],
                            input=json.dumps(spec),
                            timeout=STEP_TIMEOUT_S * len(steps) + 60)
            try:
                got = json.loads(cp.stdout)
            except json.JSONDecodeError:
                raise FwbenchError(f"the update runner on {fw} gave no report: "
                                   f"{cp.stdout.strip()[:80]!r}") from None
            if got["problem"]:
                out["problem"] = got["problem"]
            start, end = got["start_ns"], got["end_ns"]
            pre = got["pre"]
            time.sleep(s.after_s)
            out["memory"] = {"update_peak_bytes": got["peak"]["kernel"] - pre["kernel"],
                             "after_update_bytes": _memory(tb)["kernel"] - pre["kernel"],
                             "samples": got["samples"]}
            reports = flows.stop()
            time.sleep(DRAIN_S)
            sink, sr = flows.read()
            out.update(start_ns=start, end_ns=end, kept_sender=reports[0],
                       probe_sender=reports[1], sink=sink, series=sr,
                       path_drops=path_drops(path0, accounting.path_counters(tb)))
            return out
        finally:
            for undo in restore:
                undo()
            flows.close()

    def _metrics(self, k: tpl.Kind, n: int, ran: dict, pps: float) -> dict:
        """The trial's figures from what _under_traffic gathered; a `problem` when
        the probe cannot say when the change took effect, or the instrument failed."""
        if "series" not in ran:
            return {}
        sr = ran["series"]
        base, slot = sr["base_ns"], sr["slot_ns"]
        streams = {d["stream"]: series.Stream.of(d) for d in sr["streams"]}
        ks, ps = ran["kept_sender"], ran["probe_sender"]
        kept_sched = series.Schedule(ks["t0_ns"], ks["offered_pps"], ks["sent"])
        probe_sched = series.Schedule(ps["t0_ns"], ps["offered_pps"], ps["sent"])
        start, end = ran["start_ns"], ran["end_ns"]
        eff = series.probe_effect(streams[1], probe_sched, k.probe == "starts", start, end,
                                  int((ps.get("send_lag_ns") or {}).get("max", 0)))
        kept = series.kept_flow(streams[0], kept_sched, base, slot, start, end)
        # What the path's counters show dropped outside the firewall's rules (both
        # flows together: an upper bound for the kept flow's share), and what is
        # left of the kept flow's loss after them, which only the firewall explains.
        outside = ks.get("refused_by_next_hop", 0) + sum(ran["path_drops"].values())
        kept["lost_outside_rules_at_most"] = outside
        kept["lost_in_firewall_at_least"] = max(0, kept["lost"] - outside)
        m = {
            "update_s": (eff.at_ns - start) / 1e9 if not eff.problem else None,
            "update_resolution_s": eff.half_ns / 1e9,
            "command_s": (end - start) / 1e9,
            "effect_minus_exit_s": (eff.at_ns - end) / 1e9 if not eff.problem else None,
            "steps": ran["steps"], "changed_entries": k.changed(n),
            "kept": kept, "path_drops": ran["path_drops"],
            "probe": {"pps": pps, "sent": ps["sent"], "received": streams[1].received,
                      "send_lag_p99_us": (ps.get("send_lag_ns") or {}).get("p99", 0) / 1e3},
            "kept_send_lag_p99_us": (ks.get("send_lag_ns") or {}).get("p99", 0) / 1e3,
            # A latency peak no larger than this may be the sender's, not the firewall's.
            "kept_send_lag_max_us": (ks.get("send_lag_ns") or {}).get("max", 0) / 1e3,
            "sink": {key: ran["sink"].get(key) for key in
                     ("received", "stale", "early", "malformed", "duplicated")},
            "series": series.kept_series(streams[0], streams[1], kept_sched, base, slot,
                                         start),
        }
        problems = [eff.problem] if eff.problem else []
        if ran["sink"].get("early"):
            problems.append(f"{ran['sink']['early']} packets arrived before they were "
                            f"due: the clocks disagree")
        if not streams[0].received:
            problems.append("the kept flow never arrived")
        if problems:
            m["problem"] = "; ".join(problems)
        return m

    def _after(self, b: Backend, new: RuleSet, snap) -> dict:
        problems = []
        if snap.differences:
            problems.append("the kernel's rule set differs from the new one: "
                            + "; ".join(snap.differences[:3]))
        want = b.expected_entries(new)
        if snap.entries != want:
            problems.append(f"{snap.entries} entries in the kernel, {want} in the new "
                            f"rule set")
        return {"ok": not problems, "reason": "; ".join(problems) or None,
                "entries": snap.entries}

    def line(self, rec: TrialRecord) -> str:
        m = rec.metrics
        kept = m["kept"]
        return (f"in effect after {1e3 * m['update_s']:,.1f} ms "
                f"(+-{1e3 * m['update_resolution_s']:.1f}; command {1e3 * m['command_s']:,.1f}"
                f" ms); kept flow lost {kept['lost']}, longest gap "
                f"{1e3 * kept['max_gap_s']:,.1f} ms")

    def summary(self, records: list[TrialRecord], meta: dict) -> RenderableType:
        return summary_table(records)


def summary_table(records: list[TrialRecord]) -> Table:
    """Medians per cell: update latency, command time, the kept flow's loss and
    longest gap."""
    named = named_cell(FACTORS)
    cells: dict[tuple, list[TrialRecord]] = defaultdict(list)
    for r in records:
        cells[named(*r.cell(FACTORS))].append(r)
    def med(vals) -> str:
        vals = [v for v in vals if v is not None]
        return f"{statistics.median(vals):,.1f}" if vals else "-"

    def row(key) -> list[str]:
        ok = [r for r in cells[key] if r.status == "ok"]
        return [key.backend, f"{key.rules:,}", key.kind, key.mechanism,
                med(1e3 * r.metrics["update_s"] for r in ok),
                med(1e3 * r.metrics["command_s"] for r in ok),
                med(r.metrics["kept"]["lost"] for r in ok),
                med(1e3 * r.metrics["kept"]["max_gap_s"] for r in ok), str(len(ok))]
    return summary.render(
        "update: medians over repetitions (in effect: when the probe flow changed; kept "
        "flow: the flow no update touches)",
        [(col, "left" if col in ("backend", "kind", "mechanism") else "right") for col in (
            "backend", "rules", "kind", "mechanism", "in effect ms", "command ms",
            "kept lost", "longest gap ms", "n ok")],
        (row(key) for key in sorted(cells, key=lambda c: (c.backend, c.rules, c.kind,
                                                          c.mechanism))))
