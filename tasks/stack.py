"""docker/.env with the account's real ids, docker/compose.yaml from the
template (a new one replaces the old only after the host's own `docker
compose config -q` accepts it), the stack running that config (`up -d` only
when the container is missing, stopped or not started from the files as they
are), and the runbook's validation scripts with the gate that runs them after
every change: wait until the server can serve, check tool calling and
throughput, roll back to the last known-good config on failure. A host
serving alone is restarted and gated by one operation, whose restart and gate
are one program on the host, run apart from the run's connection
(operations/gate.py validated): a run lost after the restart leaves no
ungated container.

A worker some gateway fronts restarts with its gate, in its pool's turn
(operations/roll.py): one operation, which also recreates the container when
the server's private config, written here, changed. A multi-node group
(sglang_node_group) restarts, gates and rolls back as one unit, from rank 0
(operations/group.py); behind a gateway that is rank 0's turn in its pool.

What triggers a gate is a change of what serves (compose.yaml, .env, the
image, the container) or of the values the scripts judge with, never the
programs the scripts carry: a tool upgrade gates nothing. A stamp an earlier
version wrote of the host as it is is rewritten in this version's form first,
before the new scripts land (operations/gate.py stamp_migrated).

    --data sglang_validate=always    runs the gate without a change
"""

from pyinfra import host

from sglang_infra.hostside import names
from sglang_infra.operations.files import account_env_file, compose_file, scripts_in_place, secret_file
from sglang_infra.operations.gate import not_failed_before, stamp_migrated, validated
from sglang_infra.operations.group import group_up
from sglang_infra.operations.roll import rolled
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
docker_dir, home = plan.paths.docker, plan.paths.home
compose_sha = plan.compose_sha

stamp_migrated(
    name="Ensure the gate's stamp is this version's (a pass an earlier version stamped kept as a pass)",
    home=home,
)

not_failed_before(
    name="Ensure this compose.yaml is not one that already failed its gate here (unless sglang_retry_failed)",
    failed=f"{docker_dir}/{names.failed(names.COMPOSE_FILE)}",
    sha=compose_sha,
    retry=plan.gate.retry_failed,
)

server_secrets = secret_file(
    name=f"Ensure {plan.paths.server_config} holds the API key from sglang_api_key_file (0600), or is absent",
    dest=plan.paths.server_config,
    content=plan.server_config,
    user=plan.account.name,
)

account_env_file(
    name=f"Ensure {docker_dir}/.env carries the {plan.account.name} account's real uid and gid",
    dest=f"{docker_dir}/{names.ENV_FILE}",
    user=plan.account.name,
)

compose_file(f"Ensure {docker_dir}/compose.yaml is rendered from {plan.compose_template} and accepted by compose",
             docker_dir, plan.compose, plan.account.name)

group = plan.node_group
scripts_in_place(home, plan.scripts, plan.account.name)

if group is not None and group.rank > 0:
    pass   # a member of a multi-node group is restarted and gated with its group, from rank 0 (below)
elif plan.roll is not None:   # a worker some gateway fronts restarts in its pool's turn, with its gate
    rolled(
        name=f"Ensure the stack runs the current compose.yaml and passed its gate, restarted in its turn in "
             f"{plan.roll.pool}, out of its gateways and drained (no restart when nothing changed)",
        project_dir=docker_dir,
        image=plan.image.serving,
        model=plan.served.pinned,
        compose_sha=compose_sha,
        script=f"{home}/{names.GATE_SCRIPT}",
        gate=plan.gate,
        roll=plan.roll,
        recreate_if=server_secrets.did_change,
        group=group,
        api_key=plan.api_key,
    )
elif group is not None:
    group_up(
        name=f"Ensure every member of group {group.name} ({', '.join(group.members)}) runs the current compose.yaml, "
             "started together, and passed the gate through rank 0 (the whole group restarted and rolled back as "
             "one unit)",
        group=group,
        files=plan.gate.files,
        always=plan.gate.always,
    )
else:   # restarted when it does not run the current compose.yaml, and gated, as one program on the host
    validated(
        name="Ensure the running config passed test_tool_calling.sh and benchmark.sh (rolled back if not)",
        home=home,
        image=plan.image.serving,
        gate=f"{home}/{names.GATE_SCRIPT}",
        files=plan.gate.files,
        always=plan.gate.always,
        project_dir=docker_dir,
        model=plan.served.pinned,
        compose_sha=compose_sha,
        recreate_if=server_secrets.did_change,
    )
