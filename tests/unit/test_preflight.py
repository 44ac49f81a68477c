"""The ssh provider's read-only checks of a host before it changes anything
(`SshTestbed._preflight`) and its watchdog's verdicts after a rule-set change,
against the fake host of fakehost.py: each refusal is one line, and the host got
no command that changes it."""
import pytest
from fakehost import FakeExecutor, Host, Link, route, rule

from fwbench import backends as registry
from fwbench.errors import FwbenchError
from fwbench.testbed import hosts, inventory
from fwbench.testbed.topology import Topology

INVENTORY = """
[ssh]
key = "id"
known_hosts = "known"
watchdog_s = 5

[hosts.client]
address = "10.0.0.11"
ports = { fw = "eth1" }

[hosts.fw]
address = "10.0.0.12"
ports = { client = "eth1", server = "eth2" }

[hosts.server]
address = "10.0.0.13"
ports = { fw = "eth1" }
"""


def a_host(role: str) -> Host:
    ports = ["eth1", "eth2"] if role == "fw" else ["eth1"]
    return Host(links={"mgmt0": Link("mgmt0", addresses=["10.0.0.2/24"]),
                       **{p: Link(p) for p in ports}},
                routes={"-4": [route("default", "mgmt0", gateway="10.0.0.1")], "-6": []})


def bed(tmp_path, edit=lambda role, h: None):
    (tmp_path / "lab.toml").write_text(INVENTORY)
    inv = inventory.load(tmp_path / "lab.toml")
    tb = hosts.SshTestbed(Topology.line(), inv, [], registry.firewalls())
    fakes = {}
    for role in ("client", "fw", "server"):
        fakes[role] = a_host(role)
        edit(role, fakes[role])
    tb.executor = FakeExecutor(fakes)
    return tb


def test_a_host_fit_to_serve_passes_without_a_change(tmp_path):
    tb = bed(tmp_path, lambda role, h: h.rules["-4"].insert(1, rule(101, "101")))
    facts = {r: tb._preflight(r) for r in ("client", "fw", "server")}
    assert facts["fw"]["probe_tables"] == {"client": 102, "server": 103}
    assert "probe_tables" not in facts["client"]
    assert tb.executor.changes == []


def _xdp(role, h):
    if role == "fw":
        h.links["eth2"].xdp = {"mode": 2, "prog": {"id": 7, "name": "theirs"}}


def _clsact(role, h):
    if role == "server":
        h.links["eth1"].qdiscs.append({"kind": "clsact", "handle": "ffff:",
                                       "parent": "ffff:fff1"})


def _session(role, h):
    if role == "client":
        h.session_route = {"10.0.0.1": "eth1"}


def _linklocal_session(role, h):
    if role == "client":
        h.session = "fe80::1%eth1 50000 fe80::2%eth1 22"


def _default(role, h):
    if role == "fw":
        h.routes["-6"].append(route("default", "eth1", "-6", gateway="fe80::1"))


def _killed(role, h, live=None):
    if role == "server":
        h.private_dirs = [{"path": "/var/tmp/fwbench/server-r1-abc123", "holds":
                           ["bin", "lease", "pids", "state.json"], "live": live,
                           "marker": {"made_by": "fwbench", "created": "2026-11-27T08:00:00Z",
                                      "about": {"controller": "bench1"}}}]


def _live_and_busy(role, h):
    """A live run mid-trial: its sink table and XDP sender are on the host too,
    and it is that run that is named, not the host's own table or program."""
    if role == "client":
        _killed("server", h, live=4242)
        h.links["eth1"].xdp = {"mode": 1, "prog": {"id": 9, "name": "fwb_send"}}
        h.nft_tables = "table netdev fwb_packets_sink\n"


