"""fwbench.owned: every directory fwbench makes carries its marker, and removing
takes only what the marker names; a user's files and directories are left
byte for byte, wherever they are."""
import json
import os
import subprocess

import pytest

from fwbench import owned


def tree(path) -> dict:
    """Every path below `path` with its bytes (files) or None (directories)."""
    out = {}
    for d, dirs, files in os.walk(path):
        for n in dirs:
            out[os.path.relpath(os.path.join(d, n), path)] = None
        for n in files:
            p = os.path.join(d, n)
            out[os.path.relpath(p, path)] = open(p, "rb").read()
    return out


def test_a_made_directory_says_what_made_it_and_goes_whole(tmp_path):
    d = tmp_path / "work" / "run"
    made = owned.make(str(d), "a private directory", ["state.json", "watchdog-[0-9]*"],
                      {"role": "fw", "run": "r1"})
    assert made == [str(tmp_path / "work"), str(d)]
    m = owned.marker(str(d))
    assert m["made_by"] == "fwbench" and m["what"] == "a private directory"
    assert m["about"] == {"role": "fw", "run": "r1"} and m["created"].endswith("Z")
    assert owned.marker(str(tmp_path / "work"))["made_dir"] is True
    assert oct(d.stat().st_mode & 0o777) == "0o700"
    (d / "state.json").write_text("{}")
    (d / "watchdog-1").write_text("")
    assert owned.remove(str(d)) == []
    assert not d.exists()
    owned.prune(str(d))                       # the working directory went empty
    assert not (tmp_path / "work").exists() and tmp_path.exists()


def test_a_directory_that_exists_is_never_made_again(tmp_path):
    (tmp_path / "client").mkdir()
    with pytest.raises(FileExistsError):
        owned.make(str(tmp_path / "client"), "x")
    assert owned.marker(str(tmp_path / "client")) is None


def test_removing_leaves_what_fwbench_did_not_write(tmp_path):
    d = tmp_path / "run"
    owned.make(str(d), "a private directory", ["state.json"])
    owned.make(str(d / "bin"), "copies", ["engine"])
    (d / "state.json").write_text("{}")
    (d / "bin" / "engine").write_bytes(b"\x7fELF")
    (d / "notes.txt").write_text("the user's")             # not named by the marker
    (d / "bin" / "engine.bak").write_text("the user's")
    (d / "theirs").mkdir()                                 # a directory without a marker
    (d / "theirs" / "state.json").write_text("the user's")
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    (d / "link").symlink_to(outside)                       # never followed
    before = {k: v for k, v in tree(d).items() if "state.json" != k and "engine" != k}
    left = owned.remove(str(d))
    assert sorted(os.path.relpath(p, d) for p in left) == [
        "bin/engine.bak", "link", "notes.txt", "theirs"]
    assert not (d / "state.json").exists() and not (d / "bin" / "engine").exists()
    after = tree(d)
    assert {k: v for k, v in after.items() if not k.endswith(owned.MARKER)} == \
        {k: v for k, v in before.items() if not k.endswith(owned.MARKER) and
         k != "bin/engine"}
    assert owned.marker(str(d)) is not None       # still fwbench's, for a later clean
    assert outside.read_text() == "keep"


def test_a_directory_without_the_marker_is_not_removed(tmp_path):
    (tmp_path / "client").mkdir()
    (tmp_path / "client" / "state.json").write_text("the user's")
    before = tree(tmp_path)
    assert owned.remove(str(tmp_path / "client")) == [str(tmp_path / "client")]
    owned.prune(str(tmp_path / "client" / "x"))
    assert tree(tmp_path) == before
    # A marker of another program's is not fwbench's.
    (tmp_path / "client" / owned.MARKER).write_text(json.dumps({"made_by": "other"}))
    assert owned.remove(str(tmp_path / "client")) == [str(tmp_path / "client")]


def test_a_taken_directory_is_emptied_of_fwbench_s_files_and_stays(tmp_path):
    d = tmp_path / "lab"
    d.mkdir(mode=0o755)
    assert owned.take(str(d), "a lab", ["key"]) is False
    (d / "key").write_text("secret")
    assert owned.remove(str(d)) == []
    assert d.is_dir() and os.listdir(d) == []
    assert oct(d.stat().st_mode & 0o777) == "0o755"


