"""`fixedrate`: seed 003's flows. A fixed offered load per frame size (128 B at
15 Mbit/s, 512 B at 30 Mbit/s, 1280 B at 45 Mbit/s), and what the firewall
processes of it as the rule set grows.

Rates count whole frames (incl. FCS): 15 Mbit/s of 128-byte frames is 14,648 pps.
(Seed 003 used iPerf, whose rate counts payload; the packet rate is the same if its
"128 B packet" was the payload, only each frame is 46 B longer.)

The degradation point, where loss begins, is found by search instead of a coarse
grid: in the cell with the largest planned rule count, if that cell loses packets,
the method bisects the rule count (reloading and re-verifying the backend each step)
down to the largest N that still forwards everything (`degraded`: nothing lost,
and the sender not held back).

Under overload the processed rate is the count over its arrival span, not over the
trial (`processed_rate`). With the firewall as the endpoint (seed 003's INPUT
chain, `count_delivered`), the count is its own of packets past the input hook: IP's InDelivers in
its namespace, read around every point (exact, and independent of whether the
socket receiving them there kept up; the receiver's own count is kept beside it).
Every point also keeps each CPU's softirq share of the window, as seed 003 plotted
per-CPU utilisation.
"""
from __future__ import annotations

import math

from fwbench import cpu
from fwbench.errors import FwbenchError
from fwbench.methods.base import REDO, Method, Reload
from fwbench.experiments.fixedrate import FIXED_FLOWS_BPS, FixedRateSettings
from fwbench.testbed.base import Testbed
from fwbench.traffic.native import EngineTraffic

# The firewall namespace's counters read around an INPUT point: IPv4 delivered past
# the input hook, and where UDP put it (a socket, a full socket, no socket).
DELIVERY_COUNTERS = ("Ip:InDelivers", "Udp:InDatagrams", "Udp:RcvbufErrors",
                     "Udp:InErrors", "Udp:NoPorts")


# Arrivals spanning this much longer than the trial: the firewall fell behind.
BEHIND = 0.05


def degraded(point: dict) -> bool:
    """The firewall did not keep up with the flow: it lost packets, it held the
    sender back (short of its offered load by more than fwbench.measurer's
    tolerance), or it fell behind (`fell_behind`).

    Held back: where the firewall's receive processing runs on the sender's CPU
    (RPS over both CPUs of a 2-CPU machine), veth runs it in the sender's own
    system calls, so the sender slows instead of packets being dropped. Behind:
    the arrivals spanned more than the trial by BEHIND; the excess waited in the
    firewall's backlog (1,000 packets) and a longer trial would have lost it. A
    0.5 s trial of the 1280 B flow (2,197 packets) through 20,000 nft rules lost
    nothing, its last packets 260 ms late."""
    return (point["loss_ratio"] > 0 or bool(point.get("sender_short"))
            or bool(point.get("fell_behind")))


def fell_behind(span_s: float | None, duration_s: float) -> bool:
    return bool(span_s) and span_s > duration_s * (1 + BEHIND)


def delivered_by(tb: Testbed) -> str:
    """Which counters count the INPUT flow past the firewall's input hook. IP's
    InDelivers, exactly; on a host carrying its own traffic (a real host's SSH
    session is TCP) the UDP layer's intake instead: InDatagrams + InErrors (full
    sockets among them) + NoPorts, which the host's own UDP (a resolver, NTP)
    also moves, by a few packets a second."""
    if tb.own_traffic:
        return "UDP InDatagrams + InErrors + NoPorts (the host's own traffic is TCP)"
    return "IP InDelivers"


def flow_pps(frame_size: int) -> float:
    try:
        return FIXED_FLOWS_BPS[frame_size] / (frame_size * 8)
    except KeyError:
        raise FwbenchError(f"fixedrate: no seed-003 flow for {frame_size} B frames "
                           f"(flows: {', '.join(map(str, FIXED_FLOWS_BPS))} B)") from None


