"""The measured flow of an imported rule set: named, or chosen from the corpus."""
from pathlib import Path

import pytest

from fwbench.ruleset import flows
from fwbench.ruleset.evaluate import Evaluator, RateLimits
from fwbench.ruleset.importers import load
from fwbench.ruleset.model import RuleSetError
from fwbench.ruleset.templates.seed000 import seed000

DATA = Path(__file__).parent.parent / "data" / "rulesets"


def _gateway():
    return load.load_file(str(DATA / "gateway.rules"),
                          load.parse_iface_map("eth0=client,eth1=server"),
                          str(DATA / "gateway.ipset"))


def test_default_flow_is_accepted_from_the_lan_and_behind_no_rate_limit():
    rs = _gateway()
    chosen = flows.choose(rs)
    f = chosen.flow
    v = Evaluator(rs).evaluate(f)
    assert v.forward and v.decided_by == chosen.flow_rule
    assert (f.proto, f.iif, f.daddr) == ("udp", "client", flows.SERVER[4])
    # The gateway accepts only its LAN (192.168.1.0/24, moved to 198.18.1.0/24),
    # and its last from_lan rule is a 10/s limit the flow must not go through.
    assert f.saddr.startswith("198.18.1.")
    assert RateLimits(rs).reached(f) == ()
    assert chosen.flow_rule != "filter-18" and rs.rule("filter-18").match.limit


def test_a_named_port_and_a_rule_id():
    rs = _gateway()
    with pytest.raises(RuleSetError, match=r"the measured flow udp:53 is dropped"):
        flows.choose(rs, "udp:53")    # from the client's own address: not the LAN
    by_rule = flows.choose(rs, "filter-15")
    assert by_rule.flow_rule == "filter-15" and by_rule.flow.dport == 123
    with pytest.raises(RuleSetError, match=r"^--flow udp:x: expected udp:PORT$"):
        flows.choose(rs, "udp:x")


def test_a_template_keeps_its_own_flow():
    rs = seed000(5)
    assert flows.choose(rs) is rs
