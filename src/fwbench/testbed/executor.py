"""How commands reach the testbed's hosts: the one interface every caller outside the
provider runs commands through, so a provider for real hosts (over SSH, say)
implements an Executor and nothing else changes.

A host is named by its role in the topology ("client", "fw", "server", ...).
`NetnsExecutor` is the netns provider's: a command runs in the host's namespace.
"""
from __future__ import annotations

import subprocess
from abc import ABC, abstractmethod
from typing import Sequence

from fwbench import proc
from fwbench.testbed.topology import Topology


class Executor(ABC):
    """Runs commands on a testbed's hosts. Failures are FwbenchErrors, as proc.run
    makes them: a CommandError with the tool's own message, or one line for a
    missing tool or a timeout."""

    @abstractmethod
    def run(self, host: str, argv: Sequence[str], *, input: str | None = None,
            check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run argv on host to its end; text output captured."""

    @abstractmethod
    def spawn(self, host: str, argv: Sequence[str], *, cpu: int | None = None,
              **popen_kw) -> subprocess.Popen:
        """Start argv on host (pinned to `cpu` when given) and return at once; the
        caller stops it. popen_kw are subprocess.Popen's (stdin, stdout, text, ...)."""

    def output(self, host: str, argv: Sequence[str], **kw) -> str:
        """run()'s standard output."""
        return self.run(host, argv, **kw).stdout

    def on_host(self, host: str, argv: Sequence[str]) -> list[str]:
        """argv as host runs it: for a program that hands commands on (the update
        runner), which run() and spawn() would otherwise translate."""
        return [str(a) for a in argv]


class NetnsExecutor(Executor):
    """Commands in the namespaces of one topology on this machine."""

    def __init__(self, topo: Topology):
        self.topo = topo

    def run(self, host: str, argv: Sequence[str], *, input: str | None = None,
            check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        return proc.run(list(argv), netns=self.topo.netns(host), input=input, check=check,
                        timeout=timeout)

    def spawn(self, host: str, argv: Sequence[str], *, cpu: int | None = None,
              **popen_kw) -> subprocess.Popen:
        argv = list(argv)
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu), *argv]
        # Own session: a Ctrl-C at the terminal reaches fwbench, which stops
        # the children itself, in order.
        return subprocess.Popen(proc.in_netns(self.topo.netns(host), argv),
                                start_new_session=True, **popen_kw)
