"""`fwbench check` of kube-proxy's rule sets as a node lists them
(tests/data/realworld/kube-proxy): the file itself (the original row) and its
import on every backend that holds it give every packet a verdict the reference
allows, and the endpoints' shares pass their chi-square test. The backends that
cannot hold a file refuse it in one line (tests/unit/test_kube_dumps.py)."""
from pathlib import Path

import pytest

DUMPS = Path(__file__).parent.parent / "data" / "realworld" / "kube-proxy"


@pytest.mark.parametrize("name, backends", [
    # Not nftables: nft has no negated ct status that holds for a packet without
    # a connection (kubelet's `! --ctstate RELATED,ESTABLISHED,DNAT`).
    ("iptables-save.rules", "iptables-legacy,iptables-nft"),
    # Not iptables: kube-proxy's filter chains run at priority -110.
    ("nft-list.nft", "nftables"),
])
def test_a_kube_proxy_dump_checks_equal_against_itself(check_file, name, backends):
    cp, rep = check_file(DUMPS / name, backends=backends, corpus=200)
    assert cp.returncode == 0, cp.stdout[-3000:]
    rows = [rep["original"]] + rep["backends"]
    assert [r["backend"] for r in rows] == ["original"] + backends.split(",")
    for r in rows:
        assert r["refused"] is None and r["disagreements"] == 0, r
        assert 0 < r["forwarded"] < r["packets"]
        tested = [g for g in r["random_choices"]["groups"] if "p_value" in g]
        assert tested and all(not g["rejected"] for g in tested), r["random_choices"]
