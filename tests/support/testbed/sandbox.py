"""The local sandbox host behind scripts/sandbox.sh and inventory.py's default.

    python -m testbed.sandbox up        start it unless it is already running
    python -m testbed.sandbox --fresh   replace it with a new, bare host
    python -m testbed.sandbox --down    remove it and everything it started: the stand-in Hub's
                                        container, the stand-in wheel index's process, and the test
                                        network when the sandbox created it and nothing else uses it

Its address and keys go to .sandbox/hosts.json, which inventory.py reads when
no hosts are configured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from testbed import hosts
from testbed import hub as standin_hub

NAME = "sglang-sandbox"
WHEEL_PORT = 18650
STATE_DIR = Path(__file__).resolve().parents[3] / ".sandbox"
STATE_FILE = STATE_DIR / "hosts.json"
WHEEL_DIR = STATE_DIR / "wheels"
# Written when the sandbox created the test network: --down then removes it too (test runs share an existing one).
NETWORK_MARK = STATE_DIR / "network-created"
# Seconds the wheel index gets to exit on SIGTERM before it is killed.
STOP_TIMEOUT = 10


def _running() -> bool:
    proc = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", NAME], capture_output=True, text=True)
    return proc.stdout.strip() == "true"


def _wheel_index() -> str:
    """The STAND-IN wheel index the sandbox's toolchain image is built with (flashinfer's three packages at
    the default pins; nvcc comes from PyPI for real): pypiserver on the test network's gateway, started once
    and left running for later runs until --down."""
    import runpy
    import urllib.request

    from wheelindex import WheelIndex

    defaults = runpy.run_path(str(STATE_DIR.parent / "group_data" / "all.py"))
    version, flavor = defaults["sglang_flashinfer_version"], defaults["sglang_cuda_flavor"]
    index = WheelIndex(WHEEL_DIR, host=hosts.network_gateway(), port=WHEEL_PORT)
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
PROFILE_KEYS = ("sglang_require_gpu", "sglang_image", "sglang_version", "sglang_image_archive", "sglang_models",
                "sglang_hf_endpoint",
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
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    if not hosts.network_ids():
        hosts.ensure_network()
        NETWORK_MARK.write_text(hosts.NETWORK + "\n")
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


def wheel_index_pids() -> list[int]:
    """The processes of this checkout's stand-in wheel index: pypiserver serving WHEEL_DIR (WheelIndex.start)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue   # gone meanwhile, or not ours to read
        if "pypiserver" in argv and argv[-2:] == [str(WHEEL_DIR), ""]:
            pids.append(int(entry.name))
    return pids


def _gone(pid: int) -> bool:
    """No such process, or only its exit status is left (a zombie its parent has not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def _stop(pid: int) -> None:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT seconds; a process already gone is done."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        for _ in range(STOP_TIMEOUT * 10):
            if _gone(pid):
                return
            time.sleep(0.1)


def down() -> None:
    """Remove the host, the stand-in Hub's container, the stand-in wheel index and (when the sandbox made it and
    nothing is attached) the test network: nothing the sandbox started is left running."""
    hosts.remove_host(NAME)
    subprocess.run(["docker", "rm", "-f", "-v", hosts.container_name(standin_hub.NAME)], capture_output=True,
                   timeout=120)
    for pid in wheel_index_pids():
        _stop(pid)
    if NETWORK_MARK.exists():
        removed = subprocess.run(["docker", "network", "rm", hosts.NETWORK], capture_output=True, text=True,
                                 timeout=120)
        if removed.returncode != 0 and hosts.network_ids():
            print(f"sandbox: kept the network {hosts.NETWORK}, still in use: {removed.stderr.strip()}",
                  file=sys.stderr)
        else:
            NETWORK_MARK.unlink()
    STATE_FILE.unlink(missing_ok=True)
    print(f"sandbox: removed {NAME}, the stand-in Hub and the stand-in wheel index", file=sys.stderr)


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
