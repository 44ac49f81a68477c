"""The kube-proxy experiment: `fwbench run` with `method = "kubeproxy"`.

A cell is (backend, mode, services): kube-proxy's rule set of that mode for that
many ClusterIP services (the `kube-proxy` template, `[kubeproxy] endpoints` each,
service order from the scenario's seed) on that backend, or ("none", "direct", 0),
no rules, with connections going to the endpoints themselves.

The firewall plays the node. The server holds the whole pod prefix as local
(Topology.serving), and one `fwbench-engine accept` there answers every endpoint
and counts connections by the endpoint (address, port) they reached, which is the
one the DNAT chose. One trial:

1. load the rule set in one step (kube-proxy's full sync; the load time) and
   verify it: the kernel's listing against the rendering, the probes (each
   service probe's translation among its endpoints) and a corpus sample;
2. prove DNAT with real connections: a burst to the first service, every one
   accepted by one of its endpoints (direct: by the endpoint it was sent to);
3. first-packet latency: new connections at `latency_rate` for `duration_s`, each
   to a service drawn at random (seeded, uniform), each timed by the client
   kernel's own SYN -> SYN-ACK sample (tcpi_rtt), which every connection's first
   packet pays for the nat table's walk to its service; p01..p99 with
   distribution-free intervals; the accept server's counts give the spread of
   endpoints by their position in the service, pooled;
4. the endpoint spread of one service: `spread_connections` to the first
   service, its endpoints' counts against uniform (chi-square);
5. established flows: `flows` TCP connections to the first service (direct: its
   first endpoint), each echoing one `flow_bytes` message at a time for
   `flow_s`, against an echo server on every pod address (the accept server
   steps aside meanwhile): their message rate, whose packets all take the
   connection table's fast path, no nat rule (expected flat in services);
6. the connection rate: doubling from `search_start` until a step has a failed or
   slow connect (or the generator cannot keep the schedule), then halving the
   bracket down to `search_resolution`; the connection table is emptied before
   each step, so each starts alike;
7. the control plane (control.py): one service added and removed with the rest
   present by each `control` mechanism (kube-proxy's partial sync by default),
   each change proved against the kernel's listing; the whole rule set listed
   `listings` times. The kernel memory the rule set holds is read on both sides
   of step 1's load (the firewall emptied before it), before any connection
   fills the connection table.
"""
from __future__ import annotations

import statistics
import time
from collections import Counter, defaultdict

from rich.console import Console, RenderableType
from scipy import stats as sps

from fwbench import addresses as ad
from fwbench import engine, proc, summary
from fwbench.backends.base import Backend
from fwbench.backends.kernel import flush_all, flush_conntrack
from fwbench.errors import FwbenchError
from fwbench.experiments.base import Experiment, Planned, Trial
from fwbench.experiments.kubeproxy import DIRECT, control
from fwbench.plan import TrialKey, named_cell
from fwbench.results import TrialRecord
from fwbench.ruleset.model import RuleSet
from fwbench.ruleset.templates import kubeproxy as kp
from fwbench.scenario import Scenario, from_dict
from fwbench.testbed.base import Testbed
from fwbench.testbed.topology import Topology
from fwbench.traffic.connections import AcceptServer, ConnectResult, Latency, connect
from fwbench.traffic.echo import EchoServer, EchoSpec, run_clients

METHOD = "kubeproxy"
FACTORS = ("backend", "mode", "services")
PROVE_RATE = 200.0          # connections a second of the DNAT proof
KEPT_SCHEDULE = 0.97        # a step whose connections started at less than this share
                            # of its rate was the generator's limit, not the firewall's
QUANTILE_LEVEL = 0.95
FLOW_WARMUP_S = 0.5         # the flows connect and echo this long before they count


