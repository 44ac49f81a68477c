"""The `kube-proxy` template: what kube-proxy loads on a node for N ClusterIP
services of M endpoints each, in its iptables mode or its nftables mode, as
rule-set model objects (`--param services=N endpoints=M mode=iptables|nftables
seed=S`).

Built as the model directly, not by importing text: the nft text importer needs
root (nft reads the text in a namespace of its own), so a template built through
it could not be built by the unit tests or without root; and at 30,000 services
(330,000 rules) the iptables-save importer's parse alone takes some 15 s. What
the importers would make of kube-proxy's own text is the test: `iptables_save()`
writes this rule set as kube-proxy's iptables-restore input would leave it in
iptables-save, and tests/unit/test_kubeproxy.py imports it and compares.

iptables mode (tables nat and filter):
  PREROUTING, OUTPUT -> KUBE-SERVICES; POSTROUTING -> KUBE-POSTROUTING
  KUBE-SERVICES: per service `-d CIP/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-*`, and
    last `-m addrtype --dst-type LOCAL -j KUBE-NODEPORTS` (empty: no NodePort
    services; kept because its addrtype match is on every packet's path)
  KUBE-SVC-*: `! -s POD_CIDR -d CIP/32 -p tcp -m tcp --dport 80 -j KUBE-MARK-MASQ`,
    then endpoint i of M `-m statistic --mode random --probability 1/(M-i)`
    (written `%0.10f`, as kube-proxy writes it, then held as libxt_statistic
    rounds it) `-j KUBE-SEP-*`, the last without statistic
  KUBE-SEP-*: `-s EP/32 -j KUBE-MARK-MASQ`, `-p tcp -m tcp -j DNAT --to-destination EP:PORT`
  KUBE-MARK-MASQ: `-j MARK --or-mark 0x4000`; KUBE-POSTROUTING: `-m mark ! --mark
    0x4000/0x4000 -j RETURN`, `-j MARK --xor-mark 0x4000`, `-j MASQUERADE --random-fully`
  2N + 3NM + 1 nat rules in N + NM + 4 user chains; chain names are kube-proxy's,
  KUBE-SVC-/KUBE-SEP- and 16 characters of base32(sha256(...)).
nftables mode (table ip kube-proxy):
  nat-prerouting (dstnat), nat-output (dstnat) -> services; nat-postrouting
    (srcnat) -> masquerading
  services: `ip daddr . meta l4proto . th dport vmap @service-ips` (one element per
    service, `goto service-HASH-default/NAME/tcp/p80`), and `fib daddr type local
    jump nodeports` (nodeports empty, as above)
  service chain: `ip daddr CIP tcp dport 80 ip saddr != POD_CIDR jump
    mark-for-masquerade`, `numgen random mod M vmap { 0 : goto endpoint-..., ... }`
  endpoint chain: `ip saddr EP jump mark-for-masquerade`, `meta l4proto tcp dnat to EP:PORT`
  mark-for-masquerade: `mark set mark or 0x4000`; masquerading: `mark and 0x4000 == 0
    return`, `mark set mark xor 0x4000`, `masquerade fully-random`
  2N + 2NM + 5 rules and N map elements; chain names are kube-proxy's
  (8 characters of base32(sha256(name)), then the name), without counters, as
  kube-proxy writes them.

Comments are left out: kube-proxy itself leaves them out once a node has more
than 1,000 endpoints (its large-cluster mode), which the defaults are.

The filter side is fwbench's, the same in both modes: a forward chain with policy
drop that drops INVALID and accepts what was marked for masquerade and ESTABLISHED
/ RELATED packets (kube-proxy's KUBE-FORWARD behind the node's policy drop). So a
service's packets are forwarded and everything else is dropped: verification
sees both verdicts.

Addresses (fwbench.addresses, the server side of the testbed): service i's cluster
IP is KUBE_CLUSTER_IPS' address 1 + i (at most 32,000 services, clear of
198.19.254.0/23); its port is tcp 80 ("p80"). Endpoint k (service k // M's
(k % M)-th) is pod address k % 16,384 of KUBE_PODS (= POD_CIDR, 198.19.64.0/18),
port 8080 + k // 16,384: 30,000 services of 3 endpoints do not fit in 16,384
distinct addresses, so addresses are reused with another target port, as the
house way is. The testbed's clients (198.18.x) are off-cluster: their packets
to a service are marked and masqueraded. The rule set says the server must answer
for the pods (RuleSet.served): its topology routes KUBE_PODS to the server,
which holds the whole prefix as local.

Seeded: kube-proxy writes services in Go's map order, so KUBE-SERVICES' (and the
chains') order of the services is a permutation drawn from `seed`; which
address a service has does not depend on it.

`one_more(rs)` is a loaded rule set with one service added and nothing else
changed (the same chains, rules and rule ids; the new rules' ids after the
last), what kube-proxy's control plane turns a node's rule set into when one
service is created, and back when it is deleted (fwbench.experiments.kubeproxy.
control). SYNC_CHAINS names the chains kube-proxy's iptables mode writes whole
at every sync.
"""
from __future__ import annotations