@pytest.mark.parametrize("make", [
    lambda p: p.write_text("a file"),
    lambda p: (p.mkdir(), (p / "id_ed25519").write_text("the user's key")),
])
def test_taking_refuses_anything_but_a_new_or_empty_directory(tmp_path, make):
    p = tmp_path / "dir"
    make(p)
    before = tree(tmp_path)
    with pytest.raises(owned.NotOurs) as e:
        owned.take(str(p), "a lab")
    assert "\n" not in str(e.value)
    assert tree(tmp_path) == before


def test_prune_stops_at_the_first_directory_fwbench_did_not_make_or_that_holds_more(tmp_path):
    owned.make(str(tmp_path / "a" / "b" / "run"), "run")
    (tmp_path / "a" / "note").write_text("the user's")
    assert owned.remove(str(tmp_path / "a" / "b" / "run")) == []
    owned.prune(str(tmp_path / "a" / "b" / "run"))
    assert not (tmp_path / "a" / "b").exists()
    assert (tmp_path / "a" / "note").read_text() == "the user's"
    assert owned.marker(str(tmp_path / "a")) is not None


def test_listing_finds_the_marked_directories_of_one_role(tmp_path):
    owned.make(str(tmp_path / "fw-r1-aa"), "run", ["state.json"], {"role": "fw"})
    owned.make(str(tmp_path / "client-r1-bb"), "run", [], {"role": "client"})
    (tmp_path / "fw-r1-aa" / "state.json").write_text("{}")
    (tmp_path / "fw").mkdir()                                 # the user's
    got = owned.listing(str(tmp_path), role="fw")
    assert [d["path"] for d in got] == [str(tmp_path / "fw-r1-aa")]
    assert got[0]["holds"] == [owned.MARKER, "state.json"]
    assert owned.listing(str(tmp_path / "nowhere"), role="fw") == []


def run_on_a_host(cmd: str, args: dict) -> subprocess.CompletedProcess:
    """The module as a host's python3 runs it: its source on stdin, nothing of
    fwbench importable (plain python3, no PYTHONPATH)."""
    return subprocess.run(["/usr/bin/python3", "-", cmd, json.dumps(args)],
                          input=owned.source(), capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}, cwd="/")


def test_the_module_runs_on_a_host_as_a_program(tmp_path):
    d = str(tmp_path / "w" / "fw-r1-aa")
    cp = run_on_a_host("make", {"dirs": [{"path": d, "what": "run", "files": ["state.json"]},
                                         {"path": d + "/pids", "what": "pids",
                                          "files": ["[0-9]*"]}],
                                "about": {"role": "fw"}})
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout) == [str(tmp_path / "w"), d, d + "/pids"]
    open(d + "/pids/12", "w").close()
    cp = run_on_a_host("list", {"top": str(tmp_path / "w"), "match": {"role": "fw"}})
    assert [x["path"] for x in json.loads(cp.stdout)] == [d]
    cp = run_on_a_host("remove", {"path": d, "prune": True})
    assert (cp.returncode, json.loads(cp.stdout)) == (0, [])
    assert not (tmp_path / "w").exists()
    # Making over what exists is refused in one line, exit 3.
    (tmp_path / "client").mkdir()
    cp = run_on_a_host("make", {"dirs": [{"path": str(tmp_path / "client"), "what": "x"}]})
    assert cp.returncode == 3 and cp.stderr.count("\n") == 1 and "exists" in cp.stderr


def test_a_lease_says_a_directory_is_a_live_run_s_until_its_session_ends(tmp_path):
    """The lease process lives as long as its standard input (a run's SSH session):
    while it does, the directory is live; after, it is a killed run's."""
    import time
    d = tmp_path / "fw-r1-aa"
    owned.make(str(d), "run", [owned.LEASE], {"role": "fw"})
    p = subprocess.Popen(["/usr/bin/python3", "-c", owned.source(), "hold",
                          json.dumps({"path": str(d)})], stdin=subprocess.PIPE,
                         env={"PATH": "/usr/bin:/bin"})
    try:
        for _ in range(200):
            if (d / owned.LEASE).exists():
                break
            time.sleep(0.02)
        assert owned.listing(str(tmp_path), role="fw")[0]["live"] == p.pid
    finally:
        p.stdin.close()              # the session ends
        assert p.wait(10) == 0
    assert owned.listing(str(tmp_path), role="fw")[0]["live"] is None
    # A lease whose PID now belongs to another process (its start time differs).
    (d / owned.LEASE).write_text(f"{os.getpid()} 1\n")
    assert owned.held(str(d)) is None
    assert owned.remove(str(d)) == []
