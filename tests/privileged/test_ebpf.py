"""The eBPF filter against the real kernel: every program loads in a fresh
namespace; BPF_PROG_RUN gives each rule's verdict and counter with no traffic;
and real packets through the firewall get the same verdicts from the four eBPF
backends as from the iptables rendering of the same policy."""
import ipaddress
import json
import random
import socket
import struct
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from fwbench import backends, bpf, proc
from fwbench.backends.kernel import flush_all
from fwbench.ruleset import Entry, Policy, seed000
from fwbench.ruleset.model import Match, Ports, Prefix
from fwbench.ruleset.templates.seed000 import entry_id
from fwbench.ruleset.templates.seed000 import seed000 as new_seed000
from fwbench.ruleset import policy_render as r

EBPF = ["xdp-linear", "xdp-set", "tc-linear", "tc-set"]
HOOK_MODES = [("xdp", "linear"), ("xdp", "set"), ("tc", "linear"), ("tc", "set")]
TOS = 0x28   # marks this test's packets at the capture


def backend_or_skip(name):
    b = backends.get(name)
    if why := b.unavailable():
        pytest.skip(f"{name} cannot run here: {why}")
    return b


def frame(daddr: str, proto: int, port: int, *, ident: int = 1, frag: int = 0,
          saddr: str = "198.18.0.2", src_mac: bytes = b"\x02" * 6,
          dst_mac: bytes = b"\x04" * 6) -> bytes:
    """Ethernet + IPv4 + a minimal L4 header; `port` is the ICMP type for ICMP."""
    if proto in (6, 17):
        l4 = struct.pack("!HH", 40000, port) + (struct.pack("!HH", 12, 0) + b"fwbp"
                                                if proto == 17 else bytes(16))
    elif proto == 1:
        l4 = struct.pack("!BBH", port, 0, 0) + bytes(4)
    else:
        l4 = bytes(8)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, TOS, 20 + len(l4), ident, frag, 64, proto, 0,
                      socket.inet_aton(saddr), socket.inet_aton(daddr))
    s = sum(struct.unpack("!10H", hdr))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    hdr = hdr[:10] + struct.pack("!H", ~s & 0xFFFF) + hdr[12:]
    return dst_mac + src_mac + b"\x08\x00" + hdr + l4


def key(e: Entry) -> tuple[str, int, int]:
    return e.daddr, r.BPF_PROTO[e.proto], e.dport


@pytest.mark.parametrize("hook,mode", HOOK_MODES)
def test_every_rule_verdict_and_counter_by_prog_run(hook, mode):
    """One packet per rule: passed and counted by that rule's slot, and nothing
    else; the next port up of each entry is dropped and counted as a drop."""
    backend_or_skip(f"{hook}-{mode}")
    policy = seed000(300, "198.19.0.2")
    rules = r.bpf_rules(policy, mode == "set")
    keys = [tuple(ln.split()[1:]) for ln in rules.splitlines()]
    hits = [frame(d, int(p), int(port)) for d, p, port in keys]
    misses = [frame(e.daddr, r.BPF_PROTO[e.proto], e.dport + 1) for e in policy.entries
              if (e.daddr, e.proto, e.dport + 1) not in
              {(x.daddr, x.proto, x.dport) for x in policy.entries}]
    out = bpf.test_run(hook, mode, rules, hits + misses)
    assert out["verdicts"][:len(hits)] == [bpf.PASS[hook]] * len(hits)
    assert out["verdicts"][len(hits):] == [bpf.DROP[hook]] * len(misses)
    counts = [c[0] for c in out["counters"]]
    assert counts[:len(hits)] == [1] * len(hits)   # slot i counted rule i's packet
    assert counts[-1] == len(misses)                # the default drop


