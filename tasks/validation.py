"""The runbook's validation scripts on the host, and the gate that runs them
after every change: wait until the server can serve, check tool calling and
throughput, roll back to the last known-good config on failure.

    --data sglang_validate=always    runs the gate without a change
"""

from pyinfra import host

from sglang_infra.hostside import names
from sglang_infra.operations.gate import validated
from sglang_infra.preflight import plan_of
from sglang_infra.taskhelpers import scripts_in_place

plan = plan_of(host)
home = plan.paths.home

scripts_in_place(home, plan.scripts, plan.account)

written = {f"{home}/{script}": text for script, text in plan.scripts.items()}
written[f"{plan.paths.docker}/{names.COMPOSE_FILE}"] = plan.compose
validated(
    name="Ensure the running config passed test_tool_calling.sh and benchmark.sh (rolled back if not)",
    home=home,
    image=plan.serving_image,
    gate=f"{home}/{names.GATE_SCRIPT}",
    files={path: names.text_digest(text) for path, text in written.items()},
    always=plan.gate.always,
)
