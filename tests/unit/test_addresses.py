"""fwbench.addresses: every address inside the benchmarking ranges, the pools apart
from each other and from the links, and the same answer every time."""
from __future__ import annotations

import ipaddress

import pytest

from fwbench import addresses as ad
from fwbench.errors import FwbenchError


def _net(x) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(x, strict=False)


@pytest.mark.parametrize("version", [4, 6])
def test_everything_lies_in_the_benchmarking_range(version):
    bench = ad.BENCH[version]
    nets = [*ad.LINKS[version], ad.CLIENT_SIDE[version], ad.SERVER_SIDE[version],
            ad.CLIENT_POOL[version], ad.FILLER_SPILL[version]]
    hosts = [ad.CLIENT[version], ad.SERVER[version], ad.FW_CLIENT_SIDE[version],
             ad.FW_SERVER_SIDE[version], ad.STRANGER[version],
             ad.spare_address(0, version), ad.spare_address(ad.MAX_SPARE - 1, version),
             *ad.client_addresses(ad.MAX_FURTHER_CLIENTS, version)[::97]]
    assert all(n.subnet_of(bench) for n in nets)
    assert all(ipaddress.ip_address(h) in bench for h in hosts)
    assert ad.within_bench(str(bench)) and not ad.within_bench("10.0.0.1")
    assert not ad.within_bench("2001:3::1")


@pytest.mark.parametrize("version", [4, 6])
def test_links_pools_and_spill_do_not_overlap(version):
    spare = _net(f"{ad.spare_address(0, version)}/{32 if version == 4 else 128}")
    last = ipaddress.ip_address(ad.spare_address(ad.MAX_SPARE - 1, version))
    areas = {"client link": ad.CLIENT_LINK[version], "server link": ad.SERVER_LINK[version],
             "client pool": ad.CLIENT_POOL[version], "spill": ad.FILLER_SPILL[version]}
    names = sorted(areas)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not areas[a].overlaps(areas[b]), (a, b)
    # The spare addresses run from their first to their last outside every area.
    for n in areas.values():
        assert spare.network_address not in n and last not in n
    lo, hi = int(spare.network_address), int(last)
    for n in areas.values():
        assert int(n.broadcast_address) < lo or int(n.network_address) > hi


@pytest.mark.parametrize("version", [4, 6])
def test_line_hosts_sit_on_their_links_and_sides(version):
    c, s = ad.CLIENT_LINK[version], ad.SERVER_LINK[version]
    assert ipaddress.ip_address(ad.CLIENT[version]) in c
    assert ipaddress.ip_address(ad.FW_CLIENT_SIDE[version]) in c
    assert ipaddress.ip_address(ad.SERVER[version]) in s
    assert ipaddress.ip_address(ad.FW_SERVER_SIDE[version]) in s
    assert c.subnet_of(ad.CLIENT_SIDE[version]) and s.subnet_of(ad.SERVER_SIDE[version])
    assert not ad.CLIENT_SIDE[version].overlaps(ad.SERVER_SIDE[version])


@pytest.mark.parametrize("version", [4, 6])
def test_further_clients_are_distinct_and_each_has_its_own_link(version):
    n = 320
    got = ad.client_addresses(n, version)
    assert len(set(got)) == n and got == ad.client_addresses(n, version)
    links = [ad.client_link(i, version) for i in range(n)]
    for i, link in enumerate(links):
        assert link.client == got[i]
        assert ipaddress.ip_address(link.client) in link.network
        assert ipaddress.ip_address(link.fw) in link.network
        assert link.network.subnet_of(ad.CLIENT_POOL[version])
    for a, b in zip(links, links[1:]):
        assert not a.network.overlaps(b.network)
    macs = [m for link in links for m in (link.fw_mac, link.client_mac)]
    line = {ad.CLIENT_MAC, ad.SERVER_MAC, ad.FW_CLIENT_SIDE_MAC, ad.FW_SERVER_SIDE_MAC}
    assert len(set(macs)) == len(macs) and not set(macs) & line
    # Further clients never hold a spare address, so filler rules stay unmatched.
    spare = {ad.spare_address(i, version) for i in range(0, ad.MAX_SPARE, 7)}
    assert not spare & set(got)


def test_the_line_keeps_its_addresses_and_macs():
    assert (ad.CLIENT[4], ad.FW_CLIENT_SIDE[4], ad.SERVER[4], ad.FW_SERVER_SIDE[4]) == \
        ("198.18.0.2", "198.18.0.1", "198.19.0.2", "198.19.0.1")
    assert (ad.CLIENT[6], ad.SERVER[6]) == ("2001:2:0:1::2", "2001:2:0:2::2")
    assert (ad.CLIENT_MAC, ad.FW_CLIENT_SIDE_MAC, ad.FW_SERVER_SIDE_MAC, ad.SERVER_MAC) == \
        ("02:fb:00:00:01:02", "02:fb:00:00:01:01", "02:fb:00:00:02:01", "02:fb:00:00:02:02")


def test_fillers_skip_the_links_and_are_deterministic(elsewhere):
    got = ad.filler_addresses(1000)
    assert got[:2] == ("198.18.1.0", "198.18.1.1")
    assert [repr(got)] == elsewhere("from fwbench import addresses as ad",
                                    "repr(ad.filler_addresses(1000))")
    assert not any(ipaddress.ip_address(a) in n for a in got for n in ad.LINKS[4])


@pytest.mark.parametrize("call", [lambda: ad.client_addresses(ad.MAX_FURTHER_CLIENTS + 1),
                                  lambda: ad.client_link(-1),
                                  lambda: ad.spare_address(ad.MAX_SPARE),
                                  lambda: ad.filler_addresses(ad.FILLER_CAPACITY + 1),
                                  lambda: ad.mac(0, 1), lambda: ad.mac(1, 3)])
def test_out_of_range_is_a_one_line_error(call):
    with pytest.raises(FwbenchError) as e:
        call()
    assert "\n" not in str(e.value)
