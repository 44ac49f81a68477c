#!/usr/bin/env bash
# The test suite: install what is needed (Chromium too: the report is rendered in
# it), then run unit and privileged tests.
# Extra arguments go to pytest instead (e.g. tests/unit, or one file).
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh --with-browser
if [ $# -gt 0 ]; then
	exec .venv/bin/python -m pytest -q -rs "$@"
fi
# Unit tests share nothing (no namespace, no timing), so they run two at a time;
# privileged tests build testbeds and time packets on the machine's two CPUs, so
# one at a time. Both run whatever the first gives; either failing fails the suite.
rc=0
.venv/bin/python -m pytest -q -rs --durations=10 -n 2 tests/unit || rc=$?
.venv/bin/python -m pytest -q -rs --durations=25 tests/privileged || rc=$?
exit $rc
