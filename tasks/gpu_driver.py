"""The driver's companions on GPU hosts, each only where the data lets the
deploy install it (otherwise the preflight refuses the host with the fix):
Fabric Manager at the driver's exact version on an NVSwitch board, with NVLSM
where the board needs it, then its service; nvidia-persistenced where a GPU's
persistence mode is off. The driver itself is the operator's (docs/gpus.md)."""

from pyinfra import host

from sglang_infra.gpus import FABRIC_MANAGER_UNIT, PERSISTENCED_UNIT, fabric_manager_packages, persistenced_packages
from sglang_infra.operations.gpu_driver import driver_unit_running, fabric_manager_installed
from sglang_infra.preflight import plan_of

plan = plan_of(host)
facts = plan.gpus.driver

if plan.gpus.count and facts.nvswitches and facts.version and plan.install_fabric_manager:
    fabric_manager_installed(name=f"Ensure Fabric Manager {facts.version} is installed (the driver's version)",
                             version=facts.version, packages=fabric_manager_packages(facts))
    driver_unit_running(name=f"Ensure {FABRIC_MANAGER_UNIT} is enabled and running", unit=FABRIC_MANAGER_UNIT)

if plan.gpus.count and facts.version and plan.enable_persistence:
    os_family = plan.platform.docker_repo_family if plan.platform else None   # "debian" or "ubuntu"
    driver_unit_running(name=f"Ensure {PERSISTENCED_UNIT} keeps the driver initialised", unit=PERSISTENCED_UNIT,
                        packages=persistenced_packages(facts, os_family))
