"""Backends declare their traits on their class, and what fwbench knows about
firewalls is derived from the registry: flush_all, a real host's saved state and
its put-back, the report's groups and default pairs, the experiments' defaults.

The derived lists are pinned to the ones written by hand before (so the report,
the flush and the put-back are unchanged), and a toy backend, one module plus one
registry line, shows up in every one of them.
"""
from __future__ import annotations

import subprocess
import textwrap
import types
from pathlib import Path

import pytest

from fwbench import backends as registry
from fwbench import proc
from fwbench.backends import kernel
from fwbench.cli import main
from fwbench.errors import FwbenchError
from fwbench.report import analysis as an
from fwbench.testbed import hoststate

TOYS = Path(__file__).resolve().parents[1] / "toys"


@pytest.fixture
def toy(monkeypatch):
    """The toy backend registered: its module on the path, one registry line; both
    undone after the test."""
    monkeypatch.syspath_prepend(str(TOYS))
    import toy_backend
    monkeypatch.setitem(registry.REGISTRY, toy_backend.NAME, toy_backend.TARGET)
    return toy_backend


def test_the_derived_lists_are_the_hand_written_ones():
    assert registry.groups() == [
        ("netfilter, linear", ["iptables-legacy", "iptables-nft", "nftables"]),
        ("netfilter, indexed", ["ipset", "nftset"]),
        ("eBPF, linear", ["xdp-linear", "tc-linear"]),
        ("eBPF, indexed", ["xdp-set", "tc-set"])]
    assert registry.pair_kinds() == [
        ("seed 000", [("iptables-legacy", "nftables"), ("ipset", "nftset")]),
        ("linear vs indexed", [("iptables-legacy", "ipset"), ("nftables", "nftset"),
                               ("xdp-linear", "xdp-set"), ("tc-linear", "tc-set")]),
        ("eBPF vs netfilter", [("xdp-linear", "iptables-legacy"),
                               ("tc-linear", "iptables-legacy"), ("xdp-set", "ipset"),
                               ("xdp-set", "nftset"), ("tc-set", "ipset")]),
        ("XDP vs tc", [("xdp-set", "tc-set")])]
    # flush_all's order: legacy x_tables, nf_tables (iptables-nft's with it), the
    # sets once no rule names them, eBPF.
    assert registry.firewalls() == [kernel.XT_LEGACY, kernel.XT_NFT, kernel.NF_TABLES,
                                    kernel.IPSET, kernel.BPF_HOOKS]
    # A real host's listings, in the order its saved state holds them.
    assert {n: a for fw in registry.firewalls() for n, a in fw.listings.items()} == {
        "iptables-legacy": ["iptables-legacy-save"],
        "ip6tables-legacy": ["ip6tables-legacy-save"],
        "iptables-nft": ["iptables-nft-save"], "ip6tables-nft": ["ip6tables-nft-save"],
        "nft": ["nft", "list", "ruleset"], "ipset": ["ipset", "save"]}
    assert list(n for fw in registry.firewalls() for n in fw.listings) == [
        "iptables-legacy", "ip6tables-legacy", "iptables-nft", "ip6tables-nft", "nft",
        "ipset"]
    empty = hoststate.emptying_script(registry.firewalls())
    assert empty.startswith("for t in $(cat /proc/net/ip_tables_names 2>/dev/null); do "
                            "for c in $(iptables-legacy -t $t -S")
    assert "ip6_tables_names" in empty and empty.endswith("; nft flush ruleset")
    assert registry.names(family=("x_tables", "nf_tables"), layout="linear") == [
        "iptables-legacy", "iptables-nft", "nftables"]
    assert registry.names(family="ebpf") == ["xdp-linear", "xdp-set", "tc-linear", "tc-set"]
    assert registry.names(sees_every_packet=False) == registry.names(family="ebpf")


def test_an_unknown_or_broken_registry_line_is_one_line(monkeypatch):
    with pytest.raises(FwbenchError, match="unknown backend 'nope'"):
        registry.get("nope")
    monkeypatch.setitem(registry.REGISTRY, "broken", "no_such_module:X")
    with pytest.raises(FwbenchError,
                       match="backend broken: cannot load no_such_module:X"):
        registry.cls("broken")


def test_a_toy_backend_is_listed_grouped_and_flushed(toy, capsys):
    assert main(["backends"]) == 0
    assert toy.NAME in capsys.readouterr().out
    assert registry.groups()[0] == (
        "netfilter, linear", ["iptables-legacy", "iptables-nft", "nftables", toy.NAME])
    assert an.groups(["none", "nftset", toy.NAME]) == [
        ("netfilter, linear", [toy.NAME]), ("netfilter, indexed", ["nftset"])]
    assert toy.NAME not in {b for _, ps in an.pair_kinds() for p in ps for b in p}
    # nftables' firewall: flush_all empties it already, and nothing is added.
    assert registry.firewalls()[-1] is kernel.BPF_HOOKS
    assert toy.NAME in registry.names(family="nf_tables", layout="linear")


class FakeTestbed:
    """What flush_all and ruleset_state touch of a testbed, every command noted."""
    own_traffic = False

    def __init__(self):
        self.commands: list[list[str]] = []
        port = types.SimpleNamespace
        self.topo = types.SimpleNamespace(fw_client_side=port(ifname="c0"),
                                          fw_server_side=port(ifname="s0"))
        self.executor = self

    def exec(self, role, argv, input=None, **kw):
        self.commands.append(list(argv))
        return ""

    def run(self, role, argv, check=True, input=None, **kw):
        self.commands.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "", "")

    def output(self, role, argv, **kw):
        self.commands.append(list(argv))
        return '[{"ifname": "c0"}]'


# A backend with a kernel firewall of its own, in one module: flush_all, the
# namespace's count and a real host's saved state and put-back take it up.
HOOKED = textwrap.dedent('''
    from fwbench.backends.kernel import Firewall
    from toy_backend import ToyNft

    class ToyHooks(Firewall):
        name = "toy hooks"
        listings = {"toy": ["toy-save"]}

        def flush(self, tb):
            tb.exec("fw", ["toy", "flush"])

        def held(self, tb):
            return {"toy_hooks": 0}

        def emptying_script(self):
            return "toy flush"

    HOOKS = ToyHooks()

    class Hooked(ToyNft):
        name = "toy-hooked"
        firewalls = ToyNft.firewalls + (HOOKS,)
''')


def test_a_toy_backend_s_own_firewall_is_flushed_counted_and_saved(toy, tmp_path,
                                                                    monkeypatch):
    (tmp_path / "toy_hooked.py").write_text(HOOKED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.REGISTRY, "toy-hooked", "toy_hooked:Hooked")
    monkeypatch.setattr(proc, "have", lambda tool: True)
    import toy_hooked
    assert registry.firewalls()[-1] is toy_hooked.HOOKS

    tb = FakeTestbed()
    kernel.flush_all(tb)
    flushed = [c for c in tb.commands if c[0] != "cat"]
    # After every built-in firewall, before connection tracking is forgotten.
    assert flushed.index(["toy", "flush"]) == len(flushed) - 2
    assert flushed[-1] == ["conntrack", "-F"]
    assert flushed.index(["nft", "flush", "ruleset"]) < flushed.index(["toy", "flush"])
    assert kernel.ruleset_state(tb)["toy_hooks"] == 0
    assert hoststate.emptying_script(registry.firewalls()).endswith(
        "; nft flush ruleset; toy flush")
    assert "toy" in {n for fw in registry.firewalls() for n in fw.listings}