import base64
import gc
import hashlib
import random as _random
from dataclasses import dataclass, replace

from fwbench import addresses as ad
from fwbench.ruleset.model import (ACCEPT, DROP, RETURN, Action, AddrType, Chain, Match,
                                   Packet, Ports, Prefix, Probe, Rule, RuleSet, RuleSetError,
                                   Set, SetRef, Table, evolve, jump, validate, EMPTY_MATCH,
                                   RULE)

MASQ_MARK = 0x4000
POD_CIDR = str(ad.KUBE_PODS)
MAX_SERVICES = ad.MAX_KUBE_SERVICES
MAX_ENDPOINTS = 1000
# Target ports 8080 .. 8080 + 15: up to 16 rounds of the pod addresses.
MAX_TOTAL_ENDPOINTS = 16 * ad.KUBE_PODS.num_addresses
SERVICE_PORT, PORT_NAME, TARGET_PORT = 80, "p80", 8080
NAMESPACE = "default"
PROBE_SPORT = 40404
MODES = ("iptables", "nftables")

_POD_BASE = int(ad.KUBE_PODS.network_address)
_CIP_BASE = int(ad.KUBE_CLUSTER_IPS.network_address) + 1
_NPODS = ad.KUBE_PODS.num_addresses


@dataclass(frozen=True)
class Service:
    name: str                                 # the Service's name in NAMESPACE
    cluster_ip: str
    endpoints: tuple[tuple[str, int], ...]    # (pod address, target port)

    @property
    def port_name(self) -> str:
        """kube-proxy's ServicePortName.String(): namespace/name:port."""
        return f"{NAMESPACE}/{self.name}:{PORT_NAME}"

    def svc_chain(self) -> str:
        return "KUBE-SVC-" + _b32(self.port_name + "tcp", 16)

    def sep_chain(self, k: int) -> str:
        addr, port = self.endpoints[k]
        return "KUBE-SEP-" + _b32(f"{self.port_name}tcp{addr}:{port}", 16)

    def nft_base(self) -> str:
        return _hashed(f"{NAMESPACE}/{self.name}/tcp/{PORT_NAME}")

    def nft_endpoint_base(self, k: int) -> str:
        addr, port = self.endpoints[k]
        return _hashed(f"{NAMESPACE}/{self.name}/tcp/{PORT_NAME}__{addr}/{port}")


