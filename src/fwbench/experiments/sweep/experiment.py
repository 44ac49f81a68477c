"""The rule-count sweeps as an experiment: maxrate, throughput, latency, lossload,
fixedrate and cpucost, each a method measuring one cell (backend x rule count x frame
size).

The order of work inside one trial: flush every firewall, load the rule set in one
step, verify what the kernel holds, and only then measure. A trial whose
verification fails is recorded as `failed` with the reason and never measured. Once
per testbed session, with no firewall loaded, the engine is calibrated: its own
latency and the sender's ceiling per frame size.
"""
from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console, RenderableType

from fwbench import backends as registry
from fwbench import summary
from fwbench.backends.base import Backend
from fwbench.backends.kernel import flush_all
from fwbench.check import confirm_original
from fwbench.errors import FwbenchError
from fwbench.experiments.base import Experiment, Planned, Refusal, Trial, disturbed_of
from fwbench.frames import min_frame
from fwbench.methods.base import Method
from fwbench.experiments.sweep.cpucost import CpuCost
from fwbench.experiments.fixedrate.method import FixedRate
from fwbench.experiments.sweep.latency import Latency
from fwbench.experiments.sweep.lossload import LossLoad
from fwbench.experiments.sweep.maxrate import MaxRate
from fwbench.experiments.sweep.throughput import Throughput
from fwbench.plan import TrialKey, named_cell, sweep_cells
from fwbench.results import TrialRecord
from fwbench.ruleset import flows
from fwbench.ruleset.evaluate import Evaluator
from fwbench.ruleset.model import Packet, RuleSet, Unsupported
from fwbench.ruleset.templates.seed000 import seed000
from fwbench.scenario import Scenario, from_dict
from fwbench.testbed.base import Testbed
from fwbench.testbed.topology import Topology
from fwbench.traffic.native import EngineTraffic, Flow
from fwbench.traffic.iperf3 import Iperf3Rate
from fwbench.traffic.ping import PingRtt


