"""A host rebooted from inside an operation, and waited for (docs/gpus.md, "A driver change, in turns").

pyinfra's own server.reboot is an operation of its own: every host of the run reboots in that one step, at once.
A worker behind a gateway reboots instead inside its pool's turn (operations/roll.py), and a multi-node group's
members together inside rank 0's turn; both need the reboot as a call. It is detached from the SSH session (as
pyinfra's is), and confirmed by the kernel's boot id, not by uptime: a new id is a new boot, whatever the clock says.
Every wait is bounded.
"""

from __future__ import annotations

import time

from . import factcache
from .operation import q, run_on

BOOT_ID = "cat /proc/sys/kernel/random/boot_id"
# Detached from the session, so the channel closes before the host goes down (pyinfra#1708, as server.reboot).
REBOOT = "( sleep 1 && reboot ) </dev/null >/dev/null 2>&1 &"
FIRST_LOOK = 10      # seconds before the first reconnection attempt: the host is going down
INTERVAL = 3         # seconds between attempts
# The driver the kernel loaded, from its own line (hostside/gate/stamp.py reads the same file).
LOADED = ("sed -n '1s/.*Kernel Module//p' /proc/driver/nvidia/version 2>/dev/null | "
          "grep -o '[0-9][0-9]*[.][0-9][0-9.]*[0-9]' | head -n 1")


def boot_id(host, arguments=None) -> str | None:
    ok, output = run_on(host, BOOT_ID, print_output=False, arguments=arguments)
    said = (output.stdout_lines or [""])[-1].strip()
    return said if ok and said else None


def start(host, arguments=None) -> tuple[str | None, str | None]:
    """Send the reboot: (the boot id it leaves, None), or (None, why it could not be sent)."""
    before = boot_id(host, arguments)
    if before is None:
        return None, "its boot id could not be read before the reboot"
    ok, output = run_on(host, REBOOT, print_output=False, arguments=arguments)
    if not ok:
        return None, f"the reboot could not be sent ({(output.stderr_lines or ['no output'])[-1]})"
    return before, None


def wait(host, before: str, timeout: float, arguments=None, clock=time.monotonic, sleep=time.sleep) -> str | None:
    """Wait until ``host`` answers from a boot other than ``before``, at most ``timeout`` seconds: None, or why
    not. Its snapshot is read again afterwards (factcache)."""
    sleep(FIRST_LOOK)
    host.disconnect()
    deadline = clock() + timeout
    while clock() < deadline:
        host.connect(show_errors=False)
        if host.connected:
            now = boot_id(host, arguments)
            if now is not None and now != before:
                factcache.invalidate(host)
                return None
        sleep(INTERVAL)
    return f"it did not answer from a new boot within {timeout:.0f} s"


def after_boot(version: str, units: tuple[str, ...]) -> str:
    """Shell, run once the host is back: the loaded driver is ``version`` (else exit 1 saying which is), then each
    of ``units`` (Fabric Manager, nvidia-persistenced: their packages came before the reboot) enabled and started
    where systemd knows it."""
    starts = "".join(f"systemctl cat {q(unit)} >/dev/null 2>&1 && {{ systemctl enable --now {q(unit)} || exit 1; }}; "
                     for unit in units)
    return (f"v=$({LOADED}); [ \"$v\" = {q(version)} ] || {{ echo \"NVIDIA driver {version} is installed and the "
            "host rebooted, but the kernel loaded ${v:-no NVIDIA driver} (dkms status; dmesg). It stays out of its "
            f"gateways; a driver cannot be rolled back by the deploy\" >&2; exit 1; }}; {starts}true")
