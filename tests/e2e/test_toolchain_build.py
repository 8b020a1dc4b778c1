"""The serving image's toolchain, built for real on this machine's Docker engine.

The rendered Dockerfile is built FROM the stand-in server image (Debian trixie
with python3 and Debian's pip). flashinfer's three packages come from the
STAND-IN wheel index (tests/support/wheelindex) as flashinfer's own index would serve
them; nvidia-cuda-nvcc and its companions come from pip's default index for
real, through this machine's CA bundle. The build runs with `--network host`,
so its RUN steps reach the stand-in index on 127.0.0.1.

Then two indexes that hand out something else than the pins: one whose wheel
lies about its version (pip refuses it, the build fails), one that serves a
version with a local label the pin lacks (pip takes it, the image's own check
fails the build). Either way the image already under the tag is kept.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness import toolchain_context, write_context
from sglang_infra.machine import toolchain
from wheelindex import WheelIndex, build_wheels

CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TEST_LABEL = "sglang-toolchain-test=1"
BUILD_TIMEOUT = 600
GOOD = {"flashinfer-python": "0.6.14", "flashinfer-cubin": "0.6.14", "flashinfer-jit-cache": "0.6.14+cu130"}
PINS = ["flashinfer-python==0.6.14", "flashinfer-cubin==0.6.14", "flashinfer-jit-cache==0.6.14+cu130"]
CHECK = f"{toolchain.SHARE_DIR}/{toolchain.CHECK_NAME}"


def docker(*args, timeout=120, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def docker_available() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_docker = pytest.mark.skipif(not docker_available(), reason="needs a running Docker engine")


def data(index_url: str) -> dict:
    return {
        "sglang_flashinfer_version": "0.6.14",
        "sglang_flashinfer_versions": {},
        "sglang_cuda_flavor": "cu130",
        "sglang_image_cuda_flavor": "cu130",
        "sglang_nvcc_version": "13.3.73",
        "sglang_pip_index_url": None,            # pip's default index, for nvidia-cuda-nvcc
        "sglang_flashinfer_index_url": index_url,
        "sglang_extra_ca_bundle": CA_BUNDLE,
    }


# ---------------------------------------------------------------- the stand-in index itself (no Docker)

@pytest.fixture(scope="module")
def index(tmp_path_factory):
    served = WheelIndex(tmp_path_factory.mktemp("index") / "wheels", host="127.0.0.1", port=0)
    served.serve(GOOD)
    with served:
        yield served


def pip_target(index_url: str, target: Path, *pins: str) -> subprocess.CompletedProcess:
    """The control machine's pip, told about nothing but the stand-in index."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--disable-pip-version-check", "--no-deps",
         "--no-cache-dir", "--index-url", index_url, "--target", str(target), *pins],
        capture_output=True, text=True, timeout=120)


def test_stand_in_wheels_are_valid_wheels(tmp_path):
    paths = build_wheels(tmp_path, GOOD)
    assert [p.name for p in paths] == ["flashinfer_python-0.6.14-1-py3-none-any.whl",
                                       "flashinfer_cubin-0.6.14-1-py3-none-any.whl",
                                       "flashinfer_jit_cache-0.6.14+cu130-1-py3-none-any.whl"]
    with zipfile.ZipFile(paths[2]) as wheel:
        names = wheel.namelist()
        assert "flashinfer_jit_cache/__init__.py" in names
        metadata = wheel.read("flashinfer_jit_cache-0.6.14+cu130.dist-info/METADATA").decode()
        assert "Name: flashinfer-jit-cache\n" in metadata and "Version: 0.6.14+cu130\n" in metadata
        record = wheel.read("flashinfer_jit_cache-0.6.14+cu130.dist-info/RECORD").decode()
        assert len(record.splitlines()) == len(names)
    assert build_wheels(tmp_path / "again", GOOD)[0].read_bytes() == paths[0].read_bytes()  # reproducible


