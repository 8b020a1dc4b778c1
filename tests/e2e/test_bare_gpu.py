"""A bare GPU server converges with the defaults (issue 58 item 1), on the GPU stand-ins: a Debian 13 host with a
stand-in nvidia-smi printing the H200 recorded on 2026-12-04 (test_gpu_driver.give_gpu), no Docker, no NVIDIA
runtime, and data that sets nothing about Docker or the toolkit beyond where NVIDIA's repository is: the deploy
installs the engine from the distribution, NVIDIA's Container Toolkit from NVIDIA's repository as a local
repository serves it (testbed/vendorrepo.py: signed by a key the test makes; the package is a STAND-IN whose
`nvidia-ctk runtime configure --runtime=docker` writes the nvidia runtime into /etc/docker/daemon.json as the real
one does), Docker restarts with the `nvidia` runtime, and the stand-in server serves and passes its gate with the
GPU reserved (compose's `driver: nvidia` device request). A re-run changes nothing."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harness import run_deploy
from testbed import hosts as testbed_hosts
from testbed import vendorrepo

from .test_gpu_driver import RECORDED, give_gpu

GPU, REPO = "sg-baregpu", "sg-baregpu-repo"


@pytest.fixture(scope="module")
def bare_gpu(testbed, workdir):
    repository = vendorrepo.serve(testbed.host(REPO, image=testbed_hosts.ensure_bookworm_image()))
    host = testbed.host(GPU)
    give_gpu(host, RECORDED)
    host.exec(vendorrepo.trust_command())
    bare = host.exec("command -v docker nvidia-ctk", check=False).returncode != 0
    inventory = testbed.inventory(workdir / "bare-gpu.py", {"production": [(host, {
        "sglang_require_gpu": True, "sglang_nvidia_toolkit_apt_url": repository.toolkit_url,
        # the test's repository signs with the key the test made (item 4: every vendor key pinned)
        "sglang_nvidia_toolkit_apt_key_fingerprint": repository.fingerprint})]})
    first = run_deploy(inventory)
    second = run_deploy(inventory)
    return SimpleNamespace(host=host, bare=bare, first=first, second=second, repository=repository)


def test_the_host_was_bare(bare_gpu):
    assert bare_gpu.bare


def test_a_bare_gpu_server_converges_with_the_defaults(bare_gpu):
    first = bare_gpu.first
    assert first.returncode == 0, first.why(4000)
    for op in ("tasks/docker_engine.py | Ensure the Docker engine and compose v2 are installed (distribution packages)",
               "tasks/gpu_runtime.py | Ensure the NVIDIA Container Toolkit is installed",
               "tasks/gpu_runtime.py | Ensure Docker has the NVIDIA runtime"):
        assert first.statuses[op][GPU] == "Success", op
    assert f"gate[{GPU}]: passed; this config is now the last known-good one" in first.output, first.why()


def test_docker_lists_the_nvidia_runtime_the_toolkit_configured(bare_gpu):
    host = bare_gpu.host
    config = json.loads(host.exec("cat /etc/docker/daemon.json").stdout)
    assert config["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert "nvidia" in host.exec("docker info --format '{{json .Runtimes}}'").stdout
    shown = host.exec("gpg --show-keys --with-colons /etc/apt/keyrings/nvidia-container-toolkit.asc").stdout
    assert f"fpr:::::::::{bare_gpu.repository.fingerprint}:" in shown


def test_the_server_runs_with_the_gpu_reserved(bare_gpu):
    host = bare_gpu.host
    container = host.exec("cd /opt/sglang/docker && docker compose ps -q sglang").stdout.strip()
    requests = json.loads(host.exec(f"docker inspect -f '{{{{json .HostConfig.DeviceRequests}}}}' {container}").stdout)
    assert requests and requests[0]["Driver"] == "nvidia"


def test_a_rerun_changes_nothing(bare_gpu):
    second = bare_gpu.second
    assert second.returncode == 0, second.why(3000)
    assert second.changed(GPU) == []
