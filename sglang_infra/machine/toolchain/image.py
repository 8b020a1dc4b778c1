"""The thin serving image that carries the toolchain pins: its Dockerfile and
build context, the hash of its inputs, and the local tag that hash names.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...hostside.names import DOCKERFILE, TOOLCHAIN_BASE_LABEL, TOOLCHAIN_INPUTS_LABEL, TOOLCHAIN_LABEL_PREFIX
from .. import ship
from ..templating import render_template
from .pins import flashinfer_index_url, nvcc_release
from .pip import pip_index_options

TEMPLATE = "templates/Dockerfile.j2"

# Where things live inside the image.
CUDA_HOME = "/usr/local/cuda-pip"
SHARE_DIR = "/usr/local/share/sglang-toolchain"
CA_IN_IMAGE = "/usr/local/share/ca-certificates/sglang-extra-ca.crt"
PIP_CA_TMP = "/tmp/sglang-pip-ca.pem"

# Build-context file names.
CHECK_NAME = "toolchain_check.py"
EXPECTED_NAME = "expected.json"
CA_NAME = "sglang-extra-ca.crt"
REQUIREMENTS_NAME = "requirements.txt"   # with a lock only: every pin with the sha256 of its wheels
REQUIREMENTS_TMP = "/tmp/sglang-requirements.txt"

# For the one pip run: install into a Python marked externally managed (the
# image is the environment), and never stop to ask or to warn about root.
PIP_ENV = ("PIP_BREAK_SYSTEM_PACKAGES=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1",
           "PIP_ROOT_USER_ACTION=ignore")

IMAGE_REPOSITORY = "sglang-serving"
LABEL_PREFIX = TOOLCHAIN_LABEL_PREFIX
INPUTS_LABEL = TOOLCHAIN_INPUTS_LABEL

_TAG_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
_IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")

def expected(data: Mapping[str, Any], pinned: Mapping[str, str]) -> dict[str, Any]:
    """What toolchain_check.py compares the image with."""
    version = data["sglang_nvcc_version"]
    return {"packages": dict(pinned), "nvcc": {"release": nvcc_release(version), "version": version},
            "cuda_home": CUDA_HOME}


def hashed_requirements(pinned: Mapping[str, str], wheel_hashes: Mapping[str, Any]) -> str:
    """A pip requirements file: every pin with the sha256 of each wheel the lock recorded for it."""
    lines = []
    for name, version in pinned.items():
        hashes = [f"--hash=sha256:{sha}" for _, sha in wheel_hashes[f"{name}=={version}"]]
        lines.append(" \\\n    ".join([f"{name}=={version}", *hashes]))
    return "\n".join(lines) + "\n"


def context_files(data: Mapping[str, Any], pinned: Mapping[str, str], ca_bundle: bytes | None,
                  wheel_hashes: Mapping[str, Any] | None = None) -> dict[str, bytes]:
    """The build context besides the Dockerfile: the check script, its expectations, the CA if any, and with
    a lock the hashed requirements."""
    files = {
        CHECK_NAME: ship.installed("toolchain_check").encode(),
        EXPECTED_NAME: (json.dumps(expected(data, pinned), indent=2, sort_keys=True) + "\n").encode(),
    }
    if ca_bundle is not None:
        files[CA_NAME] = ca_bundle
    if wheel_hashes is not None:
        files[REQUIREMENTS_NAME] = hashed_requirements(pinned, wheel_hashes).encode()
    return files


def _docker_quote(value: str) -> str:
    """A double-quoted Dockerfile string (LABEL values)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _check_base_image(base_image: str) -> None:
    if not isinstance(base_image, str) or not _IMAGE_REF.fullmatch(base_image):
        raise ValueError(f"base image {base_image!r} is not an image reference")


