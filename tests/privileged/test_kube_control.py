"""kube-proxy's control plane for real: a kube-proxy rule set of 200 services of 3
endpoints loaded on iptables-legacy, iptables-nft and nftables in both modes, one
service added and removed again by every mechanism the backend has, the kernel
proved to hold exactly the rule set after each step, the listing timed and the
memory held read; and a step the kernel refuses is one line."""
import pytest

from fwbench.backends import kernel
from fwbench.backends.base import Step
from fwbench.errors import FwbenchError
from fwbench.experiments.kubeproxy import control
from fwbench.ruleset.templates import kubeproxy as kp
from fwbench.ruleset.templates.kubeproxy import POD_CIDR
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import Topology

BACKENDS = ("iptables-legacy", "iptables-nft", "nftables")


@pytest.fixture(scope="module")
def kube_testbed():
    with NetnsTestbed(Topology.new().serving((POD_CIDR,))) as tb:
        yield tb


@pytest.fixture
def kube(kube_testbed):
    kernel.flush_all(kube_testbed)
    yield kube_testbed
    kernel.flush_all(kube_testbed)


@pytest.mark.parametrize("mode", kp.MODES)
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_service_is_added_and_removed_by_every_mechanism(kube, backend, mode):
    rs = kp.kube_proxy(services=200, endpoints=3, mode=mode)
    backend.apply(kube, rs)
    v = backend.verify(kube, rs, 0)
    assert v.ok, v.reason
    got = control.measure(kube, backend, rs, mode, listings=1)
    assert set(got["mechanisms"]) == {"batch", "commands", "sync"}
    for name, m in got["mechanisms"].items():
        for what in ("add", "remove"):
            step = m[what]
            assert step["command_s"] > 0 and step["steps"] >= 1, (name, what, step)
            # The proof's count: the rule set after the step, with or without the
            # service's 2 + 3 rules and chains' worth of entries.
            want = backend.expected_entries(rs if what == "remove" else
                                            kp.one_more(rs).ruleset)
            assert step["entries"] == want, (name, what, step)
    assert got["mechanisms"]["commands"]["add"]["steps"] > 1
    assert got["mechanisms"]["batch"]["add"]["steps"] == 1
    assert got["listing"]["s"] > 0 and got["listing"]["argv"][0] in (
        "iptables-legacy-save", "iptables-nft-save", "nft")
    mem = got["memory"]
    assert mem["meminfo"]["resolution_bytes"] == 1024 and got["sync_again_s"] > 0
    if "cgroup" in mem:
        # 200 services' rules are tens of kilobytes at the least.
        assert mem["cgroup"]["held_bytes"] > 20_000, mem
    # Back where the trial left it: the rule set as loaded, its probes as they were.
    v = backend.verify(kube, rs, 0)
    assert v.ok, v.reason


def test_the_added_service_is_forwarded_to_its_endpoints(kube, backend_named):
    b = backend_named("nftables")
    rs = kp.kube_proxy(services=50, endpoints=3, mode="nftables")
    b.apply(kube, rs)
    added = kp.one_more(rs)
    control.change(kube, b, rs, added.ruleset, "batch", frozenset(), "add")
    v = b.verify(kube, added.ruleset, 0)
    assert v.ok, v.reason
    probe = v.details["probes"]["added service"]
    assert probe["forwarded"] == probe["sent"] > 0


def test_a_step_the_kernel_refuses_is_one_line(kube, backend_named):
    b = backend_named("iptables-legacy")
    rs = kp.kube_proxy(services=20, endpoints=2, mode="iptables")
    b.apply(kube, rs)
    ran = control.run_steps(kube, [Step(("iptables-legacy", "-t", "nat", "-X",
                                         "KUBE-SERVICES"))])
    assert ran["problem"] and "\n" not in ran["problem"]
    assert ran["problem"].startswith("update command 1 of 1 (iptables-legacy) failed: ")
    with pytest.raises(FwbenchError) as e:
        control.measure(kube, b, rs, "nftables")
    assert str(e.value) == "kube-proxy control plane: the rule set is in iptables mode, " \
                           "not nftables"
