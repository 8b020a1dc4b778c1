"""The driver's companions on a GPU host, when the operator's data lets the deploy install them: Fabric Manager at
the driver's exact version on an NVSwitch board (and NVLSM where the board needs it), and nvidia-persistenced.
Both read the snapshot's gpus section (hostside/snapshot.py: nv-fabricmanager's own version, the units' states)."""

from __future__ import annotations

from pyinfra import host

from ..snapshot import current
from .base import q, snapshot_operation
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
