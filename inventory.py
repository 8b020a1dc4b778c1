"""The operator's hosts, in groups.

Add your servers to the groups below. Each entry is a hostname, or a
(hostname, data) pair whose data overrides group_data for that host only:

    production = [
        ("gpu-01.example.net", {"ssh_user": "deploy", "_sudo": True}),
        "gpu-02.example.net",
    ]

Groups:
- production: serves the runbook's production model (group_data/production.py)
- quality:    serves the quality-comparison model (group_data/quality.py)
- router:     the fleet's front door: one Shepherd Model Gateway (SMG) per model,
              in front of the hosts above that passed their gate (docs/front-door.md);
              a host only here serves no model; it needs sglang_router_image and
              sglang_router_admin_key_file

With both groups empty, the inventory targets the local sandbox host that
`scripts/sandbox.sh` starts (see README.md; real servers: docs/real-servers.md).
SSH host keys are checked against ~/.ssh/known_hosts, as OpenSSH does; pyinfra
refuses unknown hosts.
"""

import json
import os
from pathlib import Path

production = []

quality = []

router = []


def _sandbox_hosts():
    """The sandbox host written by scripts/sandbox.sh, or nothing."""
    default = Path(__file__).resolve().parent / ".sandbox" / "hosts.json"
    state_file = Path(os.environ.get("SGLANG_SANDBOX_STATE", default))
    if not state_file.is_file():
        raise SystemExit(
            f"inventory.py: no hosts in production or quality, and no sandbox at {state_file}. "
            "Add your servers to inventory.py, or start the sandbox with scripts/sandbox.sh."
        )
    hosts = json.loads(state_file.read_text())
    return [
        (
            entry["name"],
            {
                "ssh_hostname": entry["address"],
                "ssh_user": "root",
                "ssh_key": entry["ssh_key"],
                "ssh_known_hosts_file": entry["known_hosts"],
                "ssh_strict_host_key_checking": "yes",
                # The sandbox has no GPU: it runs the stand-in profile (see docs/stand-ins.md).
                **entry.get("data", {}),
            },
        )
        for entry in hosts
    ]


if not production and not quality:
    production = _sandbox_hosts()

