#!/usr/bin/env python3
"""Runs INSIDE the serving image (standard library only; never imports flashinfer).

  toolchain_check.py [check] [EXPECTED]
      Compares what is installed with the pins and prints ONE JSON line:
      {"ok": bool, "packages": {name: installed version or null},
       "nvcc": {"path", "release", "version"}, "cuda_home": ...,
       "problems": ["flashinfer-jit-cache is 0.6.13+cu130, pinned 0.6.14+cu130: ..."]}
      Exit status 0 when ok, 1 when not, 2 when EXPECTED cannot be read.
      EXPECTED is a JSON text or a path to a JSON file; without it, the
      expected.json written beside this script by the image build:
      {"packages": {name: version}, "nvcc": {"release": "13.3", "version": "13.3.73"},
       "cuda_home": "/usr/local/cuda-pip"}   ("nvcc" and "cuda_home" optional).

  toolchain_check.py link-nvcc DEST
      Finds nvcc among the files pip recorded for nvidia-cuda-nvcc and points
      the symlink DEST at the root of that toolkit (the directory above bin/).
      Fails when pip recorded no bin/nvcc.

  toolchain_check.py ca-bundle EXTRA OUT
      Writes OUT = the CA bundle pip trusts by default, then EXTRA, for PIP_CERT.
"""

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NVCC_PACKAGE = "nvidia-cuda-nvcc"
NVCC_TIMEOUT = 60

# Why a package at another version than pinned matters, by package.
CONSEQUENCES = {
    "flashinfer-python": "flashinfer and its JIT cache must be one version, or SGLang refuses to start "
                         "with a version-mismatch error",
    "nvidia-cuda-nvcc": "kernels would be compiled by another CUDA compiler than the one pinned for the stack",
    "nvidia-nvvm": "nvcc's device compiler (cicc, libnvvm) would come from another CUDA release than nvcc",
    "nvidia-cuda-crt": "nvcc's own headers would come from another CUDA release than nvcc",
}
CONSEQUENCES["flashinfer-cubin"] = CONSEQUENCES["flashinfer-python"]
CONSEQUENCES["flashinfer-jit-cache"] = CONSEQUENCES["flashinfer-python"]
DEFAULT_CONSEQUENCE = "the image does not hold the pinned toolchain"

_NVCC_RELEASE = re.compile(r"release (\d+\.\d+), V(\d+(?:\.\d+)+)")


def canonical_version(version):
    """A comparable spelling of a PEP 440 version (0.6.14.0 == 0.6.14; +CU130 == +cu130)."""
    text = version.strip().lower()
    if text.startswith("v"):
        text = text[1:]
    public, _, local = text.partition("+")
    match = re.match(r"^(\d+(?:\.\d+)*)(.*)$", public)
    if not match:
        return text
    release = [int(part) for part in match.group(1).split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    rest = re.sub(r"[-_]", ".", match.group(2))
    out = ".".join(str(part) for part in release) + rest
    if local:
        out += "+" + re.sub(r"[-_]", ".", local)
    return out


def installed_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def nvcc_report():
    """Where nvcc is on PATH and what `nvcc --version` says."""
    path = shutil.which("nvcc")
    report = {"path": path, "release": None, "version": None}
    if path is None:
        return report, None
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=NVCC_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as error:
        return report, f"`{path} --version` failed: {error}"
    match = _NVCC_RELEASE.search(proc.stdout)
    if proc.returncode != 0 or not match:
        output = (proc.stdout + proc.stderr).strip().splitlines()
        return report, (f"`{path} --version` exited {proc.returncode} without a "
                        f"'release X.Y, VX.Y.Z' line: {' | '.join(output[-3:])}")
    report["release"], report["version"] = match.group(1), match.group(2)
    return report, None


def check(expected):
    problems = []
    packages = {}
    for name, pinned in expected.get("packages", {}).items():
        found = installed_version(name)
        packages[name] = found
        why = CONSEQUENCES.get(name, DEFAULT_CONSEQUENCE)
        if found is None:
            problems.append(f"{name} is not installed, pinned {pinned}: {why}")
        elif canonical_version(found) != canonical_version(pinned):
            problems.append(f"{name} is {found}, pinned {pinned}: {why}")

    nvcc, error = nvcc_report()
    cuda_home = os.environ.get("CUDA_HOME")
    want = expected.get("nvcc")
    if want:
        why = CONSEQUENCES[NVCC_PACKAGE]
        if nvcc["path"] is None:
            problems.append(f"nvcc is not on PATH, pinned release {want['release']}, V{want['version']}: {why}")
        elif error:
            problems.append(f"{error}: {why}")
        elif (nvcc["release"], canonical_version(nvcc["version"])) != (want["release"],
                                                                      canonical_version(want["version"])):
            problems.append(f"nvcc at {nvcc['path']} reports release {nvcc['release']}, V{nvcc['version']}, "
                            f"pinned release {want['release']}, V{want['version']}: {why}")
        if nvcc["path"] is not None:
            root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc["path"])))
            for part, package in ((("nvvm", "bin", "cicc"), "nvidia-nvvm"),
                                  (("include", "crt", "host_config.h"), "nvidia-cuda-crt")):
                if not os.path.exists(os.path.join(root, *part)):
                    problems.append(f"nvcc's toolkit at {root} has no {'/'.join(part)} ({package} missing): "
                                    "nvcc cannot compile device code")
    want_home = expected.get("cuda_home")
    if want_home:
        if cuda_home != want_home:
            problems.append(f"CUDA_HOME is {cuda_home!r}, expected {want_home!r}: "
                            "JIT builds take their compiler from CUDA_HOME")
        elif nvcc["path"] is not None:
            home_nvcc = os.path.realpath(os.path.join(cuda_home, "bin", "nvcc"))
            if home_nvcc != os.path.realpath(nvcc["path"]):
                problems.append(f"CUDA_HOME's nvcc ({home_nvcc}) is not the nvcc on PATH "
                                f"({os.path.realpath(nvcc['path'])}): JIT builds and PATH would use "
                                "different compilers")
    return {"ok": not problems, "packages": packages, "nvcc": nvcc, "cuda_home": cuda_home,
            "problems": problems}


