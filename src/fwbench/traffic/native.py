"""The native engine as an instrument: one trial = arm the receiver, send at an
offered load (or open throttle) for a duration, wait for the path to drain, read.

`EngineTraffic.measurer(tb, frame_size)` gives the one-call interface every method
is written against (`measure(duration_s, offered_pps) -> TrialResult`);
`EngineTraffic.measure(...)` is the open-throttle maximum rate the `maxrate` method
asks for. `send_only` sends packets whose fate is read elsewhere (conntrack's table,
a firewall's counters); `PacedStreams` runs paced flows until stopped, counted per
time slot (an update under traffic). Only this module drives fwbench.engine's
sender and receivers.
"""
from __future__ import annotations

import random
import secrets
import time
from dataclasses import dataclass
from typing import Annotated, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from fwbench import cpu, engine
from fwbench.errors import FwbenchError
from fwbench.measurer import TrialResult
from fwbench.testbed.base import OPEN_THROTTLE_EVERY, REFLECT_PPS, Testbed
from fwbench.traffic import accounting

_DRAIN_POLL_S = 0.02
_DRAIN_LIMIT_S = 2.0   # RFC 2544 waits 2 s for stragglers; we stop once nothing moves
# Every count a straggler can move.
_MOVING = ("received", "duplicated", "out_of_window", "stale", "malformed")


class EngineSettings(BaseModel):
    """The engine's knobs (a scenario's [engine])."""
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    receiver: Literal["sink", "recv"] = Field(
        "sink", description="sink: count in XDP on the server's interface (off the "
        "measured path); recv: a user-space UDP socket")
    threads: Annotated[int, Field(ge=1, le=64)] = 1
    flows: Annotated[int, Field(ge=1, le=65535)] = Field(
        1, description="source ports, round robin (for RSS and conntrack-like traffic)")
    late_us: Annotated[int, Field(ge=1)] = 1_000_000
    sender: Literal["auto", "packet", "xdp"] = Field(
        "auto", description="packet: an AF_PACKET socket (sendmmsg); xdp: XDP live "
        "frames (BPF_PROG_RUN), about 2x the packet socket's rate here, which needs GRO "
        "on the firewall's ingress (the testbed turns it on and records it); auto: xdp "
        "at open throttle where a probe through the testbed shows it works, the packet "
        "socket for paced sending and elsewhere (recorded per trial)")


@dataclass(frozen=True)
class Flow:
    """What the engine sends: the rule set's measured flow (None: seed 000's IPv4
    test flow), and its destination port on arrival (after any DNAT). `at` is the
    host it is addressed to: the server, or "fw", the firewall itself (its
    client-side address; seed 003's INPUT chain), received there by a socket."""
    src: str | None = None
    dst: str | None = None
    dport: int = engine.ENGINE_PORT
    sink_port: int = engine.ENGINE_PORT
    at: str = "server"

    @property
    def version(self) -> int:
        return 6 if self.dst and ":" in self.dst else 4


def _us(lat_ns: dict) -> dict[str, float] | None:
    if not lat_ns.get("count"):
        return None
    return {k: round(v / 1000, 3) for k, v in lat_ns.items() if k != "count"}


def reflect_every(offered_pps: float) -> int:
    """Which packets the server's sink reflects when the engine times round trips:
    every one whose sequence number is a multiple of this power of two, so that
    about REFLECT_PPS come back (all of them below it). At open throttle, where
    the rate is known only afterwards, 1 in OPEN_THROTTLE_EVERY."""
    if offered_pps <= 0:
        return OPEN_THROTTLE_EVERY
    every = 1
    while offered_pps / every > REFLECT_PPS:
        every *= 2
    return every


def drain(rx: engine.Receiver) -> dict:
    """Read until the count stops moving: packets queued in the firewall
    still arrive after the sender has finished."""
    got = rx.read()
    deadline = time.monotonic() + _DRAIN_LIMIT_S
    while time.monotonic() < deadline:
        time.sleep(_DRAIN_POLL_S)
        again = rx.read()
        if all(again[k] == got[k] for k in _MOVING):
            return again
        got = again
    return got


def _span_s(got: dict) -> float | None:
    """Seconds from the first packet's arrival to the last's, None with fewer than two."""
    if got.get("received", 0) < 2 or not got.get("first_ns"):
        return None
    return (got["last_ns"] - got["first_ns"]) / 1e9


