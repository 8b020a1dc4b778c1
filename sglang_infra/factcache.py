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

from pyinfra.api import command as pyinfra_command

_MARK = "_sglang_invalidates_fact_cache"
_cache: dict[tuple[int, str], dict[Any, Any]] = {}


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def get(host, fact_cls, **kwargs):
    facts = _cache.setdefault((id(host.state), host.name), {})
    key = (fact_cls, _freeze(kwargs))
    if key not in facts:
        facts[key] = host.get_fact(fact_cls, **kwargs)
    return facts[key]


def get_any(host, fact_cls, **kwargs):
    """
    Any cached reading of ``fact_cls`` on this host, whatever arguments it was
    read with, else a new reading with ``kwargs``. For callers that need only
    the parts of a fact that do not depend on its arguments.
    """
    facts = _cache.get((id(host.state), host.name), {})
    for (cls, _), value in facts.items():
        if cls is fact_cls:
            return value
    return get(host, fact_cls, **kwargs)


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
