"""The load-latency experiment (seed 004): `fwbench run` with `method = "loadlatency"`.

A cell is (rule set, backend, load, conntrack entries). One trial: flush every
firewall and the connection table, load the rule set in one step, verify it with
its probes (NAT translations included), prove with a real TCP connection that NAT
and connection tracking happened (statecheck), fill the connection table with the
cell's background entries, then start the load (iperf3 --bidir, both ways through
the firewall) and, after its warm-up, measure latency two ways at once for
`duration_s`: ping from the client to the server, every reply kept and timestamped
(as seed 004's Appendix F did), and the engine's stamped probes at a low fixed rate
along the measured flow's path (for NAT to the port-forwarded address and port),
one-way, per second. The load achieved each way is recorded; a trial whose load
fell below `min_load_fraction` of the no-firewall load measured when the session
opened is flagged.
"""
from __future__ import annotations

import time

from rich.console import Console, RenderableType

from fwbench import backends as registry
from fwbench import engine, proc, statecheck
from fwbench.backends.base import Backend
from fwbench.backends.kernel import flush_all, flush_conntrack
from fwbench.errors import FwbenchError
from fwbench.experiments.base import Experiment, Planned, Refusal, Trial
from fwbench.plan import TrialKey
from fwbench.results import TrialRecord
from fwbench.ruleset import templates
from fwbench.ruleset.evaluate import Evaluator
from fwbench.ruleset.model import RuleSet, Unsupported
from fwbench.scenario import ALL, Scenario, from_dict
from fwbench.testbed.base import Testbed
from fwbench.testbed.topology import Topology
from fwbench.traffic.native import EngineTraffic, Flow
from fwbench.traffic.latency_series import EngineProbeSeries, PingSeries
from fwbench.traffic.tcpload import TcpBidirLoad, whole_seconds

METHOD = "loadlatency"
SERVICE_PORT = 5001            # iperf 2's port, which the NAT rule set forwards
CALIBRATION_S = 3.0            # the no-firewall load, once per session


