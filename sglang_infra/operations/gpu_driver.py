"""The driver layer of a GPU host, when the operator's data lets the deploy install it: the pinned NVIDIA driver and
the check that it is the one loaded; Fabric Manager at the driver's exact version on an NVSwitch board (and NVLSM
where the board needs it), and nvidia-persistenced.
Both read the snapshot's gpus section (hostside/read/snapshot.py: nv-fabricmanager's own version, the units' states)."""

from __future__ import annotations

from pyinfra import host

from ..run.facts import current
from ..run.operation import q, snapshot_operation
from .system import _APT


@snapshot_operation
def fabric_manager_installed(version: str, packages: list[str]):
    """
    Ensure Fabric Manager ``version`` (the driver's) is installed, from
    ``packages`` (the pinned spellings gpus.fabric_manager_packages gives),
    from the apt sources the host already has: the ones its driver came
    from, which hold the matching build. A Fabric Manager of another
    version is replaced: it refuses to start beside another driver.
    """
    found = (current(host).get("gpus") or {}).get("fabric_manager")
    if found == version:
        host.noop(f"Fabric Manager {version} already installed")
        return
    words = " ".join(q(name) for name in packages)
    yield f"{_APT} --allow-downgrades {words} || {{ apt-get update -qq && {_APT} --allow-downgrades {words}; }}"


@snapshot_operation
def driver_unit_running(unit: str, packages: list[str] = ()):  # type: ignore[assignment]
    """
    Ensure the driver's ``unit`` (nvidia-fabricmanager.service,
    nvidia-persistenced.service) is enabled and running; ``packages`` are
    installed first when systemd does not know the unit.
    """
    state = ((current(host).get("gpus") or {}).get("units") or {}).get(unit) or {}
    if state.get("active") == "active" and state.get("enabled") == "enabled":
        host.noop(f"{unit} already enabled and running")
        return
    if not state.get("loaded") and packages:
        words = " ".join(q(name) for name in packages)
        yield f"{_APT} {words} || {{ apt-get update -qq && {_APT} {words}; }}"
    yield f"systemctl daemon-reload && systemctl enable --now {q(unit)}"


def _running() -> tuple[str | None, str | None]:
    """The driver nvidia-smi reports now, and why it could not be read."""
    found = (current(host).get("gpus") or {}).get("driver") or {}
    return found.get("driver"), found.get("error")


@snapshot_operation
def nvidia_driver_installed(version: str, packages: list[str], held: str, preferences: str):
    """
    Ensure NVIDIA driver ``version`` is installed and held there: apt's
    preferences pin the ``held`` packages to it (priority 1001, so an
    unattended upgrade never moves them and a newer driver is replaced),
    ``packages`` (gpus.driver_packages's pinned spelling) are installed and
    marked held. A host whose running driver is ``version`` is left alone.
    """
    running, _ = _running()
    if running == version:
        host.noop(f"NVIDIA driver {version} already running")
        return
    pin = (f"Package: {held}", f"Pin: version {version}-*", "Pin-Priority: 1001")
    yield f"printf '%s\\n' {' '.join(q(line) for line in pin)} > {q(preferences)}"
    words = " ".join(q(name) for name in packages)
    install = f"{_APT} --allow-downgrades --allow-change-held-packages {words}"
    yield f"{install} || {{ apt-get update -qq && {install}; }}"
    yield "apt-mark hold " + " ".join(q(name.split("=")[0]) for name in packages)


@snapshot_operation
def nvidia_driver_loaded(version: str, rebooted: bool, planned_gpus: int):
    """
    Ensure the driver nvidia-smi reports is ``version``, the one just
    installed; otherwise stop this host before anything runs on a driver
    that is not loaded: without ``rebooted`` the message says a reboot is
    needed and which key allows it. A plan made with no GPU to see
    (``planned_gpus`` 0, a bare server) stops the host too, for the deploy
    to be run again and plan for the GPUs it now finds.
    """
    running, error = _running()
    now = f"driver {running}" if running else f"no driver ({error})" if error else "no driver"
    if running == version and planned_gpus:
        host.noop(f"NVIDIA driver {version} already loaded")
        return
    if running == version:
        message = (f"NVIDIA driver {version} is loaded now, but this host was planned before any GPU could be seen: "
                   "run the deploy again to plan for the GPUs it finds")
    elif rebooted:
        message = (f"NVIDIA driver {version} is installed and the host rebooted, but nvidia-smi reports "
                   f"{now}: check the kernel module (dmesg, dkms status) before the "
                   "stack starts on this host")
    else:
        message = (f"NVIDIA driver {version} is installed; it loads at the next reboot (nvidia-smi reports "
                   f"{now} now). Reboot this host and run the deploy again, or set "
                   "sglang_allow_reboot = True to let the deploy reboot it; nothing is started on a driver that is "
                   "not loaded")
    yield f"echo {q(message)} >&2; exit 1"
