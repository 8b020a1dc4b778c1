"""The compose stack of the server or of a gateway: its section of the
snapshot, and `docker compose up` only when what runs is not the current
config (restart: the operations that restart it gate it in the same program,
gate.validated and roll.rolled); and the one operation of a settled host
(run/settled.py), whose stack and all else are as its last settled run left
them."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from ..hostside.names import COMPOSE_COMMAND, COMPOSE_FILE, MODEL_LABEL
from ..hostside.stack import GATEWAY_PROJECT, GATEWAY_SERVICE, PROJECT, SERVICE
from ..machine import ship
from ..run.facts import current
from ..run.operation import file_entry, q
from .docker import image_id


def stack_section(gateway: str | None) -> dict:
    """The snapshot's stack and gate of the server (``gateway`` None) or of the gateway in router/<gateway>/."""
    snapshot = current(host)
    if gateway is None:
        return {"stack": snapshot["stack"], **snapshot["gate"]}
    found = snapshot.get("routers", {}).get(gateway) or {}
    return {"stack": found.get("stack") or {"container": None, "record": None, "current": False},
            "stamp": found.get("stamp"), "digest": found.get("digest"), "legacy": found.get("legacy"),
            "judged": found.get("judged") or {}, "workers": found.get("workers")}


def restart(project_dir: str, image: str, model: str | None, compose_sha: str, recreate_if=None,
            gateway: str | None = None) -> tuple[list[str], str]:
    """Why the stack must be (re)started (none: it runs the current config), and the command: `docker compose up
    -d` only when the service has no running container, or its container is not the one the last `up` recorded for
    the files as they are (hostside/stack.py), or it runs another image. A model switch recreates
    (--force-recreate), and so does ``recreate_if()`` being true when it runs (the server's private config changed:
    compose cannot see a file's content). gate.validated and roll.rolled restart with it, the gate following in
    the same program."""
    stack = stack_section(gateway)["stack"]
    found = stack["container"]
    on_disk = (file_entry(f"{project_dir}/{COMPOSE_FILE}") or {}).get("sha256")
    reasons = []
    if found is None:
        reasons.append("the service has no container")
    elif found["state"] != "running":
        reasons.append(f"the container is {found['state']}")
    elif on_disk != compose_sha:
        reasons.append("compose.yaml changes")
    elif not stack["current"]:
        reasons.append("the container was not started from compose.yaml and .env as they are")
    elif found["image_id"] != image_id(image):
        reasons.append(f"the container runs another image than {image}")
    forced = bool(recreate_if is not None and host.state.is_executing and recreate_if())
    if forced:
        reasons.append("the server's private config changed")
    switched = found is not None and found["labels"].get(MODEL_LABEL) not in (None, model)
    force = " --force-recreate" if switched or forced else ""
    project, service = (GATEWAY_PROJECT.format(slug=gateway), GATEWAY_SERVICE) if gateway else (PROJECT, SERVICE)
    record = f" {q(project)} {service}" if gateway else ""
    return reasons, (f"cd {q(project_dir)} && {leftovers_removed(project, service)} && "
                     f"{' '.join(COMPOSE_COMMAND)} up -d --remove-orphans{force} && "
                     f"{ship.command('stack')} {q(project_dir)}{record}")


def leftovers_removed(project: str, service: str) -> str:
    """The command that removes every container of ``project``'s ``service`` but the one compose names
    <project>-<service>-1: what a recreate cut short leaves (compose makes the new container under a temporary
    name, stops and removes the old one, then renames the new: a host that lost power between those steps boots
    the old one by its restart policy beside the new one, and `up` then failed "port is already allocated").
    A container is disposable: the config, the model and the last good config are files."""
    labels = f"--filter label=com.docker.compose.project={project} --filter label=com.docker.compose.service={service}"
    keep = f"{project}-{service}-1"
    return (f"{{ docker ps -a {labels} --format '{{{{.Names}}}}' | awk -v keep={q(keep)} '$0 != keep' | "
            "xargs -r docker rm -f >/dev/null; }")


@operation()
def host_settled(stamp: str):
    """
    Ensure the host is as its last run that changed nothing left it: the
    preflight found its snapshot and its plan equal to that run's stamp
    (``stamp``: the plan's fingerprint), so no other operation is planned.
    """
    host.noop(f"the host's snapshot and plan match the stamp of its last settled run (plan {stamp[:12]})")
    yield from ()
