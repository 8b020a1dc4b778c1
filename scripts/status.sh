#!/usr/bin/env bash
# A read-only fleet report, one row per host: reachable, OS, GPUs, Docker,
# the serving image and model against the lock, the container, the last
# gate, drift, hf-cache and free disk; then the fleet's summary line. One
# snapshot per host, read in parallel; nothing on any host changes.
#   scripts/status.sh [INVENTORY] [--json]      default: inventory.py
# Exit 0: every host ok (drift is shown, not a failure); 1: a host is
# unreachable, refused, failing or off the lock; 2: no report could be made.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || python=python3
exec "$python" -m sglang_infra.status.fleetstatus "$@"
