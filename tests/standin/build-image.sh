#!/usr/bin/env bash
# Builds the STAND-IN server image (tests and sandbox only): a minimal Debian
# trixie root with python3 and tests/standin/, so `python3 -m
# sglang.launch_server ...` answers like SGLang without a GPU. Also writes the
# image as a gzip archive that the deploy loads on hosts (sglang_image_archive).
#
# usage: build-image.sh IMAGE_TAG ARCHIVE
set -euo pipefail
tag=${1:?usage: build-image.sh IMAGE_TAG ARCHIVE}
archive=${2:?usage: build-image.sh IMAGE_TAG ARCHIVE}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /var/tmp/sglang-standin.XXXXXX)
root="$work/root"
trap 'rm -rf "$work"' EXIT

echo "stand-in: debootstrap trixie (python3 only) into $root" >&2
debootstrap --variant=minbase --include=python3,python3-pip trixie "$root" >"$work/debootstrap.log" 2>&1 \
  || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/* "$root"/var/cache/apt/* \
  "$root"/var/lib/apt/lists/*
mkdir -p "$root/opt/standin/sglang"
cp "$here/standin_server.py" "$root/opt/standin/"
cp "$here/sglang/__init__.py" "$here/sglang/launch_server.py" "$root/opt/standin/sglang/"

tar -C "$root" -c . | docker import \
  --change 'ENV PYTHONPATH=/opt/standin' --change 'ENV PYTHONUNBUFFERED=1' \
  --change 'CMD ["python3", "-m", "sglang.launch_server", "--model-path", "stand-in"]' - "$tag" >/dev/null
mkdir -p "$(dirname "$archive")"
docker save "$tag" | gzip -1 >"$archive.tmp"
mv "$archive.tmp" "$archive"
echo "stand-in: built $tag ($(du -h "$archive" | cut -f1) archive)" >&2