def _render(data: Mapping[str, Any], pinned: Mapping[str, str], base_image: str, inputs_hash: str | None,
            hashed: bool = False) -> str:
    _check_base_image(base_image)
    index_options = pip_index_options(data["sglang_pip_index_url"], flashinfer_index_url(data))
    labels = []
    if inputs_hash:
        labels.append((INPUTS_LABEL, inputs_hash))
    labels += [(TOOLCHAIN_BASE_LABEL, base_image), (f"{LABEL_PREFIX}.cuda-flavor", data["sglang_cuda_flavor"])]
    labels += [(f"{LABEL_PREFIX}.pin.{name}", version) for name, version in pinned.items()]
    check = f"{SHARE_DIR}/{CHECK_NAME}"
    labels.append((f"{LABEL_PREFIX}.check", f"python3 {check}"))
    return render_template(TEMPLATE,
        base_image=base_image,
        labels=[f"{key}={_docker_quote(value)}" for key, value in labels],
        share_dir=SHARE_DIR,
        check_files=[CHECK_NAME, EXPECTED_NAME],
        check=check,
        ca_file=CA_NAME if data["sglang_extra_ca_bundle"] else None,
        ca_in_image=CA_IN_IMAGE,
        pip_ca=PIP_CA_TMP,
        pip_env=([f"PIP_CERT={PIP_CA_TMP}"] if data["sglang_extra_ca_bundle"] else []) + list(PIP_ENV),
        index_options=index_options,
        requirements=[shlex.quote(f"{name}=={version}") for name, version in pinned.items()],
        hashed_requirements=(REQUIREMENTS_NAME, REQUIREMENTS_TMP) if hashed else None,
        cuda_home=CUDA_HOME,
    )


def build_inputs_hash(dockerfile_text: str, context_files: Mapping[str, bytes]) -> str:
    """sha256 (hex) over the Dockerfile and every other file of the build context, by name."""
    digest = hashlib.sha256(b"sglang-toolchain-inputs-v1\0")
    for name, data in [(DOCKERFILE, dockerfile_text.encode()), *sorted(context_files.items())]:
        digest.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return digest.hexdigest()


def image_tag(base_image: str, inputs_hash: str) -> str:
    """A local tag: sglang-serving:<base image's tag>-<first 12 of the inputs hash>.

    The base's tag keeps the SGLang release readable in `docker images`; the
    hash names everything that went into the build, so a new pin, base or CA
    makes a new tag and an unchanged one finds the image already there. A base
    without a tag counts as 'latest'; a base by digest uses 'sha256-<12 hex>'.
    Characters a tag cannot hold become '-'.
    """
    _check_base_image(base_image)
    if not re.fullmatch(r"[0-9a-f]{64}", inputs_hash or ""):
        raise ValueError(f"inputs hash {inputs_hash!r} is not a sha256 hex digest")
    name, _, digest = base_image.partition("@")
    if digest:
        base_tag = digest.replace(":", "-")[: len("sha256-") + 12]
    else:
        last = name.rsplit("/", 1)[-1]
        base_tag = last.split(":", 1)[1] if ":" in last else "latest"
    base_tag = _TAG_CHARS.sub("-", base_tag)
    if not re.match(r"[A-Za-z0-9_]", base_tag):
        base_tag = "v" + base_tag
    base_tag = base_tag[: 128 - 13]
    return f"{IMAGE_REPOSITORY}:{base_tag}-{inputs_hash[:12]}"


@dataclass(frozen=True)
class BuildContext:
    base_image: str
    dockerfile: str
    files: dict[str, bytes] = field(repr=False)   # besides the Dockerfile
    inputs_hash: str
    tag: str


def build_context(data: Mapping[str, Any], pinned: Mapping[str, str], ca_bundle: bytes | None, base_image: str,
                  wheel_hashes: Mapping[str, Any] | None = None, tag_from: str | None = None) -> BuildContext:
    """Everything `docker build` needs, with the inputs hash and the tag it names.

    The hash is taken over the Dockerfile without its own inputs label (it
    cannot contain its own hash) and the other context files; the final
    Dockerfile then records that hash in the label. ``pinned`` and
    ``ca_bundle`` are the judged pins and CA bytes (refusals.judge). With ``wheel_hashes``
    (a lock's, "name==version" -> ((file, sha256), ...)) pip installs with
    --require-hashes; ``tag_from`` names the tag when ``base_image`` is a
    digest of it.
    """
    files = context_files(data, pinned, ca_bundle, wheel_hashes)
    hashed = wheel_hashes is not None
    inputs_hash = build_inputs_hash(_render(data, pinned, base_image, None, hashed), files)
    return BuildContext(base_image, _render(data, pinned, base_image, inputs_hash, hashed), files, inputs_hash,
                        image_tag(tag_from or base_image, inputs_hash))



# The check script's text, for callers that run it without the image's copy
def check_command() -> str:
    """Runs the check inside the toolchain image (or a container of it), against the pins baked into it."""
    return f"python3 {SHARE_DIR}/{CHECK_NAME}"
