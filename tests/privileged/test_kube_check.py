"""kube-proxy's rule sets, iptables and nftables mode, checked for real: the file
itself (the original row) and the import in iptables-legacy, iptables-nft and
nftables must give every packet one of the verdicts the reference allows, and
the random choice of endpoint must pass its chi-square test; and a rendering
whose endpoint shares are wrong is caught by that test."""
from dataclasses import replace
from pathlib import Path

import pytest

from fwbench import backends, check
from fwbench.ruleset.model import RANDOM_SCALE, evolve

KUBE = Path(__file__).parent.parent / "data" / "constructs" / "kube"
BACKENDS = "iptables-legacy,iptables-nft,nftables"


@pytest.mark.parametrize("name", ["kube-proxy.rules", "kube-proxy.nft"])
def test_kube_proxy_file_and_its_import_agree_on_three_backends(check_file, name):
    cp, rep = check_file(KUBE / name, backends=BACKENDS, corpus=200)
    assert cp.returncode == 0, cp.stdout
    assert "the original and all backends agree with the reference" in cp.stdout
    assert rep["random_choice_test"]["level"] == 0.001
    rows = [rep["original"]] + rep["backends"]
    assert [r["backend"] for r in rows] == ["original"] + BACKENDS.split(",")
    for r in rows:
        assert r["refused"] is None and r["disagreements"] == 0, r
        # Some packets are DNATed to an endpoint and forwarded, others dropped (the
        # forward chain's policy), and the endpoints' shares were tested.
        assert 0 < r["forwarded"] < r["packets"]
        tested = [g for g in r["random_choices"]["groups"] if "p_value" in g]
        assert tested and all(not g["rejected"] for g in tested), r["random_choices"]


@pytest.mark.parametrize("name", ["connmark.rules", "connmark.nft", "nth.rules", "nth.nft"])
def test_connection_marks_file_and_its_import_agree_on_two_backends(check_file, name):
    cp, rep = check_file(KUBE / name, backends="iptables-legacy,nftables", corpus=200)
    assert cp.returncode == 0, cp.stdout
    for r in [rep["original"]] + rep["backends"]:
        assert r["refused"] is None and r["disagreements"] == 0, r
        assert 0 < r["forwarded"] < r["packets"] and r["random_choices"] is None
    # A packet counter's packets pass with either verdict, and are counted as such.
    assert (rep["counter_choice_packets"] > 0) == name.startswith("nth")


def test_a_wrong_endpoint_share_is_caught_by_the_chi_square_test():
    """The import with the 3-endpoint service's first statistic rule at 0.9 in
    place of 1/3: every packet still gets an allowed verdict, only the
    distribution is wrong, and only the chance test sees it. In a testbed of its
    own: once, in the module's shared one, the backend's shares came out between
    the two (221, 19, 27 of 267), likely the earlier checks' state (not traced)."""
    path = str(KUBE / "kube-proxy.rules")
    rs = check.ruleset_from(path=path)
    first = next(r for _, c, r in rs.rules() if r.match.random is not None
                 and "-> 10.128.0.5:" in (r.comment or ""))
    skewed = evolve(first, match=evolve(first.match, random=int(0.9 * RANDOM_SCALE) & ~1))
    tables = tuple(replace(t, chains=tuple(replace(c, rules=tuple(
        skewed if r.id == first.id else r for r in c.rules)) for c in t.chains))
        for t in rs.tables)
    rep = check.check(rs.with_tables(tables), [backends.get("nftables")], corpus_size=200,
                      original=check.original_of(path))
    orig, nft = rep.original, rep.results[1]
    # The original follows the file (1/3 each), the backend the skewed import
    # (0.9 first): both fall where the skewed reference's shares say they may not.
    assert orig.per_packet == [] and orig.chances.failed, orig.chances
    assert nft.chances.failed == [] and not rep.ok


def test_an_odd_numgen_share_is_exact_in_nftables_and_refused_by_iptables():
    path = str(KUBE / "numgen.nft")
    rs = check.ruleset_from(path=path)
    with pytest.raises(Exception, match="unsupported: random match finer than the "
                                        "statistic's 2\\*\\*-31"):
        backends.get("iptables-legacy").refuse_unsupported(rs)
    rep = check.check(rs, [backends.get("nftables")], corpus_size=200,
                      original=check.original_of(path))
    assert rep.ok, [r.as_dict() for r in rep.results]
    for r in rep.results:
        tested = [g for g in r.chances.groups if "p_value" in g]
        assert len(tested) == 2 and r.chances.failed == []