class Sweep(Experiment):
    """Backends x rule counts x frame sizes, one method (the scenario's) per cell."""
    # What the testbed and the maxrate instruments run (the engine's binary is
    # checked where its traffic is made: a sweep of iperf3 runs none).
    tools = {"ip": "iproute2", "ss": "iproute2", "ethtool": "ethtool", "sysctl": "procps",
             "taskset": "util-linux", "iperf3": "iperf3", "ping": "iputils-ping"}
    uses_engine = False

    def __init__(self, sc: Scenario):
        super().__init__(sc)
        self.method_ = None     # the method with its instruments, made by open()
        self.rulesets: dict[tuple, RuleSet] = {}
        self.kept: Kept | None = None   # what stays loaded (keep_loaded), and its proof
        self._kept: Kept | None = None  # what the trial running found loaded
        self._reloads: list[int] = []

    def over_ssh(self) -> str | None:
        return None

    def over_round_trips(self) -> str | None:
        if self.sc.method == "cpucost":
            return ("method cpucost's figure is the firewall's CPU per packet, and the "
                    "reflected packets' way back would be in it")
        if self.sc.traffic != "engine":
            return f"traffic {self.sc.traffic} has no round-trip mode; the engine has"
        return None

    def preflight(self) -> None:
        super().preflight()
        make_method(self.sc)    # settings a search would reject, rejected now
        self.choose_backends((), Refusal.unavailable)   # those it names, here


    def plan(self) -> Planned:
        sc = self.sc
        names, skipped = self.choose_backends(registry.names(), self._refusal)
        if not names:
            raise FwbenchError("no backend can run here: " +
                               "; ".join(f"{k}: {v}" for k, v in skipped.items()))
        rs = imported(sc)
        resolved = from_dict({**sc.dump(), "backends": names,
                              **({"rules": [rs.rule_count]} if rs else {})})
        meta: dict = {"skipped_backends": skipped}
        if rs is not None:
            meta["ruleset"] = {
                "file": sc.policy.file, "rules": rs.rule_count, "sha256": rs.digest(),
                "address_map": [list(m) for m in rs.address_map],
                "iface_map": [list(m) for m in rs.iface_map],
                "flow": {"proto": rs.flow.proto, "src": rs.flow.saddr,
                         "dst": rs.flow.daddr, "dport": rs.flow.dport,
                         "rule": rs.flow_rule},
                "notes": list(rs.notes),
                "original": confirm_original(rs, sc.policy.file, sc.policy.ipsets)}
        self.sc = resolved
        return Planned(resolved, sweep_cells(names, resolved.rules, resolved.frame_sizes),
                       meta, [f"skipping backend {n}: {why}" for n, why in skipped.items()])

    def _refusal(self, b: Backend) -> Refusal | None:
        """Why the backend cannot run the sweep here; a rule count above what it
        holds is an error whichever backends were asked for."""
        if r := Refusal.unavailable(b) or Refusal.same(_refusal(b, self.sc)):
            return r
        too_big = [n for n in self.sc.rules if n > b.max_rules]
        if b.filters and too_big:
            raise FwbenchError(f"backend {b.name} holds at most {b.max_rules:,} rules "
                               f"in fwbench; {max(too_big):,} asked")
        return None

    def versions(self, planned: Planned) -> dict[str, str | None]:
        out = dict(make_method(planned.scenario).versions())
        out.update(self.backend_versions(planned.scenario.backends))
        return out

    def topology(self) -> Topology:
        return Topology.new(testbed_settings(self.sc), server_rps=self.sc.traffic == "iperf3")

    def blocks(self):
        # keep_loaded: one backend's rule set at every frame size, back to back
        if not self.sc.keep_loaded:
            return None
        named = named_cell(self.factors)
        return lambda cell: (named(*cell).backend, named(*cell).rules)

    def open(self, tb: Testbed, plan: list[TrialKey], console: Console) -> dict:
        self.kept = None        # a new testbed holds nothing yet
        method = self.method_ = make_method(self.sc)
        method.prepare(tb)
        engine = _engine_of(method)
        if engine is None:
            return {}
        flush_all(tb)
        sender = engine.resolve_sender(tb, min_frame(self.sc.version),
                                       open_throttle(self.sc))
        if sender.get("xdp_unavailable"):
            console.print(f"the XDP sender does not work here ({sender['xdp_unavailable']}):"
                          f" sending with the packet socket", highlight=False)
            restore_ingress_gro(tb, self.sc)
        console.print(f"calibrating the engine with no firewall: latency bias, sender "
                      f"ceiling ({sender['sender']} sender)")
        cal = calibrate(tb, engine, self.sc.frame_sizes, self.sc.version)
        method.ceilings.update({int(f): v for f, v in cal["sender_ceiling_pps"].items()})
        return {"engine": {**cal, **sender}}

    def close(self, tb: Testbed) -> None:
        if self.method_ is not None:
            self.method_.close()    # cpucost's soaker would spin on the firewall CPU

    def environment(self, session: dict) -> dict:
        return {"engine_bias": session["engine"]["bias"]} if "engine" in session else {}

    def cell_label(self, key: TrialKey) -> str:
        c = self.cell(key)
        return f"{c.backend} {c.frame_size}B" if c.backend == "none" else \
            f"{c.backend} N={c.rules} {c.frame_size}B"

    # --- the trial's hooks (Experiment.run_trial) ------------------------------------

    def ruleset(self, c) -> RuleSet:
        return _ruleset_for(c.rules, self.backend(c.backend), self.sc, self.rulesets)

    def prepare(self, tb: Testbed, t: Trial, c, step) -> None:
        self.method_.on_step = step
        self._reloads: list[int] = []   # rule counts a search loaded during the trial
        self._kept, self.kept = (self.kept if self.sc.keep_loaded else None), None

    def standing(self, c) -> dict | None:
        """With `kept` holding this backend's rule set (loaded and verified by an
        earlier ok trial, with nothing run in between but measurements), nothing is
        loaded or verified again: the record's verification is that trial's, marked
        `kept_from`, and its load time is None (measured once, by that trial)."""
        k = self._kept
        if k is not None and k.holds(self.backend(c.backend), self.ruleset(c)):
            return {**k.verification, "kept_from": k.trial}
        return None

    def verify(self, tb: Testbed, c):
        return verify_with_sink_off(tb, self.backend(c.backend), self.ruleset(c),
                                    self.method_)

    def measure(self, tb: Testbed, t: Trial, c, say) -> None:
        method = self.method_
        reload = self._reloader(tb, c)

        def counted(n: int) -> None:
            self._reloads.append(n)
            reload(n)
        disturbed_of(method)    # none of an earlier trial's
        t.metrics = t.timed("measure_s", lambda: method.run(
            tb, c.frame_size, self.sc.duration_s, rules=c.rules, reload=counted))
        t.trials = t.metrics.pop("trials", [])
        t.metrics.update(disturbed_of(method))

    def _reloader(self, tb: Testbed, c):
        """For methods that search over the rule count: load and verify n rules."""
        backend = self.backend(c.backend)

        def reload(n: int) -> None:
            rs = _ruleset_for(n, backend, self.sc, self.rulesets)
            backend.apply(tb, rs)
            v = verify_with_sink_off(tb, backend, rs, self.method_)
            if not v.ok:
                raise FwbenchError(f"verification at {n} rules: {v.reason}")
        return reload

    def failed(self, tb: Testbed, t: Trial, c) -> None:
        # A broken test can leave iperf3's server busy; after a measurement began,
        # the receiver may be what failed.
        if t.status == "invalid" or "measure_s" in t.phases:
            self.method_.restart(tb)

    def release(self, tb: Testbed, t: Trial, c) -> None:
        # keep_loaded: an ok trial leaves its rule set for the next of its block,
        # unless a search loaded others during it (then what stands is not it).
        if self.sc.keep_loaded and t.status == "ok" and not self._reloads:
            backend, rs, k = self.backend(c.backend), self.ruleset(c), self._kept
            self.kept = k if k is not None and k.holds(backend, rs) \
                else Kept(backend.name, rs.digest(), t.idx, t.verification)

    def recorded_as(self, c) -> tuple[str, str]:
        return self.method_.name, self.method_.traffic

    def digest(self, c) -> str | None:
        return self.ruleset(c).digest() if self.backend(c.backend).filters else None

    def conditions(self, tb: Testbed, c) -> dict:
        sc = self.sc
        return {"duration_s": sc.duration_s, "policy_template": sc.policy.template,
                "family": sc.family, "ruleset": self.ruleset(c).name,
                "counters": sc.policy.counters}

    def line(self, rec: TrialRecord) -> str:
        subs = f" ({len(rec.trials)} sub-trials)" if rec.trials else ""
        return f"{self.method_.line(rec.metrics)}{subs}"

    def summary(self, records: list[TrialRecord], meta: dict) -> RenderableType:
        return summary.table(records, registry.names())


