"""The gate's contract: what passed, in one digest.

After the checks pass, the gate writes the digest of what it validated into
docker/.validated: compose.yaml, .env, the two validation scripts, and the
container that served: its image, its id and when it started. The deploy reads
the stamp back (snapshot.py) and runs the gate again whenever the digest of
the host as it is now differs: after any change, and after any start or
restart of the container, whatever caused it (the deploy, a crash and
Docker's restart policy, an operator), but one: the host's own boot. When
the host rebooted since the gate and the Docker daemon started the same
container again at boot (the same container, no restart by its policy since:
Docker's RestartCount 0), the stamp still names it (as_gated): the config,
the image and the container are the ones that passed, and a reboot asks for
no deploy. A multi-node group's member is judged apart (nodegroups.stale): a
member whose host rebooted alone still restarted alone.

A worker's digest also covers the driver it runs on (running_driver): after a boot into another one, the gate runs.

A gateway (router/<slug>/) keeps its compose.yaml, scripts and stamp in its
own directory, and its digest also covers the worker set it was validated
with (workers.json) and its launcher: a change of either runs its gate again.

The validation scripts count by their command lines (names.judged_text), not the programs they carry: a new
version of the checks judges the same config by the same values. An earlier version's stamp (LEGACY, up to stop
61) of the host as it is still counts (compare()); write/restamp.py rewrites it in this form.
"""

import hashlib
import os
import re
import subprocess

from .. import dockerapi, names, safefs
from ..formats import jsonio

STAMP = ".validated"
# The last gate's outcome, whatever it was (gate.py writes it, report.py reads it for scripts/status.sh):
# {"time": UTC, "passed", "reason", "rolled_back", "benchmark": benchmark.sh's summary or None, "container": the
# GATED_CONTAINER fields of the container this gate stamped, or None when it stamped none}.
LAST = ".last-gate"
# What the last gate's record keeps of the container it stamped (gate.py): a multi-node group's member whose running
# container started since is one that restarted alone (nodegroups.stale, gate_metrics.py).
GATED_CONTAINER = ("id", "started_at")
# The kernel's id of this boot: another one than the gate's record says the host rebooted since the gate.
BOOT_ID = "/proc/sys/kernel/random/boot_id"
# Besides compose.yaml and .env, what a gateway's digest covers (router/<slug>/).
GATEWAY_FILES = (names.WORKERS_FILE, names.LAUNCHER)
# The loaded module's version line ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  ...").
DRIVER_VERSION = "/proc/driver/nvidia/version"
FABRIC_MANAGER = "nv-fabricmanager"
FABRIC_MANAGER_SECONDS = 10
# The form of this version's stamp, one of its digest's parts; an earlier version's stamp has no such part (LEGACY).
FORM = "form=2"
LEGACY = "legacy"
# The most of a validation script read for its judged digest: the scripts carry the checks' program (about 100 KiB).
MAX_SCRIPT = 4 << 20
_RELEASE = r"\b\d+\.\d+(?:\.\d+)?\b"   # compiled on first use (re's cache): re is ship.LAZY


def running_driver():
    """The digest's parts naming the driver the host runs: the loaded module's version and Fabric Manager's,
    each where the host has it."""
    parts = []
    raw = safefs.read_regular(DRIVER_VERSION, 4096)
    if raw is not None:
        line = raw.decode(errors="replace").split("\n", 1)[0]
        found = re.findall(_RELEASE, line.partition("Kernel Module")[2] or line)
        parts.append(f"driver={found[0] if found else 'unknown'}")
    tool = safefs.which(FABRIC_MANAGER)
    if tool:
        try:
            said = subprocess.run([tool, "--version"], capture_output=True, timeout=FABRIC_MANAGER_SECONDS,
                                  check=False).stdout[:4096].decode(errors="replace")
        except (OSError, subprocess.SubprocessError):
            said = ""
        found = re.findall(_RELEASE, said)
        parts.append(f"fabric_manager={found[-1] if found else 'unknown'}")
    return parts


def judged(path):
    """names.judged_digest of the script at ``path``, or None (absent, a link, over MAX_SCRIPT)."""
    raw = safefs.read_regular(path, MAX_SCRIPT + 1)
    return None if raw is None or len(raw) > MAX_SCRIPT else names.judged_digest(raw)


def scripts_judged(scripts_dir):
    """Each gate script in ``scripts_dir`` by path: judged(), as plan/render.py gate_files counts it."""
    return {os.path.join(scripts_dir, name): judged(os.path.join(scripts_dir, name))
            for name in names.GATE_SCRIPTS}


