#!/usr/bin/env bash
# The whole test suite: lint and types first (ruff, mypy: a finding fails the run before any test), then the
# unit tests (tests/unit: no Docker, no host; a failure stops the run here), then the end-to-end tests that build
# real Debian trixie hosts in containers and converge them over SSH. Both in two lanes at once (scripts/lanes.py).
# Extra arguments run plain pytest with them instead (e.g. tests/unit, tests/e2e/test_drift.py, -k drift, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-machine.sh
.venv/bin/ruff check .
.venv/bin/mypy
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
.venv/bin/python scripts/lanes.py --name unit tests/unit/test_*.py
exec .venv/bin/python scripts/lanes.py --name e2e tests/e2e/test_*.py
