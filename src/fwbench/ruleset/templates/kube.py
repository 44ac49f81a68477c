"""kube-proxy-shaped rule sets as the files kube-proxy writes: its iptables mode
(iptables-save text) and its nftables mode (nft text), for N services.

Both say the same: a packet to a service's cluster IP, protocol and port is
marked for masquerade unless it comes from the pod network, sent to one of the
service's endpoints at random (iptables: a chain of `statistic --mode random`
rules, each taking its share of what the rules before it left; nft: one
`numgen random mod N vmap`), and DNATed to it; the forward chain (policy drop)
accepts marked packets and established ones; postrouting masquerades, with a
random source port, what was marked, and clears the mark. An endpoint's own
traffic to its service is marked too (hairpin), as kube-proxy does.

Left out: node ports (they need `addrtype --dst-type LOCAL` / `fib daddr type
local`), load balancers, session affinity and the firewall chains.

The files are text for the importers (and `fwbench check`), not model objects:
the point is to check kube-proxy's own shapes, and to scale them (the next step
measures 30,000 services). Names follow kube-proxy's (a hash of the service and
port), short enough for iptables' 28-character chain names.
"""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

MASQ_MARK = 0x4000
POD_CIDR = "10.128.0.0/14"             # room for 3 endpoints of 30,000 services
SERVICE_BASE = (10 << 24) | (96 << 16)  # 10.96.0.0/12, kube's default service range
POD_BASE = (10 << 24) | (128 << 16)
# (protocol, port, target port) by service number, and endpoints 1, 2, 3 in turn.
PORTS = (("tcp", 80, 8080), ("udp", 53, 53), ("tcp", 443, 8443))


@dataclass(frozen=True)
class Service:
    name: str
    cluster_ip: str
    proto: str
    port: int
    endpoints: tuple[tuple[str, int], ...]   # (pod address, target port)

    def tag(self, kind: str, extra: str = "") -> str:
        """kube-proxy's chain hash: base32 of a SHA-256 over what the chain is for."""
        text = f"default/{self.name}:{self.proto}{self.port}{extra}"
        digest = base64.b32encode(hashlib.sha256((kind + text).encode()).digest())
        return digest.decode()[:16 if kind in ("SVC", "SEP") else 8]


def _ip(value: int) -> str:
    return f"{value >> 24}.{(value >> 16) & 255}.{(value >> 8) & 255}.{value & 255}"


def services(n: int) -> list[Service]:
    """N services: service i at cluster IP 10.96.0.0 + 10 + i, with i % 3 + 1
    endpoints at consecutive pod addresses."""
    if n < 1:
        raise ValueError(f"at least one service, not {n}")
    out, pod = [], POD_BASE + 2
    for i in range(n):
        proto, port, target = PORTS[i % len(PORTS)]
        eps = tuple((_ip(pod + k), target) for k in range(i % 3 + 1))
        pod += len(eps)
        out.append(Service(f"svc{i}", _ip(SERVICE_BASE + 10 + i), proto, port, eps))
    return out