def test_pip_installs_the_stand_ins_and_refuses_a_wheel_that_lies(index, tmp_path):
    proc = pip_target(index.url, tmp_path / "good", *PINS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in (tmp_path / "good").glob("*.dist-info")) == [
        "flashinfer_cubin-0.6.14.dist-info", "flashinfer_jit_cache-0.6.14+cu130.dist-info",
        "flashinfer_python-0.6.14.dist-info"]
    assert "__version__ = '0.6.14'" in (tmp_path / "good" / "flashinfer" / "__init__.py").read_text()
    try:
        index.serve(GOOD, metadata_version_override={"flashinfer-jit-cache": "0.6.13+cu130"})
        proc = pip_target(index.url, tmp_path / "lying", *PINS)
        assert proc.returncode != 0
        assert "inconsistent version" in proc.stdout + proc.stderr
        assert "metadata has '0.6.13+cu130'" in proc.stdout + proc.stderr
        index.serve({**GOOD, "flashinfer-python": "0.6.14+rebuilt"})
        proc = pip_target(index.url, tmp_path / "local", *PINS)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (tmp_path / "local" / "flashinfer_python-0.6.14+rebuilt.dist-info").is_dir()
    finally:
        index.serve(GOOD)


def test_the_lock_records_every_wheel_of_the_exact_pin_with_its_sha256(index):
    """scripts/lock.sh's wheel step against pypiserver: the file and the sha256 of its bytes, exact versions only."""
    import hashlib

    from sglang_infra.fleet import lockgen

    try:
        index.serve({**GOOD, "flashinfer-python": "0.6.14+rebuilt"})
        found = lockgen.resolve_wheels("flashinfer-jit-cache", "0.6.14+cu130", [index.url])
        wheel = index.directory / "flashinfer_jit_cache-0.6.14+cu130-1-py3-none-any.whl"
        assert found == ((wheel.name, hashlib.sha256(wheel.read_bytes()).hexdigest()),)
        with pytest.raises(lockgen.LockGenError, match=r"no index serves a wheel of flashinfer-python==0.6.14"):
            lockgen.resolve_wheels("flashinfer-python", "0.6.14", [index.url])   # 0.6.14+rebuilt is not 0.6.14
        index.serve(GOOD, rebuilt=["flashinfer-jit-cache"])
        assert lockgen.resolve_wheels("flashinfer-jit-cache", "0.6.14+cu130", [index.url])[0][1] != found[0][1]
    finally:
        index.serve(GOOD)


# ---------------------------------------------------------------- the image build (Docker)

@pytest.fixture(scope="module")
def base_image():
    from testbed.hosts import ensure_standin_image

    tag, _archive = ensure_standin_image()
    pip = docker("run", "--rm", tag, "python3", "-m", "pip", "--version", check=False)
    assert pip.returncode == 0, f"the stand-in image {tag} has no pip: {pip.stderr.strip()}"
    return tag


def docker_build(context: toolchain.BuildContext, directory: Path, *, no_cache: bool = False):
    write_context(context, directory)
    args = ["build", "--network", "host", "--rm", "--force-rm", "--label", TEST_LABEL, "-t", context.tag]
    if no_cache:
        args.append("--no-cache")
    return docker(*args, str(directory), timeout=BUILD_TIMEOUT, check=False)


