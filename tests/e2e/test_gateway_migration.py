"""Migration by a re-run (issue #32): a fleet converged by the project as it was before SMG (the sglang-router 0.3.2
gateway from the SGLang image, checked out from git at MIGRATE_FROM) moves to SMG 1.13.0 by one ordinary run of this
checkout: the gateway's container is replaced in place (same directory, same compose project), its workers are
registered again from workers.json, nothing of the old gateway is left behind, the run says that clients see the
restart (one gateway host fronts the model), and a second run changes nothing. Two workers and one gateway host, keys
on every host (sglang_api_key_file, the secure default): the move also changes the workers' config, and the run
reads the old gateway's workers with the API key it had (sglang-router's worker API takes no control-plane key) and
so restarts them one at a time, drained, not all at once as workers out of service (issue 40). Then a second gateway
host for the same model, and a gateway flag change that recreates both under load through a client that alternates
between them and retries on the other on a connection error (as a site balancer does): the run restarts them one at
a time and no request fails."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.request

import pytest

import harness
from harness import PROJECT_DIR, PYINFRA, DeployResult, parse_output, run_deploy, write_inventory
from rolling_load import listed_models, most_out_at_once, roll_lines
from testbed.hosts import ADMIN_KEY

W1, W2, GW, GW2 = "sg-mig-w1", "sg-mig-w2", "sg-mig-gw", "sg-mig-gw2"
WORKERS = (W1, W2)
KEY = "migration-clients-key-0123456789abcdef"   # sglang_api_key_file of every host
GATEWAY_DIR = "/opt/sglang/router/qwen3-6-35b-a3b-awq"
PORT = 30080
# The project before SMG: the commit this change was made on (override with TEST_MIGRATE_FROM=<commit>).
MIGRATE_FROM = os.environ.get("TEST_MIGRATE_FROM", "620d8e258fab021bc6fbd028e5c0f916d16bc638")
# Keys of the stand-in profile that the old tree does not know (sglang_version: the stand-in's SGLang release).
NEW_KEYS = ("sglang_router_image", "sglang_router_image_archive", "sglang_router_admin_key_file", "sglang_version")


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


def listed(address: str, key: str | None, models: bool = False) -> dict[str, bool] | int:
    """{worker URL: healthy} as the gateway lists them (``models``: healthy and with a model, SMG's listing), or the
    HTTP status of a refusal."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(f"http://{address}:{PORT}/workers", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return {w["url"]: w["is_healthy"] and (not models or bool(listed_models(w)))
                    for w in json.loads(reply.read())["workers"]}
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
    hosts = {name: testbed.host(name) for name in (*WORKERS, GW)}
    old_base = {k: v for k, v in testbed.standin.items() if k not in NEW_KEYS}
    key_file = workdir / "migration-api-key"
    key_file.write_text(KEY + "\n")
    keyed = {"sglang_api_key_file": str(key_file)}

    def groups(worker=None):
        return {"production": [(hosts[name], {**keyed, **(worker or {})}) for name in WORKERS],
                "router": [(hosts[GW], {**keyed, "sglang_router_bind_address": hosts[GW].address})]}

    tree = checkout(MIGRATE_FROM, workdir / "before")
    before = run_old_deploy(tree, write_inventory(workdir / "migrate-before.py", groups(), base=old_base))
    (workdir / "migrate-before.log").write_text(before.output)
    assert before.returncode == 0, before.why(3000)
    old = {"files": gateway_files(hosts[GW]), "containers": containers(hosts[GW]),
           "listed": listed(hosts[GW].address, KEY), "started": {name: worker_started(hosts[name]) for name in WORKERS}}
    # the move changes the workers' config too (a mark in their environment), so the run rolls them behind the old
    # gateway before it replaces that one
    moved = {"sglang_extra_env": {**testbed.standin["sglang_extra_env"], "MOVE_MARK": "smg"}}
    inventory = testbed.inventory(workdir / "migrate-after.py", groups(moved))
    old.update(keyed=keyed, worker={**keyed, **moved})   # the data of the gateway hosts and workers from now on
    after = run_deploy(inventory)
    (workdir / "migrate-after.log").write_text(after.output)
    return hosts, inventory, old, after


