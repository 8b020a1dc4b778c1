"""A multi-node group restarted, gated and rolled back as one unit
(sglang_node_group, nodegroups.py), driven from rank 0.

The operation runs on rank 0 only; by then every member has its compose.yaml,
.env and scripts on disk (earlier operations, which pyinfra runs on every host
before the next one). It reads every member's snapshot and decides for the
group (restart_reasons, below): when any member's container is gone,
exited, not started from its files, or the group is stale, then

1. every member is stopped (no member is left running against a group that
   restarts), then every member is started: ranks >= 1 first, rank 0 last
   (they wait for its rendezvous; a healthy group's rank 0 started last);
2. the gate runs against rank 0 only (its readiness waits until every rank
   joined; the other ranks' own health answers are never asked);
3. passed: every other member keeps its config as the group's last
   known-good one, stamped; failed: every member keeps its config as *.failed
   and puts its last known-good one back, all are stopped and started again,
   and rank 0 validates again. Every member ends on the same config.

A group recreated with every member's config unchanged (its last known-good
one: a member restarted alone, a container gone) is gated with
--group-step revalidate: a failure then is the group's state, not a config's,
so no config is kept as *.failed, nothing is rolled back, and the run fails
for the group saying so. A group whose gate was only due (not recreated) and
that fails so is first recreated and gated once more.

Commands on the other members run through their own connections
(operation.run_on with their connector arguments), as operations/roll.py reaches a
gateway host.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import FunctionCommand

from ..fleet.nodegroups import member_reasons, stale
from ..hostside import names
from ..hostside.gate.gate import CONFIG, GROUP_NOT_ROLLED_BACK, GROUP_STATE_FAILED
from ..hostside.stack import QUICK_STOP_SECONDS
from ..machine import ship
from ..plan.types import NodeGroup, worker_validated
from ..run import factcache, interrupt
from ..run.facts import Snapshot, current
from ..run.operation import connector_arguments, detached, q, run_on, snapshot_operation
from .gate import gate_passed


def member_snapshots(state, group: NodeGroup) -> dict:
    """Every member's snapshot as it is now (this host's through its own context, the others' through theirs)."""
    out = {}
    for member in group.member_plans:
        if member.name == host.name:
            out[member.name] = current(host)
            continue
        other = state.inventory.get_host(member.name)
        factcache.invalidate(other)
        out[member.name] = factcache.current(other, Snapshot)
    return out


def restart_reasons(state, group: NodeGroup) -> list[str]:
    """Why the whole group must be recreated (none: every member runs its planned config, in one group)."""
    snapshots = member_snapshots(state, group)
    reasons = []
    for member in group.member_plans:
        snapshot = snapshots[member.name]
        images = ((snapshot or {}).get("docker") or {}).get("images") or {}
        reasons += member_reasons(member.name, snapshot, member.compose_sha,
                                  (images.get(member.image) or {}).get("id"), member.docker)
    return reasons or stale(snapshots, group)


def unchanged(snapshots: dict, group: NodeGroup) -> bool:
    """Whether every member's compose.yaml and .env are its last known-good ones (*.good, kept by its last passing
    gate): the group's gate then judges the group's state, not a config change."""
    for member in group.member_plans:
        files = ((snapshots.get(member.name) or {}).get("files") or {}).get(member.docker) or {}
        for name in CONFIG:
            now, good = files.get(name), files.get(name + ".good")
            if (now or good) and not (now and good and now.get("sha256") == good.get("sha256")):
                return False
    return True


@snapshot_operation
def group_up(group: NodeGroup, files: dict[str, str], always: bool = False):
    """
    Ensure every member of ``group`` runs its current compose.yaml, started
    together, and that rank 0 passed its gate (``files``: what it validates)
    with every member up (the module's docstring). Run on rank 0. Yields
    nothing when every member runs its config in one group and every
    member's stamp is current.
    """
    assert group.member_plans, "preflight gives every member's plan its group's members"
    reasons = restart_reasons(host.state, group)
    due = always or not gate_passed(group.member_plans[0].image, files) or \
        not all(worker_validated(s) for s in member_snapshots(host.state, group).values())
    if not reasons and not due:
        host.noop(f"every member of group {group.name} runs the current compose.yaml, which passed the gate")
        return
    why = "; ".join(reasons) or "the gate is due"
    yield FunctionCommand(group_turn, (group, bool(reasons), why), {})


def group_turn(state, host, group: NodeGroup, restart: bool, why: str) -> bool:
    """The group's restart (when ``restart``) and its gate through rank 0, with the group's rollback; False fails
    rank 0 (the run's failure for the group). pyinfra passes ``state`` and ``host`` by these names."""
    failure = restart_and_gate(state, host, group, restart, why)
    if failure:
        host.log_styled(f"group {group.name}: {failure}", log_func=logger.error)
    return failure is None


def say(host, line, log=logger.info):
    host.log_styled(f"group: {line}", log_func=log)


def on_member(state, name: str, command: str):
    """(status, output) of ``command`` on the member ``name``, through its own connection."""
    member = state.inventory.get_host(name)
    if not member.connected:
        member.connect(reason="to restart its multi-node group", raise_exceptions=True)
    try:
        return run_on(member, command, print_output=False, arguments=connector_arguments(state, member))
    finally:
        factcache.invalidate(member)


