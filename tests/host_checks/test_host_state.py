"""The state deploy.py promises, checked read-only on each host."""

from __future__ import annotations

import hashlib
import json
import shlex

import pytest

from sglang_infra import ACCOUNT
from sglang_infra.hostside import names
from sglang_infra.hostside.formats.netloc import netloc
from sglang_infra.machine import ship
from sglang_infra.machine.gpus import gpu_faults
from sglang_infra.machine.platforms import NOLOGIN_SHELL
from sglang_infra.plan import peerdoor
from sglang_infra.plan.roles import MONITOR_GROUP, ROUTER_GROUP
from sglang_infra.plan.types import (
    ALERT_RULES,
    DROPIN_NAME,
    NODE_EXPORTER_SERVICE,
    PROMETHEUS_CONFIG,
    PROMETHEUS_SERVICE,
    dropin_dir,
)
from sglang_infra.status import groupstatus


@pytest.fixture
def serving(target):
    """A host that serves a model; a host only in the router group runs gateways alone (checked below)."""
    if not target.plan.serves:
        pytest.skip(f"{target.name} serves no model: it is only in the {ROUTER_GROUP} group")
    return target


@pytest.fixture
def with_account(target):
    """A host that serves or runs gateways: the account, the home and Docker; a host only in the monitor group runs
    Prometheus alone."""
    if not (target.plan.serves or target.plan.runs_gateways):
        pytest.skip(f"{target.name} is only in the {MONITOR_GROUP} group: no account, no Docker")
    return target


@pytest.fixture
def monitoring(target):
    """A monitor host, with its Prometheus."""
    if not target.plan.monitors:
        pytest.skip(f"{target.name} is not in the {MONITOR_GROUP} group")
    return target


@pytest.fixture
def routing(target):
    """A gateway host, with its gateways."""
    if not target.plan.runs_gateways:
        pytest.skip(f"{target.name} is not in the {ROUTER_GROUP} group")
    return target


def _passwd(target):
    line = target.run(f"getent passwd {ACCOUNT}").stdout.strip()
    assert line, f"{target.name}: no account {ACCOUNT}"
    return line.split(":")


def test_account_is_a_nologin_system_account(with_account):
    target = with_account
    name, _, uid, _, _, home, shell = _passwd(target)
    assert shell == NOLOGIN_SHELL
    assert home == target.data["sglang_home"]
    assert int(uid) < 1000, "not a system uid"
    if target.data["sglang_uid"] is not None:
        assert int(uid) == target.data["sglang_uid"]


def test_account_primary_group_is_its_own(with_account):
    target = with_account
    gid = int(_passwd(target)[3])
    group = target.run(f"getent group {ACCOUNT}").stdout.strip().split(":")
    assert int(group[2]) == gid
    if target.data["sglang_gid"] is not None:
        assert gid == target.data["sglang_gid"]


def test_account_password_is_locked(with_account):
    target = with_account
    field = target.run(f"getent shadow {ACCOUNT}").stdout.split(":")[1]
    assert field[:1] in ("!", "*")


def test_account_is_in_docker_group(with_account):
    target = with_account
    assert "docker" in target.run(f"id -nG {ACCOUNT}").stdout.split()


def test_admins_are_in_the_account_group(with_account):
    target = with_account
    for admin in target.data["sglang_admins"]:
        assert ACCOUNT in target.run(f"id -nG {admin}").stdout.split(), admin


def _stat(target, path):
    return target.run(f"stat -c '%U %G %a' {path}").stdout.split()


def test_home_is_owned_and_private(with_account):
    target = with_account
    assert _stat(target, target.data["sglang_home"]) == [ACCOUNT, ACCOUNT, "750"]


def test_docker_dir_is_not_group_writable(with_account):
    target = with_account
    assert _stat(target, f"{target.data['sglang_home']}/docker") == [ACCOUNT, ACCOUNT, "755"]


def test_hf_cache_dirs_are_setgid_and_group_writable(with_account):
    target = with_account
    home = target.data["sglang_home"]
    for path in (f"{home}/hf-cache", f"{home}/hf-cache/hub"):
        assert _stat(target, path) == [ACCOUNT, ACCOUNT, "2775"], path


