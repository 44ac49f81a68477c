"""The forward-path policy every backend loads, whatever its syntax.

A Policy is an ordered list of allow entries (destination address, protocol, port),
first match wins, default drop, plus two auxiliary allow rules that every rendering
places after the entries: the iperf3 control connection (TCP) and ICMP echo-request
to the server. Traffic from the server side is accepted (the return path).

`size` counts entries only: N rules in a linear chain, N elements in a set. The
auxiliary rules are the same in every rendering and are not part of N.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from fwbench.ruleset.model import Interfaces  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class Entry:
    daddr: str   # IPv4 address in the benchmarking range
    proto: str   # "tcp" or "udp"
    dport: int


@dataclass(frozen=True)
class Policy:
    entries: tuple[Entry, ...]
    test_entry: Entry            # the entry the measured UDP flow must hit
    control: Entry               # iperf3's TCP control connection, auxiliary
    ping_daddr: str              # ICMP echo-request to this address, auxiliary
    counters: bool = True        # a counter on every entry rule (linear nft only)
    template: str = "seed000"

    @property
    def size(self) -> int:
        return len(self.entries)

    def digest(self) -> str:
        """A stable hash of the policy, recorded with every trial."""
        h = hashlib.sha256()
        h.update(f"{self.template};{self.counters};{self.control};{self.ping_daddr};"
                 f"{self.test_entry}\n".encode())
        for e in self.entries:
            h.update(f"{e.daddr} {e.proto} {e.dport}\n".encode())
        return h.hexdigest()
