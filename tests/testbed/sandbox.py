"""The local sandbox host behind scripts/sandbox.sh and inventory.py's default.

    python -m testbed.sandbox up        start it unless it is already running
    python -m testbed.sandbox --fresh   replace it with a new, bare host
    python -m testbed.sandbox --down    remove it

Its address and keys go to .sandbox/hosts.json, which inventory.py reads when
no hosts are configured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from testbed import hosts

NAME = "sglang-sandbox"
STATE_DIR = Path(__file__).resolve().parents[2] / ".sandbox"
STATE_FILE = STATE_DIR / "hosts.json"


def _running() -> bool:
    proc = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", NAME], capture_output=True, text=True)
    return proc.stdout.strip() == "true"


def up(fresh: bool = False) -> None:
    if not fresh and _running() and STATE_FILE.exists():
        entry = json.loads(STATE_FILE.read_text())[0]
        # The stand-in profile is refreshed every time: it also (re)starts the stand-in Hub the host pulls from.
        entry["data"] = hosts.standin_data()
        STATE_FILE.write_text(json.dumps([entry], indent=2) + "\n")
        print(f"sandbox: {NAME} is running ({entry['address']})", file=sys.stderr)
        return
    print(f"sandbox: starting {NAME}", file=sys.stderr)
    host = hosts.start_host(NAME, STATE_DIR)
    # The sandbox has no GPU: it serves with the STAND-IN server image, loaded from its archive.
    STATE_FILE.write_text(json.dumps([{**host.to_json(), "data": hosts.standin_data()}], indent=2) + "\n")
    print(f"sandbox: {NAME} answers SSH at {host.address}", file=sys.stderr)


def down() -> None:
    hosts.remove_host(NAME)
    STATE_FILE.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    action = argv[0] if argv else "up"
    if action == "up":
        up()
    elif action == "--fresh":
        up(fresh=True)
    elif action == "--down":
        down()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
