"""The `ssh` provider's inventory: which real hosts play the topology's roles.

A TOML file names, for every role of the scenario's topology (client, fw, server),
the host to reach over SSH, how to log in, its test interfaces (by the role each
faces: the firewall's `client` and `server` ports, each end host's `fw` port) and,
optionally, the CPU its work runs on. `[ssh]` holds what every host shares; a
host's own keys win. Paths are relative to the inventory file.

    [ssh]
    user = "root"
    key = "id_ed25519"           # or agent = true
    known_hosts = "known_hosts"  # the hosts' keys are checked, never accepted blindly

    [hosts.fw]
    address = "192.0.2.2"
    cpu = 1                      # RPS steers the firewall's ingress here
    ports = { client = "ens1f0", server = "ens1f1" }

The test addresses are fwbench's own, from the benchmarking ranges
(fwbench.addresses), so rule sets match the traffic whatever the lab.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fwbench import tomlfile
from fwbench.errors import FwbenchError

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
IfName = Annotated[str, Field(min_length=1, max_length=15, pattern=r"^[^\s/:]+$")]


class Login(BaseModel):
    """How to reach and log in to a host; every key may be set in [ssh] for all."""
    model_config = _STRICT
    user: str | None = None
    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    key: str | None = Field(None, description="private key file")
    agent: bool | None = Field(None, description="use the keys of the running ssh-agent")
    known_hosts: str | None = Field(None, description="the hosts' public keys "
                                    "(default ~/.ssh/known_hosts)")
    connect_timeout_s: Annotated[float, Field(gt=0, le=300)] | None = None
    workdir: str | None = Field(None, description="fwbench's private directory on the host")
    watchdog_s: Annotated[float, Field(ge=1, le=3600)] | None = Field(
        None, description="after a rule-set change, how long the host waits for fwbench "
        "to prove its SSH session survived before emptying its firewall (default 90)")
    netns: str | None = Field(
        None, description="open the connection from inside this network namespace of "
        "this machine (the local lab of `fwbench lab`); unset: from here")


class HostEntry(Login):
    address: str
    cpu: Annotated[int, Field(ge=0)] | None = Field(
        None, description="where the host's work runs: the client's sender, the "
        "firewall's ingress (RPS), the server's receivers")
    ports: dict[str, IfName] = Field(description="test interface by the role it faces")

    @model_validator(mode="after")
    def _some_port(self):
        if not self.ports:
            raise ValueError("a host needs at least one test interface in `ports`")
        return self


_DEFAULTS = dict(user="root", port=22, key=None, agent=False,
                 known_hosts="~/.ssh/known_hosts", connect_timeout_s=10.0,
                 workdir="/var/tmp/fwbench", watchdog_s=90.0, netns=None)


class Host(BaseModel):
    """One host with every login key settled (the host's own, else [ssh]'s, else
    the default); paths absolute."""
    model_config = ConfigDict(frozen=True)
    role: str
    address: str
    user: str
    port: int
    key: str | None
    agent: bool
    known_hosts: str
    connect_timeout_s: float
    workdir: str
    watchdog_s: float
    netns: str | None
    cpu: int | None
    ports: dict[str, str]

    @property
    def where(self) -> str:
        return f"{self.role} ({self.user}@{self.address}:{self.port})"


class _File(BaseModel):
    model_config = _STRICT
    ssh: Login = Login()
    hosts: dict[str, HostEntry]


class Inventory(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: str
    hosts: dict[str, Host]

    def host(self, role: str) -> Host:
        try:
            return self.hosts[role]
        except KeyError:
            raise FwbenchError(f"{self.path}: the scenario's testbed has host {role!r}, "
                               f"which the inventory does not name (it has "
                               f"{', '.join(self.hosts)})") from None


def load(path: str | Path) -> Inventory:
    """Read and check an inventory; every problem is one line naming the key."""
    p = Path(path).expanduser()
    data = tomlfile.read(p, "inventory")
    try:
        raw = _File.model_validate(data)
    except ValidationError as e:
        raise FwbenchError(tomlfile.one_line(e, str(p), "inventory")) from None
    if not raw.hosts:
        raise FwbenchError(f"{p}: hosts: names no host")
    base = p.resolve().parent
    hosts = {}
    for role, h in raw.hosts.items():
        keys = {}
        for k, default in _DEFAULTS.items():
            own, shared = getattr(h, k), getattr(raw.ssh, k)
            keys[k] = own if own is not None else shared if shared is not None else default
        for k in ("key", "known_hosts"):
            if keys[k] is not None:
                keys[k] = str((base / Path(keys[k]).expanduser()).resolve())
        if keys["key"] is None and not keys["agent"]:
            raise FwbenchError(f"{p}: hosts.{role}: no way to log in: set `key` (a "
                               f"private key file) or `agent = true`")
        if not keys["workdir"].startswith("/") or keys["workdir"].rstrip("/") in ("", "/"):
            raise FwbenchError(f"{p}: hosts.{role}.workdir: must be an absolute path "
                               f"below / (fwbench removes it when it ends)")
        hosts[role] = Host(role=role, address=h.address, cpu=h.cpu, ports=dict(h.ports),
                           **keys)
    for role, h in hosts.items():
        for peer in h.ports:
            if peer not in hosts:
                raise FwbenchError(f"{p}: hosts.{role}.ports.{peer}: no host {peer!r}")
            if role not in hosts[peer].ports:
                raise FwbenchError(f"{p}: hosts.{role}.ports.{peer}: {peer} names no "
                                   f"port facing {role} (a link needs both ends)")
    return Inventory(path=str(p.resolve()), hosts=hosts)
