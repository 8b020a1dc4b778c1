"""A REAL container registry on the test network: Debian's `docker-registry` package (the CNCF distribution
registry 2.8), not a stand-in. It serves HTTPS with a certificate from the testbed CA (tls.test_ca()) whose SAN
is its IP address on the test network, so an image reference `IP:PORT/repo:tag` means the same on this machine
and on the test hosts (this machine cannot resolve container names).

Each test run has its own registry container, named with the run's prefix and labelled like the run's other
objects; the sandbox uses the unprefixed one. While it runs, this machine's Docker engine trusts it through
/etc/docker/certs.d/IP:PORT/ca.crt; that directory carries a marker naming the run, and the run's cleanup
(testbed.hosts.remove_run_objects) removes it together with every local image reference under that address.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import ssl
import subprocess
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from testbed import hosts, tls
from testbed.hosts import TestbedError, _run

NAME = "sglang-registry"
PORT = 5000
CERTS_D = Path("/etc/docker/certs.d")
MARKER = "sglang-testbed.run"   # Docker reads only *.crt, *.cert and *.key in a certs.d directory
CONFIG_DIR = "/etc/docker/registry/testbed"
STORAGE = "/var/lib/docker-registry"
# The package, on the testbed base image; apt over plain HTTP to Debian's mirror works from containers.
BUILD = ("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
         "docker-registry >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*")
# The serving container starts before its certificate exists (the certificate names the container's IP, known
# only once it runs): it waits at most 60 s for the config, which is written last.
SERVE = (f"i=0; while [ ! -s {CONFIG_DIR}/config.yml ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; "
         f"exec /usr/bin/docker-registry serve {CONFIG_DIR}/config.yml")
CONFIG = f"""\
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {STORAGE}
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: :{PORT}
  tls:
    certificate: {CONFIG_DIR}/cert.pem
    key: {CONFIG_DIR}/key.pem
health:
  storagedriver:
    enabled: false
"""
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
_DIGEST_RE = re.compile(r"digest: (sha256:[0-9a-f]{64})")


# ---------------------------------------------------------------- the image

def image_tag() -> str:
    """The tag names its inputs (base image, install command, serve command), so an edit rebuilds."""
    inputs = "\0".join((hosts.image_tag(), BUILD, SERVE))
    return f"sglang-registry:{hashlib.sha256(inputs.encode()).hexdigest()[:12]}"


def ensure_image() -> str:
    """The registry image: the testbed base image plus Debian's docker-registry; built once per machine."""
    tag = image_tag()
    if _run(["docker", "image", "inspect", tag], check=False).returncode == 0:
        return tag
    base = hosts.ensure_image()
    with hosts._machine_lock("registry-image"):
        if _run(["docker", "image", "inspect", tag], check=False).returncode == 0:
            return tag  # another run built it while this one waited
        builder = hosts.container_name(f"{NAME}-build")
        _run(["docker", "rm", "-f", builder], check=False)
        try:
            _run(["docker", "run", "--name", builder, *hosts.run_labels(), "--entrypoint", "bash", base, "-c",
                  BUILD], timeout=900)
            _run(["docker", "commit", "--change", 'ENTRYPOINT ["/bin/sh", "-c"]',
                  "--change", f"CMD {json.dumps([SERVE])}", "--change", f"EXPOSE {PORT}", builder, tag])
        finally:
            _run(["docker", "rm", "-f", builder], check=False)
    return tag


# ---------------------------------------------------------------- trust on this machine

def _trust_dir(address: str) -> Path:
    return CERTS_D / address


def _trust_here(address: str, prefix: str) -> None:
    """This machine's Docker engine trusts the registry at ``address`` for run ``prefix``: ca.crt (read by dockerd
    on every connection, no restart) and the marker naming the run."""
    directory = _trust_dir(address)
    with hosts._machine_lock("registry-trust"):
        marker = directory / MARKER
        if directory.exists() and not marker.is_file():
            raise TestbedError(f"{directory} exists and is not the testbed's: remove it by hand if it is stale")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "ca.crt").write_bytes(tls.test_ca()[0].read_bytes())
        marker.write_text(json.dumps({"run": prefix, "owner": hosts._owner()}) + "\n")


