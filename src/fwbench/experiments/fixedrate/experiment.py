"""`fixedrate` as an experiment: seed 003's flows per backend, rule count and frame
size, with two more factors of the seed's design:

- `chain`: "forward", the rules in FORWARD and the flow to the server (counted by
  the engine's XDP sink on the server's port, after the firewall); or "input", the
  rules in INPUT and the flow to the firewall's own client-side address (the firewall
  as the endpoint, as seed 003's receiver was the firewall VM itself). There the
  firewall's own count of packets past its input hook (IP InDelivers in its
  namespace) is what it processed; the engine's socket receiver in the firewall
  namespace takes the packets in (no ICMP port-unreachable for each) and its count
  is kept beside it. An XDP sink there would count before the rules.
- `cpus`: how many CPUs RPS spreads the firewall's receive processing over (the
  firewall CPU first, then the lowest others), set on the firewall's ingress before
  each trial. RPS hashes a flow to one CPU, so more than one CPU spreads only
  several flows (`[engine] flows`, source ports); on a 2-CPU machine the second is
  the sender's own CPU. Each trial records the mask written and each CPU's softirq
  share, so what actually happened is in the record.

A trial: steer, flush and load the chain's rule set, verify it (its probes go to the
firewall's address for INPUT and are proven by the rules' counters), measure, and
in the largest rule count's cells bisect for the degradation point (fixedrate).
"""
from __future__ import annotations

import os
import statistics
from collections import defaultdict

from rich.console import Console, RenderableType
from rich.table import Table

from fwbench import summary
from fwbench.backends.base import Backend
from fwbench.errors import FwbenchError
from fwbench.experiments.base import Planned, Trial, disturbed_of
from fwbench.experiments.fixedrate import stats
from fwbench.experiments.sweep.experiment import Sweep
from fwbench.experiments.fixedrate.method import FixedRate, delivered_by
from fwbench.plan import TrialKey
from fwbench.results import TrialRecord
from fwbench.ruleset.model import RuleSet, Unsupported
from fwbench.ruleset.templates.seed000 import seed000
from fwbench.testbed.base import Testbed
from fwbench.traffic.native import EngineTraffic, Flow

FACTORS = ("backend", "rules", "frame_size", "chain", "cpus")


def steered_cpus(cpus: int, firewall_cpu: int, ncpu: int) -> list[int]:
    """The CPUs RPS spreads the firewall's ingress over: the firewall CPU, then the
    lowest others."""
    if not 1 <= cpus <= ncpu:
        raise FwbenchError(f"fixedrate: {cpus} CPUs asked for the firewall; the "
                           f"firewall's machine has {ncpu}")
    return [firewall_cpu] + [c for c in range(ncpu) if c != firewall_cpu][:cpus - 1]


def steer(tb: Testbed, cpus: int) -> dict:
    """Write the RPS mask for `cpus` CPUs on the firewall's ingress ports and read it
    back: what the record keeps."""
    fw = tb.topo.fw_client_side.host
    chosen = steered_cpus(cpus, tb.topo.settings.firewall_cpu, tb.cpus(fw))
    mask = sum(1 << c for c in chosen)
    got = {}
    for port in tb.firewall_ingress():
        path = f"/sys/class/net/{port.ifname}/queues/rx-0/rps_cpus"
        tb.exec(port.host, ["sh", "-c", f"echo {mask:x} > {path}"])
        got[port.ifname] = tb.exec(port.host, ["cat", path]).strip()
    return {"cpus": chosen, "mask": f"{mask:x}", "rps_cpus": got}


