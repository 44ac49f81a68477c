"""Renderers against golden files, and generated nft text checked by nft itself.

Regenerate the golden files after an intended change with
FWBENCH_UPDATE_GOLDEN=1 pytest tests/unit/test_render.py, then review the diff.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fwbench.ruleset import Entry, Interfaces, seed000
from fwbench.ruleset import policy_render as r
from fwbench.ruleset.seed000 import MAX_ENTRIES, with_entry_replaced

GOLDEN = Path(__file__).parent.parent / "golden"
IFS = Interfaces("fwb000000-f0", "fwb000000-f1")
SERVER = "198.19.0.2"

CASES = {
    "iptables-linear.rules": lambda p: r.iptables_linear(p, IFS),
    "iptables-ipset.rules": lambda p: r.iptables_ipset(p, IFS),
    "ipset.restore": r.ipset_restore,
    "nft-linear.nft": lambda p: r.nft_linear(p, IFS),
    "nft-set.nft": lambda p: r.nft_set(p, IFS),
    "bpf-linear.rules": lambda p: r.bpf_rules(p, set_mode=False),
    "bpf-set.rules": lambda p: r.bpf_rules(p, set_mode=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    text = CASES[name](seed000(5, SERVER))
    path = GOLDEN / f"seed000-n5-{name}"
    if os.environ.get("FWBENCH_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_golden_nft_without_counters():
    text = r.nft_linear(seed000(5, SERVER, counters=False), IFS)
    path = GOLDEN / "seed000-n5-nft-linear-nocounters.nft"
    if os.environ.get("FWBENCH_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()
    # The fillers lose their counters; the test entry and aux rules keep theirs.
    assert text.count("counter") == 3


def test_seed000_shape():
    p = seed000(1000, SERVER)
    assert p.size == 1000
    assert p.entries[-1] == p.test_entry == Entry(SERVER, "udp", 5201)
    assert p.entries[0] == Entry(SERVER, "tcp", 40000)
    assert len(set(p.entries)) == 1000
    assert all(e.proto == "tcp" for e in p.entries[:-1])  # fillers never match UDP


def test_seed000_beyond_the_port_range_spills_to_other_addresses():
    p = seed000(30_000, SERVER)
    assert len(set(p.entries)) == 30_000
    assert p.entries[25_536].daddr == "198.19.255.1"
    assert all(e.dport <= 65535 for e in p.entries)


@pytest.mark.parametrize("n", [0, -1, MAX_ENTRIES + 1])
def test_seed000_rejects_sizes_out_of_range(n):
    with pytest.raises(ValueError):
        seed000(n, SERVER)


def test_one_entry_policy_is_only_the_test_entry():
    p = seed000(1, SERVER)
    assert p.entries == (p.test_entry,)
    assert r.iptables_linear(p, IFS).count(f"-A {r.IPT_FROM_CLIENT} ") == 1 + 2


def test_digest_changes_with_any_entry():
    p = seed000(10, SERVER)
    q = with_entry_replaced(p, p.test_entry, Entry(SERVER, "tcp", 1))
    assert p.digest() == seed000(10, SERVER).digest()
    assert p.digest() != q.digest()


def _nft_check(text: str, tmp_path: Path):
    if not shutil.which("nft") or not shutil.which("unshare"):
        pytest.skip("nft or unshare is not installed (./scripts/setup.sh installs them)")
    f = tmp_path / "rules.nft"
    f.write_text(text)
    # A private network namespace: nft -c needs CAP_NET_ADMIN, never the root namespace's.
    argv = ["unshare", "--net", "nft", "-c", "-f", str(f)]
    if os.geteuid() != 0:
        argv = ["unshare", "--map-root-user", "--net", "nft", "-c", "-f", str(f)]
    cp = subprocess.run(argv, capture_output=True, text=True)
    if cp.returncode != 0 and os.geteuid() != 0:
        if "Operation not permitted" in cp.stderr:
            pytest.skip("unprivileged user namespaces are disabled, so nft -c cannot run")
        if "Message too long" in cp.stderr:
            # nft enlarges its netlink buffer with SO_RCVBUFFORCE, which a user
            # namespace does not grant; large files are checked when run as root.
            pytest.skip("nft -c of a large file needs root (netlink buffer limit)")
    return cp


@pytest.mark.parametrize("render", [r.nft_linear, r.nft_set], ids=["linear", "set"])
@pytest.mark.parametrize("n", [1, 1000])
def test_generated_nft_passes_nft_check(render, n, tmp_path):
    cp = _nft_check(render(seed000(n, SERVER), IFS), tmp_path)
    assert cp.returncode == 0, cp.stderr


def test_nft_check_catches_a_broken_file(tmp_path):
    """The check above can fail: a rule set with a syntax error is rejected."""
    text = r.nft_linear(seed000(3, SERVER), IFS).replace("accept", "acept", 1)
    cp = _nft_check(text, tmp_path)
    assert cp.returncode != 0
