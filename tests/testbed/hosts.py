"""Real test hosts: Debian trixie containers that boot systemd and sshd and can
run Docker, reached over SSH by pyinfra's paramiko connector.

The container flags are the set measured to work on these machines
(`--privileged` does not: CAP_SYS_RESOURCE is missing from the bounding set).
Every host gets its own SSH host keys, and the control side pins them in a
known_hosts file, so host-key checking stays on in tests as in production.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-image.sh"
NETWORK = "sglang-testbed"
LABEL = "sglang-testbed=1"
DEFAULT_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

# Each flag below is needed for systemd, sshd and a nested Docker engine.
RUN_FLAGS = [
    *[f"--cap-add={cap}" for cap in (
        "SYS_ADMIN", "NET_ADMIN", "SYS_MODULE", "SYS_PTRACE", "MKNOD", "NET_RAW",
        "SETFCAP", "AUDIT_WRITE", "SYS_CHROOT", "DAC_READ_SEARCH", "IPC_LOCK", "SYS_NICE",
    )],
    "--security-opt", "seccomp=unconfined",
    "--security-opt", "apparmor=unconfined",
    "--device-cgroup-rule", "a *:* rwm",
    "--cgroupns", "host",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs", "/run", "--tmpfs", "/run/lock",
]


class TestbedError(RuntimeError):
    pass


def _run(args, *, input=None, check=True, timeout=300) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        args, input=input, capture_output=True, text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise TestbedError(f"{' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def image_tag() -> str:
    """The tag names the build script's content, so an edit rebuilds."""
    digest = hashlib.sha256(BUILD_SCRIPT.read_bytes()).hexdigest()[:12]
    return f"sglang-testbed:trixie-{digest}"


def ensure_image(ca_bundle: str | None = None) -> str:
    tag = image_tag()
    if _run(["docker", "image", "inspect", tag], check=False).returncode == 0:
        return tag
    ca = ca_bundle if ca_bundle is not None else os.environ.get("TESTBED_CA_BUNDLE", DEFAULT_CA_BUNDLE)
    args = ["bash", str(BUILD_SCRIPT), tag]
    if ca and Path(ca).exists():
        args.append(ca)
    proc = subprocess.run(args, timeout=1200)
    if proc.returncode != 0:
        raise TestbedError(f"building the test-host image {tag} failed")
    return tag


STANDIN_DIR = HERE.parent / "standin"
CACHE_DIR = Path(os.environ.get("TESTBED_CACHE_DIR", "/var/tmp/sglang-testbed-cache"))


def standin_tag() -> str:
    """The stand-in image's tag names its sources, so an edit rebuilds."""
    digest = hashlib.sha256()
    for path in sorted(STANDIN_DIR.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(STANDIN_DIR).as_posix().encode() + b"\0" + path.read_bytes())
    return f"sglang-standin:{digest.hexdigest()[:12]}"


def ensure_standin_image() -> tuple[str, Path]:
    """The STAND-IN server image (tag) and its archive for sglang_image_archive; built once, then reused."""
    tag = standin_tag()
    archive = CACHE_DIR / f"{tag.replace(':', '-')}.tar.gz"
    if archive.exists() and _run(["docker", "image", "inspect", tag], check=False).returncode == 0:
        return tag, archive
    proc = subprocess.run(["bash", str(STANDIN_DIR / "build-image.sh"), tag, str(archive)], timeout=1200)
    if proc.returncode != 0:
        raise TestbedError(f"building the stand-in image {tag} failed")
    return tag, archive


def standin_data() -> dict:
    """Host data for the stand-in profile: no GPU, the stand-in image loaded from its archive, models pulled
    from the stand-in Hub."""
    from testbed import hub

    tag, archive = ensure_standin_image()
    endpoint = hub.ensure_hub().url
    return {
        "sglang_require_gpu": False,
        "sglang_image": tag,
        "sglang_image_archive": str(archive),
        "sglang_extra_env": {"STANDIN_LOAD_SECONDS": "2"},
        "sglang_ready_timeout": 60,
        # Short benchmark requests keep test runs quick; the stand-in decodes 400 tok/s per request.
        "sglang_benchmark_max_tokens": 64,
        "sglang_models": hub.registry(hub.commits()),
        "sglang_hf_endpoint": endpoint,
        # The toolchain layer downloads ~115 MB of compiler wheels per build; tests/test_toolchain.py turns it on.
        "sglang_toolchain_image": False,
    }


