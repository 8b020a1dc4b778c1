"""Rolling, drained restarts of a serving host some gateway of the inventory
fronts (docs/front-door.md): the restart and the gate as one operation.

pyinfra runs an operation on every host at once, each host in its own
greenlet. The first worker of a pool (the workers of one model behind the
same gateways; pools go on in parallel) asks its gateways what they list now.
A worker is in service when it runs a config its gate stamped and at least one
gateway lists it healthy; the pool's other workers are out of service, and
they count against sglang_max_unavailable while they are out.

A worker out of service (new, stopped, crashed, unhealthy in every gateway)
takes no capacity away: it goes at once, in parallel with the others. It
leaves any gateway that lists it, its old container is stopped at once (no
drain: it serves nobody), then `up`, its gate, and back in its gateways when
the gate passed. Its failure fails that host alone.

A worker in service waits for its turn: until fewer than sglang_max_unavailable
of the pool are out of service (those already out count, so they go first).
Then:
1. out of every gateway that fronts it (on a model switch, also those of every
   other model, which may still list it), through each gateway host's own
   connection (hostside/roll/gateway_workers.py), until none lists it;
2. drained: no request in flight (its own /metrics, else the gateway's
   smg_worker_requests_active), at most sglang_drain_timeout;
3. `docker compose up` (stop_grace_period is longer than that wait);
4. its gate, the rollback included;
5. back in every gateway, with the worker's own API key (a new key, rotated in
   this run, is the one it now requires: the gateway host's file still holds
   the old one until tasks/gateways.py; issue 53), until each lists it healthy
   with its model.
A failed gate of a worker in service stops the roll of that pool: its later
workers in service are not restarted (their last good compose.yaml and .env
are put back on disk, so what runs is what their gate stamped), and fail
naming the worker that failed and why. Every wait is bounded.

A driver change takes the same turns (driver_rolled, from tasks/gpu_driver.py, in a roll of its own before the
config's): the worker's restart is a reboot into the driver installed on disk (run/reboot.py), the loaded driver is
checked, its gate runs on it (the stamp covers the driver: hostside/gate/stamp.py), and it comes back. A multi-node
group's rank 0 reboots every member with it and the group is recreated and gated as one unit. A driver that did not
load, or whose gate failed, cannot be rolled back: the worker stays out of its gateways, failed and named, and the
pool's later workers are not rebooted.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from time import monotonic

from pyinfra import host, logger
from pyinfra.api import FunctionCommand
from pyinfra.api.exceptions import PyinfraError

from ..hostside.names import COMPOSE_COMMAND, MODEL_LABEL
from ..hostside.stack import QUICK_STOP_SECONDS
from ..machine import ship
from ..plan.types import Gate, NodeGroup, Roll
from ..run import factcache, reboot
from ..run.facts import MAX_ANSWER_BYTES, Snapshot, bounded_json
from ..run.operation import connector_arguments, gate_reason, gated, q, run_cached, run_on, snapshot_operation
from .gate import gate_passed
from .gateway import worker_validated
from .gpu_driver import running_driver
from .group import restart_and_gate as group_restart_and_gate
from .group import restart_reasons as group_reasons
from .stack import restart, stack_section

# Seconds beyond the drain, the stop and the gate that one worker's turn may take (gateway calls, compose).
TURN_MARGIN = 600
# How long a worker in service waits for the pool's other workers of this run to come to the roll (each reads its
# snapshot first) before it counts who is out without them.
ARRIVAL_SECONDS = 60
POLL_SECONDS = 0.2   # how often a worker in service waiting for its turn looks again (in this process, no I/O)


@dataclass
class PoolState:
    """One pool's roll in this run, shared by its workers' greenlets."""

    allowed: int                              # Roll.max_unavailable: out of service at once, at most
    learning: AbstractContextManager          # gevent lock: the first worker asks the gateways, the others wait
    out: set[str] | None = None               # the pool's workers out of service now (URLs); None: not asked yet
    listed: set[str] = field(default_factory=set)   # what some gateway listed, healthy or not, when asked
    arrived: set[str] = field(default_factory=set)  # workers of this run that came to the roll
    done: set[str] = field(default_factory=set)     # workers of this run whose turn ended, or that needed none
    rolling: set[str] = field(default_factory=set)  # workers in service taken out now, not back yet
    failed: str | None = None                 # "<worker>: <why>" once a worker in service failed its gate


_pools: dict[tuple[int, str, str], PoolState] = {}


def pool_state(state, roll: Roll, phase: str = "config") -> PoolState:
    """The pool's roll in this run: the driver's (``phase`` "driver") and the config's are rolls of their own."""
    from gevent.lock import Semaphore

    key = (id(state), roll.pool, phase)
    if key not in _pools:
        _pools[key] = PoolState(roll.max_unavailable, Semaphore())
    return _pools[key]


