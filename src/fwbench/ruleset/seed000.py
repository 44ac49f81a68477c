"""The rule-set template of seed 000 (Appendices B-E).

N entries: N-1 filler entries `ip daddr <server> tcp dport 40000+i accept` that the
UDP test flow never matches, then the UDP test entry last, so every measured packet
traverses all N rules of a linear chain before it is accepted.
"""
from __future__ import annotations

import ipaddress

from fwbench.ruleset.policy import Entry, Policy

FILLER_BASE_PORT = 40000
_PORTS_PER_ADDRESS = 65536 - FILLER_BASE_PORT
# Past 25,536 fillers the ports run out; later blocks use other, unassigned
# destination addresses from the benchmarking range, one /24 of them.
_FILLER_SPILL_NET = ipaddress.IPv4Network("198.19.255.0/24")
MAX_ENTRIES = 1 + _PORTS_PER_ADDRESS * (1 + _FILLER_SPILL_NET.num_addresses - 2)


def _filler(i: int, server: str) -> Entry:
    block, offset = divmod(i, _PORTS_PER_ADDRESS)
    daddr = server if block == 0 else str(_FILLER_SPILL_NET[block])
    return Entry(daddr, "tcp", FILLER_BASE_PORT + offset)


def seed000(n: int, server: str, test_port: int = 5201, control_port: int = 5201,
            counters: bool = True) -> Policy:
    if not 1 <= n <= MAX_ENTRIES:
        raise ValueError(f"rule count must be 1..{MAX_ENTRIES}, got {n}")
    test = Entry(server, "udp", test_port)
    entries = tuple(_filler(i, server) for i in range(n - 1)) + (test,)
    return Policy(entries=entries, test_entry=test,
                  control=Entry(server, "tcp", control_port), ping_daddr=server,
                  counters=counters)


def with_entry_replaced(policy: Policy, old: Entry, new: Entry) -> Policy:
    """The same policy with one entry swapped: how tests build a broken rule set."""
    entries = tuple(new if e == old else e for e in policy.entries)
    return Policy(entries=entries, test_entry=policy.test_entry, control=policy.control,
                  ping_daddr=policy.ping_daddr, counters=policy.counters,
                  template=policy.template + "-modified")