def testbed_settings(sc: Scenario):
    """The scenario's testbed, with GRO on the firewall's ingress when the XDP sender
    may be used (veth hands XDP frames only to a peer in NAPI mode). The same for
    every backend of the run, so their comparison stays fair: bench/ingress_gro.py
    measures what it changes (the firewall-bound rates not at all, within noise)."""
    if sc.traffic == "engine" and not sc.testbed.ingress_gro and (
            sc.engine.sender == "xdp" or (sc.engine.sender == "auto" and open_throttle(sc))):
        return sc.testbed.model_copy(update={"ingress_gro": True})
    return sc.testbed


def open_throttle(sc: Scenario) -> bool:
    """Does the method send at open throttle (where `auto` uses the XDP sender)?"""
    return sc.method == "maxrate"


def restore_ingress_gro(tb: Testbed, sc: Scenario) -> None:
    """GRO at the firewall's ingress back to what the scenario asked, when it was on
    only for an XDP sender that is not used after all; the record says so."""
    if sc.testbed.ingress_gro:
        return
    state = "on" if sc.testbed.offloads else "off"
    for port in tb.firewall_ingress():
        tb.exec(port.host, ["ethtool", "-K", port.ifname, "gro", state])
        tb.recorded.setdefault("offloads", {}).setdefault(tb.port_name(port), {})["gro"] = state


_imports: dict[tuple, RuleSet] = {}


def imported(sc: Scenario) -> RuleSet | None:
    """The scenario's own rule set (`policy.file`), imported once, with its measured
    flow chosen; None when the scenario uses the template."""
    p = sc.policy
    if p.file is None:
        return None
    key = (p.file, p.iface, p.ipsets, p.flow)
    if key not in _imports:
        from fwbench.check import ruleset_from
        rs = ruleset_from(path=p.file, iface=p.iface, ipsets=p.ipsets)
        _imports[key] = flows.choose(rs, p.flow)
    return _imports[key]


def _refusal(b: Backend, sc: Scenario) -> str | None:
    """Why the backend cannot hold the scenario's rule set (one line), or None."""
    rs = imported(sc) or seed000(1, version=sc.version, layout=b.layout)
    try:
        b.refuse_unsupported(rs)
    except Unsupported as e:
        return str(e)
    return None


def measured_flow(sc: Scenario) -> dict:
    """The engine's flow: the rule set's measured flow, and its port on arrival."""
    rs = imported(sc) or seed000(1, version=sc.version)
    f = rs.flow
    arrives = Evaluator(rs).evaluate(f).translated
    return {"src": f.saddr, "dst": f.daddr, "dport": f.dport, "sink_port": arrives.dport}


def ping_unavailable(sc: Scenario) -> str | None:
    """Why ping cannot measure through the rule set, if it cannot: an imported rule
    set may drop the client's echo request to the server, or its reply."""
    rs = imported(sc)
    if rs is None:
        return None   # the templates accept the echo and its reply
    v = sc.version
    ev = Evaluator(rs)
    icmp, (req, rep) = ("icmp", (8, 0)) if v == 4 else ("icmpv6", (128, 129))
    ask = ev.evaluate(Packet(v, "client", flows.CLIENT[v], flows.SERVER[v], icmp,
                             icmp_type=req))
    if not ask.forward:
        return f"the rule set drops ping's echo request ({ask.reason})"
    ans = ev.evaluate(Packet(v, "server", flows.SERVER[v], flows.CLIENT[v], icmp,
                             icmp_type=rep, ct_state="established"))
    if not ans.forward:
        return f"the rule set drops ping's echo reply ({ans.reason})"
    return None