@pytest.mark.parametrize("hook,mode", HOOK_MODES)
def test_not_judged_by_the_filter(hook, mode):
    """The firewall's own address, multicast, non-IPv4 pass; fragments and
    protocols no rule names are dropped, as iptables' L4 matches never match them."""
    backend_or_skip(f"{hook}-{mode}")
    policy = seed000(5, "198.19.0.2")
    t = policy.test_entry
    arp = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x06" + bytes(28)
    out = bpf.test_run(hook, mode, r.bpf_rules(policy, mode == "set"), [
        frame("198.18.0.1", 17, 9), frame("224.0.0.251", 17, 5353), arp,
        frame(t.daddr, 17, t.dport, frag=100), frame(t.daddr, 47, t.dport),
        frame(t.daddr, 17, t.dport)], local=("198.18.0.1",))
    P, D = bpf.PASS[hook], bpf.DROP[hook]
    assert out["verdicts"] == [P, P, P, D, D, P]


def test_every_program_loads_in_a_fresh_namespace(testbed):
    """The four filters through fwbench-bpf, and the drop programs through iproute2."""
    fw, ifname = testbed.topo.netns("fw"), testbed.topo.fw_client_side.ifname
    for name in EBPF:
        b = backend_or_skip(name)
        rs = new_seed000(10, layout=b.layout)
        b.apply(testbed, rs)
        got = bpf.attached(fw, ifname)
        assert list(got) == [b.hook], (name, got)
        assert b.differences(testbed, rs) == []
    flush_all(testbed)
    assert bpf.attached(fw, ifname) == {}
    obj = str(proc.REPO / "bpf" / "build" / "drop.bpf.o")
    testbed.exec("fw", ["ip", "link", "set", "dev", ifname, "xdpdrv", "obj", obj, "sec", "xdp"])
    testbed.exec("fw", ["tc", "qdisc", "add", "dev", ifname, "clsact"])
    testbed.exec("fw", ["tc", "filter", "add", "dev", ifname, "ingress", "bpf", "da",
                        "obj", obj, "sec", "tc"])
    assert set(bpf.attached(fw, ifname)) == {"xdp", "tc"}
    flush_all(testbed)
    assert bpf.attached(fw, ifname) == {}


# --- real packets: eBPF backends vs the iptables rendering ----------------------

_CAPTURE = r"""
import json, select, socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
s.bind((sys.argv[1], 0))
print("ready", flush=True)
seen = []
while True:
    rd, _, _ = select.select([s, sys.stdin], [], [], 5)
    if sys.stdin in rd or not rd:
        break
    f = s.recv(2048)
    if len(f) >= 34 and f[15] == %d:
        seen.append(int.from_bytes(f[18:20], "big"))
print(json.dumps(seen), flush=True)
""" % TOS

_SEND = r"""
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for line in sys.stdin:
    s.send(bytes.fromhex(line.strip()))
    time.sleep(0.0005)
"""


def _random_policy(server: str, extra: list[str], rng: random.Random) -> Policy:
    daddrs = [server] + extra
    entries = tuple(dict.fromkeys(Entry(rng.choice(daddrs), rng.choice(["tcp", "udp"]),
                                        rng.randrange(1000, 1080)) for _ in range(150)))
    return Policy(entries=entries, test_entry=entries[-1],
                  control=Entry(server, "tcp", 5201), ping_daddr=server, template="random")


def _as_ruleset(policy: Policy, layout: str):
    """Seed 000's skeleton holding the policy's entries, in the new model."""
    rs = new_seed000(policy.size, layout=layout)
    (t,) = rs.tables
    want = [(e.daddr, e.proto, e.dport) for e in policy.entries]
    if layout == "set":
        (st,) = t.sets
        t = replace(t, sets=(replace(st, elements=tuple(want)),))
    else:
        ids = {entry_id(i + 1): w for i, w in enumerate(want)}
        t = replace(t, chains=tuple(replace(c, rules=tuple(
            replace(r_, match=Match(dst=Prefix.of(ids[r_.id][0]), proto=ids[r_.id][1],
                                    dport=Ports.of(ids[r_.id][2])))
            if r_.id in ids else r_ for r_ in c.rules)) for c in t.chains))
    return replace(rs, tables=(t,))


