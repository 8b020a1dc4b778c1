"""A closing line that names every host the run failed on, and why.

pyinfra's results table counts errors per operation but does not say which
host they belong to; on a fleet the operator needs the names.
"""

from __future__ import annotations

import atexit
import sys

from pyinfra.api.state import BaseStateCallback

from ..status import statusrows

_installed: set[int] = set()


class _FailureLog(BaseStateCallback):
    def __init__(self):
        self.last_error: dict[str, str] = {}

    def operation_host_error(self, state, host, op_hash, retry_attempt=0, max_retries=0):
        names = state.get_op_meta(op_hash).names
        self.last_error[host.name] = f"failed at '{', '.join(sorted(names))}'"


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
