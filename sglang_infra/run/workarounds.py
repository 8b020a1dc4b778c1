"""Workarounds for pyinfra behaviour that would hurt a fleet run."""

from __future__ import annotations

import functools
import inspect

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
