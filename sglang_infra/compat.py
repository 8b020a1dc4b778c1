"""Workarounds for pyinfra behaviour that would hurt a fleet run."""

from __future__ import annotations

import functools

from paramiko import SSHException
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
