"""README's Python API example, run as written: the first ```python block of its
"Python API" section is executed verbatim (in a scratch directory holding the
scenario it names, so its results land there), and must leave `path`, the run
directory, and `df`, its trials as a DataFrame, one row per planned trial."""
import json
import re
import shutil
import time
from pathlib import Path

import pandas as pd

from fwbench.results import STATUSES

REPO = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_python_api_example_runs(tmp_path, monkeypatch):
    code = readme_example()
    for name in re.findall(r"scenarios/[\w.-]+\.toml", code):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    t0 = time.monotonic()
    exec(compile(code, "README.md: Python API", "exec"), scope)
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
    assert elapsed < 60, f"the README's example took {elapsed:.0f} s"
