"""Opt-in (sglang_prune_models): remove the cached revisions this host
neither serves nor keeps. Runs last, once the gate has passed, and keeps
whatever a compose file on the host still references (the running config
and the known-good one a rollback would return to).

    pyinfra inventory.py deploy.py --dry --data sglang_prune_models=True
lists what would go.
"""

from pyinfra import host

from sglang_infra import ACCOUNT, models
from sglang_infra.operations import models_pruned

data = host.data.dict()

if data["sglang_prune_models"]:
    models_pruned(
        name="Ensure hf-cache/hub holds only the revisions this host serves, keeps or references",
        hub=f"{data['sglang_home']}/hf-cache/hub",
        docker_dir=f"{data['sglang_home']}/docker",
        keep=[model.pinned for model in models.kept(data)],
        tools_dir=data["sglang_tools_dir"],
        _sudo=True,
        _sudo_user=ACCOUNT,
    )
