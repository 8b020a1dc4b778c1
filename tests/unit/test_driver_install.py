"""Installing the pinned NVIDIA driver (sglang_nvidia_driver_version): the plan's package and source per OS, what
tasks/gpu_driver.py asks of its operations (the install, pyinfra's reboot where sglang_allow_reboot allows it, the
check that the pinned driver is the one loaded), and the refusals made before any change. No GPU and no kernel module
exist in a test host, so this is proven against the H200's recorded nvidia-smi document only (docs/gpus.md)."""

from __future__ import annotations

import runpy
from pathlib import Path
from unittest import mock

import pytest
from conftest import pinned_defaults, plan_for
from test_driver_layer import NVSWITCHES, refusals, section

from sglang_infra.operations import gpu_driver
from sglang_infra.plan.refusals import check_data

TASK = Path(__file__).resolve().parents[2] / "tasks" / "gpu_driver.py"
DEFAULTS = pinned_defaults()
CUDA_URL = DEFAULTS["sglang_nvidia_cuda_apt_url"]
RUNNING = "580.159.04"   # the driver of the H200's recording
INSTALL = ["kernel_headers_installed", "vendor_repository", "nvidia_driver_installed"]   # Debian's, in order
DEBIAN = {"id": "debian", "version": "12", "arch": "amd64"}
UBUNTU = {"id": "ubuntu", "version": "24.04", "arch": "amd64"}


def plan(pin, os=DEBIAN, gpus="recorded", **data):
    return plan_for({**DEFAULTS, "sglang_nvidia_driver_version": pin, **data}, None, os=os,
                    gpus=section(gpus) if gpus else None)


def task_calls(the_plan) -> list[tuple[str, dict]]:
    """What tasks/gpu_driver.py asks for on a host with ``the_plan``: each operation's name and arguments."""
    calls: list[tuple[str, dict]] = []

    def recorder(name):
        return lambda *args, **kwargs: calls.append((name, {"args": args, **kwargs}))

    names = ("kernel_headers_installed", "nvidia_driver_installed", "nvidia_driver_loaded", "fabric_manager_installed",
             "driver_unit_running")
    with mock.patch("sglang_infra.run.preflight.plan_of", lambda host: the_plan), \
            mock.patch("pyinfra.operations.server.reboot", recorder("reboot")), \
            mock.patch("sglang_infra.operations.roll.driver_rolled", recorder("driver_rolled")), \
            mock.patch("sglang_infra.operations.system.driver_unpinned", recorder("driver_unpinned")), \
            mock.patch("sglang_infra.operations.system.vendor_repository", recorder("vendor_repository")), \
            mock.patch.multiple(gpu_driver, **{name: recorder(name) for name in names}):
        runpy.run_path(str(TASK))
    return calls


def test_debian_installs_nvidia_s_open_driver_from_the_cuda_repository_with_its_key_pinned():
    calls = dict(task_calls(plan("580.105.08")))
    repo = calls["vendor_repository"]
    assert repo["args"][1] == f"{CUDA_URL}/debian12/x86_64/3bf863cc.pub"
    assert repo["args"][2] == f"deb [signed-by={{keyring}}] {CUDA_URL}/debian12/x86_64/ /"
    assert repo["fingerprint"] == "EB693B3035CD5710E231E123A4B469963BF863CC"
    assert calls["nvidia_driver_installed"]["packages"] == ["nvidia-open=580.105.08-*"]
    assert calls["nvidia_driver_installed"]["version"] == "580.105.08"


def test_debian_13_s_cuda_repository_is_signed_by_its_newer_key():
    repo = plan("580.105.08", os={"id": "debian", "version": "13", "arch": "arm64"}).driver.repo
    assert repo.directory == f"{CUDA_URL}/debian13/sbsa"
    assert repo.key_url.endswith("/debian13/sbsa/8793F200.pub")
    assert repo.fingerprint == "02182E60104FCDC26EAE1B8597A5D4CB8793F200"


def test_ubuntu_installs_its_own_archive_s_server_open_driver_and_adds_no_repository():
    calls = dict(task_calls(plan("580.105.08", os=UBUNTU)))
    assert "vendor_repository" not in calls
    assert calls["nvidia_driver_installed"]["packages"] == ["nvidia-driver-580-server-open=580.105.08-*"]


def test_the_proprietary_modules_where_the_data_says_so():
    assert plan("580.105.08", os=UBUNTU, sglang_nvidia_driver_open=False).driver.packages == \
        ("nvidia-driver-580-server=580.105.08-*",)
    assert plan("580.105.08", sglang_nvidia_driver_open=False).driver.packages == ("cuda-drivers=580.105.08-*",)


