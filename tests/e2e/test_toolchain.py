"""The toolchain image on a real host with nested Docker: built FROM the
stand-in server image with flashinfer's three packages from the STAND-IN
wheel index (tests/support/wheelindex, pypiserver on the test network's gateway) and
nvidia-cuda-nvcc with its companions from pip's default index for real,
through the machine's CA bundle (sglang_extra_ca_bundle); checked inside;
served by compose. A re-run builds nothing; an index handing out the wrong
version is caught with the old image still serving; a pin change rebuilds and
recreates; drift inside the running container fails the gate; the host's own
old nvcc is never touched."""

from __future__ import annotations

import json
import shlex
import subprocess
import time

import pytest

from harness import PROJECT_DIR, _env, run_deploy
from testbed import hosts as testbed_hosts
from wheelindex import WheelIndex

NAME = "sg-toolchain-1"
DOCKER = "/opt/sglang/docker"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
CHECK = "python3 /usr/local/share/sglang-toolchain/toolchain_check.py"
# The host's own toolkit: CUDA 12.0, as on the runbook's servers. The deploy must leave it alone.
SYSTEM_NVCC = ("mkdir -p /usr/local/cuda/bin && printf '#!/bin/sh\\necho \"Cuda compilation tools, release 12.0, "
               "V12.0.140\"\\n' > /usr/local/cuda/bin/nvcc && chmod 755 /usr/local/cuda/bin/nvcc && "
               "ln -s /usr/local/cuda/bin/nvcc /usr/bin/nvcc")
SYSTEM_STATE = ("stat -c '%n %s %Y %a %N' /usr/bin/nvcc /usr/local/cuda /usr/local/cuda/bin/nvcc && "
                "sha256sum /usr/local/cuda/bin/nvcc && find /usr/local/cuda | sort")


def flashinfer(version: str) -> dict[str, str]:
    return {"flashinfer-python": version, "flashinfer-cubin": version, "flashinfer-jit-cache": f"{version}+cu130"}


def in_stack(host, command: str, check: bool = True):
    return host.exec(f"cd {DOCKER} && docker compose exec -T sglang {command}", check=check)


def serving(host) -> tuple[str, str]:
    """(image, container id and start time) of the running service."""
    image = host.exec(f"cd {DOCKER} && docker compose ps --format '{{{{.Image}}}}'").stdout.strip()
    started = host.exec(f"docker inspect -f '{{{{.Id}}}} {{{{.State.StartedAt}}}}' "
                        f"$(cd {DOCKER} && docker compose ps -q sglang)").stdout.strip()
    return image, started


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    served = WheelIndex(tmp_path_factory.mktemp("wheelindex") / "wheels", host=testbed_hosts.network_gateway(), port=0)
    served.serve(flashinfer("0.6.14"))
    with served:
        yield served


def toolchain_data(index) -> dict:
    return {"sglang_toolchain_image": True, "sglang_flashinfer_index_url": index.url,
            "sglang_extra_ca_bundle": CA_BUNDLE}


@pytest.fixture(scope="module")
def built(testbed, workdir, index, measure):
    host = testbed.host(NAME)
    host.exec(SYSTEM_NVCC)
    system_before = host.exec(SYSTEM_STATE).stdout
    inventory = testbed.inventory(workdir / "toolchain.py", {"production": [(host, toolchain_data(index))]})
    started = time.monotonic()
    first = run_deploy(inventory)
    assert first.returncode == 0, first.output[-5000:]
    measure(f"toolchain: first converge with the image build {time.monotonic() - started:.1f} s")
    return host, inventory, first, system_before


def test_the_stack_runs_the_built_image_with_the_pinned_nvcc(built):
    host, _, first, _ = built
    image, _ = serving(host)
    assert image.startswith("sglang-serving:")
    version = in_stack(host, "nvcc --version").stdout
    assert "release 13.3" in version and "V13.3.73" in version
    report = json.loads(in_stack(host, CHECK).stdout.strip().splitlines()[-1])
    assert report["ok"] and report["packages"] == {
        "flashinfer-python": "0.6.14", "flashinfer-cubin": "0.6.14", "flashinfer-jit-cache": "0.6.14+cu130",
        "nvidia-cuda-nvcc": "13.3.73", "nvidia-nvvm": "13.3.73", "nvidia-cuda-crt": "13.3.73"}
    assert f"gate[{NAME}]: toolchain check passed" in first.output


def test_a_rerun_builds_nothing(built, measure):
    host, inventory, _, _ = built
    before = serving(host)
    started = time.monotonic()
    again = run_deploy(inventory)
    measure(f"toolchain: no-change re-run {time.monotonic() - started:.1f} s")
    assert again.returncode == 0 and again.changed(NAME) == [], again.output[-3000:]
    assert serving(host) == before