class KubeProxy(Experiment):
    """kube-proxy's rule sets x services x backends; new connections to services."""
    tools = {"ip": "iproute2", "conntrack": "conntrack"}
    factors = FACTORS

    def __init__(self, sc: Scenario):
        super().__init__(sc)
        self.s = sc.kubeproxy
        self._built: tuple[tuple, RuleSet] | None = None   # the last rule set built
        self._services: dict[int, list[kp.Service]] = {}
        self.server: AcceptServer | None = None
        self._empty: dict | None = None     # the memory reading before this trial's load

    # --- before any testbed ----------------------------------------------------------

    def over_ssh(self) -> str | None:
        return ("its endpoints are a whole prefix the server holds as local, which the "
                "ssh provider does not set up on a real host")

    def over_round_trips(self) -> str | None:
        return None     # the connect time is a round trip on the client's own clock

    def _refusal(self, b: Backend) -> str | None:
        if why := b.unavailable():
            return f"backend {b.name} cannot run here: {why}"
        if not b.filters:
            return f"backend {b.name} holds no rule set (the direct cell is `direct`)"
        return None

    def preflight(self) -> None:
        super().preflight()
        for backend, mode in self.s.pairs():
            try:
                b = self.backend(backend)
            except FwbenchError as e:
                raise FwbenchError(f"[kubeproxy] configs: {e}") from None
            if why := self._refusal(b):
                raise FwbenchError(why)
            if missing := [m for m in self.s.control if m not in b.mechanisms]:
                raise FwbenchError(f"[kubeproxy] control: {b.name} has no update "
                                   f"mechanism {missing[0]!r} (it has "
                                   f"{', '.join(b.mechanisms)})")

    def plan(self) -> Planned:
        cells = [(b, mode, n) for b, mode in self.s.pairs() for n in self.s.services]
        if self.s.direct:
            cells.append(("none", DIRECT, 0))
        names = list(dict.fromkeys(c[0] for c in cells))
        resolved = from_dict({**self.sc.dump(), "backends": names})
        self.sc = resolved
        return Planned(resolved, cells)

    def versions(self, planned: Planned) -> dict[str, str | None]:
        return {"conntrack": proc.version_line(["conntrack", "-V"]),
                "fwbench-engine": engine.version(),
                **self.backend_versions(n for n in planned.scenario.backends
                                        if n != "none")}

    # --- the testbed session -----------------------------------------------------------

    def topology(self) -> Topology:
        return Topology.new(self.sc.testbed).serving((kp.POD_CIDR,))

    def open(self, tb: Testbed, plan: list[TrialKey], console: Console) -> dict:
        flush_all(tb)
        flush_conntrack(tb)
        # Endpoint k has target port 8080 + k // (pod addresses): the template's.
        most = max(self.s.services) * self.s.endpoints
        last_port = kp.TARGET_PORT + (most - 1) // ad.KUBE_PODS.num_addresses
        ports = f"{kp.TARGET_PORT}-{last_port}" if last_port > kp.TARGET_PORT \
            else str(kp.TARGET_PORT)
        self._ports = ports
        self.server = AcceptServer(tb, ports)
        return {"accept_ports": ports}

    def close(self, tb: Testbed) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    # --- the cell's rule set and targets -------------------------------------------------

    def services(self, n: int) -> list[kp.Service]:
        if n not in self._services:
            self._services[n] = kp.services(n, self.s.endpoints, self.sc.seed)
        return self._services[n]

    def ruleset(self, c) -> RuleSet | None:
        if c.mode == DIRECT:
            return None
        key = (c.mode, c.services)
        if self._built is None or self._built[0] != key:
            self._built = None          # the old one goes before the new is built
            rs = kp.kube_proxy(services=c.services, endpoints=self.s.endpoints,
                               mode=c.mode, seed=self.sc.seed)
            self._built = (key, rs)
        return self._built[1]

    def _targets(self, c) -> list[tuple[str, int]]:
        """Where the cell's connections go: every service's cluster IP and port, or
        (direct) every endpoint of the largest number of services."""
        if c.mode == DIRECT:
            return [ep for s in self.services(max(self.s.services)) for ep in s.endpoints]
        return [(s.cluster_ip, kp.SERVICE_PORT) for s in self.services(c.services)]

    def _first(self, c) -> kp.Service:
        return self.services(c.services if c.mode != DIRECT else max(self.s.services))[0]

    # --- the trial's hooks (Experiment.run_trial) ------------------------------------

    def cell_label(self, key: TrialKey) -> str:
        c = self.cell(key)
        return "no rules, direct" if c.mode == DIRECT else \
            f"{c.backend} {c.mode} mode {c.services:,} services"

    def prepare(self, tb: Testbed, t: Trial, c, step) -> None:
        self._empty = None
        if c.mode == DIRECT:
            flush_all(tb)
        flush_conntrack(tb)
        if c.mode != DIRECT and self.s.control_memory:
            self._empty = control.emptied(tb)

    def prove(self, tb: Testbed, t: Trial, c, say) -> None:
        """DNAT happened, with real connections: a burst to the first service, every
        one accepted by one of its endpoints (direct: the one it was sent to)."""
        if self._empty is not None:
            time.sleep(control.SETTLE_S)
            t.metrics["memory"] = control.held(tb, self.backend(c.backend), self._empty,
                                               control.memory_reading(tb))
        say("proving DNAT with connections")
        first = self._first(c)
        if c.mode == DIRECT:
            target, want = [first.endpoints[0]], {first.endpoints[0]}
        else:
            target, want = [(first.cluster_ip, kp.SERVICE_PORT)], set(first.endpoints)
        n = max(12, 4 * self.s.endpoints)
        self.server.read()
        got = t.timed("prove_s", connect, tb, target, PROVE_RATE, count=n,
                      seed=self._seed(t, 1), slow_ms=self.s.slow_ms)
        acc = self.server.read()
        stray = {ep: k for ep, k in acc.endpoints.items() if ep not in want}
        t.metrics["proof"] = {"sent": n, "connected": got.connected,
                              "accepted": acc.accepted,
                              "endpoints": {f"{a}:{p}": k for (a, p), k in
                                            sorted(acc.endpoints.items())}}
        if got.connected != n or acc.accepted != n or stray:
            why = (f"{got.connected} of {n} connected ({_failures(got)})"
                   if got.connected != n else
                   f"{len(stray)} connections reached endpoints not of "
                   f"{first.cluster_ip}:{kp.SERVICE_PORT}: {_eps(stray)}" if stray else
                   f"the endpoints accepted {acc.accepted} of {n}")
            t.fail(f"DNAT proof: {why}")

    def measure(self, tb: Testbed, t: Trial, c, say) -> None:
        s, targets = self.s, self._targets(c)
        say(f"first-packet latency, {s.latency_rate:,.0f} connections/s")
        self.server.read()
        lat = t.timed("latency_s", connect, tb, targets, s.latency_rate,
                      self.sc.duration_s, seed=self._seed(t, 2), slow_ms=s.slow_ms,
                      threads=s.threads)
        acc = self.server.read()
        t.metrics["connect"] = connect_summary(lat)
        t.metrics["position"] = self._by_position(c, acc.endpoints)
        if lat.failed["refused"] or lat.failed["unreachable"]:
            t.fail(f"first-packet latency: {_failures(lat)} at "
                   f"{s.latency_rate:,.0f} connections/s")
            return
        if s.spread_connections:
            say(f"endpoint spread, {s.spread_connections:,} connections to one service")
            first = self._first(c)
            target = [(first.cluster_ip, kp.SERVICE_PORT)] if c.mode != DIRECT \
                else list(first.endpoints)
            flush_conntrack(tb)
            self.server.read()
            got = t.timed("spread_s", connect, tb, target, s.latency_rate,
                          count=s.spread_connections, seed=self._seed(t, 3),
                          slow_ms=s.slow_ms)
            acc = self.server.read()
            t.metrics["spread"] = {"service": spread(
                [acc.endpoints.get(ep, 0) for ep in first.endpoints]),
                "connected": got.connected}
        if s.flows:
            say(f"established flows: {s.flows} echoing to one service")
            t.metrics["flows"] = got = t.timed("flows_s", self._flows, tb, t, c)
            if not got["msgs"]:
                t.fail(f"established flows: no message echoed "
                       f"({got['totals']['connect_failed']} connects failed: "
                       f"{'; '.join(got['broken'][:2]) or 'no reason given'})")
                return
        if s.search:
            t.metrics["search"] = t.timed("search_s", self._search, tb, t, targets, say)
        if c.mode != DIRECT and (s.control or s.listings):
            say("control plane: " + ", ".join(
                [f"one service added and removed by {', '.join(s.control)}"] * bool(s.control)
                + ["listing"] * bool(s.listings)))
            try:
                t.metrics["control"] = t.timed(
                    "control_s", control.measure, tb, self.backend(c.backend),
                    self.ruleset(c), c.mode, mechanisms=s.control, seed=self._seed(t, 4),
                    listings=s.listings, memory=False)
            except FwbenchError as e:
                t.fail(f"control plane: {e}")

    def _flows(self, tb: Testbed, t: Trial, c) -> dict:
        """Module step 5: the echo server takes the endpoints' port on every pod
        address while the flows run; the accept server is back after."""
        s, svc = self.s, self._flow_service(c)
        to = svc.endpoints[0] if c.mode == DIRECT else (svc.cluster_ip, kp.SERVICE_PORT)
        spec = EchoSpec("tcp", 4, s.flows, (s.flow_bytes, s.flow_bytes),
                        seed=self._seed(t, 5), port=svc.endpoints[0][1])
        flush_conntrack(tb)
        self.server.close()
        self.server = None
        try:
            with EchoServer(tb, spec, bind="0.0.0.0") as srv:
                got = run_clients(tb, spec, [tb.topo.client.ip4], duration_s=s.flow_s,
                                  warmup_s=FLOW_WARMUP_S, server=to)
                served = srv.stop()
        finally:
            self.server = AcceptServer(tb, self._ports)
        flush_conntrack(tb)
        tot = got["totals"]
        return {"flows": s.flows, "service": svc.name, "msgs": tot["msgs"],
                "msgs_per_s": tot["msgs_per_s"],
                "rtt": {k: got["rtt_ns"].get(k) for k in ("p50", "p99")},
                "totals": tot, "server_totals": served.get("totals"),
                "broken": sorted({c["broken"] for c in got.get("per_client", [])
                                  if c.get("broken")})}

    def _flow_service(self, c) -> kp.Service:
        """The established flows' service: the first whose endpoints share one port,
        the one the echo server listens on (the seed's order may put a service of
        any port first; one straddling the end of the pod prefix has two)."""
        return next(v for v in self.services(c.services if c.mode != DIRECT
                                             else max(self.s.services))
                    if len({p for _, p in v.endpoints}) == 1)

    def _search(self, tb: Testbed, t: Trial, targets, say) -> dict:
        """The highest rate held without a failed or slow connect (module step 5)."""
        s = self.s
        steps: list[dict] = []

        def run(rate: float) -> str | None:
            """None when the step held; else why not ("generator" when the generator
            fell behind its schedule before anything failed)."""
            say(f"connection rate {rate:,.0f}/s")
            flush_conntrack(tb)
            r = connect(tb, targets, rate, s.search_step_s, seed=self._seed(t, 10 + len(steps)),
                        slow_ms=s.slow_ms, threads=s.threads)
            step = {"rate": rate, **_brief(r)}
            bad = _failures(r) if r.failures else f"{r.slow} slow" if r.slow else None
            behind = r.skipped or (r.start_rate or 0) < KEPT_SCHEDULE * rate
            step["result"] = "failed" if bad else "generator" if behind else "held"
            steps.append(step)
            return bad or ("generator" if behind else None)

        held, failed, limited = None, None, None
        rate = s.search_start
        while rate <= s.search_max:
            why = run(rate)
            if why is None:
                held, rate = rate, rate * 2
                continue
            if why == "generator":
                limited = "generator"
            else:
                failed = rate
            break
        else:
            limited = "search_max"
        if held is None and failed is not None:
            # Not even the first rate held: halve until one does, a few times.
            lo = failed / 2
            for _ in range(4):
                if lo < 1 or run(lo) is None:
                    held = lo if lo >= 1 else None
                    break
                failed, lo = lo, lo / 2
        while held is not None and failed is not None and failed / held > s.search_resolution:
            mid = (held * failed) ** 0.5
            why = run(mid)
            if why is None:
                held = mid
            elif why == "generator":
                limited = "generator"
                break
            else:
                failed = mid
        flush_conntrack(tb)
        return {"held": held, "failed_at": failed, "limited_by": limited,
                "steps": steps}

    def _by_position(self, c, counts: dict) -> dict:
        """The latency phase's connections by their endpoint's position in its
        service (0 .. M-1), against uniform: kube-proxy's chain of probabilities
        (or numgen) must give each position 1/M."""
        if c.mode == DIRECT:
            return {}
        where = self._positions(c.services)
        by = Counter()
        for ep, k in counts.items():
            if ep in where:
                by[where[ep]] += k
        return spread([by.get(i, 0) for i in range(self.s.endpoints)])

    def _positions(self, n: int) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for svc in self.services(n):
            for i, ep in enumerate(svc.endpoints):
                out[ep] = i
        return out

    def _seed(self, t: Trial, part: int) -> int:
        return (self.sc.seed * 1_000_003 + t.idx) * 64 + part

    def failed(self, tb: Testbed, t: Trial, c) -> None:
        flush_conntrack(tb)

    def recorded_as(self, c) -> tuple[str, str]:
        return METHOD, "engine-connect"

    def conditions(self, tb: Testbed, c) -> dict:
        s = self.s
        return {"duration_s": self.sc.duration_s, "endpoints": s.endpoints,
                "service_order_seed": self.sc.seed, "latency_rate": s.latency_rate,
                "slow_ms": s.slow_ms, "threads": s.threads,
                "search_step_s": s.search_step_s, "flows": s.flows, "flow_s": s.flow_s,
                "flow_bytes": s.flow_bytes, "control": list(s.control),
                "control_memory": s.control_memory, "listings": s.listings}

    def line(self, rec: TrialRecord) -> str:
        m = rec.metrics
        r = m["connect"]["rtt"]
        text = (f"first packet p50 {r['p50']:,.1f} µs, p99 {r['p99']:,.1f} µs "
                f"({m['connect']['connected']:,} connections)")
        if (sr := m.get("search")) and sr.get("held"):
            text += f", held {sr['held']:,.0f} conn/s" + \
                (f" (the generator's limit)" if sr["limited_by"] == "generator" else "")
        if fl := m.get("flows"):
            text += f", {fl['msgs_per_s']:,.0f} msg/s on {fl['flows']} flows"
        if sp := (m.get("spread") or {}).get("service"):
            text += f", spread p {sp['p']:.2f}"
        if sync := (m.get("control") or {}).get("mechanisms", {}).get("sync"):
            text += f", a service synced in {sync['add']['command_s'] * 1e3:,.0f} ms"
        return text

    def summary(self, records: list[TrialRecord], meta: dict) -> RenderableType:
        return summary_table(records)


