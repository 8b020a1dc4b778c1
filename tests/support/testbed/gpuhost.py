"""STAND-INS that give a container test host a GPU server's driver life (tests/e2e/test_driver_roll.py,
docs/stand-ins.md): what cannot exist in a container that shares this machine's kernel.

- `nvidia-smi` (/usr/local/bin): the H200's recorded documents (tests/unit/fixtures), its driver version the one
  the "loaded module" reports in /proc/driver/nvidia/version (a tmpfs there, as tests/e2e/test_gpu_driver.py).
- Docker's GPU request (`deploy.resources.reservations.devices: driver nvidia`): the Docker engine serves it when
  `nvidia-container-runtime-hook` is on its PATH at its start (moby's daemon/nvidia_linux.go); the stand-in hook
  reads the container's state and does nothing. The engine lists an `nvidia` runtime (/etc/docker/daemon.json)
  whose stand-in runs runc, as the Container Toolkit's does after its own hook.
- NVIDIA's CUDA repository: a flat apt repository (as NVIDIA's is: `deb URL/debian13/x86_64/ /`), its Packages
  and InRelease written here and signed by a gpg key each run makes, served over TLS on the host's loopback;
  it holds stand-in driver packages of the names the deploy installs (machine/gpus.py DRIVER_PACKAGES), each
  installing a kernel module `modinfo -k KVER` reports at the packaged version (an ELF object whose .modinfo
  section objcopy wrote, with depmod's index, both made here). A second flat repository on the same server,
  already in the host's sources, stands in for Debian's archive of the running kernel: its
  `linux-headers-$(uname -r)` (no Debian source holds this machine's kernel's headers).
- `reboot` (/usr/local/sbin, first in root's PATH and in sudo's secure_path): what a reboot does as seen from
  outside: every SSH session drops, the Docker engine stops, the kernel's boot id is new (a file bind-mounted over
  /proc/sys/kernel/random/boot_id), the loaded driver is the one installed for the kernel (its line in
  /proc/driver/nvidia/version), and the engine starts again, its containers restarted by their policy.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
from email.utils import formatdate
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "unit" / "fixtures"
MODULE_LINE = (FIXTURES / "driver" / "h200-proc-driver-nvidia-version.txt").read_text()
RECORDED_DRIVER = "580.159.04"   # the version in MODULE_LINE and the recorded q.xml
PORT = 8443
REPO_DIR = "/root/standin-repo"
SHARE = "/usr/local/share/standin-gpu"
CUDA_DIR = "debian13/x86_64"     # CUDA_REPO_KEYS/CUDA_REPO_ARCH for a trixie amd64 host
CUDA_KEY_FILE = "8793F200.pub"

NVIDIA_SMI = f"""#!/bin/sh
# STAND-IN nvidia-smi (tests/support/testbed/gpuhost.py): the H200's recorded outputs, no GPU; the driver it reports
# is the loaded module's (/proc/driver/nvidia/version), as the real one's is.
v=$(sed -n '1s/.*Kernel Module//p' /proc/driver/nvidia/version 2>/dev/null \\
    | grep -o '[0-9][0-9]*[.][0-9][0-9.]*[0-9]' | head -n 1)
[ -n "$v" ] || {{ echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2; exit 9; }}
case "$*" in
  "-q -x") sed "s|<driver_version>[^<]*<|<driver_version>$v<|" {SHARE}/q.xml ;;
  "topo -m") cat {SHARE}/topo.txt ;;
  --query-gpu=*) cat {SHARE}/query.csv ;;
  *) echo "stand-in nvidia-smi: $* is not recorded" >&2; exit 2 ;;
