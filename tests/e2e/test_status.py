"""scripts/status.sh against a converged fleet of two real hosts (one reached
as root, one as a sudo login): one row per host with real values, nothing on
any host changed by it, drift shown but not a failure, a refused host and a
host off the lock reported beside the others, a lost host unreachable."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from harness import PROJECT_DIR, run_deploy
from sglang_infra.fleet import lockgen
from sglang_infra.models import lockfile
from testbed import hub as testbed_hub
from testbed.hosts import stop_host

HOSTS = {"sg-st-1": "root", "sg-st-2": "deploy"}
KEY = "qwen3.6-35b-a3b-awq"          # the production group's model: the stand-in repo below
REPO = "standin-org/tiny-chat"
LAYOUT_OP = ("tasks/layout.py | Ensure /opt/sglang/{docker,hf-cache/hub,verified} have the runbook's owners and "
             "modes, and nothing below has drifted")
# Everything status must leave alone: each file's type, mode, owner, size, mtime and ctime under the home and the
# tools dir, and the serving container's id and start time.
HOST_STATE = (
    "find /opt/sglang /var/lib/sglang-tools -printf '%p %y %m %U:%G %s %T@ %C@\\n' | sort; "
    "docker inspect -f '{{.Id}} {{.State.StartedAt}}' "
    "$(docker ps -aq --filter label=com.docker.compose.project=sglang)"
)


def run_status(inventory, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYINFRA_YES"}
    return subprocess.run(["bash", "scripts/status.sh", str(inventory), *args], cwd=PROJECT_DIR, env=env,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def rows(proc) -> dict[str, dict]:
    return {row["host"]: row for row in json.loads(proc.stdout)["hosts"]}


@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    hosts = {name: testbed.host(name, login=login) for name, login in HOSTS.items()}
    inventory = testbed.inventory(workdir / "status.py", {"production": [(h, {}) for h in hosts.values()]})
    converged = run_deploy(inventory)
    assert converged.returncode == 0, converged.output[-3000:]
    return hosts, inventory


@pytest.fixture(scope="module")
def read(fleet):
    """The report as text and as JSON, with the hosts' state recorded before and after both."""
    hosts, inventory = fleet
    before = {name: host.exec(HOST_STATE).stdout for name, host in hosts.items()}
    text, as_json = run_status(inventory), run_status(inventory, "--json")
    after = {name: host.exec(HOST_STATE).stdout for name, host in hosts.items()}
    return dict(text=text, json=as_json, before=before, after=after)


def test_a_converged_fleet_reports_ok_and_exits_zero(read):
    assert read["text"].returncode == 0, read["text"].stdout + read["text"].stderr[-3000:]
    assert read["text"].stdout.strip().splitlines()[-1] == "fleet: 2 host(s): 2 ok; no drift"
    assert read["json"].returncode == 0
    assert json.loads(read["json"].stdout)["summary"]["ok"] == 2


@pytest.mark.parametrize("name", HOSTS)
def test_the_table_has_one_row_per_host(read, name):
    lines = [line for line in read["text"].stdout.splitlines() if line.startswith(f"{name} ")]
    assert len(lines) == 1, read["text"].stdout
    assert re.match(rf"{name}\s+ok\s+debian 13\s+none\s+", lines[0]), lines[0]


