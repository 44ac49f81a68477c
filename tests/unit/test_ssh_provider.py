"""The ssh provider's parts that need no host: the inventory, the comparison and
parsing of saved host state, which counters a host's own traffic reaches, the
clock check, the packet agent's zip and the mapping of a topology onto hosts."""
import hashlib
import io
import subprocess
import types
import zipfile

import pytest

from fwbench.backends.base import host_traffic_rules
from fwbench import backends as registry
from fwbench.errors import FwbenchError
from fwbench.ruleset.templates.seed004 import seed004_forward, seed004_nat
from fwbench.testbed import hosts, hoststate, inventory
from fwbench.testbed.base import Testbed
from fwbench.testbed.topology import TestbedSettings, Topology

GOOD = """
[ssh]
user = "root"
key = "id"
known_hosts = "known"

[hosts.client]
address = "192.0.2.1"
cpu = 2
ports = { fw = "eth1" }

[hosts.fw]
address = "192.0.2.2"
user = "admin"
ports = { client = "eth1", server = "eth2" }

[hosts.server]
address = "192.0.2.3"
ports = { fw = "eth1" }
"""


def write(tmp_path, text: str):
    p = tmp_path / "lab.toml"
    p.write_text(text)
    return p


def test_an_inventory_settles_every_host_from_its_own_keys_then_ssh_then_defaults(tmp_path):
    inv = inventory.load(write(tmp_path, GOOD))
    fw, client = inv.hosts["fw"], inv.hosts["client"]
    assert (fw.user, client.user) == ("admin", "root")
    assert fw.key == str(tmp_path / "id") and fw.known_hosts == str(tmp_path / "known")
    assert (fw.port, fw.workdir, fw.netns) == (22, "/var/tmp/fwbench", None)
    assert client.cpu == 2 and fw.cpu is None
    assert fw.ports == {"client": "eth1", "server": "eth2"}
    # A fresh directory per run under the workdir, never workdir/ROLE itself.
    a, b = hosts.private_dir(fw, "r1"), hosts.private_dir(fw, "r1")
    assert a.startswith("/var/tmp/fwbench/fw-r1-") and a != b
    assert fw.watchdog_s == 90
    inv = inventory.load(write(tmp_path, GOOD.replace("[ssh]", "[ssh]\nwatchdog_s = 5")))
    assert inv.hosts["fw"].watchdog_s == 5


@pytest.mark.parametrize("edit, says", [
    (lambda t: t.replace('key = "id"\n', ""), "no way to log in"),
    (lambda t: t.replace('ports = { fw = "eth1" }\n\n[hosts.fw]',
                         'ports = { fw = "eth1", nas = "eth3" }\n\n[hosts.fw]'),
     "hosts.client.ports.nas: no host 'nas'"),
    (lambda t: t.replace('client = "eth1", server', 'server'),
     "fw names no port facing client"),
    (lambda t: t.replace('cpu = 2', 'cpu = -1'), "hosts.client.cpu"),
    (lambda t: t.replace('address = "192.0.2.1"', 'adress = "x"'), "hosts.client"),
    (lambda t: t.replace('[ssh]', '[ssh]\nworkdir = "/"'), "workdir: must be an absolute"),
    (lambda t: t.replace('eth2', 'a/b'), "hosts.fw.ports.server"),
    (lambda t: t.replace('[ssh]', '[ssh]\nwatchdog_s = 0'), "ssh.watchdog_s"),
    (lambda t: t + "[", "malformed TOML"),
])
def test_a_bad_inventory_is_one_line_naming_the_key(tmp_path, edit, says):
    with pytest.raises(FwbenchError) as e:
        inventory.load(write(tmp_path, edit(GOOD)))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_missing_inventory_is_one_line(tmp_path):
    with pytest.raises(FwbenchError, match="no such inventory file"):
        inventory.load(tmp_path / "none.toml")


def test_the_topology_maps_onto_the_inventory_s_interfaces_macs_and_cpus(tmp_path):
    inv = inventory.load(write(tmp_path, GOOD))
    facts = {"client": {"macs": {"eth1": "02:00:00:00:00:01"}},
             "fw": {"macs": {"eth1": "02:00:00:00:00:02", "eth2": "02:00:00:00:00:03"}},
             "server": {"macs": {"eth1": "02:00:00:00:00:04"}}}
    t = hosts._on_hosts(Topology.line(), inv.hosts, facts)
    assert (t.client.ifname, t.client.mac) == ("eth1", "02:00:00:00:00:01")
    assert (t.fw_client_side.ifname, t.fw_server_side.ifname) == ("eth1", "eth2")
    assert (t.server.ifname, t.server.mac) == ("eth1", "02:00:00:00:00:04")
    assert t.settings.sender_cpu == 2 and t.settings.firewall_cpu == 1
    assert t.host("client").cpu == 2
    assert t.client.ip4 == Topology.line().client.ip4   # fwbench's own addresses


