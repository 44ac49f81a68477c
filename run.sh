#!/usr/bin/env bash
# The main job: install what is needed, then compare every available netfilter
# backend on the quick scenario and print the table. Extra arguments go to `fwbench run`.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
exec .venv/bin/fwbench run scenarios/quick.toml "$@"