@pytest.mark.parametrize("name", HOSTS)
def test_the_row_says_what_the_host_runs(read, name):
    row = rows(read["json"])[name]
    main = testbed_hub.commits()[REPO]["main"]
    assert row["reachable"] and row["verdict"] == "ok" and row["problems"] == []
    assert row["os"] == "debian 13"
    assert row["gpus"] is None   # a test host has no nvidia-smi
    assert re.match(r"\d+\.\d+\.\d+", row["docker"]["engine"]) and row["docker"]["compose"].startswith("2.")
    assert row["image"]["lock"] == "no lock" and re.fullmatch(r"[0-9a-f]{12}", row["image"]["id"])
    assert row["image"]["ref"] == row["image"]["wanted"]
    assert (row["model"]["key"], row["model"]["commit"], row["model"]["short"]) == (KEY, main, main[:7])
    assert row["model"]["complete"] and row["model"]["verified"] and row["model"]["lock"] == "no lock"
    assert row["container"]["state"] == "running" and row["container"]["uptime_s"] >= 0
    gate = row["gate"]
    assert gate["passed"] is True and gate["current"] is True and gate["reason"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", gate["time"])
    assert gate["tok_per_s"] > 0 and gate["baseline_tok_per_s"] == 300
    assert gate["ratio_to_baseline"] == pytest.approx(gate["tok_per_s"] / 300, abs=0.01)
    assert row["drift"] == {"operations": 0, "names": []}
    assert row["api"] == "no key, trusted network"   # the harness declares the test network trusted (with_trust)
    # the stand-in model's shards (12 MiB and 3 MiB) and its small files, each blob once
    assert 15 << 20 <= row["disk"]["hf_cache_bytes"] < 16 << 20
    assert 0 < row["disk"]["free_bytes"] <= row["disk"]["total_bytes"]


@pytest.mark.parametrize("name", HOSTS)
def test_status_changes_nothing_on_the_host(read, name):
    assert read["before"][name].count("\n") > 20          # the files and the container were listed
    assert re.search(r"^[0-9a-f]{64} \d{4}-", read["before"][name], re.M)
    assert read["after"][name] == read["before"][name]


@pytest.fixture(scope="module")
def drifted(fleet, read):
    hosts, inventory = fleet
    hosts["sg-st-1"].exec("chmod g-s /opt/sglang/hf-cache/hub")
    try:
        return run_status(inventory, "--json")
    finally:
        hosts["sg-st-1"].exec("chmod g+s /opt/sglang/hf-cache/hub")


def test_drift_is_counted_and_shown_but_is_not_a_failure(drifted):
    found = rows(drifted)
    assert found["sg-st-1"]["drift"]["operations"] >= 1
    assert LAYOUT_OP in found["sg-st-1"]["drift"]["names"]
    assert found["sg-st-2"]["drift"]["operations"] == 0
    assert found["sg-st-1"]["verdict"] == "ok"
    assert json.loads(drifted.stdout)["summary"]["drifted_hosts"] == 1
    assert drifted.returncode == 0


def _lock_inventory(testbed, workdir, hosts, commit: str, files) -> os.PathLike:
    """sg-st-1 with a lock beside its inventory that pins ``commit`` of the served model (the registry's
    revision unset, so the lock decides), sg-st-2 without one."""
    folder = workdir / f"status-lock-{commit[:7]}"
    folder.mkdir(exist_ok=True)
    locked = lockfile.LockedModel(KEY, REPO, commit, tuple(files))
    (folder / "sglang.lock").write_text(lockfile.render(lockfile.document({KEY: locked}, {}, {}, "2026-01-01")))
    registry = testbed.standin["sglang_models"]
    unpinned = {**registry, KEY: {**registry[KEY], "revision": None}}
    # sg-st-1 finds the lock by sglang_lock's default, 'sglang.lock' beside its inventory.
    return testbed.inventory(folder / "inventory.py", {"production": [
        (hosts["sg-st-1"], {"sglang_models": unpinned}),
        (hosts["sg-st-2"], {"sglang_lock": None})]})


@pytest.fixture(scope="module")
def on_the_lock(testbed, workdir, fleet, read):
    main = testbed_hub.commits()[REPO]["main"]
    locked = lockgen.resolve_model(KEY, REPO, main, testbed.standin["sglang_hf_endpoint"], None)
    return run_status(_lock_inventory(testbed, workdir, fleet[0], main, locked.files), "--json")


@pytest.fixture(scope="module")
def off_the_lock(testbed, workdir, fleet, read):
    old = testbed_hub.commits()[REPO]["old"]
    files = [{"path": "config.json", "size": 1, "sha256": "0" * 64, "sha256_from": "computed"}]
    return run_status(_lock_inventory(testbed, workdir, fleet[0], old, files), "--json")


def test_a_host_serving_what_the_lock_pins_is_on_the_lock(on_the_lock):
    found = rows(on_the_lock)["sg-st-1"]
    assert found["model"]["lock"] == "yes" and found["verdict"] == "ok", found
    # an image loaded from an archive has no registry digest, and the lock pins none for it
    assert found["image"]["lock"] == "n/a"
    assert on_the_lock.returncode == 0


def test_a_lock_pinning_another_commit_puts_the_host_off_the_lock(off_the_lock):
    found = rows(off_the_lock)
    assert found["sg-st-1"]["model"]["lock"] == "no" and found["sg-st-1"]["verdict"] == "off the lock"
    assert found["sg-st-1"]["drift"]["operations"] > 0      # a run would pull the locked commit and switch
    assert found["sg-st-2"]["verdict"] == "ok"               # the other host still reported
    assert off_the_lock.returncode == 1


@pytest.fixture(scope="module")
def refused(testbed, workdir, fleet, read):
    hosts = fleet[0]
    inventory = testbed.inventory(workdir / "status-refused.py", {"production": [
        (hosts["sg-st-1"], {"sglang_mem_fraction": 0.9}), (hosts["sg-st-2"], {})]})
    return run_status(inventory)


def test_a_refused_host_is_a_row_and_the_others_are_still_reported(refused):
    lines = refused.stdout.splitlines()
    assert re.match(r"sg-st-1\s+refused\s+", next(line for line in lines if line.startswith("sg-st-1 "))), \
        refused.stdout
    assert re.match(r"sg-st-2\s+ok\s+debian 13", next(line for line in lines if line.startswith("sg-st-2 ")))
    assert any(line.startswith("sg-st-1: refused: host sg-st-1: sglang_mem_fraction: unknown key")
               for line in lines)
    assert lines[-1] == "fleet: 2 host(s): 1 refused, 1 ok; no drift"
    assert refused.returncode == 1


@pytest.fixture(scope="module")
def lost(fleet, read, drifted, on_the_lock, off_the_lock, refused):
    """Last: one host stops answering."""
    hosts, inventory = fleet
    stop_host(hosts["sg-st-2"])
    return run_status(inventory, "--json"), run_status(inventory)


def test_a_lost_host_is_unreachable_and_the_other_is_still_reported(lost):
    as_json, text = lost
    found = rows(as_json)
    assert found["sg-st-2"]["reachable"] is False and found["sg-st-2"]["verdict"] == "unreachable"
    assert found["sg-st-2"]["unreachable"]
    assert found["sg-st-1"]["verdict"] == "ok" and found["sg-st-1"]["container"]["state"] == "running"
    assert as_json.returncode == 1 and text.returncode == 1
    assert text.stdout.splitlines()[-1] == "fleet: 2 host(s): 1 unreachable, 1 ok; no drift"