esac
"""
HOOK = """#!/bin/sh
# STAND-IN nvidia-container-runtime-hook (tests/support/testbed/gpuhost.py): no GPU to hand to the container.
cat >/dev/null
exit 0
"""
RUNTIME = """#!/bin/sh
# STAND-IN nvidia-container-runtime (tests/support/testbed/gpuhost.py): runc, as the real one is after its hook.
exec runc "$@"
"""
REBOOT = f"""#!/bin/sh
# STAND-IN reboot (tests/support/testbed/gpuhost.py): a container cannot reboot; this does what a reboot does as seen
# from outside, detached from the session that asked.
setsid sh {SHARE}/boot.sh >>/var/log/standin-reboot.log 2>&1 </dev/null &
exit 0
"""
BOOT = f"""#!/bin/sh
# STAND-IN for a boot (tests/support/testbed/gpuhost.py): sessions drop, the engine stops, a new boot id, the driver
# installed for this kernel loaded, the engine starts (its containers restarted by their policy).
echo "$(date -u +%FT%TZ) going down"
sleep 1
for p in $(pgrep -x sshd-session) $(pgrep -f '^sshd: [^ ]*@'); do kill -KILL "$p" 2>/dev/null; done
systemctl stop docker.service docker.socket
cat /proc/sys/kernel/random/uuid > /run/standin-boot-id
umount /proc/sys/kernel/random/boot_id 2>/dev/null
mount --bind /run/standin-boot-id /proc/sys/kernel/random/boot_id
v=$(modinfo -k "$(uname -r)" -F version nvidia 2>/dev/null | head -n 1)
if [ -n "$v" ]; then sed "s/@VERSION@/$v/" {SHARE}/version.template > /proc/driver/nvidia/version
else rm -f /proc/driver/nvidia/version; fi
sleep 3
systemctl start docker.socket docker.service
echo "$(date -u +%FT%TZ) up: boot $(cat /proc/sys/kernel/random/boot_id), driver ${{v:-none}}"
"""
SERVER = f"""import functools, http.server, ssl
# STAND-IN for NVIDIA's CUDA repository and the kernel's Debian archive (tests/support/testbed/gpuhost.py).
http.server.SimpleHTTPRequestHandler.protocol_version = "HTTP/1.1"   # apt's TLS wants no bare close
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory="{REPO_DIR}")
server = http.server.ThreadingHTTPServer(("127.0.0.1", {PORT}), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/root/standin-repo-tls/cert.pem", "/root/standin-repo-tls/key.pem")
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""


def _run(*args: str, cwd: Path | None = None, env: dict | None = None) -> str:
    return subprocess.run(list(args), check=True, capture_output=True, text=True, timeout=120, cwd=cwd,
                          env=env).stdout


def module_file(version: str, work: Path) -> Path:
    """A kernel module file modinfo reports as NVIDIA's ``version``: an ELF object with a .modinfo section."""
    (work / "one").write_bytes(b"\0")
    (work / "modinfo").write_bytes(f"version={version}\0license=Dual MIT/GPL\0name=nvidia\0"
                                   "description=STAND-IN for NVIDIA's kernel module\0".encode())
    _run("objcopy", "-I", "binary", "-O", "elf64-x86-64", "-B", "i386:x86-64", str(work / "one"), str(work / "e.o"))
    _run("objcopy", "--add-section", f".modinfo={work / 'modinfo'}", str(work / "e.o"), str(work / "nvidia.ko"))
    return work / "nvidia.ko"


def deb(name: str, version: str, work: Path, files: dict[str, Path] | None = None, depends: str = "") -> Path:
    root = work / f"{name}-root"
    (root / "DEBIAN").mkdir(parents=True)
    for target, source in (files or {}).items():
        (root / target.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, root / target.lstrip("/"))
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: tests <tests@example.invalid>\n"
        + (f"Depends: {depends}\n" if depends else "")
        + f"Description: STAND-IN {name} (tests/support/testbed/gpuhost.py)\n")
    out = work / f"{name}_{version}_all.deb"
    _run("dpkg-deb", "--root-owner-group", "--build", str(root), str(out))
    return out


