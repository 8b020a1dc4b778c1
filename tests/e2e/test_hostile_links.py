"""Links planted where root writes or reads, on a real converged host: the account's (or a group member's)
link at compose.yaml.previous is refused and named, its target untouched; links in hf-cache to / and /etc steer
neither the snapshot nor the prune plan, and the snapshot reads nothing through them."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from harness import run_deploy, run_dry
from sglang_infra import ship

HOST = "sg-links"
HUB = "/opt/sglang/hf-cache/hub"
COMPOSE = "/opt/sglang/docker/compose.yaml"
VICTIM = "/etc/sglang-victim"
MARKER = "ROOT-ONLY-MARKER-4711"
EVIL = f"{HUB}/models--evil--x"
REV = "e" * 40
VICTIM_STATE = f"stat -c '%U %G %a' {VICTIM} && cat {VICTIM}"


@pytest.fixture(scope="module")
def converged(testbed, workdir):
    host = testbed.host(HOST, login="deploy")
    # The gate's benchmark is not what this module tests: on a shared, loaded machine the stand-in may run well
    # below its baseline, so the fraction it must reach is low here.
    inventory = testbed.inventory(workdir / "links.py", {"production": [(host, {
        "sglang_benchmark_min_fraction": 0.05})]})
    first = run_deploy(inventory)
    assert first.returncode == 0, first.output[-3000:]
    host.exec(f"echo {MARKER} > {VICTIM} && chmod 600 {VICTIM}")
    return host, inventory


def test_a_link_at_compose_previous_is_refused_named_and_its_target_untouched(converged):
    host, inventory = converged
    before = host.exec(VICTIM_STATE).stdout
    host.exec(f"ln -s {VICTIM} {COMPOSE}.previous && chown -h sglang:sglang {COMPOSE}.previous && "
              f"sed -i 's/--mem-fraction-static=0.85/--mem-fraction-static=0.95/' {COMPOSE}")
    result = run_deploy(inventory)
    assert result.returncode != 0
    assert f"{COMPOSE}.previous is a symlink" in result.output, result.output[-3000:]
    assert host.exec(VICTIM_STATE).stdout == before
    assert "0.95" in host.exec(f"cat {COMPOSE}").stdout   # refused before anything took the name
    host.exec(f"rm {COMPOSE}.previous")
    again = run_deploy(inventory)
    assert again.returncode == 0, again.output[-3000:]
    assert "0.85" in host.exec(f"cat {COMPOSE}").stdout
    assert host.exec(f"test -f {COMPOSE}.previous && ! test -L {COMPOSE}.previous", check=False).returncode == 0


def read_snapshot(host) -> dict:
    """The snapshot program run on the host as root, as the deploy runs it (its source through stdin here)."""
    spec = {"user": "sglang", "home": "/opt/sglang", "tools_dir": "/var/lib/sglang-tools", "admins": [],
            "groups": ["docker"], "uid": None, "gid": None, "dirs": []}
    out = subprocess.run(["docker", "exec", "-i", host.container, "python3", "-", json.dumps(spec)],
                         input=ship.program("snapshot"), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_links_in_hf_cache_to_root_and_etc_are_never_followed(converged):
    host, inventory = converged
    host.exec(f"mkdir -p {EVIL}/snapshots && ln -s / {EVIL}/snapshots/{REV} && ln -s /etc {EVIL}/refs && "
              f"chown -hR sglang:sglang {EVIL}")
    try:
        started = time.monotonic()
        found = read_snapshot(host)
        assert time.monotonic() - started < 60
        assert MARKER not in json.dumps(found)
        assert found["models"]["repos"]["evil/x"]["refs"] == {}
        assert found["models"]["repos"]["evil/x"]["revisions"] == {}
        assert found["models"]["stopped_early"] is None and found["layout"]["stopped_early"] is None
        code, _, output = run_dry(inventory, "--data", "sglang_prune_models=True")
        assert code == 0, output[-3000:]
        assert f"evil/x@{REV[:12]}" not in output
    finally:
        host.exec(f"rm -rf {EVIL}")
