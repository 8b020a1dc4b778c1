"""The Snapshot fact: the one read of a host (hostside/read/snapshot.py, shipped
inline by ship.py), as one remote command. Every operation compares the plan
against this document; factcache reads it once per host until a command
changes that host.
"""

from __future__ import annotations

import json
import shlex

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError

from ..machine import ship
from . import factcache

# A host without python3 still says what it is, so the preflight can name the problem.
_WITHOUT_PYTHON = (
    "command -v python3 >/dev/null 2>&1 || { . /etc/os-release 2>/dev/null; "
    "printf '{\"python3\": null, \"os\": {\"id\": \"%s\", \"version\": \"%s\"}}\\n' \"$ID\" \"$VERSION_ID\"; exit 0; }"
)


# What a host may answer the control side, at most: its snapshot (a host with a large model cache and thousands of
# drifted entries answers a few MiB), and the one-line JSON answers of the roll's and the gateways' programs.
MAX_SNAPSHOT_BYTES = 64 << 20
MAX_ANSWER_BYTES = 1 << 20


def bounded_json(text: str, limit: int, what: str) -> dict:
    """``text`` (a host's answer) as the JSON object it must be, at most ``limit`` bytes; ValueError naming ``what``
    otherwise: a host's answer is never parsed unbounded, nor trusted to be of the right shape."""
    size = len(text.encode("utf-8", "replace"))
    if size > limit:
        raise ValueError(f"{what} is {size} bytes, over the {limit} the control side reads")
    found = json.loads(text)
    if not isinstance(found, dict):
        raise ValueError(f"{what} is a JSON {type(found).__name__}, not an object")
    return found


class Snapshot(FactBase):
    """Everything the deploy compares against, as one JSON document (see hostside/read/snapshot.py). Read through
    factcache (its ``read``: the program's sources are sent only to a host whose code cache lacks them)."""

    program = "read.snapshot"

    @classmethod
    def sources(cls) -> str:
        """What the host is sent on stdin when its code cache lacks the program (factcache.read)."""
        return ship.cached_sources(cls.program)

    def command(self, spec: str):
        return f"{_WITHOUT_PYTHON}; exec {ship.cached_command(self.program)} {shlex.quote(spec)}"

    def process(self, output):
        if ship.missed(output):
            return factcache.Missed
        try:
            return bounded_json("\n".join(output), MAX_SNAPSHOT_BYTES, "the host's snapshot")
        except ValueError as error:   # pyinfra fails this host alone, naming the fact, and the run goes on
            raise FactProcessError(str(error)) from None


class Unreadable(Exception):
    """The host did not answer the snapshot's command (run/operation.py turns it into this host's failure)."""


def current(host) -> dict:
    """
    This host's snapshot as it is now (read again after any command changed
    the host). A host that cannot be read (it stopped answering) fails alone:
    pyinfra logs the fact error and returns None, which becomes Unreadable
    and then this host's failure (run/operation.py), not a crash of the whole run.
    """
    found = factcache.current(host, Snapshot)
    if found is None:
        factcache.invalidate(host)
        raise Unreadable(f"could not read the host {host.name} (see the error above)")
    return found


