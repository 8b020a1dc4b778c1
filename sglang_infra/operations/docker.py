"""The Docker engine and its images: the service, the NVIDIA runtime, the
serving image (pulled or loaded) and the toolchain image built on it."""

from __future__ import annotations

import secrets

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, FunctionCommand

from ..hostside.names import TOOLCHAIN_INPUTS_LABEL
from ..run.facts import current
from ..run.operation import diff_wanted, q, run_streamed, snapshot_operation


@snapshot_operation
def docker_service():
    """Ensure the Docker engine's systemd unit is enabled and running."""
    state = current(host)["docker"]
    if state["enabled"] == "enabled" and state["active"] == "active":
        host.noop("docker is already enabled and running")
        return
    yield "systemctl enable --now docker"


@snapshot_operation
def image_present(image: str, archive: str | None = None):
    """
    Ensure ``image`` is on the host: from ``archive`` (a `docker save` file on
    the control machine, gzipped or not) when given, else `docker pull`.
    An image already present is never pulled or loaded again.
    """
    if image in current(host)["docker"]["images"]:
        host.noop(f"{image} is already on the host")
        return
    if diff_wanted():
        host.log(f"Will {'load' if archive else 'pull'} {image}: it is not on the host", logger.info)
    if not archive:
        yield f"docker pull {q(image)}"
        return
    # Names no one can guess before the upload (/var/tmp and pyinfra's temporary directory are everyone's): a name
    # known ahead could be taken by a link or a file of another user's there, planted for root to load or follow.
    remote = f"/var/tmp/sglang-image-{secrets.token_hex(16)}.tar"
    yield FileUploadCommand(archive, remote, remote_temp_filename=host.get_temp_filename(secrets.token_hex(16)))
    yield (f"docker load -i {q(remote)} >/dev/null; loaded=$?; rm -f {q(remote)}; [ $loaded = 0 ] && "
           f"{{ docker image inspect {q(image)} >/dev/null 2>&1 || "
           f"{{ echo 'the archive {archive} does not contain {image}' >&2; exit 1; }}; }}")


def image_id(image: str) -> str | None:
    """The id of ``image`` on the host, None when it is not there."""
    return (current(host)["docker"]["images"].get(image) or {}).get("id")


@snapshot_operation
def nvidia_runtime():
    """Ensure Docker lists the nvidia runtime (configured by nvidia-ctk, then a Docker restart)."""
    if "nvidia" in current(host)["docker"]["runtimes"]:
        host.noop("Docker already has the NVIDIA runtime")
        return
    yield "nvidia-ctk runtime configure --runtime=docker && systemctl restart docker"


@snapshot_operation
def toolchain_image(tag: str, inputs_hash: str, dockerfile: str, context_dir: str, check: str,
                    label: str = TOOLCHAIN_INPUTS_LABEL):
    """
    Ensure the toolchain image ``tag`` exists, built from ``dockerfile`` with
    ``context_dir`` as context, and carries ``inputs_hash`` in ``label``: a
    re-run with the same inputs builds nothing. The build's last step checks
    the pins inside the new image, and ``check`` runs once more on the tagged
    result; an image that fails is removed, so compose never switches to it.
    """
    found = (current(host)["docker"]["images"].get(tag) or {}).get("labels", {}).get(label)
    if found == inputs_hash:
        host.noop(f"{tag} is already built from these inputs")
        return
    t = q(tag)
    # --no-cache: the pip step's text does not change when an index is fixed, so a cached layer from a
    # failed build would be reused with the wrong wheels in it (seen after a bad index was corrected).
    build = f"docker build --no-cache --network host -t {t} -f {q(dockerfile)} {q(context_dir)}"
    verify = (f"docker run --rm --entrypoint /bin/sh {t} -c {q(check)} || "
              f"{{ docker rmi {t} >/dev/null 2>&1; echo \"refused: {tag} failed its toolchain check and was "
              f"removed; the stack keeps its current image\" >&2; exit 1; }}")
    failed = f"echo \"refused: building {tag} failed (above); the stack keeps its current image\" >&2; exit 1"
    # The build streams its progress; a failed build tags nothing, so compose never sees it.
    yield FunctionCommand(run_streamed, (f"if {build}; then {verify}; else {failed}; fi",), {})
