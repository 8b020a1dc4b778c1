"""Vendors' apt repositories served on a test host (issue 58): a gpg key the test makes on that host signs them
(its fingerprint is the data the deploy may pin), nginx serves them over HTTPS with a certificate of the testbed's
CA (tls.py), which the hosts of the test trust as a site trusts its own. They carry STAND-IN packages, built with
dpkg-deb, because the vendors' packages cannot be fetched here; each says it is a stand-in in its description.

- Docker's, laid out as Docker's is (<url>/debian/gpg, `deb <url>/debian bookworm stable`), made by Debian's own
  `reprepro`: `docker-ce` is bookworm's docker.io 20.10 repackaged under Docker's name (docker.io conflicts with
  docker-ce, so it cannot be a dependency), `docker-ce-cli` depends on it, `containerd.io` on Debian's containerd;
  `docker-compose-plugin` holds trixie's compose v2 binary (the bookworm image keeps it in
  /usr/local/share/testbed/docker-compose) at /usr/libexec/docker/cli-plugins/docker-compose, where Docker's
  package puts it.
- NVIDIA's Container Toolkit's, laid out as NVIDIA's is (<url>/gpgkey, the flat `deb <url>/stable/deb/amd64 /`;
  reprepro makes no flat repository, so its index is written here from dpkg-deb's fields and signed with gpg):
  `nvidia-container-toolkit` holds a stand-in `nvidia-ctk` whose `runtime configure --runtime=docker` writes the
  nvidia runtime into /etc/docker/daemon.json as the real one does, a stand-in `nvidia-container-runtime` that runs
  runc, and a stand-in `nvidia-container-runtime-hook` (Docker registers its `nvidia` device driver when that
  program is on PATH) that lets a container start without a GPU.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from testbed import hub, tls

ROOT = "/srv/apt"
# name: (Depends, files: (source on the repository host, path in the package))
DOCKER_STANDINS = {
    "docker-ce-cli": ("docker-ce", ()),
    "containerd.io": ("containerd", ()),
    "docker-compose-plugin": ("", (("/usr/local/share/testbed/docker-compose",
                                    "/usr/libexec/docker/cli-plugins/docker-compose"),)),
}
NGINX_SITE = """server {{
    listen 443 ssl;
    ssl_certificate /etc/nginx/testbed-repo.pem;
    ssl_certificate_key /etc/nginx/testbed-repo.key;
    root {root};
}}
"""


# docker-ce: bookworm's docker.io (in the image's apt cache) under Docker's name and a stand-in version, its
# conflicts with Docker's own packages dropped, its dependencies on Debian's packages kept.
DOCKER_CE = ("dpkg-deb -R /var/cache/apt/archives/docker.io_*_amd64.deb /root/build/docker-ce && "
             "sed -i -e 's/^Package: docker.io$/Package: docker-ce/' -e 's/^Version: .*/Version: 5:99.0.0~standin/' "
             "-e '/^\\(Conflicts\\|Breaks\\|Replaces\\|Provides\\):/d' "
             "-e \"s/^Description: .*/Description: STAND-IN for the vendor's docker-ce: Debian's docker.io/\" "
             "/root/build/docker-ce/DEBIAN/control && "
             "dpkg-deb -Znone --build /root/build/docker-ce /root/debs/docker-ce.deb >/dev/null")
NVIDIA_CTK = """#!/bin/sh
# STAND-IN nvidia-ctk (sglang-hosts tests, tests/support/testbed/vendorrepo.py): only `runtime configure
# --runtime=docker`, which writes the nvidia runtime into /etc/docker/daemon.json as the real one does.
[ "$*" = "runtime configure --runtime=docker" ] || { echo "stand-in nvidia-ctk: $* is not supported" >&2; exit 2; }
python3 - <<'PY'
import json, os
path = "/etc/docker/daemon.json"
config = json.load(open(path)) if os.path.exists(path) else {}
config.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
os.makedirs("/etc/docker", exist_ok=True)
with open(path, "w") as handle:
    json.dump(config, handle, indent=4)
