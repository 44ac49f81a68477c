"""Topologies as graphs: the line as before, many clients in both shapes, and the
graphs a provider could not build refused with one line."""
from __future__ import annotations

import dataclasses

import pytest

from fwbench import addresses as ad
from fwbench.errors import FwbenchError
from fwbench.testbed.topology import (NETNS_RE, Host, Link, Port, Route, TestbedSettings,
                                      Topology)


def test_the_line_is_what_it_was():
    t = Topology.new(TestbedSettings(sender_cpu=1, firewall_cpu=0), firewall_rps=False,
                     server_rps=False)
    assert t.roles == ("client", "fw", "server") and len(t.run_id) == 6
    r = t.run_id
    assert t.client == Port("client", f"fwb{r}-c0", "02:fb:00:00:01:02", "198.18.0.2",
                            "2001:2:0:1::2")
    assert t.fw_client_side == Port("fw", f"fwb{r}-f0", "02:fb:00:00:01:01", "198.18.0.1",
                                    "2001:2:0:1::1")
    assert t.fw_server_side == Port("fw", f"fwb{r}-f1", "02:fb:00:00:02:01", "198.19.0.1",
                                    "2001:2:0:2::1")
    assert t.server == Port("server", f"fwb{r}-s0", "02:fb:00:00:02:02", "198.19.0.2",
                            "2001:2:0:2::2")
    assert t.links == ((t.client, t.fw_client_side), (t.fw_server_side, t.server))
    assert t.neighbours() == [(t.client, t.fw_client_side), (t.fw_client_side, t.client),
                              (t.fw_server_side, t.server), (t.server, t.fw_server_side)]
    assert [(x.host, x.dst, x.via) for x in t.routes] == [
        ("client", "198.19.0.0/16", "198.18.0.1"), ("client", "2001:2:0:2::/64", "2001:2:0:1::1"),
        ("server", "198.18.0.0/16", "198.19.0.1"), ("server", "2001:2:0:1::/64", "2001:2:0:2::1")]
    assert [h.kind for h in t.hosts] == ["client", "firewall", "server"]
    assert [h.cpu for h in t.hosts] == [1, 0, 0]
    assert t.record() == {**t.settings.model_dump(), "firewall_rps": False,
                          "server_rps": False}
    assert all(NETNS_RE.match(t.netns(role)) for role in t.roles)
    assert Topology.new().run_id != t.run_id
    assert Topology.line is not None and Topology.new == Topology.line


def test_n_clients_as_addresses_on_one_port():
    t = Topology.many_clients(320, hosts=False)
    assert t.roles == ("client", "fw", "server")
    assert t.client.extra4 == ad.client_addresses(319, 4)
    assert t.client.extra6 == ad.client_addresses(319, 6)
    fw_routes = {(x.dst, x.via) for x in t.routes_of("fw")}
    assert fw_routes == {(str(ad.CLIENT_POOL[4]), ad.CLIENT[4]),
                         (str(ad.CLIENT_POOL[6]), ad.CLIENT[6])}
    assert (str(ad.CLIENT_POOL[6]), ad.FW_SERVER_SIDE[6]) in \
        {(x.dst, x.via) for x in t.routes_of("server")}
    assert t.record()["topology"] == {"clients": 320, "further_clients_as": "addresses"}
    assert len(t.client.addresses()) == 2 + 2 * 319


