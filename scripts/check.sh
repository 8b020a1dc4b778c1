#!/usr/bin/env bash
# Read-only checks of every host in an inventory: one pass/fail per host and
# check. Changes nothing on the hosts.
#   scripts/check.sh [INVENTORY]      default: inventory.py
set -euo pipefail
cd "$(dirname "$0")/.."
inventory=${1:-inventory.py}
python=.venv/bin/python
[ -x "$python" ] || python=python3
exec "$python" -m pytest tests/host_checks --hosts-inventory "$inventory" -p no:cacheprovider -q -rA
