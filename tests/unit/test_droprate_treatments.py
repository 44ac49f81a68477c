"""What each drop-position treatment loads (the droprate template, rendered by the
backends' renderers), without root; its counters read by rule id from a faked
listing; and the check of where flood packets went (`account`), on made-up
counter deltas."""
import ipaddress

import pytest

from fwbench.experiments.droprate import treatments as tr
from fwbench.experiments.droprate.measure import account
from fwbench.errors import FwbenchError

T = tr.Target(ifname="fwbabc123-f0", client_ip="198.18.0.2", fw_ip="198.18.0.1")
TESTBED = [ipaddress.ip_network(n) for n in ("198.18.0.0/24", "198.19.0.0/24")]


def test_capacity_is_the_bench_range_minus_the_testbed():
    assert tr.FILLER_CAPACITY == 2 ** 17 - 512 and tr.MAX_SET_SIZE == 130_561


def test_fillers_are_distinct_benchmark_addresses_the_testbed_does_not_use():
    got = tr.filler_addresses(tr.FILLER_CAPACITY)
    assert len(set(got)) == tr.FILLER_CAPACITY
    addrs = [ipaddress.ip_address(a) for a in got]
    assert all(a in tr.BENCH_V4 for a in addrs)
    assert not any(a in n for a in addrs for n in TESTBED)
    assert tr.filler_addresses(3) == ("198.18.1.0", "198.18.1.1", "198.18.1.2")


def test_more_fillers_than_the_range_holds_is_an_error():
    with pytest.raises(FwbenchError, match="130,560 the testbed does not use"):
        tr.filler_addresses(tr.FILLER_CAPACITY + 1)


def test_table_order_and_one_set_treatment_per_size():
    got = [t.key for t in tr.build(list(tr.NAMES), [1, 1000], 5)]
    assert got == [("notrack", 2), ("conntrack", 2), ("xdp", 1), ("tc", 1),
                   ("nft-ingress", 1), ("raw", 1), ("raw-after-rules", 6),
                   ("filter-input", 1), ("ipset", 1), ("ipset", 1000), ("nftset", 1),
                   ("nftset", 1000), ("string-bm", 1), ("string-kmp", 1), ("hashlimit", 1)]
    assert [t.key for t in tr.build(["hashlimit", "raw"], [7], 5)] == \
        [("raw", 1), ("hashlimit", 1)]


def _rules(treatment) -> list[str]:
    """The rule lines of a treatment's iptables-restore file."""
    return [ln for ln in treatment.render(T)["rules.iptables"].splitlines()
            if ln.startswith("-A ")]


def test_conntrack_pair_differs_only_in_notrack():
    a, b = _rules(tr.Notrack()), _rules(tr.Conntrack())
    assert a == ['-A PREROUTING -p udp -m comment --comment "fwb:flood" -j CT --notrack',
                 '-A PREROUTING -p icmp -m comment --comment "fwb:ct-icmp" -j CT']
    assert b == ['-A PREROUTING -p udp -m comment --comment "fwb:flood" -j CT', a[1]]
    assert tr.Notrack().expect.conntrack_on and tr.Conntrack().expect.tracked
    assert not tr.Notrack().expect.tracked


def test_raw_drop_restore_file():
    text = tr.RawDrop().render(T)["rules.iptables"]
    assert text.splitlines() == ["*raw", ":PREROUTING ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]",
                                 "-A PREROUTING -i fwbabc123-f0 -p udp "
                                 '-m comment --comment "fwb:flood" -j DROP', "COMMIT"]
    assert list(tr.RawDrop().render(T)) == ["rules.iptables"]


def test_filter_input_is_in_the_filter_table():
    text = tr.FilterInput().render(T)["rules.iptables"]
    assert text.startswith("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n")
    assert '-A INPUT -i fwbabc123-f0 -p udp -m comment --comment "fwb:flood" -j DROP\n' \
        in text
    assert tr.FilterInput().where(T) == "filter INPUT"


