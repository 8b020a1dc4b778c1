"""The runbook's validation scripts on the host, and the gate that runs them
after every change: wait until the server can serve, check tool calling and
throughput, roll back to the last known-good config on failure.

    --data sglang_validate=always    runs the gate without a change
"""

import hashlib

from pyinfra import host
from pyinfra.operations import apt

from sglang_infra import ACCOUNT, factcache, render, toolchain
from sglang_infra.facts import HostState
from sglang_infra.operations import checked_file, validated

home = host.data.sglang_home

if not factcache.get_any(host, HostState)["python3"]:
    apt.packages(
        name="Ensure python3 is installed (the validation scripts need nothing else)",
        packages=["python3"],
        update=True,
        cache_time=host.data.sglang_apt_cache_time,
    )

scripts = render.scripts(host.data.dict())
for script, text in scripts.items():
    checked_file(
        name=f"Ensure {home}/{script} is up to date",
        dest=f"{home}/{script}",
        content=text,
        user=ACCOUNT,
        group=ACCOUNT,
        mode="755",
    )

validated(
    name="Ensure the running config passed test_tool_calling.sh and benchmark.sh (rolled back if not)",
    project_dir=f"{home}/docker",
    image=toolchain.serving_image(host.data.dict()),
    gate=f"{home}/gate.sh",
    tool_sha=hashlib.sha256(scripts["test_tool_calling.sh"].encode()).hexdigest(),
    bench_sha=hashlib.sha256(scripts["benchmark.sh"].encode()).hexdigest(),
    always=host.data.sglang_validate == "always",
)
