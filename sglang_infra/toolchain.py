"""The serving image's CUDA toolchain: pins, refusals, and the thin image that
carries them.

The runbook's failures: the host's nvcc was CUDA 12.0 while SGLang's stack is
CUDA 13, and flashinfer and its JIT cache must be one version or SGLang
refuses to start. A bare-metal venv is ruled out, so the pins go into a thin
image built FROM the pinned SGLang image: flashinfer's three packages at one
version, and the CUDA 13 compiler pip ships as nvidia-cuda-nvcc, linked to a
fixed CUDA_HOME. Everything here is judged from host data alone, so a wrong
combination is refused before any host changes.

nvidia-cuda-nvcc 13.x depends on nvidia-nvvm (cicc, libnvvm) and
nvidia-cuda-crt (nvcc's headers), unpinned, plus nvidia-cuda-runtime. The
first two are pinned here at nvcc's own version (NVIDIA releases the three
together under one number); without them nvcc answers --version but cannot
compile device code. nvidia-cuda-runtime is left to the SGLang image, whose
torch build pins its own: letting pip pick one would replace it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

import jinja2

PROJECT_DIR = Path(__file__).resolve().parent.parent
TEMPLATE = PROJECT_DIR / "templates" / "Dockerfile.j2"
CHECK_SCRIPT = Path(__file__).resolve().parent / "toolchain_check.py"

FLASHINFER_PACKAGES = ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")
JIT_CACHE = "flashinfer-jit-cache"
NVCC_PACKAGE = "nvidia-cuda-nvcc"
# Released by NVIDIA under nvcc's own version number; nvcc needs both to compile.
NVCC_COMPANIONS = ("nvidia-nvvm", "nvidia-cuda-crt")
# The compiler package installed here is the CUDA 13 one (nvidia/cu13/ layout).
# CUDA 12's compiler is another distribution (nvidia-cuda-nvcc-cu12) with another layout.
SUPPORTED_CUDA_MAJOR = 13

# Where things live inside the image.
CUDA_HOME = "/usr/local/cuda-pip"
SHARE_DIR = "/usr/local/share/sglang-toolchain"
CA_IN_IMAGE = "/usr/local/share/ca-certificates/sglang-extra-ca.crt"
PIP_CA_TMP = "/tmp/sglang-pip-ca.pem"

# Build-context file names.
CHECK_NAME = "toolchain_check.py"
EXPECTED_NAME = "expected.json"
CA_NAME = "sglang-extra-ca.crt"

# For the one pip run: install into a Python marked externally managed (the
# image is the environment), and never stop to ask or to warn about root.
PIP_ENV = ("PIP_BREAK_SYSTEM_PACKAGES=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1",
           "PIP_ROOT_USER_ACTION=ignore")

IMAGE_REPOSITORY = "sglang-serving"
LABEL_PREFIX = "sglang.toolchain"
INPUTS_LABEL = f"{LABEL_PREFIX}.inputs"

MISMATCH = "SGLang refuses to start with a version-mismatch error when flashinfer's packages differ in version"

_FLAVOR = re.compile(r"^cu(\d{2})(\d)$")
# A PEP 440 final release with an optional post-release, and nothing else.
_RELEASE = re.compile(r"^\d+(?:\.\d+)*(?:\.post\d+)?$")
_NVCC_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)*$")
_TAG_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
_IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")

KEYS = (
    "sglang_flashinfer_version", "sglang_flashinfer_versions", "sglang_cuda_flavor",
    "sglang_image_cuda_flavor", "sglang_nvcc_version", "sglang_pip_index_url",
    "sglang_flashinfer_index_url", "sglang_extra_ca_bundle",
)


class ToolchainError(ValueError):
    """The data describes a toolchain this module refuses to build."""

    def __init__(self, problems: list[tuple[str, str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{key}: {what} ({fix})" for key, what, fix in problems))


# ---------------------------------------------------------------- versions

def cuda_major(flavor: str) -> int:
    """'cu130' -> 13, 'cu129' -> 12."""
    match = _FLAVOR.match(flavor) if isinstance(flavor, str) else None
    if not match:
        raise ValueError(f"CUDA flavour {flavor!r} is not of the form cuXYZ (e.g. cu130)")
    return int(match.group(1))


def jit_cache_version(version: str, cuda_flavor: str) -> str:
    """flashinfer-jit-cache's version: the flashinfer release with the CUDA flavour as local label."""
    cuda_major(cuda_flavor)
    if not isinstance(version, str) or not _RELEASE.match(version):
        raise ValueError(f"flashinfer version {version!r} is not a release like 0.6.14 or 0.6.14.post1")
    return f"{version}+{cuda_flavor}"


