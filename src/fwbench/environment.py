"""The conditions of a run: machine, kernel, tool versions. Recorded in run.json so
every figure can be traced to where and how it was measured."""
from __future__ import annotations

import os
import platform
import socket
from datetime import datetime, timezone

from fwbench import __version__, proc


def _field(path: str, prefix: str, sep: str = ":") -> str | None:
    """The value of the first line of `path` that starts with `prefix`."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(sep, 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def collect(tool_versions: dict[str, str | None]) -> dict:
    u = platform.uname()
    return {
        "collected_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "kernel": f"{u.system} {u.release} {u.version}",
        "machine": u.machine,
        "os": _field("/etc/os-release", "PRETTY_NAME=", "="),
        "cpu_model": _field("/proc/cpuinfo", "model name"),
        "cpus": os.cpu_count(),
        "mem_total": _field("/proc/meminfo", "MemTotal:"),
        "python": platform.python_version(),
        "fwbench": __version__,
        "tools": {"ip": proc.version_line(["ip", "-V"]), **tool_versions},
    }