class FixedRateSweep(Sweep):
    """Backends x rule counts x frame sizes x chains x CPU counts, one fixedrate
    measurement per cell."""

    factors = FACTORS

    def __init__(self, sc):
        super().__init__(sc)
        self.methods: dict[str, FixedRate] = {}
        self.cached: dict[tuple, RuleSet] = {}
        # The firewall carries its own traffic (a real host's SSH session): the INPUT
        # rule set lets it through, and the INPUT flow is counted by UDP (open()).
        self.host_traffic = False
        self._steered: dict = {}     # the trial's RPS steering, for its record

    def over_ssh(self) -> str | None:
        return None

    def over_round_trips(self) -> str | None:
        if "input" in self.sc.fixedrate.chains:
            return ("fixedrate's INPUT flow ends in a socket on the firewall, which sends "
                    "nothing back (across machines its latency is not timed)")
        return super().over_round_trips()

    def preflight(self) -> None:
        super().preflight()
        if self.sc.testbed.provider == "netns":   # a real firewall's CPUs: at steer()
            ncpu = os.cpu_count() or 1
            for c in self.sc.fixedrate.cpus:
                steered_cpus(c, self.sc.testbed.firewall_cpu, ncpu)

    def plan(self) -> Planned:
        p = super().plan()
        fr = p.scenario.fixedrate
        chains = [c for c in ("forward", "input") if c in fr.chains]
        cpus = sorted(set(fr.cpus))
        if "input" in chains:
            for name in p.scenario.backends:
                b = self.backend(name)
                try:
                    b.refuse_unsupported(seed000(1, layout=b.layout, chain="input"))
                except Unsupported as e:
                    raise FwbenchError(f"chain input: {e}") from None
        cells = [(*c, chain, n) for c in p.cells for chain in chains for n in cpus]
        meta = {**p.meta, "fixedrate": {
            "chains": chains, "cpus": cpus,
            "input_flow": "to the firewall's client-side address, received by the "
                          "engine's socket receiver in the firewall namespace; processed "
                          "= its IP InDelivers (on a host carrying its own traffic, UDP's "
                          "intake: each trial's conditions say which)",
            "forward_flow": "to the server, counted by the engine's receiver there"}}
        return Planned(p.scenario, cells, meta, p.notes)

    def open(self, tb: Testbed, plan: list[TrialKey], console: Console) -> dict:
        ncpu = tb.cpus(tb.topo.fw_client_side.host)   # a real firewall's, before any trial
        for c in self.sc.fixedrate.cpus:
            steered_cpus(c, self.sc.testbed.firewall_cpu, ncpu)
        info = super().open(tb, plan, console)
        fwd: FixedRate = self.method_
        sc = self.sc
        top = tb.topo.fw_client_side
        # The INPUT flow: to the firewall's own address, received by a socket there
        # (an XDP sink on that port would count before the rules).
        engine = EngineTraffic(sc.engine.model_copy(update={"receiver": "recv"}),
                               Flow(dst=top.ip4, at="fw"))
        engine.via = fwd.engine.via
        self.host_traffic = tb.own_traffic
        inp = FixedRate(engine, sc.fixedrate, max(sc.rules), count_delivered=True)
        inp.ceilings.update(fwd.ceilings)
        self.methods = {"forward": fwd, "input": inp}
        info["input_receiver"] = {"kind": "recv", "namespace": "fw", "bind": top.ip4,
                                  "cpu": tb.topo.settings.server_cpu}
        return info

    def close(self, tb: Testbed) -> None:
        for m in self.methods.values():
            m.engine.close()

    def cell_label(self, key: TrialKey) -> str:
        c = self.cell(key)
        rules = "" if c.backend == "none" else f" N={c.rules}"
        return f"{c.backend}{rules} {c.frame_size}B {c.chain} {c.cpus}cpu"

    def _rules(self, n: int, backend: Backend, chain: str) -> RuleSet:
        n = max(n, 1)  # `none` still needs a test flow to probe
        host = self.host_traffic and chain == "input"
        key = (n, backend.layout, chain, host)
        if key not in self.cached:
            self.cached[key] = seed000(n, version=self.sc.version, layout=backend.layout,
                                       counters=self.sc.policy.counters, chain=chain,
                                       host_traffic=host)
        return self.cached[key]

    def _verify(self, tb: Testbed, backend: Backend, rs: RuleSet):
        # Every receiver stopped: an XDP sink on the server's port hides packets from
        # the capture, and the INPUT socket would take the probes meant for the rules.
        for m in self.methods.values():
            m.engine.close()
        return backend.verify(tb, rs)

    # --- the trial's hooks (Experiment.run_trial) ------------------------------------

    def ruleset(self, c) -> RuleSet:
        return self._rules(c.rules, self.backend(c.backend), c.chain)

    def prepare(self, tb: Testbed, t: Trial, c, step) -> None:
        self.methods[c.chain].on_step = step
        self._steered = {}
        self._steered = steer(tb, c.cpus)

    def standing(self, c) -> dict | None:
        return None     # every trial steers, loads and verifies anew

    def verify(self, tb: Testbed, c):
        return self._verify(tb, self.backend(c.backend), self.ruleset(c))

    def measure(self, tb: Testbed, t: Trial, c, say) -> None:
        backend, method = self.backend(c.backend), self.methods[c.chain]

        def reload(n: int) -> None:
            other = self._rules(n, backend, c.chain)
            backend.apply(tb, other)
            v = self._verify(tb, backend, other)
            if not v.ok:
                raise FwbenchError(f"verification at {n} rules: {v.reason}")
        disturbed_of(method)    # none of an earlier trial's
        t.metrics = t.timed("measure_s", lambda: method.run(
            tb, c.frame_size, self.sc.duration_s, rules=c.rules, reload=reload))
        t.trials = t.metrics.pop("trials", [])
        t.metrics.update(disturbed_of(method))

    def failed(self, tb: Testbed, t: Trial, c) -> None:
        if t.status == "invalid" or "measure_s" in t.phases:
            self.methods[c.chain].restart(tb)

    def release(self, tb: Testbed, t: Trial, c) -> None:
        pass            # nothing stays loaded for the next trial

    def recorded_as(self, c) -> tuple[str, str]:
        method = self.methods[c.chain]
        return method.name, method.traffic

    def conditions(self, tb: Testbed, c) -> dict:
        sc, rs = self.sc, self.ruleset(c)
        return {"duration_s": sc.duration_s, "policy_template": sc.policy.template,
                "family": sc.family, "ruleset": rs.name,
                "counters": sc.policy.counters, "chain": c.chain,
                "flow_dst": rs.flow.daddr, "receiver": (
                    f"engine recv socket on the firewall; processed = "
                    f"{delivered_by(tb)} there" if c.chain == "input" else
                    f"engine {sc.engine.receiver} on the server"),
                "engine_flows": sc.engine.flows, "steering": self._steered}

    def summary(self, records: list[TrialRecord], meta: dict) -> RenderableType:
        return summary_table(records)


