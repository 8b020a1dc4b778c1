#!/usr/bin/env bash
# The whole test suite: lint and types first (ruff, mypy: a finding fails the run before any test), then
# the unit tests, then the end-to-end tests that build real Debian trixie hosts in containers and converge
# them over SSH. Extra arguments go to pytest (e.g. -k drift, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-machine.sh
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