PY
echo "INFO Wrote updated config to /etc/docker/daemon.json"
"""
RUNTIME = ("#!/bin/sh\n# STAND-IN nvidia-container-runtime (sglang-hosts tests): no GPU here, runc runs the "
           'container.\nexec runc "$@"\n')
HOOK = "#!/bin/sh\n# STAND-IN nvidia-container-runtime-hook (sglang-hosts tests): no GPU to mount; the container " \
    "starts.\ncat >/dev/null\nexit 0\n"
TOOLKIT_STANDINS = {
    "nvidia-container-toolkit": ("", (("/root/standin/nvidia-ctk", "/usr/bin/nvidia-ctk"),
                                      ("/root/standin/nvidia-container-runtime", "/usr/bin/nvidia-container-runtime"),
                                      ("/root/standin/nvidia-container-runtime-hook",
                                       "/usr/bin/nvidia-container-runtime-hook"))),
}


@dataclass(frozen=True)
class Repository:
    docker_url: str    # what sglang_docker_apt_url names: https://<host>/linux
    toolkit_url: str   # what sglang_nvidia_toolkit_apt_url names: https://<host>/libnvidia-container
    fingerprint: str   # the signing key's, 40 hex digits


def _package(name: str, depends: str, files) -> str:
    """Shell lines that build the stand-in package ``name`` into /root/debs."""
    folder = f"/root/build/{name}"
    lines = [f"mkdir -p {folder}/DEBIAN"]
    for source, path in files:
        lines.append(f"install -D -m 755 {source} {folder}{path}")
    control = [f"Package: {name}", "Version: 5:99.0.0~standin", "Section: admin", "Priority: optional",
               "Architecture: amd64",
               "Maintainer: sglang-hosts tests <tests@testbed.invalid>",
               *([f"Depends: {depends}"] if depends else []),
               f"Description: STAND-IN for the vendor's {name} (sglang-hosts tests, testbed/vendorrepo.py)"]
    lines.append(f"printf '%s\\n' {' '.join(shlex.quote(line) for line in control)} > {folder}/DEBIAN/control")
    lines.append(f"dpkg-deb -Znone --build {folder} /root/debs/{name}.deb >/dev/null")
    return " && ".join(lines)


def serve(host) -> Repository:
    """Make and serve both stand-in repositories on ``host`` (a bookworm test host)."""
    cert, key = tls.issue(hub.test_ca(), host.address, ip_addresses=[host.address])
    host.exec("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-download reprepro nginx-light >/dev/null",
              timeout=300)
    host.exec(f"cat > /etc/nginx/testbed-repo.pem <<'EOF'\n{cert.decode()}EOF\n"
              f"cat > /etc/nginx/testbed-repo.key <<'EOF'\n{key.decode()}EOF\n"
              f"chmod 600 /etc/nginx/testbed-repo.key")
    gnupg = "GNUPGHOME=/root/repo-gnupg"
    host.exec(f"install -d -m 700 /root/repo-gnupg && {gnupg} gpg --batch --quiet --passphrase '' "
              "--quick-gen-key 'sglang-hosts testbed apt <apt@testbed.invalid>' ed25519 sign never")
    fingerprint = host.exec(f"{gnupg} gpg --with-colons --list-keys | awk -F: '/^fpr/ {{print $10; exit}}'"
                            ).stdout.strip()
    assert len(fingerprint) == 40, fingerprint
    base = f"{ROOT}/linux/debian"
    for name, text in (("nvidia-ctk", NVIDIA_CTK), ("nvidia-container-runtime", RUNTIME),
                       ("nvidia-container-runtime-hook", HOOK)):
        host.exec(f"install -d /root/standin && cat > /root/standin/{name} <<'EOF'\n{text}EOF")
    build = " && ".join(_package(name, depends, files)
                        for name, (depends, files) in {**DOCKER_STANDINS, **TOOLKIT_STANDINS}.items())
    host.exec(f"mkdir -p /root/debs {base}/conf && {build} && {DOCKER_CE}", timeout=300)
    distributions = ["Origin: sglang-testbed", "Label: STAND-IN Docker repository", "Codename: bookworm",
                     "Architectures: amd64", "Components: stable", f"SignWith: {fingerprint}"]
    host.exec(f"printf '%s\\n' {' '.join(shlex.quote(line) for line in distributions)} > {base}/conf/distributions && "
              f"{gnupg} reprepro -b {base} includedeb bookworm /root/debs/docker-ce.deb "
              f"{' '.join(f'/root/debs/{name}.deb' for name in DOCKER_STANDINS)} >/dev/null && "
              f"{gnupg} gpg --armor --export {fingerprint} > {base}/gpg", timeout=300)
    flat = f"{ROOT}/libnvidia-container/stable/deb/amd64"
    debs = " ".join(f"{name}.deb" for name in TOOLKIT_STANDINS)
    host.exec(f"mkdir -p {flat} && cp {' '.join(f'/root/debs/{n}.deb' for n in TOOLKIT_STANDINS)} {flat}/ && "
              f"cd {flat} && for deb in {debs}; do dpkg-deb -f $deb; echo \"Filename: ./$deb\"; "
              "echo \"Size: $(stat -c %s $deb)\"; echo \"SHA256: $(sha256sum $deb | cut -d' ' -f1)\"; echo; "
              "done > Packages && { echo 'Origin: sglang-testbed'; echo 'Label: STAND-IN NVIDIA container toolkit'; "
              "echo \"Date: $(date -Ru)\"; echo 'SHA256:'; "
              "echo \" $(sha256sum Packages | cut -d' ' -f1) $(stat -c %s Packages) Packages\"; } > Release && "
              f"{gnupg} gpg --batch --yes --clearsign -o InRelease Release && "
              f"{gnupg} gpg --batch --yes -abs -o Release.gpg Release && "
              f"{gnupg} gpg --armor --export {fingerprint} > {ROOT}/libnvidia-container/gpgkey")
    host.exec(f"cat > /etc/nginx/sites-enabled/default <<'EOF'\n{NGINX_SITE.format(root=ROOT)}EOF\n"
              "systemctl restart nginx")
    return Repository(f"https://{host.address}/linux", f"https://{host.address}/libnvidia-container", fingerprint)


def trust_command() -> str:
    """What makes a test host trust the repository's certificate (the testbed's CA), as a site's servers trust its
    own CA."""
    ca = hub.test_ca()[0].read_text()
    return (f"cat > /usr/local/share/ca-certificates/testbed-ca.crt <<'EOF'\n{ca}EOF\n"
            "update-ca-certificates >/dev/null 2>&1")