def overload_rate(r: TrialResult) -> tuple[float, str]:
    """The rate a saturated firewall forwards: packets over the time they took to
    arrive, and how it was taken.

    Not packets over the trial's duration: under overload the firewall takes packets
    into its backlog a full queue at a time (net.core.netdev_max_backlog, 1,000 here),
    so the count that ever arrives moves in steps of a queue (7 % of the figure at
    10,000 nft rules in 3 s) and repeated trials give the same count, a variance of
    zero. The output side is continuous: packets leave one by one at the rate the
    firewall manages, so count over arrival span measures it without the steps."""
    span = r.extra.get("arrival_span_s")
    if span and span > 0.5 * r.duration_s:
        return (r.received - 1) / span, "arrival span"
    return r.forwarded_pps, "trial duration"


class EngineMeasurer:
    """`measure(duration_s, offered_pps)` through one testbed at one frame size."""

    def __init__(self, traffic: "EngineTraffic", tb: Testbed, frame_size: int):
        self.traffic = traffic
        self.tb = tb
        self.frame_size = frame_size
        self._rng = random.Random()

    def measure(self, duration_s: float, offered_pps: float) -> TrialResult:
        """`offered_pps` 0 means open throttle: as fast as the sender can."""
        rx = self.traffic.receiver(self.tb)
        back = self.traffic.returns(self.tb)
        st, flow = self.traffic.settings, self.traffic.flow
        cookie = self._rng.randrange(1, 2**32)
        if back is not None:
            rx.reflect(reflect_every(offered_pps))
            back.arm(cookie)
        rx.arm(cookie)
        path = accounting.path_counters(self.tb) if flow.at != "fw" else None
        before = cpu.CpuSample.of(self.tb)
        sent = engine.send(self.tb, frame_size=self.frame_size, rate_pps=offered_pps,
                           duration_s=duration_s, cookie=cookie, threads=st.threads,
                           sport_count=st.flows, src=flow.src, dst=flow.dst,
                           dport=flow.dport, via=self.traffic.sender_for(offered_pps))
        got = drain(rx)
        after = cpu.CpuSample.of(self.tb)
        if path is not None:
            acct = accounting.account(path, accounting.path_counters(self.tb), sent["sent"],
                                      sent["refused_by_next_hop"], got)
        fw_cpu = self.tb.topo.settings.firewall_cpu
        timed = got
        extra = {"open_throttle": offered_pps <= 0,
                 "send_lag_us": _us(sent["send_lag_ns"]),
                 "send_errors": sent["send_errors"],
                 "refused_by_next_hop": sent["refused_by_next_hop"],
                 "stale": got["stale"], "early": got["early"],
                 "malformed": got["malformed"], "receiver": rx.kind,
                 "sender": sent.get("via", "packet"),
                 "arrival_span_s": _span_s(got), "latency_kind": "one-way"}
        if path is not None:
            extra["accounting"] = acct
        if back is not None:
            timed = drain(back)
            extra.update(_round_trip(got, timed, self.tb.one_clock, flow))
        elif not self.tb.one_clock:
            # A receiver that sends nothing back, on another clock than the sender:
            # its latencies would subtract one clock from another.
            timed = {**got, "late": 0, "latency_ns": {}}
            extra.update(latency_kind="not timed", early=None)
        return TrialResult(
            offered_pps=offered_pps if offered_pps > 0 else sent["achieved_pps"],
            duration_s=duration_s,
            sent=sent["sent"],
            received=got["received"],
            achieved_pps=sent["achieved_pps"],
            reordered=got["reordered"],
            duplicated=got["duplicated"],
            late=timed["late"],
            out_of_window=got["out_of_window"],
            latency_us=_us(timed["latency_ns"]),
            cpu=cpu.delta(before, after, got["received"], fw_cpu),
            extra=extra,
        )


def _round_trip(got: dict, back: dict, one_clock: bool, flow: Flow) -> dict:
    """What a round-trip trial adds to its record: how many packets the server
    reflected and how many came back; with one clock, the one-way latency too."""
    if got["reflected"] >= 10 and back["received"] == 0:
        raise FwbenchError(
            f"round trip: none of the {got['reflected']:,} packets the server's sink sent "
            f"back reached the client; the firewall must let the return path through "
            f"(UDP from the server's port {flow.sink_port} to the client)")
    out = {"latency_kind": "round trip", "reflected": got["reflected"],
           "returned": back["received"], "returned_duplicated": back["duplicated"],
           # returned before they were due: clock trouble on the client (the
           # server's count compares two clocks, and says nothing across machines)
           "early": back["early"]}
    if one_clock:
        out["one_way_latency_us"] = _us(got["latency_ns"])
    return out