class FixedRate(Method):
    name = "fixedrate"
    remeasure = False    # its points re-measure themselves (_point): an INPUT flow's
                         # loss is the firewall's counters', not the measurer's
    any_flow = False

    @classmethod
    def for_scenario(cls, sc, engine, ping) -> "FixedRate":
        return cls(engine, sc.fixedrate, max(sc.rules))

    def __init__(self, traffic: EngineTraffic, settings: FixedRateSettings, max_rules: int,
                 count_delivered: bool = False):
        super().__init__(traffic)
        self.settings = settings
        self.max_rules = max_rules
        # The flow ends at the firewall itself: count what passed its input hook.
        self.count_delivered = count_delivered
        self._tb: Testbed | None = None

    def _delivery(self) -> dict[str, int]:
        s = self._tb.snmp("fw")
        return {k: s.get(k, 0) for k in DELIVERY_COUNTERS}

    def _delivered(self, d: dict[str, int]) -> int:
        """Packets past the input hook, from the counters' deltas (delivered_by)."""
        if self._tb.own_traffic:
            return d["Udp:InDatagrams"] + d["Udp:InErrors"] + d["Udp:NoPorts"]
        return d["Ip:InDelivers"]

    def _point(self, m, duration_s, pps) -> dict:
        """One fixed-rate measurement, taken again (at most REDO times) while it was
        disturbed and lost packets; the disturbed ones go to the trial's record
        (Method.take_disturbed). Here and not in the measurer: an INPUT flow's loss
        is read from the firewall's counters around the measurement, and the
        receiver counts nothing of it."""
        for attempt in range(REDO + 1):
            out, r = self._measure_point(m, duration_s, pps)
            why = cpu.disturbed(r.cpu)
            if why is None or not (out["loss_ratio"] > 0 or degraded(out)):
                return out
            self._disturbed.append({"offered_pps": pps, "sent": r.sent,
                                    "loss_ratio": out["loss_ratio"], "disturbed": why,
                                    "kept": attempt == REDO})
        out["disturbed"] = why
        return out

    def _measure_point(self, m, duration_s, pps) -> tuple[dict, object]:
        before = self._delivery() if self.count_delivered else None
        r = m.measure(duration_s, pps)
        got, lost = r.received, r.lost
        out = {"offered_pps": pps, "achieved_pps": r.achieved_pps,
               "loss_ratio": r.loss_ratio, "sender_short": r.sender_short,
               "accounting": r.extra.get("accounting"),
               "p50_us": (r.latency_us or {}).get("p50"),
               "fw_cpu_ns_per_pkt": (r.cpu or {}).get("fw_cpu_ns_per_pkt"),
               "softirq_share": softirq_share(r.cpu)}
        if before is not None:
            after = self._delivery()
            d = {k: after[k] - before[k] for k in DELIVERY_COUNTERS}
            got = min(self._delivered(d), r.sent)
            lost = r.sent - got
            out.update(loss_ratio=lost / r.sent, delivered=got,
                       received_by_socket=r.received, socket_loss_ratio=r.loss_ratio,
                       fw_counters={k.replace(":", "_"): v for k, v in d.items()})
        span = r.extra.get("arrival_span_s")
        out["arrival_span_s"] = span
        out["fell_behind"] = fell_behind(span, duration_s)
        out["processed_pps_window"] = got / duration_s
        out["processed_pps"], out["processed_over"] = processed_rate(
            got, duration_s, span, degraded(out))
        return out, r

    def run(self, tb, frame_size, duration_s, *, rules: int | None = None,
            reload: Reload | None = None) -> dict:
        pps = flow_pps(frame_size)
        self._tb = tb
        m = self.measurer(tb, frame_size)
        here = self._point(m, duration_s, pps)
        out = {"flow_bps": FIXED_FLOWS_BPS[frame_size], **here}
        if (self.settings.find_degradation and reload is not None and rules
                and rules == self.max_rules and degraded(here)):
            out.update(self._degradation(m, duration_s, pps, rules, reload))
        return out

    def _degradation(self, m, duration_s, pps, n_lossy, reload: Reload) -> dict:
        """Bisect the rule count in log space between 1 (assumed clean, checked) and
        n_lossy until the bracket is within the configured relative width."""
        steps = []

        def lossy(n: int) -> bool:
            reload(n)
            p = self._point(m, duration_s, pps)
            steps.append({"rules": n, **p})
            return degraded(p)

        lo, hi = 1, n_lossy
        try:
            # A single rule cannot hold the flow back: a degraded point there is the
            # machine's hiccup (a late sender, another job), so it must repeat.
            if lossy(lo) and lossy(lo):
                return {"degradation_rules": None, "degradation_bounds": [None, 1],
                        "trials": steps}
            while (hi - lo) / hi > self.settings.rules_width and hi - lo > 1:
                mid = max(lo + 1, min(hi - 1, round(math.sqrt(lo * hi))))
                if lossy(mid):
                    hi = mid
                else:
                    lo = mid
        finally:
            reload(n_lossy)  # leave the cell's own rule set in place
        return {"degradation_rules": lo, "degradation_bounds": [lo, hi], "trials": steps}

    def line(self, m: dict) -> str:
        s = (f"{m['processed_pps']:,.0f} of {m['offered_pps']:,.0f} pps processed, "
             f"loss {m['loss_ratio']:.2%}")
        if m.get("degradation_bounds"):
            lo, hi = m["degradation_bounds"]
            s += f"; loss begins between {lo} and {hi} rules"
        return s


def processed_rate(count: int, duration_s: float, span_s: float | None,
                   overloaded: bool) -> tuple[float, str]:
    """Packets the firewall processed per second, and how it was taken.

    A firewall that keeps up processes the flow as it comes: count over the trial's
    duration. An overloaded one fills its backlog (netdev_max_backlog, 1,000 here)
    and works through it after the sender stops, so count over duration overstates
    it by up to 1,000 / duration (2,000 pps in a 0.5 s trial, against 2,500 pps of
    nftables at 20,000 rules); and when the drain stops reading early (the count
    still for one 20 ms poll) the backlog is left out in one path and not in the
    other: at 20,000 nft rules FORWARD read 5,248 of 2 s and INPUT 6,239, both at
    2,500 pps over their arrival spans. So under overload the count over its
    arrival span (first to last packet), as maxrate does (traffic.native's
    overload_rate)."""
    if overloaded and span_s and span_s > 0.5 * duration_s and count > 1:
        return (count - 1) / span_s, "arrival span"
    return count / duration_s, "trial duration"


def softirq_share(cpu: dict | None) -> dict[str, float] | None:
    """Each CPU's softirq time as a share of the trial's window (fwbench.cpu's ticks,
    10 ms here): where the firewall's receive processing ran."""
    if not cpu or not cpu.get("per_cpu"):
        return None
    out = {}
    for c, v in cpu["per_cpu"].items():
        total = sum(v.values())
        out[c] = round(v["softirq_ns"] / total, 4) if total else 0.0
    return out