def trusted_runs() -> dict[str, tuple[str, str]]:
    """{address: (run prefix, owner)} of every certs.d entry the testbed wrote on this machine."""
    runs = {}
    for marker in CERTS_D.glob(f"*/{MARKER}") if CERTS_D.is_dir() else ():
        try:
            entry = json.loads(marker.read_text())
            runs[marker.parent.name] = (entry["run"], entry["owner"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return runs


def forget_run(prefix: str) -> list[str]:
    """Remove what trusting run ``prefix``'s registry left on this machine: its certs.d entries (never another
    run's) and the local image references under their addresses. Return what was removed."""
    removed = []
    with hosts._machine_lock("registry-trust"):
        addresses = [a for a, (run, _) in trusted_runs().items() if run == prefix]
        for address in addresses:
            shutil.rmtree(_trust_dir(address), ignore_errors=True)
            removed.append(str(_trust_dir(address)))
    try:
        listed = _run(["docker", "image", "ls", "--digests", "--format", "{{.Repository}} {{.Tag}} {{.Digest}}"],
                      check=False).stdout.splitlines() if addresses else []
    except (OSError, subprocess.TimeoutExpired):
        listed = []
    for line in listed:
        repository, tag, digest = (line.split() + ["", "", ""])[:3]
        if any(repository.startswith(f"{a}/") for a in addresses):
            ref = f"{repository}:{tag}" if tag != "<none>" else f"{repository}@{digest}"
            if _run(["docker", "image", "rm", ref], check=False).returncode == 0:
                removed.append(ref)
    return removed


# ---------------------------------------------------------------- the registry

@dataclass
class Registry:
    """A running registry container, seen from this machine."""

    name: str       # the container's name
    address: str    # "IP:PORT", as both this machine's Docker engine and the test hosts reach it

    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(tls.test_ca()[0]))

    def _request(self, method: str, path: str, headers: dict | None = None):
        # No proxy: the registry is a container of this run on the test network.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                             urllib.request.HTTPSHandler(context=self._ssl()))
        request = urllib.request.Request(f"https://{self.address}{path}", method=method, headers=headers or {})
        return opener.open(request, timeout=10)

    def digest(self, repository: str, tag: str) -> str:
        """The manifest digest the registry serves now for ``repository:tag`` (HEAD on the v2 API)."""
        try:
            with self._request("HEAD", f"/v2/{repository}/manifests/{tag}", {"Accept": MANIFEST_TYPES}) as reply:
                return reply.headers["Docker-Content-Digest"]
        except urllib.error.HTTPError as error:
            raise TestbedError(f"registry {self.address}: {repository}:{tag} -> HTTP {error.code}") from None

    def push(self, local_image: str, repository: str, tag: str) -> str:
        """Tag a local image (this machine's engine) as address/repository:tag, push it, return the manifest
        digest 'sha256:...' the registry serves for that tag. The local tag stays until the run's cleanup."""
        ref = f"{self.address}/{repository}:{tag}"
        _run(["docker", "tag", local_image, ref])
        pushed = _DIGEST_RE.search(_run(["docker", "push", ref], timeout=600).stdout)
        served = self.digest(repository, tag)
        if pushed is None or pushed[1] != served:
            raise TestbedError(f"pushed {ref} as {pushed and pushed[1]}, but the registry serves {served}")
        return served

    def trust_command(self) -> str:
        """Shell for a test host (as root) so its Docker engine trusts the registry; works before Docker is
        installed there (dockerd reads certs.d on every connection)."""
        pem = tls.test_ca()[0].read_text()
        directory = _trust_dir(self.address)
        return f"install -d -m 755 {directory} && printf '%s' '{pem}' > {directory}/ca.crt"

    def ready(self) -> bool:
        try:
            with self._request("GET", "/v2/") as reply:
                return reply.status == 200
        except OSError:
            return False


def _address(name: str) -> str | None:
    inspect = _run(["docker", "inspect", name], check=False)
    if inspect.returncode != 0:
        return None
    info = json.loads(inspect.stdout)[0]
    network = info["NetworkSettings"]["Networks"].get(hosts.NETWORK) if info["State"]["Running"] else None
    return f"{network['IPAddress']}:{PORT}" if network and network.get("IPAddress") else None


def _configure(name: str, address: str) -> None:
    """Give the started container its certificate for ``address`` and then its config (written last: the
    container's command waits for it)."""
    host = address.rpartition(":")[0]
    cert, key = tls.issue(tls.test_ca(), address, dns_names=[name], ip_addresses=[host])
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for member, data, mode in (("testbed", None, 0o755), ("testbed/cert.pem", cert, 0o644),
                                   ("testbed/key.pem", key, 0o600), ("testbed/address", address.encode(), 0o644),
                                   ("testbed/config.yml.new", CONFIG.encode(), 0o644)):
            info = tarfile.TarInfo(member)
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    copied = subprocess.run(["docker", "cp", "-", f"{name}:{CONFIG_DIR.rpartition('/')[0]}"],
                            input=archive.getvalue(), capture_output=True, timeout=60)
    if copied.returncode != 0:
        raise TestbedError(f"copying the registry's config into {name} failed: {copied.stderr.decode()[-500:]}")
    _run(["docker", "exec", name, "mv", f"{CONFIG_DIR}/config.yml.new", f"{CONFIG_DIR}/config.yml"])


def _configured_for(name: str) -> str:
    return _run(["docker", "exec", name, "cat", f"{CONFIG_DIR}/address"], check=False).stdout.strip()


def ensure_registry(name: str | None = None) -> Registry:
    """This run's registry (started unless it runs already, with a certificate for its current address); this
    machine's Docker engine trusts it until the run's objects are removed."""
    name = name or hosts.container_name(NAME)
    prefix = name[:-len(NAME)] if name.endswith(NAME) else ""
    tag = ensure_image()
    hosts.ensure_network()
    address = _address(name)
    current = address and _configured_for(name) == address and \
        _run(["docker", "inspect", "-f", "{{.Config.Image}}", name], check=False).stdout.strip() == tag
    if not current:
        # Gone, stopped, an older image, or back from a restart at a new IP its certificate does not name.
        _run(["docker", "rm", "-f", "-v", name], check=False)
        _run(["docker", "run", "-d", "--name", name, *hosts.run_labels(prefix), "--network", hosts.NETWORK,
              "--restart", "unless-stopped", tag])
        address = hosts._wait_for(lambda: _address(name), f"the registry {name} to get an address", timeout=30)
        _configure(name, address)
    _trust_here(address, prefix)
    registry = Registry(name, address)
    try:
        hosts._wait_for(registry.ready, f"the registry at {address} to answer", timeout=60)
    except TestbedError as error:
        logs = _run(["docker", "logs", "--tail", "20", name], check=False)
        raise TestbedError(f"{error}: {logs.stderr[-2000:]}") from None
    return registry


def tiny_image(ref: str, content: str) -> str:
    """A one-file image made locally (docker import), named ``ref``: a push that takes no time."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("content")
        info.size = len(content.encode())
        tar.addfile(info, io.BytesIO(content.encode()))
    subprocess.run(["docker", "import", "-", ref], input=archive.getvalue(), check=True, capture_output=True,
                   timeout=60)
    return ref
