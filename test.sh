#!/usr/bin/env bash
# The test suite: install what is needed, then run unit and privileged tests.
# Extra arguments go to pytest (e.g. tests/unit).
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
exec .venv/bin/python -m pytest -q -rs "$@"