def worker_started(host) -> str:
    return host.exec("cd /opt/sglang/docker && docker inspect -f '{{.Id}} {{.State.StartedAt}}' "
                     "$(docker compose ps -q)").stdout.strip()


def urls(hosts) -> list[str]:
    return [f"http://{hosts[name].address}:30000" for name in WORKERS]


def test_before_the_move_the_gateway_is_sglang_router_from_the_sglang_image(migrated, testbed):
    hosts, _, old, _ = migrated
    # the old gateway's worker API, which takes the API key (sglang-router's one key)
    assert old["listed"] == {url: True for url in urls(hosts)}
    assert any(line.endswith(" " + testbed.standin["sglang_image"]) and "router" in line
               for line in old["containers"]), old["containers"]


def test_one_run_moves_the_gateway_to_smg_and_reregisters_its_workers(migrated, testbed):
    hosts, _, _, after = migrated
    assert after.returncode == 0, after.why(3000)
    every = {url: True for url in urls(hosts)}
    assert harness.wait_for(lambda: listed(hosts[GW].address, ADMIN_KEY, models=True) == every, 60), \
        listed(hosts[GW].address, ADMIN_KEY, models=True)
    assert listed(hosts[GW].address, None) == 401   # the worker API is keyed now
    image = hosts[GW].exec(f"cd {GATEWAY_DIR} && docker inspect -f '{{{{.Config.Image}}}}' "
                           "$(docker compose ps -q)").stdout.strip()
    assert image == testbed.standin["sglang_router_image"]
    assert "the gateway qwen3-6-35b-a3b-awq restarts" in after.output
    assert "no other gateway host fronts its model: its clients see errors until it is back" in after.output


def test_the_move_restarts_the_keyed_workers_one_at_a_time(migrated):
    """The old gateway's workers, read with the API key it had, are in service: each restarts in its turn, out of
    the gateway and back, never two at once, none as out of service."""
    hosts, _, old, after = migrated
    assert after.returncode == 0, after.why(3000)
    assert all(worker_started(hosts[name]) != old["started"][name] for name in WORKERS), roll_lines(after.output)
    lines = "\n".join(roll_lines(after.output))
    assert "out of service, restarted at once" not in lines, lines
    assert sum(": taking " in line for line in roll_lines(after.output)) == len(WORKERS), lines
    assert most_out_at_once(after.output) == 1, lines


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
    assert {name: again.changed(name) for name in (*WORKERS, GW)} == {name: [] for name in (*WORKERS, GW)}
    assert "restarts" not in again.output


def complete(address: str) -> None:
    body = json.dumps({"model": "qwen3.6-35b-a3b", "messages": [{"role": "user", "content": "Say hello."}],
                       "max_tokens": 8}).encode()
    request = urllib.request.Request(f"http://{address}:{PORT}/v1/chat/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        json.loads(reply.read())


class Balancer:
    """Steady load as a site balancer sends it: each request to the next gateway in turn, and to the other one when
    that one refuses or drops the connection. An HTTP error, or both gateways down, is a failed request."""

    def __init__(self, addresses: list[str], threads: int = 3):
        self.addresses, self.stop = addresses, threading.Event()
        self.sent = 0
        self.failed: list[str] = []
        self.not_ready: list[str] = []
        self.down: dict[str, list[float]] = {a: [] for a in addresses}   # when each refused or dropped a connection
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(n,), daemon=True) for n in range(threads)]

    def run(self, n: int) -> None:
        turn = n
        while not self.stop.is_set():
            first = self.addresses[turn % 2]
            turn += 1
            for address in (first, *(a for a in self.addresses if a != first)):
                try:
                    complete(address)
                    break
                except urllib.error.HTTPError as error:
                    if error.code not in (404, 503):
                        with self.lock:
                            self.failed.append(f"{address}: HTTP {error.code}")
                        break
                    # a gateway just started answers 404/503 until its workers are registered: the balancer's
                    # next-upstream rule sends the request to the other one
                    with self.lock:
                        self.down[address].append(time.time())
                        self.not_ready.append(f"{address}: HTTP {error.code}")
                    if address != first:
                        with self.lock:
                            self.failed.append(f"both gateways down (HTTP {error.code})")
                except (OSError, http.client.HTTPException) as error:   # refused, reset, cut short
                    with self.lock:
                        self.down[address].append(time.time())
                    if address != first:
                        with self.lock:
                            self.failed.append(f"both gateways down ({error})")
                except Exception as error:   # anything else is a failed request, never a silent thread's end
                    with self.lock:
                        self.failed.append(f"{address}: {error!r}")
                    break
            with self.lock:
                self.sent += 1
            time.sleep(0.05)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(90)


