"""The gate's contract: what passed, in one digest.

After the checks pass, the gate writes the digest of what it validated into
docker/.validated: compose.yaml, .env, the image the container runs, and the
two validation scripts. The deploy reads the stamp back (snapshot.py) and runs
the gate again whenever the digest of the host as it is now differs.
"""

import hashlib
import os

from . import safefs

STAMP = ".validated"
SCRIPTS = ("test_tool_calling.sh", "benchmark.sh")


def digest(home, image_id):
    """The digest of the config in ``home`` as it is now, run from the image ``image_id``."""
    docker_dir = os.path.join(home, "docker")
    parts = [f"compose={safefs.sha256_regular(os.path.join(docker_dir, 'compose.yaml'))}",
             f"env={safefs.sha256_regular(os.path.join(docker_dir, '.env'))}",
             f"image={image_id or ''}"]
    parts += [f"{name}={safefs.sha256_regular(os.path.join(home, name))}" for name in SCRIPTS]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def read(home):
    raw = safefs.read_regular(os.path.join(home, "docker", STAMP), 512)
    return raw.decode(errors="replace").strip() if raw else None
