#!/usr/bin/env bash
# Deploy benchmark on real test hosts (see bench/run.py). Prints a table and
# writes bench/results/bench.{json,md}.
#   scripts/bench.sh [--hosts 1,2,4,8] [--reps 3]
# The pull benchmark (hfpull.py against snapshot_download on a throttled local stand-in Hub, no hosts):
#   .venv/bin/python bench/pull.py [--reps 3]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-machine.sh
exec .venv/bin/python bench/run.py "$@"
