"""The lock on real hosts: the serving image comes from a REAL registry
(Debian's docker-registry, tests/support/testbed/registry.py) and is pulled by digest;
the models come from the STAND-IN Hub. scripts/lock.sh resolves once and
running it again changes nothing; the fleet converges on the lock; a tag
moved upstream changes nothing until the lock is updated; a file rewritten on
the Hub after locking is refused by name while the old revision keeps
serving; a lock that disagrees with the data is refused before any change;
rollout.sh --lock writes the lock only after the canary's gate passed.

One host logs in as root, the other as a sudo user (the canary)."""

from __future__ import annotations

import json
import subprocess

import pytest

from harness import PROJECT_DIR, _env, run_deploy, write_inventory
from testbed import hosts as testbed_hosts
from testbed import hub as standin_hub
from testbed import registry as testbed_registry

TINY = "standin-org/tiny-chat"
KEY = "qwen3.6-35b-a3b-awq"   # the production key, served from TINY by the stand-in registry
SHARD = "model-00001-of-00002.safetensors"
NEW_SHARD = "model-00002-of-00002.safetensors"   # another blob at main than at the first commit
DOCKER = "/opt/sglang/docker"
REPOSITORY = "sglang/standin"


def lock_sh(inventory, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/lock.sh", str(inventory), *args], cwd=PROJECT_DIR, env=_env(),
                          capture_output=True, text=True, timeout=300)


def rollout(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/rollout.sh", *args], cwd=PROJECT_DIR, env=_env(),
                          capture_output=True, text=True, timeout=1200)


def serving(host) -> dict:
    """What the host's stack runs: compose's image line, the model path and the container's image and start."""
    compose = host.exec(f"cat {DOCKER}/compose.yaml").stdout
    container = host.exec(f"docker inspect $(cd {DOCKER} && docker compose ps -q sglang)").stdout
    info = json.loads(container)[0]
    image = json.loads(host.exec(f"docker image inspect {info['Image']}").stdout)[0]
    model = next(a for a in info["Config"]["Cmd"] if a.startswith("--model-path="))
    return {"image_line": next(line.strip() for line in compose.splitlines() if line.strip().startswith("image:")),
            "model": model.split("=", 1)[1], "repo_digests": image.get("RepoDigests") or [],
            "started": info["State"]["StartedAt"]}


@pytest.fixture(scope="module")
def fleet(testbed, tmp_path_factory):
    registry = testbed_registry.ensure_registry()
    digest = registry.push(testbed_hosts.ensure_standin_image()[0], REPOSITORY, "v1")
    canary, other = testbed.host("sg-lock-canary", login="deploy"), testbed.host("sg-lock-2")
    for host in (canary, other):
        host.exec(registry.trust_command())
    commits = standin_hub.commits()[TINY]
    # A directory of its own: the lock is found beside the inventory (sglang_lock's default, 'sglang.lock').
    directory = tmp_path_factory.mktemp("lockfleet")
    models = {**testbed.standin["sglang_models"]}
    models[KEY] = {**models[KEY], "revision": None}   # the lock pins it
    data = {"sglang_image": f"{registry.address}/{REPOSITORY}:v1", "sglang_image_archive": None,
            "sglang_models": models}
    inventory = write_inventory(directory / "inventory.py", {"canary": [(canary, data)], "production": [(other, data)]},
                                base=testbed.standin)
    return {"registry": registry, "digest": digest, "hosts": (canary, other), "inventory": inventory,
            "lock": directory / "sglang.lock", "commits": commits, "data": data, "directory": directory}


def test_without_a_lock_an_unpinned_model_is_refused_before_any_change(fleet):
    result = run_deploy(fleet["inventory"])
    assert result.returncode != 0
    assert f"entry '{KEY}' has no pinned revision" in result.output, result.output[-3000:]
    for host in fleet["hosts"]:
        assert host.exec("test -e /opt/sglang", check=False).returncode != 0


