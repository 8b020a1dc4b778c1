"""Migration by a re-run (issue #32): a fleet converged by the project as it was before SMG (the sglang-router 0.3.2
gateway from the SGLang image, checked out from git at MIGRATE_FROM) moves to SMG 1.13.0 by one ordinary run of this
checkout: the gateway's container is replaced in place (same directory, same compose project), its workers are
registered again from workers.json, nothing of the old gateway is left behind, the run says that clients see the
restart (one gateway host fronts the model), and a second run changes nothing. One worker and one gateway host."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import urllib.error
import urllib.request

import pytest

import harness
from harness import PROJECT_DIR, PYINFRA, DeployResult, parse_output, run_deploy, write_inventory
from testbed.hosts import ADMIN_KEY

W1, GW = "sg-mig-w1", "sg-mig-gw"
GATEWAY_DIR = "/opt/sglang/router/qwen3-6-35b-a3b-awq"
PORT = 30080
# The project before SMG: the commit this change was made on (override with TEST_MIGRATE_FROM=<commit>).
MIGRATE_FROM = os.environ.get("TEST_MIGRATE_FROM", "620d8e258fab021bc6fbd028e5c0f916d16bc638")
NEW_KEYS = ("sglang_router_image", "sglang_router_image_archive", "sglang_router_admin_key_file")


def checkout(ref: str, into) -> str:
    """``ref``'s tree in ``into`` (git archive: the repository's worktrees and refs are left alone)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into.parent / "before.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), ref], cwd=PROJECT_DIR, check=True,
                   timeout=120)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return str(into)


def run_old_deploy(tree: str, inventory) -> DeployResult:
    env = dict(os.environ, PYINFRA_YES="1", PYTHONPATH=tree)
    proc = subprocess.run([*PYINFRA, "-y", str(inventory), "deploy.py"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=harness.DEPLOY_TIMEOUT)
    output = proc.stdout + proc.stderr
    return DeployResult(proc.returncode, output, parse_output(output))


def listed(address: str, key: str | None) -> dict[str, bool] | int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(f"http://{address}:{PORT}/workers", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return {w["url"]: w["is_healthy"] for w in json.loads(reply.read())["workers"]}
    except urllib.error.HTTPError as error:
        return error.code


def gateway_files(host) -> list[str]:
    return sorted(host.exec("cd /opt/sglang/router && find . -mindepth 1 | sort").stdout.split())


def containers(host) -> list[str]:
    """Every container on the gateway host, running or not, with its image."""
    return sorted(line for line in host.exec("docker ps -a --format '{{.Names}} {{.Image}}'").stdout.split("\n")
                  if line.strip())


@pytest.fixture(scope="module")
def migrated(testbed, workdir):
    hosts = {name: testbed.host(name) for name in (W1, GW)}
    old_base = {k: v for k, v in testbed.standin.items() if k not in NEW_KEYS}

    def groups():
        return {"production": [(hosts[W1], {})],
                "router": [(hosts[GW], {"sglang_router_bind_address": hosts[GW].address})]}

    tree = checkout(MIGRATE_FROM, workdir / "before")
    before = run_old_deploy(tree, write_inventory(workdir / "migrate-before.py", groups(), base=old_base))
    (workdir / "migrate-before.log").write_text(before.output)
    assert before.returncode == 0, before.why(3000)
    old = {"files": gateway_files(hosts[GW]), "containers": containers(hosts[GW]),
           "listed": listed(hosts[GW].address, None)}
    inventory = testbed.inventory(workdir / "migrate-after.py", groups())
    after = run_deploy(inventory)
    (workdir / "migrate-after.log").write_text(after.output)
    return hosts, inventory, old, after


def test_before_the_move_the_gateway_is_sglang_router_from_the_sglang_image(migrated, testbed):
    hosts, _, old, _ = migrated
    worker = f"http://{hosts[W1].address}:30000"
    assert old["listed"] == {worker: True}   # the old gateway's worker API, open on this trusted test network
    assert any(line.endswith(" " + testbed.standin["sglang_image"]) and "router" in line
               for line in old["containers"]), old["containers"]


def test_one_run_moves_the_gateway_to_smg_and_reregisters_its_workers(migrated, testbed):
    hosts, _, _, after = migrated
    assert after.returncode == 0, after.why(3000)
    worker = f"http://{hosts[W1].address}:30000"
    assert harness.wait_for(lambda: listed(hosts[GW].address, ADMIN_KEY) == {worker: True}, 60), \
        listed(hosts[GW].address, ADMIN_KEY)
    assert listed(hosts[GW].address, None) == 401   # the worker API is keyed now
    image = hosts[GW].exec(f"cd {GATEWAY_DIR} && docker inspect -f '{{{{.Config.Image}}}}' "
                           "$(docker compose ps -q)").stdout.strip()
    assert image == testbed.standin["sglang_router_image"]
    assert "the gateway qwen3-6-35b-a3b-awq restarts" in after.output
    assert "no other gateway host fronts its model: its clients see errors until it is back" in after.output


def test_nothing_of_the_old_gateway_is_left_behind(migrated):
    hosts, _, old, _ = migrated
    now = containers(hosts[GW])
    assert len(now) == len(old["containers"]) == 1, (old["containers"], now)   # replaced, not added
    added = set(gateway_files(hosts[GW])) - set(old["files"])
    # The gate's last good copies (*.previous, what a failed gate rolls back to: here the sglang-router gateway's
    # config), as after any change of a gateway's files, and the control-plane key; nothing else.
    assert {path for path in added if not path.endswith(".previous")} == {"./.secrets",
                                                                          "./.secrets/control-plane.yaml"}
    assert set(old["files"]) <= set(gateway_files(hosts[GW]))   # the same files, rewritten in place
    assert hosts[GW].exec("stat -c '%a %U' /opt/sglang/router/.secrets /opt/sglang/router/.secrets/control-plane.yaml"
                          ).stdout.split() == ["700", "sglang", "600", "sglang"]


def test_a_second_run_changes_nothing(migrated):
    hosts, inventory, _, _ = migrated
    again = run_deploy(inventory)
    assert again.returncode == 0, again.why(3000)
    assert {name: again.changed(name) for name in (W1, GW)} == {W1: [], GW: []}
    assert "restarts" not in again.output
