"""`lossload`: RFC 2544's frame loss rate curve. Offer the sender's ceiling, then step
down by a share of it, until two successive loads lose nothing (or the whole range,
when asked). Each point keeps offered, achieved and forwarded rates: loss is counted
against what was actually sent, not against what was asked."""
from __future__ import annotations

from fwbench.methods.base import Method
from fwbench.experiments.sweep import LossLoadSettings
from fwbench.traffic.native import EngineTraffic


class LossLoad(Method):
    name = "lossload"

    @classmethod
    def for_scenario(cls, sc, engine, ping) -> "LossLoad":
        return cls(engine, sc.lossload)

    def __init__(self, traffic: EngineTraffic, settings: LossLoadSettings):
        super().__init__(traffic)
        self.settings = settings

    def run(self, tb, frame_size, duration_s, **_) -> dict:
        s = self.settings
        top = s.max_load_pps or self.sender_ceiling(tb, frame_size)
        m = self.measurer(tb, frame_size)
        curve, clean_in_a_row = [], 0
        steps = round(1 / s.step)
        for i in range(steps):
            load = top * (1 - i * s.step)
            r = m.measure(duration_s, load)
            curve.append({"offered_pps": load, "achieved_pps": r.achieved_pps,
                          "forwarded_pps": r.forwarded_pps, "sent": r.sent,
                          "received": r.received, "loss_ratio": r.loss_ratio,
                          "sender_short": r.sender_short,
                          "accounting": r.extra.get("accounting"),
                          "p50_us": (r.latency_us or {}).get("p50"),
                          "fw_cpu_ns_per_pkt": (r.cpu or {}).get("fw_cpu_ns_per_pkt")})
            clean_in_a_row = clean_in_a_row + 1 if r.lost == 0 else 0
            if clean_in_a_row == 2 and not s.full_range:
                break
        lossless = [p["offered_pps"] for p in curve if p["loss_ratio"] == 0
                    and not p["sender_short"]]
        return {"curve": curve, "loss_ratio_at_max": curve[0]["loss_ratio"],
                "max_lossless_offered_pps": max(lossless) if lossless else None,
                "latency_kind": r.extra.get("latency_kind", "one-way"),
                "trials": curve}

    def line(self, m: dict) -> str:
        best = m["max_lossless_offered_pps"]
        return (f"loss {m['loss_ratio_at_max']:.1%} at the ceiling, lossless from "
                f"{'n/a' if best is None else f'{best:,.0f}'} pps, {len(m['curve'])} points")
