"""The last known-good config and how it is copied: what a gate's pass keeps as *.good, what a rollback (gate.py)
and a called-off turn (roll/restore_good.py) put back. Apart from gate.py so that restore_good, sent in one
command, carries only this."""

import stat

from .. import names, safefs

MAX_CONFIG = 16 << 20  # bytes of a compose.yaml or .env the gate copies
# The config a pass keeps as *.good and a rollback restores; .env only where the stack has one.
CONFIG = (names.COMPOSE_FILE, names.ENV_FILE)


def copy(source, dest):
    """
    cp -p, atomically and checked (safefs.write_atomic): content, mode, times
    and owner (the gate runs as root; the files belong to the account). A
    full disk raises instead of leaving a truncated copy; a symlink at either
    name, or on the way to it, is refused (named in the OSError), never
    followed.
    """
    content, st = safefs.read_with_stat(source, MAX_CONFIG)
    safefs.write_atomic(dest, content, stat.S_IMODE(st.st_mode), owner=(st.st_uid, st.st_gid),
                        times=(st.st_atime_ns, st.st_mtime_ns), verify=True)
