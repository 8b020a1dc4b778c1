#!/usr/bin/env bash
# Resolve once and write the lock (sglang.lock beside the inventory): every
# model's commit and each file's sha256, the image digest, the toolchain
# wheels' sha256. Running it again without --update changes nothing.
#   scripts/lock.sh [INVENTORY] [--update KEY[@REVISION] | --update image | --update wheels] [--out PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || python=python3
exec "$python" -m sglang_infra.fleet.lockgen "$@"
