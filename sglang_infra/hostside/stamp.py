"""The gate's contract: what passed, in one digest.

After the checks pass, the gate writes the digest of what it validated into
docker/.validated: compose.yaml, .env, the two validation scripts, and the
container that served: its image, its id and when it started. The deploy reads
the stamp back (snapshot.py) and runs the gate again whenever the digest of
the host as it is now differs: after any change, and after any start or
restart of the container, whatever caused it (the deploy, a crash and
Docker's restart policy, an operator).
"""

import hashlib
import os

from . import safefs

STAMP = ".validated"
# The last gate's outcome, whatever it was (gate.py writes it, report.py reads it for scripts/status.sh):
# {"time": UTC, "passed", "reason", "rolled_back", "benchmark": benchmark.sh's summary or None}.
LAST = ".last-gate"
SCRIPTS = ("test_tool_calling.sh", "benchmark.sh")


def digest(home, container):
    """The digest of the config in ``home`` as it is now, served by ``container`` (stack.container())."""
    docker_dir = os.path.join(home, "docker")
    container = container or {}
    parts = [f"compose={safefs.sha256_regular(os.path.join(docker_dir, 'compose.yaml'))}",
             f"env={safefs.sha256_regular(os.path.join(docker_dir, '.env'))}",
             f"image={container.get('image_id') or ''}",
             f"container={container.get('id') or ''}@{container.get('started_at') or ''}"]
    parts += [f"{name}={safefs.sha256_regular(os.path.join(home, name))}" for name in SCRIPTS]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def read(home):
    raw = safefs.read_regular(os.path.join(home, "docker", STAMP), 512)
    return raw.decode(errors="replace").strip() if raw else None