def started_at(host) -> float:
    """When the gateway's container started (seconds since the epoch)."""
    out = host.exec(f"cd {GATEWAY_DIR} && date -d \"$(docker inspect -f '{{{{.State.StartedAt}}}}' "
                    "$(docker compose ps -q))\" +%s.%N").stdout.strip()
    return float(out)


def test_two_gateway_hosts_of_one_model_restart_one_at_a_time_and_no_request_fails(migrated, testbed, workdir):
    hosts, _, old, _ = migrated
    hosts[GW2] = testbed.host(GW2)

    def two(extra: dict) -> dict:
        return {"production": [(hosts[name], old["worker"]) for name in WORKERS],
                "router": [(hosts[name], {**old["keyed"], "sglang_router_bind_address": hosts[name].address, **extra})
                           for name in (GW, GW2)]}

    added = run_deploy(testbed.inventory(workdir / "two-gateways.py", two({})))
    (workdir / "two-gateways.log").write_text(added.output)
    assert added.returncode == 0, added.why(3000)
    assert added.changed(GW) == [], added.changed(GW)   # the first gateway is left alone: nothing of it changed
    every = {url: True for url in urls(hosts)}
    for name in (GW, GW2):
        assert harness.wait_for(lambda: listed(hosts[name].address, ADMIN_KEY, models=True) == every, 60), name
    before = {name: started_at(hosts[name]) for name in (GW, GW2)}
    # a new gateway flag (a request timeout one second shorter) recreates both gateways
    inventory = testbed.inventory(workdir / "two-gateways-flag.py", two({"sglang_router_request_timeout": 1799}))
    with Balancer([hosts[GW].address, hosts[GW2].address]) as load:
        time.sleep(3)
        changed = run_deploy(inventory)
        time.sleep(3)
    (workdir / "two-gateways-flag.log").write_text(changed.output)
    assert changed.returncode == 0, changed.why(3000)
    print(f"balancer: {load.sent} requests, {len(load.not_ready)} retried on the other gateway after a 404/503, "
          f"{sum(map(len, load.down.values()))} retried in all")
    assert load.failed == [] and load.sent > 20, (load.sent, load.failed[:10])
    after = {name: started_at(hosts[name]) for name in (GW, GW2)}
    assert all(after[name] > before[name] for name in (GW, GW2)), (before, after)   # both were recreated
    first, second = sorted((GW, GW2), key=lambda name: after[name])
    # one after the other: the second gateway went down only after the first answered again
    down = {name: load.down[hosts[name].address] for name in (GW, GW2)}
    if down[first] and down[second]:
        assert max(down[first]) < min(down[second]), down
    turns = [line for line in changed.output.splitlines() if "gateway turn:" in line]
    order = [(name, step) for line in turns for name in (GW, GW2) if f"[{name}]" in line
             for step in ("restarts now", "is back") if step in line]
    assert order == [(first, "restarts now"), (first, "is back"), (second, "restarts now"), (second, "is back")], turns
    assert "no other gateway host fronts its model" not in changed.output
    again = run_deploy(inventory)
    assert again.returncode == 0, again.why(3000)
    assert {name: again.changed(name) for name in (*WORKERS, GW, GW2)} == {name: [] for name in (*WORKERS, GW, GW2)}