# --- what a trial keeps --------------------------------------------------------------

def _lat(d: Latency) -> dict:
    out = {"count": d.count, "min": d.min, "mean": d.mean, "p01": d.p01, "p50": d.p50,
           "p90": d.p90, "p99": d.p99, "p99_9": d.p99_9, "max": d.max}
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in out.items()}


def connect_summary(r: ConnectResult) -> dict:
    """A latency phase as the record keeps it: counts, failures by class, the
    kernel's connect time (rtt) and user space's (user) as percentiles, and the
    rtt histogram (for pooled percentiles and their intervals in the report)."""
    out = {**_brief(r), "rtt": _lat(r.rtt), "user": _lat(r.connect),
           "lag": _lat(r.lag), "rtt_hist": [[lo, n] for lo, n in r.rtt.hist]}
    if r.rtt.count:
        out["rtt_interval"] = {q: list(r.rtt.percentile_interval(float(q[1:]) / 100))
                               for q in ("p01", "p50", "p90", "p99")}
    return out


def _brief(r: ConnectResult) -> dict:
    return {"rate": r.rate, "scheduled": r.scheduled, "attempted": r.attempted,
            "connected": r.connected, "failed": dict(r.failed), "slow": r.slow,
            "retransmitted": r.retransmitted, "skipped": r.skipped,
            "start_rate": r.start_rate, "elapsed_s": r.elapsed_s,
            "rtt_p50": r.rtt.p50, "rtt_p99": r.rtt.p99,
            "first_other_error": r.first_other_error}