def test_hosts_on_separate_clocks_time_round_trips(tmp_path):
    """One kernel, one CLOCK_MONOTONIC: one-way latency. Separate kernels (boot_ids
    differ): `auto` times round trips, and `one-way` is refused in one line."""
    inv = inventory.load(write(tmp_path, GOOD))
    same, why = hosts.shared_clock(inv.hosts, {"client": "a", "server": "a"})
    assert same and "one kernel" in why
    same, why = hosts.shared_clock(inv.hosts, {"client": "a", "server": "b"})
    assert not same and "server (root@192.0.2.3:22)" in why

    class Bed(Testbed):   # what settle_latency needs of a testbed: settings, clocks
        build = destroy = health = lambda self: None

    for mode, one_clock, kind in (("auto", True, "one-way"), ("auto", False, "round trip"),
                                  ("round-trip", True, "round trip")):
        tb = Bed(Topology.line(TestbedSettings(latency=mode)), None)
        tb.one_clock = one_clock
        tb.settle_latency(why)
        assert tb.round_trip == (kind == "round trip")
        assert tb.recorded["timing"]["kind"] == kind
    tb = Bed(Topology.line(TestbedSettings(latency="one-way")), None)
    tb.one_clock = False
    with pytest.raises(FwbenchError) as e:
        tb.settle_latency(why)
    assert "round-trip" in str(e.value) and "\n" not in str(e.value)


def test_listings_compare_without_time_stamps_and_counters():
    a = ("# Generated by iptables-save v1.8.9 on Thu\n*filter\n:INPUT ACCEPT [5:300]\n"
         "-A INPUT -j ACCEPT\nCOMMIT\n")
    b = a.replace("Thu", "Fri").replace("[5:300]", "[900:123456]")
    assert hoststate.normal("x", a) == hoststate.normal("x", b)
    assert hoststate.normal("x", a) != hoststate.normal("x", a.replace("ACCEPT\nC", "DROP\nC"))
    n = "table inet t {\n\tchain c {\n\t\tcounter packets 3 bytes 180 accept\n\t}\n}\n"
    assert hoststate.normal("nft", n) == hoststate.normal("nft", n.replace("3 bytes 180",
                                                                           "9 bytes 9"))


def _snap(**over):
    s = {"firewall": {"nft": "table inet t {\n}\n"},
         "links": {"eth1": {"link": {"mtu": 1500, "up": True}, "addresses": ["10.0.0.1/24"],
                            "neighbours": [], "qdiscs": ["noqueue 0: root"],
                            "features": {"generic-receive-offload": "on"},
                            "rps": {"rx-0": "0"}}},
         "routes": ["r1"], "sysctls": {"net.ipv4.ip_forward": "0"}}
    for k, v in over.items():
        s[k] = v
    return s


def test_compare_names_what_differs_and_nothing_else():
    assert hoststate.compare(_snap(), _snap()) == []
    after = _snap(sysctls={"net.ipv4.ip_forward": "1"}, routes=["r1", "r2"])
    after["links"]["eth1"]["link"] = {"mtu": 9000, "up": True}
    after["firewall"]["nft"] = "table inet fwbench {\n}\n"
    got = hoststate.compare(_snap(), after)
    assert any(g.startswith("nft listing differs") for g in got)
    assert any("eth1 link: was" in g and "9000" in g for g in got)
    assert any("routes or rules differ (0 gone, 1 new: r2)" in g for g in got)
    assert "sysctl net.ipv4.ip_forward: was 0, now 1" in got
    assert len(got) == 4


def test_the_nft_listing_splits_into_tables_and_iptables_nft_s_are_known():
    listing = ("table ip filter {\n\tchain INPUT {\n\t}\n}\n"
               "table inet site {\n\tset s {\n\t\ttype ipv4_addr\n\t}\n}\n")
    tables = hoststate.nft_tables(listing)
    assert [(f, n) for f, n, _ in tables] == [("ip", "filter"), ("inet", "site")]
    assert tables[1][2].startswith("table inet site {") and tables[1][2].endswith("}\n")
    save = "# Generated\n*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n*nat\nCOMMIT\n"
    assert hoststate.nft_xtables(save, "ip") == {("ip", "filter"), ("ip", "nat")}


