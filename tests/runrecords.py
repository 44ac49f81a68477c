"""A run directory's records as a test reads them while the run may still be
writing: complete lines only. A reader polling trials.jsonl can catch the writer
between the start and the end of a line (seen beside a one-core load); fwbench's
own reader (results.RunDir.records) drops a torn last line the same way."""
import json
from pathlib import Path


def records(d: Path) -> list[dict]:
    text = (Path(d) / "trials.jsonl").read_text()
    return [json.loads(ln) for ln in text[:text.rfind("\n") + 1].splitlines() if ln.strip()]
