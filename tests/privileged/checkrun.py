"""`fwbench check FILE` in-process, for the privileged tests that check many files."""
import json
from dataclasses import dataclass


@dataclass
class CheckRun:
    """What `fwbench check FILE` would have said: its exit status and its verdict."""
    returncode: int
    stdout: str
    stderr: str = ""


def check_in(tb, path, *, iface: str | None = None, backends: str | None = None,
             corpus: int = 300, ipsets: str | None = None) -> tuple[CheckRun, dict]:
    """`fwbench check FILE` in-process, in the testbed `tb` (a module's, shared by
    its checks: a testbed and an interpreter per check cost seconds each), with the
    file itself as the original row; its report as `--json` gives it. The command
    line itself is tested in test_check.py."""
    from fwbench import check
    rs = check.ruleset_from(path=str(path), iface=iface, ipsets=ipsets)
    chosen, skipped = check.resolve(rs, backends.split(",") if backends else None,
                                    allow_none=True)
    rep = check.check(rs, chosen, corpus, 0, original=check.original_of(str(path), ipsets),
                      tb=tb)
    lines = [f"{r.backend}: {r.refused or ''}" + "; ".join(r.kernel + r.per_packet
                                                          + r.per_rule)[:3000]
             for r in rep.results if r.refused or r.disagreements]
    lines += [f"between backends: {b}" for b in rep.between[:20]]
    lines.append("the original and all backends agree with the reference" if rep.ok
                 else "disagreements found")
    # As --json writes it: lists, not tuples.
    doc = json.loads(json.dumps({**rep.as_dict(), "skipped": skipped}))
    return CheckRun(0 if rep.ok else 1, "\n".join(lines)), doc
