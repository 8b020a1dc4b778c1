"""Real test hosts: Debian trixie containers that boot systemd and sshd and can
run Docker, reached over SSH by pyinfra's paramiko connector.

The container flags are the set measured to work on these machines
(`--privileged` does not: CAP_SYS_RESOURCE is missing from the bounding set).
Every host gets its own SSH host keys, and the control side pins them in a
known_hosts file, so host-key checking stays on in tests as in production.

Test runs can share a machine: every Docker object a test run creates (host
containers, their volumes, the stand-in Hub, the registry) is named with the
run's prefix (run_prefix(), e.g. "t3f9a1c-") and labelled with it, while the
logical name (the inventory host name and the container's --hostname) stays as
the tests write it. Outside a test run (the sandbox, bench/run.py) the prefix is empty.
The test network and the images are shared by all runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from sglang_infra.plan.gateway_pin import GATEWAY_VERSION

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-image.sh"
NETWORK = "sglang-testbed"
LABEL = "sglang-testbed=1"
RUN_LABEL = "sglang-testbed.run"
RUN_PREFIX_ENV = "TESTBED_RUN_PREFIX"
OWNER_LABEL = "sglang-testbed.owner"
OWNER_ENV = "TESTBED_RUN_OWNER"
_PREFIX_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
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


# Seconds a host may take to boot: about 5 s on an idle machine; over 90 s was seen while another run's image
# builds loaded both cores.
BOOT_TIMEOUT = 300

# The non-root login every test host has, with passwordless sudo (TestHost.login).
LOGIN_USER = "deploy"


class TestbedError(RuntimeError):
    pass


def _run(args, *, input=None, check=True, timeout=300) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        args, input=input, capture_output=True, text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise TestbedError(f"{' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


# ---------------------------------------------------------------- per-run names

_run_prefix = ""


def new_run_prefix() -> str:
    """The prefix for a new test run: $TESTBED_RUN_PREFIX if set, else "t" and 6 random hex digits and "-"."""
    prefix = os.environ.get(RUN_PREFIX_ENV) or f"t{secrets.token_hex(3)}-"
    if not _PREFIX_RE.match(prefix):
        raise TestbedError(f"{RUN_PREFIX_ENV}={prefix!r} is not usable in Docker names ([a-zA-Z0-9][a-zA-Z0-9_.-]*)")
    return prefix


def set_run_prefix(prefix: str) -> None:
    """Name this process's Docker objects with ``prefix`` from now on ("" for none: the sandbox, bench)."""
    global _run_prefix
    if prefix and not _PREFIX_RE.match(prefix):
        raise TestbedError(f"run prefix {prefix!r} is not usable in Docker names")
    _run_prefix = prefix


def run_prefix() -> str:
    return _run_prefix


def container_name(name: str, prefix: str | None = None) -> str:
    """The Docker name of the object whose logical name is ``name``, in the current run (or ``prefix``'s)."""
    return f"{_run_prefix if prefix is None else prefix}{name}"


def _owner() -> str:
    """host:pid of the process that owns this run (conftest.py exports the pytest process's pid)."""
    return f"{socket.gethostname()}:{os.environ.get(OWNER_ENV) or os.getpid()}"


def run_labels(prefix: str | None = None) -> list[str]:
    """docker --label arguments for an object of the current run (or ``prefix``'s)."""
    prefix = _run_prefix if prefix is None else prefix
    if not prefix:
        return ["--label", LABEL]
    return ["--label", LABEL, "--label", f"{RUN_LABEL}={prefix}", "--label", f"{OWNER_LABEL}={_owner()}"]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_runs() -> list[str]:
    """Remove the objects of runs that were killed before their cleanup: those whose owner process ran on this
    machine (same hostname) and is gone. Runs still alive, and runs of other machines, are left alone."""
    from testbed import registry

    owners = []   # (run prefix, owner) of every labelled object and every registry this machine trusts
    try:
        for kind in ("container", "volume"):
            listed = _run(["docker", kind, "ls", *(["-a"] if kind == "container" else []),
                           "--filter", f"label={OWNER_LABEL}", "--format",
                           f'{{{{.Label "{RUN_LABEL}"}}}} {{{{.Label "{OWNER_LABEL}"}}}}'], check=False)
            owners += [tuple(line.strip().partition(" ")[::2]) for line in listed.stdout.splitlines()]
    except (OSError, subprocess.TimeoutExpired):
        return []
    owners += registry.trusted_runs().values()
    stale = set()
    for prefix, owner in owners:
        host, _, pid = owner.rpartition(":")
        if prefix and prefix != _run_prefix and host == socket.gethostname() and pid.isdigit() \
                and not pid_alive(int(pid)):
            stale.add(prefix)
    return [name for prefix in sorted(stale) for name in remove_run_objects(prefix)]


