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
WHEEL_PORT = 18650
STATE_DIR = Path(__file__).resolve().parents[3] / ".sandbox"
STATE_FILE = STATE_DIR / "hosts.json"


def _running() -> bool:
    proc = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", NAME], capture_output=True, text=True)
    return proc.stdout.strip() == "true"


def _wheel_index() -> str:
    """The STAND-IN wheel index the sandbox's toolchain image is built with (flashinfer's three packages at
    the default pins; nvcc comes from PyPI for real): pypiserver on the test network's gateway, started once
    and left running for later runs."""
    import runpy
    import urllib.request

    from wheelindex import WheelIndex

    defaults = runpy.run_path(str(STATE_DIR.parent / "group_data" / "all.py"))
    version, flavor = defaults["sglang_flashinfer_version"], defaults["sglang_cuda_flavor"]
    index = WheelIndex(STATE_DIR / "wheels", host=hosts.network_gateway(), port=WHEEL_PORT)
    try:
        with urllib.request.urlopen(index.url + "flashinfer-jit-cache/", timeout=3) as response:
            if f"{version}+{flavor}" in response.read().decode():
                return index.url
    except OSError:
        pass
    index.serve({"flashinfer-python": version, "flashinfer-cubin": version,
                 "flashinfer-jit-cache": f"{version}+{flavor}"})
    index.start()
    print(f"sandbox: stand-in wheel index at {index.url} (log: {index.log_path})", file=sys.stderr)
    return index.url


# The only keys the sandbox sets over group_data: what the stand-ins need (docs/stand-ins.md). Everything
# else comes from group_data, so an edit there shows on the next run.
PROFILE_KEYS = ("sglang_require_gpu", "sglang_image", "sglang_image_archive", "sglang_models", "sglang_hf_endpoint",
                "sglang_flashinfer_index_url", "sglang_extra_ca_bundle", "sglang_trusted_network")


def _profile() -> dict:
    """The stand-in profile: no GPU, the stand-in server's image, the stand-in Hub's registry and endpoint, the
    stand-in wheel index and this machine's CA for the toolchain image (which stays on, as in group_data)."""
    ca = hosts.DEFAULT_CA_BUNDLE
    # The sandbox serves without an API key on this machine's own Docker network: trusted, said so, as the deploy
    # refuses a keyless worker off loopback otherwise (docs/security.md).
    profile = {**hosts.standin_data(), "sglang_flashinfer_index_url": _wheel_index(),
               "sglang_extra_ca_bundle": ca if Path(ca).is_file() else None, "sglang_trusted_network": True}
    return {key: profile[key] for key in PROFILE_KEYS}


def up(fresh: bool = False) -> None:
    if not fresh and _running() and STATE_FILE.exists():
        entry = json.loads(STATE_FILE.read_text())[0]
        # The stand-in profile is refreshed every time: it also (re)starts the stand-in Hub the host pulls from.
        entry["data"] = _profile()
        STATE_FILE.write_text(json.dumps([entry], indent=2) + "\n")
        print(f"sandbox: {NAME} is running ({entry['address']})", file=sys.stderr)
        return
    print(f"sandbox: starting {NAME}", file=sys.stderr)
    host = hosts.start_host(NAME, STATE_DIR)
    # The sandbox has no GPU: it serves with the STAND-IN server image, loaded from its archive.
    STATE_FILE.write_text(json.dumps([{**host.to_json(), "data": _profile()}], indent=2) + "\n")
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