class EngineTraffic:
    name = "engine"

    def __init__(self, settings: EngineSettings | None = None, flow: Flow | None = None):
        self.settings = settings or EngineSettings()
        self.flow = flow or Flow()
        self._rx: engine.Receiver | None = None
        self._back: engine.Receiver | None = None   # round trips: the client's sink
        # How the sender sends: "xdp" only when asked for, or once an experiment has
        # probed it through a testbed with GRO at the firewall's ingress (resolve_sender).
        self.via = "xdp" if self.settings.sender == "xdp" else "packet"
        self._probing = False

    def sender_for(self, offered_pps: float) -> str:
        """The sender of one send. With `auto`, XDP sends only at open throttle (the
        ceiling, maxrate); paced sending stays on the packet socket: a paced XDP run
        started up to 100 ms late here (cpucost, its soaker spinning on the firewall's
        CPU) and caught up in a burst, which overflowed the firewall's backlog
        (300-1,100 of 25,000 frames lost at 50,000 pps, where the packet socket lost
        none). `xdp` asked by name sends with XDP always."""
        if self.via == "xdp" and (offered_pps <= 0 or self.settings.sender == "xdp"
                                  or self._probing):
            return "xdp"
        return "packet"

    def versions(self) -> dict[str, str | None]:
        return {"fwbench-engine": engine.version()}

    def start(self, tb: Testbed) -> None:
        self.receiver(tb)
        self.returns(tb)

    def receiver(self, tb: Testbed) -> engine.Receiver:
        if self._rx is None:
            st, flow = self.settings, self.flow
            at = tb.topo.fw_client_side if flow.at == "fw" else tb.topo.server
            via = "tx"
            if tb.round_trip and st.receiver == "sink" and tb.driver(at) == "veth":
                via = "redirect"    # engine/sink.bpf.c says why
            self._rx = engine.Receiver(tb, st.receiver, st.late_us, flow.sink_port,
                                       flow.version, at, reflect_via=via)
        return self._rx

    def returns(self, tb: Testbed) -> engine.Receiver | None:
        """The sink on the client that times round trips, when the testbed has the
        engine time them (Testbed.round_trip) and the receiver can send packets back
        (the XDP sink on the server); else None. Asked for by name where it cannot:
        one line."""
        if not tb.round_trip:
            return None
        st, flow = self.settings, self.flow
        if st.receiver != "sink" or flow.at != "server":
            if tb.topo.settings.latency == "round-trip":
                raise FwbenchError("round-trip latency needs the XDP sink on the server "
                                   "(receiver sink, a flow to the server): it is the "
                                   "sink that sends packets back")
            return None     # across clocks: not timed (EngineMeasurer.measure)
        if self._back is None:
            # Coming back, the packets leave from the port the client sent to (a
            # DNAT'd flow's is translated back by the firewall). On veth a native XDP
            # program moves the client's receive path from the backlog (1,000
            # packets) to a ring of 256, which a TCP load overflows (seed 004's
            # pings were lost): generic XDP leaves the path as it was.
            mode = "generic" if tb.driver(tb.topo.client) == "veth" else "native"
            self._back = engine.Receiver(tb, "sink", st.late_us, flow.dport, flow.version,
                                         tb.topo.client, returns=True, xdp_mode=mode)
        return self._back

    def resolve_sender(self, tb: Testbed, frame_size: int,
                       open_throttle: bool = True) -> dict:
        """Settle `auto` (and check `xdp`) on this testbed: a short paced trial with the
        XDP sender, no firewall loaded, must arrive whole. `open_throttle` False: the
        experiment paces its sending, and `auto` keeps to the packet socket (its
        ceiling, the top of every search, is then the packet socket's too). Returns
        what the record keeps: the sender used and, if `auto` fell back, why."""
        want = self.settings.sender
        if want == "packet":
            return {"sender": "packet", "asked": want}
        if want == "auto" and not open_throttle:
            return {"sender": "packet", "asked": want,
                    "why": "XDP sends only at open throttle (maxrate); this method paces"}
        self.via, self._probing = "xdp", True
        why = None
        try:
            r = self.measurer(tb, frame_size).measure(0.2, 2000)
            if r.sent == 0 or r.received < r.sent:
                why = (f"a probe of {r.sent} frames through the testbed delivered "
                       f"{r.received}")
        except FwbenchError as e:
            why = str(e)
        finally:
            self._probing = False
        if why is None:
            return {"sender": "xdp", "asked": want,
                    "paced": "xdp" if want == "xdp" else "packet"}
        self.via = "packet"
        if want == "xdp":
            raise FwbenchError(f"the XDP sender does not work here: {why}")
        return {"sender": "packet", "asked": want, "xdp_unavailable": why}

    def close(self) -> None:
        """Stop the receiver (detaching the XDP sink); the next trial starts one."""
        for rx in (self._rx, self._back):
            if rx is not None:
                rx.close()
        self._rx = self._back = None

    def restart(self, tb: Testbed) -> None:
        self.close()
        self.start(tb)

    def measurer(self, tb: Testbed, frame_size: int) -> EngineMeasurer:
        return EngineMeasurer(self, tb, frame_size)

    def measure(self, tb: Testbed, frame_size: int, duration_s: float) -> dict:
        """Open throttle for `duration_s`: the rate the firewall forwards under overload."""
        r = self.measurer(tb, frame_size).measure(duration_s, 0)
        rate, over = overload_rate(r)
        return {"rx_pps": rate, "rx_pps_over": over, "rx_pps_window": r.forwarded_pps,
                "tx_pps": r.achieved_pps,
                "sent": r.sent, "received": r.received, "loss_ratio": r.loss_ratio,
                "refused_by_next_hop": r.extra["refused_by_next_hop"],
                "sender": r.extra["sender"],
                "duplicated": r.duplicated, "reordered": r.reordered,
                "out_of_window": r.out_of_window,
                "latency_us": r.latency_us, "latency_kind": r.extra["latency_kind"],
                "cpu": r.cpu,
                **({"accounting": r.extra["accounting"]} if "accounting" in r.extra else {})}


