"""The original rule-set file moved onto the testbed by a lexical rewrite: only its
addresses (as the import's plan moved them) and its interface names change."""
import json
from pathlib import Path

import pytest

from fwbench.ruleset import original
from fwbench.ruleset.importers.remap import Remapper, _collect, remap
from fwbench.ruleset.model import Interfaces, RuleSet, RuleSetError
from fwbench.ruleset.original import Mover

DATA = Path(__file__).parent.parent / "data" / "original"
IFS = Interfaces("fwb-c0", "fwb-s0")


def _moved(pairs: list[tuple[str, str]]) -> Mover:
    return Mover(RuleSet("x", (), address_map=tuple(pairs)))


def test_an_address_the_plan_names_moves_to_its_pair_in_the_form_written():
    m = _moved([("10.1.0.0/16", "198.18.128.0/17"), ("192.168.5.10/32", "198.19.2.10/32")])
    assert m.text("-s 10.1.0.0/16 -d 192.168.5.10") == "-s 198.18.128.0/17 -d 198.19.2.10"
    assert m.text("-d 192.168.5.10/32") == "-d 198.19.2.10/32"
    # A dotted mask is a prefix length; written back as one.
    assert m.text("-s 10.1.0.0/255.255.0.0") == "-s 198.18.128.0/17"


def test_an_address_inside_a_moved_network_moves_by_its_offset_there():
    m = _moved([("192.168.5.0/24", "198.19.2.0/24")])
    assert m.text("--to-destination 192.168.5.77:443") == "--to-destination 198.19.2.77:443"
    assert m.text("172.16.5.1-192.168.5.9") == "172.16.5.1-198.19.2.9"   # one end moved
    # In a block the plan compressed, an address past its room has no place.
    small = _moved([("10.0.0.0/8", "198.18.128.0/17")])
    assert small.text("10.0.1.2") == "198.18.129.2"
    with pytest.raises(RuleSetError, match="moved into a smaller block"):
        small.text("10.200.0.1")


def test_what_only_looks_like_an_address_stays():
    m = _moved([("10.0.0.0/8", "198.18.0.0/15"), ("2001:db8::/32", "2001:2::/48")])
    text = ("--dport 1000:2000 mac aa:bb:cc:dd:ee:ff meta hour 12:00:00 v1.8.9 "
            "0x10.0.0.1 110.0.0.1")
    assert m.text(text) == text
    assert m.text("ip6 saddr 2001:db8::1 tcp dport 22") == "ip6 saddr 2001:2::1 tcp dport 22"
    assert m.text("[2001:db8::5]:80") == "[2001:2::5]:80"


def test_an_iptables_file_changes_only_in_addresses_and_interface_names():
    orig = original.read(str(DATA / "gw.rules"))
    rs = remap(_plain_import(orig), {"eth0": "client", "eth1": "server"})
    got = original.rewrite(orig, rs, IFS)["original.rules"]
    before, after = orig.text.splitlines(), got.splitlines()
    assert len(before) == len(after)
    assert "-A FORWARD -i fwb-c0 -o fwb-s0 -s 198.18.128.0/17 -d 198.19.2.10/32 -p tcp " \
           "-m tcp --dport 443 -j ACCEPT" in after
    assert "-A FORWARD -i fwb-c0 -o fwb-s0 -p udp -m udp --dport 53 -d 198.19.2.0/24 " \
           "-j ACCEPT" in after
    for a, b in zip(before, after):
        if not any(x in a for x in ("10.", "192.168.", "eth0", "eth1")):
            assert a == b


def test_nft_text_keeps_its_comments_and_moves_its_ranges_as_ranges():
    orig = original.read(str(DATA / "gw.nft"))
    rs = remap(_plain_import(orig), {"wan0": "client", "lan0": "server"})
    got = original.rewrite(orig, rs, IFS)["original.nft"]
    assert 'comment "ssh from 10.20.0.1"' in got        # a comment decides nothing
    assert 'iifname "fwb-c0" oifname "fwb-s0"' in got
    lo = dict(rs.address_map)["172.16.5.1/32"].split("/")[0]
    hi = lo.rsplit(".", 1)[0] + "." + str(int(lo.rsplit(".", 1)[1]) + 8)
    # The range's ends moved by one offset: it holds the same 9 addresses.
    assert f"{lo}-{hi}" in got, got


def test_nft_json_moves_prefixes_as_networks_and_names_only_where_they_are_interfaces():
    orig = original.read(str(DATA / "gw.json"))
    rs = remap(_plain_import(orig), {"wan0": "client", "lan0": "server"})
    doc = json.loads(original.rewrite(orig, rs, IFS)["original.json"])
    text = json.dumps(doc)
    assert '"fwb-c0"' in text and '"wan0"' not in text
    assert '"comment": "ssh from 10.20.0.1"' in text
    assert {"prefix": {"addr": "2001:2::", "len": 64}} in _all(doc)


