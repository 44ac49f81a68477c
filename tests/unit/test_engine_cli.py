"""The engine binary's input checks and its histogram, without root or traffic.

Every bad input is one line on stderr starting `fwbench-engine:` and exit 2; these
checks run before the engine touches an interface, so no namespace is needed."""
import json
import subprocess

import pytest

from fwbench import engine

BASE = ["send", "--ifname", "nonexistent0", "--src-mac", "02:00:00:00:00:01",
        "--dst-mac", "02:00:00:00:00:02", "--src", "198.18.0.2", "--dst", "198.19.0.2",
        "--duration", "0.1"]


def run(*args):
    return subprocess.run([str(engine.binary()), *args], capture_output=True, text=True,
                          timeout=10)


@pytest.mark.parametrize("args, says", [
    (["--frame-size", "63"], "--frame-size: 63 is outside 64..1518"),
    (["--frame-size", "1519"], "--frame-size: 1519 is outside 64..1518"),
    (["--frame-size", "9018", "--mtu", "9000"], "no interface"),  # jumbo frames pass
    (["--rate", "-5"], "--rate: -5 is outside 0..1e+09"),
    (["--rate", "fast"], "--rate: fast is not a number"),
    (["--dst", "10.0.0.1"], "--dst: 10.0.0.1 is outside the benchmarking ranges"),
    (["--src", "2001:db8::1"], "--src: 2001:db8::1 is outside the benchmarking ranges"),
    (["--src", "2001:2::1"], "--src and --dst must both be IPv4 or both IPv6"),
    (["--dst-count", "200000"], "--dst-count: 200000 addresses leave the benchmarking range"),
    (["--src-mac", "zz"], "--src-mac: zz is not a MAC address"),
    (["--threads", "0"], "--threads: 0 is outside 1..64"),
    (["--bogus"], "unknown option or missing value: --bogus"),
    (["--payload-text", "x"], "--payload-text: 1 bytes do not fit after the 18-byte stamp "
                              "of a 64-byte frame (room for 0)"),
    (["--frame-size", "128", "--payload-text", "y" * 65],
     "--payload-text: 65 bytes do not fit after the 18-byte stamp of a 128-byte frame "
     "(room for 64)"),
    (["--payload-text", ""], "--payload-text: empty"),
    (["--seq-start", "4294967296"], "--seq-start: 4294967296 is outside 0..4294967295"),
    (["--count", "1000000000000001"], "--count: 1000000000000001 is outside 1..1000000000000000"),
])
def test_bad_sender_input_is_one_line(args, says):
    cp = run(*BASE, *args)
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1, cp.stderr
    assert lines[0].startswith("fwbench-engine: ") and says in lines[0]


def test_ipv6_needs_room_for_the_stamp():
    cp = run(*BASE[:7], "--src", "2001:2:0:1::2", "--dst", "2001:2:0:2::2",
             "--duration", "0.1", "--frame-size", "64")
    assert cp.returncode == 2 and "outside 84..1518" in cp.stderr


@pytest.mark.parametrize("args", [["warp"], [], ["sink", "--xdp-mode", "turbo"],
                                  ["sink", "--ifname", "lo", "--reflect-via", "bounce"],
                                  ["recv", "--bind", "192.0.2.1"], ["send"]])
def test_bad_mode_or_receiver_input_is_one_line(args):
    cp = run(*args)
    assert cp.returncode == 2 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_histogram_error_within_one_percent():
    """hist-test walks 1 ns .. 2^42 ns and checks every value's bucket, then the
    percentiles of 1..100,000 ns."""
    exe = engine.binary().parent / "hist-test"
    cp = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout
    got = json.loads(cp.stdout)
    lat = got["latency_ns"]
    assert got["worst_relative_error"] <= 0.01
    for q, want in (("p50", 50_000), ("p90", 90_000), ("p99", 99_000), ("p99_9", 99_900)):
        assert abs(lat[q] - want) / want <= 0.01, (q, lat[q])


def test_duplicate_and_reorder_window_against_an_exact_reference():
    """seq-test drives common.h's window (the code the XDP sink and the socket
    receiver run) with 10 M packets on two streams, past 2^21 (where the old fixed
    bitmap wrapped) and past 2^32 (where the wire's sequence number does), with
    losses, reorders, copies and packets from behind the window injected after both
    points, and compares every verdict with an exact reference; then hand-made cases
    at the window's edge, after a long loss, before number 0 and across the wrap."""
    exe = engine.binary().parent / "seq-test"
    cp = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and cp.stdout.strip().endswith("ok"), cp.stdout
    counts = [int(w) for w in cp.stdout.split(":")[1].replace(",", "").split()
              if w.isdigit()]
    assert len(counts) == 4 and all(c > 0 for c in counts), cp.stdout


def test_packet_builder_frames_and_checksums():
    """packet-test builds an IPv4 and an IPv6 frame (odd-length payload text, several
    flows) with the sender's code and compares them byte for byte with frames built
    independently; checks both checksums verify, that an IPv6 UDP checksum of zero
    goes out as 0xffff, and that the flows take turns evenly."""
    exe = engine.binary().parent / "packet-test"
    cp = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and cp.stdout.strip() == "ok", cp.stdout


def test_spin_never_replaces_a_file_that_exists(tmp_path):
    """`spin --file PATH` makes its counter file; a path that exists is someone's."""
    f = tmp_path / "theirs"
    f.write_text("the user's\n")
    cp = run("spin", "--cpu", "0", "--file", str(f))
    assert cp.returncode != 0 and cp.stderr.count("\n") == 1 and "File exists" in cp.stderr
    assert f.read_text() == "the user's\n"


def test_connection_modes_pure_parts():
    """conn-test: port lists, the target file, the seeded target choice (a pure
    function of seed and connection number, uniform by chi-square), the schedule,
    the error classes and the accept server's endpoint table, 65,536 endpoints."""
    exe = engine.binary().parent / "conn-test"
    cp = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and cp.stdout.strip() == "ok", cp.stdout
