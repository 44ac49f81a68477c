"""Scenario validation: every bad input is one clear FwbenchError naming the key."""
import random

import pytest

from fwbench import scenario
from fwbench.errors import FwbenchError
from fwbench.plan import interleave, sweep_cells

ROOT = __import__("pathlib").Path(__file__).parent.parent.parent


def load_text(tmp_path, text, **overrides):
    f = tmp_path / "s.toml"
    f.write_text(text)
    return scenario.load(f, overrides)


def test_defaults_are_valid():
    sc = scenario.load(None)
    assert sc.backends == ["all"] and sc.method == "maxrate"


def test_quick_scenario_is_valid():
    sc = scenario.load(ROOT / "scenarios" / "quick.toml")
    assert sc.rules == [20, 1000, 10000] and sc.frame_sizes == [64, 1518]


def test_flags_override_the_file(tmp_path):
    sc = load_text(tmp_path, "rules = [5]\nrepeat = 2\n", rules=[7], repeat=None)
    assert sc.rules == [7] and sc.repeat == 2


@pytest.mark.parametrize("text, where", [
    ("rules = [0]", "rules.0"),
    ("rules = [-5]", "rules.0"),
    ("rules = []", "rules"),
    ("frame_sizes = [63]", "frame size 63"),
    ("frame_sizes = [1519]", "frame size 1519"),
    ("frame_sizes = [9018]\n[testbed]\nmtu = 1500", "frame size 9018"),
    ("backends = ['pf']", "unknown backend 'pf'"),
    ("backends = ['nftables', 'nftables']", "listed twice"),
    ("repeat = 0", "repeat"),
    ("repeat = '3'", "repeat"),
    ("duration_s = -1", "duration_s"),
    ("bogus = 1", "bogus: unknown key"),
    ("[testbed]\nmtux = 1500", "testbed.mtux: unknown key"),
    ("[testbed]\nmtu = 'big'", "testbed.mtu"),
    ("method = 'sorcery'", "method"),
    ("method = 'throughput'\n[throughput]\nloss_ratios = [1.5]\n",
     "throughput.loss_ratios.0: Input should be less than 1"),
    ("method = 'throughput'\n[throughput]\nexceed_ratio = -0.1\n", "throughput.exceed_ratio"),
    ("method = 'throughput'\ntraffic = 'iperf3'\n", "needs traffic = engine"),
    ("method = 'fixedrate'\nframe_sizes = [64]\n", "not 64"),
    ("method = 'warp'\n", "method: unknown method 'warp'"),
    ("method = 'cpucost'\n[cpucost]\nrate_pps = 0\n", "cpucost.rate_pps"),
    ("method = 'cpucost'\n[cpucost]\nmax_drift = 1.5\n", "cpucost.max_drift"),
    ("[engine]\nreceiver = 'magic'\n", "engine.receiver"),
    ("[throughput]\nloss_ratios = [0.0, 0.0]\n", "duplicates"),
    ("[throughput]\nmin_load_pps = 5000.0\nmax_load_pps = 100.0\n", "below max_load_pps"),
])
def test_bad_scenarios_name_the_problem(tmp_path, text, where):
    with pytest.raises(FwbenchError) as e:
        load_text(tmp_path, text)
    msg = str(e.value)
    assert where in msg and "\n" not in msg


def test_cpucost_takes_its_load_and_drift_bounds(tmp_path):
    sc = load_text(tmp_path, "method = 'cpucost'\nfamily = 'ipv6'\nframe_sizes = [84]\n"
                             "[cpucost]\n"
                             "rate_pps = 20000.0\nredo = 0\n")
    assert (sc.cpucost.rate_pps, sc.cpucost.redo, sc.cpucost.max_drift) == (20000.0, 0, 0.05)


def test_jumbo_frames_fit_a_jumbo_mtu(tmp_path):
    sc = load_text(tmp_path, "frame_sizes = [9018]\n[testbed]\nmtu = 9000")
    assert sc.frame_sizes == [9018]


def test_malformed_toml(tmp_path):
    with pytest.raises(FwbenchError, match="malformed TOML"):
        load_text(tmp_path, "rules = [1, 2")


def test_missing_file(tmp_path):
    with pytest.raises(FwbenchError, match="no such scenario file"):
        scenario.load(tmp_path / "nope.toml")


def test_integers_are_accepted_for_seconds(tmp_path):
    assert load_text(tmp_path, "duration_s = 2").duration_s == 2.0


def seeded_rounds(cells, repeat, seed):
    """plan.py's documented order, rebuilt: one random.Random(seed) shuffles a fresh
    copy of the cells for each round in turn."""
    rng, out = random.Random(seed), []
    for _ in range(repeat):
        order = list(cells)
        rng.shuffle(order)
        out.append(order)
    return out


