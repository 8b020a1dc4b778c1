"""Puts the last known-good compose.yaml and .env back in place (a worker whose turn in a rolling restart was
called off because another worker of its pool failed its gate, operations/roll.py): the container was not
restarted and still runs that config, so the host stays as its last gate stamped it.

    python3 restore_good.py DOCKER_DIR
"""

import os
import sys

from .. import safefs
from ..gate import goodcopy


def main(argv=None):
    docker_dir = (sys.argv[1:] if argv is None else argv)[0]
    restored = []
    for name in goodcopy.CONFIG:
        path = os.path.join(docker_dir, name)
        if safefs.is_regular(path + ".good"):   # a link there is not followed (goodcopy.copy refuses one too)
            goodcopy.copy(path + ".good", path)
            restored.append(name)
    print(f"restore_good: {', '.join(restored) or 'nothing'} put back from the last known-good copy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
