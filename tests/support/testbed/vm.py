"""A test host that is a real virtual machine: QEMU booting a stock Debian kernel from a disk built with debootstrap,
on the run's own test network, reached over SSH like the container hosts (testbed/hosts.py).

Containers share this machine's kernel; a VM has its own, so it shows what only a real boot shows: units that are
enabled (not only started) come back after a reboot, the kernel's own settings, no NVIDIA module loaded.

How it is put together:
- The disk (build-vm-disk.sh): a raw ext4 root filesystem with linux-image-amd64, systemd and sshd, its kernel and
  initrd beside it, cached under CACHE_DIR in a folder named by the build script's hash (an edit rebuilds; a second
  run reuses it). QEMU boots them with -kernel/-initrd and writes to a snapshot overlay, so the cached disk is never
  changed and every VM starts bare.
- QEMU runs inside a container of this run (the runner image: the container hosts' image plus Debian's
  qemu-system-x86), started on the test network like a container host; vm-runner.sh hands the container's address
  and MAC to the guest through a bridge. The guest is therefore reachable at a run address of its own, reaches the
  run's stand-ins as container hosts do, and goes with the container (the module's end, the run's cleanup, the
  cleanup of a killed run: remove_run_objects).
- Per-VM values (hostname, root's authorized key, the SSH host key, the network) go in through QEMU's fw_cfg and
  are applied by the guest's testbed-seed unit before sshd starts; the host key is made here, so the control side
  pins it in known_hosts as it does for container hosts.
- The accelerator: KVM when it boots the guest (tried for VM_KVM_PROBE seconds), else TCG; VMHost.accel says which.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from testbed import hosts

BUILD_SCRIPT = hosts.HERE / "build-vm-disk.sh"
RUNNER_SCRIPT = hosts.HERE / "vm-runner.sh"
RUNNER_DOCKERFILE = """\
FROM {base}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
    qemu-system-x86 >/dev/null && rm -rf /var/lib/apt/lists/*
COPY vm-runner.sh /usr/local/bin/vm-runner.sh
CMD ["bash", "/usr/local/bin/vm-runner.sh"]
"""

# MiB of guest memory: the stack (dockerd, the stand-in server, node exporter, nginx) fits in about 1 GiB; QEMU's own
# share brings the container to about 1.7 GB.
MEMORY_MIB = 1600
# One vCPU: the machine the suite is written for has two cores shared with the container lanes.
CPUS = 1
# Seconds KVM has to boot the guest to its seed before TCG takes over (about 5 s where KVM works).
KVM_PROBE_SECONDS = 20
# Seconds a boot may take to answer SSH: 25-35 s under TCG on an idle machine, 174 s seen at a load of 14.
BOOT_TIMEOUT = 420
# Seconds a reboot may take, from the command to SSH answering with a new boot id (about 60 s measured under TCG).
REBOOT_TIMEOUT = 300


def disk_dir() -> Path:
    """The cached disk's folder, named by the build script's content, so an edit rebuilds."""
    digest = hashlib.sha256(BUILD_SCRIPT.read_bytes()).hexdigest()[:12]
    return hosts.CACHE_DIR / f"vm-trixie-{digest}"


def ensure_disk(ca_bundle: str | None = None) -> Path:
    """The VM disk, kernel and initrd (built once per build script, then reused); their folder."""
    folder = disk_dir()
    if (folder / "disk.raw").exists():
        return folder
    with hosts._machine_lock("vm-disk"):
        if (folder / "disk.raw").exists():
            return folder   # another run built it while this one waited
        ca = ca_bundle if ca_bundle is not None else os.environ.get("TESTBED_CA_BUNDLE", hosts.DEFAULT_CA_BUNDLE)
        args = ["bash", str(BUILD_SCRIPT), str(folder)]
        if ca and Path(ca).exists():
            args.append(ca)
        if subprocess.run(args, timeout=1800).returncode != 0:
            raise hosts.TestbedError(f"building the VM disk in {folder} failed")
    return folder


def runner_tag(base: str) -> str:
    """The runner image's tag names its base image, Dockerfile and script, so an edit of any rebuilds."""
    digest = hashlib.sha256(base.encode() + RUNNER_DOCKERFILE.encode() + RUNNER_SCRIPT.read_bytes()).hexdigest()[:12]
    return f"sglang-testbed-vmm:{digest}"


def ensure_runner_image() -> str:
    base = hosts.ensure_image()
    tag = runner_tag(base)
    if hosts._run(["docker", "image", "inspect", tag], check=False).returncode == 0:
        return tag
    with hosts._machine_lock("vm-runner-image"):
        if hosts._run(["docker", "image", "inspect", tag], check=False).returncode == 0:
            return tag
        with tempfile.TemporaryDirectory() as context:
            Path(context, "Dockerfile").write_text(RUNNER_DOCKERFILE.format(base=base))
            Path(context, "vm-runner.sh").write_bytes(RUNNER_SCRIPT.read_bytes())
            hosts._run(["docker", "build", "-q", "-t", tag, context], timeout=900)
    return tag


def nameservers(resolv_conf: str = "/etc/resolv.conf") -> list[str]:
    """This machine's resolvers, for the guest (Docker's 127.0.0.11 answers only inside a container)."""
    found = []
    for line in Path(resolv_conf).read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver" and not words[1].startswith("127."):
            found.append(words[1])
    return found


@dataclass
class VMHost(hosts.TestHost):
    """A VM test host. exec() goes over SSH (there is no docker exec into a guest); accel is "kvm" or "tcg"."""

    accel: str = ""
    boot_seconds: float = 0.0

    def ssh_command(self, command: str, timeout: int) -> list[str]:
        return ["ssh", "-i", str(self.ssh_key), "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
                "-o", f"ConnectTimeout={min(timeout, 15)}", f"root@{self.address}", f"bash -c {shlex.quote(command)}"]

    def exec(self, command: str, *, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
        return hosts._run(self.ssh_command(command, timeout), check=check, timeout=timeout)

    def console(self, tail: int = 4000) -> str:
        """The guest's serial console, for a failure's message."""
        return hosts._run(["docker", "exec", self.container, "cat", "/run/vm/console.log"],
                          check=False).stdout[-tail:]

    def boot_id(self) -> str | None:
        try:
            got = self.exec("cat /proc/sys/kernel/random/boot_id", check=False, timeout=20)
        except subprocess.TimeoutExpired:
            return None
        return got.stdout.strip() if got.returncode == 0 and got.stdout.strip() else None

    def reboot(self) -> float:
        """Reboot the guest through SSH and wait for SSH with a new boot id; the seconds it took."""
        before = self.boot_id()
        began = time.monotonic()
        try:
            self.exec("systemctl reboot", check=False, timeout=30)
        except subprocess.TimeoutExpired:
            pass   # the connection may go down with the guest
        try:
            hosts._wait_for(lambda: (lambda now: now is not None and now != before)(self.boot_id()),
                            f"{self.name} to come back from its reboot", timeout=REBOOT_TIMEOUT, interval=3)
        except hosts.TestbedError as error:
            raise hosts.TestbedError(f"{error}; its console ends: {self.console(1500)}") from None
        return time.monotonic() - began


def start_vm(name: str, state_dir: Path, *, prefix: str | None = None, accel: str | None = None) -> VMHost:
    """Start (or replace) one VM host of this run and return it once SSH answers as root.

    ``accel``: "kvm", "tcg", or None for $TESTBED_VM_ACCEL or else auto (KVM if it boots, else TCG)."""
    disk = ensure_disk()
    image = ensure_runner_image()
    hosts.ensure_network()
    container = hosts.container_name(name, prefix)
    hosts.remove_host(name, prefix=prefix)
    key = hosts.ensure_ssh_key(state_dir)
    seed = state_dir / f"seed-{name}"
    seed.mkdir(parents=True, exist_ok=True)
    host_key = seed / "ssh_host_ed25519_key"
    host_key.unlink(missing_ok=True)
    Path(f"{host_key}.pub").unlink(missing_ok=True)
    hosts._run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(host_key)])
    (seed / "hostname").write_text(name + "\n")
    (seed / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
    (seed / "nameservers").write_text(" ".join(nameservers()) + "\n")
    devices = ["--device", "/dev/net/tun"] + (["--device", "/dev/kvm"] if Path("/dev/kvm").exists() else [])
    began = time.monotonic()
    hosts._run([
        "docker", "run", "-d", "--name", container, "--hostname", name, *hosts.run_labels(prefix),
        "--network", hosts.NETWORK, "--cap-add", "NET_ADMIN", *devices,
        "-v", f"{disk}:/disk:ro", "-v", f"{seed}:/seed:ro",
        "-e", f"VM_ACCEL={accel or os.environ.get('TESTBED_VM_ACCEL', 'auto')}",
        "-e", f"VM_MEMORY={MEMORY_MIB}", "-e", f"VM_CPUS={CPUS}", "-e", f"VM_KVM_PROBE={KVM_PROBE_SECONDS}",
        image,
    ])
    inspect = json.loads(hosts._run(["docker", "inspect", container]).stdout)[0]
    address = inspect["NetworkSettings"]["Networks"][hosts.NETWORK]["IPAddress"]
    known_hosts = state_dir / f"known_hosts.{name}"
    known_hosts.write_text(f"{address} {' '.join(Path(f'{host_key}.pub').read_text().split()[:2])}\n")
    vm = VMHost(name, address, key, known_hosts, container, "root")

    def running_accel() -> str:
        got = hosts._run(["docker", "exec", container, "cat", "/run/vm/accel"], check=False)
        if got.returncode != 0 and not hosts._run(["docker", "inspect", "-f", "{{.State.Running}}", container],
                                                    check=False).stdout.strip() == "true":
            raise hosts.TestbedError(f"the VM container {container} stopped: "
                                     + hosts._run(["docker", "logs", container], check=False).stderr[-2000:])
        return got.stdout.strip()

    vm.accel = hosts._wait_for(running_accel, f"QEMU to start in {container}", timeout=KVM_PROBE_SECONDS + 60)
    try:
        hosts._wait_for(vm.boot_id, f"SSH in the VM {name}", timeout=BOOT_TIMEOUT, interval=2)
    except hosts.TestbedError as error:
        raise hosts.TestbedError(f"{error}; its console ends: {vm.console(1500)}") from None
    vm.boot_seconds = time.monotonic() - began
    return vm
