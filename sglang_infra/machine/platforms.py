"""Everything that differs between operating systems, in one place.

Supported: the usual GPU-server systems. The Docker packages differ per
release, and so does whether the distribution ships compose v2 at all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    name: str
    codename: str
    # Packages that give the engine plus `docker compose` (v2) from the OS's
    # own archive, or None when the archive has no compose v2.
    distribution_packages: tuple[str, ...] | None
    # Docker's apt repository path segment: <url>/<family>
    docker_repo_family: str


# The distribution's engine is named whole and installed without its recommends (tasks/docker_engine.py). Debian 13's
# docker.io recommends a developer's toolbox (git, perl, criu, dbus-user-session: 49 packages where 15 serve) and
# needrestart, whose apt hook restarts services after a library upgrade, the engine and its model server among them.
# What the engine uses is named instead: its CLI (a package of its own on Debian 13), buildx (`docker build` of the
# toolchain image), AppArmor (Docker confines containers by its docker-default profile only where the parser is
# installed), xz (image archives) and, on Ubuntu, pigz (layers unpacked on every core), which it recommends there.
PLATFORMS: dict[tuple[str, str], Platform] = {
    # bookworm ships only the Python compose v1 (1.29), so compose v2 needs Docker's repository.
    ("debian", "12"): Platform("Debian 12", "bookworm", None, "debian"),
    ("debian", "13"): Platform("Debian 13", "trixie", (
        "docker.io", "docker-cli", "docker-buildx", "docker-compose", "apparmor", "xz-utils"), "debian"),
    ("ubuntu", "22.04"): Platform("Ubuntu 22.04", "jammy", (
        "docker.io", "docker-compose-v2", "apparmor", "xz-utils", "pigz"), "ubuntu"),
    ("ubuntu", "24.04"): Platform("Ubuntu 24.04", "noble", (
        "docker.io", "docker-compose-v2", "apparmor", "xz-utils", "pigz"), "ubuntu"),
}

# The packages Docker's own repository provides.
DOCKER_REPO_PACKAGES = ("docker-ce", "docker-ce-cli", "containerd.io", "docker-compose-plugin")

NOLOGIN_SHELL = "/usr/sbin/nologin"


def lookup(os_id: str | None, os_version: str | None) -> Platform | None:
    if not os_id or not os_version:
        return None
    version = os_version if os_id == "ubuntu" else os_version.split(".")[0]
    return PLATFORMS.get((os_id, version))


def supported_names() -> str:
    return ", ".join(p.name for p in PLATFORMS.values())


def support_problem(os_id, os_version, docker_source: str, engine_works: bool, gets_docker: bool = True):
    """(problem, fix) when this host cannot be converged as asked, else None; ``gets_docker``: the host runs Docker
    (a host only in the monitor group never does, so its engine is never judged)."""
    platform = lookup(os_id, os_version)
    if platform is None:
        return (f"unsupported operating system {os_id or 'unknown'} {os_version or ''}".rstrip(),
                f"use one of: {supported_names()}")
    if engine_works or not gets_docker:
        return None  # a working engine is left alone, wherever it came from
    if docker_source == "distribution" and platform.distribution_packages is None:
        return (f"{platform.name} ships no Docker Compose v2 in its own archive",
                "set sglang_docker_source = 'docker' for this host or group to use Docker's apt repository")
    return None


def docker_packages(platform: Platform, docker_source: str) -> tuple[str, ...]:
    if docker_source == "docker":
        return DOCKER_REPO_PACKAGES
    assert platform.distribution_packages is not None
    return platform.distribution_packages


def engine_works(docker) -> bool:
    """
    A Docker engine the deploy can use as it is, from the snapshot's docker
    section: the CLI, the compose v2 CLI plugin (wherever the CLI finds it,
    root's own ~/.docker/cli-plugins included) and an engine that answers or
    that systemd can start (docker.service known and not masked). Whether it
    runs at this moment is not asked: a stopped or socket-activated engine is
    started by tasks/docker_engine.py, and the answer is the same on every
    run. Compose v1 was a standalone program, never a plugin, so the plugin's
    presence means v2 or newer.
    """
    return bool(docker.get("cli") and docker.get("compose_plugin") and (docker.get("api") or docker.get("loaded")))