def send_only(tb: Testbed, *, frame_size: int, rate_pps: float = 0,
              duration_s: float = 0, count: int | None = None, **flow) -> dict:
    """One send with no receiver of the engine's armed for it (a fresh random
    cookie): packets whose fate is read elsewhere, in the firewall's conntrack
    table or its counters. For `duration_s`, or `count` packets per stream;
    `rate_pps` 0 is open throttle; `flow` as fwbench.engine.send's (src, dst,
    dport, src_count, sport_count, payload_text, ...). The sender's report."""
    return engine.send(tb, frame_size=frame_size, rate_pps=rate_pps,
                       duration_s=duration_s, count=count,
                       cookie=random.randrange(1, 2**32), **flow)


class PacedStreams:
    """Paced flows from the client to consecutive UDP ports on the server, flow i
    sent as stream i by a sender of its own, until `stop()`: for trials whose end
    is not known when they start (a rule-set update under traffic). The XDP sink
    on the server counts them with a time series per `slot_ns` of scheduled send
    time from the moment it starts (Receiver.series); the senders start after it
    is armed. `limit_s` only bounds a sender nothing stopped. `stop()` gives the
    senders' reports, `read()` the sink's count and series; leaving the `with`
    stops what still runs and the sink."""

    def __init__(self, tb: Testbed, flows: Sequence[tuple[int, float]], *,
                 frame_size: int, slot_ns: int, limit_s: float,
                 spin_us: int | None = None):
        ports = [dport for dport, _ in flows]
        if ports != list(range(ports[0], ports[0] + len(ports))):
            raise FwbenchError(f"paced streams to ports {ports}: the sink counts "
                               f"consecutive ports only")
        self._rx = engine.Receiver(tb, "sink", port=ports[0], ports=len(ports))
        self._senders: list[engine.Sender] = []
        try:
            self._rx.series(time.monotonic_ns(), slot_ns)
            cookie = secrets.randbelow(2**32 - 1) + 1
            self._rx.arm(cookie)
            for stream, (dport, rate) in enumerate(flows):
                self._senders.append(engine.Sender(
                    tb, frame_size=frame_size, rate_pps=rate, duration_s=limit_s,
                    cookie=cookie, dport=dport, stream=stream,
                    cpus=[tb.topo.settings.sender_cpu], spin_us=spin_us))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "PacedStreams":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stop(self) -> list[dict]:
        """Stop every sender: their reports, flow by flow."""
        reports = [snd.stop() for snd in self._senders]
        self._senders.clear()
        return reports

    def read(self) -> tuple[dict, dict]:
        """The sink's count and its series (Receiver.read_series)."""
        return self._rx.read(), self._rx.read_series()

    def close(self) -> None:
        for snd in self._senders:
            try:
                snd.stop()
            except FwbenchError:
                pass
        self._senders.clear()
        self._rx.close()
