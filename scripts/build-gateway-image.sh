#!/usr/bin/env bash
# Builds the gateway image (sglang_router_image), for operators and the tests alike: the Shepherd Model Gateway,
# PyPI smg at the version templates/gateway-requirements.txt pins, on a minimal Debian trixie root (debootstrap, python3 and python3-pip from Debian's mirror), its wheels installed
# with the hashes of templates/gateway-requirements.txt (pip refuses any wheel whose bytes differ). Also writes the
# image as a gzip archive that the deploy loads on gateway hosts (sglang_router_image_archive).
#
# usage (as root, on a Debian machine with debootstrap and Docker): build-gateway-image.sh IMAGE_TAG ARCHIVE
set -euo pipefail
tag=${1:?usage: build-gateway-image.sh IMAGE_TAG ARCHIVE}
archive=${2:?usage: build-gateway-image.sh IMAGE_TAG ARCHIVE}
here=$(cd "$(dirname "$0")" && pwd)
requirements="$here/../templates/gateway-requirements.txt"
work=$(mktemp -d /var/tmp/sglang-gateway.XXXXXX)
root="$work/root"
trap 'rm -rf "$work"' EXIT

echo "gateway image: the wheels of $requirements (downloaded here, hashes checked)" >&2
mkdir -p "$work/wheels"
python3 -m pip download --quiet --no-deps --require-hashes -r "$requirements" -d "$work/wheels" \
  --only-binary=:all: --python-version 3.13 --implementation cp --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_5_x86_64 \
  --platform manylinux1_x86_64 >"$work/download.log" 2>&1 || { tail -n 30 "$work/download.log" >&2; exit 1; }
echo "gateway image: debootstrap trixie (python3, python3-pip) into $root" >&2
debootstrap --variant=minbase --include=python3,python3-pip trixie "$root" >"$work/debootstrap.log" 2>&1 \
  || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
cp -r "$work/wheels" "$root/tmp/wheels"
cp "$requirements" "$root/tmp/requirements.txt"
# No index at all: only the wheels above, each checked against its hash again inside the root.
chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PIP_DISABLE_PIP_VERSION_CHECK=1 \
  pip install --quiet --no-cache-dir --break-system-packages --no-index --find-links /tmp/wheels --no-deps \
  --require-hashes -r /tmp/requirements.txt >"$work/pip.log" 2>&1 || { tail -n 30 "$work/pip.log" >&2; exit 1; }
chroot "$root" python3 -c "import smg.launch_router, smg.smg_rs" \
  || { echo "gateway image: smg does not import" >&2; exit 1; }
rm -rf "$root/tmp/wheels" "$root/tmp/requirements.txt" "$root"/usr/share/doc/* "$root"/usr/share/man/* \
  "$root"/usr/share/locale/* "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/*

tar -C "$root" -c . | docker import --change 'ENV PYTHONUNBUFFERED=1' \
  --change 'CMD ["python3", "-m", "smg.launch_router", "--help"]' - "$tag" >/dev/null
mkdir -p "$(dirname "$archive")"
docker save "$tag" | gzip -1 >"$archive.tmp"
mv "$archive.tmp" "$archive"
echo "gateway image: built $tag ($(du -h "$archive" | cut -f1) archive)" >&2
