"""The eBPF filter against the real kernel: every program loads in a fresh
namespace; BPF_PROG_RUN gives each rule's verdict and counter with no traffic;
and real packets through the firewall get the same verdicts from the four eBPF
backends as from the iptables rendering of the same rule set."""
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
from fwbench.ruleset.model import PROTO_NUMBERS, Match, Ports, Prefix, RuleSet, validate
from fwbench.ruleset.render import bpf as bpf_render
from fwbench.ruleset.templates.seed000 import SET_NAME, entry_id, seed000

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


def keys_of(text: str) -> list[tuple[str, int, int]]:
    """(daddr, protocol number, port or ICMP type) of every line of a BPF rendering."""
    return [(d, int(p), int(port)) for _, d, p, port in map(str.split, text.splitlines())]


@pytest.mark.parametrize("hook,mode", HOOK_MODES)
def test_every_rule_verdict_and_counter_by_prog_run(hook, mode):
    """One packet per line of the rendering: passed and counted by that line's slot,
    so by its rule's slots, and nothing else; the next port up of each TCP or UDP
    line, when no line has it, is dropped and counted as the default drop."""
    b = backend_or_skip(f"{hook}-{mode}")
    rs = seed000(300, layout=b.layout)
    r = bpf_render.render(rs, b.set_mode)
    keys = keys_of(r.text)
    hits = [frame(*k) for k in keys]
    misses = [frame(d, p, port + 1) for d, p, port in keys
              if p != PROTO_NUMBERS["icmp"] and (d, p, port + 1) not in set(keys)]
    assert len(hits) == 302 and len(misses) == 3   # after the last filler, udp and tcp 5202
    out = bpf.test_run(hook, mode, r.text, hits + misses)
    assert out["verdicts"][:len(hits)] == [bpf.PASS[hook]] * len(hits)
    assert out["verdicts"][len(hits):] == [bpf.DROP[hook]] * len(misses)
    counts = [c[0] for c in out["counters"]]
    assert len(counts) == r.drop_slot + 1
    assert counts[:len(hits)] == [1] * len(hits)   # slot i counted line i's packet
    assert counts[r.drop_slot] == len(misses)      # the default drop
    # By rule id, as the backend reads them: each rule counted one packet per
    # line it has (the set rule one per element; the skeleton has no slot).
    for rid, slots in r.slots.items():
        assert sum(counts[i] for i in slots) == len(slots), rid
    assert len(r.slots[rs.flow_rule]) == (300 if b.layout == "set" else 1)


@pytest.mark.parametrize("hook,mode", HOOK_MODES)
def test_not_judged_by_the_filter(hook, mode):
    """The firewall's own address, multicast, non-IPv4 pass; fragments and
    protocols no rule names are dropped, as iptables' L4 matches never match them."""
    b = backend_or_skip(f"{hook}-{mode}")
    rs = seed000(5, layout=b.layout)
    t = rs.flow
    arp = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x06" + bytes(28)
    out = bpf.test_run(hook, mode, bpf_render.render(rs, b.set_mode).text, [
        frame("198.18.0.1", 17, 9), frame("224.0.0.251", 17, 5353), arp,
        frame(t.daddr, 17, t.dport, frag=100), frame(t.daddr, 47, t.dport),
        frame(t.daddr, 17, t.dport)], local=("198.18.0.1",))
    P, D = bpf.PASS[hook], bpf.DROP[hook]
    assert out["verdicts"] == [P, P, P, D, D, P]


def test_every_program_loads_in_a_fresh_namespace(testbed):
    """The four filters through fwbench-bpf, and the drop programs through iproute2."""
    fw, ifname = (testbed.executor, "fw"), testbed.topo.fw_client_side.ifname
    for name in EBPF:
        b = backend_or_skip(name)
        rs = seed000(10, layout=b.layout)
        b.apply(testbed, rs)
        got = bpf.attached(*fw, ifname)
        assert list(got) == [b.hook], (name, got)
        assert b.differences(testbed, rs) == []
    flush_all(testbed)
    assert bpf.attached(*fw, ifname) == {}
    obj = str(proc.REPO / "bpf" / "build" / "drop.bpf.o")
    testbed.exec("fw", ["ip", "link", "set", "dev", ifname, "xdpdrv", "obj", obj, "sec", "xdp"])
    testbed.exec("fw", ["tc", "qdisc", "add", "dev", ifname, "clsact"])
    testbed.exec("fw", ["tc", "filter", "add", "dev", ifname, "ingress", "bpf", "da",
                        "obj", obj, "sec", "tc"])
    assert set(bpf.attached(*fw, ifname)) == {"xdp", "tc"}
    flush_all(testbed)
    assert bpf.attached(*fw, ifname) == {}


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


