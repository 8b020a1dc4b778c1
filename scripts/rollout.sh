#!/usr/bin/env bash
# Canary rollout: deploy and validate the canary first (a host or a group of
# the inventory), and stop before every other host when it fails.
#   scripts/rollout.sh [--canary HOST_OR_GROUP] [--lock [--update SPEC ...]] [INVENTORY] [pyinfra options ...]
# Default canary: the inventory's `canary` group. Options such as
# --data key=value apply to both steps.
# --lock: resolve the lock (scripts/lock.sh, with any --update SPEC) into
# LOCK.candidate, deploy the canary against it, and only when the canary's
# gate passed move it over the lock and deploy every other host against that
# same lock. A failed canary leaves the lock as it was.
# Exit 0: every step passed; 1: refused, or a step failed; 130/143: interrupted (SIGINT/SIGTERM), nothing deployed
# past the step that was going.
set -uo pipefail
cd "$(dirname "$0")/.."
canary=canary
lock=0
updates=()
while [ $# -gt 0 ]; do
  case "$1" in
    --canary) canary=${2:?--canary needs a host or group}; shift 2 ;;
    --lock) lock=1; shift ;;
    --update) lock=1; updates+=(--update "${2:?--update needs KEY[@REVISION], image or wheels}"); shift 2 ;;
    *) break ;;
  esac
done
inventory=inventory.py
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then inventory=$1; shift; fi
pyinfra=.venv/bin/pyinfra
[ -x "$pyinfra" ] || pyinfra=pyinfra
python=.venv/bin/python
[ -x "$python" ] || python=python3

# A canary that matches no host, or only gateway hosts (which serve no model), would "pass" and let every host
# through: refuse it first.
canaries=$("$python" -m sglang_infra.plan.inventoryfile canary "$inventory" "$canary")
case $? in
  0) ;;
  3) echo "rollout: refused, the canary serves no model; nothing was deployed" >&2; exit 1 ;;
  *) echo "rollout: refused, the canary matches no host; nothing was deployed" >&2; exit 1 ;;
esac
echo "rollout: canary hosts: $canaries" >&2

canary_data=()
candidate=
if [ "$lock" = 1 ]; then
  if ! candidate=$("$python" -m sglang_infra.fleet.lockgen "$inventory" --candidate "${updates[@]}"); then
    echo "rollout: the lock could not be resolved; nothing was deployed" >&2
    exit 1
  fi
  canary_data=(--data "sglang_lock=$candidate")
fi

# An interrupt (Ctrl-C, SIGTERM) stops the rollout at once: the step going on is told (it stops within seconds,
# naming the hosts whose gate goes on by itself, run/interrupt.py) and no host past it is deployed. The step runs in
# the background so that the trap runs now, not once the step has ended.
step=
stop() {
  trap - INT TERM
  [ -n "$step" ] && kill -s "$1" "$step" 2>/dev/null && wait "$step"
  [ -n "$candidate" ] && rm -f "$candidate"
  echo "rollout: interrupted ($1) during the canary step on $canary; stopped before the other hosts, which were" \
       "not touched${candidate:+ (the lock was left as it was)}" >&2
  exit "$2"
}
trap 'stop INT 130' INT
trap 'stop TERM 143' TERM

echo "rollout: canary step on $canary" >&2
"$pyinfra" -y --limit "$canary" "$inventory" deploy.py "${canary_data[@]}" "$@" &
step=$!
wait "$step"
code=$?
step=
trap - INT TERM
case $code in
  0) ;;
  130|143) [ -n "$candidate" ] && rm -f "$candidate"
     echo "rollout: the canary step on $canary was interrupted; stopped before the other hosts, which were not" \
          "touched${candidate:+ (the lock was left as it was)}" >&2
     exit "$code" ;;
  *) [ -n "$candidate" ] && rm -f "$candidate"
     echo "rollout: the canary ($canary) failed; stopped before the other hosts, which were not touched" \
          "${candidate:+(the lock was left as it was)}" >&2
     exit 1 ;;
esac
if [ -n "$candidate" ]; then
  mv -f "$candidate" "${candidate%.candidate}"
  echo "rollout: the canary passed on ${candidate%.candidate}; it is the lock now" >&2
fi
echo "rollout: the canary ($canary) passed; deploying the other hosts" >&2
exec "$pyinfra" -y --exclude "$canary" "$inventory" deploy.py "$@"
