#!/usr/bin/env bash
# Read-only checks of every host in an inventory: one pass/fail per host and
# check. Changes nothing on the hosts.
#   scripts/check.sh [INVENTORY]      default: inventory.py
# Needs the control side's venv (requirements.txt, which pins pytest and pytest-testinfra for these checks).
set -euo pipefail
cd "$(dirname "$0")/.."
inventory=${1:-inventory.py}
python=.venv/bin/python
[ -x "$python" ] || python=python3
"$python" -c 'import pytest, testinfra' 2>/dev/null || {
  echo "check.sh: $python lacks pytest or pytest-testinfra; install the control side: python3 -m venv .venv && .venv/bin/pip install -r requirements.txt" >&2
  exit 2
}
exec "$python" -m pytest tests/host_checks --hosts-inventory "$inventory" -p no:cacheprovider -q -rA