Key = tuple[str, str, int]   # (daddr, protocol name, dport)


def _random_entries(server: str, extra: list[str], rng: random.Random) -> list[Key]:
    daddrs = [server] + extra
    return list(dict.fromkeys((rng.choice(daddrs), rng.choice(["tcp", "udp"]),
                               rng.randrange(1000, 1080)) for _ in range(150)))


def _holding(entries: list[Key], layout: str) -> RuleSet:
    """Seed 000's skeleton (its chains, control and ping rules) holding `entries`
    in order instead of its own: one rule each, or the elements of its set. Its
    probes go: they are about seed 000's entries."""
    rs = seed000(len(entries), layout=layout)
    (t,) = rs.tables
    if layout == "set":
        t = replace(t, sets=(replace(t.set(SET_NAME), elements=tuple(entries)),))
    else:
        new = {entry_id(i + 1): Match(dst=Prefix.of(d), proto=p, dport=Ports.of(port))
               for i, (d, p, port) in enumerate(entries)}
        t = replace(t, chains=tuple(replace(c, rules=tuple(
            replace(r, match=new.get(r.id, r.match)) for r in c.rules)) for c in t.chains))
    return validate(rs.with_tables((t,), name=f"random-{layout}", probes=(), flow=None,
                                   flow_rule=None))


def _random_packets(entries: list[Key], daddrs: list[str], rng: random.Random,
                    n: int) -> list[tuple[str, int, int]]:
    out = []
    for _ in range(n):
        daddr, proto, port = rng.choice(entries)
        kind = rng.random()
        if kind < 0.35:
            k = (daddr, PROTO_NUMBERS[proto], port)                  # an entry exactly
        elif kind < 0.55:
            k = (daddr, PROTO_NUMBERS[proto], port + rng.choice([-1, 1]))
        elif kind < 0.70:
            k = (rng.choice(daddrs), rng.choice([6, 17]), rng.randrange(990, 1090))
        elif kind < 0.80:
            k = (rng.choice(daddrs), 1, rng.choice([0, 8, 8, 13]))   # ICMP types
        elif kind < 0.88:
            k = (rng.choice(daddrs), rng.choice([6, 17]), 5201)      # control port
        else:
            k = (rng.choice(daddrs), 47, port)                       # GRE: no rule
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
    entries = _random_entries(server, extra, rng)
    keys = _random_packets(entries, [server] + extra, rng, 300)
    mac = lambda m: bytes.fromhex(m.replace(":", ""))  # noqa: E731
    frames = [frame(d, p, port, ident=i + 1, saddr=topo.client.ip4,
                    src_mac=mac(topo.client.mac), dst_mac=mac(topo.fw_client_side.mac))
              for i, (d, p, port) in enumerate(keys)]

    legacy = backend_or_skip("iptables-legacy")
    legacy.apply(testbed, _holding(entries, "linear"))
    want = _forwarded(testbed, frames)
    assert 0 < len(want) < len(frames)   # the mix has both verdicts

    for name in EBPF:
        b = backend_or_skip(name)
        rs = _holding(entries, b.layout)
        b.apply(testbed, rs)
        got = _forwarded(testbed, frames)
        assert got == want, (name, sorted(got ^ want)[:10])
        run = bpf.test_run(b.hook, b.mode, bpf_render.render(rs, b.set_mode).text, frames,
                           local=(topo.fw_client_side.ip4, topo.fw_server_side.ip4))
        passed = {i + 1 for i, v in enumerate(run["verdicts"]) if v == bpf.PASS[b.hook]}
        assert passed == want, (name, sorted(passed ^ want)[:10])
