"""The echo modes' input checks, in the engine and in Python, and the size function,
without root or traffic.

Every bad input is one line on stderr and exit 2, found before the engine opens a
socket (but for the SCTP probe), so no namespace is needed. EchoSpec.validate() makes
the same checks in the same words: each case runs the engine with the spec's own
command line and compares the two messages."""
import subprocess

import pytest

from fwbench import engine
from fwbench.errors import FwbenchError
from fwbench.traffic import echo
from fwbench.traffic.echo import EchoSpec, client_argv, frame_size, server_argv

SERVER = {4: "198.19.0.2", 6: "2001:2:0:2::2"}
CLIENT = {4: "198.18.0.2", 6: "2001:2:0:1::2"}
PREFIX = "fwbench-engine: "


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=10,
                          stdin=subprocess.DEVNULL)


def one_line(cp) -> str:
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1, (cp.returncode, cp.stderr)
    assert lines[0].startswith(PREFIX), lines[0]
    return lines[0][len(PREFIX):]


def spec_argv(spec: EchoSpec, side: str) -> list[str]:
    if side == "server":
        return server_argv(spec, SERVER[spec.version])
    return client_argv(spec, SERVER[spec.version], [CLIENT[spec.version]], count=1)


# (spec, which engine side checks it, what it says)
BAD_SPECS = [
    (EchoSpec("udp", 4, 0, (64, 64)), ("server", "client"),
     "--clients: 0 is outside 1..4096"),
    (EchoSpec("tcp", 4, 5000, (64, 64)), ("server", "client"),
     "--clients: 5000 is outside 1..4096"),
    (EchoSpec("tcp", 4, 5, (31, 64)), ("server", "client"),
     "--frame-size: 31 is below the minimum 32 for tcp/ipv4 (the message header)"),
    (EchoSpec("udp", 6, 5, (16, 16)), ("server", "client"),
     "--frame-size: 16 is below the minimum 32 for udp/ipv6 (the message header)"),
    (EchoSpec("udp", 4, 5, (64, 1473)), ("server", "client"),
     "--frame-size: 1473 is above the maximum 1472 for udp/ipv4"),
    (EchoSpec("udp", 6, 5, (1453, 1453)), ("server", "client"),
     "--frame-size: 1453 is above the maximum 1452 for udp/ipv6"),
    (EchoSpec("tcp", 6, 5, (64, 65537)), ("server", "client"),
     "--frame-size: 65537 is above the maximum 65536 for tcp/ipv6"),
    (EchoSpec("tcp", 4, 5, (1024, 64)), ("server", "client"),
     "--frame-size: 1024-64 runs backwards"),
    (EchoSpec("quic", 4, 5, (64, 64)), ("server", "client"),
     "--proto: unknown protocol quic (tcp, udp or sctp)"),
    (EchoSpec("tcp", 4, 5, (64, 64), server_model="fork"), ("server",),
     "--server: unknown model fork (threads or epoll)"),
    (EchoSpec("udp", 4, 5, (64, 64), server_model="threads"), ("server",),
     "--server threads: udp has no connection per client to give a thread"),
    (EchoSpec("udp", 4, 5, (64, 64), crr=True), ("client",),
     "--crr: a connection per message needs tcp, not udp"),
]


@pytest.mark.parametrize("spec, sides, says", BAD_SPECS,
                         ids=[c[2].split(":")[0] + f"-{i}" for i, c in enumerate(BAD_SPECS)])
def test_bad_spec_is_one_line_in_engine_and_python(spec, sides, says):
    with pytest.raises(FwbenchError) as e:
        spec.validate()
    py = str(e.value)
    assert "\n" not in py and py.startswith("echo ") and says in py, py
    for side in sides:
        got = one_line(run(spec_argv(spec, side)))
        assert says in got and py == "echo " + got, (side, got, py)


def test_sctp_on_a_kernel_without_it_is_one_line():
    why = echo.sctp_missing()
    if why is None:
        pytest.skip("this kernel has SCTP: nothing to refuse")
    spec = EchoSpec("sctp", 4, 5, (64, 64))
    with pytest.raises(FwbenchError, match="this kernel has no SCTP"):
        spec.validate()
    for side in ("server", "client"):
        got = one_line(run(spec_argv(spec, side)))
        assert got == f"--proto sctp: {why}", got


GOOD = EchoSpec("udp", 4, 3, (64, 64))
BASE = client_argv(GOOD, SERVER[4], [CLIENT[4]], count=1)


def _with(argv, opt, value):
    out = list(argv)
    out[out.index(opt) + 1] = value
    return out