def last_line(output) -> str:
    return (output.stderr_lines + output.stdout_lines or ["no output"])[-1]


def recreate(state, group: NodeGroup) -> str | None:
    """Every member stopped, then every member started, rank 0 last; None, or what failed."""
    for member in group.member_plans:
        name, docker = member.name, member.docker
        ok, output = on_member(state, name, f"cd {q(docker)} && {' '.join(names.COMPOSE_COMMAND)} stop --timeout "
                                            f"{QUICK_STOP_SECONDS}")
        if not ok:
            return f"{name}: docker compose stop failed ({last_line(output)})"
    for member in (*group.member_plans[1:], group.member_plans[0]):
        name, docker = member.name, member.docker
        ok, output = on_member(state, name, f"cd {q(docker)} && {' '.join(names.COMPOSE_COMMAND)} up -d "
                                            f"--force-recreate --remove-orphans && {ship.command('stack')} {q(docker)}")
        if not ok:
            return f"{name}: docker compose up failed ({last_line(output)})"
    return None


def gate_command(group: NodeGroup, name: str, step: str, own: bool = True) -> str:
    """The group's ``step`` of the gate on the member ``name``; ``own``: judging, keeping or failing only the config
    this run rendered for it (--config-sha, its plan's compose.yaml: a config another run or a hand put there is
    left alone, exit gate.NOT_OWN); not after the rollback, which put the last good config back."""
    member = next(member for member in group.member_plans if member.name == name)
    return (f"bash {q(member.home + '/' + names.GATE_SCRIPT)} --group-step {step}" +
            (f" --config-sha {member.compose_sha}" if own else ""))


def keep_members(state, host, group: NodeGroup, own: bool = True) -> str | None:
    """Every member above rank 0 keeps its config as the group's last good one, stamped; None, or what failed.
    ``own``: the config this run rendered (not after a rollback)."""
    for name in group.members[1:]:
        ok, output = on_member(state, name, gate_command(group, name, "keep", own))
        say(host, last_line(output), logger.info if ok else logger.error)
        if not ok:
            return f"{name}: {last_line(output)}"
    return None


def gate_rank_0(state, host, group: NodeGroup, step: str):
    """Rank 0's gate as the group's ``step`` (validate or revalidate), judging only the config this run rendered,
    run apart from this run's connection on rank 0's host (hostside/roll/detach.py: it ends and records there by
    itself, as a single host's gate): (ok, output), its last lines said."""
    with interrupt.gate_going(host.name):
        ok, output = on_member(state, group.head_name, detached(gate_command(group, group.head_name, step)))
    for line in output.stderr_lines[-6:]:
        say(host, line)
    return ok, output


def restart_and_gate(state, host, group: NodeGroup, restart: bool, why: str, changed: bool | None = None
                     ) -> str | None:
    """The group's turn (the module's docstring): None when it passed, else why it failed. ``changed``: whether a
    member's config is not its last good one (None: read from the members now; the group's own operation and its
    turn in a rolling restart both come here)."""
    if changed is None:
        changed = not unchanged(member_snapshots(state, group), group)
    if restart:
        say(host, f"{why}: every member of {group.name} ({', '.join(group.members)}) is stopped, then started")
        failure = recreate(state, group)
        if failure:
            return failure
    step = "validate" if changed else "revalidate"
    ok, output = gate_rank_0(state, host, group, step)
    if not ok and not changed and not restart:
        # the good config failed on a group that was not recreated: a member may have restarted alone unseen (its
        # gate's record, written before records kept the container, cannot tell); recreated as one unit, gated again
        say(host, f"the group's last good config failed its gate: every member of {group.name} is stopped, then "
                  "started, and rank 0 gated once more", logger.warning)
        failure = recreate(state, group)
        if failure:
            return failure
        ok, output = gate_rank_0(state, host, group, step)
    if ok:
        return keep_members(state, host, group)
    said = next((line.split("FAILED: ", 1)[1] for line in reversed(output.stderr_lines) if "FAILED: " in line), "")
    if GROUP_STATE_FAILED in said:
        return f"rank 0's gate failed with every member on its last good config, recreated together " \
               f"({said.replace(GROUP_STATE_FAILED, '').strip(' .')}); no config is marked failed: the group's " \
               "hosts need a look (status.sh, the members' logs)"
    if GROUP_NOT_ROLLED_BACK not in said:
        return f"rank 0's gate failed ({last_line(output)})"
    failed = said.replace(GROUP_NOT_ROLLED_BACK, "").strip(" .")
    say(host, f"rank 0's gate failed ({failed}); every member of {group.name} goes back to its last good config",
        logger.error)
    for name in group.members:
        ok, output = on_member(state, name, gate_command(group, name, "failed"))
        if not ok:
            return f"{failed}; {name} could not be rolled back ({last_line(output)}): the group is left as it is"
    problem = recreate(state, group)
    if problem:
        return f"{failed}; the rollback failed: {problem}; the group needs a person"
    ok, output = on_member(state, group.head_name, gate_command(group, group.head_name, "rolled-back", own=False))
    say(host, last_line(output), logger.info if ok else logger.error)
    if not ok:
        return f"{failed}; the rollback to the last good config ALSO failed ({last_line(output)}); the group needs " \
               "a person"
    problem = keep_members(state, host, group, own=False)
    return f"{failed}; rolled back: every member serves its last good config again" + \
        (f" (but {problem})" if problem else "")
