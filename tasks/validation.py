"""The runbook's validation scripts on the host, and the gate that runs them
after every change: wait until the server can serve, check tool calling and
throughput, roll back to the last known-good config on failure.

    --data sglang_validate=always    runs the gate without a change
"""

from pyinfra import host

from sglang_infra.hostside import names
from sglang_infra.hostside.gate import CHECKS_BUDGET as GATE_CHECKS_SECONDS
from sglang_infra.operations.gate import validated
from sglang_infra.operations.roll import rolled
from sglang_infra.preflight import plan_of
from sglang_infra.taskhelpers import scripts_in_place, secrets_change

plan = plan_of(host)
home = plan.paths.home

scripts_in_place(home, plan.scripts, plan.account)

written = {f"{home}/{script}": text for script, text in plan.scripts.items()}
written[f"{plan.paths.docker}/{names.COMPOSE_FILE}"] = plan.compose
files = {path: names.text_digest(text) for path, text in written.items()}
if plan.roll is not None:
    rolled(
        name=f"Ensure the stack runs the current compose.yaml and passed its gate, restarted in its turn in "
             f"{plan.roll.pool}, out of its gateways and drained (no restart when nothing changed)",
        project_dir=plan.paths.docker,
        image=plan.serving_image,
        model=plan.served.pinned,
        compose_sha=plan.compose_sha,
        gate=f"{home}/{names.GATE_SCRIPT}",
        files=files,
        roll=plan.roll,
        metrics_url=f"{plan.gate.url}/metrics",
        key_file=plan.gate.api_key_file,
        turn_seconds=plan.gate.ready_timeout + GATE_CHECKS_SECONDS,
        always=plan.gate.always,
        recreate_if=secrets_change(host),
    )
else:
    validated(
        name="Ensure the running config passed test_tool_calling.sh and benchmark.sh (rolled back if not)",
        home=home,
        image=plan.serving_image,
        gate=f"{home}/{names.GATE_SCRIPT}",
        files=files,
        always=plan.gate.always,
    )