def digest(home, container, docker_dir=None, extra=(), form=FORM):
    """
    The digest of the config as it is now, served by ``container``
    (stack.container()): compose.yaml and .env in ``docker_dir`` (default
    home/docker), the validation scripts in ``home`` by what they judge
    with (judged()), and the ``extra`` files of ``docker_dir``. A gateway
    passes its own directory as both; a worker's (no ``extra``) covers its
    running_driver() too. ``form`` LEGACY: an earlier version's digest of the
    same, each script by its whole sha256 (compare()).
    """
    docker_dir = docker_dir or os.path.join(home, names.DOCKER_DIR)
    container = container or {}
    parts = [f"compose={safefs.sha256_regular(os.path.join(docker_dir, names.COMPOSE_FILE))}",
             f"env={safefs.sha256_regular(os.path.join(docker_dir, names.ENV_FILE))}",
             f"image={container.get('image_id') or ''}",
             f"container={container.get('id') or ''}@{container.get('started_at') or ''}"]
    if form == LEGACY:
        parts += [f"{name}={safefs.sha256_regular(os.path.join(home, name))}" for name in names.VALIDATION_SCRIPTS]
    else:
        parts += [f"{name}={judged(os.path.join(home, name))}" for name in names.VALIDATION_SCRIPTS]
    parts += [f"{name}={safefs.sha256_regular(os.path.join(docker_dir, name))}" for name in extra]
    if not extra:
        parts += running_driver()
    if form != LEGACY:
        parts.append(form)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def boot_id():
    """This boot's id, or None where the kernel does not say it."""
    raw = safefs.read_regular(BOOT_ID, 64)
    return raw.decode(errors="replace").strip() or None if raw else None


def last_record(docker_dir):
    """The last gate's record (LAST) in ``docker_dir`` as the gate wrote it, or None: unreadable, a link or absent."""
    raw = safefs.read_regular(os.path.join(docker_dir, LAST), 65536)
    try:
        found = jsonio.loads(raw) if raw else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def as_gated(container, record, boot=None):
    """``container`` (stack.container()) as the stamp compares it: with the start the gate saw when only the
    host's boot restarted it since (the record's boot is not this one, the id is the stamped one, and Docker's
    restart policy has not restarted it since the daemon started it: RestartCount 0); else as it is. A crash
    restart, an operator's restart in the same boot, or any other container still asks for the gate."""
    gated = (record or {}).get("container")
    if not container or not isinstance(gated, dict):
        return container
    boot = boot or boot_id()
    rebooted = bool(boot) and isinstance(record.get("boot_id"), str) and record["boot_id"] != boot
    if (rebooted and gated.get("id") == container.get("id") and container.get("state") == "running"
            and isinstance(gated.get("started_at"), str) and restart_count(container) == 0):
        return {**container, "started_at": gated["started_at"]}
    return container


def restart_count(container):
    """Docker's RestartCount of ``container``: restarts by its policy since the daemon or a client last started it
    (the daemon's start at boot resets it); None when the engine does not say. Read here, not by stack.container(),
    whose module the validation scripts carry."""
    if "restart_count" in container:
        return container["restart_count"]
    try:
        found = dockerapi.get(f"/containers/{container['id']}/json") or {}
    except (dockerapi.Unavailable, ValueError, KeyError):
        return None
    count = found.get("RestartCount")
    return count if isinstance(count, int) else None


def compare(home, container, docker_dir=None, extra=()):
    """(digest, legacy) of the host as it is now: digest() of ``container`` as_gated() by the last gate's record
    in ``docker_dir`` (default home/docker); where the stamp is an earlier version's of the host as it is now,
    that digest (LEGACY form) and True."""
    docker_dir = docker_dir or os.path.join(home, names.DOCKER_DIR)
    gated = as_gated(container, last_record(docker_dir))
    now = digest(home, gated, docker_dir, extra)
    found = read(home, docker_dir)
    if found and found != now:
        earlier = digest(home, gated, docker_dir, extra, LEGACY)
        if found == earlier:
            return earlier, True
    return now, False


def current(home, container, docker_dir=None, extra=()):
    """The digest of the host as it is now, for comparing with the stamp (snapshot.py, gate_metrics.py):
    compare()'s."""
    return compare(home, container, docker_dir, extra)[0]


def read(home, docker_dir=None):
    """The stamp in ``docker_dir`` (default home/docker), or None."""
    raw = safefs.read_regular(os.path.join(docker_dir or os.path.join(home, names.DOCKER_DIR), STAMP), 512)
    return raw.decode(errors="replace").strip() if raw else None