def remove_run_objects(prefix: str | None = None) -> list[str]:
    """Remove every container and volume of one run (never the shared network or images), then what trusting
    its registry left on this machine (certs.d entries, image references under its address); return their names.
    Refuses the empty prefix: unprefixed objects belong to the sandbox."""
    from testbed import registry

    prefix = _run_prefix if prefix is None else prefix
    if not prefix:
        return []
    removed = []
    try:
        for kind in ("container", "volume"):  # containers first: a volume in use cannot be removed
            fmt = "{{.Names}}" if kind == "container" else "{{.Name}}"
            listed = _run(["docker", kind, "ls", *(["-a"] if kind == "container" else []),
                           "--filter", f"label={RUN_LABEL}={prefix}", "--format", fmt], check=False)
            names = [n for n in listed.stdout.split() if n.startswith(prefix)]
            if names:
                _run(["docker", kind, "rm", "-f", *(["-v"] if kind == "container" else []), *names], check=False)
                removed += names
    except (OSError, subprocess.TimeoutExpired):
        pass  # no Docker here (unit tests only): nothing of this run to remove
    return removed + registry.forget_run(prefix)


LOCK_DIR = Path("/var/tmp/sglang-testbed-locks")


@contextlib.contextmanager
def _machine_lock(what: str):
    """One creator of a shared object (an image, the network) at a time on this machine, so concurrent runs
    wait for each other instead of racing (Docker even allows two networks of one name)."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_DIR / f"{what}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---------------------------------------------------------------- images

def image_tag() -> str:
    """The tag names the build script's content, so an edit rebuilds."""
    digest = hashlib.sha256(BUILD_SCRIPT.read_bytes()).hexdigest()[:12]
    return f"sglang-testbed:trixie-{digest}"


def _present(tag: str) -> bool:
    return _run(["docker", "image", "inspect", tag], check=False).returncode == 0


def _built(tag: str, lock: str, script_args: list[str], what: str, ca_bundle: str | None) -> str:
    """``tag``, built by ``script_args`` (a build script and its arguments, the CA bundle added) once, under a
    machine lock: a run that waited finds it built by the other."""
    with _machine_lock(lock):
        if _present(tag):
            return tag  # another run built it while this one waited
        ca = ca_bundle if ca_bundle is not None else os.environ.get("TESTBED_CA_BUNDLE", DEFAULT_CA_BUNDLE)
        args = ["bash", *script_args]
        if ca and Path(ca).exists():
            args.append(ca)
        proc = subprocess.run(args, timeout=1200)
        if proc.returncode != 0:
            raise TestbedError(f"building the {what} {tag} failed")
    return tag


def ensure_image(ca_bundle: str | None = None) -> str:
    tag = image_tag()
    if _present(tag):
        return tag
    return _built(tag, "testbed-image", [str(BUILD_SCRIPT), tag], "test-host image", ca_bundle)


BOOKWORM_BUILD_SCRIPT = HERE / "build-bookworm-image.sh"


def bookworm_image_tag() -> str:
    """The Debian 12 host image's tag names its build script and the trixie image it takes compose v2 from."""
    digest = hashlib.sha256(BOOKWORM_BUILD_SCRIPT.read_bytes() + image_tag().encode()).hexdigest()[:12]
    return f"sglang-testbed:bookworm-{digest}"


def ensure_bookworm_image(ca_bundle: str | None = None) -> str:
    """The Debian 12 (bookworm) host image, built once with a machine lock as ensure_image() builds the trixie one."""
    tag = bookworm_image_tag()
    if _present(tag):
        return tag
    trixie = ensure_image(ca_bundle)
    return _built(tag, "testbed-image-bookworm", [str(BOOKWORM_BUILD_SCRIPT), tag, trixie],
                  "Debian 12 test-host image", ca_bundle)


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
    with _machine_lock("standin-image"):
        if archive.exists() and _run(["docker", "image", "inspect", tag], check=False).returncode == 0:
            return tag, archive  # another run built it while this one waited
        proc = subprocess.run(["bash", str(STANDIN_DIR / "build-image.sh"), tag, str(archive)], timeout=1200)
        if proc.returncode != 0:
            raise TestbedError(f"building the stand-in image {tag} failed")
    return tag, archive


GATEWAY_REQUIREMENTS = HERE.parent.parent.parent / "templates" / "gateway-requirements.txt"
# The operator's build of the gateway image (scripts/build-gateway-image.sh), which the tests run as it is.
GATEWAY_BUILD = HERE.parent.parent.parent / "scripts" / "build-gateway-image.sh"
# The control-plane key the tests' gateways take (sglang_router_admin_key_file): a test value, not a secret.
ADMIN_KEY = "testbed-control-plane-admin-key-0123456789"


