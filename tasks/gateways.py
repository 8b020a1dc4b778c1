"""The fleet's front door, on hosts in the `router` group: one Shepherd Model
Gateway (SMG, `smg.launch_router`, at the version templates/gateway-requirements.txt
pins) per model, each in its own compose stack under router/<slug>/, in front of
the serving hosts of that model whose gate passed.

Runs after tasks/stack.py: by the time its operations run, every worker
of this run has been gated (or rolled back), and the worker set is decided
from each worker's snapshot as it is then. A change of that set is applied
through the gateway's /workers API, without a restart; the gateway's own gate
(the same checks, through the gateway) follows it and any change of its
config, with a rollback to its last good config. A gateway's restart and its
gate are one program on the host, run apart from the run's connection
(operations/gate.py validated): a run lost after the restart leaves no
ungated gateway.
"""

from pyinfra import host

from sglang_infra.hostside import names
from sglang_infra.operations.docker import image_present
from sglang_infra.operations.files import compose_file, scripts_in_place, secret_file
from sglang_infra.operations.gate import not_failed_before, stamp_migrated, validated
from sglang_infra.operations.gateway import fleet_barrier, gateway_workers
from sglang_infra.run.gateway_turns import GatewayTurn
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)

# On every host: the workers' gates (tasks/stack.py) run before any gateway decides its workers.
fleet_barrier(name="Ensure every worker of this run was gated before any gateway sets its workers",
              reason="every worker of this run has been through its gate")

front_door = plan.front_door
if front_door is not None:
    image_present(
        name=f"Ensure the gateway image {front_door.image} is on the host",
        image=front_door.image,
        archive=front_door.image_archive,
    )
    secrets = secret_file(
        name=f"Ensure {plan.paths.server_config} holds the API key the gateways send and require, or is absent",
        dest=plan.paths.server_config,
        content=plan.server_config,
        user=plan.account.name,
    )
    control = secret_file(
        name=f"Ensure {plan.paths.control_plane_config} holds the gateways' control-plane key (role admin)",
        dest=plan.paths.control_plane_config,
        content=front_door.control_plane_config,
        user=plan.account.name,
    )

for gateway in front_door.gateways if front_door is not None else ():
    where = gateway.dir
    compose_sha = gateway.compose_sha
    stamp_migrated(
        name=f"Ensure the {gateway.key} gateway's gate stamp is this version's (an earlier version's pass kept)",
        home=plan.paths.home,
        gateway=gateway.slug,
    )
    scripts_in_place(where, dict(sorted(gateway.scripts.items())), plan.account.name)
    not_failed_before(
        name=f"Ensure the {gateway.key} gateway's compose.yaml is not one that already failed its gate here",
        failed=f"{where}/{names.failed(names.COMPOSE_FILE)}",
        sha=compose_sha,
        retry=gateway.gate.retry_failed,
    )
    compose_file(
        f"Ensure {where}/compose.yaml is rendered from templates/gateway-compose.yaml.j2 and accepted by compose",
        where, gateway.compose, plan.account.name)
    gateway_workers(
        name=f"Ensure the {gateway.key} gateway has exactly the workers that passed their gate",
        directory=where,
        gateway=gateway.slug,
        url=gateway.gate.url,
        workers=gateway.workers,
        key_file=plan.paths.control_plane_config,
    )
    # restarted when it does not run its current compose.yaml, and gated, as one program on the host; a running
    # gateway another gateway host also fronts does so in its model's turn
    validated(
        name=f"Ensure the {gateway.key} gateway runs its current compose.yaml and passed test_tool_calling.sh and "
             "benchmark.sh (rolled back if not; restarted in its model's turn, and not when nothing changed)",
        home=plan.paths.home,
        image=front_door.image,
        gate=f"{where}/{names.GATE_SCRIPT}",
        files=gateway.gate.files,
        always=gateway.gate.always,
        gateway=gateway.slug,
        project_dir=where,
        compose_sha=compose_sha,
        recreate_if=lambda: secrets.did_change() or control.did_change(),
        sole_front=gateway.sole_front,
        turn=GatewayTurn(model=gateway.key, slug=gateway.slug, directory=where, url=gateway.gate.url,
                         key_file=plan.paths.control_plane_config,
                         ready_within=front_door.settings.worker_startup_timeout),
    )
