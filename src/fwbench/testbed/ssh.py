"""The `ssh` provider's executor: commands on real hosts over SSH.

paramiko, not asyncssh: fwbench's callers are synchronous (a command runs to its end,
a process is started and stopped), so a blocking client with a thread per stream
fits them as they are, where asyncssh would need an event loop threaded through
every caller; it is also what FD.io CSIT and NFVbench drive their hosts with.

One connection per host, opened once (in parallel) and reused: every command is a
session channel on it. A command runs under `sh -c` that first writes its PID
(and the process's start time, so a reused PID is never mistaken for it) into the
host's private directory, then execs the command: so a timeout or a stop ends the
remote process itself, not only our end of the channel, and `fwbench clean
--inventory` can end what a killed run left running.

Paths of what fwbench copied to the host (the engine, the eBPF loader, the packet
agent's Python) are given to `translate`; an argv naming the local file runs the
host's copy.
"""
from __future__ import annotations

import ctypes
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import paramiko

from fwbench.errors import CommandError, FwbenchError
from fwbench.testbed.executor import Executor
from fwbench.testbed.inventory import Host

_CLONE_NEWNET = 0x40000000


def _in_netns(netns: str, make: Callable[[], socket.socket]) -> socket.socket:
    """`make()` run in a thread that first enters network namespace `netns`: the
    socket it returns stays in that namespace (setns moves only the calling
    thread, and the thread ends)."""
    out: dict = {}

    def work():
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            finally:
                os.close(fd)
            out["sock"] = make()
        except BaseException as e:   # handed to the caller's thread
            out["err"] = e
    t = threading.Thread(target=work, name=f"connect-{netns}")
    t.start()
    t.join()
    if "err" in out:
        raise out["err"]
    return out["sock"]


class Connection:
    """One host's SSH connection."""

    def __init__(self, host: Host):
        self.host = host
        self.client: paramiko.SSHClient | None = None

    def open(self) -> "Connection":
        h = self.host
        where = h.where
        try:
            if h.netns:
                sock = _in_netns(h.netns, lambda: socket.create_connection(
                    (h.address, h.port), h.connect_timeout_s))
            else:
                sock = socket.create_connection((h.address, h.port), h.connect_timeout_s)
            # Every command's exit status, EOF and close are small packets: without
            # this each waits for the peer's delayed ACK (~40 ms a command).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except FileNotFoundError:
            raise FwbenchError(f"ssh: cannot reach {where}: network namespace "
                               f"{h.netns} does not exist (is the lab up?)") from None
        except (OSError, TimeoutError) as e:
            why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
            raise FwbenchError(f"ssh: cannot reach {where}: {why}") from None
        client = paramiko.SSHClient()
        try:
            client.load_host_keys(h.known_hosts)
        except FileNotFoundError:
            sock.close()
            raise FwbenchError(f"ssh: {h.role}: known_hosts file {h.known_hosts} does not "
                               f"exist (fwbench checks every host's key)") from None
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(h.address, h.port, username=h.user, key_filename=h.key,
                           allow_agent=h.agent, look_for_keys=False, sock=sock,
                           timeout=h.connect_timeout_s, banner_timeout=h.connect_timeout_s,
                           auth_timeout=h.connect_timeout_s)
        except paramiko.BadHostKeyException:
            client.close()
            raise FwbenchError(f"ssh: {where}: its host key is not the one {h.known_hosts} "
                               f"holds for it; refusing to connect") from None
        except paramiko.AuthenticationException:
            client.close()
            how = f"the key {h.key}" if h.key else "the agent's keys"
            raise FwbenchError(f"ssh: {where}: login refused with {how}") from None
        except FileNotFoundError:
            client.close()
            raise FwbenchError(f"ssh: {h.role}: key file {h.key} does not exist") from None
        except paramiko.SSHException as e:
            client.close()
            msg = str(e)
            if "not found in known_hosts" in msg:
                msg = f"its host key is not in {h.known_hosts}; add it (ssh-keyscan) first"
            raise FwbenchError(f"ssh: {where}: {msg}") from None
        except (OSError, EOFError) as e:
            client.close()
            raise FwbenchError(f"ssh: {where}: connection lost while logging in: "
                               f"{getattr(e, 'strerror', None) or e or 'closed'}") from None
        tr = client.get_transport()
        tr.set_keepalive(15)
        self.client = client
        return self

    @property
    def transport(self) -> paramiko.Transport:
        if self.client is None or not self.client.get_transport() \
                or not self.client.get_transport().is_active():
            raise FwbenchError(f"ssh: the connection to {self.host.where} is lost")
        return self.client.get_transport()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


