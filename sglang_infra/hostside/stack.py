"""The running stack, and the record of what `docker compose up` started.

Deciding "does the container run the current compose.yaml" with compose's
own config hash means starting the docker CLI and compose (Go binaries) on
every read. Instead, whoever runs `up` (the deploy's stack operation, the
gate's rollback) records right after it the container's id and the digests
of the compose.yaml and .env it was started from. The stack is current while
that container still exists and is running, and the files still match.

    python3 stack.py DOCKER_DIR [PROJECT SERVICE]    write the record after an `up`
"""

import os
import sys
import urllib.parse

from . import dockerapi, names, safefs
from .formats import jsonio

PROJECT = "sglang"   # compose.yaml's `name:`
SERVICE = "sglang"   # its one service
RECORD = ".stack"
# A gateway (the `router` group) runs in a project of its own per model, in router/<slug>/ below the home.
GATEWAY_PROJECT = "sglang-router-{slug}"
GATEWAY_SERVICE = names.GATEWAY_SERVICE
# Seconds between SIGTERM and SIGKILL when a container that serves nobody is replaced: a config that failed its
# gate (the rollback), or a worker out of service (operations/roll.py). No client's request is worth waiting for
# there, and a hung server would otherwise hold the stop for compose's whole stop_grace_period (the drain plus
# 30 s); 10 s still lets a healthy process release its GPU memory and its port in order.
QUICK_STOP_SECONDS = 10


def gateway(slug):
    """(project, service) of the gateway in router/<slug>/."""
    return GATEWAY_PROJECT.format(slug=slug), GATEWAY_SERVICE


def gateway_dirs(home):
    """{slug: directory} of every gateway's directory below the home (router/<slug>/), never a symlink, nor
    router/.secrets/ (names.GATEWAY_SECRETS_DIR: a slug never begins with a dot)."""
    top = os.path.join(home, names.GATEWAY_DIR)
    if os.path.islink(top) or not os.path.isdir(top):
        return {}
    return {entry.name: entry.path for entry in sorted(os.scandir(top), key=lambda e: e.name)
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(".")}


def container(project=PROJECT, service=SERVICE):
    """The service's container as the engine reports it (with when it last started), or None."""
    found = dockerapi.compose_containers(project).get(service)
    if found is not None:
        details = (dockerapi.get(f"/containers/{found['id']}/json") or {}).get("State") or {}
        found["started_at"] = details.get("StartedAt")
        found["health"] = (details.get("Health") or {}).get("Status")   # starting, healthy, unhealthy or None
    return found


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def published(port, project=PROJECT, service=SERVICE):
    """The host addresses the service's own running container publishes TCP ``port`` on, as the engine reports
    them ("0.0.0.0" or "::": every address); none when it does not run or the engine does not answer."""
    try:
        found = dockerapi.compose_containers(project).get(service)
    except (dockerapi.Unavailable, ValueError):
        return []
    if found is None or found["state"] != "running":
        return []
    return [p.get("IP") or "0.0.0.0" for p in found.get("ports") or ()
            if p.get("PublicPort") == port and p.get("Type", "tcp") == "tcp"]


def holds(url, project=PROJECT, service=SERVICE):
    """
    Whether ``url`` (http://ADDRESS:PORT) is a port the service's own
    running container publishes: the API key is sent nowhere else (a port no
    container holds is free for any local user to listen on). Loopback
    stands for a port published on every address.
    """
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return False
    return any(address == parts.hostname or address in ("0.0.0.0", "::") and parts.hostname in LOOPBACK
               for address in (published(port, project, service) if port else ()))


def file_digests(docker_dir):
    return {name: safefs.sha256_regular(os.path.join(docker_dir, name))
            for name in (names.COMPOSE_FILE, names.ENV_FILE)}


def write_private(path, text, like):
    """Replace ``path`` with ``text`` (never through a symlink), owned like the file ``like`` (not followed)."""
    st = os.lstat(like)
    safefs.write_atomic(path, text.encode(), 0o644, owner=(st.st_uid, st.st_gid))


def record(docker_dir, project=PROJECT, service=SERVICE):
    found = container(project, service)
    text = jsonio.dumps({"container": found and found["id"], **file_digests(docker_dir)}, sort_keys=True)
    write_private(os.path.join(docker_dir, RECORD), text + "\n", os.path.join(docker_dir, names.COMPOSE_FILE))


def state(docker_dir, project=PROJECT, service=SERVICE):
    """The container, the record, and whether the container is the one started from the files as they are."""
    found = container(project, service)
    raw = safefs.read_regular(os.path.join(docker_dir, RECORD), 4096)
    try:
        recorded = jsonio.loads(raw) if raw else None
    except ValueError:
        recorded = None
    current = bool(found and recorded and recorded.get("container") == found["id"]
                   and {k: recorded.get(k) for k in (names.COMPOSE_FILE, names.ENV_FILE)} == file_digests(docker_dir))
    return {"container": found, "record": recorded, "current": current}


if __name__ == "__main__":
    record(sys.argv[1], *sys.argv[2:4])
