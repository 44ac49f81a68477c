"""The drop-position experiment (seed 002): `fwbench run` with `method = "droprate"`.

The run loop (experiments.loop) plans `repeat` rounds, each running every treatment
once in a seeded random order, on one testbed whose path is on one CPU (the sender
pinned there, RPS off on the firewall's ingress). A cell is (treatment, set_size,
frame_size). One trial (the one trial pipeline, experiments.base): clear every
firewall, check nothing is left, load the treatment in one step (a netfilter rule
set by its backend), verify the kernel's listing, prove it with a probe of the
flood, then flood for `duration_s`; if another process took the path CPU during the flood, flood again
(up to `attempts` times, every attempt kept in the record). Each record is appended
to trials.jsonl the moment its trial ends; the firewall is cleared after every
trial and when the run stops, however it stops.
"""
from __future__ import annotations

import hashlib
import os
import time

from rich.console import Console, RenderableType

from fwbench import engine, proc
from fwbench.backends import kernel
from fwbench.experiments.droprate import measure
from fwbench.experiments.droprate import report
from fwbench.experiments.droprate.treatments import BPF_OBJECT, Target, Treatment, build, clear, leftovers
from fwbench.errors import FwbenchError
from fwbench.experiments.base import Experiment, Planned, Trial
from fwbench.ruleset.model import RuleSet
from fwbench.plan import TrialKey
from fwbench.results import TrialRecord
from fwbench.scenario import Scenario
from fwbench.testbed.base import Testbed
from fwbench.testbed.topology import Topology

METHOD = "droprate"
# Before flooding again after another process shared the path CPU.
_RETRY_PAUSE_S = 1.0
# The testbed, the flood's tools and what reads the counters, with their packages.
def treatments(sc: Scenario) -> list[Treatment]:
    d = sc.droprate
    return build(d.treatments, d.set_sizes, d.nonmatching_rules)


def target(tb: Testbed, sc: Scenario) -> Target:
    t = tb.topo
    return Target(t.fw_client_side.ifname, t.client.ip4, t.fw_client_side.ip4,
                  text=sc.droprate.payload_text, nonmatching=sc.droprate.nonmatching_rules,
                  hashlimit_pps=sc.droprate.hashlimit_above_pps, bpf_object=str(BPF_OBJECT),
                  server_ifname=t.fw_server_side.ifname)


def preflight_treatments(trs: list[Treatment], path_cpu: int) -> None:
    """Everything the chosen treatments need, or one line saying what is missing."""
    ncpu = os.cpu_count() or 1
    if path_cpu >= ncpu:
        raise FwbenchError(f"droprate.cpu: CPU {path_cpu} does not exist "
                           f"(this machine has {ncpu})")
    for tr in trs:
        if why := tr.unavailable():
            raise FwbenchError(f"treatment {tr.id} cannot run here: {why}")


def versions() -> dict[str, str | None]:
    v = proc.version_line
    return {"iptables": v(["iptables-legacy", "-V"]), "nft": v(["nft", "-v"]),
            "ipset": v(["ipset", "-v"]), "tc": v(["tc", "-V"]),
            "conntrack": v(["conntrack", "-V"]), "bpftool": v(["bpftool", "version"]),
            "fwbench-engine": engine.version()}


def _topology(sc: Scenario) -> Topology:
    """One CPU for the whole path (seed 002's model): RPS off on both ingresses."""
    c = sc.droprate.cpu
    settings = sc.testbed.model_copy(update={"sender_cpu": c, "firewall_cpu": c,
                                             "server_cpu": c})
    return Topology.new(settings, firewall_rps=False, server_rps=False)