def nvcc_release(version: str) -> str:
    """'13.3.73' -> '13.3', the release `nvcc --version` names."""
    return ".".join(version.split(".")[:2])


def flashinfer_versions(data: Mapping[str, Any]) -> dict[str, str]:
    """Each flashinfer package's version before the jit-cache's local label."""
    overrides = data.get("sglang_flashinfer_versions") or {}
    return {name: overrides.get(name, data["sglang_flashinfer_version"]) for name in FLASHINFER_PACKAGES}


def pins(data: Mapping[str, Any]) -> dict[str, str]:
    """{distribution: exact version} for everything the image build installs, in install order."""
    _require_valid(data)
    return _pins(data)


def _pins(data: Mapping[str, Any]) -> dict[str, str]:
    versions = flashinfer_versions(data)
    versions[JIT_CACHE] = jit_cache_version(versions[JIT_CACHE], data["sglang_cuda_flavor"])
    nvcc = data["sglang_nvcc_version"]
    return {**versions, NVCC_PACKAGE: nvcc, **{name: nvcc for name in NVCC_COMPANIONS}}


def requirements(data: Mapping[str, Any]) -> list[str]:
    """The exact pip requirement strings, e.g. flashinfer-jit-cache==0.6.14+cu130."""
    return [f"{name}=={version}" for name, version in pins(data).items()]


def flashinfer_index_url(data: Mapping[str, Any]) -> str | None:
    url = data.get("sglang_flashinfer_index_url")
    return url.format(cuda_flavor=data["sglang_cuda_flavor"]) if url else None


# ---------------------------------------------------------------- refusals

def pip_index_options(index_url: str | None, extra_index_url: str | None = None) -> list[str]:
    """pip's index options; an index served over plain http (a site mirror) must also be named trusted,
    or pip ignores it."""
    options, trusted = [], []
    for flag, url in (("--index-url", index_url), ("--extra-index-url", extra_index_url)):
        if not url:
            continue
        options.append(f"{flag} {shlex.quote(url)}")
        parts = urlsplit(url)
        if parts.scheme == "http" and parts.netloc not in trusted:
            trusted.append(parts.netloc)
    return options + [f"--trusted-host {shlex.quote(host)}" for host in trusted]


def _problems_flavors(data, out) -> bool:
    ok = True
    for key in ("sglang_cuda_flavor", "sglang_image_cuda_flavor"):
        value = data.get(key)
        if not (isinstance(value, str) and _FLAVOR.match(value)):
            out.append((key, f"{value!r} is not a CUDA flavour of the form cuXYZ",
                        "write it as flashinfer's wheel index names it, e.g. cu130 for CUDA 13.0"))
            ok = False
    if not ok:
        return False
    flavor, image_flavor = data["sglang_cuda_flavor"], data["sglang_image_cuda_flavor"]
    if cuda_major(flavor) != SUPPORTED_CUDA_MAJOR:
        out.append(("sglang_cuda_flavor",
                    f"{flavor} is CUDA {cuda_major(flavor)}; this toolchain installs the CUDA "
                    f"{SUPPORTED_CUDA_MAJOR} compiler package ({NVCC_PACKAGE}), whose layout the image build "
                    f"relies on",
                    f"use a cu{SUPPORTED_CUDA_MAJOR}x flavour with a CUDA {SUPPORTED_CUDA_MAJOR} SGLang image"))
    if flavor != image_flavor:
        out.append(("sglang_cuda_flavor",
                    f"{JIT_CACHE} would be built for {flavor} but the SGLang image is built for {image_flavor}: "
                    "the JIT cache would hold kernels built for another CUDA",
                    f"set sglang_cuda_flavor to {image_flavor}, or sglang_image_cuda_flavor to the flavour "
                    "of the image in sglang_image"))
    return True


