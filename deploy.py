"""Turn a server into an SGLang serving host, and keep it that way.

    pyinfra inventory.py deploy.py

The order follows the runbook's first-time setup. Nothing runs on any host
until every host's data has been judged and resolved into its plan, against
one read of each host (sglang_infra/run/preflight.py).
"""

from pyinfra import host, inventory, local, state

from sglang_infra.machine.pycache import keep_bytecode

keep_bytecode()               # our modules' bytecode kept in the operator's own cache (pyinfra turns writing it off)

from sglang_infra.run import factcache, failedhosts, interrupt, settled  # noqa: E402 (after keep_bytecode)
from sglang_infra.run import workarounds as compat  # noqa: E402 (after keep_bytecode)
from sglang_infra.run.preflight import plan_of, plans, preflight, snapshots  # noqa: E402 (after keep_bytecode)

compat.install()              # a host lost mid-run fails alone (pyinfra#1220)
compat.no_delay(inventory)    # each host's SSH connection sends at once (Nagle's wait: up to 40 ms a command)
interrupt.install()           # Ctrl-C or SIGTERM ends the run at once, non-zero, naming the hosts whose gate was going
compat.install_fast_call_locations()  # operation call sites without reading source lines
compat.exit_without_collecting()  # the process ends without a last collection over every object
failedhosts.install(state)    # the run ends by naming every failed host
factcache.install()           # the snapshot is read once per host until a command changes it
settled.install(state)        # a host that changed nothing is stamped at the end of the run
# every host held for this run (one run at a time, run/hold.py), then its plan; bad data on any host refuses the run
# (a status report skips that host)
ready = preflight(host, inventory)
if ready and settled.unchanged(host, plans(host.state), snapshots(host.state)):  # 0. as its last run left it
    local.include("tasks/settled.py")
elif ready:
    plan = plan_of(host)
    serves = plan.serves  # a host only in the `router` or `monitor` group serves no model
    if serves or plan.runs_gateways:  # a host only in `monitor` runs Prometheus alone: no account, no Docker
        local.include("tasks/account.py")        # 1. the sglang system account
        local.include("tasks/layout.py")         # 2. /opt/sglang/{docker,hf-cache/hub,verified}
        local.include("tasks/docker_engine.py")  # 3. Docker engine with compose v2
    local.include("tasks/node_exporter.py")      # 3b. every host: the node exporter, ready for the gate's metrics
    if serves:
        local.include("tasks/gpu_driver.py")     # 4a. opt-in: pinned driver and reboot, Fabric Manager, persistenced
        local.include("tasks/gpu_runtime.py")    # 4. Docker's NVIDIA runtime on GPU hosts
        local.include("tasks/peer_door.py")      # 5. the peer door, up and checked before any pull asks it (or none)
        local.include("tasks/models.py")         # 5b. vetted models at pinned revisions in hf-cache/hub
        local.include("tasks/models_from_peers.py")  # 5c. the door lists them; models from the peers' doors
        local.include("tasks/image.py")          # 6. the pinned serving image
        local.include("tasks/stack.py")          # 7. docker/.env, docker/compose.yaml, the running stack and its gate
    local.include("tasks/gateways.py")      # 8. gateway hosts: a gateway per model, in front of the workers that passed
    if not serves:
        local.include("tasks/peer_door.py")      # 8b. a host that serves no model keeps no peer door
    if serves:
        local.include("tasks/model_pruning.py")  # 9. opt-in: cached revisions nothing keeps or references
    if plan.monitors:
        local.include("tasks/monitor.py")        # 10. monitor hosts: Prometheus over the inventory, rules, dashboard