def learn(state, pool: PoolState, roll: Roll, say) -> None:
    """Once per pool and run: which of its workers some gateway lists healthy now; the others are out of service.
    A gateway that does not answer fronts nobody; one that cannot be asked (its gateway host unreachable) counts
    every worker as serving, so nothing is taken out on a guess."""
    with pool.learning:
        if pool.out is not None:
            return
        members = {url for _, url in roll.members} | {roll.url}
        healthy: set[str] = set()
        for front in roll.fronts:
            try:
                _, said = on_gateway_host(state, front, {"view": True})
                seen = bounded_json(said, MAX_ANSWER_BYTES, "the gateway's answer")
                if not all(isinstance(seen.get(k), list) and all(isinstance(u, str) for u in seen[k])
                           for k in ("healthy", "listed")):
                    raise ValueError("the gateway's answer lists no workers' URLs")
                healthy |= set(seen["healthy"])
                pool.listed |= set(seen["listed"])
            except (PyinfraError, OSError, ValueError, KeyError, TypeError) as error:
                say(f"could not ask the gateway {front.gateway_host}/{front.slug} what it lists ({error}); its workers "
                    "count as serving", logger.warning)
                healthy |= members
                pool.listed |= members
        pool.out = members - healthy


def in_run(state, roll: Roll) -> set[str]:
    """The pool's workers in this run that are still going (pyinfra runs this operation on each at once)."""
    active = {each.name for each in state.inventory.get_active_hosts()}
    return {url for name, url in roll.members if name in active}


def no_turn_needed(roll: Roll, phase: str = "config") -> None:
    """This worker of the run needs no turn: the others of its pool do not wait for it."""
    if host.state.is_executing:
        pool_state(host.state, roll, phase).done.add(roll.url)


