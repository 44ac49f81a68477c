"""The drop-position experiment (seed 002, extended): how fast the firewall namespace
disposes of a UDP flood aimed at itself, depending on where and how it is dropped
(XDP, tc, nft ingress, iptables raw or filter, sets, string match, hashlimit) or
accepted (with and without connection tracking).

`treatments` says what each treatment loads and how it is read back, `measure` runs
the probe and the flood and reads where packets went, `experiment` runs the
interleaved plan and records every trial, `report` turns the records into the
seed's table (Method / PPS / Cost %) with intervals.
"""
