"""The runbook's layout under the account's home, and its repair when drifted.

home/            sglang:sglang 0750  model weights and config are not for every local user
  docker/        sglang:sglang 0755  not group-writable: edits go through sudo -u sglang
  hf-cache/      sglang:sglang 2775  setgid + group-writable: admins pull models directly
    hub/         sglang:sglang 2775
  results/       sglang:sglang 2775  benchmark results, written by the gate and by admins running benchmark.sh
  docker/toolchain/ sglang:sglang 0755  the toolchain image's build context (with sglang_toolchain_image)

One fact reads the four directories and lists only the drifted entries below
them; only those are fixed.
"""

from pyinfra import host

from sglang_infra import ACCOUNT
from sglang_infra.operations import layout

home = host.data.sglang_home

layout(
    name=f"Ensure {home}/{{docker,hf-cache/hub}} have the runbook's owners and modes, and nothing below has drifted",
    home=home,
    dirs={home: "750", f"{home}/docker": "755", f"{home}/hf-cache": "2775", f"{home}/hf-cache/hub": "2775",
          f"{home}/results": "2775",
          # The toolchain image's build context, beside docker/Dockerfile (tasks/image.py).
          **({f"{home}/docker/toolchain": "755"} if host.data.sglang_toolchain_image else {})},
    user=ACCOUNT,
    group=ACCOUNT,
)