def test_raw_after_rules_puts_non_matching_sources_first():
    rules = _rules(tr.RawAfterRules(5))
    assert len(rules) == 6 and rules[-1] == \
        '-A PREROUTING -i fwbabc123-f0 -p udp -m comment --comment "fwb:flood" -j DROP'
    for i, r in enumerate(rules[:-1], 1):
        src = ipaddress.ip_address(r.split()[3].removesuffix("/32"))
        assert src in tr.BENCH_V4 and src != ipaddress.ip_address(T.client_ip)
        assert r.endswith(f'-i fwbabc123-f0 -p udp -m comment --comment '
                          f'"fwb:nonmatching-{i}" -j DROP')


def test_string_and_hashlimit_rules_in_iptables_save_form():
    assert _rules(tr.StringMatch("kmp")) == [
        '-A PREROUTING -p udp -m string --string "foo.com" --algo kmp '
        '-m comment --comment "fwb:flood" -j DROP']
    assert _rules(tr.StringMatch("bm"))[0].startswith(
        '-A PREROUTING -p udp -m string --string "foo.com" --algo bm ')
    assert _rules(tr.Hashlimit()) == [
        "-A PREROUTING -p udp -m hashlimit --hashlimit-above 1000/sec --hashlimit-burst 5 "
        "--hashlimit-mode srcip --hashlimit-name fwb_udp --hashlimit-srcmask 16 "
        '-m comment --comment "fwb:flood" -j DROP']
    with pytest.raises(FwbenchError):
        tr.StringMatch("regex")


def test_the_payload_text_and_the_rate_come_from_the_target():
    t = tr.Target("fwbabc123-f0", "198.18.0.2", "198.18.0.1", text="bar.org",
                  hashlimit_pps=500)
    assert '--string "bar.org" --algo bm ' in tr.StringMatch("bm").render(t)["rules.iptables"]
    assert "--hashlimit-above 500/sec " in tr.Hashlimit().render(t)["rules.iptables"]


def test_ipset_holds_the_client_and_fillers():
    files = tr.Ipset(1000).render(T)
    lines = files["sets.ipset"].splitlines()
    assert lines[0] == "create fwb_bl hash:ip family inet hashsize 1024 maxelem 1000 counters"
    adds = [ln.split()[2] for ln in lines[1:]]
    assert len(adds) == len(set(adds)) == 1000 and adds[0] == T.client_ip
    assert adds[1:] == list(tr.filler_addresses(999))
    assert '-A PREROUTING -m set --match-set fwb_bl src -m comment --comment "fwb:flood" ' \
        "-j DROP" in files["rules.iptables"]


def test_nft_set_at_raw_priority():
    text = tr.NftSet(1000).render(T)["rules.nft"]
    elems = [ln.strip().rstrip(",") for ln in
             text.split("elements = {\n")[1].split("\n\t\t}")[0].splitlines()]
    assert len(set(elems)) == 1000 and T.client_ip in elems
    assert "\t\ttype ipv4_addr\n\t\tsize 1000\n" in text
    assert "type filter hook prerouting priority raw; policy accept;" in text
    assert 'ip saddr @bl counter drop comment "fwb:flood"' in text
    assert text.startswith("table ip raw {")


def test_nft_ingress_is_bound_to_the_interface():
    text = tr.NftIngress().render(T)["rules.nft"]
    assert 'type filter hook ingress device "fwbabc123-f0" priority filter;' in text
    assert 'meta l4proto udp counter drop comment "fwb:flood"' in text
    assert text.startswith("table netdev ")


def test_what_only_iptables_renders_stays_with_iptables():
    # The backends refuse the constructs elsewhere, in one line.
    from fwbench.backends.nftables import NftLinear
    for treatment in (tr.Conntrack(), tr.StringMatch("bm"), tr.Hashlimit(), tr.Ipset(3)):
        with pytest.raises(FwbenchError) as e:
            NftLinear().refuse_unsupported(treatment.ruleset(T))
        assert str(e.value).startswith("nftables: unsupported: ")


