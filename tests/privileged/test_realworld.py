"""Whole rule sets of the kinds users bring (home and office routers, a PBX, a VPN
and a proxy gateway, a libvirt host, nft servers and routers): each imports whole
and checks equal against the file itself, or is refused in one line. Never an
accepted rule that changes meaning, never a traceback."""
import subprocess
import sys
from pathlib import Path

import pytest


DATA = Path(__file__).parent.parent / "data" / "realworld"
# The file's interfaces by role; files without an entry name none the testbed has.
IFACES = {
    "home-router.rules": "eth1=client,eth0=server",
    "vpn-gateway.rules": "wg0=client,ens3=server",
    "libvirt-host.rules": "virbr0=client",
    "proxy-gateway.rules": "eth1=client,eth0=server",
    "nft-router.nft": "enp2s0=client,enp1s0=server",
}
# Those that import whole today: one that stops doing so is a regression.
WHOLE = {"home-router.rules", "vpn-gateway.rules", "pbx-host.rules",
         "proxy-gateway.rules", "nft-server.nft", "nft-router.nft", "libvirt-host.rules"}
# Files only: kube-proxy/ holds its dumps, checked in test_kube_dumps.py.
FILES = sorted(p.name for p in DATA.iterdir() if p.is_file())
# The backends that hold a file, where not iptables-legacy and nftables (nft has no
# CHECKSUM target).
BACKENDS = {"libvirt-host.rules": "iptables-legacy,iptables-nft"}


def _fwbench(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fwbench", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("name", FILES)
def test_a_real_rule_set_checks_equal_against_itself_or_is_refused_in_one_line(check_file, name):
    from fwbench.ruleset.importers.load import parse_iface_map
    from fwbench.ruleset.coverage import coverage
    iface = ["--iface", IFACES[name]] if name in IFACES else []
    # In-process (the command line's --coverage is tested in test_coverage.py).
    doc = coverage(str(DATA / name), parse_iface_map(IFACES[name]) if name in IFACES
                   else None).as_dict()
    if not doc["whole"]:
        assert name not in WHOLE, f"{name} no longer imports whole: {doc['rules']}"
        refused = [r for r in doc["rules"] if r["status"] == "refused"]
        assert refused or doc["error"]
        cp = _fwbench("check", str(DATA / name), *iface)
        assert cp.returncode == 2 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
        return
    assert name in WHOLE, f"{name} imports whole now: add it to WHOLE"
    cp, _ = check_file(DATA / name, iface=IFACES.get(name),
                       backends=BACKENDS.get(name, "iptables-legacy,nftables"), corpus=250)
    assert cp.returncode == 0, cp.stdout[-3000:]
    assert "the original and all backends agree with the reference" in cp.stdout
