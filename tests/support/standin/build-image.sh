#!/usr/bin/env bash
# Builds the STAND-IN server image (tests and sandbox only): a minimal Debian
# trixie root with python3 and tests/support/standin/, so `python3 -m
# sglang.launch_server ...` answers like SGLang without a GPU. It also carries
# the real, pinned sglang-router (the gateway), as SGLang's own images do. Also writes the
# image as a gzip archive that the deploy loads on hosts (sglang_image_archive).
#
# usage: build-image.sh IMAGE_TAG ARCHIVE
set -euo pipefail
SGLANG_ROUTER_PIN="sglang-router==0.3.2"   # the gateway release the project is tested with (docs/front-door.md)
tag=${1:?usage: build-image.sh IMAGE_TAG ARCHIVE}
archive=${2:?usage: build-image.sh IMAGE_TAG ARCHIVE}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /var/tmp/sglang-standin.XXXXXX)
root="$work/root"
trap 'rm -rf "$work"' EXIT

echo "stand-in: debootstrap trixie (python3 only) into $root" >&2
debootstrap --variant=minbase --include=python3,python3-pip trixie "$root" >"$work/debootstrap.log" 2>&1 \
  || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
# The REAL gateway, not a stand-in: the pinned sglang-router wheel from PyPI (as lmsysorg/sglang images carry it),
# so a gateway started from this image is SGLang's own. Through this machine's CA bundle (a TLS-intercepting proxy).
ca=${STANDIN_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$ca" "$root/tmp/build-ca.crt"
echo "stand-in: pip install $SGLANG_ROUTER_PIN (the real gateway)" >&2
# env -i: this machine's own pip and CA variables name paths that mean something else inside the root.
chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PIP_DISABLE_PIP_VERSION_CHECK=1 \
  pip install --quiet --no-cache-dir --break-system-packages --cert /tmp/build-ca.crt "$SGLANG_ROUTER_PIN" \
  >"$work/pip.log" 2>&1 \
  || { tail -n 30 "$work/pip.log" >&2; exit 1; }
rm -f "$root/tmp/build-ca.crt" "$root/etc/resolv.conf"
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