@snapshot_operation
def rolled(project_dir: str, image: str, model: str, compose_sha: str, script: str, gate: Gate, roll: Roll,
           recreate_if=None, group: NodeGroup | None = None, api_key: bytes | None = None):
    """
    Ensure the stack runs the current compose.yaml and that it passed its
    gate (the restart then its gate, as one), restarting this worker only in
    its pool's turn, out of its gateways and drained (the module's
    docstring). Yields nothing when the container runs the current config
    and its gate's stamp matches: no gateway is touched.

    + script: the gate's script on the host; gate: what it validates (its files, whether always), the worker's
      metrics and key file (the drain), and the longest one worker's gate may take (its readiness wait and checks)
    + group: rank 0's multi-node group: the worker is the group, restarted and gated as one (operations/group.py)
    + api_key: the worker's API key (the plan's), sent to its gateways with it when they take it back
    """
    reasons, command = restart(project_dir, image, model, compose_sha, recreate_if)
    if group is not None:
        reasons = group_reasons(host.state, group)
    if not reasons and not gate.always and gate_passed(image, gate.files):
        no_turn_needed(roll)
        host.noop("the stack already runs the current compose.yaml, which passed the gate")
        return
    why = "; ".join(reasons) or "the gate is due"
    found = stack_section(None)["stack"]["container"]
    leaving: tuple = ()
    if found is not None and found["labels"].get(MODEL_LABEL) not in (None, model):
        # a model switch: the gateways of the model it served may still list it; it leaves them too, first
        leaving = roll.others
        why += " (a model switch: it leaves the other models' gateways too)"
    up = None
    if reasons and group is not None:
        up = Up("group", "group")   # the group's own restart: every member stopped, then started
    elif reasons:
        # out of service, the old container serves nobody: stopped at once, not after compose's long grace
        stop = f"{' '.join(COMPOSE_COMMAND)} stop --timeout {QUICK_STOP_SECONDS}"
        up = Up(command, f"cd {q(project_dir)} && {stop} && {command}")
    judged = f"bash {q(script)} --config-sha {compose_sha}"   # the gate judges only the config this run rendered
    yield FunctionCommand(roll_worker, (roll, up, judged, why, gate.metrics_url, gate.api_key_file,
                                        gate.turn_seconds, project_dir, leaving, roll.stamped,
                                        *([group] if group else [])),
                          {"worker_key": WorkerKey(api_key.decode()) if api_key else None})


@dataclass(frozen=True)
class WorkerKey:
    """The worker's own API key (sglang_api_key_file), for its gateways to send it when they take it back; never
    shown (no repr: pyinfra and the fixtures print a FunctionCommand's arguments)."""

    value: str = field(repr=False)


@dataclass(frozen=True)
class Reboot:
    """A worker's restart in the driver's turn: a reboot into NVIDIA driver ``version`` (installed on disk, its module
    built for the next boot), rank 0's with every member of its multi-node group, then ``units`` started."""

    version: str
    units: tuple[str, ...]   # Fabric Manager, nvidia-persistenced, where the plan runs them
    timeout: int             # gpus.REBOOT_TIMEOUT


@dataclass(frozen=True)
class Up:
    """The restart of a worker: drained in its turn (``drained``), or, out of service, its old container stopped
    at once first (``at_once``); a reboot in the driver's turn, either way."""

    drained: str | Reboot
    at_once: str | Reboot


@snapshot_operation
def driver_rolled(version: str, units: tuple[str, ...], reboot_timeout: int, project_dir: str, script: str,
                  gate: Gate, roll: Roll | None, group: NodeGroup | None = None):
    """
    Ensure this host runs NVIDIA driver ``version``, installed on disk by
    now: it reboots into it in its pool's turn (``roll``), out of its
    gateways and drained, as a config change does; then the loaded driver
    is checked, ``units`` started, its gate run on the new driver, and it
    comes back (the module's docstring). A multi-node group's rank 0
    (``group``) reboots every member with it, and the group is recreated
    and gated as one unit; with no gateway in front, in a turn of its own.
    """
    running, _ = running_driver()
    if running == version:
        if roll is not None:
            no_turn_needed(roll, "driver")
        host.noop(f"NVIDIA driver {version} already loaded")
        return
    up = Reboot(version, tuple(units), reboot_timeout)
    serving = stack_section(None)["stack"]["container"] is not None
    check = f"bash {q(script)}" if serving else None   # a host with no stack yet has nothing to gate
    why = f"NVIDIA driver {version} is installed and {running or 'no driver'} is loaded: a reboot"
    if roll is None:
        assert group is not None, "tasks/gpu_driver.py takes a turn only behind a gateway or in a group"
        yield FunctionCommand(group_driver_turn, (group, up, check, why), {})
        return
    yield FunctionCommand(roll_worker, (roll, Up(up, up), check, why, gate.metrics_url, gate.api_key_file,
                                        gate.turn_seconds, project_dir, (), roll.stamped, *([group] if group else [])),
                          {"phase": "driver"})