def image_id(tag: str) -> str | None:
    proc = docker("image", "inspect", "-f", "{{.Id}}", tag, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def remove_images(context: toolchain.BuildContext) -> None:
    """The tag, and every image (intermediate ones of failed builds too) carrying this build's inputs label."""
    docker("rmi", "-f", context.tag, check=False)
    for _ in range(5):  # children before parents; bounded
        ids = docker("images", "-a", "-q", "--filter", f"label={toolchain.INPUTS_LABEL}={context.inputs_hash}",
                     check=False).stdout.split()
        if not ids:
            return
        docker("rmi", "-f", *sorted(set(ids)), check=False)


@pytest.fixture(scope="module")
def built(base_image, index, tmp_path_factory):
    context = toolchain_context(data(index.url), base_image)
    proc = docker_build(context, tmp_path_factory.mktemp("context"))
    try:
        yield context, proc
    finally:
        remove_images(context)


def run_check(tag: str) -> tuple[int, dict]:
    proc = docker("run", "--rm", "--network", "none", tag, "python3", CHECK, check=False)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout + proc.stderr
    return proc.returncode, json.loads(lines[0])


@needs_docker
def test_build_installs_the_pins_and_links_nvcc(built):
    context, proc = built
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "ca-bundle: /tmp/sglang-pip-ca.pem" in output  # the CA reached pip
    code, result = run_check(context.tag)
    assert code == 0 and result["ok"] is True, result
    assert result["packages"] == toolchain.pins(data("http://127.0.0.1:1/"))
    assert result["nvcc"] == {"path": "/usr/local/cuda-pip/bin/nvcc", "release": "13.3", "version": "13.3.73"}
    assert result["cuda_home"] == "/usr/local/cuda-pip"

    nvcc = docker("run", "--rm", "--network", "none", context.tag, "nvcc", "--version").stdout
    assert "Cuda compilation tools, release 13.3, V13.3.73" in nvcc
    link = docker("run", "--rm", "--network", "none", context.tag, "readlink", "/usr/local/cuda-pip").stdout.strip()
    assert link.endswith("/dist-packages/nvidia/cu13"), link
    # flashinfer came from the stand-in index, not from the real release on pip's default index
    stand_in = docker("run", "--rm", "--network", "none", context.tag, "python3", "-c",
                      "import importlib.util as u; print(open(u.find_spec('flashinfer').origin).read())").stdout
    assert "STAND_IN = True" in stand_in

    labels = json.loads(docker("image", "inspect", "-f", "{{json .Config.Labels}}", context.tag).stdout)
    assert labels[toolchain.INPUTS_LABEL] == context.inputs_hash
    assert labels["sglang.toolchain.pin.flashinfer-jit-cache"] == "0.6.14+cu130"
    assert labels["sglang.toolchain.base"] == context.base_image


def build_against(built, index, tmp_path, packages, **options):
    """Rebuild the good image's context while the index serves ``packages``; the build must fail.
    Returns (context, image id before, the build's output); the index serves GOOD again after."""
    context, proc = built
    assert proc.returncode == 0
    before = image_id(context.tag)
    try:
        index.serve(packages, **options)
        failed = docker_build(context, tmp_path / "context", no_cache=True)
    finally:
        index.serve(GOOD)
    assert failed.returncode != 0
    return context, before, failed.stdout + failed.stderr


@needs_docker
def test_an_index_whose_wheel_lies_fails_the_build_and_keeps_the_image(built, index, tmp_path):
    context, before, output = build_against(built, index, tmp_path, GOOD,
                                            metadata_version_override={"flashinfer-jit-cache": "0.6.13+cu130"})
    assert "has inconsistent version: expected '0.6.14+cu130', but metadata has '0.6.13+cu130'" in output
    assert "No matching distribution found for flashinfer-jit-cache==0.6.14+cu130" in output
    assert image_id(context.tag) == before


@needs_docker
def test_an_index_serving_a_local_label_is_caught_by_the_check_and_keeps_the_image(built, index, tmp_path):
    context, before, output = build_against(built, index, tmp_path,
                                            {**GOOD, "flashinfer-python": "0.6.14+rebuilt"})
    assert "Successfully installed" in output and "flashinfer-python-0.6.14+rebuilt" in output  # pip took it
    # the check's one JSON line (BuildKit prefixes each output line with its step and time)
    results = [json.loads(m.group(0)) for m in re.finditer(r'\{"cuda_home".*\}', output)]
    assert len(results) == 1 and results[0]["ok"] is False
    assert results[0]["problems"] == [
        "flashinfer-python is 0.6.14+rebuilt, pinned 0.6.14: flashinfer and its JIT cache must be one version, "
        "or SGLang refuses to start with a version-mismatch error"]
    assert image_id(context.tag) == before
