"""Workarounds for pyinfra behaviour that would hurt a fleet run."""

from __future__ import annotations

import atexit
import functools
import gc
import inspect
import socket

from paramiko import SSHException
from pyinfra.api import util as pyinfra_util
from pyinfra.connectors.ssh import SSHConnector

_MARK = "_sglang_eof_as_ssh_error"


def _eof_as_ssh_error(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except EOFError as error:
            raise SSHException(f"connection lost: {error!r}") from error

    setattr(wrapper, _MARK, True)
    return wrapper


def install() -> None:
    """
    A host that drops its SSH connection mid-run makes paramiko raise EOFError,
    which pyinfra does not treat as a host error: the whole run crashes and the
    healthy hosts stop too (pyinfra-dev/pyinfra#1220). Re-raised as
    SSHException, it fails only the lost host. Idempotent.
    """
    for name in ("run_shell_command", "put_file", "get_file"):
        method = getattr(SSHConnector, name)
        if not getattr(method, _MARK, False):
            setattr(SSHConnector, name, _eof_as_ssh_error(method))


def _stack_without_source(context: int = 0):
    return inspect.stack(context)


def _frameinfo_without_source(frame, context: int = 0):
    return inspect.getframeinfo(frame, context)


def install_fast_call_locations() -> None:
    """
    pyinfra records where each operation was called with inspect.stack(),
    which also reads the source line of every frame on the stack; it only
    uses file names and line numbers. Without the source lines the
    per-operation cost on a fleet drops by about half. Idempotent.
    """
    pyinfra_util.stack = _stack_without_source
    pyinfra_util.getframeinfo = _frameinfo_without_source


_without_delay: set[int] = set()   # the inventories whose hosts' connections no_delay() has set


def no_delay(inventory) -> None:
    """
    Each host's SSH connection sends every packet at once (TCP_NODELAY).
    paramiko sets no socket option on the connection pyinfra's SSH
    connector makes, so Nagle's algorithm held a command's small packets
    until the host's delayed acknowledgement, up to 40 ms, on every channel
    (the hold's, the snapshot's, each command's): one `true` over an open
    connection took 48 ms, 2.8 ms with it (docs/benchmarks.md, issue 56).
    Every SSH message is one whole write, so nothing is sent in pieces.
    A connection through a proxy command or a jump host (no TCP socket of
    its own here) and every other connector are left as they are. Once per
    inventory: pyinfra has connected every host before it runs deploy.py.
    """
    if id(inventory) in _without_delay:
        return
    _without_delay.add(id(inventory))
    for host in inventory:
        client = getattr(getattr(host, "connector", None), "client", None)
        transport = client.get_transport() if client is not None else None
        sock = getattr(transport, "sock", None)
        setsockopt = getattr(sock, "setsockopt", None)
        if callable(setsockopt) and getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6):
            try:
                setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:   # the connection is already gone: the run finds that out itself
                pass


_frozen_at_exit: list[bool] = []


def exit_without_collecting() -> None:
    """
    The run's process ends without the interpreter's last garbage
    collections walking every object pyinfra, paramiko, gevent and the
    deploy loaded: when pyinfra exits, those objects are frozen
    (gc.freeze(), the permanent generation), so the collections that
    Python's shutdown makes skip them. That walk was 55 to 90 ms of every
    run, a tenth of a settled host's no-op run (docs/benchmarks.md, issue 56).
    Nothing else changes: every exit handler still runs (this one runs
    before those registered earlier, and what they allocate is collected
    as usual), every module is still torn down and every object freed by
    its reference count, and stdout and stderr are flushed; only objects
    in reference cycles the run left behind are not collected before the
    process ends. Once per process.
    """
    if not _frozen_at_exit:
        _frozen_at_exit.append(True)
        atexit.register(gc.freeze)
