"""The run's hold on each host it changes (hostside/write/hold.py): one run at a time per host.

Before the preflight reads a host, the run opens a channel of its own on the
host's SSH connection and starts hold.py there, which takes the host's lock
(waiting at most sglang_host_lock_wait seconds, saying who holds it) and
keeps it while this run sends it a line every HEARTBEAT seconds. The run
ending, killed or cut off ends the channel, and with it the hold; a run whose
machine is gone stops sending and loses it after hold.SILENCE seconds. A dry
run or a status report changes nothing and takes no hold.
"""

from __future__ import annotations

import getpass
import json
import secrets
import shlex
import socket
import sys
import time

from pyinfra import logger
from pyinfra.api import StringCommand

from ..hostside.write.hold import described
from ..machine import ship
from .operation import connector_arguments

HEARTBEAT = 5   # seconds between two lines to the hold; hold.SILENCE of silence ends it
# This run, to the hold on each host: one host reached under several inventory names is held once, by this run.
RUN = secrets.token_hex(16)
_held: dict[int, dict[str, object]] = {}   # per run: each host's open channel


def dry() -> bool:
    """Whether this run is pyinfra's --dry (it changes nothing; the CLI tells the deploy file no other way)."""
    return "--dry" in sys.argv[1:]


def holder() -> dict[str, str]:
    """Who this run is: control machine, user, start time, what it is doing (the command, bounded)."""
    return {"run": RUN, "control": socket.gethostname(), "user": getpass.getuser(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "doing": " ".join(shlex.quote(word) for word in ["pyinfra", *sys.argv[1:]])[:200]}


def take(state, host, wait: float) -> str | None:
    """Hold ``host`` for the rest of this run; None when held, else the refusal naming the holder."""
    import gevent
    from pyinfra.connectors.util import make_unix_command_for_host

    runs = _held.setdefault(id(state), {})
    if host.name in runs:
        return None
    client = getattr(getattr(host, "connector", None), "client", None)
    if client is None:   # not an SSH host (the local connector, the unit tests' hosts): no other run reaches it
        return None
    # without the site module: the hold waits for no package, and every run waits for the hold before its read
    command = StringCommand(f"{ship.command('write.hold', site=False)} take {int(wait)}")
    # what pyinfra's SSH connector takes for itself before it makes the command (connectors/ssh.py)
    arguments = {key: value for key, value in connector_arguments(state, host).items()
                 if key not in ("_get_pty", "_timeout", "_stdin", "_success_exit_codes")}
    unix = make_unix_command_for_host(state, host, command, **arguments)
    stdin, stdout, _ = client.exec_command(unix.get_raw_value())
    stdin.write(json.dumps(holder()) + "\n")
    stdin.flush()
    answer: dict = {}
    try:
        with gevent.Timeout(wait + 60):
            while True:
                line = stdout.readline()
                if not line:
                    answer = {"error": "the hold ended before it was taken"}
                    break
                try:
                    answer = json.loads(line)
                except ValueError:
                    continue
                if "waiting" in answer:
                    logger.warning(f"[{host.name}] another run is changing this host: "
                                   f"{described(answer['waiting'])}; waiting at most {int(wait)} s "
                                   "(sglang_host_lock_wait)")
                    continue
                break
    except gevent.Timeout:
        answer = {"error": f"no answer from the hold within {int(wait) + 60} s"}
    if "held" in answer:
        runs[host.name] = stdin
        gevent.spawn(_beat, host.name, stdin)
        return None
    stdin.close()
    if "refused" in answer:
        return (f"host {host.name}: refused: another run is changing this host: {described(answer['refused'])}; "
                f"waited {int(wait)} s (sglang_host_lock_wait). Run again once it has ended, or wait longer "
                "with --data sglang_host_lock_wait=SECONDS")
    return f"host {host.name}: its hold could not be taken ({answer.get('error', answer)}); nothing was changed"


def _beat(name: str, stdin) -> None:
    import gevent

    while True:
        gevent.sleep(HEARTBEAT)
        try:
            stdin.write("\n")
            stdin.flush()
        except Exception as error:   # the channel is gone: so is the hold
            logger.warning(f"[{name}] this run's hold on the host ended ({error}); another run may change it now")
            return



def with_holder(state, host, snapshot: dict) -> dict:
    """The status report's snapshot with who holds the host now (hold.py show: a run, or a gate its run left
    going), as its report section's "hold"; one small command of its own, so the snapshot's stays within one
    argument. Unreadable: no holder said."""
    arguments = {key: value for key, value in connector_arguments(state, host).items()
                 if key not in ("_success_exit_codes",)}
    try:
        ok, output = host.run_shell_command(StringCommand(f"{ship.command('write.hold')} show"), print_output=False,
                                            **arguments)
        found = json.loads("\n".join(output.stdout_lines)[:8192]) if ok else None
    except Exception:   # the report goes on without it
        found = None
    report = dict(snapshot.get("report") or {}, hold=found if isinstance(found, dict) else None)
    return dict(snapshot, report=report)
