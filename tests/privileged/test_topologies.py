"""The netns provider builds any topology graph: many clients as addresses on one
port and as hosts of their own, each reaching the server both ways, and `fwbench
clean`'s name filter finds every namespace they make."""
import pytest

from fwbench import addresses as ad
from fwbench.testbed.netns import NETNS_RE, NetnsTestbed
from fwbench.testbed.topology import Topology

N = 4


def _ping(tb, host, src, dst):
    cp = tb.run(host, ["ping", "-n", "-c", "1", "-W", "2", "-I", src, dst], check=False)
    return cp.returncode == 0


@pytest.fixture(scope="module", params=[False, True], ids=["addresses", "hosts"])
def bed(request, netns_of):
    """(hosts, topology, testbed): one testbed of N clients for both address families,
    as addresses on the client's port or as hosts of their own; checked gone after."""
    hosts = request.param
    topo = Topology.many_clients(N, hosts=hosts)
    with NetnsTestbed(topo) as tb:
        created = netns_of(topo.run_id)
        assert len(created) == len(topo.hosts) and all(NETNS_RE.match(n) for n in created)
        yield hosts, topo, tb
    assert netns_of(topo.run_id) == []


@pytest.mark.parametrize("version", [4, 6])
def test_every_client_reaches_the_server(bed, version):
    hosts, topo, tb = bed
    server = ad.SERVER[version]
    assert _ping(tb, "client", ad.CLIENT[version], server)
    for i, addr in enumerate(ad.client_addresses(N - 1, version), 1):
        host = f"client{i}" if hosts else "client"
        assert _ping(tb, host, addr, server), (host, addr)
    if hosts:
        assert tb.recorded["rps_cpus"].keys() == {
            p.ifname for p in topo.ports_of("fw") if p != topo.fw_server_side} | \
            {topo.server.ifname}
