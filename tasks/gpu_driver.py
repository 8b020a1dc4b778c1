"""The driver layer of GPU hosts, each part only where the data lets the deploy
do it (otherwise the preflight refuses the host with the fix): the pinned NVIDIA
driver (sglang_nvidia_driver_version) from the OS's source, then a reboot where
sglang_allow_reboot lets the deploy load it, or the host stops with the
message; Fabric Manager at the driver's exact version on an NVSwitch board,
with NVLSM where the board needs it, then its service; nvidia-persistenced
where a GPU's persistence mode is off (docs/gpus.md)."""

from dataclasses import replace

from pyinfra import host
from pyinfra.operations import server

from sglang_infra.machine.gpus import (
    DRIVER_HELD,
    DRIVER_PREFERENCES,
    FABRIC_MANAGER_UNIT,
    PERSISTENCED_UNIT,
    REBOOT_TIMEOUT,
    fabric_manager_packages,
    persistenced_packages,
)
from sglang_infra.operations.gpu_driver import (
    driver_unit_running,
    fabric_manager_installed,
    nvidia_driver_installed,
    nvidia_driver_loaded,
)
from sglang_infra.operations.system import driver_unpinned, vendor_repository
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
driver = plan.driver
pin = driver.pin
facts = replace(plan.gpus.driver, version=pin) if pin else plan.gpus.driver   # the driver the host runs after this

if pin and plan.gpus.driver.version != pin:   # a host already running the pinned driver is left alone
    repo = driver.repo
    if repo:   # Debian: NVIDIA's CUDA repository (Ubuntu's own archive needs none)
        vendor_repository("NVIDIA CUDA", repo.key_url, f"deb [signed-by={{keyring}}] {repo.directory}/ /",
                          "nvidia-cuda", fingerprint=repo.fingerprint)
    nvidia_driver_installed(name=f"Ensure NVIDIA driver {pin} is installed and held", version=pin,
                            packages=list(driver.packages), held=DRIVER_HELD, preferences=DRIVER_PREFERENCES)
    if driver.allow_reboot:
        server.reboot(name=f"Reboot to load NVIDIA driver {pin} (sglang_allow_reboot)", reboot_timeout=REBOOT_TIMEOUT)
    nvidia_driver_loaded(name=f"Ensure NVIDIA driver {pin} is the one loaded", version=pin,
                         rebooted=driver.allow_reboot, planned_gpus=plan.gpus.count)

if not pin:   # no pin (again): the deploy's pin and hold go, the driver stays (operations/system.driver_unpinned)
    driver_unpinned(name="Ensure no driver pin or hold of the deploy's is left (sglang_nvidia_driver_version None)",
                    preferences=DRIVER_PREFERENCES)

if plan.gpus.count and facts.nvswitches and facts.version and driver.install_fabric_manager:
    fabric_manager_installed(name=f"Ensure Fabric Manager {facts.version} is installed (the driver's version)",
                             version=facts.version, packages=fabric_manager_packages(facts))
    driver_unit_running(name=f"Ensure {FABRIC_MANAGER_UNIT} is enabled and running", unit=FABRIC_MANAGER_UNIT)

if plan.gpus.count and facts.version and driver.enable_persistence:
    os_family = plan.engine.platform.docker_repo_family if plan.engine.platform else None   # "debian" or "ubuntu"
    driver_unit_running(name=f"Ensure {PERSISTENCED_UNIT} keeps the driver initialised", unit=PERSISTENCED_UNIT,
                        packages=persistenced_packages(facts, os_family))
