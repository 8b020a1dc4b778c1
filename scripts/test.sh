#!/usr/bin/env bash
# The whole test suite: unit tests, then the end-to-end tests that build real
# Debian trixie hosts in containers and converge them over SSH.
# Extra arguments go to pytest (e.g. -k drift, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-machine.sh
.venv/bin/python -m pytest "$@"
