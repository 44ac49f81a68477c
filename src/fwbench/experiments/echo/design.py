"""Which cells an echo run measures, which it leaves out and why, and how long it takes.

A cell is one value of each of FACTORS. The scenario's [echo] lists are seed 001's
full design; its `designs` are cross products of subsets (a list a design leaves out
takes [echo]'s), and the run measures their union unless `full` is set. Some
combinations cannot be measured, and each is left out with its reason, never
silently: a thread-per-client server over UDP (no connection per client; the seed ran
threads for stream protocols only), a connection per message over UDP, background
connection-table entries for the stateless echo (nothing tracks them), SCTP on a
kernel without it, a backend that cannot hold the cell's rule set.

Pure but for `sctp_missing()`, which asks the kernel for an SCTP socket.
"""
from __future__ import annotations

from collections import Counter
from itertools import product
from typing import Callable

from fwbench.errors import FwbenchError
from fwbench.experiments.echo import EchoDesign, EchoSettings
from fwbench.plan import named_cell
from fwbench.traffic import echo as engine_echo

FACTORS = ("clients", "protocol", "family", "frame", "server", "rules_per_client",
           "backend", "transaction", "entries")
EchoCell = named_cell(FACTORS)

# What a trial costs besides its warm-up and measurement, from the default scenario on a
# 2-core machine (189 trials in 14 min 32 s, 4.6 s each with 2.5 s of traffic):
# building and verifying the rule set (most of it), proving every client's flow,
# starting and stopping the server, flushing. Per rule: loading, verifying, counters.
TRIAL_OVERHEAD_S = 2.0
TRIAL_PER_RULE_S = 0.0005
FILL_PER_ENTRY_S = 0.00003


def frame_bounds(frame: str) -> tuple[int, int]:
    """"64" -> (64, 64); "64-1024" -> (64, 1024)."""
    lo, _, hi = frame.partition("-")
    return int(lo), int(hi or lo)


def validate_frame(frame: str, protocol: str, family: str) -> None:
    """One line unless every message of `frame` fits the protocol and family."""
    lo, hi = frame_bounds(frame)
    least = engine_echo.HEADER_BYTES
    if lo < least:
        raise FwbenchError(f"echo frame {frame}: {lo} is below the minimum {least} "
                           f"for {protocol}/{family} (the message header)")
    top = engine_echo.UDP_MAX[4 if family == "ipv4" else 6] if protocol == "udp" \
        else engine_echo.STREAM_MAX
    if hi > top:
        why = "one datagram on a 1500-byte MTU" if protocol == "udp" else "the engine's limit"
        raise FwbenchError(f"echo frame {frame}: {hi} is above the maximum {top} for "
                           f"{protocol}/{family} ({why})")


def sctp_missing() -> str:
    """Why this machine cannot run SCTP cells."""
    # With SCTP in the kernel the engine would run it (through its TCP code, untested
    # here); the seed001 template has no SCTP rules yet, so the cells still cannot run.
    return engine_echo.sctp_missing() or "the seed001 rule-set template has no SCTP rules"


def not_applicable(cell: tuple) -> str | None:
    """Why a combination of factors has no meaning, or None."""
    c = dict(zip(FACTORS, cell))
    if c["server"] == "threads" and c["protocol"] == "udp":
        return ("a thread per client needs a connection per client: UDP runs the epoll "
                "server only (the seed ran threads for stream protocols only)")
    if c["transaction"] == "crr" and c["protocol"] != "tcp":
        return "a connection per message is TCP's (TCP_CRR)"
    if c["entries"] and c["transaction"] != "crr":
        return ("background connection-table entries apply to crr's stateful firewall; "
                "the seed's stateless rules track nothing")
    return None


def _lists(s: EchoSettings, d: EchoDesign | None, backends: list[str]) -> list[list]:
    def pick(name: str, default):
        got = getattr(d, name) if d is not None else None
        return list(got) if got is not None else list(default)
    return [pick("clients", s.clients), pick("protocols", s.protocols),
            pick("families", s.families), pick("frames", s.frames),
            pick("servers", s.servers), pick("rules_per_client", s.rules_per_client),
            pick("backends", backends), pick("transactions", s.transactions),
            pick("conntrack_entries", s.conntrack_entries)]


def cells(s: EchoSettings, backends: list[str],
          refuse: Callable[[tuple], str | None]) -> tuple[list[tuple], dict[str, int]]:
    """The cells to measure, in design order without repeats, and what was left out:
    {reason: number of cells}. `refuse(cell)` says why the machine cannot run a cell
    (SCTP, a backend that cannot hold the rule set) or None."""
    designs = [None] if s.full or not s.designs else list(s.designs)
    out: list[tuple] = []
    seen: set[tuple] = set()
    left: Counter[str] = Counter()
    for d in designs:
        for cell in product(*_lists(s, d, backends)):
            if cell in seen:
                continue
            seen.add(cell)
            why = not_applicable(cell) or refuse(cell)
            if why:
                left[why] += 1
                continue
            c = EchoCell(*cell)
            validate_frame(c.frame, c.protocol, c.family)
            out.append(cell)
    return out, dict(left)


def rules_of(cell: tuple) -> int:
    c = dict(zip(FACTORS, cell))
    return c["clients"] * c["rules_per_client"]


def estimate_s(cells_: list[tuple], repeat: int, duration_s: float, warmup_s: float) -> float:
    """Seconds the planned rounds take, from the per-trial costs above."""
    per_round = sum(TRIAL_OVERHEAD_S + warmup_s + duration_s + TRIAL_PER_RULE_S * rules_of(c)
                    + FILL_PER_ENTRY_S * dict(zip(FACTORS, c))["entries"] for c in cells_)
    return per_round * repeat


def hms(seconds: float) -> str:
    m = round(seconds / 60)
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{m} min"
