"""The echo experiment (seed 001): `fwbench run` with `method = "echo"`.

n clients behind the firewall, each with its own source address (one address each on
the client's port, as the gateway saw the seed's client machine: one interface, n
sources), each holding its own connection (TCP) or socket (UDP) to one echo server,
each sending a message, waiting for its echo and sending the next (the engine's echo
mode, engine/echo.c). The firewall holds seed 001's rule set for the cell: F = 0 plain
forwarding, F = 2 an accept rule per client per direction, F = 4 a MARK rule per client
per direction besides (fwbench.ruleset.templates.seed001).

One trial: flush, load the rule set, verify it with its probes, then prove every
client's flow is counted by that client's own rules: every client runs
`verify_cycles` echo cycles and each client's up and down (and mark) rules must have
counted them (UDP exactly; TCP at least, its handshake and acknowledgements count
too). Then the measurement: `warmup_s` of cycles, then `duration_s` counted, per
client messages and bytes per second and round-trip times, every message validated at
both ends (client id, size, sequence); a foreign, mis-sized, out-of-sequence or
corrupt message fails the trial. Beside it: the server's context switches, the
machine's, CPU time per CPU, and the kernel's memory against the session's start.

Transaction `crr` (beyond the seed): a new TCP connection per message, as netperf's
TCP_CRR, through the stateful variant of the rule set (conntrack accepts a
connection's later packets, so each connection's first packet walks the per-client
rules), optionally with background entries in the connection table.
"""
from __future__ import annotations

import statistics
import time

from rich.console import Console, RenderableType

from fwbench import backends as registry
from fwbench import engine, proc, statecheck
from fwbench.backends.base import Backend
from fwbench.backends.kernel import flush_all, flush_conntrack
from fwbench.cpu import CpuSample
from fwbench.experiments.echo import design
from fwbench.experiments.echo.design import FACTORS
from fwbench.experiments.echo.stats import jain, percentile
from fwbench.errors import FwbenchError, MeasurementInvalid
from fwbench.experiments.base import Experiment, Planned, Trial
from fwbench.plan import TrialKey
from fwbench.results import TrialRecord
from fwbench.ruleset.model import RuleSet, Unsupported
from fwbench.ruleset.templates import seed001 as tpl
from fwbench.scenario import ALL, Scenario, from_dict
from fwbench.testbed.base import Testbed
from fwbench.testbed.topology import Topology
from fwbench.traffic.echo import EchoServer, EchoSpec, run_clients

METHOD = "echo"
# Validation counts that fail a trial: the path changed, dropped into or mixed up
# messages in a way a correct firewall never does. Lost, late and unsent are
# measurements (a busy machine can stall an echo past its timeout).
INVALID = ("foreign", "wrong_size", "bad_seq", "corrupt", "connect_failed", "broken")
SERVER_INVALID = ("foreign", "wrong_size", "corrupt", "reordered")
# How long a trial waits for its TCP connections to finish closing at both ends.
SETTLE_S = 5.0


def settle(tb: Testbed, port: int) -> int:
    """Wait until no TCP connection of the trial (to or from the echo `port`) is still
    closing at either end (a FIN retransmitted seconds later would be counted by the
    next trial's rules while it verifies them); TIME-WAIT sends nothing unprompted.
    Only the echo's: a real host's own connections (the SSH session fwbench drives
    it by) never close. Returns how many were left after SETTLE_S (0: all gone)."""
    deadline = time.monotonic() + SETTLE_S
    ours = ["(", "sport", "=", f":{port}", "or", "dport", "=", f":{port}", ")"]
    while True:
        left = sum(len(tb.run(role, ["ss", "-Htan", "exclude", "listening", "exclude",
                                     "time-wait", *ours], check=False).stdout.splitlines())
                   for role in ("client", "server"))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _ctxt(stat: str) -> int:
    """The context switches so far, from /proc/stat's text."""
    for line in stat.splitlines():
        if line.startswith("ctxt "):
            return int(line.split()[1])
    return 0


def _meminfo(tb: Testbed) -> dict[str, int]:
    """The firewall machine's memory figures (kB) that its rules and connections
    move."""
    want = {"MemAvailable", "Slab", "SUnreclaim", "Percpu", "VmallocUsed"}
    out = {}
    for line in tb.machine_file(_firewall(tb), "/proc/meminfo").splitlines():
        k, _, v = line.partition(":")
        if k in want:
            out[k] = int(v.split()[0])
    return out


