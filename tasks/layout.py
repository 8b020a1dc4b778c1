"""The runbook's layout under the account's home, and its repair when drifted.

home/            sglang:sglang 0750  model weights and config are not for every local user
  docker/        sglang:sglang 0755  not group-writable: edits go through sudo -u sglang
  hf-cache/      sglang:sglang 2775  setgid + group-writable: admins pull models directly
    hub/         sglang:sglang 2775
"""

from pyinfra import host
from pyinfra.operations import files

from sglang_infra import ACCOUNT
from sglang_infra.operations import repair_tree

home = host.data.sglang_home

for path, mode, purpose in (
    (home, "750", "the account's home"),
    (f"{home}/docker", "755", "docker/, not group-writable"),
    (f"{home}/hf-cache", "2775", "hf-cache/, setgid and group-writable"),
    (f"{home}/hf-cache/hub", "2775", "hf-cache/hub, setgid and group-writable"),
):
    files.directory(
        name=f"Ensure {purpose} ({path}) is {ACCOUNT}:{ACCOUNT} {mode}",
        path=path,
        user=ACCOUNT,
        group=ACCOUNT,
        mode=mode,
    )

repair_tree(
    name=f"Ensure nothing under {home} has drifted (hf-cache group/setgid, ownership, world/group write)",
    home=home,
    user=ACCOUNT,
    group=ACCOUNT,
)