def test_hf_cache_has_no_drifted_entries(with_account):
    target = with_account
    cache = f"{target.data['sglang_home']}/hf-cache"
    found = target.run(
        f"find {cache} -mindepth 1 \\( ! -group {ACCOUNT} -o \\( ! -type l ! -type d ! -perm -060 \\) "
        f"-o \\( -type d ! -perm -2070 \\) \\) -print").stdout
    assert found == ""


def test_nothing_is_world_writable(with_account):
    target = with_account
    assert target.run(f"find {target.data['sglang_home']} ! -type l -perm -002 -print").stdout == ""


def test_everything_outside_hf_cache_and_results_is_owned_by_the_account(with_account):
    target = with_account
    home = target.data["sglang_home"]
    found = target.run(f"find {home} \\( -path {home}/hf-cache -o -path {home}/results \\) -prune -o "
                       f"\\( ! -user {ACCOUNT} -o ! -group {ACCOUNT} \\) -print").stdout
    assert found == ""


def test_docker_engine_is_running_and_enabled(with_account):
    target = with_account
    assert target.run("systemctl is-active docker").stdout.strip() == "active"
    assert target.run("systemctl is-enabled docker").stdout.strip() == "enabled"


def test_docker_compose_is_v2(with_account):
    target = with_account
    version = target.run("docker compose version --short").stdout.strip().lstrip("v")
    assert int(version.split(".")[0]) >= 2, version


def test_compose_yaml_is_the_rendering_of_the_data(serving):
    target = serving
    path = f"{target.data['sglang_home']}/docker/compose.yaml"
    remote = target.run(f"sha256sum {path}").stdout.split()[0]
    assert remote == hashlib.sha256(target.plan.compose.encode()).hexdigest()
    assert _stat(target, path) == [ACCOUNT, ACCOUNT, "644"]


def test_compose_yaml_is_accepted_by_compose(serving):
    target = serving
    docker_dir = f"{target.data['sglang_home']}/docker"
    result = target.run(f"docker compose --project-directory {docker_dir} config -q")
    assert result.rc == 0, result.stderr


def test_compose_pins_the_image(serving):
    target = serving
    docker_dir = f"{target.data['sglang_home']}/docker"
    images = target.run(f"docker compose --project-directory {docker_dir} config --images").stdout.split()
    assert images == [target.plan.image.serving]


def test_the_serving_image_carries_the_toolchain_pins(serving):
    target = serving
    if not target.plan.image.build:
        return
    result = target.run(f"docker run --rm --entrypoint /bin/sh {target.plan.image.serving} "
                        f"-c '{target.plan.gate.toolchain_check}'")
    assert result.rc == 0 and json.loads(result.stdout.strip().splitlines()[-1])["ok"], result.stdout


def test_every_kept_model_is_complete_and_verified_in_the_cache(serving):
    target = serving
    cache = target.snapshot["models"]
    for model in target.plan.kept:
        revisions = cache["repos"].get(model.repo_id, {}).get("revisions", {})
        assert revisions.get(model.revision, {}).get("complete"), f"{model.pinned} is not complete"


def test_the_pull_environment_is_outside_the_home_and_the_token_private(serving):
    target = serving
    tools = target.data["sglang_tools_dir"]
    assert not tools.startswith(target.data["sglang_home"] + "/")
    assert _stat(target, f"{tools}/secret") == [ACCOUNT, ACCOUNT, "700"]
    token = target.run(f"stat -c '%U %G %a' {tools}/secret/hf-token")
    if token.rc == 0:
        assert token.stdout.split() == [ACCOUNT, ACCOUNT, "600"]


def test_env_file_carries_the_account_ids(serving):
    target = serving
    _, _, uid, gid, *_ = _passwd(target)
    path = f"{target.data['sglang_home']}/docker/.env"
    values = dict(line.split("=", 1) for line in target.run(f"cat {path}").stdout.splitlines()
                  if line and not line.startswith("#"))
    assert values == {"SGLANG_UID": uid, "SGLANG_GID": gid}
    assert _stat(target, path) == [ACCOUNT, ACCOUNT, "640"]


