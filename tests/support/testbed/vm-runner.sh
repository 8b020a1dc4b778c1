#!/bin/bash
# The VM host's container (tests/support/testbed/vm.py): runs QEMU with the guest on this container's own address.
#
# The container is started on the test network like a container host; this script hands its address to the guest:
# eth0 goes into a bridge with QEMU's tap device, the guest takes eth0's address and MAC (so the network's ARP and
# forwarding entries stay right) and eth0 keeps neither. The guest therefore sits on the run's network exactly as a
# container host does, and the container going (docker rm -f, the run's cleanup) takes the VM with it.
#
# Environment: VM_ACCEL auto|kvm|tcg (auto: KVM if it boots the guest to its seed within VM_KVM_PROBE seconds,
# else TCG), VM_MEMORY (MiB), VM_CPUS. /disk holds disk.raw, vmlinuz, initrd.img (read-only: the guest writes to a
# snapshot overlay that lives as long as QEMU, so a guest reboot keeps its changes); /seed the per-VM seed files.
# /run/vm/accel says the accelerator used; /run/vm/console.log is the guest's serial console.
set -euo pipefail

state=/run/vm
mkdir -p "$state"
addr=$(ip -4 -o addr show dev eth0 | awk '{print $4; exit}')
gateway=$(ip -4 route show default | awk '{print $3; exit}')
mac=$(cat /sys/class/net/eth0/address)

ip link set eth0 down
ip link set eth0 address "02:$(od -An -N5 -tx1 /dev/urandom | tr -s ' ' ':' | sed 's/^://;s/ *$//')"
ip addr flush dev eth0
ip link add br0 type bridge
ip tuntap add dev tap0 mode tap
ip link set eth0 master br0
ip link set tap0 master br0
ip link set eth0 up
ip link set tap0 up
ip link set br0 up

cp /seed/* "$state/"
dns=$(cat /seed/nameservers 2>/dev/null || true)
{
  printf '[Match]\nMACAddress=%s\n\n[Network]\nAddress=%s\nGateway=%s\n' "$mac" "$addr" "$gateway"
  for server in $dns; do printf 'DNS=%s\n' "$server"; done
} >"$state/network"

qemu() {
  local accel=$1
  local cpu=max
  [ "$accel" = kvm ] && cpu=host
  qemu-system-x86_64 -name "$(cat /seed/hostname)" -machine q35 -accel "$accel" -cpu "$cpu" \
    -m "${VM_MEMORY:-1600}" -smp "${VM_CPUS:-1}" \
    -nodefaults -display none -vga none -no-user-config \
    -serial "file:$state/console.log" -monitor none \
    -kernel /disk/vmlinuz -initrd /disk/initrd.img \
    -append "root=/dev/vda rw console=ttyS0 net.ifnames=0 systemd.show_status=1" \
    -drive "file=/disk/disk.raw,format=raw,if=virtio,snapshot=on,cache=unsafe" \
    -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
    -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=" \
    -device virtio-rng-pci \
    -fw_cfg "name=opt/testbed/hostname,file=$state/hostname" \
    -fw_cfg "name=opt/testbed/authorized_keys,file=$state/authorized_keys" \
    -fw_cfg "name=opt/testbed/ssh_host_ed25519_key,file=$state/ssh_host_ed25519_key" \
    -fw_cfg "name=opt/testbed/network,file=$state/network" &
  echo $! >"$state/qemu.pid"
}

seeded() { grep -q "testbed-seed: seeded" "$state/console.log" 2>/dev/null; }

accel=${VM_ACCEL:-auto}
if [ "$accel" = auto ]; then
  accel=tcg
  if [ -w /dev/kvm ]; then
    qemu kvm
    probe=${VM_KVM_PROBE:-20}
    why="did not boot the guest to its seed within ${probe}s"
    for _ in $(seq 1 $((probe * 2))); do
      seeded && { accel=kvm; break; }
      kill -0 "$(cat "$state/qemu.pid")" 2>/dev/null || { why="stopped QEMU at once"; break; }
      sleep 0.5
    done
    if [ "$accel" = tcg ]; then
      echo "vm: KVM $why; falling back to TCG" >&2
      kill "$(cat "$state/qemu.pid")" 2>/dev/null || true
      wait "$(cat "$state/qemu.pid")" 2>/dev/null || true
      mv "$state/console.log" "$state/console-kvm-probe.log" 2>/dev/null || true
    fi
  else
    echo "vm: /dev/kvm is not usable here; TCG" >&2
  fi
fi
[ -s "$state/qemu.pid" ] && kill -0 "$(cat "$state/qemu.pid")" 2>/dev/null || qemu "$accel"
echo "$accel" >"$state/accel"
echo "vm: accelerator $accel" >&2
pid=$(cat "$state/qemu.pid")
trap 'kill "$pid" 2>/dev/null' TERM INT
wait "$pid"
