"""`throughput`: NDR and PDR from one MLRsearch-style search (`methods.search`),
through the engine, for one cell. Every search trial goes to the record."""
from __future__ import annotations

from fwbench.methods.base import Method, fmt_pps
from fwbench.methods.search import SearchConfig, SearchResult, search
from fwbench.experiments.sweep import ThroughputSettings
from fwbench.testbed.base import Testbed
from fwbench.traffic.native import EngineTraffic


def search_config(s: ThroughputSettings, duration_s: float, ceiling_pps: float) -> SearchConfig:
    """The search for one cell: the scenario's settings, the trial duration, and the
    sender's ceiling as the top of the range unless the scenario fixes one."""
    top = s.max_load_pps or ceiling_pps
    if s.preset == "rfc2544-strict":
        return SearchConfig.rfc2544_strict(
            max_load_pps=top, min_load_pps=s.min_load_pps, trial_duration_s=duration_s,
            relative_width=s.relative_width, warmup_duration_s=s.warmup_duration_s,
            max_trials=s.max_trials)
    return SearchConfig(
        max_load_pps=top, min_load_pps=s.min_load_pps, loss_ratios=tuple(s.loss_ratios),
        exceed_ratio=s.exceed_ratio, final_trial_duration_s=duration_s,
        duration_sum_s=s.duration_sum_s,
        initial_trial_duration_s=min(s.initial_trial_duration_s, duration_s),
        relative_width=s.relative_width, warmup_duration_s=s.warmup_duration_s,
        max_trials=s.max_trials)


def search_metrics(res: SearchResult, top_is_sender_ceiling: bool = True) -> dict:
    """The record's view of a search: NDR/PDR with bounds up front, trials apart.

    With no loss up to the top of the range and the top being the sender's measured
    ceiling, the answer is "at least the ceiling": the generator was the limit, and
    the record says so (`*_generator_limited`)."""
    out: dict = {}
    for goal, key in ((res.ndr, "ndr"), (res.pdr, "pdr")):
        if goal is None:
            continue
        capped = goal.generator_limited or (top_is_sender_ceiling
                                            and goal.upper_bound_pps is None
                                            and goal.lower_bound_pps is not None)
        out[f"{key}_pps"] = goal.lower_bound_pps
        out[f"{key}_bounds_pps"] = [goal.lower_bound_pps, goal.upper_bound_pps]
        out[f"{key}_finished"] = goal.finished
        out[f"{key}_generator_limited"] = capped
    d = res.to_dict()
    out["trials"] = d.pop("trials")
    out["search"] = d
    # CPU cost where it means most: the highest-load trial that forwarded everything.
    clean = [t for t in out["trials"] if not t["discarded"] and t["lost"] == 0
             and t.get("cpu") and t["cpu"]["fw_cpu_ns_per_pkt"]]
    if clean:
        best = max(clean, key=lambda t: t["offered_pps"])
        out["cpu_at_ndr"] = {"offered_pps": best["offered_pps"], **best["cpu"]}
    return out


def validate_search(sc) -> None:
    """Settings the search would reject, rejected before a testbed is built: with a
    stand-in ceiling, as the real one is measured per frame size."""
    top = sc.throughput.max_load_pps or 2 * sc.throughput.min_load_pps
    search_config(sc.throughput, sc.duration_s, top)


class Throughput(Method):
    name = "throughput"

    @classmethod
    def for_scenario(cls, sc, engine, ping) -> "Throughput":
        validate_search(sc)
        return cls(engine, sc.throughput)

    def __init__(self, traffic: EngineTraffic, settings: ThroughputSettings):
        super().__init__(traffic)
        self.settings = settings

    def search(self, tb: Testbed, frame_size: int, duration_s: float) -> SearchResult:
        cfg = search_config(self.settings, duration_s, self.sender_ceiling(tb, frame_size))
        return search(self.measurer(tb, frame_size), cfg, on_trial=self.step)

    def run(self, tb, frame_size, duration_s, **_) -> dict:
        return search_metrics(self.search(tb, frame_size, duration_s),
                              self.settings.max_load_pps is None)

    def line(self, m: dict) -> str:
        ndr, pdr = m.get("ndr_pps"), m.get("pdr_pps")
        if m.get("ndr_generator_limited"):
            return (f"NDR >= {fmt_pps(ndr)} pps, PDR >= {fmt_pps(pdr)} pps "
                    f"(no loss up to the sender's ceiling)")
        return f"NDR {fmt_pps(ndr)} pps, PDR {fmt_pps(pdr)} pps"
