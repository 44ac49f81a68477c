"""`latency`: per-packet one-way latency (engine stamp to XDP sink, one clock) at no
load, at fractions of the PDR, and at the NDR, after one throughput search finds
them. Ping's idle round-trip time on the same path is kept beside it, for reference.

Percentiles come from the engine's log-linear histogram (at most 0.4 % off) and are
measured against each packet's scheduled send time, so a sender that falls behind
shows as latency instead of hiding it.
"""
from __future__ import annotations

from fwbench.methods.base import Method
from fwbench.experiments.sweep.throughput import search_config, search_metrics, validate_search
from fwbench.methods.search import search
from fwbench.experiments.sweep import LatencySettings, ThroughputSettings
from fwbench.traffic.native import EngineTraffic
from fwbench.traffic.ping import PingRtt


class Latency(Method):
    name = "latency"
    remeasure_always = True    # latency moves with any disturbance, lossless or not
    any_flow = False

    @classmethod
    def for_scenario(cls, sc, engine, ping) -> "Latency":
        # The reference ping runs at the engine's idle rate: on a VM, the wake-up
        # of an idle CPU dominates latency, so only equal gaps compare.
        validate_search(sc)
        idle_ping = PingRtt(max(sc.instrument.ping_count, 200),
                            max(1 / sc.latency.idle_pps, 1e-4), sc.version)
        return cls(engine, sc.throughput, sc.latency, idle_ping)

    def __init__(self, traffic: EngineTraffic, search_settings: ThroughputSettings,
                 settings: LatencySettings, ping: PingRtt):
        super().__init__(traffic)
        self.search_settings = search_settings
        self.settings = settings
        self.ping = ping

    def versions(self):
        return {**super().versions(), **self.ping.versions()}

    def loads(self, ndr: float | None, pdr: float | None) -> dict[str, float]:
        """Name -> offered pps of every latency point this cell measures."""
        s = self.settings
        out = {"idle": s.idle_pps}
        if pdr:
            for f in s.pdr_fractions:
                out[f"pdr_{round(f * 100):d}"] = f * pdr
        if ndr and s.at_ndr:
            out["ndr"] = ndr
        return out

    def run(self, tb, frame_size, duration_s, **_) -> dict:
        metrics: dict = {}
        ndr = pdr = None
        if self.settings.pdr_fractions or self.settings.at_ndr:
            cfg = search_config(self.search_settings, duration_s,
                                self.sender_ceiling(tb, frame_size))
            found = search(self.measurer(tb, frame_size), cfg, on_trial=self.step)
            metrics = search_metrics(found, self.search_settings.max_load_pps is None)
            ndr, pdr = metrics.get("ndr_pps"), metrics.get("pdr_pps")
        m = self.measurer(tb, frame_size)
        points = {}
        for name, load in self.loads(ndr, pdr).items():
            r = m.measure(duration_s, load)
            metrics["latency_kind"] = r.extra.get("latency_kind", "one-way")
            points[name] = {"offered_pps": load, "achieved_pps": r.achieved_pps,
                            "loss_ratio": r.loss_ratio, "sender_short": r.sender_short,
                            "received": r.received, "reordered": r.reordered,
                            "late": r.late, "accounting": r.extra.get("accounting"),
                            **(r.latency_us or {})}
        metrics["latency_us"] = points
        ping = self.ping.measure(tb, frame_size)
        metrics.update(ping)
        metrics["ping_one_way_us"] = ping["rtt_us_median"] / 2 if "rtt_us_median" in ping \
            else None
        return metrics

    def line(self, m: dict) -> str:
        idle = m["latency_us"].get("idle", {})
        parts = [f"idle p50 {idle.get('p50', float('nan')):.1f} us "
                 f"p99.9 {idle.get('p99_9', float('nan')):.1f} us"]
        if "ndr" in m["latency_us"]:
            parts.append(f"at NDR p50 {m['latency_us']['ndr'].get('p50', float('nan')):.1f} us")
        if m.get("ping_one_way_us") is not None:
            parts.append(f"ping RTT/2 {m['ping_one_way_us']:.1f} us")
        return ", ".join(parts)