class LoadLatency(Experiment):
    """Rule sets x backends x loads x background connections; ping and the
    engine's probes through the firewall, with and without TCP load."""
    tools = {"ip": "iproute2", "ping": "iputils-ping", "conntrack": "conntrack",
             "taskset": "util-linux", "ss": "iproute2"}
    factors = ("ruleset", "backend", "load", "entries")

    def __init__(self, sc: Scenario):
        super().__init__(sc)
        self.s = sc.loadlatency
        self.rulesets: dict[str, RuleSet] = {n: templates.get(n)() for n in self.s.rulesets}
        self.tcp = TcpBidirLoad(self.s.streams, SERVICE_PORT)   # the load (`load` loads rules)
        self.reference = None       # the no-firewall load, measured by open()
        self.traffic: EngineTraffic | None = None   # the probes' engine, per session


    # --- before any testbed ----------------------------------------------------------

    def over_ssh(self) -> str | None:
        return None

    def over_round_trips(self) -> str | None:
        return None

    def preflight(self) -> None:
        super().preflight()
        if "tcp-bidir" in self.s.loads:
            self.tcp.preflight()
        if self.sc.duration_s != int(self.sc.duration_s):
            raise FwbenchError(f"duration_s: {self.sc.duration_s:g} s; {METHOD} measures "
                               f"whole seconds (ping -w and iperf3 -t take no fractions)")
        if ALL not in self.sc.backends:
            self._resolve()

    def _refusal(self, b: Backend) -> str | None:
        if why := b.unavailable():
            return f"backend {b.name} cannot run here: {why}"
        if not b.filters:
            return f"backend {b.name} holds no rule set; {METHOD} compares firewalls"
        for rs in self.rulesets.values():
            try:
                b.refuse_unsupported(rs)
            except Unsupported as e:
                return str(e)
        return None

    def _resolve(self) -> tuple[list[str], dict[str, str]]:
        """The backends to run and those skipped (only when the scenario said all):
        an explicit backend that cannot hold every rule set is an error, one line."""
        # The linear netfilter backends: those seed 004 compared, and iptables over
        # nf_tables beside them.
        chosen, skipped = self.choose_backends(
            registry.names(family=("x_tables", "nf_tables"), layout="linear"),
            lambda b: Refusal.same(self._refusal(b)))
        if not chosen:
            raise FwbenchError("no backend can hold the rule sets here: " +
                               "; ".join(skipped.values()))
        return chosen, skipped

    def plan(self) -> Planned:
        names, skipped = self._resolve()
        s = self.s
        cells = [(r, b, load, n) for r in s.rulesets for b in names for load in s.loads
                 for n in s.conntrack_entries]
        resolved = from_dict({**self.sc.dump(), "backends": names})
        self.sc = resolved
        return Planned(resolved, cells, {"skipped_backends": skipped},
                       [f"skipping backend {n}: {why}" for n, why in skipped.items()])

    def versions(self, planned: Planned) -> dict[str, str | None]:
        out = {**self.tcp.versions(), "ping": proc.version_line(["ping", "-V"]),
               "conntrack": proc.version_line(["conntrack", "-V"]),
               "fwbench-engine": engine.version()}
        out.update(self.backend_versions(planned.scenario.backends))
        return out

    # --- the testbed session -----------------------------------------------------------

    def topology(self) -> Topology:
        # iperf3 runs in user space on both ends: RPS steers the server's ingress to
        # server_cpu as it does for the sweeps' iperf3 traffic.
        return Topology.new(self.sc.testbed, server_rps=True)

    def open(self, tb: Testbed, plan: list[TrialKey], console: Console) -> dict:
        flush_all(tb)
        flush_conntrack(tb)
        self.traffic = EngineTraffic(self.sc.engine)
        if "tcp-bidir" not in self.s.loads:
            return {}
        self.tcp.start_server(tb)
        console.print(f"measuring the load with no firewall ({CALIBRATION_S:g} s)")
        self.reference = self.tcp.begin(tb, tb.topo.server.ip4, CALIBRATION_S).wait()
        return {"load_reference": self.reference.as_dict()}

    def close(self, tb: Testbed) -> None:
        if self.traffic is not None:
            self.traffic.close()
        self.tcp.stop_server(tb)

    # --- one trial ---------------------------------------------------------------------

    def cell_label(self, key: TrialKey) -> str:
        c = self.cell(key)
        return f"{c.ruleset} {c.backend} {c.load}" + \
            (f" +{c.entries:,} conns" if c.entries else "")

    def _targets(self, tb: Testbed, rs: RuleSet) -> tuple[str, str, int, int]:
        """(load and probe destination, ping destination, probe port, port on arrival):
        the measured flow's destination, port-forwarded for NAT."""
        f = rs.flow
        arrives = Evaluator(rs).evaluate(f).translated
        return f.daddr, tb.topo.server.ip4, f.dport, arrives.dport

    # --- the trial's hooks (Experiment.run_trial) ------------------------------------

    def ruleset(self, c) -> RuleSet:
        return self.rulesets[c.ruleset]

    def prepare(self, tb: Testbed, t: Trial, c, step) -> None:
        flush_conntrack(tb)
        # The probes' XDP sink on the server's port would take the verification's
        # packets before its capture sees them: off until the measurement.
        self.traffic.close()

    def prove(self, tb: Testbed, t: Trial, c, say) -> None:
        """NAT and connection tracking happened, with a real TCP connection."""
        flush_conntrack(tb)
        say("proving NAT and state")
        # The proof's listener takes the service port on the server, where the
        # load's server listens between measurements.
        self.tcp.stop_server(tb)
        proof = t.timed("prove_s", statecheck.prove, tb, self.backend(c.backend),
                        self.ruleset(c))
        t.metrics["proof"] = proof.as_dict()
        if not proof.ok:
            t.fail(f"NAT and state proof: {proof.reason}")

    def measure(self, tb: Testbed, t: Trial, c, say) -> None:
        if "tcp-bidir" in self.s.loads:
            self.tcp.start_server(tb)
        rs = self.ruleset(c)
        if c.entries:
            say(f"filling the connection table to {c.entries:,}")
            t.fill_conntrack(tb, c.entries, dst=rs.flow.daddr)
        say(f"{c.load}, measuring")
        t.metrics.update(t.timed("measure_s", self._measure, tb, rs, c.load))
        t.metrics["conntrack"] = statecheck.table_state(tb)

    def release(self, tb: Testbed, t: Trial, c) -> None:
        t.release_conntrack(tb)
        flush_conntrack(tb)

    def recorded_as(self, c) -> tuple[str, str]:
        return METHOD, "iperf3+ping+engine" if c.load != "none" else "ping+engine"

    def conditions(self, tb: Testbed, c) -> dict:
        return {"duration_s": self.sc.duration_s, "ruleset": self.ruleset(c).name,
                "streams": self.s.streams, "ping_interval_s": self.s.ping_interval_s,
                "probe_pps": self.s.probe_pps, "warmup_s": self.s.warmup_s}

    def _measure(self, tb: Testbed, rs: RuleSet, load: str) -> dict:
        s, duration = self.s, int(self.sc.duration_s)
        dst, ping_dst, dport, sink_port = self._targets(tb, rs)
        flow = Flow(tb.topo.client.ip4, dst, dport, sink_port)
        if self.traffic.flow.sink_port != sink_port:
            self.traffic.close()
        self.traffic.flow = flow
        probes = EngineProbeSeries(rate_pps=s.probe_pps, frame_size=self.sc.frame_sizes[0],
                                   traffic=self.traffic)
        probes.start(tb)            # the sink attaches before the load begins
        running = None
        if load == "tcp-bidir":
            running = self.tcp.begin(tb, dst, whole_seconds(s.warmup_s + duration + 2))
            try:
                running.wait_connected()
                time.sleep(s.warmup_s)
            except BaseException:
                running.abort()
                raise
        try:
            ping_run = PingSeries(s.ping_interval_s).begin(tb, ping_dst, duration)
            probe_run = probes.begin(tb, duration)
            pr, ps = ping_run.wait(), probe_run.wait()
        except BaseException:
            if running is not None:
                running.abort()
                self.tcp.stop_server(tb)   # a broken test can leave it busy
                self.tcp.start_server(tb)
            raise
        out = {"ping": pr.summary(),
               # every reply, as seed 004's Appendix F kept them: when, which, how long
               "ping_replies": [[r.ts, r.seq, r.rtt_us] for r in pr.replies],
               "probes": {**ps.summary(), "gaps_s": round(ps.gaps_s, 3)},
               "latency_kind": ps.extra["latency_kind"],
               "series": {"ping": pr.per_second(), "probes": ps.per_second()}}
        if running is not None:
            got = running.wait()
            out["load"] = got.as_dict()
            out["load_short"] = self._short(got)
        return out

    def _short(self, got) -> str | None:
        """The load fell short: both directions together below `min_load_fraction` of
        the no-firewall load (the split between the directions varies from trial to
        trial on two cores while the total holds, so the total is what is compared;
        each direction is recorded)."""
        ref = self.reference
        if ref is None:
            return None
        total, want = got.up_bps + got.down_bps, ref.up_bps + ref.down_bps
        f = self.s.min_load_fraction
        if total >= f * want:
            return None
        return (f"TCP load {total / 1e9:.2f} Gbit/s both ways together, below {f:g} x "
                f"{want / 1e9:.2f} with no firewall")

    def line(self, rec: TrialRecord) -> str:
        m = rec.metrics
        p, e = m["ping"], m["probes"]
        load = m.get("load")
        text = (f"ping mean {p['mean']:,.0f} µs (median {p['median']:,.0f}, p99 "
                f"{p['p99']:,.0f}), {_kind(m)} p50 {e.get('p50', 0):,.1f} µs")
        if load:
            text += (f", load {load['up_bps'] / 1e9:.2f} / {load['down_bps'] / 1e9:.2f} "
                     f"Gbit/s")
        if m.get("load_short"):
            text += f" [yellow](load short: {m['load_short']})[/]"
        return text

    def summary(self, records: list[TrialRecord], meta: dict) -> RenderableType:
        from fwbench.experiments.loadlatency import stats
        return stats.table(records)


def _kind(metrics: dict) -> str:
    """How a trial's engine probes were timed: one-way, or round-trip across clocks."""
    return "round-trip" if metrics.get("latency_kind") == "round trip" else "one-way"