def load_expected(argument):
    if argument is None:
        argument = os.path.join(HERE, "expected.json")
    text = argument if argument.lstrip().startswith("{") else open(argument, encoding="utf-8").read()
    expected = json.loads(text)
    if not isinstance(expected, dict) or not isinstance(expected.get("packages", {}), dict):
        raise ValueError("expected values must be a JSON object with a 'packages' object")
    return expected


def link_nvcc(dest):
    try:
        files = importlib.metadata.distribution(NVCC_PACKAGE).files or []
    except importlib.metadata.PackageNotFoundError:
        print(f"link-nvcc: {NVCC_PACKAGE} is not installed", file=sys.stderr)
        return 1
    candidates = [f for f in files if tuple(f.parts[-2:]) == ("bin", "nvcc")]
    if len(candidates) != 1:
        print(f"link-nvcc: pip recorded {len(candidates)} bin/nvcc files for {NVCC_PACKAGE}, expected one",
              file=sys.stderr)
        return 1
    nvcc = os.path.realpath(str(candidates[0].locate()))
    if not (os.path.isfile(nvcc) and os.access(nvcc, os.X_OK)):
        print(f"link-nvcc: {nvcc} is not an executable file", file=sys.stderr)
        return 1
    root = os.path.dirname(os.path.dirname(nvcc))
    if os.path.lexists(dest):
        if not os.path.islink(dest):
            print(f"link-nvcc: {dest} exists and is not a symlink", file=sys.stderr)
            return 1
        os.unlink(dest)
    os.symlink(root, dest)
    print(f"link-nvcc: {dest} -> {root}")
    return 0


def default_pip_bundle():
    """The bundle pip verifies against when told nothing (its certifi, else OpenSSL's default file)."""
    try:
        from pip._vendor import certifi  # pip's own choice, including a distribution's patched one
        return certifi.where()
    except Exception:  # any failure means: fall back to OpenSSL's default
        return __import__("ssl").get_default_verify_paths().cafile


def ca_bundle(extra, out):
    with open(extra, encoding="utf-8") as handle:
        extra_text = handle.read()
    if "BEGIN CERTIFICATE" not in extra_text:
        print(f"ca-bundle: {extra} holds no PEM certificate", file=sys.stderr)
        return 1
    parts = []
    base = default_pip_bundle()
    if base and os.path.isfile(base):
        with open(base, encoding="utf-8") as handle:
            parts.append(handle.read().rstrip("\n") + "\n")
    parts.append(extra_text.rstrip("\n") + "\n")
    with open(out, "w", encoding="utf-8") as handle:
        handle.write("".join(parts))
    print(f"ca-bundle: {out} = {base or '(no default bundle)'} + {extra}")
    return 0


def main(argv):
    if argv and argv[0] == "link-nvcc" and len(argv) == 2:
        return link_nvcc(argv[1])
    if argv and argv[0] == "ca-bundle" and len(argv) == 3:
        return ca_bundle(argv[1], argv[2])
    if argv and argv[0] == "check":
        argv = argv[1:]
    if len(argv) > 1 or (argv and argv[0] in ("link-nvcc", "ca-bundle", "-h", "--help")):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        expected = load_expected(argv[0] if argv else None)
    except (OSError, ValueError) as error:
        print(json.dumps({"ok": False, "problems": [f"cannot read the expected values: {error}"]}))
        return 2
    result = check(expected)
    print(json.dumps(result, sort_keys=True))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
