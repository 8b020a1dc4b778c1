"""The test set-up (and the sandbox, which shares it) recovers from leftovers of its own: a stand-in Hub that
comes back after dockerd restarts, with its mounted spec removed by a cleaner in the meantime."""

from __future__ import annotations

import json
import shutil
import subprocess

from testbed import hosts
from testbed import hub as standin_hub


def mounted_spec_dir(name: str) -> str:
    mounts = json.loads(subprocess.run(["docker", "inspect", "-f", "{{json .Mounts}}", name], capture_output=True,
                                       text=True, check=True).stdout)
    return next(m["Source"] for m in mounts if m["Destination"] == "/opt/hfstandin-spec")


def test_the_hub_recovers_when_its_mounted_spec_was_cleaned_away():
    name = hosts.container_name("leftover-hfhub")
    try:
        first = standin_hub.ensure_hub(name)
        # What systemd-tmpfiles does to /var/tmp after 30 days, then the container comes back (as when dockerd
        # restarts it): Docker makes the missing mount source an empty directory.
        shutil.rmtree(mounted_spec_dir(name))
        subprocess.run(["docker", "restart", name], capture_output=True, timeout=120)
        again = standin_hub.ensure_hub(name)
        assert again.name == first.name
        assert isinstance(again.requests(), list)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=120)
