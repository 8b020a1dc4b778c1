"""The toolchain pins: which versions the serving image gets, and the refusals
of combinations that cannot work. Judged from host data alone, so a wrong
combination is refused before any host changes (sglang_infra/plan/resolve.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

FLASHINFER_PACKAGES = ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")
JIT_CACHE = "flashinfer-jit-cache"
NVCC_PACKAGE = "nvidia-cuda-nvcc"
# Released by NVIDIA under nvcc's own version number; nvcc needs both to compile.
NVCC_COMPANIONS = ("nvidia-nvvm", "nvidia-cuda-crt")
# The compiler package installed here is the CUDA 13 one (nvidia/cu13/ layout).
# CUDA 12's compiler is another distribution (nvidia-cuda-nvcc-cu12) with another layout.
SUPPORTED_CUDA_MAJOR = 13

MISMATCH = "SGLang refuses to start with a version-mismatch error when flashinfer's packages differ in version"

_FLAVOR = re.compile(r"^cu(\d{2})(\d)$")
# A PEP 440 final release with an optional post-release, and nothing else.
_RELEASE = re.compile(r"^\d+(?:\.\d+)*(?:\.post\d+)?$")
_NVCC_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)*$")

KEYS = (
    "sglang_flashinfer_version", "sglang_flashinfer_versions", "sglang_cuda_flavor",
    "sglang_image_cuda_flavor", "sglang_nvcc_version", "sglang_pip_index_url",
    "sglang_flashinfer_index_url", "sglang_extra_ca_bundle",
)


def cuda_major(flavor: str) -> int:
    """'cu130' -> 13, 'cu129' -> 12."""
    match = _FLAVOR.fullmatch(flavor) if isinstance(flavor, str) else None
    if not match:
        raise ValueError(f"CUDA flavour {flavor!r} is not of the form cuXYZ (e.g. cu130)")
    return int(match.group(1))


def jit_cache_version(version: str, cuda_flavor: str) -> str:
    """flashinfer-jit-cache's version: the flashinfer release with the CUDA flavour as local label."""
    cuda_major(cuda_flavor)
    if not isinstance(version, str) or not _RELEASE.fullmatch(version):
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
    """{distribution: exact version} for everything the image build installs, in install order, from data
    that problems() accepted (refusals.judge works them out once per host and passes them on)."""
    versions = flashinfer_versions(data)
    versions[JIT_CACHE] = jit_cache_version(versions[JIT_CACHE], data["sglang_cuda_flavor"])
    nvcc = data["sglang_nvcc_version"]
    return {**versions, NVCC_PACKAGE: nvcc, **{name: nvcc for name in NVCC_COMPANIONS}}


def flashinfer_index_url(data: Mapping[str, Any]) -> str | None:
    url = data.get("sglang_flashinfer_index_url")
    return url.format(cuda_flavor=data["sglang_cuda_flavor"]) if url else None


# ---------------------------------------------------------------- refusals

def _problems_flavors(data, out) -> bool:
    ok = True
    for key in ("sglang_cuda_flavor", "sglang_image_cuda_flavor"):
        value = data.get(key)
        if not (isinstance(value, str) and _FLAVOR.fullmatch(value)):
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
    base_ok = isinstance(base, str) and bool(_RELEASE.fullmatch(base))
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
        elif not (isinstance(version, str) and _RELEASE.fullmatch(version)):
            out.append(("sglang_flashinfer_versions",
                        f"{name}: {version!r} is not a release like 0.6.14 (without a local label)",
                        "write the plain release; the jit-cache's +cuXYZ comes from sglang_cuda_flavor"))
            overrides_ok = False
    if not (base_ok and overrides_ok):
        return
    versions = flashinfer_versions(data)
    flavor_ok = isinstance(data.get("sglang_cuda_flavor"), str) and _FLAVOR.fullmatch(data["sglang_cuda_flavor"])
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
    if not (isinstance(version, str) and _NVCC_VERSION.fullmatch(version)):
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


def read_ca_bundle(data: Mapping[str, Any]) -> tuple[bytes | None, list[tuple[str, str, str]]]:
    """(the bytes of sglang_extra_ca_bundle or None, its problems): read once, on the control machine, and
    judged whether or not the toolchain image is on, so turning it on later cannot surprise anyone."""
    path = data.get("sglang_extra_ca_bundle")
    if path is None:
        return None, []
    fix = "point it at a PEM bundle on the control machine, or set None"
    if not isinstance(path, str) or not path:
        return None, [("sglang_extra_ca_bundle", f"{path!r} is not a path", fix)]
    try:
        content = Path(path).read_bytes()
    except OSError as error:
        return None, [("sglang_extra_ca_bundle", f"{path} cannot be read on the control machine: "
                       f"{error.strerror or error}", fix)]
    text, out = content.decode("utf-8", errors="replace"), []
    if "PRIVATE KEY" in text:
        out.append(("sglang_extra_ca_bundle", f"{path} holds a private key; it would be copied into the image "
                    "and onto every host", "point it at the CA certificates alone"))
    elif "BEGIN CERTIFICATE" not in text:
        out.append(("sglang_extra_ca_bundle", f"{path} holds no PEM certificate (no BEGIN CERTIFICATE line)", fix))
    return (None if out else content), out


def problems(data: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(key, what is wrong, how to fix) for every refusal of the pins, judged from the data alone (the CA
    bundle is judged where it is read, read_ca_bundle)."""
    out: list[tuple[str, str, str]] = []
    missing = [key for key in KEYS if key not in data]
    for key in missing:
        out.append((key, "is not set", "set it in group_data (all.py carries the default)"))
    if missing:
        return out
    flavors_ok = _problems_flavors(data, out)
    _problems_flashinfer(data, out)
    _problems_nvcc(data, out, flavors_ok)
    return out