def ensure_gateway_image() -> tuple[str, Path]:
    """The gateway image (SMG at templates/gateway-requirements.txt's pin, from its wheels, hashes checked) and
    its archive; built once, then reused.
    Its tag names the build script and the pinned requirements, so an edit of either rebuilds."""
    digest = hashlib.sha256()
    for path in (GATEWAY_BUILD, GATEWAY_REQUIREMENTS):
        digest.update(path.read_bytes())
    tag = f"sglang-smg-gateway:{GATEWAY_VERSION}-{digest.hexdigest()[:12]}"
    archive = CACHE_DIR / f"{tag.replace(':', '-')}.tar.gz"
    if archive.exists() and _run(["docker", "image", "inspect", tag], check=False).returncode == 0:
        return tag, archive
    with _machine_lock("gateway-image"):
        if archive.exists() and _run(["docker", "image", "inspect", tag], check=False).returncode == 0:
            return tag, archive
        proc = subprocess.run(["bash", str(GATEWAY_BUILD), tag, str(archive)], timeout=1200)
        if proc.returncode != 0:
            raise TestbedError(f"building the gateway image {tag} failed")
    return tag, archive


def admin_key_file() -> Path:
    """The tests' control-plane key file on the control machine (sglang_router_admin_key_file)."""
    path = CACHE_DIR / "router-admin.key"
    if not path.exists() or path.read_text().strip() != ADMIN_KEY:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(ADMIN_KEY + "\n")
        path.chmod(0o600)
    return path


def pinned_release() -> str:
    """The SGLang release of group_data's sglang_image (its tag)."""
    import runpy

    from sglang_infra.machine.sglang_args.table import image_version

    image = runpy.run_path(str(HERE.parent.parent.parent / "group_data" / "all.py"))["sglang_image"]
    release = image_version(image)
    assert release, f"group_data's sglang_image {image} names no release in its tag"
    return release


def standin_data() -> dict:
    """Host data for the stand-in profile: no GPU, the stand-in image loaded from its archive, models pulled
    from the stand-in Hub (this run's own one; the unprefixed one outside a test run)."""
    from testbed import hub

    tag, archive = ensure_standin_image()
    gateway_tag, gateway_archive = ensure_gateway_image()
    endpoint = hub.ensure_hub().url
    return {
        "sglang_require_gpu": False,
        "sglang_image": tag,
        # The stand-in speaks the pinned release's arguments: its tag names its sources, not a release, so the
        # release whose table judges its flags is group_data's (sglang_infra/machine/sglang_args/).
        "sglang_version": pinned_release(),
        "sglang_image_archive": str(archive),
        # The gateway: the real, pinned SMG in its own image, and the control-plane key the deploy alone holds.
        "sglang_router_image": gateway_tag,
        "sglang_router_image_archive": str(gateway_archive),
        "sglang_router_admin_key_file": str(admin_key_file()),
        "sglang_extra_env": {"STANDIN_LOAD_SECONDS": "2"},
        "sglang_ready_timeout": 60,
        # Short benchmark requests keep test runs quick; the stand-in decodes 400 tok/s per request.
        "sglang_benchmark_max_tokens": 64,
        "sglang_models": hub.registry(hub.commits()),
        "sglang_hf_endpoint": endpoint,
        # The toolchain layer downloads ~115 MB of compiler wheels per build; tests/e2e/test_toolchain.py turns it on.
        "sglang_toolchain_image": False,
    }


def network_ids() -> list[str]:
    """IDs of the networks named exactly NETWORK (Docker allows more than one)."""
    listed = _run(["docker", "network", "ls", "--no-trunc", "--filter", f"name=^{NETWORK}$",
                   "--format", "{{.ID}} {{.Name}}"], check=False).stdout.split("\n")
    return [line.split()[0] for line in listed if line.split()[1:] == [NETWORK]]


