"""statecheck's pure parts: `conntrack -L` and /proc/slabinfo as the kernel and
conntrack-tools 1.4.7 print them (captured on this project's 6.18 machines), the
TCP service a rule set's proof connects to, and its NAT rules."""
import json

from fwbench import statecheck
from fwbench.ruleset.templates.seed004 import seed004_forward, seed004_nat
from fwbench.statecheck import CtTuple, parse_conntrack, parse_slabinfo

CONNTRACK_L = """\
tcp      6 431999 ESTABLISHED src=198.18.0.2 dst=198.19.0.100 sport=53030 dport=5001 \
src=198.19.0.2 dst=198.18.0.2 sport=5001 dport=53030 [ASSURED] mark=0 use=1
tcp      6 119 TIME_WAIT src=198.18.0.2 dst=198.19.0.100 sport=53034 dport=5001 \
src=198.19.0.2 dst=198.18.0.2 sport=5001 dport=53034 [ASSURED] mark=0 use=1
udp      17 29 src=198.19.0.2 dst=198.18.0.2 sport=5001 dport=40404 [UNREPLIED] \
src=198.18.0.2 dst=198.18.0.1 sport=40404 dport=5001 mark=0 use=1
udp      17 599 src=198.18.0.4 dst=198.19.0.2 sport=53353 dport=5001 [UNREPLIED] \
src=198.19.0.2 dst=198.18.0.4 sport=5001 dport=53353 mark=0 use=1
icmp     1 29 src=198.18.0.2 dst=198.19.0.2 type=8 code=0 id=4242 src=198.19.0.2 \
dst=198.18.0.2 type=0 code=0 id=4242 mark=0 use=1
conntrack v1.4.7 (conntrack-tools): 5 flow entries have been shown.
"""

SLABINFO = """\
slabinfo - version: 2.1
# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : \
tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> \
<sharedavail>
nf_conntrack_expect      0      0    208   19    1 : tunables    0    0    0 : \
slabdata      0      0      0
nf_conntrack      100064 100064    256   16    1 : tunables    0    0    0 : \
slabdata   6254   6254      0
"""


def test_conntrack_entries_parsed():
    es = parse_conntrack(CONNTRACK_L)
    assert len(es) == 5    # the summary line is not an entry
    nat = es[0]
    assert (nat.proto, nat.timeout_s, nat.state) == ("tcp", 431999, "ESTABLISHED")
    assert nat.orig == CtTuple("198.18.0.2", "198.19.0.100", 53030, 5001)
    assert nat.reply == CtTuple("198.19.0.2", "198.18.0.2", 5001, 53030)
    assert nat.flags == {"ASSURED"}
    assert es[1].state == "TIME_WAIT"


def test_udp_has_no_state_and_flags_between_tuples():
    snat = parse_conntrack(CONNTRACK_L)[2]
    assert snat.state is None and snat.flags == {"UNREPLIED"}
    assert snat.orig == CtTuple("198.19.0.2", "198.18.0.2", 5001, 40404)
    # SNAT shows in the reply: it goes to the firewall's client-side address
    assert snat.reply == CtTuple("198.18.0.2", "198.18.0.1", 40404, 5001)


def test_icmp_entry_without_ports():
    icmp = parse_conntrack(CONNTRACK_L)[4]
    assert icmp.orig == CtTuple("198.18.0.2", "198.19.0.2")
    assert str(icmp.orig) == "198.18.0.2 -> 198.19.0.2"
    assert str(parse_conntrack(CONNTRACK_L)[0].orig) == "198.18.0.2:53030 -> 198.19.0.100:5001"


def test_nothing_readable_gives_nothing():
    assert parse_conntrack("") == []
    assert parse_conntrack("conntrack v1.4.7 (conntrack-tools): 0 flow entries have "
                           "been shown.\n") == []
    assert parse_conntrack("ipv4 2 tcp 6 10 ESTABLISHED src=1.2.3.4\n") == []


def test_slabinfo():
    got = parse_slabinfo(SLABINFO)
    assert got["cache"] == "nf_conntrack"        # not nf_conntrack_expect
    assert (got["num_objs"], got["objsize"], got["num_slabs"]) == (100064, 256, 6254)
    assert got["bytes"] == 6254 * 1 * 4096
    assert parse_slabinfo(SLABINFO, "nf_conntrack_expect")["bytes"] == 0
    assert parse_slabinfo(SLABINFO, "kmalloc-64") is None


def test_targets_of_seed004():
    assert statecheck._target(seed004_nat()) == ("198.19.0.100", 5001)
    assert statecheck._target(seed004_forward()) == ("198.19.0.2", 5001)


def test_nat_rule_ids():
    assert statecheck.nat_rule_ids(seed004_nat()) == {"nat-1", "nat-2", "nat-3"}
    assert statecheck.nat_rule_ids(seed004_forward()) == frozenset()


def test_the_nat_rule_a_connection_meets():
    """What proof (c) expects to count: the tcp DNAT, not the SNAT (replies follow
    conntrack; SNAT is for connections the server opens)."""
    from fwbench.backends.base import evaluator
    from fwbench.ruleset.model import Packet
    rs = seed004_nat()
    v = evaluator(rs).evaluate(Packet(4, "client", "198.18.0.2", "198.19.0.100", "tcp",
                                      50000, 5001))
    assert [r for r in v.counted if r in statecheck.nat_rule_ids(rs)] == ["nat-1"]
    assert (v.translated.saddr, v.translated.daddr) == ("198.18.0.2", "198.19.0.2")


def test_fill_sources_and_record():
    r = statecheck.FillResult(
        entries=100_000, created=99_990, reached=True, fill_s=1.2, rounds=3,
        packets_sent=300_000, src="198.18.0.3", src_count=2, sport_count=50_000,
        dst="198.19.0.2", dport=5001, udp_timeout_s=3600, previous_udp_timeout_s=30,
        before={"count": 2, "slab": {"bytes": 45056, "num_objs": 176},
                "all_slabs_bytes": 10_000_000},
        after={"count": 99_992, "slab": {"bytes": 25_616_384, "num_objs": 100_064},
               "all_slabs_bytes": 40_000_000})
    assert r.sources == ["198.18.0.3", "198.18.0.4"]
    rec = r.as_dict()
    json.dumps(rec)
    assert rec["slab_delta"]["bytes"] == 25_616_384 - 45056
    assert rec["slab_delta"]["bytes_per_entry"] == round((25_616_384 - 45056) / 99_990, 1)
    assert rec["slab_delta"]["all_slabs_bytes"] == 30_000_000


def test_proof_record():
    p = statecheck.Proof(False, "(d) conntrack in the firewall holds no entry", {"x": 1})
    assert json.loads(json.dumps(p.as_dict())) == {
        "ok": False, "reason": "(d) conntrack in the firewall holds no entry",
        "details": {"x": 1}}