def ensure_network() -> None:
    if _run(["docker", "network", "inspect", NETWORK], check=False).returncode != 0:
        _run(["docker", "network", "create", "--label", LABEL, NETWORK])


def network_gateway() -> str:
    """The test network's gateway: this machine, as the test hosts reach it (stand-in package index)."""
    ensure_network()
    return _run(["docker", "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", NETWORK]).stdout.strip()


def ensure_ssh_key(directory: Path) -> Path:
    """An ed25519 key pair for the control side, made with paramiko-compatible OpenSSH format."""
    directory.mkdir(parents=True, exist_ok=True)
    key = directory / "id_ed25519"
    if not key.exists():
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sglang-testbed", "-f", str(key)])
    return key


@dataclass
class TestHost:
    name: str
    address: str
    ssh_key: Path
    known_hosts: Path

    def exec(self, command: str, *, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
        """Run a command inside the host (setup and fault injection only; checks go over SSH)."""
        return _run(["docker", "exec", self.name, "bash", "-c", command], check=check, timeout=timeout)

    def host_data(self) -> dict:
        return {
            "ssh_hostname": self.address,
            "ssh_user": "root",
            "ssh_key": str(self.ssh_key),
            "ssh_known_hosts_file": str(self.known_hosts),
            "ssh_strict_host_key_checking": "yes",
        }

    def to_json(self) -> dict:
        return {"name": self.name, "address": self.address,
                "ssh_key": str(self.ssh_key), "known_hosts": str(self.known_hosts)}


def _wait_for(predicate, what: str, timeout: float = 90, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise TestbedError(f"timed out after {timeout:.0f}s waiting for {what}")


def start_host(name: str, state_dir: Path, image: str | None = None) -> TestHost:
    """Start (or replace) one host container and return how to reach it over SSH."""
    image = image or ensure_image()
    ensure_network()
    remove_host(name)
    key = ensure_ssh_key(state_dir)
    _run([
        "docker", "run", "-d", "--name", name, "--hostname", name, "--label", LABEL,
        "--network", NETWORK, *RUN_FLAGS, "-v", f"{name}-docker:/var/lib/docker",
        image, "/sbin/init",
    ])
    host = TestHost(name, "", key, state_dir / f"known_hosts.{name}")
    pubkey = Path(f"{key}.pub").read_text()
    _wait_for(lambda: host.exec("systemctl is-system-running", check=False).stdout.strip()
              in ("running", "degraded"), f"systemd to finish booting in {name}")
    host.exec(
        "systemd-machine-id-setup >/dev/null 2>&1; ssh-keygen -A >/dev/null; "
        f"install -d -m 700 /root/.ssh && printf '%s' '{pubkey.strip()}' > /root/.ssh/authorized_keys && "
        "chmod 600 /root/.ssh/authorized_keys && systemctl reset-failed ssh.service; systemctl restart ssh"
    )
    inspect = json.loads(_run(["docker", "inspect", name]).stdout)[0]
    host.address = inspect["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]
    _wait_for(lambda: host.exec("systemctl is-active ssh", check=False).stdout.strip() == "active",
              f"sshd in {name}")
    host_key = host.exec("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()
    host.known_hosts.write_text(f"{host.address} {host_key[0]} {host_key[1]}\n")
    return host


def remove_host(name: str) -> None:
    _run(["docker", "rm", "-f", "-v", name], check=False)
    _run(["docker", "volume", "rm", "-f", f"{name}-docker"], check=False)


def stop_host(name: str) -> None:
    """Make a host unreachable the way a crashed server is: it just stops answering."""
    _run(["docker", "kill", name], check=False)
