"""The model's own checks: validate() refuses what no backend could load, in one line."""
import pytest

from fwbench.ruleset.evaluate import Evaluator
from fwbench.ruleset.model import (Action, Chain, Match, Packet, Prefix, Rule, RuleSet,
                                   RuleSetError, Table, validate)

FLOW = Packet(4, "client", "198.18.0.2", "198.19.0.2", "udp", 1, 2)


def _chained(n: int, back_to: int | None = None) -> RuleSet:
    """FORWARD jumps to c1, c1 to c2, ... c(n-1); the last jumps back if asked."""
    chains = [Chain("FORWARD", (Rule("r0", Match(), Action("jump", chain="c1")),),
                    hook="forward", priority=0, policy="drop")]
    for i in range(1, n):
        to = f"c{i + 1}" if i < n - 1 else (f"c{back_to}" if back_to else None)
        chains.append(Chain(f"c{i}", (Rule(f"r{i}", Match(), Action("jump", chain=to)),)
                            if to else ()))
    return RuleSet("chained", (Table("ip", "filter", tuple(chains)),))


def test_chains_nested_deeper_than_pythons_stack_validate_and_evaluate():
    rs = validate(_chained(3000))
    v = Evaluator(rs).evaluate(FLOW)
    assert not v.forward and v.policy_of == "FORWARD" and len(v.counted) == 2999


def test_a_long_jump_loop_is_one_short_line():
    with pytest.raises(RuleSetError) as e:
        validate(_chained(3000, back_to=5))
    assert str(e.value) == ("table ip filter: jump loop c5 -> c6 -> c7 -> ... "
                            "(2990 more) -> c2998 -> c2999 -> c5")


def test_a_short_loop_is_named_in_full():
    with pytest.raises(RuleSetError, match=r"^table ip filter: jump loop c1 -> c2 -> c1$"):
        validate(_chained(3, back_to=1))


@pytest.mark.parametrize("rule, message", [
    (Rule("x", Match(), Action("jump", chain="nowhere")),
     "rule x: jump to a missing chain 'nowhere'"),
    (Rule("x", Match(), Action("jump", chain="FORWARD")), "rule x: jump to base chain FORWARD"),
    (Rule("x", Match(proto="icmp", dport=None, icmp_type=8), Action("bogus")),
     "rule x: unknown action 'bogus'"),
    (Rule("x", Match(src=Prefix.of("198.18.0.2"), dst=Prefix.of("2001:2::1")), Action("accept")),
     None),   # mixed IPv4/IPv6: the message is the model's, any one line
])
def test_malformed_rules_are_refused(rule, message):
    rs = RuleSet("bad", (Table("ip", "filter", (Chain(
        "FORWARD", (rule,), hook="forward", priority=0, policy="drop"),)),))
    with pytest.raises(RuleSetError) as e:
        validate(rs)
    assert "\n" not in str(e.value)
    if message:
        assert str(e.value) == message


def test_prefix_network_is_computed_once_and_equality_ignores_it():
    p = Prefix.of("198.18.0.0/24")
    assert p.network is p.network
    assert p == Prefix.of("198.18.0.0/24") and hash(p) == hash(Prefix.of("198.18.0.0/24"))