def group_driver_turn(state, host, group: NodeGroup, up: Reboot, gate: str | None, why: str) -> bool:
    """A multi-node group no gateway fronts: every member rebooted together, then the group recreated and gated as
    one unit from rank 0; False fails rank 0."""
    failure = restart_and_gate(host, up, gate, state, group)
    if failure:
        host.log_styled(f"group {group.name}: {failure}", log_func=logger.error)
    return failure is None


def reboot_into(state, host, up: Reboot, group: NodeGroup | None) -> str | None:
    """This host rebooted into ``up.version`` (a group's rank 0: every member at once), each waited for and its
    driver checked loaded, ``up.units`` started; None, or why not."""
    names = group.members if group is not None else (host.name,)
    active = {each.name for each in state.inventory.get_active_hosts()}
    failed = [name for name in names if name not in active]
    if failed:
        return f"{', '.join(failed)} failed before its reboot (its driver install): not rebooted"
    sent = []
    for name in names:
        each = host if name == host.name else state.inventory.get_host(name)
        arguments = None if each is host else connector_arguments(state, each)
        before, why = reboot.start(each, arguments)
        if before is None:
            return f"{name}: {why}"
        sent.append((each, arguments, before))
    for each, arguments, before in sent:
        why = reboot.wait(each, before, up.timeout, arguments)
        if why:
            return f"{each.name}: {why}"
    for each, arguments, _ in sent:
        ok, output = run_on(each, reboot.after_boot(up.version, up.units), print_output=False, arguments=arguments)
        factcache.invalidate(each)
        if not ok:
            return f"{each.name}: {(output.stderr_lines or output.stdout_lines or ['no output'])[-1]}"
    return None


def on_gateway_host(state, front, change: dict) -> tuple[bool, str]:
    """One worker's change at one gateway, run on its gateway host through that host's own connection."""
    gateway_host = state.inventory.get_host(front.gateway_host)
    if not gateway_host.connected:   # outside --limit: pyinfra connected only the hosts of the run
        gateway_host.connect(reason="to take a worker out of its gateway and back", raise_exceptions=True)
    args = [front.directory, front.url, *([front.key_file] if front.key_file else [])]
    try:
        status, output = run_on(gateway_host, f"{ship.command('roll.gateway_workers')} " +
                                " ".join(q(a) for a in args), json.dumps(change), print_output=False,
                                arguments=connector_arguments(state, gateway_host))
    finally:
        factcache.invalidate(gateway_host)   # its workers.json changed
    return status, (output.stdout_lines + output.stderr_lines or ["no output"])[-1]


def drain(state, this, roll: Roll, metrics_url: str, key_file: str | None) -> str:
    """Wait until the worker has no request in flight: its own count, else each gateway's; a line saying how."""
    drain_cmd = f"{ship.command('roll.drain')} {roll.drain_timeout}"
    _, output = run_on(this, f"{drain_cmd} {q(metrics_url)}" + (f" {q(key_file)}" if key_file else ""),
                       print_output=False)
    said = (output.stdout_lines or ["drain: unknown"])[-1]
    if "unknown" not in said:
        return said
    for front in roll.fronts:
        gateway_host = state.inventory.get_host(front.gateway_host)
        _, output = run_on(gateway_host, f"{drain_cmd} {q(front.metrics)} --worker {q(roll.url)}", print_output=False,
                           arguments=connector_arguments(state, gateway_host))
        said = (output.stdout_lines or ["drain: unknown"])[-1]
    return said


def serving_validated(this) -> bool:
    """The worker runs a config its gate stamped (the new one, or the last good one it rolled back to)."""
    factcache.invalidate(this)
    return worker_validated(factcache.current(this, Snapshot))