def test_n_clients_as_hosts_each_linked_to_the_firewall():
    t = Topology.many_clients(320, hosts=True)
    assert len(t.hosts) == 322 and len(t.links) == 321
    assert [h.role for h in t.hosts[3:]] == [f"client{i}" for i in range(1, 320)]
    assert all(h.kind == "client" for h in t.hosts[3:])
    assert all(NETNS_RE.match(t.netns(role)) for role in t.roles)
    assert all(len(p.ifname) <= 15 for p in t.ports)
    got = [t.ports_of(f"client{i}")[0].ip4 for i in range(1, 320)]
    assert tuple(got) == ad.client_addresses(319, 4)
    # Every further client routes the server side through its own firewall port.
    for i in (1, 160, 319):
        port = t.ports_of(f"client{i}")[0]
        gw = t.peer(port)
        assert gw.host == "fw"
        assert {r.via for r in t.routes_of(f"client{i}")} == {gw.ip4, gw.ip6}
    # The line's own ports are still where callers look for them.
    assert t.client.ip4 == ad.CLIENT[4] and t.fw_server_side.ip4 == ad.FW_SERVER_SIDE[4]


def test_one_client_is_the_line():
    t = Topology.many_clients(1, hosts=True)
    assert t.roles == ("client", "fw", "server") and "topology" not in t.record()


def _line() -> Topology:
    return Topology.new()


def _with(t: Topology, **kw) -> Topology:
    return dataclasses.replace(t, **kw)


def _bad(make, match: str) -> None:
    with pytest.raises(FwbenchError, match=match) as e:
        make()
    assert "\n" not in str(e.value)


def test_a_dangling_link_is_refused():
    t = _line()
    stray = dataclasses.replace(t.server, host="router")
    _bad(lambda: _with(t, links=(t.links[0], Link(t.fw_server_side, stray))),
         "a link ends at 'router', which is no host")


def test_a_duplicate_address_is_refused():
    t = _line()
    twin = dataclasses.replace(t.server, ip4=t.client.ip4, prefix4=16)
    fw = dataclasses.replace(t.fw_server_side, prefix4=16)
    _bad(lambda: _with(t, links=(t.links[0], Link(fw, twin))), "address 198.18.0.2 is used twice")
    extra = dataclasses.replace(t.client, extra4=(ad.SERVER[4],))
    _bad(lambda: _with(t, links=(Link(extra, t.fw_client_side), t.links[1])),
         "address 198.19.0.2 is used twice")


@pytest.mark.parametrize("change,match", [
    (lambda t: dict(hosts=t.hosts + (Host("fw", "firewall"),)), "host 'fw' twice"),
    (lambda t: dict(hosts=t.hosts + (Host("Bad-Name", "client"),)), "not a lower-case name"),
    (lambda t: dict(hosts=()), "no hosts"),
    (lambda t: dict(links=(t.links[0], Link(t.fw_server_side,
                                           dataclasses.replace(t.server, mac=t.client.mac)))),
     "MAC address 02:fb:00:00:01:02 is used twice"),
    (lambda t: dict(links=(t.links[0], Link(t.fw_server_side,
                                           dataclasses.replace(t.server, ip4="10.0.0.2",
                                                               prefix4=8)))),
     "outside"),
    (lambda t: dict(links=(t.links[0], Link(t.fw_server_side,
                                           dataclasses.replace(t.server, ip4="198.18.5.2")))),
     "share no subnet"),
    (lambda t: dict(links=(t.links[0], Link(t.fw_server_side,
                                           dataclasses.replace(t.server,
                                                               ifname="x" * 16)))),
     "longer than 15"),
    (lambda t: dict(links=(t.links[0], t.links[0])), "used twice"),
    (lambda t: dict(routes=t.routes + (Route("router", "198.19.0.0/16", "198.18.0.1"),)),
     "no host"),
    (lambda t: dict(routes=t.routes + (Route("client", "10.0.0.0/8", "198.18.0.1"),)),
     "leaves the benchmarking ranges"),
    (lambda t: dict(routes=t.routes + (Route("client", "198.19.5.0/24", "198.19.0.1"),)),
     "no neighbour holds 198.19.0.1"),
])
def test_bad_graphs_are_refused(change, match):
    t = _line()
    _bad(lambda: _with(t, **change(t)), match)


def test_no_clients_is_refused():
    _bad(lambda: Topology.many_clients(0, hosts=True), "at least 1")
