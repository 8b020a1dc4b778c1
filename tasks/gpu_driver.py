"""The driver layer of GPU hosts, each part only where the data lets the deploy
do it (otherwise the preflight refuses the host with the fix): the pinned NVIDIA
driver (sglang_nvidia_driver_version) from the OS's source, the kernel headers
its module builds against installed first and the module checked built for the
kernel that boots next (else the host stops, its old driver loaded); Fabric
Manager at the driver's exact version on an NVSwitch board, with NVLSM where
the board needs it, installed before the reboot that starts it; then the reboot
where sglang_allow_reboot lets the deploy load the driver, or the host stops
with the message; Fabric Manager's service; nvidia-persistenced where a GPU's
persistence mode is off (docs/gpus.md).

The reboot of a worker some gateway fronts goes in its pool's turns
(sglang_max_unavailable), out of its gateways and drained, then gated on the
new driver and back, as a config change does (operations/roll.py,
driver_rolled); a multi-node group's members reboot together in rank 0's turn,
recreated and gated as one unit. A host alone reboots in this step, at once
(pyinfra's server.reboot): sglang_allow_reboot is its operator's call.
"""

from dataclasses import replace

from pyinfra import host
from pyinfra.operations import server

from sglang_infra.hostside import names
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
    kernel_headers_installed,
    nvidia_driver_installed,
    nvidia_driver_loaded,
)
from sglang_infra.operations.roll import driver_rolled
from sglang_infra.operations.system import driver_unpinned, vendor_repository
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
driver = plan.driver
pin = driver.pin
facts = replace(plan.gpus.driver, version=pin) if pin else plan.gpus.driver   # the driver the host runs after this
changing = bool(pin) and plan.gpus.driver.version != pin   # a host already running the pinned driver is left alone
fabric = bool(plan.gpus.count and facts.nvswitches and facts.version and driver.install_fabric_manager)
persistence = bool(plan.gpus.count and facts.version and driver.enable_persistence)
group = plan.node_group
in_turns = driver.allow_reboot and (plan.roll is not None or group is not None)

if changing:
    kernel_headers_installed(name=f"Ensure the kernel headers NVIDIA driver {pin}'s module builds against are "
                                  "installed (the running kernel's and the next boot's), before any driver package",
                             version=pin)
    repo = driver.repo
    if repo:   # Debian: NVIDIA's CUDA repository (Ubuntu's own archive needs none)
        vendor_repository("NVIDIA CUDA", repo.key_url, f"deb [signed-by={{keyring}}] {repo.directory}/ /",
                          "nvidia-cuda", fingerprint=repo.fingerprint)
    nvidia_driver_installed(name=f"Ensure NVIDIA driver {pin} is installed and held", version=pin,
                            packages=list(driver.packages), held=DRIVER_HELD, preferences=DRIVER_PREFERENCES)

if not pin:   # no pin (again): the deploy's pin and hold go, the driver stays (operations/system.driver_unpinned)
    driver_unpinned(name="Ensure no driver pin or hold of the deploy's is left (sglang_nvidia_driver_version None)",
                    preferences=DRIVER_PREFERENCES)

if fabric:   # before the driver's reboot, which starts it beside the driver it loads
    fabric_manager_installed(name=f"Ensure Fabric Manager {facts.version} is installed (the driver's version)",
                             version=facts.version, packages=fabric_manager_packages(facts))

# every worker of a pinned pool comes to the driver's roll (one already on the pin says so at once: nobody waits for
# it); a group's members reboot in rank 0's turn
if pin and in_turns and (group is None or group.rank == 0):
    turn = f"in its pool's turn in {plan.roll.pool}, out of its gateways and drained" if plan.roll else \
        f"with every member of group {group.name} at once" if group else ""
    driver_rolled(name=f"Ensure NVIDIA driver {pin} is loaded: rebooted {turn}, then gated on it (sglang_allow_reboot)",
                  version=pin, units=tuple(unit for unit, wanted in ((FABRIC_MANAGER_UNIT, fabric),
                                                                     (PERSISTENCED_UNIT, persistence)) if wanted),
                  reboot_timeout=REBOOT_TIMEOUT, project_dir=plan.paths.docker,
                  script=f"{plan.paths.home}/{names.GATE_SCRIPT}", gate=plan.gate, roll=plan.roll, group=group)
if changing and in_turns and not plan.gpus.count:   # a bare server, planned with no GPU: stops for a new plan
    nvidia_driver_loaded(name=f"Ensure NVIDIA driver {pin} is the one loaded", version=pin, rebooted=True,
                         planned_gpus=0)
elif changing and not in_turns:
    if driver.allow_reboot:
        server.reboot(name=f"Reboot to load NVIDIA driver {pin} (sglang_allow_reboot)", reboot_timeout=REBOOT_TIMEOUT)
    nvidia_driver_loaded(name=f"Ensure NVIDIA driver {pin} is the one loaded", version=pin,
                         rebooted=driver.allow_reboot, planned_gpus=plan.gpus.count)

if fabric:
    driver_unit_running(name=f"Ensure {FABRIC_MANAGER_UNIT} is enabled and running", unit=FABRIC_MANAGER_UNIT)

if persistence:
    os_family = plan.engine.platform.docker_repo_family if plan.engine.platform else None   # "debian" or "ubuntu"
    driver_unit_running(name=f"Ensure {PERSISTENCED_UNIT} keeps the driver initialised", unit=PERSISTENCED_UNIT,
                        packages=persistenced_packages(facts, os_family))