# The sweep's methods, one per scenario method it runs (each's `name`).
METHODS: tuple[type[Method], ...] = (MaxRate, Throughput, Latency, LossLoad, FixedRate,
                                     CpuCost)


def make_method(sc: Scenario) -> Method:
    """The scenario's method with its instruments. Settings a search would reject are
    rejected here, before a testbed is built."""
    ins = sc.instrument
    ping = PingRtt(ins.ping_count, ins.ping_interval_s, sc.version, ping_unavailable(sc))
    if sc.traffic == "iperf3":
        if sc.version == 6 or sc.policy.file:
            raise FwbenchError("iperf3 traffic measures seed 000's IPv4 flow only; use "
                               "traffic = engine with --family ipv6 or --ruleset")
        return MaxRate(Iperf3Rate(ins.iperf3_streams), ping)
    cls = next((c for c in METHODS if c.name == sc.method), None)
    if cls is None:
        raise FwbenchError(f"unknown method {sc.method}")
    if (sc.version == 6 or sc.policy.file) and not cls.any_flow:
        *some, last = [c.name for c in METHODS if c.any_flow]
        raise FwbenchError(f"method {sc.method} measures seed 000's IPv4 flow only; "
                           f"use {', '.join(some)} or {last} with --family "
                           f"ipv6 or --ruleset")
    return cls.for_scenario(sc, EngineTraffic(sc.engine, Flow(**measured_flow(sc))), ping)


def _ruleset_for(rules: int, backend: Backend, sc: Scenario, cache: dict) -> RuleSet:
    """Seed 000's rule set of `rules` entries, held the way `backend` holds them."""
    own = imported(sc)
    if own is not None:
        return own
    n = max(rules, 1)  # `none` still needs a test flow to probe
    key = (n, backend.layout)
    if key not in cache:
        cache[key] = seed000(n, version=sc.version, layout=backend.layout,
                             counters=sc.policy.counters)
    return cache[key]


def verify_with_sink_off(tb: Testbed, backend: Backend, rs: RuleSet, method):
    """Verify with the engine's receiver stopped: its XDP sink on the server's port
    would take the probes before the capture sees them. The next measurement starts
    a fresh one (it is armed per trial anyway)."""
    engine = _engine_of(method)
    if engine is not None:
        engine.close()
    return backend.verify(tb, rs)


def _engine_of(method) -> EngineTraffic | None:
    return method.engine if isinstance(method.engine, EngineTraffic) else None


def calibrate(tb: Testbed, engine: EngineTraffic, frame_sizes: list[int],
              version: int = 4) -> dict:
    """Measured once per testbed session with every firewall flushed:

    - the engine's own latency (no firewall, 1,000 pps for 1 s): what the instrument
      itself adds (sender, two veth hops, forwarding without rules, the sink), so
      latency figures can be read against it;
    - the sender's ceiling per frame size (open throttle, 0.5 s): the top of every
      search. Measured here because through a saturated firewall the sender slows
      down (each refused frame costs it a system call)."""
    flush_all(tb)
    smallest = min_frame(version)   # 64 B; IPv6's header needs 84
    r = engine.measurer(tb, smallest).measure(1.0, 1000)
    bias = {"frame_size": smallest, "offered_pps": 1000, "duration_s": 1.0,
            ("round_trip_us" if r.extra.get("latency_kind") == "round trip" else
             "one_way_us"): r.latency_us, "send_lag_us": r.extra.get("send_lag_us"),
            "loss_ratio": r.loss_ratio, "receiver": r.extra.get("receiver")}
    ceilings = {str(f): engine.measurer(tb, f).measure(0.5, 0).achieved_pps
                for f in sorted(set(frame_sizes))}
    return {"bias": bias, "sender_ceiling_pps": ceilings}


@dataclass(frozen=True)
class Kept:
    """A rule set left loaded after an ok trial (scenario `keep_loaded`): the next
    trial of the same backend and rule set measures it as it stands, its record
    pointing at the trial whose load and verification it relies on."""
    backend: str
    digest: str
    trial: int                  # the plan position that loaded and verified it
    verification: dict

    def holds(self, backend: Backend, rs: RuleSet) -> bool:
        return self.backend == backend.name and self.digest == rs.digest()