def roll_worker(state, host, roll: Roll, up: Up | None, gate: str | None, why: str, metrics_url: str,
                key_file: str | None, turn_seconds: int, project_dir: str, leaving=(), stamped: bool = True,
                group: NodeGroup | None = None, phase: str = "config",
                worker_key: WorkerKey | None = None) -> bool:
    """This worker's turn in its pool (the module's docstring); False fails this host. pyinfra passes
    ``state`` and ``host`` only to a function whose parameters have these very names (FunctionCommand).
    ``leaving``: other gateways it leaves first and does not come back to (a model switch: Roll.others).
    ``stamped``: when the run began, it ran a config its gate stamped (one half of being in service; its snapshot
    now already sees the new files on disk). ``phase``: "driver" in the driver's turns (driver_rolled)."""
    def say(line, log=logger.info):
        host.log_styled(f"roll: {line}", log_func=log)

    pool = pool_state(state, roll, phase)
    pool.arrived.add(roll.url)
    learn(state, pool, roll, say)
    assert pool.out is not None
    if not stamped or roll.url in pool.out:
        pool.out.add(roll.url)   # counted before anything that yields: the others' turns see it at once
        return out_of_service_turn(state, host, pool, roll, up, gate, why, turn_seconds, leaving, say, group,
                                   worker_key)
    turn = 2 * roll.drain_timeout + 2 * turn_seconds + TURN_MARGIN
    waited = wait_for_turn(state, pool, roll, turn * roll.pool_size)
    if waited is not None or pool.failed:
        pool.done.add(roll.url)
        # what runs stays what its last gate stamped: the new compose.yaml is not left on disk
        # through the code cache: it carries the whole gate, past half of one argument's 128 KiB quoted
        run_cached(host, "roll.restore_good", q(project_dir), print_output=False)
        say(f"not restarted: {waited or f'the roll of {roll.pool} stopped at {pool.failed}'}; it keeps serving "
            "its last good config", logger.error)
        return False
    failure = None
    try:
        if roll.pool_size == 1:
            for front in roll.fronts:
                say(f"{host.name} is the only worker of gateway {front.gateway_host}/{front.slug}: it cannot serve "
                    "while this worker restarts", logger.warning)
        say(f"{why}: taking {roll.url} out of {len(leaving) + len(roll.fronts)} gateway(s)")
        failure = leave(state, (*leaving, *roll.fronts), roll.url)
        if failure is None:
            say(drain(state, host, roll, metrics_url, key_file))
            failure = restart_and_gate(host, up.drained if up else None, gate, state, group)
    finally:
        try:
            back = come_back(state, host, pool, roll, turn_seconds, say, worker_key)
            if failure is None and back is not True:
                failure = back or None
            if failure is not None:
                pool.failed = f"{host.name}: {failure}"
                say(f"{host.name} failed: {failure}; the roll of {roll.pool} stops here, its other workers "
                    f"in service are not restarted{' (it is back in its gateways)' if back is True else ''}",
                    logger.error)
        finally:
            pool.rolling.discard(roll.url)
            pool.done.add(roll.url)
    return failure is None


def wait_for_turn(state, pool: PoolState, roll: Roll, seconds: float) -> str | None:
    """Wait until this worker in service may go out: fewer than the allowed number of the pool out of service,
    counting those already out. None when it may (it is then counted out); else why it may not."""
    import gevent

    assert pool.out is not None
    deadline = monotonic() + seconds
    everyone = monotonic() + ARRIVAL_SECONDS
    while not pool.failed:
        if in_run(state, roll) - pool.arrived - pool.done and monotonic() < everyone:
            gevent.sleep(POLL_SECONDS)   # the pool's other workers of this run say first whether they are out
            continue
        if len(pool.out) < pool.allowed:
            pool.out.add(roll.url)
            pool.rolling.add(roll.url)
            return None
        coming = (pool.out & in_run(state, roll)) - pool.done - {roll.url}
        if not coming and not pool.rolling:   # nothing of this run will bring one of them back
            out = ", ".join(sorted(pool.out))
            return (f"{len(pool.out)} of the {roll.pool_size} workers of {roll.pool} are out of service ({out}) "
                    f"and sglang_max_unavailable allows {pool.allowed}; bring them back (or remove them from the "
                    "inventory), or raise sglang_max_unavailable")
        if monotonic() > deadline:
            return f"no turn in {roll.pool} within {seconds:.0f} s"
        gevent.sleep(POLL_SECONDS)
    return None