@pytest.mark.parametrize("argv, says", [
    (_with(BASE, "--sources", "198.18.0.2,198.18.0.3"),
     "--sources: 2 addresses for 3 clients (give one per client or one for all)"),
    (_with(BASE, "--sources", "10.0.0.1"),
     "--sources: 10.0.0.1 is outside the benchmarking ranges"),
    (_with(BASE, "--server", "192.0.2.1"),
     "--server: 192.0.2.1 is outside the benchmarking ranges"),
    (_with(BASE, "--sources", "2001:2:0:1::2"),
     "--sources: 2001:2:0:1::2 is ipv6 but the server is ipv4"),
    (_with(BASE, "--sources", "198.18.0.2,2001:2:0:1::2,198.18.0.4"),
     "--sources: 2001:2:0:1::2 is ipv6 but the server is ipv4"),
    (BASE + ["--duration", "1"], "echo: give --duration or --count"),
    (BASE[:BASE.index("--count")], "echo: give --duration or --count"),
    (BASE + ["--warmup", "1"], "--warmup: only with --duration"),
    (BASE + ["--threads", "0"], "--threads: 0 is outside 1..64"),
    (BASE + ["--bogus"], "echo: unknown option or missing value: --bogus"),
    (_with(BASE, "--frame-size", "64-"), "--frame-size: 64- is not a size or a range"),
])
def test_bad_client_input_is_one_line(argv, says):
    assert says in one_line(run(argv))


SBASE = server_argv(GOOD, SERVER[4])


@pytest.mark.parametrize("argv, says", [
    (SBASE + ["--fault", "drop:10:4"], "--fault: client 4 is outside 1..3"),
    (SBASE + ["--fault", "burn:10:1"], "--fault: unknown kind burn"),
    (SBASE + ["--fault", "drop:0:1"], "--fault: 0 is outside"),
    (SBASE + ["--fault", "drop-10-1"], "--fault: drop-10-1 is not KIND:EVERY:CLIENT"),
    (_with(server_argv(EchoSpec("udp", 4, 1, (64, 64)), SERVER[4]), "--clients", "1")
     + ["--fault", "foreign:10:1"], "--fault foreign: needs a second client's id"),
    (_with(SBASE, "--bind", "127.0.0.1"), "--bind: 127.0.0.1 is outside the benchmarking"),
    (SBASE[:SBASE.index("--seed")], "--seed are required"),
])
def test_bad_server_input_is_one_line(argv, says):
    assert says in one_line(run(argv))


def test_usage_names_the_echo_modes():
    cp = run([str(engine.binary()), "--help"])
    assert cp.returncode == 0 and "echo-server" in cp.stdout
    for mode in ("echo", "echo-server"):
        cp = run([str(engine.binary()), mode, "--help"])
        assert cp.returncode == 0 and cp.stdout.startswith(f"usage: fwbench-engine {mode} ")


def test_splitmix64_is_the_reference_generator():
    """The first outputs of Vigna's splitmix64 from state 0 (its reference code adds
    the increment before mixing, as engine/echo.h does); that the engine computes
    the same sizes is checked against its traffic in tests/privileged/test_echo_engine.py."""
    gamma = 0x9E3779B97F4A7C15
    want = [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    assert [echo._splitmix64(k * gamma % 2**64) for k in range(3)] == want


def test_frame_size_is_fixed_or_spread_over_the_whole_range():
    assert {frame_size(7, c, s, 100, 100) for c in (1, 2) for s in range(1, 50)} == {100}
    sizes = [frame_size(7, 1, s, 64, 1024) for s in range(1, 20001)]
    assert min(sizes) == 64 and max(sizes) == 1024
    assert abs(sum(sizes) / len(sizes) - 544) < 10          # uniform: mean (64 + 1024) / 2
    # Clients and seeds draw different sequences; the same triple the same size.
    assert sizes != [frame_size(7, 2, s, 64, 1024) for s in range(1, 20001)]
    assert sizes != [frame_size(8, 1, s, 64, 1024) for s in range(1, 20001)]
    assert frame_size(2**64 - 1, 4096, 2**40, 32, 65536) == frame_size(2**64 - 1, 4096, 2**40,
                                                                       32, 65536)


def test_good_specs_pass_and_argv_carries_them():
    EchoSpec("tcp", 6, 320, (64, 1024), server_model="threads", crr=True).validate()
    EchoSpec("udp", 4, 1, (32, 1472)).validate()
    spec = EchoSpec("tcp", 4, 2, (64, 64), seed=9, port=7100, echo_timeout_ms=40, crr=True)
    argv = client_argv(spec, SERVER[4], ["198.18.0.2", "198.18.128.2"], duration_s=2.5,
                       warmup_s=0.5, threads=2, cpus=[0, 1])
    assert argv[1] == "echo" and "--crr" in argv
    for opt, val in (("--frame-size", "64"), ("--seed", "9"), ("--port", "7100"),
                     ("--echo-timeout-ms", "40"), ("--duration", "2.5"), ("--warmup", "0.5"),
                     ("--cpus", "0,1"), ("--sources", "198.18.0.2,198.18.128.2")):
        assert argv[argv.index(opt) + 1] == val
    sargv = server_argv(EchoSpec("tcp", 4, 2, (64, 128)), SERVER[4], faults=("drop:10:1",))
    assert sargv[sargv.index("--frame-size") + 1] == "64-128"
    assert sargv[sargv.index("--fault") + 1] == "drop:10:1"
