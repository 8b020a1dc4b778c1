"""The machinery the operation modules share: the snapshot_operation
decorator, the snapshot's entry for a file, the --diff display and the
streamed run of a long command.
"""

from __future__ import annotations

import functools
import os
import shlex

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS

from ..machine import ship
from . import interrupt
from .facts import Unreadable, current

q = shlex.quote


def _failed(state, host, message: str) -> bool:
    host.log_styled(message, fg="red", log_func=logger.error)
    return False


def snapshot_operation(func):
    """
    pyinfra's @operation, for an operation that reads the snapshot. pyinfra
    does not catch an exception raised while an operation makes its commands,
    so a host that stopped answering would crash the whole run; instead that
    host gets one failing command, and the other hosts go on.
    """
    @functools.wraps(func)
    def guarded(*args, **kwargs):
        try:
            yield from func(*args, **kwargs)
        except Unreadable as error:
            yield FunctionCommand(_failed, (str(error),), {})

    return operation()(guarded)


def file_entry(path: str):
    """The snapshot's entry for a file the deploy writes: its owner, mode and sha256, False when it is not a
    regular file, None when absent."""
    return current(host)["files"].get(os.path.dirname(path), {}).get(os.path.basename(path))


def diff_wanted() -> bool:
    return bool(getattr(getattr(host.state, "config", None), "DIFF", False))


def show_diff(dest: str, current, content: bytes) -> None:
    """Under --diff, as pyinfra's own files operations do: the unified diff between the host's copy and ours."""
    if not diff_wanted():
        return
    from pyinfra.facts.files import FileContents
    from pyinfra.operations.util.files import generate_color_diff

    host.log(f"Will {'modify' if current else 'create'} {dest}", logger.info)
    old = [line + "\n" for line in (host.get_fact(FileContents, path=dest) or [])] if current else []
    for line in generate_color_diff(old, content.decode(errors="replace").splitlines(keepends=True)):
        logger.info("  %s", line)


def run_streamed(state, host, command: str, _stdin: str | None = None) -> bool:
    """Run a long command (the gate, a pull) with its progress streamed to the operator, prefixed with the host's
    name."""
    return run_on(host, command, _stdin)[0]


def run_on(host, command: str, stdin: str | None = None, print_output: bool = True, arguments=None):
    """(status, output) of ``command`` on ``host``, with the current operation's connector arguments (_sudo and
    friends), or ``arguments`` (another host's, see connector_arguments)."""
    if arguments is None:
        arguments = {key: value for key, value in (host.current_op_global_arguments or {}).items()
                     if key in CONNECTOR_ARGUMENT_KEYS}
    arguments = dict(arguments)
    if stdin is not None:
        arguments["_stdin"] = stdin
    return host.run_shell_command(StringCommand(command), print_output=print_output, **arguments)


def run_cached(host, program: str, arguments: str, print_output: bool = True):
    """run_on of hostside/<program>.py through root's code cache (ship.cached_command) with ``arguments`` (quoted),
    sent once more with its sources on stdin when the host's cache holds no entry for them (ship.missed)."""
    command = f"{ship.cached_command(program)} {arguments}"
    status, output = run_on(host, command, print_output=print_output)
    if status and ship.missed(output.stdout_lines):
        status, output = run_on(host, command, stdin=ship.cached_sources(program), print_output=print_output)
    return status, output


def connector_arguments(state, other) -> dict:
    """The connector arguments ``other`` (a host this operation does not run on) gets from its data and the
    config, as pyinfra works them out for its own operations."""
    from pyinfra.api.arguments import pop_global_arguments

    found, _ = pop_global_arguments(state, other, {})
    return {key: value for key, value in found.items() if key in CONNECTOR_ARGUMENT_KEYS}


def detached(command: str) -> str:
    """``command`` run apart from this run's connection (hostside/roll/detach.py): it ends on the host by itself
    whatever happens to the run, which follows its output and exit code."""
    return f"{ship.command('roll.detach')} -- sh -c {q(command)}"


# The restart failed: said by restarted_then_gated's program, nothing gated (gate_reason reads FAILED lines).
UP_FAILED = "FAILED: docker compose up failed; nothing was gated"


def restart_then_gate(up: str, gate: str) -> str:
    """The shell program of the restart ``up`` and then the gate ``gate``: a failed ``up`` gates nothing and says
    UP_FAILED."""
    return f"( {up} ) || {{ echo {q(UP_FAILED)} >&2; exit 1; }}; {gate}"


def restarted_then_gated(up: str, gate: str) -> str:
    """restart_then_gate run apart from this run's connection (detached): once it starts, no loss of the run
    leaves a restarted container without its gate."""
    return detached(restart_then_gate(up, gate))


def gated(host, command: str, up: str | None = None):
    """(status, output) of the gate ``command`` (after the restart ``up``, in the same detached program), run
    detached and streamed; while it runs, an interrupt names the host (run/interrupt.py)."""
    with interrupt.gate_going(host.name):
        return run_on(host, detached(command) if up is None else restarted_then_gated(up, command))


def gate_reason(output) -> str:
    """Why a gated program failed: its last FAILED line (the gate's verdict, or UP_FAILED)."""
    failed = [line.split("FAILED: ", 1)[1] for line in output.stderr_lines + output.stdout_lines if "FAILED: " in line]
    return failed[-1] if failed else "its gate failed"


def run_gate(state, host, command: str, up: str | None = None) -> bool:
    """gated, as a FunctionCommand: False fails the host."""
    return gated(host, command, up)[0]
