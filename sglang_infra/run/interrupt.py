"""An interrupt stops the run, and says so.

pyinfra's CLI answers SIGINT with "Exiting upon user request!" and sys.exit(0)
raised into whichever greenlet runs, so the run goes on and exits 0 (issue
#60); SIGTERM it leaves to Python's default. install() replaces both: the run
ends within a second, naming the hosts whose gate was still going (each runs
to its end there by itself, hostside/roll/detach.py), with exit code 130 (an
interrupt) or 143 (SIGTERM), as a shell reports a process a signal ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

_going: dict[str, str] = {}   # host name: what of its gate was going
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


@contextlib.contextmanager
def gate_going(name: str, what: str = "its gate"):
    """While inside, ``name``'s gate counts as going: an interrupt names it."""
    _going[name] = what
    try:
        yield
    finally:
        _going.pop(name, None)


def line(signum: int) -> str:
    """What the run says when it stops on ``signum``."""
    said = f"--> Interrupted ({signal.Signals(signum).name}): the run stopped here"
    if not _going:
        return said + "; no gate was going"
    hosts = ", ".join(f"{name} ({what})" for name, what in sorted(_going.items()))
    return (f"{said}, with the gate still going on {hosts}: it runs to its end on the host by itself, rolling back "
            "if it fails; scripts/status.sh shows how it ended, and the next run waits for it")


def _stop(signum, frame) -> None:
    print(line(signum), file=sys.stderr, flush=True)
    os._exit(EXIT.get(signum, 1))   # not sys.exit: gevent's hub would swallow it and the run go on


def install() -> None:
    """SIGINT and SIGTERM end the run at once, non-zero (after pyinfra's CLI set its own handler). Idempotent."""
    for signum in EXIT:
        signal.signal(signum, _stop)