def _b32(text: str, chars: int) -> str:
    """The first `chars` (8 or 16) of base32(sha256(text)): from the digest's first
    chars * 5 / 8 bytes only, as base32 maps each 5 bytes to 8 characters apart
    (the whole digest in base64's pure-Python base32 took a third of the build)."""
    return base64.b32encode(hashlib.sha256(text.encode()).digest()[:chars * 5 // 8]).decode()


def _hashed(name: str) -> str:
    """kube-proxy nftables' hashAndTruncate: 8 characters of the name's hash, then
    the name (never long enough here to be truncated)."""
    return _b32(name, 8) + "-" + name


def probability(i: int, m: int) -> str:
    """Endpoint i of m's `--probability`, as kube-proxy writes it (%0.10f)."""
    return f"{1 / (m - i):0.10f}"


def threshold(text: str) -> int:
    """A `--probability` as the model holds it: libxt_statistic keeps
    lround(p * 2**31), the model a numerator over 2**32."""
    x = float(text) * 0x80000000
    t = int(x)
    return 2 * (t + (x - t >= 0.5))


def services(n: int, m: int, seed: int = 0) -> list[Service]:
    """The n services of m endpoints, in the seed's order (see the module)."""
    _check(n, m, seed)
    out = []
    for i in range(n):
        eps = []
        for j in range(m):
            k = i * m + j
            eps.append((_ip(_POD_BASE + k % _NPODS), TARGET_PORT + k // _NPODS))
        out.append(Service(f"svc-{i}", _ip(_CIP_BASE + i), tuple(eps)))
    _random.Random(seed).shuffle(out)
    return out


def _check(n: int, m: int, seed: int) -> None:
    if not 1 <= n <= MAX_SERVICES:
        raise RuleSetError(f"services must be 1..{MAX_SERVICES}, got {n}")
    if not 1 <= m <= MAX_ENDPOINTS:
        raise RuleSetError(f"endpoints must be 1..{MAX_ENDPOINTS}, got {m}")
    if n * m > MAX_TOTAL_ENDPOINTS:
        raise RuleSetError(f"services x endpoints must be at most {MAX_TOTAL_ENDPOINTS:,} "
                           f"(16 target ports of {_NPODS:,} pod addresses), got {n * m:,}")
    if seed < 0:
        raise RuleSetError(f"seed must be 0 or more, got {seed}")


def _ip(v: int) -> str:
    return f"{v >> 24}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}"


# --- the model -----------------------------------------------------------------------

_TCP = Match(proto="tcp")
_NOT_POD = Prefix(POD_CIDR, negate=True)
_MARK_OR = Action("mark", mark=MASQ_MARK, mark_mask=MASQ_MARK)
_MARK_XOR = Action("mark", mark=MASQ_MARK, mark_mask=0)
_MASQUERADE = Action("masquerade", random_port=True)
_LOCAL = Match(addrtype=AddrType(dst=frozenset({"local"})))
_PORT80 = Ports.of(SERVICE_PORT)


class _Ids:
    """Rule ids `<prefix>-<n>` in the order the rules are made (the importers'
    numbering: a table's chains in order)."""

    def __init__(self, prefix: str):
        self.prefix, self.n = prefix, 0

    def rule(self, match: Match, action: Action, counter: bool = True) -> Rule:
        self.n += 1
        return evolve(RULE, id=f"{self.prefix}-{self.n}", match=match, action=action,
                      counter=counter)


def _filter_chain(ids: _Ids, counter: bool) -> list[Rule]:
    return [ids.rule(Match(ct_state=frozenset({"invalid"})), DROP, counter),
            ids.rule(Match(mark=(MASQ_MARK, MASQ_MARK)), ACCEPT, counter),
            ids.rule(Match(ct_state=frozenset({"established", "related"})), ACCEPT, counter)]


def _service_match(s: Service, src: Prefix | None = None) -> Match:
    return evolve(EMPTY_MATCH, src=src, dst=Prefix(s.cluster_ip + "/32"), proto="tcp",
                  dport=_PORT80)


def _iptables(svcs: list[Service]) -> tuple[tuple[Table, ...], dict[str, str]]:
    ids = _Ids("nat")
    to_services = jump("KUBE-SERVICES")
    head = [Chain("PREROUTING", (ids.rule(EMPTY_MATCH, to_services),), "prerouting", -100,
                  "nat"),
            Chain("OUTPUT", (ids.rule(EMPTY_MATCH, to_services),), "output", -100, "nat"),
            Chain("POSTROUTING", (ids.rule(EMPTY_MATCH, jump("KUBE-POSTROUTING")),),
                  "postrouting", 100, "nat"),
            Chain("KUBE-MARK-MASQ", (ids.rule(EMPTY_MATCH, _MARK_OR),)),
            Chain("KUBE-NODEPORTS"),
            Chain("KUBE-POSTROUTING", (
                ids.rule(Match(mark=(MASQ_MARK, MASQ_MARK), mark_negate=True), RETURN),
                ids.rule(EMPTY_MATCH, _MARK_XOR), ids.rule(EMPTY_MATCH, _MASQUERADE)))]
    entry = {}
    rules = []
    for s in svcs:
        r = _ipt_entry(ids, s)
        entry[s.name] = r.id
        rules.append(r)
    rules.append(ids.rule(_LOCAL, jump("KUBE-NODEPORTS")))
    chains = head + [Chain("KUBE-SERVICES", tuple(rules))]
    for s in svcs:
        chains += _ipt_chains(ids, s)
    fids = _Ids("filter")
    filt = [Chain("FORWARD", (fids.rule(EMPTY_MATCH, jump("KUBE-FORWARD")),), "forward", 0,
                  "filter", "drop"),
            Chain("KUBE-FORWARD", tuple(_filter_chain(fids, True)))]
    return (Table("ip", "nat", tuple(chains)), Table("ip", "filter", tuple(filt))), entry


def _ipt_entry(ids: _Ids, s: Service) -> Rule:
    """The service's KUBE-SERVICES rule."""
    return ids.rule(_service_match(s), jump(s.svc_chain()))


def _ipt_chains(ids: _Ids, s: Service) -> list[Chain]:
    """The service's KUBE-SVC chain, then its KUBE-SEP chains."""
    m = len(s.endpoints)
    seps = [s.sep_chain(i) for i in range(m)]
    to_masq = jump("KUBE-MARK-MASQ")
    svc = [ids.rule(_service_match(s, _NOT_POD), to_masq)]
    for i in range(m):
        match = EMPTY_MATCH if i == m - 1 else \
            evolve(EMPTY_MATCH, random=threshold(probability(i, m)))
        svc.append(ids.rule(match, jump(seps[i])))
    out = [Chain(s.svc_chain(), tuple(svc))]
    for i, (addr, port) in enumerate(s.endpoints):
        out.append(Chain(seps[i], (
            ids.rule(evolve(EMPTY_MATCH, src=Prefix(addr + "/32")), to_masq),
            ids.rule(_TCP, Action("dnat", addr=addr, port=port)))))
    return out


def _nftables(svcs: list[Service]) -> tuple[tuple[Table, ...], dict[str, str]]:
    ids = _Ids("kube-proxy")
    chains = [
        Chain("filter-forward", tuple(_filter_chain(ids, False)),
              "forward", 0, "filter", "drop"),
        Chain("nat-prerouting", (ids.rule(EMPTY_MATCH, jump("services"), False),),
              "prerouting", -100, "nat"),
        Chain("nat-output", (ids.rule(EMPTY_MATCH, jump("services"), False),),
              "output", -100, "nat"),
        Chain("nat-postrouting", (ids.rule(EMPTY_MATCH, jump("masquerading"), False),),
              "postrouting", 100, "nat"),
        Chain("mark-for-masquerade", (ids.rule(EMPTY_MATCH, _MARK_OR, False),)),
        Chain("masquerading", (
            ids.rule(Match(mark=(0, MASQ_MARK)), RETURN, False),
            ids.rule(EMPTY_MATCH, _MARK_XOR, False),
            ids.rule(EMPTY_MATCH, _MASQUERADE, False))),
    ]
    lookup = ids.rule(EMPTY_MATCH, Action("vmap", vmap=SetRef("service-ips",
                                                               ("daddr", "proto", "dport"))),
                      False)
    chains.append(Chain("services", (lookup, ids.rule(_LOCAL, jump("nodeports"), False))))
    chains.append(Chain("nodeports"))
    entry = {s.name: lookup.id for s in svcs}
    bases = [s.nft_base() for s in svcs]
    sets = [Set("service-ips", ("addr", "proto", "port"),
                tuple(_nft_key(s) for s in svcs),
                verdicts=tuple(Action("goto", chain="service-" + b) for b in bases))]
    for n, s in enumerate(svcs, 1):
        vmap, more = _nft_chains(ids, s, f"vmap{n}")
        sets.append(vmap)
        chains += more
    return (Table("ip", "kube-proxy", tuple(chains), tuple(sets)),), entry


def _nft_key(s: Service) -> tuple:
    """The service's key in service-ips."""
    return (s.cluster_ip, "tcp", SERVICE_PORT)


def _nft_chains(ids: _Ids, s: Service, vmap: str) -> tuple[Set, list[Chain]]:
    """The service's endpoint choice (the inline map `vmap`), its service chain,
    then its endpoint chains."""
    m = len(s.endpoints)
    to_masq = jump("mark-for-masquerade")
    eps = ["endpoint-" + s.nft_endpoint_base(k) for k in range(m)]
    choice = Set(vmap, ("number",), tuple((k,) for k in range(m)),
                 verdicts=tuple(Action("goto", chain=e) for e in eps), inline=True)
    chains = [Chain("service-" + s.nft_base(), (
        ids.rule(_service_match(s, _NOT_POD), to_masq, False),
        ids.rule(EMPTY_MATCH, Action("vmap", vmap=SetRef(vmap, ("number",)),
                                     numgen=(m, 0)), False)))]
    for e, (addr, port) in zip(eps, s.endpoints):
        chains.append(Chain(e, (
            ids.rule(evolve(EMPTY_MATCH, src=Prefix(addr + "/32")), to_masq, False),
            ids.rule(_TCP, Action("dnat", addr=addr, port=port), False))))
    return choice, chains


def kube_proxy(*, services: int = 1000, endpoints: int = 3, mode: str = "iptables",
               seed: int = 0) -> RuleSet:
    """kube-proxy's rule set for `services` ClusterIP services of `endpoints`
    endpoints each, in its iptables or nftables mode (see the module)."""
    if mode not in MODES:
        raise RuleSetError(f"mode must be iptables or nftables, got {mode!r}")
    svcs = _services(services, endpoints, seed)
    # No reference cycles are made; the collector would walk the growing heap again
    # and again (as the importers find, a third of the time at 10**5 rules).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _ruleset(svcs, mode, services, endpoints, seed)
    finally:
        if was_enabled:
            gc.enable()


def _ruleset(svcs: list[Service], mode: str, services: int, endpoints: int,
             seed: int) -> RuleSet:
    tables, entry = (_iptables if mode == "iptables" else _nftables)(svcs)
    counted = mode == "iptables"
    first, last = svcs[0], svcs[-1]
    probes = (
        _service_probe("service", first, entry[first.name] if counted else None),
        # iptables: the last service's packets pass every KUBE-SERVICES rule.
        _service_probe("last service", last, entry[last.name] if counted else None),
        Probe("other port", _to(first, SERVICE_PORT + 1), False),
        Probe("not a service", Packet(4, "client", ad.CLIENT[4], ad.SERVER[4], "tcp",
                                      PROBE_SPORT, SERVICE_PORT), False),
    )
    return validate(RuleSet(
        "kube-proxy", tables, probes, size=services, served=(POD_CIDR,),
        notes=(f"kube-proxy {mode} mode: {services:,} services of {endpoints} endpoints, "
               f"service order from seed {seed}",)))


def _to(s: Service, port: int = SERVICE_PORT) -> Packet:
    return Packet(4, "client", ad.CLIENT[4], s.cluster_ip, "tcp", PROBE_SPORT, port)


def _service_probe(name: str, s: Service, rule: str | None) -> Probe:
    """A client's packet to the service: forwarded, counted by `rule`, and
    DNATed to one of its endpoints, masqueraded to the firewall's server-side
    address from a random port."""
    fw = ad.FW_SERVER_SIDE[4]
    return Probe(name, _to(s), True, rule,
                 choices=tuple(Packet(4, "client", fw, a, "tcp", None, p)
                               for a, p in s.endpoints))


# --- one service more, the others untouched (the control plane's update) -----------

@dataclass(frozen=True)
class Added:
    """A kube-proxy rule set with one service more (one_more)."""
    ruleset: RuleSet      # the rule set given, and this service
    service: Service
    position: int         # iptables mode: its rule's place in KUBE-SERVICES (0-based)
    mode: str


def mode_of(rs: RuleSet) -> str:
    """Which of kube-proxy's modes `rs` (a kube_proxy rule set) is in."""
    names = {(t.family, t.name) for t in rs.tables}
    if rs.name == "kube-proxy" and ("ip", "kube-proxy") in names:
        return "nftables"
    if rs.name == "kube-proxy" and ("ip", "nat") in names:
        return "iptables"
    raise RuleSetError(f"not a kube-proxy template rule set: {rs.name!r}")


def one_more(rs: RuleSet, seed: int = 0) -> Added:
    """`rs`, a kube_proxy rule set of N services, with service svc-N added as
    kube-proxy adds a service, everything else byte for byte as it was: the same
    chains, rules and rule ids (the new rules' ids follow the last of `rs`), so
    that the two renderings differ by that service alone. iptables mode: its
    KUBE-SERVICES rule at a place drawn from `seed` (kube-proxy writes services in
    Go's map order), its KUBE-SVC and KUBE-SEP chains; nftables mode: its
    service-ips element, its service and endpoint chains. Its endpoints are the
    next ones of the address plan (the module's), as if the template had been
    built with N + 1 services; it has as many as the first service of `rs`."""
    mode = mode_of(rs)
    n = rs.size
    first = next(c for t in rs.tables for c in t.chains
                 if c.name.startswith(("KUBE-SVC-", "service-")))
    m = len(first.rules) - 1 if mode == "iptables" else first.rules[1].action.numgen[0]
    if n + 1 > MAX_SERVICES:
        raise RuleSetError(f"kube-proxy: no service can be added to {n:,}: the "
                           f"template holds at most {MAX_SERVICES:,}")
    _check(n + 1, m, seed)
    k = n * m
    svc = Service(f"svc-{n}", _ip(_CIP_BASE + n),
                  tuple((_ip(_POD_BASE + (k + j) % _NPODS), TARGET_PORT + (k + j) // _NPODS)
                        for j in range(m)))
    if any(c.name in (svc.svc_chain(), "service-" + svc.nft_base())
           for t in rs.tables for c in t.chains):
        raise RuleSetError(f"kube-proxy: {svc.name} is in the rule set already")
    if mode == "iptables":
        position = _random.Random(seed).randrange(n + 1)
        tables, rule = _ipt_added(rs, svc, position)
    else:
        position = n
        tables, rule = _nft_added(rs, svc)
    probes = rs.probes + (_service_probe("added service", svc, rule),)
    where = f"at {position} in KUBE-SERVICES" if mode == "iptables" else "to service-ips"
    # dataclasses.replace, not evolve: a RuleSet keeps its digest in its __dict__.
    out = validate(replace(rs, tables=tables, probes=probes, size=n + 1,
                           notes=rs.notes + (f"and {svc.name} added {where}",)))
    return Added(out, svc, position, mode)


def _next_ids(t: Table, prefix: str) -> _Ids:
    """Ids going on from the table's last `<prefix>-<n>`."""
    ids = _Ids(prefix)
    ids.n = max((int(r.id.rsplit("-", 1)[1]) for c in t.chains for r in c.rules
                 if r.id.startswith(prefix + "-") and r.id.rsplit("-", 1)[1].isdigit()),
                default=0)
    return ids


def _ipt_added(rs: RuleSet, svc: Service, position: int) -> tuple[tuple[Table, ...], str]:
    nat = rs.table("ip", "nat")
    ids = _next_ids(nat, "nat")
    entry = _ipt_entry(ids, svc)
    chains = []
    for c in nat.chains:
        if c.name == "KUBE-SERVICES":
            rules = list(c.rules)
            rules.insert(position, entry)
            c = replace(c, rules=tuple(rules))
        chains.append(c)
    chains += _ipt_chains(ids, svc)
    return tuple(replace(nat, chains=tuple(chains)) if t is nat else t
                 for t in rs.tables), entry.id


def _nft_added(rs: RuleSet, svc: Service) -> tuple[tuple[Table, ...], None]:
    (t,) = rs.tables
    ids = _next_ids(t, "kube-proxy")
    vmap, chains = _nft_chains(ids, svc, f"vmap{rs.size + 1}")
    sets = []
    for s in t.sets:
        if s.name == "service-ips":
            s = replace(s, elements=s.elements + (_nft_key(svc),),
                       verdicts=s.verdicts + (Action("goto", chain=chains[0].name),))
        sets.append(s)
    return (replace(t, chains=t.chains + tuple(chains), sets=tuple(sets) + (vmap,)),), None


# Chains kube-proxy writes whole at every sync, partial or full (its proxier.go's
# "top-level" chains, those of them this template has): with the chains of the
# services that changed, they are what a partial sync's iptables-restore input
# holds. The nftables mode's partial sync writes only the changed services' own
# chains and map elements.
SYNC_CHAINS = {"iptables": frozenset({"KUBE-SERVICES", "KUBE-NODEPORTS",
                                      "KUBE-POSTROUTING", "KUBE-MARK-MASQ",
                                      "KUBE-FORWARD"}),
               "nftables": frozenset()}


# kube_proxy's setting `services` hides the function of that name there.
_services = services


# --- kube-proxy's text, for the importers ------------------------------------------------

def iptables_save(svcs: list[Service]) -> str:
    """The iptables mode's rule set as iptables-save prints it on a node (without
    comments, as in large-cluster mode): what the importer must read back as
    kube_proxy(mode="iptables") builds it."""
    lines = ["*nat", ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]",
             ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]",
             ":KUBE-MARK-MASQ - [0:0]", ":KUBE-NODEPORTS - [0:0]",
             ":KUBE-POSTROUTING - [0:0]", ":KUBE-SERVICES - [0:0]"]
    for s in svcs:
        lines.append(f":{s.svc_chain()} - [0:0]")
        lines += [f":{s.sep_chain(i)} - [0:0]" for i in range(len(s.endpoints))]
    mark = f"{MASQ_MARK:#x}"
    lines += ["-A PREROUTING -j KUBE-SERVICES", "-A OUTPUT -j KUBE-SERVICES",
              "-A POSTROUTING -j KUBE-POSTROUTING",
              f"-A KUBE-MARK-MASQ -j MARK --set-xmark {mark}/{mark}",
              f"-A KUBE-POSTROUTING -m mark ! --mark {mark}/{mark} -j RETURN",
              f"-A KUBE-POSTROUTING -j MARK --set-xmark {mark}/0x0",
              "-A KUBE-POSTROUTING -j MASQUERADE --random-fully"]
    dport = f"-p tcp -m tcp --dport {SERVICE_PORT}"
    lines += [f"-A KUBE-SERVICES -d {s.cluster_ip}/32 {dport} -j {s.svc_chain()}"
              for s in svcs]
    lines.append("-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS")
    for s in svcs:
        m = len(s.endpoints)
        lines.append(f"-A {s.svc_chain()} ! -s {POD_CIDR} -d {s.cluster_ip}/32 {dport} "
                     f"-j KUBE-MARK-MASQ")
        for i in range(m):
            # iptables-save prints the kernel's threshold back with 11 decimals.
            chance = "" if i == m - 1 else \
                f"-m statistic --mode random --probability " \
                f"{threshold(probability(i, m)) / 2 ** 32:.11f} "
            lines.append(f"-A {s.svc_chain()} {chance}-j {s.sep_chain(i)}")
        for i, (addr, port) in enumerate(s.endpoints):
            lines += [f"-A {s.sep_chain(i)} -s {addr}/32 -j KUBE-MARK-MASQ",
                      f"-A {s.sep_chain(i)} -p tcp -m tcp -j DNAT --to-destination "
                      f"{addr}:{port}"]
    lines += ["COMMIT", "*filter", ":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]",
              ":OUTPUT ACCEPT [0:0]", ":KUBE-FORWARD - [0:0]",
              "-A FORWARD -j KUBE-FORWARD",
              "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
              f"-A KUBE-FORWARD -m mark --mark {mark}/{mark} -j ACCEPT",
              "-A KUBE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
              "COMMIT"]
    return "\n".join(lines) + "\n"
