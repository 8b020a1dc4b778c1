"""The gate's contract: what passed, in one digest.

After the checks pass, the gate writes the digest of what it validated into
docker/.validated: compose.yaml, .env, the two validation scripts, and the
container that served: its image, its id and when it started. The deploy reads
the stamp back (snapshot.py) and runs the gate again whenever the digest of
the host as it is now differs: after any change, and after any start or
restart of the container, whatever caused it (the deploy, a crash and
Docker's restart policy, an operator).

A gateway (router/<slug>/) keeps its compose.yaml, scripts and stamp in its
own directory, and its digest also covers the worker set it was validated
with (workers.json) and its launcher: a change of either runs its gate again.
"""

import hashlib
import os

from . import names, safefs

STAMP = ".validated"
# The last gate's outcome, whatever it was (gate.py writes it, report.py reads it for scripts/status.sh):
# {"time": UTC, "passed", "reason", "rolled_back", "benchmark": benchmark.sh's summary or None, "container": the
# GATED_CONTAINER fields of the container this gate stamped, or None when it stamped none}.
LAST = ".last-gate"
# What the last gate's record keeps of the container it stamped (gate.py): a multi-node group's member whose running
# container started since is one that restarted alone (nodegroups.stale, gate_metrics.py).
GATED_CONTAINER = ("id", "started_at")
# Besides compose.yaml and .env, what a gateway's digest covers (router/<slug>/).
GATEWAY_FILES = (names.WORKERS_FILE, names.LAUNCHER)


def digest(home, container, docker_dir=None, extra=()):
    """
    The digest of the config as it is now, served by ``container``
    (stack.container()): compose.yaml and .env in ``docker_dir`` (default
    home/docker), the scripts in ``home``, and the ``extra`` files of
    ``docker_dir``. A gateway passes its own directory as both.
    """
    docker_dir = docker_dir or os.path.join(home, names.DOCKER_DIR)
    container = container or {}
    parts = [f"compose={safefs.sha256_regular(os.path.join(docker_dir, names.COMPOSE_FILE))}",
             f"env={safefs.sha256_regular(os.path.join(docker_dir, names.ENV_FILE))}",
             f"image={container.get('image_id') or ''}",
             f"container={container.get('id') or ''}@{container.get('started_at') or ''}"]
    parts += [f"{name}={safefs.sha256_regular(os.path.join(home, name))}" for name in names.VALIDATION_SCRIPTS]
    parts += [f"{name}={safefs.sha256_regular(os.path.join(docker_dir, name))}" for name in extra]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def read(home, docker_dir=None):
    raw = safefs.read_regular(os.path.join(docker_dir or os.path.join(home, names.DOCKER_DIR), STAMP), 512)
    return raw.decode(errors="replace").strip() if raw else None