def _random_packets(policy: Policy, daddrs: list[str], rng: random.Random, n: int):
    out = []
    for _ in range(n):
        e = rng.choice(policy.entries)
        kind = rng.random()
        if kind < 0.35:
            k = key(e)                                     # an entry exactly
        elif kind < 0.55:
            k = (e.daddr, r.BPF_PROTO[e.proto], e.dport + rng.choice([-1, 1]))
        elif kind < 0.70:
            k = (rng.choice(daddrs), rng.choice([6, 17]), rng.randrange(990, 1090))
        elif kind < 0.80:
            k = (rng.choice(daddrs), 1, rng.choice([0, 8, 8, 13]))   # ICMP types
        elif kind < 0.88:
            k = (rng.choice(daddrs), rng.choice([6, 17]), 5201)      # control port
        else:
            k = (rng.choice(daddrs), 47, e.dport)                    # GRE: no rule
        out.append(k)
    return out


def _forwarded(testbed, frames: list[bytes]) -> set[int]:
    """IP ids of the frames that reached the server."""
    srv = testbed.topo.server.ifname
    cap = testbed.spawn("server", [sys.executable, "-c", _CAPTURE, srv],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert cap.stdout.readline().strip() == "ready"
    testbed.exec("client", [sys.executable, "-c", _SEND, testbed.topo.client.ifname],
                 input="".join(f.hex() + "\n" for f in frames))
    time.sleep(0.2)
    out, _ = cap.communicate("stop\n", timeout=10)
    return set(json.loads(out.strip().splitlines()[-1]))


def test_same_verdicts_as_iptables_on_random_packets(testbed):
    """300 random packets (entries, their neighbours, other ports, ICMP types, the
    control port, GRE) over three destinations: iptables-legacy with the rendering
    forwards exactly the packets each eBPF backend forwards, and exactly those
    BPF_PROG_RUN passes."""
    rng = random.Random(4)
    topo = testbed.topo
    server = topo.server.ip4
    net = ipaddress.ip_interface(f"{server}/{topo.server.prefix4}").network
    extra = [str(net.network_address + 3), str(net.network_address + 4)]
    for a in extra:   # the firewall forwards to them; the capture sees them
        testbed.exec("fw", ["ip", "neigh", "replace", a, "lladdr", topo.server.mac, "dev",
                            topo.fw_server_side.ifname, "nud", "permanent"])
    policy = _random_policy(server, extra, rng)
    keys = _random_packets(policy, [server] + extra, rng, 300)
    mac = lambda m: bytes.fromhex(m.replace(":", ""))  # noqa: E731
    frames = [frame(d, p, port, ident=i + 1, saddr=topo.client.ip4,
                    src_mac=mac(topo.client.mac), dst_mac=mac(topo.fw_client_side.mac))
              for i, (d, p, port) in enumerate(keys)]

    legacy = backend_or_skip("iptables-legacy")
    legacy.apply(testbed, _as_ruleset(policy, "linear"))
    want = _forwarded(testbed, frames)
    assert 0 < len(want) < len(frames)   # the mix has both verdicts

    for name in EBPF:
        b = backend_or_skip(name)
        b.apply(testbed, _as_ruleset(policy, b.layout))
        got = _forwarded(testbed, frames)
        assert got == want, (name, sorted(got ^ want)[:10])
        run = bpf.test_run(b.hook, b.mode, r.bpf_rules(policy, b.mode == "set"), frames,
                           local=(topo.fw_client_side.ip4, topo.fw_server_side.ip4))
        passed = {i + 1 for i, v in enumerate(run["verdicts"]) if v == bpf.PASS[b.hook]}
        assert passed == want, (name, sorted(passed ^ want)[:10])
