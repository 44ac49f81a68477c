#!/usr/bin/env bash
# The test suite: install what is needed (Chromium too: the report is rendered in
# it), then run unit and privileged tests.
# Extra arguments go to pytest (e.g. tests/unit).
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh --with-browser
exec .venv/bin/python -m pytest -q -rs "$@"
