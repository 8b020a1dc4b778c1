#!/usr/bin/env bash
# Builds the Debian 12 (bookworm) test-host image the way build-image.sh builds the trixie one: a debootstrap root
# filesystem imported into Docker, booting systemd and sshd like a bare server, with no Docker engine.
#
# usage: build-bookworm-image.sh IMAGE_TAG TRIXIE_IMAGE [CA_BUNDLE]
#
# bookworm's archive has docker.io 20.10 but only the Python compose v1, so compose v2 comes from elsewhere on a real
# server (Docker's repository, or a plugin an operator put in place). The tests put a compose v2 plugin where an
# operator would, from /usr/local/share/testbed/docker-compose: trixie's docker-compose 2.26.1 binary (taken from
# TRIXIE_IMAGE's apt cache, no mirror asked twice), which runs on bookworm's glibc as the CLI plugin. The .deb files
# the tests install (docker.io, Prometheus, the node exporter, and reprepro and nginx for the local apt repository
# the tests serve) are only downloaded into apt's cache, so hosts starting at once do not each fetch them.
set -euo pipefail

tag=${1:?usage: build-bookworm-image.sh IMAGE_TAG TRIXIE_IMAGE [CA_BUNDLE]}
trixie=${2:?usage: build-bookworm-image.sh IMAGE_TAG TRIXIE_IMAGE [CA_BUNDLE]}
ca_bundle=${3:-}
suite=bookworm
work=$(mktemp -d /var/tmp/sglang-testbed-bookworm.XXXXXX)
root="$work/root"
cleanup() { umount "$root/proc" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

echo "testbed: debootstrap $suite into $root" >&2
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,openssh-server,python3,python3-venv,sudo,curl,ca-certificates,iproute2,procps,gnupg \
  "$suite" "$root" >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

if [ -n "$ca_bundle" ] && [ -s "$ca_bundle" ]; then
  cp "$ca_bundle" "$root/usr/local/share/ca-certificates/testbed-site-ca.crt"
  chroot "$root" update-ca-certificates >/dev/null 2>&1 || true
fi

mount -t proc proc "$root/proc"
chroot "$root" apt-get update -qq >/dev/null
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --download-only \
  docker.io prometheus prometheus-node-exporter reprepro nginx-light >/dev/null
umount "$root/proc"

# compose v2, as an operator would bring it: trixie's plugin binary, kept aside until a test puts it in place.
docker run --rm --entrypoint sh "$trixie" -c 'cat /var/cache/apt/archives/docker-compose_2.*_amd64.deb' \
  >"$work/docker-compose.deb"
dpkg-deb -x "$work/docker-compose.deb" "$work/compose"
install -D -m 755 "$work/compose/usr/libexec/docker/cli-plugins/docker-compose" \
  "$root/usr/local/share/testbed/docker-compose"

mkdir -p "$root/root/.ssh"
chmod 700 "$root/root/.ssh"
printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' \
  >"$root/etc/ssh/sshd_config.d/testbed.conf"
rm -f "$root"/etc/ssh/ssh_host_*
for unit in systemd-modules-load.service getty@tty1.service console-getty.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
: >"$root/etc/machine-id"
echo "testbed" >"$root/etc/hostname"

tar -C "$root" -c . | docker import --change 'CMD ["/sbin/init"]' - "$tag" >/dev/null
echo "testbed: built $tag" >&2