def out_of_service_turn(state, host, pool: PoolState, roll: Roll, up: Up | None, gate: str | None, why: str,
                        turn_seconds: int, leaving, say, group: NodeGroup | None = None,
                        worker_key: WorkerKey | None = None) -> bool:
    """A worker that serves nobody: at once, out of any gateway that lists it, no drain, its old container stopped
    at once; back in its gateways when its gate passed. Its failure fails this host alone."""
    failure = None
    try:
        listed = [front for front in roll.fronts if roll.url in pool.listed]
        say(f"{why}: out of service, restarted at once" +
            (f" (out of {len(leaving) + len(listed)} gateway(s) first)" if leaving or listed else ""))
        failure = leave(state, (*leaving, *listed), roll.url)
        if failure is None:
            failure = restart_and_gate(host, up.at_once if up else None, gate, state, group)
    finally:
        try:
            back = come_back(state, host, pool, roll, turn_seconds, say, worker_key)
            if failure is None and back is not True:
                failure = back or None
            if failure is not None:
                say(f"{host.name} failed: {failure}; it was out of service, so the roll of {roll.pool} goes on",
                    logger.error)
        finally:
            pool.done.add(roll.url)
    return failure is None


def leave(state, fronts, url: str) -> str | None:
    """Out of each of ``fronts``; None, or why not."""
    for front in fronts:
        ok, said = on_gateway_host(state, front, {"remove": url})
        if not ok:
            return f"the gateway {front.gateway_host}/{front.slug} did not drop it ({said})"
    return None


def restart_and_gate(host, up: str | Reboot | None, gate: str | None, state=None, group: NodeGroup | None = None
                     ) -> str | None:
    """`up` (when the config changed), then the gate with its rollback; None, or why it failed. A multi-node
    group's rank 0: the group's own restart (when ``up``), gate and rollback instead (operations/group.py). A
    Reboot: the host (a group: every member) rebooted into the driver first, then the gate (the group recreated as
    one unit and gated); no ``gate``: a host with no stack yet, rebooted alone."""
    if isinstance(up, Reboot):
        failure = reboot_into(state, host, up, group)
        if failure is not None or gate is None:
            return failure
        up = None if group is None else "group"   # a group: its members came back one by one, recreated as one
    if gate is None:
        return None
    if group is not None:
        return group_restart_and_gate(state, host, group, up is not None, f"group {group.name}'s turn")
    # the restart and its gate one program apart from this run's connection: an interrupt or a cut connection
    # leaves them to end on the host, never a restarted container without its gate
    status, output = gated(host, gate, up)
    return None if status else gate_reason(output)


def come_back(state, host, pool: PoolState, roll: Roll, turn_seconds: int, say,
              worker_key: WorkerKey | None = None) -> bool | str:
    """Back in every gateway when it serves a config its gate stamped (it is then no longer out of service), each
    listing it healthy with its model (so routing it requests): True; False when it serves no such config; else why
    a gateway did not take it back."""
    assert pool.out is not None
    if not serving_validated(host):
        say("not put back in its gateways: it serves no config that passed its gate", logger.error)
        return False
    problem: bool | str = True
    for front in roll.fronts:
        ok, said = on_gateway_host(state, front, {"add": roll.url, "healthy_within": turn_seconds,
                                                  "model": roll.model,
                                                  **({"api_key": worker_key.value} if worker_key else {})})
        say(said, logger.info if ok else logger.error)
        if not ok and problem is True:
            problem = f"the gateway {front.gateway_host}/{front.slug} did not report it healthy ({said})"
    if problem is True:
        pool.out.discard(roll.url)
    return problem
