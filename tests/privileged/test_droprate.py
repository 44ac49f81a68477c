"""The drop-position experiment in a real testbed: every treatment loads, its listing
is verified and its probe proves it, accounts for a short flood and clears; the
listing or the proof fails when a treatment is not what it claims; `fwbench run` records, prints, survives Ctrl-C and
resumes."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from types import SimpleNamespace

import pytest

from fwbench.backends import kernel
from fwbench.experiments.droprate import measure
from fwbench.experiments.droprate import treatments as tr
from fwbench.testbed.netns import NetnsTestbed
from fwbench.testbed.topology import TestbedSettings, Topology

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from tests.runrecords import records  # noqa: E402

PROBE = 2000
ONE_CPU = TestbedSettings(sender_cpu=0, firewall_cpu=0, server_cpu=0)
ALL = tr.build(list(tr.NAMES), [1, 1000], 5)


@pytest.fixture(scope="module")
def bed(netns_of):
    with NetnsTestbed(Topology.new(ONE_CPU, firewall_rps=False, server_rps=False)) as tb:
        kernel.register_xt_tables(tb, kernel.xt("legacy", 4), ("raw", "filter"))
        t = tr.Target(tb.topo.fw_client_side.ifname, tb.topo.client.ip4,
                      tb.topo.fw_client_side.ip4)
        yield tb, t
        tr.clear(tb, t)
    assert netns_of(tb.topo.run_id) == [], "the testbed left its namespaces"


def checked(tb, treatment, t, files):
    """The listing and the probe's proof together, as a trial checks them before its
    flood (ok when both are; both reasons)."""
    v = measure.listing(tb, treatment, t, files)
    p = measure.prove(tb, treatment, t, 128, PROBE)
    return SimpleNamespace(ok=v.ok and p.ok, listing=v, proof=p,
                           reason="; ".join(filter(None, (v.reason, p.reason))))


def test_the_path_has_no_rps(bed):
    tb, t = bed
    assert tb.recorded["rps_cpus"] == {t.ifname: "0"}


@pytest.mark.parametrize("treatment", ALL, ids=lambda x: f"{x.id}-{x.size}")
def test_treatment_loads_verifies_accounts_and_clears(bed, treatment):
    tb, t = bed
    tr.clear(tb, t)
    assert tr.leftovers(tb, t) == []
    files = treatment.render(t)
    treatment.apply(tb, t)      # as a trial loads it (netfilter: by its backend)
    try:
        v = checked(tb, treatment, t, files)
        assert v.ok, v.reason
        assert v.listing.rules_loaded == treatment.size
        assert v.proof.details["probe"]["sent"] == PROBE
        m, problems = measure.flood(tb, treatment, t, 128, 0.2, 0, 0.95)
        # Another process may share the CPU in a test run; the counters must add up.
        assert [p for p in problems if p.startswith("counters")] == []
        assert m["disposed_pps"] > 10_000 and m["disposed"] == m["sent"] - m["refused"]
        assert m["cpu_ns_per_pkt"] > 0
        # Where the flood went, from the engine's count and the kernel's counters: the
        # accept group passes all of it to UDP (no socket: NoPorts), the drop group
        # none, hashlimit its token bucket's share; the treatment's own counter counts
        # every packet it handled (hashlimit's, every packet it dropped). Slack: a
        # packet or two still in flight when the counters are read.
        n, c = m["disposed"], m["counters"]
        passed = c["udp_no_ports"]
        if treatment.id == "hashlimit":
            # A token bucket (iptables-extensions(8)): hashlimit_pps tokens a second,
            # at most the burst kept; the probe emptied it, the pause since refilled
            # the burst. Slack: tokens come per jiffy (10 at HZ=100), and while
            # another process held the path CPU no packet came and the full bucket
            # wasted tokens, (1 - owned_share) of the window, a share read to
            # ksoftirqd's 10 ms tick (10 more).
            bucket = t.hashlimit_pps * m["active_s"]
            share = min(1.0, m["path_cpu"]["owned_share"])
            assert bucket * share - 20 <= passed <= bucket + tr.HASHLIMIT_BURST + 10, \
                (passed, m["active_s"], share)
            assert abs(c["hits"] - (n - passed)) <= 1e-3 * n + 2
        else:
            assert abs(passed - (n if treatment.group == "accept" else 0)) <= 1e-3 * n + 2
            assert abs(c["hits"] - n) <= 1e-3 * n + 2
    finally:
        tr.clear(tb, t)
    assert tr.leftovers(tb, t) == []
    assert measure.conntrack_entries(tb, t)["total"] == 0


def _verify_as(tb, t, loaded, claimed):
    tr.clear(tb, t)
    loaded.load(tb, loaded.render(t))
    try:
        return checked(tb, claimed, t, claimed.render(t))
    finally:
        tr.clear(tb, t)


def test_nothing_loaded_fails_verification(bed):
    tb, t = bed
    tr.clear(tb, t)
    v = checked(tb, tr.FilterInput(), t, {})
    assert not v.listing.ok and not v.proof.ok
    assert "no rule flood in the kernel (filter INPUT)" in v.proof.reason


def test_a_rule_that_drops_elsewhere_fails_verification(bed):
    tb, t = bed
    v = _verify_as(tb, t, tr.RawDrop(), tr.StringMatch("bm"))
    assert not v.ok and "the kernel's rule set differs from the rendered one" in v.reason
    assert "1 rendered line missing from the kernel, first '-A PREROUTING -p udp -m string" \
        in v.reason


def test_untracked_flood_is_not_conntrack(bed):
    tb, t = bed
    v = _verify_as(tb, t, tr.Notrack(), tr.Conntrack())
    assert not v.ok and "conntrack holds no entry for the flood" in v.reason
    v = _verify_as(tb, t, tr.Conntrack(), tr.Notrack())
    assert not v.ok and "conntrack tracks the flood" in v.reason


def test_a_set_of_another_size_fails_verification(bed):
    tb, t = bed
    for kind in (tr.Ipset, tr.NftSet):
        v = _verify_as(tb, t, kind(1000), kind(999))
        assert not v.ok and "1,000" in v.reason and "999 asked" in v.reason


def test_tc_is_not_xdp(bed):
    tb, t = bed
    v = _verify_as(tb, t, tr.TcDrop(), tr.XdpDrop())
    assert not v.ok and "no program attached" in v.reason


# --- the command --------------------------------------------------------------------

SMALL = """name = "drop-test"
method = "droprate"
duration_s = 0.2
repeat = 2
seed = 5
[droprate]
treatments = %s
probe_packets = 500
"""


def fwbench(*args):
    return subprocess.run([sys.executable, "-m", "fwbench", *args], capture_output=True,
                          text=True, timeout=300)


SHARED = "the path CPU was shared"


def check_flood_attempts(r, droprate):
    """A trial is `ok`, or `invalid` only because another process took the path CPU
    in every one of its `attempts` floods. Each flood attempt is in the record: an
    attempt is redone exactly when its CPU share was below `min_cpu_share`, and no
    attempt's counters may fail to add up."""
    floods = r["trials"]
    assert floods and len(floods) <= droprate["attempts"], r
    for a in floods:
        shared = a["path_cpu"]["owned_share"] < droprate["min_cpu_share"]
        assert len(a["problems"]) == shared, a["problems"]
        assert all(p.startswith(SHARED) for p in a["problems"]), a["problems"]
    assert all(a["problems"] for a in floods[:-1])  # redone only when shared
    if r["status"] == "ok":
        assert r["reason"] is None and floods[-1]["problems"] == []
        assert r["metrics"]["disposed"] == floods[-1]["disposed"] > 0  # the clean flood's
    else:
        assert r["status"] == "invalid" and len(floods) == droprate["attempts"], r
        assert r["reason"] == floods[-1]["problems"][0], r["reason"]


