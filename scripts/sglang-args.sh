#!/usr/bin/env bash
# Read the real SGLang release's own arguments from its wheel (pip download --no-deps, read with ast, never
# imported) into sglang_infra/machine/sglang_args/VERSION.json, which the preflight judges every launch flag by.
#   scripts/sglang-args.sh VERSION [--cache DIR]     e.g. scripts/sglang-args.sh 0.5.16
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || python=python3
exec "$python" -m sglang_infra.machine.sglang_args.reader "$@"