def spread(counts: list[int]) -> dict:
    """Counts against equal shares: chi-square and its p (None below 5 expected
    a cell, where the test's approximation fails)."""
    total = sum(counts)
    out = {"counts": counts, "total": total, "chi2": None, "p": None}
    if len(counts) < 2:
        return out
    if total / len(counts) >= 5:
        chi2, p = sps.chisquare(counts)
        out["chi2"], out["p"] = round(float(chi2), 4), float(p)
    return out


def _failures(r: ConnectResult) -> str:
    parts = [f"{n} {k}" for k, n in r.failed.items() if n]
    text = ", ".join(parts) or "no failure"
    return text + (f" ({r.first_other_error})" if r.first_other_error else "")


def _eps(eps: dict) -> str:
    return ", ".join(f"{a}:{p}" for a, p in list(eps)[:3]) + (" ..." if len(eps) > 3 else "")


def summary_table(records: list[TrialRecord]):
    """Medians per cell over its ok trials."""
    named = named_cell(FACTORS)
    cells: dict[tuple, list[TrialRecord]] = defaultdict(list)
    for r in records:
        cells[named(*r.cell(FACTORS))].append(r)

    def med(vals, fmt="{:,.1f}") -> str:
        vals = [v for v in vals if v is not None]
        return fmt.format(statistics.median(vals)) if vals else "-"

    def row(key) -> list[str]:
        ok = [r for r in cells[key] if r.status == "ok"]
        return [key.backend, key.mode, f"{key.services:,}",
                med(r.metrics["connect"]["rtt"]["p50"] for r in ok),
                med(r.metrics["connect"]["rtt"]["p99"] for r in ok),
                med(((r.metrics.get("search") or {}).get("held") for r in ok), "{:,.0f}"),
                med((r.load_time_s for r in ok), "{:,.2f}"), str(len(ok))]
    return summary.render(
        "kubeproxy: medians over repetitions (first packet: SYN to SYN-ACK through DNAT)",
        [(col, "left" if col in ("backend", "mode") else "right") for col in (
            "backend", "mode", "services", "p50 us", "p99 us", "conn/s held",
            "full sync s", "n ok")],
        (row(key) for key in sorted(cells, key=lambda c: (c.mode, c.backend, c.services))))
