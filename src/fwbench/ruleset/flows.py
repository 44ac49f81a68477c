"""The measured flow of a rule set: the UDP flow the traffic engine sends.

A template names its flow. For an imported rule set the user names it (`udp:PORT`,
from the client to the server, or the id of a rule whose packet the corpus builds),
or it defaults to the accepted UDP flow from the client side (from any of its
addresses) to the server that traverses the most rules, as seed 000's test entry
sits last.
"""
from __future__ import annotations

from dataclasses import replace

from fwbench import addresses
from fwbench.ruleset import corpus as corpora
from fwbench.ruleset.evaluate import Evaluator, RateLimits
from fwbench.ruleset.model import Packet, RuleSet, RuleSetError

CLIENT = addresses.CLIENT
SERVER = addresses.SERVER
SPORT = 40404


def choose(rs: RuleSet, spec: str | None = None) -> RuleSet:
    """The rule set with its measured flow set (`flow`, `flow_rule`)."""
    ev = Evaluator(rs)
    version = min(rs.versions)
    if spec is None and rs.flow is not None:
        return rs
    if spec is None:
        # From the client side, from any source: the engine writes whole frames,
        # so a rule set that accepts only its LAN's addresses (remapped into the
        # client side's range) is measured from one of them.
        candidates = [p for p in corpora.build(rs, size=2000, seed=0)
                      if p.proto == "udp" and p.iif == "client" and p.ct_state == "new"]
        # Not through a rate limit: it would measure the limit, not the firewall.
        limits = RateLimits(rs)
        scored = [(ev.evaluate(p), p) for p in candidates if not limits.reached(p)]
        scored = [(v, p) for v, p in scored
                  if v.forward and v.translated.daddr == SERVER[p.version]]
        if not scored:
            raise RuleSetError(f"{rs.name}: no UDP flow from the client side to the "
                               f"server is accepted; name one with --flow udp:PORT or a "
                               f"rule id")
        # Rules a flow traverses grow with the position of the rule deciding it;
        # among equals, the client's own address, then the lowest port.
        position = {r.id: i for i, (_, _, r) in enumerate(rs.rules())}
        v, flow = max(scored, key=lambda vp: (position.get(vp[0].decided_by, -1),
                                              vp[1].saddr == CLIENT[vp[1].version],
                                              -vp[1].dport))
    elif spec.startswith("udp:"):
        try:
            port = int(spec[4:])
        except ValueError:
            raise RuleSetError(f"--flow {spec}: expected udp:PORT") from None
        flow = Packet(version, "client", CLIENT[version], SERVER[version], "udp", SPORT, port)
        v = ev.evaluate(flow)
    else:
        rs.rule(spec)  # raises if there is no such rule
        mine = [p for p in corpora.build(rs, size=2000, seed=0)
                if p.proto == "udp" and p.iif == "client" and ev.evaluate(p).decided_by == spec]
        if not mine:
            raise RuleSetError(f"--flow {spec}: no UDP packet from the client is decided "
                               f"by rule {spec}")
        flow = mine[0]
        v = ev.evaluate(flow)
    if not v.forward:
        raise RuleSetError(f"the measured flow {flow.proto}:{flow.dport} is dropped "
                           f"({v.reason}); a throughput of 0 needs no benchmark")
    return replace(rs, flow=flow, flow_rule=v.decided_by)
