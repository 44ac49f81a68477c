"""fwbench writes its outputs (a run, a report, a comparison, the five studies'
page) only into a directory it makes, an empty one, or one of its own: a folder
of the user's that holds anything is refused in one line and left byte for byte,
however its files are named."""
import subprocess
import sys

import pytest
from test_report import make_run

from fwbench import owned, studies
from fwbench.errors import FwbenchError
from fwbench.results import RunDir


def tree(path) -> dict:
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None,
                                       p.stat().st_mode, p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*"))}


def users_folder(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    # Names fwbench writes, holding the user's own files.
    for name in ("report.html", "trials.jsonl", "index.html", "compare.csv"):
        (d / name).write_text(f"the user's {name}\n")
    return d


def fwbench(*args):
    return subprocess.run([sys.executable, "-m", "fwbench", *args], capture_output=True,
                          text=True, timeout=120)


def test_a_run_goes_into_a_new_or_empty_directory_only(tmp_path):
    d = users_folder(tmp_path)
    before = tree(d)
    with pytest.raises(FwbenchError) as e:
        RunDir.create(d, {})
    assert "is not empty (it holds compare.csv, index.html, report.html and 1 more)" in \
        str(e.value) and "\n" not in str(e.value)
    assert tree(d) == before
    (tmp_path / "empty").mkdir()
    RunDir.create(tmp_path / "empty", {})
    made = RunDir.create(tmp_path / "new" / "run", {})
    assert owned.marker(str(made.path))["what"] == "an fwbench run"
    assert owned.marker(str(tmp_path / "new"))["made_dir"]     # parents carry one too


def test_report_and_compare_refuse_a_user_s_folder(tmp_path):
    run = make_run(tmp_path / "run", repeat=2)
    d = users_folder(tmp_path)
    before = tree(d)
    for args, what in ((["report", str(run), "--out", str(d)], "report --out"),
                       (["compare", str(run), str(run), "--out", str(d)], "compare --out")):
        cp = fwbench(*args)
        assert cp.returncode == 2, cp.stderr
        assert cp.stderr.count("\n") == 1 and what in cp.stderr and "not empty" in cp.stderr
        assert tree(d) == before
    # Into a new directory, then again into the same one: fwbench's, so it may.
    for _ in range(2):
        cp = fwbench("report", str(run), "--out", str(tmp_path / "rep"))
        assert cp.returncode == 0, cp.stderr
    assert owned.marker(str(tmp_path / "rep" / "figures")) is not None


def test_study_all_refuses_a_folder_of_the_user_s(tmp_path):
    d = users_folder(tmp_path)
    before = tree(d)
    with pytest.raises(FwbenchError) as e:
        studies.validate_out("all", d)
    assert "holds what is not the studies' (compare.csv, report.html, trials.jsonl)" in \
        str(e.value)
    assert tree(d) == before
    studies.validate_out("all", tmp_path / "new")   # new: fine
