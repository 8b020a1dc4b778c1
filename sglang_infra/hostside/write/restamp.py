"""An earlier version's gate stamp, rewritten in this version's form (operations/gate.py stamp_migrated).

Up to stop 61 the stamp counted each validation script by its whole sha256, the checks' program it carries
included; this version counts them by the values they judge with (gate/stamp.py). Before the deploy replaces the
scripts, a stamp of the earlier form that names the host as it is now (gate/stamp.py compare: a pass of the same
config, judged by the same values) is rewritten as this version's stamp of the same state, from the host's own
digest of itself: the tool's upgrade gates nothing that passed. Any other stamp is left as it is.

    restamp.py HOME [GATEWAY]   prints "rewritten" or "unchanged"
"""

import os
import sys

from .. import names, stack
from ..gate import stamp


def restamp(home, gateway=None):
    """True when the stamp of the server (or of the gateway ``gateway``, router/<slug>/) was rewritten."""
    if gateway:
        docker_dir = scripts_dir = os.path.join(home, names.GATEWAY_DIR, gateway)
        project, service = stack.gateway(gateway)
        extra = stamp.GATEWAY_FILES
    else:
        docker_dir, scripts_dir = os.path.join(home, names.DOCKER_DIR), home
        project, service, extra = stack.PROJECT, stack.SERVICE, ()
    container = stack.container(project, service)
    if not stamp.compare(scripts_dir, container, docker_dir, extra)[1]:
        return False
    now = stamp.digest(scripts_dir, stamp.as_gated(container, stamp.last_record(docker_dir)), docker_dir, extra)
    stack.write_private(os.path.join(docker_dir, stamp.STAMP), now + "\n",
                        os.path.join(docker_dir, names.COMPOSE_FILE))
    return True


def main(argv):
    if len(argv) not in (1, 2):
        print("usage: restamp.py HOME [GATEWAY]", file=sys.stderr)
        return 2
    print("rewritten" if restamp(*argv) else "unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
