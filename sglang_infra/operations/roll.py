"""Rolling, drained restarts of a serving host some gateway of the inventory
fronts (docs/front-door.md): the restart and the gate as one operation, one
worker of a pool at a time.

pyinfra runs an operation on every host at once, each host in its own
greenlet. The operation's one FunctionCommand takes a slot of its pool's
semaphore (sglang_max_unavailable slots; the pool is the workers of one model
behind the same gateways; other pools go on in parallel), then:

1. takes the worker out of every gateway that fronts it (on a model switch,
   also those of every other model, which may still list it), through each
   router host's own connection (hostside/router_workers.py), until none
   lists it;
2. waits until it has no request in flight (its own /metrics, else the
   gateway's smg_worker_requests_active), at most sglang_drain_timeout;
3. `docker compose up` (stop_grace_period is longer than that wait);
4. runs its gate directly against it, the rollback included;
5. puts it back in every gateway, and waits until each reports it healthy;
6. gives the slot back (always: every wait above is bounded).
A failed gate stops the roll of that pool: its later workers are not
restarted (their last good compose.yaml and .env are put back on disk, so
what runs is what their gate stamped), and fail naming the worker that failed
and why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyinfra import host, logger
from pyinfra.api import FunctionCommand

from .. import factcache, ship
from ..plantypes import Roll
from ..snapshot import Snapshot
from .base import connector_arguments, q, run_on, snapshot_operation
from .gate import gate_passed
from .gateway import worker_validated
from ..hostside.names import MODEL_LABEL
from .stack import restart, stack_section

# Seconds beyond the drain, the stop and the gate that one worker's turn may take (gateway calls, compose).
TURN_MARGIN = 600


@dataclass
class PoolState:
    slot: object              # gevent BoundedSemaphore of sglang_max_unavailable
    failed: str | None = None  # "<worker>: <why>" once a worker of the pool failed its gate


_pools: dict[tuple[int, str], PoolState] = {}


def pool_state(state, roll: Roll) -> PoolState:
    from gevent.lock import BoundedSemaphore

    key = (id(state), roll.pool)
    if key not in _pools:
        _pools[key] = PoolState(BoundedSemaphore(roll.max_unavailable))
    return _pools[key]


@snapshot_operation
def rolled(project_dir: str, image: str, model: str, compose_sha: str, gate: str, files: dict[str, str],
           roll: Roll, metrics_url: str, key_file: str | None, turn_seconds: int, always: bool = False,
           recreate_if=None):
    """
    Ensure the stack runs the current compose.yaml and that it passed its
    gate (stack_up then validated, as one), restarting this worker only in
    its pool's turn, out of its gateways and drained (the module's
    docstring). Yields nothing when the container runs the current config
    and its gate's stamp matches: no gateway is touched.

    + turn_seconds: the longest one worker's gate may take (its readiness wait and checks)
    """
    reasons, command = restart(project_dir, image, model, compose_sha, recreate_if)
    if not reasons and not always and gate_passed(image, files):
        host.noop("the stack already runs the current compose.yaml, which passed the gate")
        return
    why = "; ".join(reasons) or "the gate is due"
    found = stack_section(None)["stack"]["container"]
    leaving = ()
    if found is not None and found["labels"].get(MODEL_LABEL) not in (None, model):
        # a model switch: the gateways of the model it served may still list it; it leaves them too, first
        leaving = roll.others
        why += " (a model switch: it leaves the other models' gateways too)"
    yield FunctionCommand(roll_worker, (roll, command if reasons else None, f"bash {q(gate)}", why,
                                        metrics_url, key_file, turn_seconds, project_dir, leaving), {})


def on_router(state, front, change: dict) -> tuple[bool, str]:
    """One worker's change at one gateway, run on its router host through that host's own connection."""
    router = state.inventory.get_host(front.router)
    if not router.connected:   # outside --limit: pyinfra connected only the hosts of the run
        router.connect(reason="to take a worker out of its gateway and back", raise_exceptions=True)
    args = [front.directory, front.url, *([front.key_file] if front.key_file else [])]
    try:
        status, output = run_on(router, f"python3 -c {q(ship.program('router_workers'))} " +
                                " ".join(q(a) for a in args), json.dumps(change), print_output=False,
                                arguments=connector_arguments(state, router))
    finally:
        factcache.invalidate(router)   # its workers.json changed
    return status, (output.stdout_lines + output.stderr_lines or ["no output"])[-1]


def drain(state, this, roll: Roll, metrics_url: str, key_file: str | None) -> str:
    """Wait until the worker has no request in flight: its own count, else each gateway's; a line saying how."""
    drain_cmd = f"python3 -c {q(ship.program('drain'))} {roll.drain_timeout}"
    _, output = run_on(this, f"{drain_cmd} {q(metrics_url)}" + (f" {q(key_file)}" if key_file else ""),
                       print_output=False)
    said = (output.stdout_lines or ["drain: unknown"])[-1]
    if "unknown" not in said:
        return said
    for front in roll.fronts:
        router = state.inventory.get_host(front.router)
        _, output = run_on(router, f"{drain_cmd} {q(front.metrics)} --worker {q(roll.url)}", print_output=False,
                           arguments=connector_arguments(state, router))
        said = (output.stdout_lines or ["drain: unknown"])[-1]
    return said