def test_a_host_running_the_pinned_driver_gets_nothing_of_the_driver():
    assert [name for name, _ in task_calls(plan(RUNNING))] == []


def test_no_pin_leaves_the_driver_alone():
    """Only the deploy's own pin and hold go (issue 52 item 7, operations/system.driver_unpinned); the driver stays."""
    assert [name for name, _ in task_calls(plan(None))] == ["driver_unpinned"]


def test_without_reboot_permission_the_host_is_installed_then_stopped_without_a_reboot():
    calls = task_calls(plan("580.105.08"))
    assert [name for name, _ in calls] == [*INSTALL, "nvidia_driver_loaded"]
    assert calls[-1][1]["rebooted"] is False


def test_with_reboot_permission_pyinfra_s_reboot_runs_between_the_install_and_the_check():
    calls = task_calls(plan("580.105.08", os=UBUNTU, sglang_allow_reboot=True))
    assert [name for name, _ in calls] == ["kernel_headers_installed", "nvidia_driver_installed", "reboot",
                                           "nvidia_driver_loaded"]
    assert calls[-1][1]["rebooted"] is True and calls[-1][1]["planned_gpus"] == 1


def test_a_bare_server_with_a_pinned_driver_is_not_refused_for_its_missing_gpus():
    assert refusals(None, sglang_nvidia_driver_version="580.105.08") == {}
    assert "sglang_require_gpu" in refusals(None)
    calls = task_calls(plan("580.105.08", gpus=None, sglang_allow_reboot=True))
    assert calls[-1][0] == "nvidia_driver_loaded" and calls[-1][1]["planned_gpus"] == 0


@pytest.mark.parametrize("value", ["580", "580.105", "r580.105.08", "580.105.08-1", 580, "latest"])
def test_a_malformed_driver_version_is_refused_naming_the_key_and_the_fix(value):
    errors = check_data("gpu-01", {**DEFAULTS, "sglang_nvidia_driver_version": value})
    assert len(errors) == 1
    assert "gpu-01" in errors[0] and "sglang_nvidia_driver_version" in errors[0] and "'580.105.08'" in errors[0]


def test_a_pinned_driver_too_old_for_the_image_s_cuda_is_refused_naming_the_minimum():
    what, fix = refusals(section("recorded"), sglang_nvidia_driver_version="570.195.03")["sglang_nvidia_driver_version"]
    assert "570.195.03" in what and "cu130" in what and "580.65.06" in what
    assert "R580" in fix


def test_a_pinned_driver_replaces_a_running_one_too_old_for_the_image():
    assert "sglang_image_cuda_flavor" in refusals(section("h200-r570-handwritten"))
    assert refusals(section("h200-r570-handwritten"), sglang_nvidia_driver_version="580.105.08") == {}


def test_the_open_modules_are_refused_on_a_gpu_older_than_turing():
    gpus = {**section("recorded"), "query": ["0, Tesla V100-SXM2-32GB, 7.0, 32768"]}
    assert "sglang_nvidia_driver_open" in refusals(gpus, sglang_nvidia_driver_version="580.105.08")
    assert "sglang_nvidia_driver_open" not in refusals(gpus, sglang_nvidia_driver_version="580.105.08",
                                                       sglang_nvidia_driver_open=False)


def test_on_an_nvswitch_board_fabric_manager_must_match_the_pinned_driver_not_the_running_one():
    running = {"nvidia-fabricmanager.service": {"active": "active"}}
    gpus = section("recorded", nvswitches=NVSWITCHES, fabric_manager=RUNNING, units=running)
    what, fix = refusals(gpus, sglang_nvidia_driver_version="580.105.08")["sglang_install_fabric_manager"]
    assert "needs Fabric Manager 580.105.08" in what and "'nvidia-fabricmanager-580=580.105.08-*'" in fix
    assert refusals(gpus, sglang_nvidia_driver_version="580.105.08", sglang_install_fabric_manager=True) == {}


# ------------------------------------- the module is built before any reboot (issue 52, item 4), run for real in bash
STUBS = {   # the host's tools, as far as the two commands ask them; each answers from the environment
    "uname": 'echo "$RUNNING_KERNEL"',
    "dpkg-query": 'case " $INSTALLED " in *" ${@: -1} "*) printf "install ok installed" ;; *) exit 1 ;; esac',
    "apt-get": 'echo "apt-get $*" >> "$LOG"; [ "$1" = update ] && exit 0; '
               'for a in "$@"; do case " $UNAVAILABLE " in *" $a "*) echo "E: Unable to locate package $a" >&2; '
               'exit 100 ;; esac; done',
    "modinfo": 'eval "echo \\"\\${BUILT_$(echo "$2" | tr .- __)}\\""',
    "dkms": 'echo "nvidia/580.105.08: added"',
}