def test_run_records_prints_the_table_and_the_acceptance_and_adds_rounds(tmp_path,
                                                                        own_netns):
    """One run, as a user runs it, of the treatments the acceptance compares (NOTRACK
    and conntrack, raw PREROUTING and filter INPUT) and xdp, in adaptive rounds on
    droprate's headline (the disposal rate): with a width no cell can reach, every
    treatment is measured up to the cap, in rounds written to run.json before they
    run. (Two runs before: the acceptance's two repetitions, and the rounds of raw and
    xdp; each paid for a process, a testbed and a report.)"""
    treatments = ["notrack", "conntrack", "raw", "filter-input", "xdp"]
    sc = tmp_path / "s.toml"
    sc.write_text(SMALL % json.dumps(treatments) + "[adaptive]\nrel_width = 1e-9\n")
    d = tmp_path / "run"
    cp = fwbench("run", str(sc), "--max-repeat", "3", "--out", str(d))
    recs = records(d)
    droprate = json.loads((d / "run.json").read_text())["scenario"]["droprate"]
    assert sorted((r["factors"]["treatment"], r["repetition"]) for r in recs) == \
        sorted((t, rep) for t in treatments for rep in (0, 1, 2))
    for r in recs:
        assert r["verification"]["ok"], r["reason"]
        check_flood_attempts(r, droprate)
        assert r["method"] == "droprate" and r["factors"]["frame_size"] == 128
    ok = [r for r in recs if r["status"] == "ok"]
    # 1: a trial was not ok (only ever because the path CPU was shared, as above).
    assert cp.returncode == (0 if len(ok) == len(recs) else 1), cp.stderr
    assert ok and all(r["metrics"]["disposed_pps"] > 0 for r in ok)
    out = cp.stdout
    assert "Seed 002, where to drop" in out and "Acceptance" in out
    assert "NOTRACK >= conntrack" in out and "raw PREROUTING >= filter INPUT" in out
    assert "87k" in out and "280k" in out  # the seed's own figures beside ours
    run = json.loads((d / "run.json").read_text())
    assert run["sessions"][0]["testbed"]["firewall_rps"] is False
    assert run["factors"] == ["treatment", "set_size", "frame_size"]
    rnd, = run["adaptive"]["rounds"]
    cells = sorted({tuple(r["factors"][k] for k in run["factors"]) for r in recs})
    assert [c[0] for c in cells] == sorted(treatments)
    assert {("raw", 1, 128), ("xdp", 1, 128)} <= set(cells)
    assert sorted(map(tuple, rnd["cells"])) == cells
    assert f"adaptive round 1: {len(treatments)} cells" in cp.stderr
    assert own_netns(d) == []
    # The run ends with its report (seed 002's table, figures, p-values), and it
    # compares with another droprate run: the stored schema-2 one shares raw and xdp.
    md = (d / "report.md").read_text()
    assert "Where to drop (seed 002's table)" in md and "p Holm" in md
    assert (d / "figures" / "fig-disposed_pps-cells.svg").exists()
    stored = Path(__file__).parent.parent / "data" / "runs" / "schema2-droprate"
    cp = fwbench("compare", str(stored), str(d), "--out", str(tmp_path / "cmp"))
    assert cp.returncode == 0, cp.stderr
    cmp = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| raw | 1 | 128 |" in cmp and "| xdp | 1 | 128 |" in cmp