def connect_all(hosts: Sequence[Host]) -> dict[str, Connection]:
    """Connections to every host, opened in parallel; the first failure (in the
    hosts' order) is the error, and nothing stays open."""
    conns = {h.role: Connection(h) for h in hosts}
    with ThreadPoolExecutor(len(conns)) as pool:
        futures = {role: pool.submit(c.open) for role, c in conns.items()}
    errors = [f.exception() for f in futures.values() if f.exception() is not None]
    if errors:
        for c in conns.values():
            c.close()
        raise errors[0]
    return conns


# --- processes on a host -------------------------------------------------------------------

# The wrapper every command runs in: PID and start time (field 22 of /proc/PID/stat)
# into the pid file, the PID on standard error's first line, then the command itself.
# (The shell's own name, sh, has no space, so the fields split plainly.)
# Before the private directory exists (the read-only checks) there is no pid file.
_WRAP = ('read -r a b c d e f g h i j k l m n o p q r s t u v w < /proc/$$/stat && '
         '{ [ ! -d "${PIDFILE%/*}" ] || echo "$$ $v" > "$PIDFILE"; } && '
         'echo "fwbench-pid $$" >&2 && exec "$@"')


class RemoteProcess:
    """A command running on a host, with subprocess.Popen's interface (args, pid,
    returncode, stdin/stdout/stderr, poll, wait, communicate, send_signal,
    terminate, kill), so callers cannot tell it from a local one. Its streams are
    local pipes fed by threads from the SSH channel; `stdout`/`stderr` may also be
    a file (its descriptor is written), DEVNULL, or STDOUT for stderr."""

    def __init__(self, ex: "SshExecutor", host: str, argv: list[str], command: str, *,
                 stdin=None, stdout=None, stderr=None, text: bool = False,
                 bufsize: int = -1, **unused):
        self.args, self._ex, self._host = argv, ex, host
        self.returncode: int | None = None
        self.pid: int | None = None
        self._pid_seen = threading.Event()
        self._signalled: int | None = None
        conn = ex.conn(host)
        try:
            chan = conn.transport.open_session(timeout=30)
            chan.exec_command(command)
        except paramiko.ChannelException as e:
            raise FwbenchError(f"ssh: {conn.host.where} refused another session ({e.text}; "
                               f"its sshd's MaxSessions, default 10, may be reached)") from None
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise FwbenchError(f"ssh: {conn.host.where}: cannot start {argv[0]}: "
                               f"{e or 'connection closed'}") from None
        self._chan = chan
        self.stdin = self.stdout = self.stderr = None
        self._pumps: list[threading.Thread] = []   # the output streams' (not stdin's)
        if stdin == subprocess.PIPE:
            r, w = os.pipe()
            self.stdin = _open(w, "w", text, bufsize)
            threading.Thread(target=self._feed, args=(r,), daemon=True,
                             name=f"ssh-{host}-stdin").start()
        else:
            chan.shutdown_write()
        out_fd, self.stdout = _sink(stdout, text, bufsize)
        if stderr == subprocess.STDOUT:
            err_fd = out_fd
        else:
            err_fd, self.stderr = _sink(stderr, text, bufsize)
        self._pump(self._drain, chan.recv, out_fd, stdout == subprocess.PIPE)
        self._pump(self._drain, chan.recv_stderr, err_fd,
                   stderr == subprocess.PIPE, True)

    def _pump(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True,
                             name=f"ssh-{self._host}-{fn.__name__}")
        t.start()
        self._pumps.append(t)

    def _feed(self, r: int) -> None:
        try:
            while chunk := os.read(r, 65536):
                self._chan.sendall(chunk)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            os.close(r)
            try:
                self._chan.shutdown_write()
            except (OSError, EOFError, paramiko.SSHException):
                pass

    def _drain(self, recv, fd: int | None, close: bool, first_is_pid: bool = False) -> None:
        head = b""
        try:
            while True:
                chunk = recv(65536)
                if not chunk:
                    break
                if first_is_pid and not self._pid_seen.is_set():
                    head += chunk
                    if b"\n" not in head:
                        continue
                    line, _, chunk = head.partition(b"\n")
                    if line.startswith(b"fwbench-pid "):
                        self.pid = int(line.split()[1])
                    else:
                        chunk = head
                    self._pid_seen.set()
                if fd is not None and chunk:
                    _write_all(fd, chunk)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            if head and not self._pid_seen.is_set() and fd is not None:
                _write_all(fd, head)
            self._pid_seen.set()
            if close and fd is not None:
                os.close(fd)

    # --- Popen's interface --------------------------------------------------------------

    def poll(self) -> int | None:
        if self.returncode is None and self._chan.exit_status_ready():
            self._finish()
        return self.returncode

    def _finish(self) -> None:
        status = self._chan.recv_exit_status()
        for t in self._pumps:
            t.join(5)
        if status == -1:   # ended by a signal (the server sends exit-signal instead)
            status = -(self._signalled or signal.SIGKILL)
        self.returncode = status

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._chan.status_event.wait(0.05 if deadline is None
                                         else max(0.0, min(0.05, deadline - time.monotonic())))
        return self.returncode

    def communicate(self, input=None, timeout: float | None = None):
        if self.stdin is not None and not self.stdin.closed:
            try:
                if input:
                    self.stdin.write(input)
                self.stdin.close()
            except BrokenPipeError:
                pass
        got: dict = {}
        readers = [threading.Thread(target=lambda k=k, f=f: got.__setitem__(k, f.read()),
                                    daemon=True)
                   for k, f in (("out", self.stdout), ("err", self.stderr)) if f is not None]
        for t in readers:
            t.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in readers:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return got.get("out"), got.get("err")

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        self._pid_seen.wait(10)
        if self.pid is None:
            self._chan.close()
            return
        self._signalled = sig
        self._ex.run(self._host, ["kill", f"-{int(sig)}", str(self.pid)], check=False,
                     timeout=30)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close_channel(self) -> None:
        self._chan.close()


