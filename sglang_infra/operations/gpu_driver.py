"""The driver layer of a GPU host, when the operator's data lets the deploy install it: the pinned NVIDIA driver and
the check that it is the one loaded; Fabric Manager at the driver's exact version on an NVSwitch board (and NVLSM
where the board needs it), and nvidia-persistenced.
Both read the snapshot's gpus section (hostside/read/snapshot.py: nv-fabricmanager's own version, the units' states)."""

from __future__ import annotations

from pyinfra import host

from ..machine.gpus import HEADERS_PACKAGE, NEXT_KERNEL
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


def running_driver() -> tuple[str | None, str | None]:
    """The driver nvidia-smi reports now, and why it could not be read."""
    found = (current(host).get("gpus") or {}).get("driver") or {}
    return found.get("driver"), found.get("error")


def _kernels() -> str:
    """Shell: $K the running kernel, $B the one the next boot loads (NEXT_KERNEL, else the running one)."""
    return f'K=$(uname -r); B={NEXT_KERNEL}; B=${{B:-$K}}'


def headers_installed() -> str:
    """Shell: the headers of the running kernel and of the one that boots next (HEADERS_PACKAGE) installed, or the
    host stopped naming the package that apt cannot install. NVIDIA's DKMS module is built against them when the
    driver is installed, and apt installs them only as a recommendation, which the deploy never installs."""
    package = HEADERS_PACKAGE.format(kernel="$k")
    install = f"{_APT} \"{package}\""
    stop = (f"echo \"the kernel headers {package} (kernel $k) cannot be installed from this host's apt sources; "
            "NVIDIA's driver builds its kernel module against them (DKMS), and without them this host would reboot "
            "into no driver. No driver package was touched: make that package installable (or boot a kernel "
            "whose headers the sources hold), then run the deploy again\" >&2; exit 1")
    return (f"{_kernels()}; for k in $(printf '%s\\n' \"$K\" \"$B\" | sort -u); do "
            f"dpkg-query -W -f='${{Status}}' \"{package}\" 2>/dev/null | grep -q 'ok installed' || "
            f"{install} || {{ apt-get update -qq && {install}; }} || {{ {stop}; }}; done")


def module_built(version: str) -> str:
    """Shell: NVIDIA's kernel module ``version`` is built for the kernel the next boot loads (``modinfo -k``, which
    finds a DKMS build and a packaged module alike), else the host stopped before any reboot, its old driver still
    loaded, the message saying so with `dkms status` and how to build it."""
    stop = (f"echo \"NVIDIA driver {version}'s kernel module is not built for kernel $B, the one this host boots next "
            "(modinfo finds ${v:-no nvidia module}). The host is not rebooted: it keeps its old driver loaded, and "
            "a reboot now would boot into no NVIDIA driver. Install "
            f"{HEADERS_PACKAGE.format(kernel='$B')} and build the module (dkms autoinstall -k $B), then run the "
            "deploy again. dkms status:\" >&2; dkms status 2>&1 | head -n 20 >&2; exit 1")
    return (f"{_kernels()}; v=$(modinfo -k \"$B\" -F version nvidia 2>/dev/null | head -n 1); "
            f"[ \"$v\" = {q(version)} ] || {{ {stop}; }}")


@snapshot_operation
def kernel_headers_installed(version: str):
    """
    Ensure the kernel headers NVIDIA driver ``version``'s module builds
    against are installed (headers_installed: the running kernel's and the
    next boot's), before NVIDIA's repository or any driver package; a
    package the host's apt sources do not hold stops the host, naming it.
    A host whose running driver is ``version`` is left alone.
    """
    running, _ = running_driver()
    if running == version:
        host.noop(f"NVIDIA driver {version} already running: no module to build")
        return
    yield headers_installed()


@snapshot_operation
def nvidia_driver_installed(version: str, packages: list[str], held: str, preferences: str):
    """
    Ensure NVIDIA driver ``version`` is installed and held there: apt's
    preferences pin the ``held`` packages to it (priority 1001, so an
    unattended upgrade never moves them and a newer driver is replaced),
    ``packages`` (gpus.driver_packages's pinned spelling) are installed and
    marked held, then the module checked built for the kernel the next boot
    loads (module_built): otherwise the host stops there, before any
    reboot. A host whose running driver is ``version`` is left alone.
    """
    running, _ = running_driver()
    if running == version:
        host.noop(f"NVIDIA driver {version} already running")
        return
    pin = (f"Package: {held}", f"Pin: version {version}-*", "Pin-Priority: 1001")
    yield f"printf '%s\\n' {' '.join(q(line) for line in pin)} > {q(preferences)}"
    words = " ".join(q(name) for name in packages)
    install = f"{_APT} --allow-downgrades --allow-change-held-packages {words}"
    yield f"{install} || {{ apt-get update -qq && {install}; }}"
    yield "apt-mark hold " + " ".join(q(name.split("=")[0]) for name in packages)
    yield module_built(version)


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
    running, error = running_driver()
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