def serving_validated(this) -> bool:
    """The worker runs a config its gate stamped (the new one, or the last good one it rolled back to)."""
    factcache.invalidate(this)
    return worker_validated(factcache.current(this, Snapshot))


def gate_reason(output) -> str:
    failed = [line.split("FAILED: ", 1)[1] for line in output.stderr_lines + output.stdout_lines if "FAILED: " in line]
    return failed[-1] if failed else "its gate failed"


def roll_worker(state, host, roll: Roll, up: str | None, gate: str, why: str, metrics_url: str,
                key_file: str | None, turn_seconds: int, project_dir: str, leaving=()) -> bool:
    """This worker's turn in its pool (the module's docstring); False fails this host. pyinfra passes
    ``state`` and ``host`` only to a function whose parameters have these very names (FunctionCommand).
    ``leaving``: other gateways it leaves first and does not come back to (a model switch: Roll.others)."""
    def say(line, log=logger.info):
        host.log_styled(f"roll: {line}", log_func=log)

    pool = pool_state(state, roll)
    turn = 2 * roll.drain_timeout + 2 * turn_seconds + TURN_MARGIN
    if not pool.slot.acquire(timeout=turn * roll.pool_size):
        say(f"no turn in {roll.pool} within {turn * roll.pool_size} s; nothing was restarted", logger.error)
        return False
    if pool.failed:
        try:   # what runs stays what its last gate stamped: the new compose.yaml is not left on disk
            run_on(host, f"python3 -c {q(ship.program('restore_good'))} {q(project_dir)}", print_output=False)
        finally:
            pool.slot.release()
        say(f"not restarted: the roll of {roll.pool} stopped at {pool.failed}; it keeps serving its last good "
            "config", logger.error)
        return False
    failure = None
    try:
        if roll.pool_size == 1:
            for front in roll.fronts:
                say(f"{host.name} is the only worker of gateway {front.router}/{front.slug}: it cannot serve while "
                    "this worker restarts", logger.warning)
        say(f"{why}: taking {roll.url} out of {len(leaving) + len(roll.fronts)} gateway(s)")
        for front in (*leaving, *roll.fronts):
            ok, said = on_router(state, front, {"remove": roll.url})
            if not ok:
                failure = f"the gateway {front.router}/{front.slug} did not drop it ({said})"
                break
        if failure is None:
            say(drain(state, host, roll, metrics_url, key_file))
            if up is not None:
                status, output = run_on(host, up)
                if not status:
                    failure = f"docker compose up failed ({(output.stderr_lines or ['no output'])[-1]})"
            if failure is None:
                status, output = run_on(host, gate)
                if not status:
                    failure = gate_reason(output)
    finally:
        try:
            back = serving_validated(host)
            if back:
                for front in roll.fronts:
                    ok, said = on_router(state, front, {"add": roll.url, "healthy_within": turn_seconds})
                    say(said, logger.info if ok else logger.error)
                    if not ok and failure is None:
                        failure = f"the gateway {front.router}/{front.slug} did not report it healthy ({said})"
            else:
                say("not put back in its gateways: it serves no config that passed its gate", logger.error)
            if failure is not None:
                pool.failed = f"{host.name}: {failure}"
                say(f"{host.name} failed: {failure}; the roll of {roll.pool} stops here, its other workers "
                    f"are not restarted{' (it is back in its gateways)' if back else ''}", logger.error)
        finally:
            pool.slot.release()
    return failure is None