def test_a_host_s_own_traffic_reaches_only_unpinned_rules_of_its_own_hooks():
    """Seed 004: INPUT's `established` and `lo` rules see the SSH session; the
    chains INPUT enters by a test interface, FORWARD's and NAT's pinned rules
    never do."""
    for rs in (seed004_forward(), seed004_nat()):
        chains = {c.name: c for t in rs.tables for c in t.chains}
        got = host_traffic_rules(rs)
        inp = chains["INPUT"].rules
        assert {inp[0].id, inp[3].id} == got     # established, lo
        assert not {r.id for r in chains["input-external"].rules} & got
        assert not {r.id for r in chains["FORWARD"].rules} & got


def test_the_agent_zip_holds_fwbench_and_runs_the_packet_agent_with_plain_python(
        tmp_path, elsewhere):
    data = hosts.python_zip()
    # The same bytes from another process (another hash seed, no cache), so a host's
    # copy from an earlier run passes the hash check.
    assert [hashlib.sha256(data).hexdigest()] == elsewhere(
        "import hashlib\nfrom fwbench.testbed import hosts",
        "hashlib.sha256(hosts.python_zip()).hexdigest()")
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "fwbench/testbed/packets.py" in names and "fwbench/__init__.py" in names
    z = tmp_path / "fwbench.zip"
    z.write_bytes(data)
    # Outside the venv: only the standard library, as on a real host.
    cp = subprocess.run(["/usr/bin/python3", "-c", "import fwbench.testbed.packets, "
                         "fwbench.testbed.packet_agent, fwbench.testbed.tcpprobe, "
                         "fwbench.onhost.update_runner; "
                         "print('ok')"],
                        env={"PYTHONPATH": str(z)}, capture_output=True, text=True)
    assert cp.stdout.strip() == "ok", cp.stderr


def test_put_back_restores_interfaces_only_after_every_host_s_hooks_are_gone(monkeypatch,
                                                                            tmp_path):
    """A veth whose peer has an XDP program cannot have TSO: the client's offloads
    come back only once the firewall's program is gone, so no host's interfaces
    are restored before every host is unhooked (seen in a full quick run)."""
    import threading
    import time
    events, lock = [], threading.Lock()

    def record(what, delay=0.0):
        def f(ex, role, *a, **k):
            time.sleep(delay if role == "fw" else 0)   # the firewall's unhooking is slow
            with lock:
                events.append((what, role))
            return {} if what == "snapshot" else None
        return f
    monkeypatch.setattr(hosts, "stop_leftovers", lambda ex, role, d: None)
    monkeypatch.setattr(hosts, "remove_private", lambda ex, role, h, *a: None)
    monkeypatch.setattr(hoststate, "snapshot", record("snapshot"))
    monkeypatch.setattr(hoststate, "restore_hooks_and_firewall", record("unhook", 0.2))
    monkeypatch.setattr(hoststate, "restore_links", record("links"))
    monkeypatch.setattr(hoststate, "compare", lambda a, b: [])
    inv = inventory.load(write(tmp_path, GOOD))
    saved = {r: {"ifnames": ["eth1"], "sysctls": {}} for r in inv.hosts}
    ex = types.SimpleNamespace(rundir={r: f"/var/tmp/fwbench/{r}-x" for r in inv.hosts})
    left = hosts.put_back(ex, inv.hosts, saved, lambda s: None, registry.firewalls())
    assert left == {r: [] for r in inv.hosts}
    order = [what for what, _ in events if what != "snapshot"]
    assert order == ["unhook"] * 3 + ["links"] * 3, events


def test_leftover_processes_are_ended_by_pid_and_start_time_and_nothing_else_goes(tmp_path):
    """`stop_leftovers` kills the process a pid file names only if it is the same
    process (its start time matches), removes only pid files, and takes the
    directory as an argument (a workdir with a space is one path)."""
    import os
    d = tmp_path / "work dir" / "fw-r1-aa"
    (d / "pids").mkdir(parents=True)
    cwd = tmp_path / "home"      # where the user's files are; a command runs here
    cwd.mkdir()
    for name in ("0", "34816", "pids"):
        (cwd / name).write_text("the user's\n")
    child = subprocess.Popen(["sleep", "60"])
    other = subprocess.Popen(["sleep", "60"])
    start = lambda pid: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]  # noqa: E731
    (d / "pids" / "1").write_text(f"{child.pid} {start(child.pid)}\n")
    (d / "pids" / "2").write_text(f"{other.pid} 1\n")      # its PID, not its start
    (d / "pids" / "3").write_text("999999999 5\n")         # gone

    class Local:
        def run(self, role, argv, check=True, **kw):
            return subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    try:
        hosts.stop_leftovers(Local(), "fw", str(d))
        assert child.wait(5) == -9
        assert other.poll() is None
    finally:
        for p in (child, other):
            p.kill()
            p.wait()
    assert os.listdir(d / "pids") == []
    assert {p.name: p.read_text() for p in cwd.iterdir()} == {
        n: "the user's\n" for n in ("0", "34816", "pids")}
