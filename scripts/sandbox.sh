#!/usr/bin/env bash
# The main job, end to end, on this machine: bring up a local sandbox host (a
# Debian trixie container with systemd and sshd, like a bare server) and run
#   pyinfra inventory.py deploy.py
# against it, then the read-only host checks.
#   scripts/sandbox.sh          reuse the sandbox host if it is running
#   scripts/sandbox.sh --fresh  start from a new, bare host
#   scripts/sandbox.sh --down   remove the sandbox host, the stand-in Hub and the stand-in wheel index
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-machine.sh
export PYTHONPATH="$PWD/tests/support${PYTHONPATH:+:$PYTHONPATH}"
.venv/bin/python -m testbed.sandbox "${1:-up}"
[ "${1:-up}" = "--down" ] && exit 0
.venv/bin/pyinfra -y inventory.py deploy.py
.venv/bin/python -m pytest tests/host_checks --hosts-inventory inventory.py -p no:cacheprovider -q -rA \
  | grep -E '^(PASSED|FAILED|ERROR)|passed|failed'
echo "--> Validation summary from the sandbox host:"
docker exec sglang-sandbox bash /opt/sglang/test_tool_calling.sh
docker exec sglang-sandbox bash /opt/sglang/benchmark.sh