def _problems_flashinfer(data, out) -> None:
    base = data.get("sglang_flashinfer_version")
    base_ok = isinstance(base, str) and bool(_RELEASE.match(base))
    if isinstance(base, str) and "+" in base:
        out.append(("sglang_flashinfer_version",
                    f"{base!r} has a local version label; the jit-cache's +cuXYZ label comes from "
                    "sglang_cuda_flavor and the other two packages have none",
                    f"set it to {base.split('+')[0]!r}"))
    elif not base_ok:
        out.append(("sglang_flashinfer_version",
                    f"{base!r} is not a flashinfer release like 0.6.14 or 0.6.14.post1",
                    "set the release that flashinfer-python, flashinfer-cubin and flashinfer-jit-cache share"))

    overrides = data.get("sglang_flashinfer_versions") or {}
    if not isinstance(overrides, Mapping):
        out.append(("sglang_flashinfer_versions", f"{overrides!r} is not a mapping {{package: version}}",
                    "leave it {} and set sglang_flashinfer_version"))
        return
    overrides_ok = True
    for name, version in overrides.items():
        if name not in FLASHINFER_PACKAGES:
            out.append(("sglang_flashinfer_versions", f"{name!r} is not one of {', '.join(FLASHINFER_PACKAGES)}",
                        "remove it"))
            overrides_ok = False
        elif not (isinstance(version, str) and _RELEASE.match(version)):
            out.append(("sglang_flashinfer_versions",
                        f"{name}: {version!r} is not a release like 0.6.14 (without a local label)",
                        "write the plain release; the jit-cache's +cuXYZ comes from sglang_cuda_flavor"))
            overrides_ok = False
    if not (base_ok and overrides_ok):
        return
    versions = flashinfer_versions(data)
    flavor_ok = isinstance(data.get("sglang_cuda_flavor"), str) and _FLAVOR.match(data["sglang_cuda_flavor"])
    shown = {name: (jit_cache_version(v, data["sglang_cuda_flavor"]) if name == JIT_CACHE and flavor_ok else v)
             for name, v in versions.items()}
    for name in FLASHINFER_PACKAGES:
        if name not in overrides:
            continue
        others = [other for other in FLASHINFER_PACKAGES if other != name and versions[other] != versions[name]]
        if others:
            against = " and ".join(f"{other} is {shown[other]}" for other in others)
            out.append(("sglang_flashinfer_versions",
                        f"{name} is set to {shown[name]}, but {against}: {MISMATCH}",
                        "remove the override and move all three together with sglang_flashinfer_version"))


def _problems_nvcc(data, out, flavors_ok: bool) -> None:
    version = data.get("sglang_nvcc_version")
    if not (isinstance(version, str) and _NVCC_VERSION.match(version)):
        out.append(("sglang_nvcc_version", f"{version!r} is not an {NVCC_PACKAGE} release like 13.3.73",
                     f"pin a release of {NVCC_PACKAGE} (the CUDA 13 package)"))
        return
    if not flavors_ok:
        return
    flavor = data["sglang_cuda_flavor"]
    major = int(version.split(".")[0])
    if major != cuda_major(flavor):
        out.append(("sglang_nvcc_version",
                    f"{NVCC_PACKAGE} {version} is CUDA {major} but the stack is {flavor} (CUDA {cuda_major(flavor)}): "
                    f"kernels would be compiled by a CUDA {major} nvcc against a CUDA {cuda_major(flavor)} stack"
                    + (", the runbook's original failure" if major < cuda_major(flavor) else ""),
                    f"pin a {cuda_major(flavor)}.x release of {NVCC_PACKAGE}, e.g. 13.3.73"))


def _problems_urls(data, out) -> None:
    for key in ("sglang_pip_index_url", "sglang_flashinfer_index_url"):
        url = data.get(key)
        if url is None:
            continue
        if not isinstance(url, str) or any(c.isspace() for c in url):
            out.append((key, f"{url!r} is not a URL", "set an http(s) URL of a simple package index, or None"))
            continue
        try:
            expanded = url.format(cuda_flavor="cu130") if key == "sglang_flashinfer_index_url" else url
        except (KeyError, IndexError, ValueError):
            out.append((key, f"{url!r} has a placeholder other than {{cuda_flavor}}",
                        "use only {cuda_flavor}, or write the URL out"))
            continue
        parts = urlsplit(expanded)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            out.append((key, f"{url!r} is not an http(s) URL", "set an http(s) URL of a simple package index, or None"))


def _problems_ca(data, out) -> None:
    path = data.get("sglang_extra_ca_bundle")
    if path is None:
        return
    fix = "point it at a PEM bundle on the control machine, or set None"
    if not isinstance(path, str) or not path:
        out.append(("sglang_extra_ca_bundle", f"{path!r} is not a path", fix))
        return
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        out.append(("sglang_extra_ca_bundle", f"{path} cannot be read on the control machine: "
                    f"{error.strerror or error}", fix))
        return
    if "BEGIN CERTIFICATE" not in text:
        out.append(("sglang_extra_ca_bundle", f"{path} holds no PEM certificate (no BEGIN CERTIFICATE line)", fix))


