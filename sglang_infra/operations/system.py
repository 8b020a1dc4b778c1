"""The fleet's metrics: Debian's prometheus and prometheus-node-exporter
installed, their systemd units running with the deploy's drop-ins, reloaded
or restarted only when what they read changed; the vendors' apt keyrings,
each holding exactly its pinned key, and their repositories; the driver's
pin removed once no driver is pinned."""

from __future__ import annotations

from pyinfra import host
from pyinfra.operations import apt

from ..machine import keyrings, ship
from ..machine.gpus import DRIVER_PACKAGES
from ..run.facts import current
from ..run.operation import file_entry, q, snapshot_operation

# apt's own answers to a conffile the deploy wrote before the package (a drop-in, a config): keep ours.
_APT = ("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
        "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold")


@snapshot_operation
def packages_installed(packages: list[str]):
    """
    Ensure the Debian ``packages`` are installed (without their recommends:
    the exporters' collector scripts and the web UI's extras are not what
    this deploy runs). apt's lists are refreshed only when the install
    cannot find a package in them.
    """
    found = current(host)["packages"]
    missing = [name for name in packages if not found.get(name)]
    if not missing:
        host.noop(f"{', '.join(packages)} already installed")
        return
    words = " ".join(q(name) for name in missing)
    yield f"{_APT} {words} || {{ apt-get update -qq && {_APT} {words}; }}"


@snapshot_operation
def service_running(unit: str, restart_if=None, reload_if=None, check: str | None = None):
    """
    Ensure the systemd ``unit`` is enabled and running what its files say
    now: systemd re-reads a changed drop-in, the unit restarts when
    ``restart_if()`` (its command line changed) and reloads when
    ``reload_if()`` (a file it reads on SIGHUP changed). With ``check`` (a
    command: nginx -t), a running unit is restarted or reloaded only once
    its files pass it; otherwise the host stops and the unit keeps running
    what it runs. Nothing happens when none of that holds.
    """
    state = current(host)["services"].get(unit) or {}
    executing = host.state.is_executing
    restart = bool(restart_if is not None and executing and restart_if())
    reload = bool(reload_if is not None and executing and reload_if())
    commands = []
    if state.get("reload_needed") or restart:
        # A unit file or drop-in written by this run: systemd re-reads it before the unit (re)starts.
        commands.append("systemctl daemon-reload")
        restart = True
    if state.get("enabled") != "enabled":
        commands.append(f"systemctl enable {q(unit)}")
    if state.get("active") != "active":
        commands.append(f"systemctl start {q(unit)}")
    elif restart or reload:
        if check:
            commands.append(check)
        commands.append(f"systemctl {'restart' if restart else 'reload'} {q(unit)}")
    if not commands:
        host.noop(f"{unit} is already enabled and running its current config")
        return
    yield " && ".join(commands)


@snapshot_operation
def root_directory(path: str):
    """Ensure ``path``, a directory of root's outside the home (a systemd drop-in directory, the programs systemd
    runs), exists, 0755 and root's."""
    if current(host)["system_dirs"].get(path):
        host.noop(f"{path} already exists")
        return
    yield f"install -d -m 0755 -o root -g root {q(path)}"


@snapshot_operation
def keyring_pinned(key: keyrings.VendorKey, present_only: bool):
    """
    Ensure ``key``'s keyring holds exactly the pinned key, root's, 0644, a
    regular file (keyrings.problem, on the snapshot's read of it); with
    ``present_only`` an absent keyring is left absent (a repository this run
    does not configure). A keyring that is anything else is replaced
    by the key downloaded anew and checked on the host
    (hostside/write/keyring.py); a download that is not exactly the pinned
    key is refused, the keyring removed, and the host stops naming the data
    key that pins it.
    """
    found = current(host).get("keyrings", {}).get(key.keyring)
    why = keyrings.problem(found, key.fingerprint)
    if why is None:
        host.noop(f"{key.keyring} holds exactly {key.vendor}'s pinned key {key.fingerprint}")
        return
    if why == "absent" and present_only:
        host.noop(f"no {key.keyring} on this host")
        return
    fix = (f"{key.keyring} ({why}) could not be replaced by {key.vendor}'s pinned key {key.fingerprint} from "
           f"{key.key_url}: it is removed, so apt trusts nothing of that repository; if a mirror signs with its own "
           f"key, set {key.data_key} to that key's full fingerprint")
    yield (f"{ship.command('write.keyring')} {q(key.key_url)} {q(key.keyring)} {q(key.fingerprint)} "
           f"|| {{ echo {q(fix)} >&2; exit 1; }}")


# The driver packages the deploy marks held (gpus.driver_packages's names, any branch), as apt-mark lists them.
# (Their names are letters, digits and '-', nothing an extended regular expression reads otherwise.)
_HELD_DRIVER = "|".join(name.replace("{branch}", "[0-9]+") for names in DRIVER_PACKAGES.values() for name in names)


@snapshot_operation
def driver_unpinned(preferences: str):
    """
    Ensure no driver pin of the deploy's is left once
    sglang_nvidia_driver_version is None again: the driver packages it
    marked held (any branch of gpus.DRIVER_PACKAGES's names) are unheld,
    then apt's ``preferences`` file is removed, in that order, so a cut run
    leaves the file and the next run finishes. The driver itself stays.
    Nothing happens when there is no such file.
    """
    if file_entry(preferences) is None:
        host.noop(f"no driver pin ({preferences} is absent)")
        return
    yield (f"apt-mark showhold | grep -xE {q(_HELD_DRIVER)} | xargs -r apt-mark unhold >/dev/null "
           f"&& rm -f {q(preferences)}")


def vendor_repository(vendor: str, key_url: str, repo_line: str, filename: str, fingerprint: str) -> None:
    """Ensure ``vendor``'s keyring (``filename``: one of keyrings.DATA_KEYS) holds exactly the key ``fingerprint``
    pins, downloaded from ``key_url`` and checked when it is absent or anything else (keyring_pinned), and
    ``repo_line`` (with {keyring}) is an apt source."""
    if filename not in keyrings.DATA_KEYS:
        raise ValueError(f"{filename}: not a vendor keyring the snapshot reads (keyrings.DATA_KEYS)")
    key = keyrings.VendorKey(vendor, filename, key_url, fingerprint)
    keyring_pinned(name=f"Ensure {key.vendor}'s apt signing key is the pinned {key.fingerprint}", key=key,
                   present_only=False)
    apt.repo(name=f"Ensure {key.vendor}'s apt repository is configured", src=repo_line.format(keyring=key.keyring),
             filename=filename)


def keyrings_checked(keys) -> None:
    """Every vendor keyring the host holds (``keys``: the plan's vendor_keys), judged on every run whether or not
    this run uses its repository: apt trusts it on any update. One that is not sound is replaced; an absent one is
    left to vendor_repository, where this run configures its repository."""
    for key in keys:
        keyring_pinned(name=f"Ensure {key.keyring} holds only {key.vendor}'s pinned key", key=key, present_only=True)