def test_an_index_serving_the_wrong_version_is_caught_and_the_old_image_keeps_serving(built, index):
    host, inventory, _, _ = built
    before = serving(host)
    # A rebuilt wheel under a local label the pin lacks: pip takes it, the image's own check does not.
    index.serve({**flashinfer("0.6.15"), "flashinfer-python": "0.6.15+rebuilt"})
    result = run_deploy(inventory, "--data", "sglang_flashinfer_version=0.6.15")
    assert result.returncode != 0
    assert "flashinfer-python is 0.6.15+rebuilt, pinned 0.6.15" in result.output, result.output[-4000:]
    assert serving(host) == before
    assert before[0] in host.exec(f"cat {DOCKER}/compose.yaml").stdout


def test_a_pin_change_rebuilds_and_recreates(built, index):
    host, inventory, _, _ = built
    old_image, old_started = serving(host)
    index.serve(flashinfer("0.6.15"))
    result = run_deploy(inventory, "--data", "sglang_flashinfer_version=0.6.15")
    assert result.returncode == 0, result.output[-4000:]
    image, started = serving(host)
    assert image != old_image and started != old_started
    report = json.loads(in_stack(host, CHECK).stdout.strip().splitlines()[-1])
    assert report["ok"] and report["packages"]["flashinfer-jit-cache"] == "0.6.15+cu130"
    # Back to the defaults: the 0.6.14 image is still on the host, so nothing is built.
    back = run_deploy(inventory)
    assert back.returncode == 0, back.output[-3000:]
    assert serving(host)[0] == old_image
    assert not [op for op in back.changed(NAME) if "is built with the toolchain pins" in op]


def test_drift_inside_the_running_container_fails_the_gate(built):
    host, inventory, _, _ = built
    script = ('f=$(python3 -c \'import importlib.metadata as m; print(m.distribution("flashinfer-cubin")._path)\')'
              '/METADATA && sed -i "s/^Version:.*/Version: 0.6.13/" "$f"')
    in_stack(host, "sh -c " + shlex.quote(script))
    drifted = json.loads(in_stack(host, CHECK, check=False).stdout.strip().splitlines()[-1])
    assert not drifted["ok"]
    result = run_deploy(inventory, "--data", "sglang_validate=always")
    assert result.returncode != 0
    assert "toolchain check in the running container" in result.output, result.output[-4000:]
    # the config is the last known-good one (the drift is the container's): recreated, never kept as failed
    assert "This config is the last known-good one (nothing is kept as *.failed); recreated, it serves and " \
        "validates again" in result.output, result.output[-4000:]
    assert json.loads(in_stack(host, CHECK).stdout.strip().splitlines()[-1])["ok"]


def test_the_hosts_own_toolkit_is_untouched(built):
    host, _, _, system_before = built
    assert host.exec(SYSTEM_STATE).stdout == system_before
    assert "release 12.0" in host.exec("nvcc --version").stdout


def test_a_locked_wheel_whose_bytes_changed_fails_the_build_and_the_old_image_keeps_serving(testbed, built, index,
                                                                                           tmp_path):
    """With a lock the build installs with --require-hashes: other bytes under the same file name and version
    (flashinfer-jit-cache, which only the stand-in index serves) fail the build; the right bytes build."""
    host, _, _, _ = built
    index.serve(flashinfer("0.6.14"))
    # The same host and data in an inventory of its own directory, where the lock is written beside it.
    inventory = testbed.inventory(tmp_path / "toolchain.py", {"production": [(host, toolchain_data(index))]})
    locked = subprocess.run(["bash", "scripts/lock.sh", str(inventory)], cwd=PROJECT_DIR, env=_env(),
                            capture_output=True, text=True, timeout=600)
    assert locked.returncode == 0, locked.stderr
    wheels = json.loads((tmp_path / "sglang.lock").read_text())["wheels"]
    assert [f["file"] for f in wheels["flashinfer-jit-cache==0.6.14+cu130"]] == [
        "flashinfer_jit_cache-0.6.14+cu130-1-py3-none-any.whl"]
    assert wheels["nvidia-cuda-nvcc==13.3.73"]   # from pip's default index, hashed as it lists them
    before = serving(host)
    try:
        index.serve(flashinfer("0.6.14"), rebuilt=["flashinfer-jit-cache"])
        refused = run_deploy(inventory)
    finally:
        index.serve(flashinfer("0.6.14"))
    assert refused.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE" in refused.output, \
        refused.output[-4000:]
    assert serving(host) == before
    built_ok = run_deploy(inventory)
    assert built_ok.returncode == 0, built_ok.output[-4000:]
    image, _ = serving(host)
    assert image != before[0] and image.startswith("sglang-serving:")
    assert "--require-hashes" in host.exec(f"cat {DOCKER}/Dockerfile").stdout
    report = json.loads(in_stack(host, CHECK).stdout.strip().splitlines()[-1])
    assert report["ok"] and report["packages"]["flashinfer-jit-cache"] == "0.6.14+cu130"
