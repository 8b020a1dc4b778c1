"""A bare GPU server with the defaults (issue 58): the plan of each system the README names, from the snapshot the
project's own snapshot program read on a real bare Ubuntu 24.04 H200 server (tests/unit/fixtures/h200-2026-12-04/
snapshot.json: driver 580, no Docker, no NVIDIA runtime), its os section set to each other system. Ubuntu cannot
be built here, so its plan (packages, sources, driver and toolkit spellings) is tested from these recorded facts;
Debian 12 and 13 also converge on real hosts in the e2e suite (docs/real-servers.md)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from unittest import mock

import pytest
from conftest import FIXTURES, pinned_defaults

from sglang_infra.plan.problems import DeployDataError
from sglang_infra.plan.resolve import resolve
from sglang_infra.run import sources

TASK = Path(__file__).resolve().parents[2] / "tasks" / "docker_engine.py"

DEFAULTS = pinned_defaults()
RECORDED = json.loads((FIXTURES / "h200-2026-12-04" / "snapshot.json").read_text())
TOOLKIT = DEFAULTS["sglang_nvidia_toolkit_apt_url"]
DOCKER = DEFAULTS["sglang_docker_apt_url"]
UBUNTU = ("docker.io", "docker-compose-v2", "apparmor", "xz-utils", "pigz")
# Each named system: its os-release, the engine's packages from its own archive, Docker's repository's line.
SYSTEMS = {
    "Ubuntu 24.04": ({"id": "ubuntu", "version": "24.04"}, UBUNTU, "ubuntu noble"),
    "Ubuntu 22.04": ({"id": "ubuntu", "version": "22.04"}, UBUNTU, "ubuntu jammy"),
    "Debian 13": ({"id": "debian", "version": "13"}, (
        "docker.io", "docker-cli", "docker-buildx", "docker-compose", "apparmor", "xz-utils"), "debian trixie"),
    "Debian 12": ({"id": "debian", "version": "12"}, None, "debian bookworm"),
}


def bare(system: str) -> dict:
    return {**RECORDED, "os": {**RECORDED["os"], **SYSTEMS[system][0]}}


def test_the_recorded_server_is_bare():
    docker = RECORDED["docker"]
    assert (docker["cli"], docker["api"], docker["compose_plugin"]) == (None, False, None)
    assert RECORDED["gpus"]["runtimes"] == [] and RECORDED["gpus"]["query"][0].startswith("0, NVIDIA H200")


@pytest.mark.parametrize("system", [s for s in SYSTEMS if SYSTEMS[s][1]])
def test_a_bare_gpu_server_converges_with_the_defaults_engine_and_toolkit_planned(system):
    plan = resolve("gpu-01", DEFAULTS, bare(system))
    assert plan.engine.packages == SYSTEMS[system][1] and plan.engine.repo is None
    assert plan.engine.toolkit is not None
    assert (plan.engine.toolkit.key_url, plan.engine.toolkit.line) == (
        f"{TOOLKIT}/gpgkey", f"deb [signed-by={{keyring}}] {TOOLKIT}/stable/deb/amd64 /")
    assert plan.driver.pin is None and plan.driver.packages == ()   # a driver only when pinned
    fetched = {(s.url, s.key) for s in sources.fetched(plan, bare(system))}
    assert (f"{TOOLKIT}/gpgkey", "sglang_nvidia_toolkit_apt_url") in fetched


@pytest.mark.parametrize("system", SYSTEMS)
def test_dockers_repository_is_spelled_for_each_system(system):
    plan = resolve("gpu-01", {**DEFAULTS, "sglang_docker_source": "docker"}, bare(system))
    family, codename = SYSTEMS[system][2].split()
    assert plan.engine.packages == ("docker-ce", "docker-ce-cli", "containerd.io", "docker-compose-plugin")
    assert plan.engine.repo is not None
    assert (plan.engine.repo.key_url, plan.engine.repo.line) == (
        f"{DOCKER}/{family}/gpg", f"deb [signed-by={{keyring}}] {DOCKER}/{family} {codename} stable")


def test_a_bare_debian_12_server_with_the_distributions_source_is_refused_naming_dockers_repository():
    with pytest.raises(DeployDataError) as refused:
        resolve("gpu-01", DEFAULTS, bare("Debian 12"))
    assert any("sglang_docker_source = 'docker'" in p for p in refused.value.problems)


def test_opting_out_of_the_toolkit_still_refuses_with_the_install_hint():
    with pytest.raises(DeployDataError) as refused:
        resolve("gpu-01", {**DEFAULTS, "sglang_install_nvidia_toolkit": False}, bare("Ubuntu 24.04"))
    assert [p for p in refused.value.problems if "sglang_install_nvidia_toolkit" in p]


@pytest.mark.parametrize("system,packages,cuda", [
    ("Ubuntu 24.04", ("nvidia-driver-580-server-open=580.159.04-*",), None),
    ("Ubuntu 22.04", ("nvidia-driver-580-server-open=580.159.04-*",), None),
    ("Debian 13", ("nvidia-open=580.159.04-*",), "debian13"),
    ("Debian 12", ("nvidia-open=580.159.04-*",), "debian12"),
])
def test_a_pinned_driver_is_planned_in_each_systems_spelling_and_its_source_asked(system, packages, cuda):
    data = {**DEFAULTS, "sglang_nvidia_driver_version": "580.159.04", "sglang_docker_source": "docker"}
    snapshot = {**bare(system), "gpus": {**RECORDED["gpus"], "driver": {**RECORDED["gpus"]["driver"],
                                                                         "driver": "570.195.03"}}}
    plan = resolve("gpu-01", data, snapshot)
    assert plan.driver.packages == packages
    asked = [s.key for s in sources.fetched(plan, snapshot)]
    if cuda is None:   # Ubuntu's own archive carries the driver
        assert plan.driver.repo is None and "sglang_nvidia_cuda_apt_url" not in asked
    else:
        assert plan.driver.repo is not None and f"/{cuda}/x86_64" in plan.driver.repo.directory
        assert "sglang_nvidia_cuda_apt_url" in asked


def test_no_driver_is_installed_when_none_is_pinned_and_its_source_is_not_asked():
    plan = resolve("gpu-01", {**DEFAULTS, "sglang_docker_source": "docker"}, bare("Debian 12"))
    assert plan.driver.packages == () and "sglang_nvidia_cuda_apt_url" not in [
        s.key for s in sources.fetched(plan, bare("Debian 12"))]


def engine_install(the_plan) -> dict:
    """The arguments tasks/docker_engine.py gives apt.packages on a host with ``the_plan``."""
    calls: list[dict] = []
    with mock.patch("sglang_infra.run.preflight.plan_of", lambda host: the_plan), \
            mock.patch("sglang_infra.operations.system.keyrings_checked", lambda *a, **k: None), \
            mock.patch("sglang_infra.operations.system.vendor_repository", lambda *a, **k: None), \
            mock.patch("sglang_infra.operations.docker.docker_service", lambda *a, **k: None), \
            mock.patch("pyinfra.operations.apt.packages", lambda **kwargs: calls.append(kwargs)):
        runpy.run_path(str(TASK))
    (install,) = calls
    return install


@pytest.mark.parametrize("system", [s for s in SYSTEMS if SYSTEMS[s][1]])
def test_the_distributions_engine_is_installed_as_named_without_its_recommends(system):
    install = engine_install(resolve("gpu-01", DEFAULTS, bare(system)))
    assert install["packages"] == list(SYSTEMS[system][1])
    assert install["extra_install_args"] == "--no-install-recommends"   # no needrestart, git, perl, criu


def test_dockers_own_packages_are_installed_as_docker_ships_them():
    install = engine_install(resolve("gpu-01", {**DEFAULTS, "sglang_docker_source": "docker"}, bare("Debian 12")))
    assert install["packages"][0] == "docker-ce" and install["extra_install_args"] is None