@pytest.mark.parametrize("edit, role, says", [
    (lambda role, h: h.links.pop("eth2") if role == "fw" else None, "fw",
     "fw (root@10.0.0.12:22): test interface eth2 (facing server) does not exist"),
    (_session, "client", "client (root@10.0.0.11:22): test interface eth1 carries the SSH "
                         "session; fwbench will not touch it"),
    (_linklocal_session, "client", "test interface eth1 carries the SSH session"),
    (_default, "fw", "fw (root@10.0.0.12:22): test interface eth1 carries the host's "
                     "default route; fwbench will not touch it"),
    (_xdp, "fw", "test interface eth2 has an XDP program attached; fwbench would replace it"),
    (_clsact, "server", "test interface eth1 has a tc clsact hook; fwbench would replace it"),
    (lambda role, h: h.tools.discard("nft"), "fw",
     "fw (root@10.0.0.12:22) lacks nft (Debian: apt-get install nftables)"),
    (lambda role, h: setattr(h, "machine", "aarch64"), "client",
     "client (root@10.0.0.11:22) is aarch64; fwbench's engine and eBPF loader here are "
     "built for x86_64"),
    (_killed, "server", "server (root@10.0.0.13:22) still holds the saved state of a run "
                        "that did not end (in /var/tmp/fwbench/server-r1-abc123): put it "
                        "back first with fwbench clean --inventory"),
    (lambda role, h: _killed(role, h, live=4242), "server",
     "server (root@10.0.0.13:22) is in use by another fwbench run (started "
     "2026-11-27T08:00:00Z from bench1, its process 4242 there): wait for it to end"),
    (_live_and_busy, "client", "client (root@10.0.0.11:22) is in use by another fwbench "
                               "run (started 2026-11-27T08:00:00Z from bench1"),
    (lambda role, h: setattr(h, "nft_tables", "table inet site\ntable netdev "
                             "fwb_packets_sink\n"), "client",
     "holds an nftables table netdev fwb_packets_sink, a name fwbench's packet injector "
     "uses and removes; fwbench will not touch it"),
])
def test_each_refusal_is_one_line_and_changes_nothing(tmp_path, edit, role, says,
                                                      monkeypatch):
    monkeypatch.setattr(hosts, "LEASE_GRACE_S", 0.3)  # a live run's lease stays live
    tb = bed(tmp_path, edit)
    with pytest.raises(FwbenchError) as e:
        tb._preflight(role)
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert tb.executor.changes == []


def test_missing_libraries_name_their_debian_packages(tmp_path):
    tb = bed(tmp_path)
    tb.libraries = {"libbpf.so.1", "libnftnl.so.11"}
    with pytest.raises(FwbenchError) as e:
        tb._preflight("fw")
    assert str(e.value) == ("fw (root@10.0.0.12:22) lacks the libraries libnftnl.so.11 "
                            "(Debian: apt-get install libnftnl11)")
    assert tb.executor.changes == []


def _change(tb, lost=False, fired=False):
    tb.executor.rundir = {"fw": "/var/tmp/fwbench/fw-r1-abc123"}
    with tb.firewall_change():
        if lost:
            tb.executor.lost.add("fw")
        if fired:     # the watchdog's mark: it slept its time and emptied the firewall
            tb.executor.hosts["fw"].files.add(f"{tb.executor.rundir['fw']}/watchdog-2")


def test_a_host_lost_after_a_rule_set_change_is_one_line_naming_the_way_back(tmp_path):
    tb = bed(tmp_path)
    with pytest.raises(FwbenchError) as e:
        _change(tb, lost=True)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("fw (root@10.0.0.12:22): lost after a rule-set change (ssh: the "
                          "connection to fw is lost); its watchdog empties the host's "
                          "firewall 5 s after the change began, then `fwbench clean "
                          "--inventory ")
    # The one change: the watchdog, armed before the rule set went in.
    assert len(tb.executor.changes) == 1 and tb.executor.changes[0].startswith("fw: spawn ")
    assert "time.sleep(5)" in tb.executor.changes[0]


def test_a_rule_set_that_cut_the_session_is_one_line(tmp_path):
    tb = bed(tmp_path)
    _change(tb)                        # the watchdog did not fire: the session held
    with pytest.raises(FwbenchError) as e:
        _change(tb, fired=True)
    assert str(e.value) == ("fw (root@10.0.0.12:22): the rule set cut fwbench's SSH session "
                            "to the host, and after 5 s its watchdog emptied the host's "
                            "firewall")
