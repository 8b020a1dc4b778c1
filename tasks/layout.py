"""The runbook's layout under the account's home, and its repair when drifted.

home/            sglang:sglang 0750  model weights and config are not for every local user
  docker/        sglang:sglang 0755  not group-writable: edits go through sudo -u sglang
  hf-cache/      sglang:sglang 2775  setgid + group-writable: admins pull models directly
    hub/         sglang:sglang 2775
  results/       sglang:sglang 2775  benchmark results, written by the gate and by admins running benchmark.sh
  verified/      sglang:sglang 0755  not group-writable, outside hf-cache: the pull's records of verified revisions
  docker/toolchain/ sglang:sglang 0755  the toolchain image's build context (with sglang_toolchain_image)

The snapshot reads the directories and lists only the drifted entries below
them; only those are fixed. The modes live in sglang_infra/plan/resolve.py (LAYOUT).
"""

from pyinfra import host

from sglang_infra.operations.account import layout
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
home = plan.paths.home

layout(
    name=f"Ensure {home}/{{docker,hf-cache/hub,verified}} have the runbook's owners and modes, and nothing below "
         "has drifted",
    home=home,
    dirs=plan.layout,
    user=plan.account.name,
    group=plan.account.name,
)
