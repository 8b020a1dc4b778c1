"""A vendor's apt repository served on a test host (issue 58): Debian's own `reprepro` makes it, signed by a gpg key
the test makes on that host (its fingerprint is the data the deploy may pin), nginx serves it over HTTPS with a
certificate of the testbed's CA (tls.py), which the hosts of the test trust as a site trusts its own.

It carries STAND-IN packages, built with dpkg-deb from Debian's own binaries, because Docker's packages cannot be
fetched here: `docker-ce`, `docker-ce-cli` and `containerd.io` depend on bookworm's docker.io and containerd,
`docker-compose-plugin` holds trixie's compose v2 binary (the bookworm image keeps it in
/usr/local/share/testbed/docker-compose) at /usr/libexec/docker/cli-plugins/docker-compose, where Docker's package
puts it. Each says it is a stand-in in its description. The repository is laid out as Docker's is: <url>/debian/gpg
(the key) and `deb <url>/debian bookworm stable`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from testbed import hub, tls

ROOT = "/srv/apt"
# name: (Depends, files: (source on the repository host, path in the package))
STANDINS = {
    "docker-ce": ("docker.io", ()),
    "docker-ce-cli": ("docker.io", ()),
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


@dataclass(frozen=True)
class Repository:
    url: str           # what sglang_docker_apt_url names: https://<host>/linux
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
               f"Description: STAND-IN for Docker's {name} (sglang-hosts tests, built from Debian's binaries)"]
    lines.append(f"printf '%s\\n' {' '.join(shlex.quote(line) for line in control)} > {folder}/DEBIAN/control")
    lines.append(f"dpkg-deb -Znone --build {folder} /root/debs/{name}.deb >/dev/null")
    return " && ".join(lines)


def serve(host) -> Repository:
    """Make and serve the stand-in Docker repository on ``host`` (a bookworm test host)."""
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
    build = " && ".join(_package(name, depends, files) for name, (depends, files) in STANDINS.items())
    host.exec(f"mkdir -p /root/debs {base}/conf && {build}", timeout=300)
    distributions = ["Origin: sglang-testbed", "Label: STAND-IN Docker repository", "Codename: bookworm",
                     "Architectures: amd64", "Components: stable", f"SignWith: {fingerprint}"]
    host.exec(f"printf '%s\\n' {' '.join(shlex.quote(line) for line in distributions)} > {base}/conf/distributions && "
              f"{gnupg} reprepro -b {base} includedeb bookworm /root/debs/*.deb >/dev/null && "
              f"{gnupg} gpg --armor --export {fingerprint} > {base}/gpg", timeout=300)
    host.exec(f"cat > /etc/nginx/sites-enabled/default <<'EOF'\n{NGINX_SITE.format(root=ROOT)}EOF\n"
              "systemctl restart nginx")
    return Repository(f"https://{host.address}/linux", fingerprint)


def trust_command() -> str:
    """What makes a test host trust the repository's certificate (the testbed's CA), as a site's servers trust its
    own CA."""
    ca = hub.test_ca()[0].read_text()
    return (f"cat > /usr/local/share/ca-certificates/testbed-ca.crt <<'EOF'\n{ca}EOF\n"
            "update-ca-certificates >/dev/null 2>&1")
