"""Where every packet a trial sent went: received, refused by the sender's next hop,
dropped at the firewall's ingress (its receive queue or backlog full), dropped
inside the firewall (its rules, routing), dropped at its egress, dropped at the
server's ingress, or counted by the receiver as a duplicate, out of its window or
stale. Read from the interface counters of the path (`path_counters`, before and
after the trial) and the sender's and receiver's reports.

Each stage is the difference of the counters on either side of it, so the stages
sum to what was sent by construction; what tells whether every packet is explained
are the three stages no counter names: lost between the sender and the firewall,
between the firewall and the server, and arriving at the server but not counted
by the receiver. Those are gaps; one beyond GAP of what was sent flags the trial.
(Other traffic on the links, a neighbour solicitation or two, makes a handful of
packets of noise either way.)

Measured (kernel 6.18, veth, 64 B, the XDP sender at open throttle through no
firewall, 2 s): 4,886,978 sent, 736,424 dropped at the firewall's ingress (its
backlog, also in /proc/net/softnet_stat), 4,150,554 received: every packet.
"""
from __future__ import annotations

import json

from fwbench.testbed.base import IfStats, Testbed

GAP = 0.001   # a gap beyond 0.1 % of what was sent flags the trial


def path_ports(tb: Testbed) -> dict[str, object]:
    """The ports a flow from the client to the server crosses, by their place."""
    t = tb.topo
    return {"sender": t.client, "fw_in": t.fw_client_side, "fw_out": t.fw_server_side,
            "receiver": t.server}


def path_counters(tb: Testbed) -> dict[str, IfStats]:
    """The path's interface counters, one read per host."""
    ports = path_ports(tb)
    by_host: dict[str, list] = {}
    for place, p in ports.items():
        by_host.setdefault(p.host, []).append((place, p))
    out = {}
    for host, items in by_host.items():
        links = {x["ifname"]: x for x in json.loads(tb.ip(host, "-s", "-j", "link", "show"))}
        for place, p in items:
            s = links[p.ifname]["stats64"]
            out[place] = IfStats(s["rx"]["packets"], s["tx"]["packets"],
                                 s["rx"]["dropped"], s["tx"]["dropped"], 0.0)
    return out


def account(before: dict[str, IfStats], after: dict[str, IfStats], sent: int,
            refused: int, receiver: dict) -> dict:
    """The trial's packets by where they went, and its gaps (see the module)."""
    d = {place: IfStats(after[place].rx_packets - before[place].rx_packets,
                        after[place].tx_packets - before[place].tx_packets,
                        after[place].rx_dropped - before[place].rx_dropped,
                        after[place].tx_dropped - before[place].tx_dropped, 0.0)
         for place in after}
    counted = {k: int(receiver.get(k) or 0) for k in
               ("received", "duplicated", "out_of_window", "stale", "malformed")}
    fw_in, fw_out, rx = d["fw_in"], d["fw_out"], d["receiver"]
    out = {
        "sent": sent,
        "refused_by_next_hop": refused,
        "lost_before_firewall": sent - refused - fw_in.rx_packets,
        "dropped_at_firewall_ingress": fw_in.rx_dropped,
        "dropped_in_firewall": (fw_in.rx_packets - fw_in.rx_dropped
                                - fw_out.tx_packets - fw_out.tx_dropped),
        "dropped_at_firewall_egress": fw_out.tx_dropped,
        "lost_after_firewall": fw_out.tx_packets - rx.rx_packets,
        "dropped_at_receiver_ingress": rx.rx_dropped,
        "not_counted_by_receiver": rx.rx_packets - rx.rx_dropped - sum(counted.values()),
        **counted,
    }
    gaps = {k: out[k] for k in ("lost_before_firewall", "lost_after_firewall",
                                "not_counted_by_receiver")
            if sent and abs(out[k]) > GAP * sent}
    if gaps:
        out["gap"] = "; ".join(f"{k.replace('_', ' ')}: {v:,} ({v / sent:.2%} of sent)"
                               for k, v in gaps.items())
    return out