def test_lock_sh_resolves_once_and_again_changes_nothing(fleet):
    old = fleet["commits"]["old"]
    made = lock_sh(fleet["inventory"], "--update", f"{KEY}@{old}")
    assert made.returncode == 0, made.stderr
    doc = json.loads(fleet["lock"].read_text())
    assert doc["format"] == 1 and doc["written_by"].startswith("scripts/lock.sh") and doc["written_at"]
    assert doc["models"][KEY]["commit"] == old and doc["models"][KEY]["repo_id"] == TINY
    files = {f["path"]: f for f in doc["models"][KEY]["files"]}
    assert files[SHARD]["sha256_from"] == "lfs" and files["config.json"]["sha256_from"] == "computed"
    image = fleet["data"]["sglang_image"]
    assert doc["images"][image] == {"digest": fleet["digest"],
                                    "pinned": f"{fleet['registry'].address}/{REPOSITORY}@{fleet['digest']}"}
    before = fleet["lock"].stat().st_mtime_ns, fleet["lock"].read_bytes()
    again = lock_sh(fleet["inventory"])
    assert again.returncode == 0 and "unchanged" in again.stderr, again.stderr
    assert (fleet["lock"].stat().st_mtime_ns, fleet["lock"].read_bytes()) == before


def test_the_fleet_converges_on_the_lock_and_pulls_the_image_by_digest(fleet):
    first = run_deploy(fleet["inventory"])
    assert first.returncode == 0, first.output[-5000:]
    pinned = f"{fleet['registry'].address}/{REPOSITORY}@{fleet['digest']}"
    for host in fleet["hosts"]:
        now = serving(host)
        assert now["image_line"] == f'image: "{pinned}"'
        assert pinned in now["repo_digests"]
        assert now["model"] == f"/hf-cache/hub/models--standin-org--tiny-chat/snapshots/{fleet['commits']['old']}"
    again = run_deploy(fleet["inventory"])
    assert again.returncode == 0
    assert [again.changed(h.name) for h in fleet["hosts"]] == [[], []], again.output[-3000:]


