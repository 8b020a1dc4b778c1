"""Opt-in (sglang_prune_models): remove the cached revisions this host
neither serves nor keeps. Runs last, once the gate has passed, and keeps
whatever a compose file on the host still references (the running config
and the known-good one a rollback would return to).

    pyinfra inventory.py deploy.py --dry --data sglang_prune_models=True
lists what would go.
"""

from pyinfra import host

from sglang_infra.operations.models import models_pruned
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)

if plan.pull.prune:
    models_pruned(
        name="Ensure hf-cache/hub holds only the revisions this host serves, keeps or references",
        hub=plan.paths.hub,
        verified=plan.paths.verified,
        keep=plan.keep,
        tools_dir=plan.paths.tools,
        _sudo=True,
        _sudo_user=plan.account.name,
    )
