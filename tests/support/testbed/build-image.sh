#!/usr/bin/env bash
# Builds the test-host base image: a Debian trixie root filesystem made with
# debootstrap (no registry can be pulled from here), imported into Docker.
#
# usage: build-image.sh IMAGE_TAG [CA_BUNDLE]
#
# The image boots systemd and sshd like a bare server. It does NOT contain the
# Docker engine: installing that is the deploy's job. The .deb files for
# docker.io and docker-compose are only downloaded into apt's cache so that
# three hosts converging at once do not each fetch ~80 MB from the mirror; the
# deploy still runs the real `apt-get install`.
set -euo pipefail

tag=${1:?usage: build-image.sh IMAGE_TAG [CA_BUNDLE]}
ca_bundle=${2:-}
suite=trixie
work=$(mktemp -d /var/tmp/sglang-testbed.XXXXXX)
root="$work/root"
cleanup() { umount "$root/proc" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

echo "testbed: debootstrap $suite into $root" >&2
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,openssh-server,python3,python3-venv,sudo,curl,ca-certificates,iproute2,procps,gnupg \
  "$suite" "$root" >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

if [ -n "$ca_bundle" ] && [ -s "$ca_bundle" ]; then
  # The machine reaches package indexes through a TLS-intercepting proxy;
  # hosts trust the same CA as the machine that built them.
  cp "$ca_bundle" "$root/usr/local/share/ca-certificates/testbed-site-ca.crt"
  chroot "$root" update-ca-certificates >/dev/null 2>&1 || true
fi

mount -t proc proc "$root/proc"
chroot "$root" apt-get update -qq >/dev/null
chroot "$root" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --download-only docker.io docker-compose prometheus prometheus-node-exporter >/dev/null
umount "$root/proc"

# A server accepts root logins by key only; keys are injected per container.
mkdir -p "$root/root/.ssh"
chmod 700 "$root/root/.ssh"
printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' \
  >"$root/etc/ssh/sshd_config.d/testbed.conf"
# Host keys are generated per container at first boot (see hosts.py).
rm -f "$root"/etc/ssh/ssh_host_*
# Nested containers: the outer container cannot disable IPv6 on a nested
# container's interface, which Docker 26 treats as fatal unless told not to.
# Test hosts only; real servers do not need this.
mkdir -p "$root/etc/systemd/system/docker.service.d"
printf '[Service]\nEnvironment=DOCKER_ALLOW_IPV6_ON_IPV4_INTERFACE=1\n' \
  >"$root/etc/systemd/system/docker.service.d/testbed-nested.conf"
# Units that cannot work inside a container and only add noise.
for unit in systemd-modules-load.service getty@tty1.service console-getty.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
: >"$root/etc/machine-id"
echo "testbed" >"$root/etc/hostname"

tar -C "$root" -c . | docker import --change 'CMD ["/sbin/init"]' - "$tag" >/dev/null
echo "testbed: built $tag" >&2