def _firewall(tb: Testbed) -> str:
    return tb.topo.fw_client_side.host


class Echo(Experiment):
    """n clients echoing messages through the firewall; seed 001's factors."""
    tools = {"ip": "iproute2", "ss": "iproute2", "conntrack": "conntrack"}
    factors = FACTORS

    def __init__(self, sc: Scenario):
        super().__init__(sc)
        self.s = sc.echo
        self.rulesets: dict[tuple, RuleSet] = {}
        self.baseline_mem: dict[str, int] = {}
        self._sctp = design.sctp_missing() if "sctp" in self._all("protocols") else None

    def _all(self, name: str) -> set:
        got = set(getattr(self.s, name))
        for d in self.s.designs:
            got |= set(getattr(d, name) or ())
        return got


    def ruleset(self, cell: tuple) -> RuleSet:
        c = dict(zip(FACTORS, cell))
        k = (c["clients"], c["rules_per_client"], c["family"], c["protocol"],
             c["transaction"] == "crr")
        if k not in self.rulesets:
            self.rulesets[k] = tpl.seed001(k[0], k[1], version=4 if k[2] == "ipv4" else 6,
                                           proto=k[3], test_port=self.s.port, stateful=k[4])
        return self.rulesets[k]

    # --- before any testbed ----------------------------------------------------------

    def over_ssh(self) -> str | None:
        return None

    def over_round_trips(self) -> str | None:
        return ("echo times its own round trips (each message and its echo); "
                "[testbed] latency is for the engine's packets")

    def _backend_names(self) -> list[str]:
        # Each cell's rule set is checked on its backend when the cells are made.
        every = registry.names(family=("x_tables", "nf_tables"), layout="linear") \
            + registry.names(family="ebpf")
        return self.choose_backends(every, lambda b: None)[0]

    def _refuse(self, cell: tuple) -> str | None:
        c = dict(zip(FACTORS, cell))
        if c["protocol"] == "sctp":
            return f"sctp: {self._sctp}"
        b = self.backend(c["backend"])
        if why := b.unavailable():
            return f"backend {b.name} cannot run here: {why}"
        if not b.filters:
            return f"backend {b.name} holds no rule set; {METHOD} compares firewalls"
        try:
            b.refuse_unsupported(self.ruleset(cell))
        except Unsupported as e:
            return str(e)
        return None

    def plan(self) -> Planned:
        names = self._backend_names()
        cells, left = design.cells(self.s, names, self._refuse)
        explicit = ALL not in self.sc.backends
        if explicit:
            # A backend the user named that cannot hold a cell's rule set is an
            # error, not a silent hole in the comparison.
            for why in left:
                if why.split(":")[0] in names:
                    raise FwbenchError(why)
        if not cells:
            raise FwbenchError("echo: no cell can run here: " + "; ".join(left) if left
                               else "echo: the design has no cells")
        used = sorted({dict(zip(FACTORS, c))["backend"] for c in cells},
                      key=names.index)
        resolved = from_dict({**self.sc.dump(), "backends": used})
        self.sc = resolved
        est = design.estimate_s(cells, self.sc.repeat, self.sc.duration_s, self.s.warmup_s)
        which = "the full design" if self.s.full or not self.s.designs else \
            f"designs {', '.join(d.name for d in self.s.designs)}"
        notes = [f"{which}: {len(cells):,} cells x {self.sc.repeat} rounds = "
                 f"{len(cells) * self.sc.repeat:,} trials, estimated {design.hms(est)} "
                 f"(before adaptive repetitions)"]
        notes += [f"left out, {n:,} cell(s): {why}" for why, n in left.items()]
        return Planned(resolved, cells, {"left_out": left, "estimated_s": round(est),
                                         "max_clients": max(dict(zip(FACTORS, c))["clients"]
                                                            for c in cells)}, notes)

    def versions(self, planned: Planned) -> dict[str, str | None]:
        out = {"conntrack": proc.version_line(["conntrack", "-V"]),
               "fwbench-engine": engine.version()}
        out.update(self.backend_versions(planned.scenario.backends))
        return out

    # --- the testbed session -----------------------------------------------------------

    def topology(self) -> Topology:
        # Every cell's clients are the first n of one set of addresses on the client's
        # port; the session holds as many as the largest cell needs.
        n = max(max(self._all("clients")), 1)
        return Topology.many_clients(n, hosts=False, settings=self.sc.testbed)

    def open(self, tb: Testbed, plan: list[TrialKey], console: Console) -> dict:
        flush_all(tb)
        flush_conntrack(tb)
        self.baseline_mem = _meminfo(tb)
        return {"memory_baseline_kb": self.baseline_mem}

    # --- one trial ---------------------------------------------------------------------

    def cell_label(self, key: TrialKey) -> str:
        c = self.cell(key)
        text = (f"n={c.clients} {c.protocol}/{c.family} {c.frame} B "
                f"{c.server} F={c.rules_per_client} {c.backend}")
        if c.transaction != "echo":
            text += f" {c.transaction}"
        return text + (f" +{c.entries:,} conns" if c.entries else "")

    def spec(self, cell: tuple) -> EchoSpec:
        c = dict(zip(FACTORS, cell))
        return EchoSpec(proto=c["protocol"], version=4 if c["family"] == "ipv4" else 6,
                        clients=c["clients"], frame=design.frame_bounds(c["frame"]),
                        server_model=c["server"], seed=self.sc.seed, port=self.s.port,
                        crr=c["transaction"] == "crr",
                        send_timeout_ms=self.s.send_timeout_ms,
                        echo_timeout_ms=self.s.echo_timeout_ms)

    @staticmethod
    def sources(n: int, version: int) -> list[str]:
        """Client i's address, as the rule set names it (the last is the testbed's)."""
        return [tpl.client_address(i, n, version) for i in range(1, n + 1)]

    # --- the trial's hooks (Experiment.run_trial) ------------------------------------

    def prepare(self, tb: Testbed, t: Trial, c, step) -> None:
        flush_conntrack(tb)

    def prove(self, tb: Testbed, t: Trial, c, say) -> None:
        """Every client's flow is counted by that client's own rules."""
        flush_conntrack(tb)
        say("proving every client's rules")
        proof = t.timed("prove_s", self._prove, tb, self.backend(c.backend),
                        self.ruleset(c), self.spec(c), c._asdict())
        t.metrics["proof"] = proof
        if not proof["ok"]:
            t.fail(f"client proof: {proof['reason']}")

    def measure(self, tb: Testbed, t: Trial, c, say) -> None:
        if c.entries:
            say(f"filling the connection table to {c.entries:,}")
            t.fill_conntrack(tb, c.entries)
        say("measuring")
        t.metrics.update(t.timed("measure_s", self._measure, tb, self.spec(c)))
        if c.transaction == "crr":
            t.metrics["conntrack"] = statecheck.table_state(tb)
        if bad := self._invalid(t.metrics):
            t.fail(f"validation: {bad}")

    def release(self, tb: Testbed, t: Trial, c) -> None:
        t.release_conntrack(tb)
        flush_conntrack(tb)

    def recorded_as(self, c) -> tuple[str, str]:
        return METHOD, "engine-echo"

    def conditions(self, tb: Testbed, c) -> dict:
        rs = self.ruleset(c)
        return {"duration_s": self.sc.duration_s, "warmup_s": self.s.warmup_s,
                "ruleset": rs.name, "rules": rs.rule_count,
                "client_threads": self.s.client_threads,
                "send_timeout_ms": self.s.send_timeout_ms,
                "echo_timeout_ms": self.s.echo_timeout_ms,
                "frame_seed": self.sc.seed,
                "layout": "one client namespace, an address per client"}

    # --- the proof -----------------------------------------------------------------------

    def _prove(self, tb: Testbed, backend: Backend, rs: RuleSet, spec: EchoSpec,
               c: dict) -> dict:
        """Every client runs `verify_cycles` cycles; its own rules must count them."""
        m, n, f = self.s.verify_cycles, c["clients"], c["rules_per_client"]
        before = backend.counters(tb, rs) if f else {}
        with EchoServer(tb, spec) as srv:
            rep = run_clients(tb, spec, self.sources(n, spec.version), count=m,
                              threads=self.s.client_threads)
            srv_rep = srv.stop()
        settle(tb, spec.port)
        short = [p["id"] for p in rep["per_client"] if p["msgs"] != m]
        if short:
            return {"ok": False, "reason": f"{len(short)} of {n} clients did not complete "
                    f"{m} echoes (first: client {short[0]})", "clients": n}
        if bad := self._invalid({"client": rep, "server": srv_rep}):
            return {"ok": False, "reason": bad, "clients": n}
        if not f:
            return {"ok": True, "clients": n, "cycles": m, "rules": "none (F = 0)"}
        after = backend.counters(tb, rs)
        want = self._expected(spec, m, c["transaction"] == "crr")
        got_min: dict[str, int] = {}
        for i in range(1, n + 1):
            ids = {"up": tpl.up_id(i), "down": tpl.down_id(i)}
            if f == 4:
                ids |= {"mark_up": tpl.mark_up_id(i), "mark_down": tpl.mark_down_id(i)}
            for role, rid in ids.items():
                d = after.get(rid, 0) - before.get(rid, 0)
                lo, hi = want[role]
                got_min[role] = min(got_min.get(role, d), d)
                if d < lo or (hi is not None and d > hi):
                    exp = f"{lo}" if hi == lo else f">= {lo}" if hi is None else f"{lo}..{hi}"
                    return {"ok": False, "clients": n,
                            "reason": f"client {i}'s rule {rid} counted {d} packets, "
                                      f"expected {exp}"}
        return {"ok": True, "clients": n, "cycles": m, "rules_checked": n * f,
                "min_counted": got_min,
                "expected": {k: list(v) for k, v in want.items()}}

    @staticmethod
    def _expected(spec: EchoSpec, m: int, crr: bool) -> dict[str, tuple[int, int | None]]:
        """Packets each of a client's rules must count in `m` cycles: (at least, at
        most or None). UDP: m messages and the END message up, m echoes down, exactly.
        TCP: at least the handshake's packet and m segments each way (acknowledgements
        and the close add more). crr, stateful: the first packet of every connection
        walks the rules up (m connections, and one for END), the replies are accepted as
        established before them; the mangle table has no state rule and sees all."""
        if spec.proto == "udp":
            return {"up": (m + 1, m + 1), "down": (m, m), "mark_up": (m + 1, m + 1),
                    "mark_down": (m, m)}
        if crr:
            return {"up": (m, None), "down": (0, 0), "mark_up": (2 * m, None),
                    "mark_down": (2 * m, None)}
        return {"up": (m + 1, None), "down": (m + 1, None), "mark_up": (m + 1, None),
                "mark_down": (m + 1, None)}

    @staticmethod
    def _invalid(m: dict) -> str | None:
        """The first validation count that is not zero, said in a few words."""
        for side, keys in (("client", INVALID), ("server", SERVER_INVALID)):
            tot = (m.get(side) or {}).get("totals", {})
            for k in keys:
                v = tot.get(k)
                if v:
                    return f"{side} counted {v} {k.replace('_', ' ')}"
        return None

    # --- the measurement -------------------------------------------------------------------

    def _measure(self, tb: Testbed, spec: EchoSpec) -> dict:
        sources = self.sources(spec.clients, spec.version)
        with EchoServer(tb, spec) as srv:
            # CPU, context switches and memory: the firewall's machine's (in
            # namespaces this machine's, every host's alike)
            fw = _firewall(tb)
            mem = _meminfo(tb)
            stat0, t0 = tb.machine_file(fw, "/proc/stat"), time.monotonic()
            rep = run_clients(tb, spec, sources, duration_s=self.sc.duration_s,
                              warmup_s=self.s.warmup_s, threads=self.s.client_threads)
            stat1, wall = tb.machine_file(fw, "/proc/stat"), time.monotonic() - t0
            cpu0, cpu1 = CpuSample.parse(stat0), CpuSample.parse(stat1)
            ctxt0, ctxt1 = _ctxt(stat0), _ctxt(stat1)
            srv_rep = srv.stop()
        out = summarise(rep, srv_rep, cpu0, cpu1, ctxt1 - ctxt0, wall, mem,
                        self.baseline_mem)
        out["tcp_still_closing"] = settle(tb, spec.port)
        return out

    def line(self, rec: TrialRecord) -> str:
        m = rec.metrics
        th, rtt = m["throughput"], m["rtt_us"]
        return (f"{th['client_mean_msgs_per_s']:,.0f} msg/s per client (min "
                f"{th['client_min_msgs_per_s']:,.0f}), {th['aggregate_bps'] / 1e6:,.1f} Mbit/s "
                f"in all, Jain {th['jain']:.3f}, RTT p50 {rtt['p50']:,.0f} µs")

    def summary(self, records: list[TrialRecord], meta: dict) -> RenderableType:
        from fwbench.experiments.echo import stats
        return stats.table(records)