def test_the_status_report_finds_both_hosts_on_the_lock(fleet):
    """The image by its registry digest and the model by its commit and content, as sglang.lock records them."""
    env = {k: v for k, v in _env().items() if k != "PYINFRA_YES"}
    report = subprocess.run(["bash", "scripts/status.sh", str(fleet["inventory"]), "--json"], cwd=PROJECT_DIR,
                            env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    rows = {row["host"]: row for row in json.loads(report.stdout)["hosts"]}
    for host in fleet["hosts"]:
        row = rows[host.name]
        assert (row["verdict"], row["image"]["lock"], row["model"]["lock"]) == ("ok", "yes", "yes"), row


def test_a_tag_moved_upstream_changes_nothing_until_the_lock_is_updated(fleet):
    registry, inventory = fleet["registry"], fleet["inventory"]
    moved_ref = f"{registry.address}/{REPOSITORY}:v1"
    moved = registry.push(testbed_registry.tiny_image(f"sglang-lock-moved:{testbed_hosts.run_prefix()}x", "moved"),
                          REPOSITORY, "v1")
    assert moved != fleet["digest"]
    before = [serving(h) for h in fleet["hosts"]]
    result = run_deploy(inventory)
    assert result.returncode == 0 and [result.changed(h.name) for h in fleet["hosts"]] == [[], []]
    assert [serving(h) for h in fleet["hosts"]] == before
    kept = fleet["lock"].read_bytes()
    try:
        updated = lock_sh(inventory, "--update", "image")
        assert updated.returncode == 0, updated.stderr
        assert json.loads(fleet["lock"].read_text())["images"][moved_ref]["digest"] == moved
    finally:
        fleet["lock"].write_bytes(kept)


def test_a_lock_that_disagrees_with_the_registry_is_refused_before_any_change(testbed, fleet, tmp_path):
    other = fleet["hosts"][1]
    data = {**fleet["data"], "sglang_models": {**fleet["data"]["sglang_models"]}}
    data["sglang_models"][KEY] = {**data["sglang_models"][KEY], "revision": fleet["commits"]["main"]}
    inventory = write_inventory(tmp_path / "inventory.py", {"production": [(other, data)]}, base=testbed.standin)
    (tmp_path / "sglang.lock").write_bytes(fleet["lock"].read_bytes())
    before = other.exec(f"stat -c %Y {DOCKER}/compose.yaml").stdout
    result = run_deploy(inventory)
    assert result.returncode != 0
    assert (f"host sg-lock-2: sglang_models: entry '{KEY}' pins revision {fleet['commits']['main']}, but "
            f"{tmp_path / 'sglang.lock'} locks commit {fleet['commits']['old']}") in result.output, \
        result.output[-3000:]
    assert other.exec(f"stat -c %Y {DOCKER}/compose.yaml").stdout == before


def test_a_file_rewritten_on_the_hub_after_locking_is_refused_and_the_old_revision_keeps_serving(fleet):
    hub, inventory = standin_hub.ensure_hub(), fleet["inventory"]
    main = fleet["commits"]["main"]
    kept = fleet["lock"].read_bytes()
    updated = lock_sh(inventory, "--update", f"{KEY}@main")
    assert updated.returncode == 0, updated.stderr
    assert json.loads(fleet["lock"].read_text())["models"][KEY]["commit"] == main
    before = [serving(h) for h in fleet["hosts"]]
    # A file the hosts do not hold yet (the first shard is the same blob at both commits: a host holding it verified
    # with the lock's content takes nothing of it from the endpoint, rewritten or not).
    hub.tamper(TINY, main, NEW_SHARD, offset=1000)
    try:
        result = run_deploy(inventory)
    finally:
        hub.tamper(TINY, main, NEW_SHARD, offset=1000)   # the same bit again: the Hub serves the original
        fleet["lock"].write_bytes(kept)
    assert result.returncode != 0
    assert f"verification failed: {NEW_SHARD}: the endpoint lists sha256" in result.output, result.output[-4000:]
    failed = next(line for line in result.output.splitlines() if line.startswith("--> Failed hosts (2 of 2): "))
    assert all(f"{h.name} (failed at 'tasks/models.py | Ensure {KEY} (" in failed for h in fleet["hosts"]), failed
    for host, was in zip(fleet["hosts"], before):
        assert serving(host) == was
        assert host.exec(f"test -e /opt/sglang/verified/models--standin-org--tiny-chat/{main}.json",
                         check=False).returncode != 0


def test_rollout_writes_the_lock_only_after_the_canary_passed(testbed, fleet):
    inventory, main = fleet["inventory"], fleet["commits"]["main"]
    kept = fleet["lock"].read_bytes()
    broken = json.dumps({**testbed.standin["sglang_extra_env"], "STANDIN_FAILURE": "tool_call_as_text"})
    failed = rollout("--canary", "canary", "--lock", "--update", f"{KEY}@main", str(inventory),
                     "--data", f"sglang_extra_env={broken}")
    assert failed.returncode != 0
    assert "the canary (canary) failed" in failed.stderr and "the lock was left as it was" in failed.stderr
    assert fleet["lock"].read_bytes() == kept
    assert not (fleet["directory"] / "sglang.lock.candidate").exists()
    assert serving(fleet["hosts"][1])["model"].endswith(fleet["commits"]["old"])   # the other host: untouched

    passed = rollout("--canary", "canary", "--lock", "--update", f"{KEY}@main", str(inventory))
    assert passed.returncode == 0, (passed.stdout + passed.stderr)[-5000:]
    assert json.loads(fleet["lock"].read_text())["models"][KEY]["commit"] == main
    for host in fleet["hosts"]:
        assert serving(host)["model"].endswith(main)
    again = run_deploy(inventory)
    assert again.returncode == 0 and [again.changed(h.name) for h in fleet["hosts"]] == [[], []]
