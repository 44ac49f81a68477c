"""The conditions of a run: machine, kernel, tool versions. Recorded in run.json so
every figure can be traced to where and how it was measured."""
from __future__ import annotations

import os
import platform
import socket
from datetime import datetime, timezone

from fwbench import __version__, proc


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _mem_total_kib() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _os_release() -> str | None:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
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
        "os": _os_release(),
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "mem_total_kib": _mem_total_kib(),
        "python": platform.python_version(),
        "fwbench": __version__,
        "tools": {"ip": proc.version_line(["ip", "-V"]), **tool_versions},
    }