def iptables_save(n: int) -> str:
    """kube-proxy's iptables mode for `services(n)`, as iptables-save prints it."""
    svcs = services(n)
    chains = ["KUBE-MARK-MASQ", "KUBE-POSTROUTING", "KUBE-SERVICES"]
    rules: list[str] = [
        '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" '
        '-j KUBE-POSTROUTING',
        f"-A KUBE-MARK-MASQ -j MARK --set-xmark {MASQ_MARK:#x}/{MASQ_MARK:#x}",
        f"-A KUBE-POSTROUTING -m mark ! --mark {MASQ_MARK:#x}/{MASQ_MARK:#x} -j RETURN",
        f"-A KUBE-POSTROUTING -j MARK --set-xmark {MASQ_MARK:#x}/0x0",
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring '
        'SNAT" -j MASQUERADE --random-fully',
    ]
    per_service: list[str] = []
    for s in svcs:
        svc = f"KUBE-SVC-{s.tag('SVC')}"
        what = f"default/{s.name}:{s.proto} cluster IP"
        match = f"-d {s.cluster_ip}/32 -p {s.proto} -m comment --comment \"{what}\" " \
                f"-m {s.proto} --dport {s.port}"
        rules.append(f"-A KUBE-SERVICES {match} -j {svc}")
        chains.append(svc)
        per_service.append(f"-A {svc} ! -s {POD_CIDR} {match} -j KUBE-MARK-MASQ")
        left, seps = len(s.endpoints), []
        for addr, port in s.endpoints:
            sep = f"KUBE-SEP-{s.tag('SEP', addr)}"
            chains.append(sep)
            comment = f"-m comment --comment \"default/{s.name}:{s.proto} -> {addr}:{port}\""
            chance = "" if left == 1 else \
                f" -m statistic --mode random --probability {1 / left:.11f}"
            per_service.append(f"-A {svc} {comment}{chance} -j {sep}")
            left -= 1
            seps.append(f"-A {sep} -s {addr}/32 -m comment --comment "
                        f"\"default/{s.name}:{s.proto}\" -j KUBE-MARK-MASQ")
            seps.append(f"-A {sep} -p {s.proto} -m comment --comment "
                        f"\"default/{s.name}:{s.proto}\" -m {s.proto} "
                        f"-j DNAT --to-destination {addr}:{port}")
        per_service += seps
    nat = ["*nat", ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]",
           ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]"]
    nat += [f":{c} - [0:0]" for c in chains] + rules + per_service + ["COMMIT"]
    filt = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT ACCEPT [0:0]",
            ":KUBE-FORWARD - [0:0]",
            '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
            "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
            '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" '
            f"-m mark --mark {MASQ_MARK:#x}/{MASQ_MARK:#x} -j ACCEPT",
            '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" '
            "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
            "COMMIT"]
    return "\n".join([f"# kube-proxy iptables mode, {n} services (fwbench)"]
                     + nat + filt) + "\n"


def nft(n: int) -> str:
    """kube-proxy's nftables mode for `services(n)`, in nft's syntax."""
    svcs = services(n)
    elements, chains = [], []
    for s in svcs:
        svc = f"service-{s.tag('service')}-{s.name}"
        elements.append(f"{s.cluster_ip} . {s.proto} . {s.port} : goto {svc}")
        eps = [f"endpoint-{s.tag('endpoint', addr)}-{s.name}-{k}"
               for k, (addr, _) in enumerate(s.endpoints)]
        vmap = ", ".join(f"{k} : goto {ep}" for k, ep in enumerate(eps))
        chains.append(
            f"\tchain {svc} {{\n"
            f"\t\tip daddr {s.cluster_ip} {s.proto} dport {s.port} "
            f"ip saddr != {POD_CIDR} jump mark-for-masquerade\n"
            f"\t\tnumgen random mod {len(eps)} vmap {{ {vmap} }}\n\t}}\n")
        for ep, (addr, port) in zip(eps, s.endpoints):
            chains.append(
                f"\tchain {ep} {{\n"
                f"\t\tip saddr {addr} jump mark-for-masquerade\n"
                f"\t\tmeta l4proto {s.proto} dnat to {addr}:{port}\n\t}}\n")
    return (
        f"# kube-proxy nftables mode, {n} services (fwbench)\n"
        "table ip kube-proxy {\n"
        "\tmap service-ips {\n"
        "\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n"
        "\t\telements = { " + ",\n\t\t\t     ".join(elements) + " }\n"
        "\t}\n"
        "\tchain mark-for-masquerade {\n"
        f"\t\tmeta mark set meta mark or {MASQ_MARK:#x}\n"
        "\t}\n"
        "\tchain masquerading {\n"
        f"\t\tmeta mark & {MASQ_MARK:#x} == 0 return\n"
        f"\t\tmeta mark set meta mark xor {MASQ_MARK:#x}\n"
        "\t\tmasquerade fully-random\n"
        "\t}\n"
        "\tchain services {\n"
        "\t\tip daddr . meta l4proto . th dport vmap @service-ips\n"
        "\t}\n"
        "\tchain filter-forward {\n"
        "\t\ttype filter hook forward priority filter; policy drop;\n"
        "\t\tct state invalid drop\n"
        f"\t\tmeta mark & {MASQ_MARK:#x} == {MASQ_MARK:#x} accept\n"
        "\t\tct state established,related accept\n"
        "\t}\n"
        "\tchain nat-prerouting {\n"
        "\t\ttype nat hook prerouting priority dstnat; policy accept;\n"
        "\t\tjump services\n"
        "\t}\n"
        "\tchain nat-output {\n"
        "\t\ttype nat hook output priority -100; policy accept;\n"
        "\t\tjump services\n"
        "\t}\n"
        "\tchain nat-postrouting {\n"
        "\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
        "\t\tjump masquerading\n"
        "\t}\n"
        + "".join(chains) +
        "}\n")