def ensure_network() -> None:
    """The test network, shared by every run on this machine (and the sandbox); never removed by a run."""
    if len(network_ids()) == 1:
        return
    with _machine_lock("network"):
        ids = network_ids()
        if not ids:
            _run(["docker", "network", "create", "--label", LABEL, NETWORK])
        elif len(ids) > 1:
            # Left by an unlocked race: keep one (one in use, if any), drop the empty others, or names are ambiguous.
            used = [i for i in ids if _run(["docker", "network", "inspect", "-f", "{{len .Containers}}", i],
                                           check=False).stdout.strip() not in ("", "0")]
            if len(used) > 1:
                raise TestbedError(f"{len(used)} networks named {NETWORK} are in use; remove all but one")
            keep = used[0] if used else ids[0]
            for extra in ids:
                if extra != keep:
                    _run(["docker", "network", "rm", extra], check=False)


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
    name: str            # logical name: the inventory host name and the container's hostname
    address: str
    ssh_key: Path
    known_hosts: Path
    container: str = field(default="")   # the Docker container name: the run prefix + name
    login: str = "root"                  # "root", or LOGIN_USER: a non-root login with passwordless sudo

    def __post_init__(self):
        if not self.container:
            self.container = self.name

    def exec(self, command: str, *, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
        """Run a command inside the host (setup and fault injection only; checks go over SSH)."""
        return _run(["docker", "exec", self.container, "bash", "-c", command], check=check, timeout=timeout)

    def host_data(self) -> dict:
        return {
            "ssh_hostname": self.address,
            "ssh_user": self.login,
            "ssh_key": str(self.ssh_key),
            "ssh_known_hosts_file": str(self.known_hosts),
            "ssh_strict_host_key_checking": "yes",
            # Real servers mostly: a personal login that becomes root through passwordless sudo.
            **({"_sudo": True} if self.login != "root" else {}),
        }

    def to_json(self) -> dict:
        return {"name": self.name, "address": self.address,
                "ssh_key": str(self.ssh_key), "known_hosts": str(self.known_hosts), "container": self.container}


def _wait_for(predicate, what: str, timeout: float = 90, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise TestbedError(f"timed out after {timeout:.0f}s waiting for {what}")


def start_host(name: str, state_dir: Path, image: str | None = None, login: str = "root", *,
               prefix: str | None = None) -> TestHost:
    """Start (or replace) one host container and return how to reach it over SSH.

    ``name`` is the logical name (inventory name and hostname); the container and its volume are named with
    the current run's prefix (or ``prefix``), so only this run's host of that name is replaced."""
    image = image or ensure_image()
    ensure_network()
    container = container_name(name, prefix)
    remove_host(name, prefix=prefix)
    key = ensure_ssh_key(state_dir)
    labels = run_labels(prefix)
    _run(["docker", "volume", "create", *labels, f"{container}-docker"])
    _run([
        "docker", "run", "-d", "--name", container, "--hostname", name, *labels,
        "--network", NETWORK, *RUN_FLAGS, "-v", f"{container}-docker:/var/lib/docker",
        image, "/sbin/init",
    ])
    host = TestHost(name, "", key, state_dir / f"known_hosts.{name}", container, login)
    pubkey = Path(f"{key}.pub").read_text()
    _wait_for(lambda: host.exec("systemctl is-system-running", check=False).stdout.strip()
              in ("running", "degraded"), f"systemd to finish booting in {name}", timeout=BOOT_TIMEOUT)
    host.exec(
        "systemd-machine-id-setup >/dev/null 2>&1; ssh-keygen -A >/dev/null; "
        f"install -d -m 700 /root/.ssh && printf '%s' '{pubkey.strip()}' > /root/.ssh/authorized_keys && "
        "chmod 600 /root/.ssh/authorized_keys && systemctl reset-failed ssh.service; systemctl restart ssh"
    )
    # Every host also has the non-root login LOGIN_USER, with the same key and passwordless sudo.
    host.exec(
        f"useradd --create-home --shell /bin/bash {LOGIN_USER} && "
        f"install -d -m 700 -o {LOGIN_USER} -g {LOGIN_USER} /home/{LOGIN_USER}/.ssh && "
        f"install -m 600 -o {LOGIN_USER} -g {LOGIN_USER} /root/.ssh/authorized_keys /home/{LOGIN_USER}/.ssh/ && "
        f"echo '{LOGIN_USER} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/{LOGIN_USER} && "
        f"chmod 440 /etc/sudoers.d/{LOGIN_USER}"
    )
    inspect = json.loads(_run(["docker", "inspect", container]).stdout)[0]
    host.address = inspect["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]
    _wait_for(lambda: host.exec("systemctl is-active ssh", check=False).stdout.strip() == "active",
              f"sshd in {name}")
    host_key = host.exec("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()
    host.known_hosts.write_text(f"{host.address} {host_key[0]} {host_key[1]}\n")
    return host


def _container_of(host: str | TestHost, prefix: str | None) -> str:
    return host.container if isinstance(host, TestHost) else container_name(host, prefix)


def remove_host(host: str | TestHost, *, prefix: str | None = None) -> None:
    """Remove a host (by logical name, in the current run unless ``prefix``, or a TestHost) and its volume."""
    container = _container_of(host, prefix)
    _run(["docker", "rm", "-f", "-v", container], check=False)
    _run(["docker", "volume", "rm", "-f", f"{container}-docker"], check=False)


def stop_host(host: str | TestHost, *, prefix: str | None = None) -> None:
    """Make a host unreachable the way a crashed server is: it just stops answering."""
    _run(["docker", "kill", _container_of(host, prefix)], check=False)
