#!/usr/bin/env bash
# Canary rollout: deploy and validate the canary first (a host or a group of
# the inventory), and stop before every other host when it fails.
#   scripts/rollout.sh [--canary HOST_OR_GROUP] [INVENTORY] [pyinfra options ...]
# Default canary: the inventory's `canary` group. Options such as
# --data key=value apply to both steps.
set -uo pipefail
cd "$(dirname "$0")/.."
canary=canary
if [ "${1:-}" = "--canary" ]; then canary=${2:?--canary needs a host or group}; shift 2; fi
inventory=inventory.py
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then inventory=$1; shift; fi
pyinfra=.venv/bin/pyinfra
[ -x "$pyinfra" ] || pyinfra=pyinfra
python=.venv/bin/python
[ -x "$python" ] || python=python3

# A canary that matches no host would "pass" and let every host through: refuse it first.
if ! canaries=$("$python" -m sglang_infra.fleet match "$inventory" "$canary"); then
  echo "rollout: refused, the canary matches no host; nothing was deployed" >&2
  exit 1
fi
echo "rollout: canary hosts: $canaries" >&2

echo "rollout: canary step on $canary" >&2
if ! "$pyinfra" -y --limit "$canary" "$inventory" deploy.py "$@"; then
  echo "rollout: the canary ($canary) failed; stopped before the other hosts, which were not touched" >&2
  exit 1
fi
echo "rollout: the canary ($canary) passed; deploying the other hosts" >&2
exec "$pyinfra" -y --exclude "$canary" "$inventory" deploy.py "$@"