def problems(data: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(key, what is wrong, how to fix) for every refusal, judged from the data alone."""
    out: list[tuple[str, str, str]] = []
    missing = [key for key in KEYS if key not in data]
    for key in missing:
        out.append((key, "is not set", "set it in group_data (all.py carries the default)"))
    if missing:
        return out
    flavors_ok = _problems_flavors(data, out)
    _problems_flashinfer(data, out)
    _problems_nvcc(data, out, flavors_ok)
    _problems_urls(data, out)
    _problems_ca(data, out)
    return out


def _require_valid(data: Mapping[str, Any]) -> None:
    found = problems(data)
    if found:
        raise ToolchainError(found)


# ---------------------------------------------------------------- the image

def expected(data: Mapping[str, Any]) -> dict[str, Any]:
    """What toolchain_check.py compares the image with."""
    version = data["sglang_nvcc_version"]
    return {"packages": pins(data), "nvcc": {"release": nvcc_release(version), "version": version},
            "cuda_home": CUDA_HOME}


def context_files(data: Mapping[str, Any]) -> dict[str, bytes]:
    """The build context besides the Dockerfile: the check script, its expectations, the CA if any."""
    files = {
        CHECK_NAME: CHECK_SCRIPT.read_bytes(),
        EXPECTED_NAME: (json.dumps(expected(data), indent=2, sort_keys=True) + "\n").encode(),
    }
    if data["sglang_extra_ca_bundle"]:
        files[CA_NAME] = Path(data["sglang_extra_ca_bundle"]).read_bytes()
    return files


def _docker_quote(value: str) -> str:
    """A double-quoted Dockerfile string (LABEL values)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _environment() -> jinja2.Environment:
    return jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True, autoescape=False)


@lru_cache(maxsize=4)
def _template(source: str) -> jinja2.Template:
    return _environment().from_string(source)


def _check_base_image(base_image: str) -> None:
    if not isinstance(base_image, str) or not _IMAGE_REF.match(base_image):
        raise ValueError(f"base image {base_image!r} is not an image reference")


def _render(data: Mapping[str, Any], base_image: str, inputs_hash: str | None) -> str:
    _check_base_image(base_image)
    pinned = pins(data)
    index_options = pip_index_options(data["sglang_pip_index_url"], flashinfer_index_url(data))
    labels = []
    if inputs_hash:
        labels.append((INPUTS_LABEL, inputs_hash))
    labels += [(f"{LABEL_PREFIX}.base", base_image), (f"{LABEL_PREFIX}.cuda-flavor", data["sglang_cuda_flavor"])]
    labels += [(f"{LABEL_PREFIX}.pin.{name}", version) for name, version in pinned.items()]
    check = f"{SHARE_DIR}/{CHECK_NAME}"
    labels.append((f"{LABEL_PREFIX}.check", f"python3 {check}"))
    return _template(TEMPLATE.read_text(encoding="utf-8")).render(
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
        cuda_home=CUDA_HOME,
    )


def build_inputs_hash(dockerfile_text: str, context_files: Mapping[str, bytes]) -> str:
    """sha256 (hex) over the Dockerfile and every other file of the build context, by name."""
    digest = hashlib.sha256(b"sglang-toolchain-inputs-v1\0")
    for name, data in [("Dockerfile", dockerfile_text.encode()), *sorted(context_files.items())]:
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

    def all_files(self) -> dict[str, bytes]:
        return {"Dockerfile": self.dockerfile.encode(), **self.files}

    def write(self, directory: Path | str) -> Path:
        """Write the build context (Dockerfile and files) into directory."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in self.all_files().items():
            (directory / name).write_bytes(data)
        return directory


def build_context(data: Mapping[str, Any], base_image: str) -> BuildContext:
    """Everything `docker build` needs, with the inputs hash and the tag it names.

    The hash is taken over the Dockerfile without its own inputs label (it
    cannot contain its own hash) and the other context files; the final
    Dockerfile then records that hash in the label.
    """
    _require_valid(data)
    files = context_files(data)
    inputs_hash = build_inputs_hash(_render(data, base_image, None), files)
    return BuildContext(base_image, _render(data, base_image, inputs_hash), files, inputs_hash,
                        image_tag(base_image, inputs_hash))


def render_dockerfile(data: Mapping[str, Any], base_image: str) -> str:
    return build_context(data, base_image).dockerfile


# The check script's text, for callers that run it without the image's copy
# (e.g. `docker run -i IMAGE python3 - < script`).
VERIFY_SCRIPT = CHECK_SCRIPT.read_text(encoding="utf-8")


def serving_image(data: Mapping[str, Any]) -> str:
    """The image compose runs: the toolchain image's local tag, or sglang_image itself when the layer is off."""
    if not data["sglang_toolchain_image"]:
        return data["sglang_image"]
    return build_context(data, data["sglang_image"]).tag


def check_command() -> str:
    """Runs the check inside the toolchain image (or a container of it), against the pins baked into it."""
    return f"python3 {SHARE_DIR}/{CHECK_NAME}"
