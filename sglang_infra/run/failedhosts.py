"""A closing line that names every host the run failed on, and why.

pyinfra's results table counts errors per operation but does not say which
host they belong to; on a fleet the operator needs the names. A host whose
SSH connection was cut mid-run (sshd killed, a network gone) fails an
operation that pyinfra reports as "executed 0 commands"; the line says the
connection was lost instead (issue 53).
"""

from __future__ import annotations

import atexit
import sys

from pyinfra import logger
from pyinfra.api.state import BaseStateCallback

from ..status import statusrows

_installed: set[int] = set()
# paramiko closes a cut connection's channels a moment before it marks the transport inactive: how long a failed
# operation's host is given to show which it was (once per failed host, at its failure).
_SETTLE_S = 0.5


def connection_lost(host) -> bool:
    """True when ``host``'s SSH connection is gone (an SSH host whose transport has ended)."""
    client = getattr(host.connector, "client", None)
    if client is None or not hasattr(client, "get_transport"):
        return False   # not an SSH host, or never connected (pyinfra's own line says so)
    transport = client.get_transport()
    if transport is None:
        return True
    if transport.is_active():
        transport.join(_SETTLE_S)
    return not transport.is_active()


class _FailureLog(BaseStateCallback):
    def __init__(self) -> None:
        self.last_error: dict[str, str] = {}

    def operation_host_error(self, state, host, op_hash, retry_attempt=0, max_retries=0):
        names = "', '".join(sorted(state.get_op_meta(op_hash).names))
        if connection_lost(host):
            self.last_error[host.name] = (f"lost its SSH connection during '{names}': whatever that step had begun "
                                          "on the host may be half done; a re-run once it answers again converges")
            logger.error(f"{host.print_prefix}the SSH connection to {host.name} was lost during '{names}'")
        else:
            self.last_error[host.name] = f"failed at '{names}'"


def failed_hosts_line(state, last_error: dict[str, str]) -> str | None:
    failed = sorted(host.name for host in state.failed_hosts)
    if not failed:
        return None
    reasons = [f"{name} ({last_error.get(name, 'unreachable or lost its connection')})" for name in failed]
    return f"--> Failed hosts ({len(failed)} of {len(state.inventory)}): " + "; ".join(reasons)


def install(state) -> None:
    """Register once per run; the line is printed when pyinfra exits (and a status report written, statusrows.py)."""
    statusrows.install(state)
    if id(state) in _installed:
        return
    _installed.add(id(state))
    log = _FailureLog()
    state.add_callback_handler(log)

    def _print():
        line = failed_hosts_line(state, log.last_error)
        if line:
            print(line, file=sys.stderr, flush=True)

    atexit.register(_print)
