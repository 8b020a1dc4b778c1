"""The project's own modules kept compiled between runs, in the operator's own cache folder.

pyinfra's command line turns bytecode writing off for its whole process (`sys.dont_write_bytecode = True` in
pyinfra_cli/main.py, so that no deploy.pyc lands beside a deploy file) before deploy.py imports a module of ours:
every run compiled the project's 80 modules of a settled run from source again, about 0.1 s of CPU in a no-op run
of 0.6 s (docs/benchmarks.md). `keep_bytecode()`, the first thing deploy.py does, turns writing back on with
Python's own bytecode-prefix mechanism (`sys.pycache_prefix`, PYTHONPYCACHEPREFIX's), pointed at PYCACHE_DIR: the
bytecode of every module imported after it goes there, mirroring the source's path, and nothing lands beside any
file of the checkout or the deploy (a deploy file pyinfra runs, such as deploy.py or a task, is compiled by
pyinfra itself and never kept). Python checks each kept file against its source's modification time and size
before using it, as for any __pycache__.

The deploy runs the code it finds there, so the folder must be the operator's alone: a directory of this user's,
mode 0700, made so when absent, with no link on the way to it and no folder above it that another user may write
(a root-owned sticky one such as /tmp aside: nobody else may rename or remove what is ours in it). Anything else,
and the operator's own choice (-B or PYTHONDONTWRITEBYTECODE: nothing written; PYTHONPYCACHEPREFIX: their folder
kept), leaves Python as it was: the modules are then compiled on every run, as before.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


def cache_home() -> Path | None:
    """The operator's cache folder ($XDG_CACHE_HOME, else ~/.cache), or None with no home to be found."""
    try:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except (RuntimeError, KeyError):
        return None


PYCACHE_DIR = (cache_home() or Path("/nonexistent")) / "sglang-infra" / "pycache"


def _others_may_change(st: os.stat_result) -> bool:
    """A folder on the way to ours that someone else could swap a name in."""
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.getuid()):
        return True
    if st.st_mode & 0o022:
        return not (st.st_mode & stat.S_ISVTX and st.st_uid == 0)
    return False


def own_dir(path: Path) -> Path | None:
    """``path`` as a directory of this user's alone (made, with its two parents, 0700 when absent below a home that
    exists), or None when it is not one or anything on the way to it may be changed by someone else."""
    if not path.parents[2].is_dir():   # no home (where ~/.cache would be): nothing is made
        return None
    try:
        for folder in (path.parents[1], path.parent, path):   # each made 0700 whatever the umask
            if not os.path.lexists(folder):
                folder.mkdir(mode=0o700, exist_ok=True)
        real = Path(os.path.realpath(path))
        st = os.lstat(real)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        if any(_others_may_change(os.lstat(parent)) for parent in real.parents):
            return None
    except OSError:
        return None
    return real


def keep_bytecode() -> str | None:
    """Turn bytecode writing back on for the modules imported from now on, kept in PYCACHE_DIR (or the operator's
    own PYTHONPYCACHEPREFIX); the folder used, or None when bytecode is left as it was."""
    if sys.flags.dont_write_bytecode:   # the operator's -B or PYTHONDONTWRITEBYTECODE
        return None
    if sys.pycache_prefix is None:
        folder = own_dir(PYCACHE_DIR)
        if folder is None:
            return None
        sys.pycache_prefix = str(folder)
    sys.dont_write_bytecode = False
    return sys.pycache_prefix
