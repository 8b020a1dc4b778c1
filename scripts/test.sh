#!/usr/bin/env bash
# The whole test suite: lint and types first (ruff, mypy: a finding fails the run before any test), then the
# unit tests (tests/unit: no Docker, no host; a failure stops the run here), then the end-to-end tests that build
# real Debian trixie hosts in containers and converge them over SSH, in two lanes at once
# (scripts/e2e_lanes.py). Extra arguments run pytest with them instead (e.g. tests/unit, -k drift, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-machine.sh
.venv/bin/ruff check .
.venv/bin/mypy
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
.venv/bin/python -m pytest -p no:cacheprovider tests/unit
exec .venv/bin/python scripts/e2e_lanes.py tests/e2e/test_*.py