class FakeTb:
    """A testbed whose firewall answers `iptables-legacy-save -c` with `saved`."""

    def __init__(self, saved: str):
        self.saved = saved

    def exec(self, role, argv, **kw):
        assert role == "fw" and argv == ["iptables-legacy-save", "-c"], argv
        return self.saved


def test_counters_are_read_by_rule_id():
    saved = "\n".join(
        ["*raw", ":PREROUTING ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
        + [f'[{n}:{n * 100}] -A PREROUTING -s {a}/32 -i fwbabc123-f0 -p udp -m comment '
           f'--comment "fwb:nonmatching-{i}" -j DROP'
           for i, (n, a) in enumerate(zip((0, 3), tr.filler_addresses(2)), 1)]
        + ['[77:7700] -A PREROUTING -i fwbabc123-f0 -p udp -m comment --comment "fwb:flood" '
           "-j DROP", "COMMIT", ""])
    tb = FakeTb(saved)
    treatment = tr.RawAfterRules(2)
    assert treatment.hits(tb, T) == 77
    assert treatment.silent(tb, T) == [0, 3]
    assert tr.RawDrop().silent(tb, T) == []
    with pytest.raises(FwbenchError, match="no rule flood in the kernel"):
        tr.RawDrop().hits(FakeTb("*raw\nCOMMIT\n"), T)


def test_bpf_treatments_attach_by_iproute2():
    obj = T.bpf_object
    assert tr.XdpDrop().render(T)["commands"] == \
        f"ip link set dev fwbabc123-f0 xdpdrv obj {obj} sec xdp\n"
    assert tr.TcDrop().render(T)["commands"].splitlines() == [
        "tc qdisc add dev fwbabc123-f0 clsact",
        f"tc filter add dev fwbabc123-f0 ingress bpf da obj {obj} sec tc"]
    assert not tr.XdpDrop().expect.reaches_ip


def counters(hits=0, no_ports=0, ip=0, sock=0, silent=()):
    return {"hits": hits, "udp_no_ports": no_ports, "ip_in_receives": ip,
            "udp_in_datagrams": sock, "silent": list(silent)}


def test_account_a_drop_before_ip():
    e = tr.XdpDrop().expect
    assert account(e, 2000, counters(hits=2000)) == []
    assert account(e, 2000, counters(hits=1999)) == ["1,999 of 2,000 dropped by it"]
    assert "IP received 2,000, expected none" in account(e, 2000, counters(hits=2000, ip=2000))


def test_account_a_drop_in_ip():
    e = tr.RawDrop().expect
    assert account(e, 2000, counters(hits=2000, ip=2000)) == []
    got = account(e, 2000, counters(hits=0, no_ports=2000, ip=2000))
    assert got == ["0 of 2,000 dropped by it", "2,000 reached UDP"]
    assert account(e, 2000, counters(hits=2000, ip=2000, silent=[0, 3])) == \
        ["non-matching rules counted 3"]


def test_account_accepted_packets_reach_udp():
    e = tr.Conntrack().expect
    assert account(e, 500, counters(hits=500, no_ports=500, ip=500)) == []
    assert account(e, 500, counters(hits=500, no_ports=0, ip=500)) == ["0 of 500 reached UDP"]
    assert account(e, 500, counters(hits=500, no_ports=500, ip=500, sock=1)) == \
        ["a socket received 1"]


def test_account_hashlimit_lets_some_through():
    e = tr.Hashlimit().expect
    assert account(e, 2000, counters(hits=1994, no_ports=6, ip=2000), hashlimit_max=10) == []
    assert account(e, 2000, counters(hits=2000, ip=2000)) == ["none passed the limit"]
    assert "at most 10 expected" in account(e, 2000, counters(hits=1900, no_ports=100,
                                                              ip=2000), hashlimit_max=10)[0]


def test_account_slack_for_a_long_flood():
    e = tr.RawDrop().expect
    d = counters(hits=999_500, ip=1_000_000)
    assert account(e, 1_000_000, d) != []
    assert account(e, 1_000_000, d, slack=1e-3) == []
