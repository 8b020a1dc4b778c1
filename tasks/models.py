"""The vetted models in hf-cache/hub, at their pinned revisions, before any
compose file can point at them.

The pull runs on the host as the sglang account, with huggingface_hub from a
venv under sglang_tools_dir (never under the home), through
sglang_infra/hostside/pull/hfpull.py: resumable, verified against the Hub's sizes
and hashes (and, with a lock, the lock's sha256 of every file), a snapshot
marked complete only when every file is. A revision that is already complete
costs no request to the Hub. With peer distribution on (sglang_peer_key_file),
a model pulled as a swarm (sglang_infra/fleet/peering.py) is pulled here in part:
each host its share of the lock's files, the Hub's bytes for the site, the
rest in tasks/models_from_peers.py from the peers' doors; without a swarm,
the seed of each model pulls here and the fleet's other hosts pull in
tasks/models_from_peers.py, from the seeds' doors.
"""

from pyinfra import host, logger
from pyinfra.operations import apt

from sglang_infra.fleet.peering import after_seeds, in_swarm, pull_arguments
from sglang_infra.machine import ship
from sglang_infra.operations.files import secret_file
from sglang_infra.operations.models import model_pulled, pull_tools
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
tools, token = plan.paths.tools, plan.paths.token

for warning in plan.warnings:
    logger.warning(f"[{host.name}] {warning}")

if not plan.pull.venv_module:
    apt.packages(
        name="Ensure python3-venv is installed (the pull's environment is a venv)",
        packages=["python3-venv"],
        update=True,
        cache_time=plan.engine.apt_cache_time,
    )

pull_tools(
    name=f"Ensure {tools}/venv has huggingface_hub {plan.pull.hub_version} and the pull script",
    tools_dir=tools,
    hub_version=plan.pull.hub_version,
    script=ship.installed("pull.hfpull"),
    group=plan.account.name,
    index_url=plan.pull.index_url,
)

secret_file(
    name=f"Ensure {token} matches the control machine's Hub token (0600, {plan.account.name} only)",
    dest=token,
    content=plan.pull.token,
    user=plan.account.name,
)

secret_file(
    name=f"Ensure {plan.paths.peer_key} holds the site's peer key (0600, {plan.account.name} only), or is absent",
    dest=plan.paths.peer_key,
    content=plan.peer_door.key if plan.peer_door is not None and plan.peer_sources else None,
    user=plan.account.name,
)

# A model some peer may serve this host later (peering.py) is pulled after the seeds' doors list it:
# tasks/models_from_peers.py; in a swarm, this host's share of it here (round 1), the rest there (round 2).
for model in plan.kept:
    if in_swarm(plan, model):
        model_pulled(**pull_arguments(plan, model, first_round=True))
    elif not after_seeds(plan, model):
        model_pulled(**pull_arguments(plan, model))
