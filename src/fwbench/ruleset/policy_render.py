"""Renderers: pure functions from a Policy to the text each backend loads.

The iptables text is written in exactly the form `iptables-save` prints, so a
backend can compare what the kernel holds with what was asked, line by line.
"""
from __future__ import annotations

from fwbench.ruleset.policy import Entry, Interfaces, Policy

# Names used inside the firewall namespace. nft rejects some bare identifiers
# (`in`, `fwd`), so every generated name carries a prefix or a full word.
IPT_FROM_CLIENT = "fwb_from_client"
IPT_FROM_SERVER = "fwb_from_server"
IPSET_NAME = "fwb_allowed"
NFT_TABLE = "fwbench"
NFT_FROM_CLIENT = "from_client"
NFT_FROM_SERVER = "from_server"
NFT_SET = "allowed"


# --- iptables (legacy and nft share the restore format) -------------------------

def ipt_entry(e: Entry) -> str:
    return (f"-A {IPT_FROM_CLIENT} -d {e.daddr}/32 -p {e.proto} -m {e.proto} "
            f"--dport {e.dport} -j ACCEPT")


def ipt_aux_rules(p: Policy) -> list[str]:
    return [ipt_entry(p.control),
            f"-A {IPT_FROM_CLIENT} -d {p.ping_daddr}/32 -p icmp -m icmp --icmp-type 8 -j ACCEPT"]


def _ipt_table(ifs: Interfaces, client_rules: list[str]) -> str:
    lines = [
        "*filter",
        ":INPUT ACCEPT [0:0]",
        ":FORWARD DROP [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        f":{IPT_FROM_CLIENT} - [0:0]",
        f":{IPT_FROM_SERVER} - [0:0]",
        f"-A FORWARD -i {ifs.client_side} -j {IPT_FROM_CLIENT}",
        f"-A FORWARD -i {ifs.server_side} -j {IPT_FROM_SERVER}",
        *client_rules,
        f"-A {IPT_FROM_SERVER} -j ACCEPT",
        "COMMIT",
    ]
    return "\n".join(lines) + "\n"


def iptables_linear(p: Policy, ifs: Interfaces) -> str:
    """iptables-restore input: one rule per entry, in order, then the aux rules."""
    return _ipt_table(ifs, [ipt_entry(e) for e in p.entries] + ipt_aux_rules(p))


def ipset_set_rule() -> str:
    return f"-A {IPT_FROM_CLIENT} -m set --match-set {IPSET_NAME} dst,dst -j ACCEPT"


def iptables_ipset(p: Policy, ifs: Interfaces) -> str:
    """iptables-restore input for the ipset variant: one rule matching the set."""
    return _ipt_table(ifs, [ipset_set_rule()] + ipt_aux_rules(p))


def ipset_restore(p: Policy) -> str:
    """ipset-restore input: a hash:ip,port set holding every entry."""
    # maxelem must hold the whole set; hashsize is only the initial bucket count.
    maxelem = max(65536, p.size)
    lines = [f"create {IPSET_NAME} hash:ip,port family inet hashsize 1024 maxelem {maxelem}"]
    lines += [f"add {IPSET_NAME} {e.daddr},{e.proto}:{e.dport}" for e in p.entries]
    return "\n".join(lines) + "\n"


# --- nftables -----------------------------------------------------------------

def nft_entry(e: Entry, counter: bool) -> str:
    return f"ip daddr {e.daddr} {e.proto} dport {e.dport} {'counter ' if counter else ''}accept"


def nft_aux_rules(p: Policy) -> list[str]:
    # The aux rules always count: verification reads the ICMP rule's counter.
    return [nft_entry(p.control, True),
            f"ip daddr {p.ping_daddr} icmp type echo-request counter accept"]


def nft_set_rule() -> str:
    return f"ip daddr . meta l4proto . th dport @{NFT_SET} counter accept"


def _nft_table(ifs: Interfaces, client_rules: list[str], sets: list[str]) -> str:
    t = "\t"
    out = [f"table ip {NFT_TABLE} {{", *sets,
           f"{t}chain forward {{",
           f"{t}{t}type filter hook forward priority filter; policy drop;",
           f'{t}{t}iifname "{ifs.client_side}" jump {NFT_FROM_CLIENT}',
           f'{t}{t}iifname "{ifs.server_side}" jump {NFT_FROM_SERVER}',
           f"{t}}}",
           f"{t}chain {NFT_FROM_CLIENT} {{",
           *(f"{t}{t}{r}" for r in client_rules),
           f"{t}}}",
           f"{t}chain {NFT_FROM_SERVER} {{",
           f"{t}{t}accept",
           f"{t}}}",
           "}"]
    return "\n".join(out) + "\n"


def nft_linear(p: Policy, ifs: Interfaces) -> str:
    """nft -f input: one rule per entry; a counter on each when p.counters (seed 000
    kept counters on for parity with iptables, which always counts). The test entry
    always counts, so verification can read it whatever the option says."""
    rules = [nft_entry(e, p.counters or e == p.test_entry) for e in p.entries]
    rules += nft_aux_rules(p)
    return _nft_table(ifs, rules, [])


def nft_set(p: Policy, ifs: Interfaces) -> str:
    """nft -f input: every entry in one set keyed on address . protocol . port."""
    t = "\t"
    elements = ",\n".join(f"{t}{t}{t}{e.daddr} . {e.proto} . {e.dport}" for e in p.entries)
    set_block = [f"{t}set {NFT_SET} {{",
                 f"{t}{t}type ipv4_addr . inet_proto . inet_service",
                 f"{t}{t}elements = {{",
                 elements,
                 f"{t}{t}}}",
                 f"{t}}}"]
    return _nft_table(ifs, [nft_set_rule()] + nft_aux_rules(p), set_block)


# --- eBPF (bpf/filter.bpf.c, loaded by fwbench-bpf) -------------------------------

BPF_PROTO = {"icmp": 1, "tcp": 6, "udp": 17}
ICMP_ECHO_REQUEST = 8


def bpf_line(kind: str, daddr: str, proto: str, port: int) -> str:
    return f"{kind} {daddr} {BPF_PROTO[proto]} {port}"


def bpf_aux_lines(p: Policy) -> list[str]:
    """The auxiliary rules, scanned after the entries in both modes (the ICMP
    rule's "port" is the ICMP type, as the filter keys it)."""
    return [bpf_line("rule", p.control.daddr, p.control.proto, p.control.dport),
            bpf_line("rule", p.ping_daddr, "icmp", ICMP_ECHO_REQUEST)]


def bpf_rules(p: Policy, set_mode: bool) -> str:
    """fwbench-bpf load input: one line per rule in order, each its own counter slot.
    Linear: every entry a `rule` in the scanned array; set: every entry a `set`
    element, the hash looked up before the array."""
    kind = "set" if set_mode else "rule"
    lines = [bpf_line(kind, e.daddr, e.proto, e.dport) for e in p.entries]
    return "\n".join(lines + bpf_aux_lines(p)) + "\n"
