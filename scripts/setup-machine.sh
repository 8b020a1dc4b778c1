#!/usr/bin/env bash
# Prepares a fresh Debian machine (as root) to run the sandbox and the tests:
# Docker engine, debootstrap, a Python venv with the pinned dependencies.
# Safe to run again: each step checks before it acts.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
# The VM test host's disk is an ext4 image filled from a directory (mkfs.ext4 -d); QEMU itself runs in the VM's
# container (tests/support/testbed/vm.py), installed there from Debian, so a killed run's cleanup takes the VM too.
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v ssh-keygen >/dev/null || need+=(openssh-client)
python3 -m venv --help >/dev/null 2>&1 || need+=(python3-venv)
# promtool checks the alert rules and runs their tests (tests/unit/test_alert_rules.py); it comes with Debian's prometheus.
command -v promtool >/dev/null || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The VM test host's network: QEMU's tap device, made in its container from this machine's /dev/net/tun.
if [ ! -c /dev/net/tun ]; then
  modprobe tun 2>/dev/null || echo "setup: /dev/net/tun is missing and tun did not load; tests/e2e/test_vm.py cannot start its VM" >&2
fi

if ! docker info >/dev/null 2>&1; then
  if [ -d /run/systemd/system ]; then
    systemctl start docker
  else
    echo "setup: starting dockerd (no systemd here)" >&2
    # In a session of its own: a daemon left in the caller's process group dies when that group is
    # signalled (a timed-out test command, a job killed by its runner), taking every container with it.
    setsid nohup dockerd >>/var/log/sglang-dockerd.log 2>&1 </dev/null &
  fi
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "setup: dockerd did not answer within 60 s; see /var/log/sglang-dockerd.log" >&2; exit 1; }
fi

# Every test host is a systemd with a nested dockerd, each holding several inotify instances; the kernel's
# default of 128 per user ran out with a suite's hosts, and the next host never finished booting.
if [ "$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 1024)" -lt 1024 ]; then
  echo "setup: raising fs.inotify.max_user_instances to 1024 for the test hosts" >&2
  sysctl -q -w fs.inotify.max_user_instances=1024 >/dev/null 2>&1 \
    || echo "setup: could not raise fs.inotify.max_user_instances; many test hosts at once may not boot" >&2
fi

# The control side's pins (requirements.txt, the host checks' pytest and testinfra included) and the tests' on top
# (requirements-test.txt: the stand-in wheel index, smg's parser, ruff and mypy); the venv is stamped with both
# files' hashes, so a change to either reinstalls.
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt requirements-test.txt | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the pinned Python dependencies into .venv" >&2
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r requirements-test.txt
  echo "$want" >"$stamp"
fi