def test_sigkill_then_clean_then_resume_runs_each_planned_trial_once(tmp_path, own_netns):
    """SIGKILL mid-run: nothing cleans up, so `fwbench clean` removes the testbed and
    `--resume` runs exactly what the plan still lacks, on a new testbed."""
    sc = tmp_path / "s.toml"
    sc.write_text(SMALL % '["raw", "xdp", "tc"]')
    d = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "fwbench", "run", str(sc), "--out", str(d)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (d / "trials.jsonl").exists() and records(d):
            break
        assert p.poll() is None, p.communicate()
        time.sleep(0.02)
    # Held (SIGSTOP) before the kill, so the kill finds it with trials left, not
    # after it finished on a machine too busy to run this test meanwhile.
    p.send_signal(signal.SIGSTOP)
    assert p.poll() is None and len(records(d)) < 6, "the run finished before the kill"
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    done = records(d)
    assert 1 <= len(done) < 6
    assert own_netns(d), "a SIGKILLed run leaves its namespaces"
    cp = fwbench("clean")
    assert cp.returncode == 0 and own_netns(d) == [], cp.stdout + cp.stderr
    cp = fwbench("run", "--resume", str(d))
    recs = records(d)
    keys = [(r["factors"]["treatment"], r["repetition"]) for r in recs]
    assert sorted(keys) == sorted((b, r) for b in ("raw", "xdp", "tc") for r in (0, 1))
    assert recs[:len(done)] == done
    droprate = json.loads((d / "run.json").read_text())["scenario"]["droprate"]
    for r in recs:
        check_flood_attempts(r, droprate)
    assert cp.returncode == (0 if all(r["status"] == "ok" for r in recs) else 1), cp.stderr
    assert len(json.loads((d / "run.json").read_text())["sessions"]) == 2
    assert own_netns(d) == []