def test_plan_is_interleaved_complete_and_seeded():
    backends, rules, frames = ["none", "iptables-legacy", "nftables"], [20, 1000], [64, 1518]
    # Every cell, backend by backend, `none` once per frame size with 0 rules.
    cells = [("none", 0, 64), ("none", 0, 1518)] + [
        (b, n, f) for b in ("iptables-legacy", "nftables") for n in rules for f in frames]
    plan = interleave(sweep_cells(backends, rules, frames), 3, seed=7)
    want = seeded_rounds(cells, 3, 7)
    assert [k.cell for k in plan] == sum(want, [])
    assert [k.repetition for k in plan] == [rep for rep in range(3) for _ in cells]
    # The reference orders differ from round to round and from another seed's, so the
    # comparison above would catch a plan that ignored the round or the seed.
    assert want[0] != want[1] != want[2] != want[0]
    other = seeded_rounds(cells, 3, 8)
    assert all(a != b for a, b in zip(want, other))
    plan = interleave(sweep_cells(backends, rules, frames), 3, seed=8)
    assert [k.cell for k in plan] == sum(other, [])


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.toml")),
                         ids=lambda p: p.name)
def test_every_shipped_scenario_is_valid(path):
    scenario.load(path)


# --- method droprate (seed 002's drop-position experiment) -------------------------

DROP = "method = 'droprate'\n"


def test_droprate_defaults_to_seed_002s_frames_and_every_treatment():
    sc = scenario.load(None, {"method": "droprate"})
    assert sc.frame_sizes == [128] and sc.droprate.set_sizes == [1, 65_536, 130_561]
    assert "xdp" in sc.droprate.treatments and sc.droprate.payload_text == "foo.com"


def test_seed002_scenario_is_a_droprate_run():
    sc = scenario.load(ROOT / "scenarios" / "seed002-drop.toml")
    assert sc.method == "droprate" and sc.repeat == 5 and sc.frame_sizes == [128]


def test_droprate_frame_sizes_can_be_given(tmp_path):
    sc = load_text(tmp_path, DROP + "frame_sizes = [256]\n")
    assert sc.frame_sizes == [256]


@pytest.mark.parametrize("text, where", [
    (DROP + "[droprate]\ntreatments = ['warp']\n", "unknown treatment 'warp'"),
    (DROP + "[droprate]\ntreatments = ['raw', 'raw']\n", "listed twice"),
    (DROP + "[droprate]\ntreatments = []\n", "droprate.treatments"),
    (DROP + "[droprate]\nset_sizes = [265000]\n",
     "droprate.set_sizes.0: Input should be less than or equal to 130561"),
    (DROP + "[droprate]\nset_sizes = [0]\n", "droprate.set_sizes.0"),
    (DROP + "[droprate]\nset_sizes = [5, 5]\n", "a set size is listed twice"),
    (DROP + "[droprate]\npayload_text = 'foo bar'\n", "droprate.payload_text: letters"),
    (DROP + "[droprate]\npayload_text = 'a\\\"b'\n", "droprate.payload_text"),
    (DROP + "[droprate]\npayload_text = ''\n", "droprate.payload_text"),
    (DROP + "frame_sizes = [64]\n", "do not fit a 64-byte frame after the stamp (room for 0)"),
    (DROP + "frame_sizes = [128, 256]\n", "one frame size per run"),
    (DROP + "[droprate]\nhashlimit_above_pps = 3000\n", "hashlimit would hold 3,003/sec"),
    (DROP + "[droprate]\nmin_cpu_share = 0\n", "droprate.min_cpu_share"),
    (DROP + "[droprate]\nbogus = 1\n", "droprate.bogus: unknown key"),
    (DROP + "backends = ['nftables']\n", "backends: does not apply to method droprate"),
    (DROP + "rules = [10]\n", "rules: does not apply to method droprate"),
    (DROP + "[engine]\nthreads = 2\n", "engine: does not apply to method droprate"),
    (DROP + "[testbed]\nfirewall_cpu = 1\n", "testbed.firewall_cpu: does not apply"),
    ("[droprate]\ncpu = 1\n", "droprate: applies to method droprate only"),
])
def test_bad_droprate_scenarios_name_the_problem(tmp_path, text, where):
    test_bad_scenarios_name_the_problem(tmp_path, text, where)


def test_a_long_text_fits_a_longer_frame(tmp_path):
    sc = load_text(tmp_path, DROP + "frame_sizes = [200]\n[droprate]\npayload_text = '" +
                   "x" * 64 + "'\n")
    assert len(sc.droprate.payload_text) == 64


def test_without_string_treatments_the_text_need_not_fit(tmp_path):
    sc = load_text(tmp_path, DROP + "frame_sizes = [64]\n[droprate]\ntreatments = ['raw']\n")
    assert sc.frame_sizes == [64]


def test_droprate_run_json_round_trips():
    sc = scenario.load(ROOT / "scenarios" / "seed002-drop.toml")
    assert scenario.from_dict(sc.dump()) == sc


