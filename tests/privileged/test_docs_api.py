"""docs/api.md's Python examples, run as written: its first ```python block is
executed verbatim (in a scratch directory holding the scenario it names, so its
results land there) and must leave `path`, the run directory, and `df`, its trials
as a DataFrame, one row per planned trial; the second block, every reading call on
that `path`, then runs in the same scope."""
import json
import re
import shutil
import time
from pathlib import Path

import pandas as pd

from fwbench.results import STATUSES

REPO = Path(__file__).resolve().parents[2]


PAGE = REPO / "docs" / "api.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


def test_the_python_api_examples_run(tmp_path, monkeypatch):
    code, *more = examples()
    for name in re.findall(r"scenarios/[\w.-]+\.toml", code):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    t0 = time.monotonic()
    exec(compile(code, "docs/api.md", "exec"), scope)
    elapsed = time.monotonic() - t0

    path, df = Path(scope["path"]), scope["df"]
    assert path.resolve().is_relative_to(tmp_path) and (path / "trials.jsonl").exists()
    assert isinstance(df, pd.DataFrame)
    meta = json.loads((path / "run.json").read_text())
    factors = meta["factors"]
    assert factors == ["backend", "rules", "frame_size"]
    assert set(factors) <= set(df.columns)
    planned = sorted((k["backend"], k["rules"], k["frame_size"], k["repetition"])
                     for k in meta["plan"])
    assert sorted(zip(df.backend, df.rules, df.frame_size, df.repetition)) == planned
    assert len(planned) == 2     # none and iptables-legacy at 20 rules, 64 B, once
    assert df["rules"].dtype == "int64" and set(df["status"]) <= set(STATUSES)
    ok = df[df.status == "ok"]
    assert len(ok) == len(df), df[["backend", "status", "reason"]].to_string()
    assert ok["verified"].all() and (ok["rx_pps"] > 0).all()
    assert elapsed < 60, f"docs/api.md's example took {elapsed:.0f} s"

    # The reading calls, on the run just made: each returns what the page says.
    assert len(more) == 1, "docs/api.md: one block of reading calls after the run"
    calls = [line.split("#", 1)[0].strip() for line in more[0].splitlines()]
    calls = [c for c in calls if c]
    assert [c.split("(", 1)[0] for c in calls] == [
        "fw.trials", "fw.cells", "fw.cost_model", "fw.findings", "fw.report", "fw.resume"]
    got = {c.split("(", 1)[0]: eval(compile(c, "docs/api.md", "eval"), scope)
           for c in calls}
    assert len(got["fw.trials"]) == len(df)
    cells = got["fw.cells"]
    assert sorted(cells.backend) == ["iptables-legacy", "none"] and (cells.n == 1).all()
    assert isinstance(got["fw.cost_model"], pd.DataFrame)
    assert isinstance(got["fw.findings"], pd.DataFrame) and got["fw.findings"].empty
    assert Path(got["fw.report"]) == path / "report.html" and (path / "report.html").exists()
    assert Path(got["fw.resume"]) == path     # a finished run: nothing left to run
    assert len((path / "trials.jsonl").read_text().splitlines()) == len(planned)
