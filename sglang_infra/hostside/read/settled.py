"""The settled stamp: root's record, on the host, of the last run that found the host exactly as its plan wants
it (sglang_infra/run/settled.py writes it, the snapshot reads it back).

It holds two sha256 digests and nothing else: the plan's fingerprint (the resolved plan, the rendered files,
the deploy's own code and templates) and the digest of the snapshot as that run read it. Kept by root alone
(0600 in /var/lib, which only root writes), never followed through a link; anything else reads as no stamp.
"""

import os
import stat

from .. import safefs
from ..formats import jsonio

PATH = "/var/lib/sglang-settled.json"
LIMIT = 4096   # bytes: two digests and their keys
KEYS = ("plan", "snapshot")


def read(path=PATH):
    """The stamp as {"plan": ..., "snapshot": ...}, or None: absent, not root's own 0600 regular file, or not
    two hex digests."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o077:
        return None
    raw = safefs.read_regular(path, LIMIT)
    try:
        found = jsonio.loads(raw or b"")
    except ValueError:
        return None
    if not isinstance(found, dict) or set(found) != set(KEYS):
        return None
    if not all(isinstance(found[key], str) and len(found[key]) == 64 for key in KEYS):
        return None
    return {key: found[key] for key in KEYS}


def write_command(path=PATH):
    """The shell command that replaces the stamp with the JSON on its stdin, root-only, by one rename (of a
    candidate named for the shell's pid: two runs reaching one host under two names never share one)."""
    directory, name = os.path.split(path)
    candidate = os.path.join(directory, f".{name}.$$")
    return f"umask 077 && cat > {candidate} && mv -f {candidate} {path}"