# --- [adaptive]: repeat the noisy cells up to a cap ----------------------------------

def test_adaptive_is_off_by_default():
    a = scenario.load(None).adaptive
    assert (a.max_repeat, a.rel_width, a.level) == (0, 0.05, 0.95)


@pytest.mark.parametrize("text, where", [
    ("[adaptive]\nmax_repeat = -1\n", "adaptive.max_repeat: Input should be greater"),
    ("[adaptive]\nmax_repeat = '8'\n", "adaptive.max_repeat"),
    ("[adaptive]\nmax_repeat = 3\n", "adaptive.max_repeat (3) must be above repeat (3)"),
    ("repeat = 5\n[adaptive]\nmax_repeat = 4\n", "adaptive.max_repeat (4) must be above"),
    ("[adaptive]\nrel_width = 0\n", "adaptive.rel_width: Input should be greater than 0"),
    ("[adaptive]\nrel_width = 1.5\n", "adaptive.rel_width: Input should be less than or"),
    ("[adaptive]\nlevel = 0.5\n", "adaptive.level: Input should be greater than 0.5"),
    ("[adaptive]\nlevel = 1.0\n", "adaptive.level: Input should be less than 1"),
    ("[adaptive]\nwidth = 0.1\n", "adaptive.width: unknown key"),
    ("adaptive = 8\n", "adaptive"),
    (DROP + "repeat = 5\n[adaptive]\nmax_repeat = 5\n", "adaptive.max_repeat (5) must be above"),
])
def test_bad_adaptive_settings_name_the_key(tmp_path, text, where):
    test_bad_scenarios_name_the_problem(tmp_path, text, where)


def test_adaptive_applies_to_droprate_too(tmp_path):
    assert load_text(tmp_path, DROP + "[adaptive]\nmax_repeat = 0\n").adaptive.max_repeat == 0
    assert load_text(tmp_path, DROP + "[adaptive]\nmax_repeat = 6\n").adaptive.max_repeat == 6


def test_max_repeat_flag_keeps_the_files_other_adaptive_keys(tmp_path):
    text = "repeat = 2\n[adaptive]\nmax_repeat = 5\nrel_width = 0.1\n"
    sc = load_text(tmp_path, text, **{"adaptive.max_repeat": 8})
    assert (sc.adaptive.max_repeat, sc.adaptive.rel_width) == (8, 0.1)
    assert load_text(tmp_path, text, **{"adaptive.max_repeat": None}).adaptive.max_repeat == 5
    assert load_text(tmp_path, text, **{"adaptive.max_repeat": 0}).adaptive.max_repeat == 0
    assert scenario.load(None, {"adaptive.max_repeat": 4}).adaptive.rel_width == 0.05


def test_max_repeat_flag_errors_are_one_line_and_name_the_key():
    import subprocess
    import sys
    cp = subprocess.run([sys.executable, "-m", "fwbench", "run", "--repeat", "3",
                         "--max-repeat", "2"], capture_output=True, text=True)
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1, cp.stderr
    assert "adaptive.max_repeat (2) must be above repeat (3)" in lines[0]
    cp = subprocess.run([sys.executable, "-m", "fwbench", "run", "--max-repeat", "x"],
                        capture_output=True, text=True)
    assert cp.returncode == 2 and "--max-repeat" in cp.stderr


def test_adaptive_round_trips_through_run_json():
    sc = scenario.load(None, {"repeat": 2, "adaptive.max_repeat": 6})
    assert scenario.from_dict(sc.dump()) == sc and sc.dump()["adaptive"]["max_repeat"] == 6


# --- `study`: a study's findings are decided on its own method's trials --------------

@pytest.mark.parametrize("text, where", [
    ("study = '7'\n", "study: unknown study '7'"),
    ("method = 'update'\nstudy = '000'\n", "study: study '000' runs method 'maxrate', "
                                           "not 'update'"),
    ("method = 'throughput'\nstudy = '000'\n", "study: study '000' runs method 'maxrate'"),
    ("study = '002'\n", "study: study '002' runs method 'droprate', not 'maxrate'"),
    ("method = 'echo'\nstudy = '003'\n", "study: study '003' runs method 'fixedrate'"),
])
def test_a_study_of_another_method_is_one_line_naming_the_key(tmp_path, text, where):
    test_bad_scenarios_name_the_problem(tmp_path, text, where)


def test_a_study_with_its_own_method_is_taken(tmp_path):
    assert load_text(tmp_path, "study = '000'\n").study == "000"
    assert load_text(tmp_path, "method = 'echo'\nstudy = '001'\n").study == "001"
    assert load_text(tmp_path, "method = 'loadlatency'\n", study="004").study == "004"
    with pytest.raises(FwbenchError, match="^command line: study: study '001' runs"):
        scenario.load(None, {"study": "001"})
