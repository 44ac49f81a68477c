#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install everything fwbench needs on a Debian 12 machine; safe to run again.
# Debian packages come from apt-get, Python packages go into ./.venv.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
	echo "setup: must run as root (it installs Debian packages and builds network namespaces)" >&2
	exit 1
fi

# The firewalls under test (conntrack: the drop-position experiment reads the
# connection table), the seed-faithful traffic tools, and what builds the testbed.
# The traffic engine (engine/, C + an XDP program) needs a compiler, clang for BPF,
# bpftool for the skeleton and libbpf; its nf_tables reader libnftnl and libmnl.
debs=(iptables nftables ipset conntrack iperf3 iputils-ping iproute2 ethtool util-linux procps
      python3 python3-venv
      gcc make libc6-dev clang llvm bpftool libbpf-dev libelf-dev zlib1g-dev
      libnftnl-dev libmnl-dev
      openssh-server)   # the ssh provider's local lab (fwbench lab) and its tests
# The test suite renders report.html in headless Chromium: ./test.sh asks for it.
if [ "${1:-}" = "--with-browser" ]; then
	debs+=(chromium fonts-dejavu-core)
fi
missing=()
for p in "${debs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "setup: installing Debian packages: ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	# openssh-server's install would start this machine's own sshd; fwbench runs
	# sshd only inside its lab's namespaces. A policy-rc.d we place (none there)
	# keeps packages from starting services, and goes again after.
	ours=""
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		ours=1
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT   # also when the install fails
	fi
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	if [ -n "$ours" ]; then rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
fi

# Debian's own Python, so the venv does not depend on whatever python3 is first on PATH.
py=/usr/bin/python3
if [ ! -x .venv/bin/python ]; then
	"$py" -m venv .venv
fi
# Reinstall only when the dependency list changed.
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat .setup-stamp 2>/dev/null || true)" != "$want" ]; then
	.venv/bin/python -m pip install -q --upgrade pip >/dev/null
	.venv/bin/python -m pip install -q -e '.[test]'
	echo "$want" > .setup-stamp
fi

# The engine and the eBPF firewalls: make rebuilds only what changed.
make -s -C engine >/dev/null
make -s -C bpf >/dev/null
