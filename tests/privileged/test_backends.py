"""Every backend loads N = 1,000 and verifies; probes get the right verdicts; a
broken rule set fails verification. Run against the real kernel in a fresh testbed."""
import pytest

from fwbench import backends
from fwbench.backends.base import flush_all, ruleset_state
from fwbench.ruleset import Entry, seed000
from fwbench.ruleset.seed000 import with_entry_replaced

FILTERING = [n for n in backends.names() if n != "none"]


def backend_or_skip(name):
    b = backends.get(name)
    if why := b.unavailable():
        pytest.skip(f"{name} cannot run here: {why}")
    return b


@pytest.mark.parametrize("name", FILTERING)
def test_loads_1000_and_verifies(testbed, name):
    b = backend_or_skip(name)
    policy = seed000(1000, testbed.topo.server.ip4)
    load = b.apply(testbed, policy)
    v = b.verify(testbed, policy)
    assert v.ok, v.reason
    assert v.rules_loaded == 1000
    assert load.load_time_s > 0
    d = v.details
    assert d["allowed_probe"]["forwarded"] >= d["allowed_probe"]["sent"]
    assert d["allowed_probe"]["rule_hits"] == d["allowed_probe"]["sent"]
    assert d["disallowed_probe"]["forwarded"] == 0
    assert d["ping_probe"]["replies"] == d["ping_probe"]["rule_hits"] == d["ping_probe"]["sent"]


@pytest.mark.parametrize("name", FILTERING)
def test_missing_test_rule_fails_verification(testbed, name):
    """The test entry replaced by one more filler: the count is still N, so only the
    probe can catch it, and it must."""
    b = backend_or_skip(name)
    good = seed000(50, testbed.topo.server.ip4)
    broken = with_entry_replaced(good, good.test_entry, Entry(good.test_entry.daddr, "tcp", 39999))
    b.apply(testbed, broken)
    v = b.verify(testbed, good)
    assert not v.ok
    assert v.rules_loaded == 50
    assert "test flow" in v.reason or "test-flow" in v.reason


@pytest.mark.parametrize("name", FILTERING)
def test_wrong_rule_count_fails_verification(testbed, name):
    b = backend_or_skip(name)
    b.apply(testbed, seed000(999, testbed.topo.server.ip4))
    v = b.verify(testbed, seed000(1000, testbed.topo.server.ip4))
    assert not v.ok and "999 entries in the kernel, 1000 asked" in v.reason


def test_none_forwards_everything(testbed):
    b = backend_or_skip("none")
    policy = seed000(1, testbed.topo.server.ip4)
    b.apply(testbed, policy)
    v = b.verify(testbed, policy)
    assert v.ok, v.reason
    assert v.rules_loaded == 0
    assert v.details["disallowed_probe"]["forwarded"] == v.details["disallowed_probe"]["sent"]


def test_backends_do_not_stack(testbed):
    """Loading one backend after another leaves only the last: legacy and nft rules
    would otherwise both apply, and an XDP or tc filter would sit under either."""
    policy = seed000(100, testbed.topo.server.ip4)
    for name in ("iptables-legacy", "xdp-set", "tc-linear"):
        backend_or_skip(name).apply(testbed, policy)
    nft = backend_or_skip("nftables")
    nft.apply(testbed, policy)
    state = ruleset_state(testbed)
    assert state["iptables-legacy"] == 0 and state["nftables_tables"] == 1
    assert state["bpf_programs"] == 0
    assert nft.verify(testbed, policy).ok
    backend_or_skip("tc-set").apply(testbed, policy)
    assert ruleset_state(testbed)["bpf_programs"] == 1
    flush_all(testbed)
    assert ruleset_state(testbed) == {"iptables-legacy": 0, "nftables_tables": 0, "ipsets": 0,
                                      "bpf_programs": 0}