def summary_table(records: list[TrialRecord]) -> Table:
    """Median processed pps and loss per cell, and each group's degradation point."""
    cells: dict[tuple, list[TrialRecord]] = defaultdict(list)
    for r in records:
        cells[r.cell(FACTORS)].append(r)
    points = stats.degradation_points(records)

    def row(b, n, f, chain, cpus) -> list[str]:
        ok = [r for r in cells[(b, n, f, chain, cpus)] if r.status == "ok"]
        pps = [r.metrics["processed_pps"] for r in ok]
        loss = [100 * r.metrics["loss_ratio"] for r in ok]
        d = points.get((b, f, chain, cpus))
        where = "-" if d is None or b == "none" else stats.bracket_text(d)
        return [str(f), chain, str(cpus), b, f"{n:,}" if b != "none" else "-",
                f"{statistics.median(pps):,.0f}" if pps else "-",
                f"{statistics.median(loss):.2f}" if loss else "-", str(len(ok)), where]
    return summary.render(
        "fixedrate: median over repetitions (seed 003's flows; frame size incl. FCS)",
        [(col, "left" if col in ("backend", "chain") else "right") for col in (
            "frame", "chain", "cpus", "backend", "rules", "processed pps", "loss %",
            "n ok", "loss begins (rules)")],
        (row(*k) for k in sorted(cells, key=lambda k: (k[2], k[3], k[4], k[0], k[1]))))
