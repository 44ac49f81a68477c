"""Renderers: pure functions from a RuleSet to the text each backend loads.

One module per backend family (iptables, ipset, nft, bpf). Each declares the
features it supports (`SUPPORTS`, in RuleSet.features()' vocabulary) and raises
model.Unsupported for anything else, before any testbed exists. Every rule's id
goes into the rendering (an iptables comment, an nft comment, a BPF counter slot),
as ID_TAG + id, so the kernel's counters are read by id.
"""
ID_TAG = "fwb:"
