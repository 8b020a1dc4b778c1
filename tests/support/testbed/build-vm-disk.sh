#!/usr/bin/env bash
# Builds the VM test host's disk, kernel and initrd: a Debian trixie root filesystem made with debootstrap (as the
# container hosts' image is; no cloud image can be downloaded here) with a stock Debian kernel, as a raw ext4 disk.
#
# usage: build-vm-disk.sh OUT_DIR [CA_BUNDLE]
#
# OUT_DIR gets disk.raw (the root filesystem, sparse), vmlinuz and initrd.img (QEMU boots them with -kernel and
# -initrd: no boot loader to install). Like the container hosts, the disk holds a bare server: systemd, sshd,
# python3, no Docker engine (the deploy installs it); docker.io and the exporter's .debs are only downloaded into
# apt's cache (nginx's too, for the peer door), as the container image does, so the deploy's real `apt-get install` does not wait on the mirror.
# Per-VM values (hostname, addresses, SSH keys) are not baked in: testbed-seed reads them from QEMU's fw_cfg at
# boot, the test bed's small stand-in for cloud-init.
set -euo pipefail

out=${1:?usage: build-vm-disk.sh OUT_DIR [CA_BUNDLE]}
ca_bundle=${2:-}
suite=trixie
size=8G
work=$(mktemp -d /var/tmp/sglang-vmdisk.XXXXXX)
root="$work/root"
cleanup() { umount "$root/proc" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

echo "testbed: debootstrap $suite with linux-image-amd64 into $root" >&2
debootstrap --variant=minbase \
  --include=linux-image-amd64,initramfs-tools,kmod,udev,systemd,systemd-sysv,systemd-resolved,dbus,openssh-server,python3,python3-venv,sudo,curl,ca-certificates,iproute2,procps,gnupg \
  "$suite" "$root" >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

if [ -n "$ca_bundle" ] && [ -s "$ca_bundle" ]; then
  # As the container hosts: the site's TLS-intercepting proxy's CA, trusted by the guest.
  cp "$ca_bundle" "$root/usr/local/share/ca-certificates/testbed-site-ca.crt"
  chroot "$root" update-ca-certificates >/dev/null 2>&1 || true
fi

mount -t proc proc "$root/proc"
chroot "$root" apt-get update -qq >/dev/null
chroot "$root" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --download-only docker.io docker-compose prometheus-node-exporter nginx >/dev/null
umount "$root/proc"

echo "/dev/vda / ext4 defaults,errors=remount-ro 0 1" >"$root/etc/fstab"
printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' \
  >"$root/etc/ssh/sshd_config.d/testbed.conf"
rm -f "$root"/etc/ssh/ssh_host_*   # each VM gets its own host key from the seed
install -d -m 700 "$root/root/.ssh"
: >"$root/etc/machine-id"
echo "testbed" >"$root/etc/hostname"
echo qemu_fw_cfg >"$root/etc/modules-load.d/testbed-seed.conf"
systemctl --root="$root" enable systemd-networkd.service systemd-resolved.service >/dev/null 2>&1

# The seed: hostname, root's authorized key, the SSH host key and the network, from fw_cfg (-fw_cfg
# name=opt/testbed/NAME), before sshd and the network start. Boots without a seed keep what the disk has.
cat >"$root/usr/local/sbin/testbed-seed" <<'EOF'
#!/bin/sh
set -eu
modprobe qemu_fw_cfg 2>/dev/null || true
seed=/sys/firmware/qemu_fw_cfg/by_name/opt/testbed
[ -d "$seed" ] || { echo "testbed-seed: no seed" >/dev/console; exit 0; }
put() { umask 077; cat "$seed/$1/raw" >"$2.new" && chmod "$3" "$2.new" && mv "$2.new" "$2"; }
put hostname /etc/hostname 644
hostname "$(cat /etc/hostname)"
put authorized_keys /root/.ssh/authorized_keys 600
put ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key 600
ssh-keygen -y -f /etc/ssh/ssh_host_ed25519_key >/etc/ssh/ssh_host_ed25519_key.pub
install -d /etc/systemd/network
put network /etc/systemd/network/10-testbed.network 644
echo "testbed-seed: seeded $(cat /etc/hostname)" >/dev/console
EOF
chmod 755 "$root/usr/local/sbin/testbed-seed"
cat >"$root/etc/systemd/system/testbed-seed.service" <<'EOF'
[Unit]
Description=Test bed seed from QEMU fw_cfg (hostname, SSH keys, network)
DefaultDependencies=no
After=local-fs.target systemd-modules-load.service
Before=ssh.service systemd-networkd.service network-pre.target sysinit.target
Wants=network-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/testbed-seed

[Install]
WantedBy=sysinit.target
EOF
systemctl --root="$root" enable testbed-seed.service >/dev/null 2>&1

kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -n 1)
initrd=$(ls "$root"/boot/initrd.img-* | sort -V | tail -n 1)
mkdir -p "$out"
cp "$kernel" "$out/vmlinuz.new" && cp "$initrd" "$out/initrd.img.new"
rm -f "$out/disk.raw.new"
truncate -s "$size" "$out/disk.raw.new"
mkfs.ext4 -q -L root -d "$root" "$out/disk.raw.new"
mv "$out/vmlinuz.new" "$out/vmlinuz"
mv "$out/initrd.img.new" "$out/initrd.img"
mv "$out/disk.raw.new" "$out/disk.raw"   # last: disk.raw's presence says the build is whole
echo "testbed: built the VM disk in $out ($(basename "$kernel"))" >&2