# ---------------------------------------------------------------- serving: what the operator relies on
def test_the_server_container_runs_and_is_not_unhealthy(serving):
    target = serving
    found = target.snapshot["stack"]["container"]
    assert found is not None, "no server container"
    assert found["state"] == "running", f"the server container is {found['state']} ({found['status']})"
    # Docker's first healthcheck runs 30 s after a start; until then it says "starting" (the API check below
    # is the proof meanwhile).
    assert found["health"] != "unhealthy", f"Docker reports the server unhealthy ({found['status']})"


def test_every_gpu_the_plan_found_is_present_and_healthy(serving):
    """nvidia-smi's own word on each GPU (the snapshot's driver facts, gpus.gpu_faults): present, every one the
    last good config passed its gate on still listed (named by index and bus id when one is gone), no uncorrectable
    ECC error, no row remap waiting, under its slowdown temperature, registered with the fabric on an NVSwitch
    board; a failing GPU is named with its reason. A host without nvidia-smi (a stand-in sandbox) has none."""
    target = serving
    section = target.snapshot.get("gpus")
    if not section:
        pytest.skip(f"{target.name} has no nvidia-smi")
    listed = (section.get("driver") or {}).get("gpus") or []
    assert len(listed) >= target.plan.gpus.count, \
        f"nvidia-smi -q lists {len(listed)} GPU(s), the query {target.plan.gpus.count}: a GPU fell off the bus?"
    assert gpu_faults(section) == []


API_TIMEOUT = 30   # seconds for the whole probe: /health and /v1/models, each read bounded in bytes too


def api_probe(url: str, key_file: str | None) -> str:
    """The command that lists the served models on the host: the checks program's `models`, bounded in bytes
    and in total time (hostside/checks.py); the key, if any, is read on the host from the server's own config."""
    key = f" --api-key-file {shlex.quote(key_file)}" if key_file else ""
    return (f"python3 -c {shlex.quote(ship.program('checks'))} models --url {shlex.quote(url)} "
            f"--timeout {API_TIMEOUT}{key}")


def test_the_api_answers_with_the_served_model(serving):
    target = serving
    result = target.run(api_probe(target.plan.gate.url, target.plan.gate.api_key_file))
    assert result.rc == 0, f"the API does not answer on {target.plan.gate.url}: {result.stderr.strip()[-300:]}"
    assert target.plan.gate.served_name in json.loads(result.stdout)["models"], result.stdout


def test_the_last_gate_passed_for_what_runs_now(serving):
    target = serving
    gate = target.snapshot["gate"]
    assert gate["stamp"] is not None, "the gate never passed on this host"
    assert names.stamp_current(gate["stamp"], gate["digest"]), (
        "the last gate record is not for the config and container running now "
        "(changed, restarted or rolled back since); run the deploy")


def test_the_server_reads_the_model_cache_read_only(serving):
    target = serving
    found = target.snapshot["stack"]["container"]
    assert found is not None, "no server container"
    mounts = json.loads(target.run(f"docker inspect -f '{{{{json .Mounts}}}}' {found['id']}").stdout)
    cache = [m for m in mounts if m["Destination"] == "/hf-cache"]
    assert cache and cache[0]["RW"] is False, cache


def test_the_multi_node_group_is_whole(serving):
    """A member of a multi-node group: every member's container runs, all started as one group, none restarted
    alone since the group's last gate (groupstatus, the judgement status.sh makes too). Checked once, on rank 0,
    which reads the other members' own snapshots."""
    group = serving.plan.node_group
    if group is None:
        pytest.skip(f"{serving.name} is in no multi-node group")
    if group.rank != 0:
        pytest.skip(f"{serving.name} is rank {group.rank} of group {group.name}: checked on rank 0 ({group.head_name})")
    containers, gated = {}, {}
    for name in group.members:
        found = serving.member(name)
        if found is not None:
            containers[name] = found.snapshot["stack"]["container"]
            gated[name] = found.snapshot["gate"].get("started_at")
    problems = groupstatus.problems(group, containers, gated)
    assert not problems, f"group {group.name} is failing: " + "; ".join(problems)