def _flat_repository(directory: Path, debs: list[Path], gnupg: Path) -> None:
    """Packages, Packages.gz, Release and InRelease of a flat apt repository holding ``debs``, signed."""
    directory.mkdir(parents=True, exist_ok=True)
    stanzas = []
    for package in debs:
        shutil.copy(package, directory / package.name)
        data = package.read_bytes()
        control = _run("dpkg-deb", "-f", str(package)).rstrip("\n")
        stanzas.append(f"{control}\nFilename: ./{package.name}\nSize: {len(data)}\n"
                       f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    packages = "\n".join(stanzas).encode()
    (directory / "Packages").write_bytes(packages)
    (directory / "Packages.gz").write_bytes(gzip.compress(packages))
    sums = "".join(f" {hashlib.sha256((directory / n).read_bytes()).hexdigest()} "
                   f"{(directory / n).stat().st_size} {n}\n" for n in ("Packages", "Packages.gz"))
    (directory / "Release").write_text(f"Origin: standin\nLabel: standin\nArchitectures: all amd64\n"
                                       f"Date: {formatdate(usegmt=True)}\nSHA256:\n{sums}")
    env = {**os.environ, "GNUPGHOME": str(gnupg)}
    _run("gpg", "--batch", "--yes", "--clearsign", "-o", str(directory / "InRelease"), str(directory / "Release"),
         env=env)


def build(work: Path, driver_version: str, kernel: str) -> tuple[Path, str]:
    """The repositories' tree (to copy to REPO_DIR on a host) and the signing key's fingerprint: the CUDA
    repository at CUDA_DIR holding nvidia-open and cuda-drivers ``driver_version``-1 (module for ``kernel``),
    and kernel/ holding linux-headers-``kernel``; the public key at CUDA_DIR/CUDA_KEY_FILE and kernel.asc."""
    work.mkdir(parents=True, exist_ok=True)
    gnupg = Path(tempfile.mkdtemp(prefix="gnupg-", dir=work))
    gnupg.chmod(0o700)
    env = {**os.environ, "GNUPGHOME": str(gnupg)}
    _run("gpg", "--batch", "--passphrase", "", "--quick-gen-key", "STAND-IN CUDA repository <tests@example.invalid>",
         "ed25519", "sign", "never", env=env)
    fingerprint = next(line.split(":")[9] for line in _run("gpg", "--with-colons", "--list-keys", env=env).splitlines()
                       if line.startswith("fpr:"))
    public = _run("gpg", "--armor", "--export", fingerprint, env=env)
    modules = work / "modroot" / "lib" / "modules" / kernel
    (modules / "updates" / "dkms").mkdir(parents=True, exist_ok=True)
    shutil.copy(module_file(driver_version, work), modules / "updates" / "dkms" / "nvidia.ko")
    _run("depmod", "-b", str(work / "modroot"), kernel)
    files = {f"/lib/modules/{kernel}/{p.relative_to(modules)}": p for p in modules.rglob("*") if p.is_file()}
    driver = [deb(name, f"{driver_version}-1", work, files if name == "nvidia-open" else None,
                  depends="kmod" if name == "nvidia-open" else f"nvidia-open (= {driver_version}-1)")
              for name in ("nvidia-open", "cuda-drivers")]
    tree = work / "repo"
    _flat_repository(tree / CUDA_DIR, driver, gnupg)
    (tree / CUDA_DIR / CUDA_KEY_FILE).write_text(public)
    _flat_repository(tree / "kernel", [deb(f"linux-headers-{kernel}", "1", work)], gnupg)
    (tree / "kernel.asc").write_text(public)
    shutil.rmtree(gnupg, ignore_errors=True)
    return tree, fingerprint


def prepare(host, tree: Path, cert_key: tuple[bytes, bytes], trust_command: str) -> None:
    """Before the host's first deploy: the stand-ins above, the repositories served, the kernel's source added."""
    cert, key = cert_key
    host.exec(f"mkdir -p {SHARE} /root/standin-repo-tls /etc/docker && rm -rf {REPO_DIR} && {trust_command}")
    copies = {FIXTURES / "h200-2026-12-04" / "q.xml": f"{SHARE}/q.xml",
              FIXTURES / "nvidia-smi" / "h200-1gpu.query.csv": f"{SHARE}/query.csv",
              FIXTURES / "nvidia-smi" / "h200-1gpu.topo.txt": f"{SHARE}/topo.txt", tree: REPO_DIR}
    for source, target in copies.items():
        subprocess.run(["docker", "cp", str(source), f"{host.container}:{target}"], check=True, capture_output=True,
                       timeout=120)
    texts = {"/usr/local/bin/nvidia-smi": NVIDIA_SMI, "/usr/local/bin/nvidia-container-runtime-hook": HOOK,
             "/usr/local/bin/nvidia-container-runtime": RUNTIME, "/usr/local/sbin/reboot": REBOOT,
             f"{SHARE}/boot.sh": BOOT, f"{SHARE}/version.template": MODULE_LINE.replace(RECORDED_DRIVER, "@VERSION@"),
             "/root/standin-repo-tls/cert.pem": cert.decode(), "/root/standin-repo-tls/key.pem": key.decode(),
             "/root/standin-repo.py": SERVER,
             "/etc/docker/daemon.json":
                 '{"runtimes": {"nvidia": {"path": "/usr/local/bin/nvidia-container-runtime"}}}\n',
             "/etc/apt/sources.list.d/standin-kernel.list":
                 f"deb [signed-by=/etc/apt/keyrings/standin-kernel.asc] https://localhost:{PORT}/kernel/ /\n"}
    for path, text in texts.items():
        host.exec(f"cat > {path} <<'STANDIN_EOF'\n{text}STANDIN_EOF")
    host.exec("chmod 755 /usr/local/bin/nvidia-smi /usr/local/bin/nvidia-container-runtime-hook "
              "/usr/local/bin/nvidia-container-runtime /usr/local/sbin/reboot && "
              f"install -d -m 755 /etc/apt/keyrings && install -m 644 {REPO_DIR}/kernel.asc "
              "/etc/apt/keyrings/standin-kernel.asc && "
              "setsid nohup python3 /root/standin-repo.py >/root/standin-repo.log 2>&1 </dev/null & "
              f"for i in $(seq 50); do curl -sf -o /dev/null https://localhost:{PORT}/kernel/InRelease && exit 0; "
              "sleep 0.2; done; exit 1")
    # A GPU server comes with Docker and NVIDIA's runtime (the preflight refuses one without): the engine starts
    # with the stand-in hook on its PATH and the runtime in its daemon.json (the packages from the image's cache).
    host.exec("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose >/dev/null && "
              "systemctl restart docker && docker info --format '{{json .Runtimes}}' | grep -q nvidia", timeout=600)
    load_driver(host, RECORDED_DRIVER)


def load_driver(host, version: str) -> None:
    """The host's loaded NVIDIA module, as the kernel reports it, is ``version`` (a tmpfs at /proc/driver)."""
    host.exec("mountpoint -q /proc/driver || mount -t tmpfs -o size=1m nvdriver /proc/driver; "
              f"mkdir -p /proc/driver/nvidia && sed 's/@VERSION@/{version}/' {SHARE}/version.template "
              "> /proc/driver/nvidia/version")