def _all(x):
    if isinstance(x, dict):
        yield x
        for v in x.values():
            yield from _all(v)
    elif isinstance(x, list):
        for v in x:
            yield from _all(v)


def _plain_import(orig: original.Original) -> RuleSet:
    from fwbench.ruleset.importers import iptables_save, nft_json
    if orig.kind == "iptables":
        return iptables_save.parse(orig.text, orig.path, orig.version)
    return nft_json.parse(orig.text, orig.path) if orig.kind == "nft JSON" \
        else nft_json.parse_text(orig.text, orig.path)


def test_an_nft_variable_holding_an_interface_name_is_rewritten_and_others_stay():
    rs = RuleSet("x", (), iface_map=(("enp1s0", "{server}"), ("enp2s0", "{client}")))
    orig = original.Original("r.nft", 'define WAN = "enp1s0"\ndefine LAN = enp2s0\n'
                             'define PORTS = { 22, 80 }\ndefine OTHER = "eth9"\n'
                             'table inet t { chain c { iifname $WAN tcp dport $PORTS accept '
                             'comment "enp1s0 uplink" } }\n', "nft text", 0)
    got = original.rewrite(orig, rs, IFS)["original.nft"]
    assert got.splitlines()[:4] == ['define WAN = "fwb-s0"', "define LAN = fwb-c0",
                                    "define PORTS = { 22, 80 }", 'define OTHER = "eth9"']
    assert 'comment "enp1s0 uplink"' in got


def test_nft_text_keeps_an_ingress_chain_on_its_device_as_the_iface_map_says():
    """nft 1.0.6 lists a netdev chain's device in text and not in JSON: the import
    reads it from the text, and the interface map moves it like a rule's."""
    import os
    if os.geteuid() != 0:
        pytest.skip("reading nft text needs root (nft loads it in a namespace)")
    from fwbench.ruleset.importers import load
    rs = load.load_file(str(DATA / "ingress.nft"), {"eth0": "client", "eth1": "server"})
    chain = rs.table("netdev", "edge").chain("in0")
    assert chain.hook == "ingress" and chain.device == "{client}"


def test_a_netdev_chain_on_two_devices_or_none_is_refused():
    from fwbench.ruleset.importers import nft_json
    doc = {"nftables": [{"table": {"family": "netdev", "name": "e"}},
                        {"chain": {"family": "netdev", "table": "e", "name": "c",
                                   "type": "filter", "hook": "ingress", "prio": 0,
                                   "policy": "accept", "dev": ["eth0", "eth1"]}}]}
    with pytest.raises(RuleSetError, match="a chain on 2 devices"):
        nft_json.parse(doc, "f.json")
    del doc["nftables"][1]["chain"]["dev"]
    with pytest.raises(RuleSetError, match="an ingress chain on no device"):
        nft_json.parse(doc, "f.json")


def test_counters_the_firewall_s_own_packets_move_are_not_judged_or_judged_at_least():
    """Only its own packets reach `-i lo` rules and the output hook's chains (not
    judged); they pass postrouting and the chains output shares with forward too
    (at least the corpus's count)."""
    from fwbench.check import own_traffic_rules
    from fwbench.ruleset.model import Action, Chain, Iface, Match, Rule, RuleSet, Table, validate
    acc = Action("accept")
    rs = validate(RuleSet("x", (Table("inet", "t", (
        Chain("out", (Rule("o1", Match(), Action("jump", chain="shared")),
                      Rule("o2", Match(), Action("jump", chain="mine"))), hook="output"),
        Chain("fwd", (Rule("f1", Match(iif=Iface("lo")), acc),
                      Rule("f2", Match(), Action("jump", chain="shared"))), hook="forward"),
        Chain("post", (Rule("p1", Match(), acc),), hook="postrouting"),
        Chain("shared", (Rule("s1", Match(), acc),)),
        Chain("mine", (Rule("m1", Match(), acc),)),
    )),)))
    only, at_least = own_traffic_rules(rs)
    assert only == {"f1", "o1", "o2", "m1"} and at_least == {"s1", "p1"}


def test_an_at_least_counter_may_hold_more_but_not_less():
    from collections import Counter

    from fwbench.backends.base import Exchange, disagreements
    from fwbench.ruleset.model import Action, Chain, Match, Packet, Rule, RuleSet, Table, validate
    rs = validate(RuleSet("x", (Table("inet", "t", (
        Chain("post", (Rule("p", Match(), Action("accept")),), hook="postrouting"),)),)))
    pkt = Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2)

    class Counting:
        filters = True

        def counted_ids(self, rs):
            return frozenset({"p"})

    def per_rule(n, at_least):
        ex = Exchange([pkt], [pkt], Counter({"p": n}))
        return disagreements(Counting(), rs, ex, at_least=at_least)[1]
    assert per_rule(3, frozenset({"p"})) == [] and per_rule(1, frozenset({"p"})) == []
    assert per_rule(0, frozenset({"p"})) == ["rule p counted 0, expected 1"]
    assert per_rule(3, frozenset()) == ["rule p counted 3, expected 1"]
