"""Read each of our facts once per host, not once per operation that needs it.

pyinfra 3 runs a fact's command on every `host.get_fact` call. Our facts are
each one round trip that several operations share (HostState is read by the
preflight, the account, the Docker service and the .env operations), so they
are cached per host. The cache of a host is dropped as soon as any operation
command executes on it, whatever operation it belongs to, so no operation
ever sees a state older than the last change: on a run that changes nothing,
each fact costs one command; after a change, the next read is fresh.
"""

from __future__ import annotations

import functools
from typing import Any

from pyinfra import logger
from pyinfra.api import command as pyinfra_command

_MARK = "_sglang_invalidates_fact_cache"
_cache: dict[tuple[int, str], dict[Any, Any]] = {}
# The arguments each fact was last read with on each host; they outlive the cache.
_arguments: dict[tuple[int, str, type], dict[str, Any]] = {}


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


class Missed:
    """What a fact that runs a host program through root's code cache (ship.cached_command) makes of the host's
    answer codecache.MISSING (ship.missed): the host keeps no code for the program's sources yet, which the fact's
    ``sources()`` gives (ship.cached_sources)."""


def read(host, fact_cls, **kwargs):
    """``host.get_fact(fact_cls, **kwargs)``, sent once more with the program's sources on stdin when the host's
    code cache holds no entry for them (the first read after they changed, or on a host that keeps no entries):
    only then do the sources travel (ship.cached_program)."""
    found = host.get_fact(fact_cls, **kwargs)
    if found is Missed:
        found = host.get_fact(fact_cls, _stdin=fact_cls.sources(), **kwargs)
        if found is Missed:   # its sources were on its stdin: that program is not one ship.cached_program sends
            logger.error(f"{host.name}: the {fact_cls.__name__} fact's program asked for its sources again with "
                         "them on its stdin")
            return None   # as pyinfra answers a fact it could not read: this host fails (facts.current)
    return found


def get(host, fact_cls, **kwargs):
    facts = _cache.setdefault((id(host.state), host.name), {})
    _arguments[(id(host.state), host.name, fact_cls)] = kwargs
    key = (fact_cls, _freeze(kwargs))
    if key not in facts:
        facts[key] = read(host, fact_cls, **kwargs)
    return facts[key]


def current(host, fact_cls):
    """
    The reading of ``fact_cls`` on this host with the arguments it was last
    read with (the snapshot, first read by the preflight): from the cache, or
    read anew after a command changed the host.
    """
    return get(host, fact_cls, **_arguments.get((id(host.state), host.name, fact_cls), {}))


def invalidate(host) -> None:
    _cache.pop((id(host.state), host.name), None)


def _invalidating(execute):
    @functools.wraps(execute)
    def wrapper(self, state, host, connector_arguments):
        invalidate(host)
        try:
            return execute(self, state, host, connector_arguments)
        finally:
            invalidate(host)

    setattr(wrapper, _MARK, True)
    return wrapper


def install() -> None:
    """Make every kind of operation command drop its host's cache. Idempotent."""
    for name in ("StringCommand", "FileUploadCommand", "FileDownloadCommand", "FunctionCommand", "RsyncCommand"):
        cls = getattr(pyinfra_command, name)
        if not getattr(cls.execute, _MARK, False):
            cls.execute = _invalidating(cls.execute)