def on_host(command: str, tmp_path: Path, kernels=("6.1.0-28-amd64",), running="6.1.0-28-amd64", installed=(),
            unavailable=(), built=None):
    """``command`` in bash on a stand-in host: its /boot holds ``kernels``, ``running`` runs, dpkg knows
    ``installed``, apt cannot find ``unavailable``, ``modinfo -k K`` answers built[K]. (exit code, stderr, apt's
    calls)."""
    import subprocess

    stubs, boot = tmp_path / "bin", tmp_path / "boot"
    stubs.mkdir(exist_ok=True)
    boot.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        (stubs / name).write_text(f"#!/bin/bash\n{body}\n")
        (stubs / name).chmod(0o755)
    for kernel in kernels:
        (boot / f"vmlinuz-{kernel}").write_text("")
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "RUNNING_KERNEL": running, "INSTALLED": " ".join(installed),
           "UNAVAILABLE": " ".join(unavailable), "LOG": str(tmp_path / "apt.log"),
           **{f"BUILT_{k.replace('.', '_').replace('-', '_')}": v for k, v in (built or {}).items()}}
    done = subprocess.run(["bash", "-c", command.replace("/boot/", f"{boot}/")], env=env, capture_output=True,
                          text=True, timeout=30)
    log = tmp_path / "apt.log"
    return done.returncode, done.stderr, log.read_text().splitlines() if log.exists() else []


def installs(calls):
    return [call.split()[-1] for call in calls if " install " in call]


def test_the_headers_of_the_running_kernel_and_of_the_next_boot_are_installed_first(tmp_path):
    rc, _, calls = on_host(gpu_driver.headers_installed(), tmp_path, kernels=("6.1.0-27-amd64", "6.1.0-28-amd64"),
                           running="6.1.0-27-amd64")
    assert rc == 0
    assert installs(calls) == ['linux-headers-6.1.0-27-amd64', 'linux-headers-6.1.0-28-amd64']
    assert all("--no-install-recommends" in call for call in calls if " install " in call)


def test_headers_already_installed_ask_nothing_of_apt(tmp_path):
    rc, _, calls = on_host(gpu_driver.headers_installed(), tmp_path, installed=("linux-headers-6.1.0-28-amd64",))
    assert (rc, calls) == (0, [])


def test_headers_apt_cannot_install_stop_the_host_naming_the_package(tmp_path):
    rc, err, calls = on_host(gpu_driver.headers_installed(), tmp_path, unavailable=("linux-headers-6.1.0-28-amd64",))
    assert rc == 1
    assert "the kernel headers linux-headers-6.1.0-28-amd64 (kernel 6.1.0-28-amd64) cannot be installed" in err
    assert "No driver package was touched" in err
    assert installs(calls) == ["linux-headers-6.1.0-28-amd64"] * 2   # tried, then again after apt-get update


def test_a_module_built_for_the_next_boots_kernel_lets_the_reboot_go_on(tmp_path):
    rc, err, _ = on_host(gpu_driver.module_built("580.105.08"), tmp_path, kernels=("6.1.0-27-amd64", "6.1.0-28-amd64"),
                         running="6.1.0-27-amd64", built={"6.1.0-28-amd64": "580.105.08"})
    assert (rc, err) == (0, "")


@pytest.mark.parametrize("why, built", [
    ("no module at all (the headers were missing: DKMS never built it)", {}),
    ("built for the running kernel only, not the one that boots next", {"6.1.0-27-amd64": "580.105.08"}),
    ("the old driver's module", {"6.1.0-28-amd64": "570.172.08"}),
])
def test_a_module_not_built_for_the_next_boot_stops_the_host_before_the_reboot(tmp_path, why, built):
    rc, err, _ = on_host(gpu_driver.module_built("580.105.08"), tmp_path, kernels=("6.1.0-27-amd64", "6.1.0-28-amd64"),
                         running="6.1.0-27-amd64", built=built)
    assert rc == 1, why
    assert "NVIDIA driver 580.105.08's kernel module is not built for kernel 6.1.0-28-amd64" in err
    assert "The host is not rebooted: it keeps its old driver loaded" in err
    assert "linux-headers-6.1.0-28-amd64" in err and "dkms autoinstall -k 6.1.0-28-amd64" in err
    assert "nvidia/580.105.08: added" in err   # dkms status, for the operator
    assert f"modinfo finds {built.get('6.1.0-28-amd64') or 'no nvidia module'}" in err