def summarise(rep: dict, srv: dict, cpu0: CpuSample, cpu1: CpuSample, ctxt: int,
              wall_s: float, mem: dict[str, int], baseline: dict[str, int]) -> dict:
    """A trial's metrics from the clients' and the server's reports. CPU shares,
    context switches and memory are the firewall machine's (in namespaces this
    machine's, every host's); CPU shares and context switches cover the clients'
    whole run (connecting and the warm-up included, `wall_s`); rates and round
    trips only the counted window."""
    per = rep["per_client"]
    # A client with no round trip in the counted window was starved (a busy
    # machine), not slowed by the firewall: its figures would be a false zero.
    if idle := [p["id"] for p in per if p.get("rtt_p50_ns") is None]:
        raise MeasurementInvalid(f"{len(idle)} of {len(per)} clients completed no echo "
                                 f"in the counted window (first: client {idle[0]})")
    mps = [p["msgs_per_s"] for p in per]
    bps = [8 * p["bytes_per_s"] for p in per]
    window = rep["duration_s"] or 0
    msgs = rep["totals"]["msgs"]
    per_cpu = {}
    for cpu, a in cpu1.ticks.items():
        b = cpu0.ticks.get(cpu, a)
        d = {k: a[k] - b[k] for k in a}
        total = sum(d.values()) or 1
        per_cpu[str(cpu)] = {k: round(d[k] / total, 4) for k in
                             ("user", "system", "softirq", "irq", "idle")}
    ru = srv.get("rusage", {})
    vol, invol = ru.get("nvcsw", 0), ru.get("nivcsw", 0)
    rtt = rep["rtt_ns"]
    return {
        "throughput": {
            "client_mean_bps": statistics.fmean(bps), "client_min_bps": min(bps),
            "client_p5_bps": percentile(bps, 0.05), "client_max_bps": max(bps),
            "aggregate_bps": 8 * rep["totals"]["bytes_per_s"],
            "msgs_per_s": rep["totals"]["msgs_per_s"],
            "client_mean_msgs_per_s": statistics.fmean(mps),
            "client_min_msgs_per_s": min(mps), "client_p5_msgs_per_s": percentile(mps, 0.05),
            "jain": jain(mps), "window_s": window, "msgs": msgs},
        # the engine's latency summary (p99_9 is the 99.9th percentile)
        "rtt_us": {k: (rtt.get(src) or 0) / 1e3 for k, src in (
            ("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99_9"),
            ("mean", "mean"), ("min", "min"), ("max", "max"))},
        "context_switches": {
            "server_voluntary": vol, "server_involuntary": invol,
            "server_per_msg": (vol + invol) / msgs if msgs else None,
            "server_threads": srv.get("threads"),
            "system": ctxt, "system_per_s": ctxt / wall_s if wall_s else None},
        "cpu_share": per_cpu,
        "memory_kb": {k: v for k, v in mem.items()},
        "memory_delta_kb": {k: v - baseline[k] for k, v in mem.items() if k in baseline},
        "client": {"totals": rep["totals"], "rusage": rep.get("rusage")},
        "server": {"totals": srv["totals"], "connections": srv.get("connections"),
                   "rusage": ru},
        # per client: id, messages/s, RTT p50 and p99 (µs): the fairness figures' data
        "per_client": [[p["id"], round(p["msgs_per_s"], 2),
                        round(p["rtt_p50_ns"] / 1e3, 1), round(p["rtt_p99_ns"] / 1e3, 1)]
                       for p in per],
    }