class DropRate(Experiment):
    """Where to drop a UDP flood, and what accepting it costs."""
    tools = {"ip": "iproute2", "ethtool": "ethtool", "sysctl": "procps",
             "conntrack": "conntrack", "iptables-legacy": "iptables"}
    factors = ("treatment", "set_size", "frame_size")

    def __init__(self, sc: Scenario):
        super().__init__(sc)
        self.trs = {tr.key: tr for tr in treatments(sc)}
        self.target: Target | None = None
        self._files: dict[str, str] = {}    # what the trial's treatment feeds the kernel

    def over_ssh(self) -> str | None:
        return ("method droprate puts the sender and the firewall on one CPU (seed 002's "
                "setup: what the firewall spends on the flood shows as what the sender "
                "loses), which hosts of their own do not share; run it with the netns "
                "provider")

    def over_round_trips(self) -> str | None:
        return "droprate's flood is counted, not timed"

    def preflight(self) -> None:
        super().preflight()
        preflight_treatments(list(self.trs.values()), self.sc.droprate.cpu)

    def plan(self) -> Planned:
        frame = self.sc.frame_sizes[0]
        return Planned(self.sc, [(tr.id, tr.size, frame) for tr in self.trs.values()])

    def versions(self, planned: Planned) -> dict[str, str | None]:
        return versions()

    def topology(self) -> Topology:
        return _topology(self.sc)

    def open(self, tb: Testbed, plan: list[TrialKey], console: Console) -> dict:
        t = self.target = target(tb, self.sc)
        # Register raw and filter up front: a legacy table stays registered (its hooks
        # run for every packet) once anything touches it, so which treatments ran
        # earlier must not decide which hooks the next one pays for.
        kernel.register_xt_tables(tb, kernel.xt("legacy", 4), ("raw", "filter"))
        return {"target": {"dst": t.fw_ip, "dport": t.port, "ifname": t.ifname,
                           "payload_text": t.text},
                "xt_tables_registered": ["raw", "filter"]}

    def close(self, tb: Testbed) -> None:
        if self.target is not None:
            clear(tb, self.target)

    def cell_label(self, key: TrialKey) -> str:
        tr = self._treatment(self.cell(key))
        return tr.label(self.target) if self.target is not None else tr.id

    def _treatment(self, c) -> Treatment:
        return self.trs[(c.treatment, c.set_size)]

    # --- the trial's hooks (Experiment.run_trial) ------------------------------------

    # seed 002's records name the load's phase so (clear_s before it)
    load_phase = "load_s"

    def ruleset(self, c) -> RuleSet:
        return self._treatment(c).ruleset(self.target)

    def prepare(self, tb: Testbed, t: Trial, c, step) -> None:
        self._files = {}
        self._files = self._treatment(c).render(self.target)
        t.timed("clear_s", clear, tb, self.target)
        if left := leftovers(tb, self.target):
            raise FwbenchError(f"clearing the firewall left {', '.join(left)}")

    def load(self, tb: Testbed, c) -> float | None:
        return self._treatment(c).apply(tb, self.target)

    def verify(self, tb: Testbed, c):
        return measure.listing(tb, self._treatment(c), self.target, self._files)

    def prove(self, tb: Testbed, t: Trial, c, say) -> None:
        """A probe of flood packets ends where the treatment says. Seed 002's records
        keep what it saw in the verification, beside the listing."""
        p = t.timed("prove_s", measure.prove, tb, self._treatment(c), self.target,
                    c.frame_size, self.sc.droprate.probe_packets)
        t.verification.setdefault("details", {}).update(p.details)
        if not p.ok:
            t.verification.update(ok=False, reason=p.reason)
            t.fail(f"verification: {p.reason}")

    def measure(self, tb: Testbed, t: Trial, c, say) -> None:
        """The flood; flooded again (up to `attempts` times, every attempt kept)
        when another process took the path CPU during it."""
        d, tr = self.sc.droprate, self._treatment(c)
        attempts = t.trials
        for n in range(d.attempts):
            if n:
                time.sleep(_RETRY_PAUSE_S)
            m, problems = t.timed(f"flood_{n}_s", measure.flood, tb, tr, self.target,
                                  c.frame_size, self.sc.duration_s, d.cpu, d.min_cpu_share)
            attempts.append({"attempt": n, "problems": problems, **m})
            if not any(p.startswith("the path CPU was shared") for p in problems):
                break
        t.metrics = {k: v for k, v in attempts[-1].items()
                     if k not in ("attempt", "problems")}
        if attempts[-1]["problems"]:
            t.fail("; ".join(attempts[-1]["problems"]), "invalid")

    def release(self, tb: Testbed, t: Trial, c) -> None:
        clear(tb, self.target)

    def recorded_as(self, c) -> tuple[str, str]:
        return METHOD, "engine"

    def digest(self, c) -> str:
        # Of what was fed to the kernel: the rendering, or the BPF attach commands.
        return hashlib.sha256("".join(f"{k}\n{v}" for k, v in sorted(self._files.items()))
                              .encode()).hexdigest()

    def conditions(self, tb: Testbed, c) -> dict:
        d, t, tr = self.sc.droprate, self.target, self._treatment(c)
        return {"group": tr.group, "label": tr.label(t), "duration_s": self.sc.duration_s,
                "path_cpu": d.cpu, "payload_text": t.text, "dst": t.fw_ip, "dport": t.port}

    def line(self, rec: TrialRecord) -> str:
        m = rec.metrics
        extra = f", {len(rec.trials)} attempts" if len(rec.trials) > 1 else ""
        return (f"{m['disposed_pps']:,.0f} pps, {m['cpu_ns_per_pkt']:,.0f} ns/pkt "
                f"({m['softirq_ns_per_pkt']:,.0f} in softirq){extra}")

    def summary(self, records: list[TrialRecord], meta: dict) -> RenderableType:
        return report.render(records, meta)