def _open(fd: int, mode: str, text: bool, bufsize: int):
    if text:
        return open(fd, mode, buffering=1 if bufsize == 1 else -1, encoding="utf-8",
                    errors="replace")
    return open(fd, mode + "b", buffering=0 if bufsize == 0 else -1)


def _sink(spec, text: bool, bufsize: int) -> tuple[int | None, object]:
    """(the descriptor a stream is written to, the caller's end if a pipe)."""
    if spec == subprocess.PIPE:
        r, w = os.pipe()
        return w, _open(r, "r", text, bufsize)
    if spec is None:
        return None, None   # a local Popen would inherit our terminal; we drop it
    if spec == subprocess.DEVNULL:
        return None, None
    if isinstance(spec, int):
        return spec, None
    return spec.fileno(), None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BrokenPipeError:
            return
        view = view[n:]


class SshExecutor(Executor):
    """Commands on the hosts of an inventory, by role, over open connections.
    `pidfiles[role]` is the host's directory of pid files; `translate` maps a local
    path in an argv to the host's copy of it."""

    def __init__(self, conns: dict[str, Connection], rundir: dict[str, str]):
        self.conns = conns
        self.rundir = rundir
        self.translate: dict[str, dict[str, str]] = {role: {} for role in conns}
        self.python: dict[str, list[str]] = {}
        self._seq = 0
        self._lock = threading.Lock()

    def conn(self, host: str) -> Connection:
        try:
            return self.conns[host]
        except KeyError:
            raise FwbenchError(f"ssh: no host {host!r} in this testbed") from None

    def on_host(self, host: str, argv: Sequence[str]) -> list[str]:
        """argv with fwbench's Python and the programs copied there as the host has
        them."""
        argv = [str(a) for a in argv]
        if argv and argv[0] == sys.executable:
            if host not in self.python:
                raise FwbenchError(f"ssh: {host}: fwbench's Python is not on the host")
            argv = self.python[host] + argv[1:]
        tr = self.translate.get(host, {})
        return [tr.get(a, a) for a in argv]

    def command(self, host: str, argv: Sequence[str], cpu: int | None = None,
                record: bool = True) -> str:
        """The shell line that runs argv on host in the wrapper, which records its
        PID in a pid file when `record` (a started process, which a killed run may
        leave running) and always tells it on standard error."""
        argv = self.on_host(host, argv)
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu), *argv]
        pidfile = ""
        if record:
            with self._lock:
                self._seq += 1
                pidfile = f"{self.rundir[host]}/pids/{self._seq}"
        return f"PIDFILE={shlex.quote(pidfile)} sh -c {shlex.quote(_WRAP)} sh " \
            + shlex.join(argv)

    def spawn(self, host: str, argv: Sequence[str], *, cpu: int | None = None,
              **popen_kw) -> RemoteProcess:
        popen_kw.pop("start_new_session", None)
        return RemoteProcess(self, host, list(argv), self.command(host, argv, cpu),
                             **popen_kw)

    def run(self, host: str, argv: Sequence[str], *, input: str | None = None,
            check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        argv = [str(a) for a in argv]
        # No pid file: the command ends by itself, and a timeout ends it here.
        p = RemoteProcess(self, host, argv, self.command(host, argv, record=False),
                          stdin=subprocess.PIPE if input is not None else None,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.close_channel()
            raise FwbenchError(f"{host}: {' '.join(argv[:3])}: no answer after "
                               f"{timeout:.0f} s") from None
        cp = subprocess.CompletedProcess(argv, p.returncode, out, err)
        if cp.returncode == 127 and "not found" in err:
            raise FwbenchError(f"{host}: {argv[0]}: command not found")
        if check and cp.returncode != 0:
            raise CommandError([f"{host}:", *argv], cp.returncode, err or out)
        return cp

    def put(self, host: str, data: bytes, path: str, mode: int = 0o600) -> None:
        """Write a file on host (over SFTP)."""
        sftp = self.conn(host).client.open_sftp()
        try:
            with sftp.open(path, "wb") as f:
                f.set_pipelined(True)
                f.write(data)
            sftp.chmod(path, mode)
        finally:
            sftp.close()

    def get(self, host: str, path: str) -> bytes | None:
        """A file's bytes on host, or None when it does not exist."""
        sftp = self.conn(host).client.open_sftp()
        try:
            with sftp.open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        finally:
            sftp.close()

    def close(self) -> None:
        for c in self.conns.values():
            c.close()


def parallel(fn: Callable[[str], object], roles: Sequence[str]) -> dict[str, object]:
    """fn(role) on every role at once; the first error (in roles' order) is raised
    after all have ended."""
    with ThreadPoolExecutor(max(1, len(roles))) as pool:
        futures = {r: pool.submit(fn, r) for r in roles}
    for f in futures.values():
        if f.exception() is not None:
            raise f.exception()
    return {r: f.result() for r, f in futures.items()}