# ---------------------------------------------------------------- gateway hosts: each gateway
def test_a_gateway_host_runs_a_gateway_for_each_model_it_fronts(routing):
    found = routing.snapshot.get("routers") or {}
    assert sorted(found) == sorted(g.slug for g in routing.plan.front_door.gateways), found


def test_each_gateways_compose_yaml_is_the_rendering_of_the_data(routing):
    for gateway in routing.plan.front_door.gateways:
        path = f"{gateway.dir}/{names.COMPOSE_FILE}"
        remote = routing.run(f"sha256sum {path}").stdout.split()[:1]
        assert remote == [gateway.compose_sha], f"the {gateway.key} gateway's {path} is not the rendered one"


def test_each_gateway_runs_and_passed_its_gate_for_what_runs_now(routing):
    for gateway in routing.plan.front_door.gateways:
        found = (routing.snapshot.get("routers") or {}).get(gateway.slug) or {}
        container = (found.get("stack") or {}).get("container") or {}
        assert container.get("state") == "running", f"the {gateway.key} gateway's container is not running"
        assert names.stamp_current(found.get("stamp"), found.get("digest")), \
            f"the {gateway.key} gateway's last gate is not for what runs now; run the deploy"


def test_each_gateway_answers_with_its_model(routing):
    for gateway in routing.plan.front_door.gateways:
        result = routing.run(api_probe(gateway.gate.url, gateway.gate.api_key_file))
        assert result.rc == 0, f"the {gateway.key} gateway does not answer on {gateway.gate.url}: " \
                               f"{result.stderr.strip()[-300:]}"
        assert gateway.served_name in json.loads(result.stdout)["models"], result.stdout


def _sha(target, path):
    found = target.run(f"sha256sum {shlex.quote(path)}")
    return found.stdout.split()[0] if found.rc == 0 else None


def test_the_node_exporter_runs_with_the_deploys_flags(target):
    exporter = target.plan.node_exporter
    if exporter is None:
        pytest.skip(f"{target.name}: sglang_node_exporter is off")
    dropin = f"{dropin_dir(NODE_EXPORTER_SERVICE)}/{DROPIN_NAME}"
    assert _sha(target, dropin) == names.text_digest(exporter.dropin), f"{dropin} is not the rendered drop-in"
    assert target.run(f"systemctl is-active {NODE_EXPORTER_SERVICE}").stdout.strip() == "active"
    assert f"{exporter.listen}" in target.run("ss -Hltn").stdout


def test_the_peer_door_runs_its_config_on_its_address_alone(serving):
    door = serving.plan.peer_door
    if door is None:
        pytest.skip(f"{serving.name}: sglang_peer_key_file is None, no peer door")
    for path, text in ((peerdoor.CONFIG, door.config), (peerdoor.dropin(), door.dropin)):
        assert _sha(serving, path) == names.text_digest(text), f"{path} is not the rendering of the data"
    assert serving.run(f"stat -c '%U %G %a' {peerdoor.KEY_CONF}").stdout.split() == ["root", "root", "600"]
    assert serving.run(f"stat -c '%U %G %a' {peerdoor.TLS_KEY}").stdout.split() == ["root", "root", "600"]
    assert serving.run(f"openssl x509 -noout -in {peerdoor.TLS_CERT}").rc == 0, f"{peerdoor.TLS_CERT} is no certificate"
    assert serving.run(f"systemctl is-active {peerdoor.SERVICE}").stdout.strip() == "active"
    port = f":{door.port}"
    listening = [w for w in serving.run(f"ss -Hltn 'sport = {port}'").stdout.split() if w.endswith(port)]
    assert listening == [netloc(door.address, door.port)], listening


def test_prometheus_runs_the_rendered_config_and_rules(monitoring):
    monitor = monitoring.plan.monitor
    for path, text in ((PROMETHEUS_CONFIG, monitor.config), (ALERT_RULES, monitor.rules)):
        assert _sha(monitoring, path) == names.text_digest(text), f"{path} is not the rendering of the inventory"
    assert monitoring.run(f"systemctl is-active {PROMETHEUS_SERVICE}").stdout.strip() == "active"
    checked = monitoring.run(f"promtool check config {PROMETHEUS_CONFIG}")
    assert checked.rc == 0, checked.stdout + checked.stderr
