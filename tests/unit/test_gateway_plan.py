"""The fleet front door without hosts: a gateway host's plan (its gateways, ports and worker URLs), its three
refusals, the gateway's compose file and launcher, and the operation that keeps its worker set."""

from __future__ import annotations

import hashlib
import json
import runpy
from unittest import mock

import pytest
import yaml
from conftest import FakeHost, command_text, converged_snapshot, on_host, pinned_defaults

from harness import PROJECT_DIR
from sglang_infra.fleet.gateways import fleet_worker, with_gateways
from sglang_infra.fleet.hosts import InventoryHost as FleetHost
from sglang_infra.hostside import gateway_launch
from sglang_infra.operations import gateway as gateway_ops
from sglang_infra.plan import roles as fleet_groups
from sglang_infra.plan.problems import DeployDataError
from sglang_infra.plan.refusals import check_data
from sglang_infra.plan.resolve import resolve
from sglang_infra.plan.types import Worker
from sglang_infra.run import factcache
from sglang_infra.run.operation import UP_FAILED

DEFAULTS = pinned_defaults()
PROD, QUALITY = "qwen3.6-35b-a3b-awq", "qwen3.6-27b-awq-int4"


# A gateway host without an API key is refused off loopback unless the network is trusted: these tests publish on an
# internal address of a trusted network; the refusal's own tests below set sglang_trusted_network = False.
INTERNAL = "10.0.0.5"


def gateway_host(groups=("router",), **data):
    values = {**DEFAULTS, "sglang_require_gpu": False, "sglang_router_bind_address": INTERNAL,
              "sglang_trusted_network": True, **data}
    return resolve("gw-1", values, converged_snapshot(None), groups)


def worker(name, address, model=PROD, **data):
    values = {**DEFAULTS, "sglang_model": model, "ssh_hostname": address, **data}
    return model, fleet_worker(FleetHost(name, values, ("production",), True, False),
                               resolve(name, values, converged_snapshot()))


def fleet(*entries):
    out = {}
    for key, each in entries:
        out.setdefault(key, []).append(each)
    return out


TWO = fleet(worker("gpu-01", "10.0.0.11"), worker("gpu-02", "10.0.0.12"))


def refusals(plan, workers):
    with pytest.raises(DeployDataError) as caught:
        with_gateways(plan, workers)
    return caught.value.problems


def test_a_gateway_only_host_serves_no_model_and_needs_no_gpu():
    plan = gateway_host()
    assert (plan.serves, plan.runs_gateways, plan.image.build) == (False, True, None)


def test_a_host_in_router_and_production_does_both():
    assert fleet_groups.roles(["production", "router"]) == (True, True)
    assert fleet_groups.roles(["production"]) == (True, False)
    assert fleet_groups.roles([]) == (True, False)


def test_each_served_model_gets_its_own_gateway_port_and_the_workers_that_serve_it():
    workers = {**TWO, **fleet(worker("gpu-03", "10.0.0.13", QUALITY))}
    gateways = {g.key: g for g in with_gateways(gateway_host(), workers).front_door.gateways}
    assert [g.port for g in gateways.values()] == [30080, 30081]           # registry order
    assert [g.prometheus_port for g in gateways.values()] == [29000, 29001]
    assert [w.url for w in gateways[PROD].workers] == ["http://10.0.0.11:30000", "http://10.0.0.12:30000"]
    assert [w.url for w in gateways[QUALITY].workers] == ["http://10.0.0.13:30000"]
    assert gateways[PROD].dir == "/opt/sglang/router/qwen3-6-35b-a3b-awq"


def test_a_worker_address_overrides_the_ssh_hostname():
    _, each = worker("gpu-01", "10.0.0.11", sglang_worker_address="gpu-01.lan", sglang_port=30001)
    assert each.url == "http://gpu-01.lan:30001"


def test_the_worker_carries_the_sha_of_the_compose_its_plan_renders():
    values = {**DEFAULTS, "ssh_hostname": "10.0.0.11"}
    plan = resolve("gpu-01", values, converged_snapshot())
    each = fleet_worker(FleetHost("gpu-01", values, ("production",), True, False), plan)
    assert each.compose_sha == hashlib.sha256(plan.compose.encode()).hexdigest()
    assert fleet_worker(FleetHost("gpu-01", values, ("production",), True, False), None).compose_sha is None  # outside



def test_a_gateway_host_with_no_workers_is_refused():
    [problem] = refusals(gateway_host(), {})
    assert problem.startswith("host gw-1: sglang_router_models: no host of the inventory serves a model")
    assert "Fix: add serving hosts" in problem


def test_a_listed_model_nobody_serves_is_refused():
    [problem] = refusals(gateway_host(sglang_router_models=[QUALITY]), TWO)
    assert f"no host of the inventory serves {QUALITY!r}" in problem and "Fix:" in problem


BROKEN = {"repo_id": "Org/Broken-AWQ", "revision": "a" * 40, "served_name": "$(touch /tmp/x)", "unvetted": True}


def test_a_listed_model_with_a_malformed_entry_is_refused_by_the_data_alone():
    data = {**DEFAULTS, "sglang_require_gpu": False, "sglang_models": {**DEFAULTS["sglang_models"], "broken": BROKEN},
            "sglang_router_models": ["broken"]}
    found = [p for p in check_data("gw-1", data) if "'broken'" in p]
    assert found and all(p.startswith("host gw-1: sglang_models: entry 'broken': served_name") for p in found), found


def test_a_served_model_with_a_malformed_entry_is_not_fronted():
    """Fronting every served key: a host outside this run serves a key whose entry here is malformed."""
    plan = gateway_host(sglang_models={**DEFAULTS["sglang_models"], "broken": BROKEN})
    outside = fleet_worker(FleetHost("gpu-09", {**DEFAULTS, "sglang_model": "broken", "ssh_hostname": "10.0.0.19"},
                                     ("production",), True, False), None)
    found = refusals(plan, {**TWO, "broken": [outside]})
    assert found == ["host gw-1: sglang_models: entry 'broken', which this gateway host fronts, is not a well-formed "
                     "registry entry. Fix: give it repo_id, revision, served_name, role and baseline_tok_s (or "
                     "'unvetted': True) as group_data/all.py shows, or stop serving it."]


def test_a_gateway_port_on_the_workers_port_of_the_same_host_is_refused():
    plan = gateway_host(groups=("production", "router"), sglang_router_port=30000)
    [problem] = refusals(plan, TWO)
    assert problem.startswith("host gw-1: sglang_router_port: the gateway of qwen3.6-35b-a3b-awq would listen on "
                              "30000, the port this host's own server already publishes (sglang_port)")
    assert "Fix: set sglang_router_port to a free port" in problem


def test_the_same_port_on_a_gateway_only_host_is_no_clash():
    assert with_gateways(gateway_host(sglang_router_port=30000), TWO).front_door.gateways[0].port == 30000


def test_an_unknown_policy_is_refused_naming_the_choices():
    [problem] = check_data("gw-1", {**DEFAULTS, "sglang_router_policy": "fastest"})
    assert problem.startswith("host gw-1: sglang_router_policy: 'fastest' is not one of random, round_robin, "
                              "passthrough, cache_aware, power_of_two, least_load, manual, consistent_hashing, "
                              "prefix_hash (SMG 1.13.0's policies)")
    assert problem.endswith("Fix: use 'cache_aware'.")
    # SMG's own policies that sglang-router 0.3.2 lacked are accepted.
    assert not check_data("gw-1", {**DEFAULTS, "sglang_router_policy": "least_load"})


def test_the_policies_are_smgs_own_list():
    """The accepted policies are exactly COMMON_POLICY_CHOICES of smg 1.13.0's smg/router_args.py."""
    from sglang_infra.plan.schema import GATEWAY_POLICIES

    assert GATEWAY_POLICIES == ("random", "round_robin", "passthrough", "cache_aware", "power_of_two", "least_load",
                                "manual", "consistent_hashing", "prefix_hash")


def gateway_refusals(**data):
    with pytest.raises(DeployDataError) as caught:
        gateway_host(**data)
    return caught.value.problems


def test_a_gateway_host_without_the_smg_image_is_refused_before_any_change():
    [problem] = gateway_refusals(sglang_router_image=None)
    assert problem.startswith("host gw-1: sglang_router_image: None on a gateway host")
    assert "templates/gateway-requirements.txt" in problem
    # A host that serves only needs neither.
    assert resolve("gpu-1", {**DEFAULTS, "sglang_router_image": None, "sglang_router_admin_key_file": None},
                   converged_snapshot()).front_door is None


@pytest.mark.parametrize("image", ["smg-gateway", "smg-gateway:latest"])
def test_a_gateway_image_that_is_not_pinned_is_refused(image):
    [problem] = check_data("gw-1", {**DEFAULTS, "sglang_router_image": image})
    assert problem.startswith("host gw-1: sglang_router_image: ")


def test_a_registry_image_by_tag_alone_without_an_archive_is_refused_before_any_change():
    """Issue 40: a tag can be moved, so an image pulled from a registry is named by digest; by tag only with its
    archive (what the operator built and vetted). Refused while planning, naming the host, the key and the fix."""
    [problem] = gateway_refusals(sglang_router_image="registry:5000/x/smg-gateway:1.13.0")
    assert problem.startswith("host gw-1: sglang_router_image: 'registry:5000/x/smg-gateway:1.13.0' would be pulled "
                              "from its registry by tag alone"), problem
    assert "registry:5000/x/smg-gateway@sha256:..." in problem and "sglang_router_image_archive" in problem


@pytest.mark.parametrize("image", ["registry:5000/x/smg-gateway@sha256:" + "cd" * 32,
                                   "registry:5000/x/smg-gateway:1.13.0@sha256:" + "cd" * 32])
def test_a_registry_image_by_digest_needs_no_archive(image):
    assert gateway_host(sglang_router_image=image).front_door.image == image


@pytest.mark.parametrize("content", [None, "", "\n", "short", "two words-0123456789abcdef"])
def test_a_control_plane_key_file_missing_or_empty_or_malformed_is_refused(tmp_path, content):
    path = None
    if content is not None:
        path = tmp_path / "admin.key"
        path.write_text(content)
    [problem] = gateway_refusals(sglang_router_admin_key_file=str(path) if path else None)
    assert problem.startswith("host gw-1: sglang_router_admin_key_file: ")
    assert "Fix: " in problem


def test_a_control_plane_key_equal_to_the_client_key_is_refused(tmp_path):
    (tmp_path / "a").write_text("same-key-0123456789abcdef\n")
    (tmp_path / "b").write_text("same-key-0123456789abcdef")
    [problem] = gateway_refusals(sglang_api_key_file=str(tmp_path / "a"),
                                 sglang_router_admin_key_file=str(tmp_path / "b"))
    assert "holds the same key as sglang_api_key_file" in problem


def test_a_health_timeout_not_below_the_interval_is_refused():
    [problem] = refusals(gateway_host(sglang_router_health_check_timeout=5), TWO)
    assert "sglang_router_health_check_timeout" in problem


@pytest.mark.parametrize("address", [None, "0.0.0.0", "::", INTERNAL])
def test_a_gateway_without_a_key_off_loopback_is_refused_unless_the_network_is_trusted(address):
    [problem] = refusals(gateway_host(sglang_router_bind_address=address, sglang_trusted_network=False), TWO)
    assert problem.startswith("host gw-1: sglang_api_key_file: None, and this host's gateways would be published on "
                              f"{'every address' if address in (None, '0.0.0.0', '::') else address} ")
    assert "could use every worker of its model" in problem
    assert "Fix: set sglang_api_key_file" in problem and "sglang_trusted_network = True." in problem
    plan = with_gateways(gateway_host(sglang_router_bind_address=address, sglang_trusted_network=True), TWO)
    assert plan.front_door.gateways


def test_a_gateway_without_a_key_on_loopback_only_is_accepted():
    plan = with_gateways(gateway_host(sglang_router_bind_address="127.0.0.1", sglang_trusted_network=False), TWO)
    gateway = plan.front_door.gateways[0]
    assert yaml.safe_load(gateway.compose)["services"]["router"]["ports"][0] == "127.0.0.1:30080:30080"


def published(plan):
    return yaml.safe_load(with_gateways(plan, TWO).front_door.gateways[0].compose)["services"]["router"]["ports"]


def test_the_front_door_is_open_on_every_address_only_with_a_key_or_by_decision(tmp_path):
    key_file = tmp_path / "api-key"
    key_file.write_text("k3y-0123456789abcdef\n")
    assert published(gateway_host(sglang_router_bind_address=None, sglang_api_key_file=str(key_file),
                                  sglang_trusted_network=False)) == ["0.0.0.0:30080:30080", "127.0.0.1:29000:29000"]
    assert published(gateway_host(sglang_router_bind_address=None, sglang_trusted_network=True)) == \
        ["0.0.0.0:30080:30080", "127.0.0.1:29000:29000"]
    assert published(gateway_host(sglang_router_prometheus_bind_address="10.0.0.9")) == \
        [f"{INTERNAL}:30080:30080", "10.0.0.9:29000:29000"]


def test_the_shipped_defaults_publish_no_gateway_port_on_every_address_without_a_key():
    shipped = {k: v for k, v in runpy.run_path(str(PROJECT_DIR / "group_data" / "all.py")).items()
               if k.startswith("sglang_router_") and k not in ("sglang_router_image", "sglang_router_admin_key_file")
               or k == "sglang_trusted_network"}
    assert shipped["sglang_router_bind_address"] is None and shipped["sglang_trusted_network"] is False
    assert shipped["sglang_router_prometheus_bind_address"] == "127.0.0.1"
    assert refusals(gateway_host(**shipped), TWO)


def compose(**data):
    return yaml.safe_load(with_gateways(gateway_host(**data), TWO).front_door.gateways[0].compose)


def test_the_compose_runs_smgs_launcher_with_the_fleets_health_settings():
    service = compose()["services"]["router"]
    command = service["command"]
    assert command[:5] == ["python3", "/etc/sglang-router/launch.py", "/etc/sglang-router/workers.json", "-",
                           "/etc/sglang-gateway-secrets/control-plane.yaml"]
    for flag in ("--port=30080", "--prometheus-port=29000", "--policy=cache_aware",
                 "--health-check-interval-secs=5", "--health-failure-threshold=2", "--health-success-threshold=1",
                 "--health-check-timeout-secs=3", "--request-timeout-secs=1800", "--worker-startup-timeout-secs=120"):
        assert flag in command
    assert service["ports"] == [f"{INTERNAL}:30080:30080", "127.0.0.1:29000:29000"]
    assert service["image"] == DEFAULTS["sglang_router_image"] != DEFAULTS["sglang_image"]
    assert not any("--worker-urls" in arg for arg in command)   # the worker set lives in workers.json
    # The control-plane key: its directory (router/.secrets, 0700) mounted read-only, into the gateway alone.
    assert "/opt/sglang/router/.secrets:/etc/sglang-gateway-secrets:ro" in service["volumes"]
    assert not any("control-plane" in arg and "admin" in arg for arg in command)


def test_the_control_plane_key_is_written_0700_dir_and_never_into_compose_or_scripts():
    key = (PROJECT_DIR / "tests" / "unit" / "fixtures" / "router-admin.key").read_text().strip()
    plan = with_gateways(gateway_host(), TWO)
    assert plan.layout["/opt/sglang/router/.secrets"] == "700"
    assert plan.paths.control_plane_config == "/opt/sglang/router/.secrets/control-plane.yaml"
    assert plan.front_door.control_plane_config == f'api-key: "{key}"\n'.encode()
    assert key not in plan.front_door.gateways[0].compose + "".join(plan.front_door.gateways[0].scripts.values())


def test_the_gateway_image_is_its_own(tmp_path):
    archive = tmp_path / "smg.tar"
    archive.write_bytes(b"")
    assert compose(sglang_router_image="registry.example.net/smg:1.13.0", sglang_router_image_archive=str(archive)
                   )["services"]["router"]["image"] == "registry.example.net/smg:1.13.0"


def test_an_api_key_reaches_the_gateway_as_a_mounted_file_never_as_text(tmp_path):
    key_file = tmp_path / "api-key"
    key_file.write_text("k3y-0123456789abcdef\n")
    gateway = with_gateways(gateway_host(sglang_api_key_file=str(key_file)), TWO).front_door.gateways[0]
    service = yaml.safe_load(gateway.compose)["services"]["router"]
    assert service["command"][3] == "/etc/sglang-secrets/server.yaml"
    assert "/opt/sglang/docker/secrets:/etc/sglang-secrets:ro" in service["volumes"]
    assert "k3y-0123456789abcdef" not in gateway.compose + "".join(gateway.scripts.values())
    assert '--api-key-file /opt/sglang/docker/secrets/server.yaml ' in gateway.scripts["gate.sh"]


def test_the_gateway_is_gated_through_its_own_port_by_the_same_scripts():
    gateway = with_gateways(gateway_host(), TWO).front_door.gateways[0]
    assert set(gateway.scripts) == {"test_tool_calling.sh", "benchmark.sh", "gate.sh", "launch.py"}
    assert f'--url http://{INTERNAL}:30080 ' in gateway.scripts["benchmark.sh"]   # where it is published
    everywhere = with_gateways(gateway_host(sglang_router_bind_address=None), TWO)
    assert '--url http://127.0.0.1:30080 ' in everywhere.front_door.gateways[0].scripts["benchmark.sh"]
    assert '--gateway qwen3-6-35b-a3b-awq ' in gateway.scripts["gate.sh"]
    # The checks send the key only to a port the gateway's own container publishes (checks.py --gateway).
    assert all('--gateway qwen3-6-35b-a3b-awq ' in gateway.scripts[name]
               for name in ("test_tool_calling.sh", "benchmark.sh"))
    assert "--baseline 985" in gateway.scripts["benchmark.sh"]


def test_the_launcher_reads_workers_and_both_keys_from_files(tmp_path):
    (tmp_path / "workers.json").write_text(json.dumps(["http://10.0.0.11:30000"]))
    (tmp_path / "server.yaml").write_text('api-key: "k3y-0123456789abcdef"\n')
    (tmp_path / "control.yaml").write_text('api-key: "adm1n-0123456789abcdef"\n')
    args = gateway_launch.arguments([str(tmp_path / "workers.json"), str(tmp_path / "server.yaml"),
                                     str(tmp_path / "control.yaml"), "--port=1"])
    assert args == ["--port=1", "--worker-urls", "http://10.0.0.11:30000",
                    "--control-plane-api-keys", "sglang-deploy:sglang-deploy:admin:adm1n-0123456789abcdef",
                    "--api-key", "k3y-0123456789abcdef"]
    assert gateway_launch.arguments([str(tmp_path / "missing.json"), "-", str(tmp_path / "control.yaml")]) == \
        ["--worker-urls", "--control-plane-api-keys", "sglang-deploy:sglang-deploy:admin:adm1n-0123456789abcdef"]
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(SystemExit):   # never started with a worker API that would take another key
        gateway_launch.arguments([str(tmp_path / "workers.json"), "-", str(tmp_path / "empty.yaml")])


def test_smgs_own_parser_takes_the_launchers_arguments():
    """The arguments launch.py builds, through smg 1.13.0's own parser (requirements-test.txt installs the wheel),
    and the policies the schema accepts are exactly the ones SMG's parser offers."""
    import smg.launch_router as smg
    from smg.router_args import COMMON_POLICY_CHOICES

    from sglang_infra.plan.schema import GATEWAY_POLICIES

    assert sorted(GATEWAY_POLICIES) == sorted(COMMON_POLICY_CHOICES)
    parsed = smg.parse_router_args(["--port=1", "--worker-urls", "http://10.0.0.11:30000", "--control-plane-api-keys",
                                    "sglang-deploy:sglang-deploy:admin:adm1n-0123456789abcdef"])
    assert parsed.control_plane_api_keys == [("sglang-deploy", "sglang-deploy", "adm1n-0123456789abcdef", "admin")]


# ---------------------------------------------------------------- the worker-set operation

STAMPED = {"gate": {"stamp": "d1", "digest": "d1"}, "stack": {"container": {"state": "running"}}}


def worker_snapshot(sha, stamp="d1", state="running"):
    return {"gate": {"stamp": stamp, "digest": "d1"}, "stack": {"container": {"state": state}},
            "files": {"/opt/sglang/docker": {"compose.yaml": {"sha256": sha}}}}


@pytest.mark.parametrize("snapshot,validated", [
    (worker_snapshot("c1"), True),
    (worker_snapshot("c1", stamp="old"), False),            # its gate has not passed for what runs now
    (worker_snapshot("c1", state="exited"), False),         # stopped
    (worker_snapshot("c0"), True),                          # rolled back to its last good config: it serves that
    (None, False),                                          # unreachable
])
def test_a_worker_counts_only_when_what_it_runs_passed_its_gate(snapshot, validated):
    assert gateway_ops.worker_validated(snapshot) is validated


def members(have, workers, snapshots):
    fake = FakeHost({"Snapshot": {"routers": {"m": {"workers": have}}}})
    try:
        with on_host(fake), mock.patch.object(gateway_ops, "_fleet_snapshot", lambda name: snapshots.get(name)):
            commands = list(gateway_ops.gateway_workers._inner(directory="/opt/sglang/router/m", gateway="m",
                                                               url="http://127.0.0.1:30080", workers=workers))
    finally:
        factcache.invalidate(fake)
    return commands, fake


W1 = Worker("gpu-01", "http://10.0.0.11:30000", "/opt/sglang/docker", "c1")
W2 = Worker("gpu-02", "http://10.0.0.12:30000", "/opt/sglang/docker", "c2")


def test_the_worker_set_is_left_alone_when_it_is_what_passed():
    commands, fake = members([W1.url, W2.url], (W1, W2), {"gpu-01": worker_snapshot("c1"),
                                                           "gpu-02": worker_snapshot("c2")})
    assert commands == [] and fake.noops


def test_a_worker_that_failed_its_gate_is_removed_through_the_api():
    commands, _ = members([W1.url, W2.url], (W1, W2), {"gpu-01": worker_snapshot("c1"),
                                                        "gpu-02": worker_snapshot("c2", stamp="none")})
    assert [command_text(c) for c in commands] == [
        "python3 -I -c <hostside/roll/gateway_workers.py> /opt/sglang/router/m http://127.0.0.1:30080"]
    assert json.loads(commands[0].connector_arguments["_stdin"]) == [W1.url]


def test_a_first_run_writes_the_set_even_when_it_is_empty():
    commands, _ = members(None, (W1,), {})
    assert json.loads(commands[0].connector_arguments["_stdin"]) == []


def test_a_worker_outside_this_run_keeps_its_membership():
    outside = Worker("gpu-02", W2.url, "/opt/sglang/docker", None)
    commands, fake = members([W1.url, W2.url], (W1, outside), {"gpu-01": worker_snapshot("c1")})
    assert commands == [] and fake.noops


# ---------------------------------------------------------------- the status report

def test_the_status_shows_each_gateways_workers_and_judges_a_gateway_without_healthy_ones():
    from sglang_infra.status import fleetstatus

    healthy = {"slug": "m", "port": 30080, "error": None,
               "workers": [{"url": "http://10.0.0.11:30000", "healthy": True},
                           {"url": "http://10.0.0.12:30000", "healthy": False}]}
    assert fleetstatus.gateway_line("gw-1", healthy) == (
        "gw-1: gateway m :30080: 1/2 workers healthy (http://10.0.0.11:30000 healthy, "
        "http://10.0.0.12:30000 UNHEALTHY)")
    row = {"reachable": True, "serves": False, "gateways": [healthy]}
    assert fleetstatus.problems(row) == []          # a gateway-only host: no container or model of its own
    dead = dict(healthy, workers=[{"url": "http://10.0.0.11:30000", "healthy": False}])
    assert fleetstatus.problems(dict(row, gateways=[dead])) == [("failing", "gateway m has no healthy worker")]


# ---------------------------------------------------------------- no worker answers the network without a key

class InventoryHost:
    """A host of the inventory as gateways.fleet() reads it: its name, groups and data."""

    def __init__(self, name, groups, values):
        self.name, self.groups, self.values = name, groups, values
        self.data = mock.Mock(dict=lambda: values)


def fleet_problems(worker_data=None, gateway=True, gateway_data=None):
    """Every refusal of gateways.fleet() over gpu-01 (with ``worker_data``) and, with ``gateway``, gw-1."""
    from sglang_infra.fleet.gateways import fleet as fleet_of
    from sglang_infra.fleet.hosts import read_fleet

    hosts = [InventoryHost("gpu-01", ["production"], {**DEFAULTS, "ssh_hostname": "10.0.0.11", **(worker_data or {})})]
    if gateway:
        hosts.append(InventoryHost("gw-1", ["router"], {**DEFAULTS, "sglang_require_gpu": False,
                                                         "sglang_router_bind_address": INTERNAL,
                                                         "sglang_trusted_network": True, **(gateway_data or {})}))
    plans = {each.name: resolve(each.name, each.values, converged_snapshot(
        None if each.groups == ["router"] else "rtx4090-2gpu-node"), each.groups) for each in hosts}
    with mock.patch("sglang_infra.fleet.hosts.groups_of", lambda host, path=None: host.groups):
        try:
            fleet_of(plans, read_fleet(hosts, None))
        except DeployDataError as error:
            return error.problems
    return []


def test_a_worker_a_gateway_fronts_without_a_key_is_refused_naming_its_gateway_and_the_fix():
    [problem] = fleet_problems()
    assert problem.startswith("host gpu-01: sglang_api_key_file: None, and this host's API would be published on "
                              "0.0.0.0:30000 (sglang_bind_address), which the gateways of gw-1 reach over the network: "
                              "anyone who reaches it could call every SGLang route, those that load other weights or "
                              "a LoRA adapter and flush the cache included")
    assert "Fix: set sglang_api_key_file (clients and the gateways then send its key), or on a network where " \
        "everyone who reaches the port may call it, sglang_trusted_network = True." in problem
    assert "127.0.0.1" not in problem   # the gateways reach it over the network: loopback is no fix


def test_a_worker_on_an_internal_address_without_a_key_is_refused_too():
    [problem] = fleet_problems({"sglang_bind_address": "10.0.0.11"})
    assert "published on 10.0.0.11:30000 (sglang_bind_address)" in problem


def test_a_standalone_worker_without_a_key_is_refused_unless_it_publishes_on_loopback_only():
    [problem] = fleet_problems(gateway=False)
    assert problem.startswith("host gpu-01: sglang_api_key_file: None, and this host's API would be published on "
                              "0.0.0.0:30000 (sglang_bind_address): anyone who reaches it")
    assert "or sglang_bind_address = '127.0.0.1' when no gateway fronts this host and every client runs on it, or " \
        in problem
    assert fleet_problems({"sglang_bind_address": "127.0.0.1"}, gateway=False) == []
    assert fleet_problems({"sglang_bind_address": "::1"}, gateway=False) == []


def test_a_worker_with_a_key_or_on_a_trusted_network_is_accepted(tmp_path):
    key_file = tmp_path / "api-key"
    key_file.write_text("k3y-0123456789abcdef\n")
    assert fleet_problems({"sglang_api_key_file": str(key_file)},
                          gateway_data={"sglang_api_key_file": str(key_file), "sglang_trusted_network": False}) == []
    assert fleet_problems({"sglang_trusted_network": True}) == []
    assert fleet_problems({"sglang_trusted_network": True}, gateway=False) == []


def test_a_default_inventory_with_a_router_group_and_no_key_is_refused_for_the_worker_and_the_gateway():
    problems = fleet_problems(gateway_data={"sglang_router_bind_address": None, "sglang_trusted_network": False})
    assert [p.split(":")[0] for p in problems] == ["host gw-1", "host gpu-01"]
    assert all(": sglang_api_key_file: None, and this host's " in p for p in problems)
    assert "which the gateways of gw-1 reach over the network" in problems[1]   # though gw-1 is refused itself


def test_the_old_trusted_network_key_is_refused_in_one_line_naming_the_new_one():
    [problem] = check_data("gw-1", {**DEFAULTS, "sglang_router_trusted_network": True})
    assert problem == ("host gw-1: sglang_router_trusted_network: no longer a key of this project: "
                       "sglang_trusted_network took its place. Fix: set sglang_trusted_network instead "
                       "(docs/variables.md says what it covers now) and remove sglang_router_trusted_network.")


# ---------------------------------------------------------------- a sole gateway's restart is said aloud

def gateways_of(count):
    """gw-1's gateways as gateways.fleet() plans them, with ``count`` gateway hosts in front of gpu-01."""
    from sglang_infra.fleet.gateways import fleet as fleet_of
    from sglang_infra.fleet.hosts import read_fleet

    gateway = {**DEFAULTS, "sglang_require_gpu": False, "sglang_router_bind_address": INTERNAL,
               "sglang_trusted_network": True}
    hosts = [InventoryHost("gpu-01", ["production"], {**DEFAULTS, "ssh_hostname": "10.0.0.11",
                                                      "sglang_trusted_network": True}),
             *(InventoryHost(f"gw-{n}", ["router"], gateway) for n in range(1, count + 1))]
    plans = {each.name: resolve(each.name, each.values, converged_snapshot(
        None if each.groups == ["router"] else "rtx4090-2gpu-node"), each.groups) for each in hosts}
    with mock.patch("sglang_infra.fleet.hosts.groups_of", lambda host, path=None: host.groups):
        return fleet_of(plans, read_fleet(hosts, None))["gw-1"].front_door.gateways


def test_a_gateway_is_the_sole_front_only_when_no_other_gateway_host_fronts_its_model():
    assert [g.sole_front for g in gateways_of(1)] == [True]
    assert [g.sole_front for g in gateways_of(2)] == [False]


GATEWAY_FILES = {"/opt/sglang/router/m/compose.yaml": "new", "/opt/sglang/router/m/gate.sh": "g1"}


def gateway_validated(running: bool, sole: bool, turn=None, compose_sha: str = "new", stamped: bool = False):
    """validated's commands for gateway m (on disk: compose.yaml ``old``; its stamp ``stamped`` or not) and the
    warnings it logged."""
    from sglang_infra.operations import gate as gate_ops

    container = {"state": "running", "labels": {}, "image_id": "sha256:i"} if running else None
    files = {"/opt/sglang/router/m": {"compose.yaml": {"sha256": "old"}, "gate.sh": {"sha256": "g1"}}}
    fake = FakeHost({"Snapshot": {"routers": {"m": {"stack": {"container": container, "record": None,
                                                              "current": True},
                                                    "stamp": "d" if stamped else None, "digest": "d"}},
                                  "files": files, "docker": {"images": {"i": {"id": "sha256:i", "labels": {}}}}}})
    try:
        with on_host(fake), mock.patch.object(gate_ops.logger, "warning") as warned:
            fake.state.is_executing = True
            commands = list(gate_ops.validated._inner(
                home="/opt/sglang", image="i", gate="/opt/sglang/router/m/gate.sh",
                files={**GATEWAY_FILES, "/opt/sglang/router/m/compose.yaml": compose_sha}, gateway="m",
                project_dir="/opt/sglang/router/m", compose_sha=compose_sha, sole_front=sole, turn=turn))
    finally:
        factcache.invalidate(fake)
    return commands, [call.args[0] for call in warned.call_args_list]


def test_the_run_says_clients_see_a_sole_gateways_restart():
    commands, said = gateway_validated(running=True, sole=True)
    assert commands and len(said) == 1
    assert "the gateway m restarts (compose.yaml changes) and no other gateway host fronts its model: its clients " \
        "see errors until it is back" in said[0]
    assert gateway_validated(running=True, sole=False)[1] == []    # another gateway host serves meanwhile
    assert gateway_validated(running=False, sole=True)[1] == []    # nothing serves yet: no one sees a restart


def a_turn():
    from sglang_infra.run.gateway_turns import GatewayTurn

    return GatewayTurn(model="m-key", slug="m", directory="/opt/sglang/router/m", url="http://127.0.0.1:30080",
                       key_file=None, ready_within=120)


def test_a_gateways_restart_and_its_gate_are_one_detached_program():
    """#60: a gateway's restart and its gate are one command (before: a restart operation's `up`, then validated's
    gate, two commands: a run lost between them left a restarted gateway ungated)."""
    from pyinfra.api import FunctionCommand

    from sglang_infra.hostside.stack import GATEWAY_SERVICE
    from sglang_infra.operations.stack import leftovers_removed
    from sglang_infra.run.operation import restarted_then_gated, run_gate

    [command] = gateway_validated(running=True, sole=True, turn=a_turn())[0]
    assert isinstance(command, FunctionCommand) and command.function is run_gate
    gate, up = command.args
    assert gate == "bash /opt/sglang/router/m/gate.sh --config-sha new"   # judges only the config it rendered
    assert up.startswith(f"cd /opt/sglang/router/m && {leftovers_removed('sglang-router-m', GATEWAY_SERVICE)} && "
                         "docker compose -f compose.yaml up -d --remove-orphans && ")
    assert "sglang-router-m" in up   # the gateway's own stack record (its compose project), not the server's
    program = restarted_then_gated(up, gate)
    assert "hostside/roll/detach.py" in program and program.index("up -d") < program.index("gate.sh")
    # a new gateway: the same one program, no turn
    [new] = gateway_validated(running=False, sole=False, turn=a_turn())[0]
    assert new.function is run_gate and new.args == command.args


def test_a_gateway_that_runs_its_config_is_gated_alone_or_left_alone():
    from sglang_infra.run.operation import run_gate

    # its worker set changed (its stamp no longer matches): the gate alone, detached, no restart, no turn
    [command] = gateway_validated(running=True, sole=False, turn=a_turn(), compose_sha="old")[0]
    assert command.function is run_gate and command.args == ("bash /opt/sglang/router/m/gate.sh --config-sha old",)
    assert gateway_validated(running=True, sole=False, turn=a_turn(), compose_sha="old", stamped=True)[0] == []


def test_a_running_gateway_another_host_also_fronts_restarts_and_is_gated_in_its_models_turn():
    from pyinfra.api import FunctionCommand

    from sglang_infra.run.gateway_turns import gateway_turn

    [command] = gateway_validated(running=True, sole=False, turn=a_turn())[0]
    assert isinstance(command, FunctionCommand) and command.function is gateway_turn
    turn, up, gate, why = command.args
    assert turn.model == "m-key" and "up -d" in up and why == "compose.yaml changes"
    assert gate == "bash /opt/sglang/router/m/gate.sh --config-sha new"


class TurnHost:
    """A gateway host: records (host, step) in the shared log and yields to the other greenlets on each command."""

    def __init__(self, name, log, up_fails=False, not_ready=False, gate_fails=False):
        self.name, self.log, self.up_fails, self.not_ready = name, log, up_fails, not_ready
        self.gate_fails = gate_fails
        self.current_op_global_arguments, self.messages = {}, []

    def log_styled(self, message, log_func=None, **_):
        self.messages.append(message)

    def run_shell_command(self, command, print_output=False, _stdin=None, **_):
        import gevent

        class Output:
            def __init__(self, out=(), err=()):
                self.stdout_lines, self.stderr_lines = list(out), list(err)

        text = str(command)
        gevent.sleep(0.02)
        if "hostside/roll/detach.py" in text:   # the restart and its gate, one detached program
            assert "( up ) ||" in text and text.index("( up )") < text.index("gate.sh"), text
            self.log.append((self.name, "up"))
            if self.up_fails:
                return False, Output(err=["compose: no such image", UP_FAILED])
            self.log.append((self.name, "gate"))
            if self.gate_fails:
                return False, Output(err=["FAILED: tool calling: no tool call; rolled back to the last good config"])
            return True, Output(["gate: passed"])
        if "hostside/roll/gateway_workers.py" in text:   # ship.command: the program packed, its path in clear
            change = json.loads(_stdin)
            if change.get("view"):
                self.log.append((self.name, "view"))
                return True, Output([json.dumps({"answers": True, "listed": ["w1"], "healthy": ["w1"]})])
            assert change == {"ready_within": 120, "healthy": ["w1"]}
            gevent.sleep(0.1)
            self.log.append((self.name, "ready" if not self.not_ready else "not ready"))
            if self.not_ready:
                return False, Output(err=["gateway_workers: the gateway at x is not ready after 120 s: it does not "
                                          "list w1 healthy"])
            return True, Output(["gateway_workers: ready"])
        raise AssertionError(text)


def turns(hosts, models=None):
    import gevent

    from sglang_infra.run import gateway_turns
    from sglang_infra.run.gateway_turns import GatewayTurn

    state = object()
    models = models or ["m-key"] * len(hosts)
    try:
        jobs = [gevent.spawn(gateway_turns.gateway_turn, state, each, GatewayTurn(
            model=model, slug="m", directory="/opt/sglang/router/m", url="http://127.0.0.1:30080", key_file=None,
            ready_within=120), "up", "bash /opt/sglang/router/m/gate.sh --config-sha c1", "compose.yaml changes")
            for each, model in zip(hosts, models)]
        gevent.joinall(jobs, raise_error=True)
        return [job.value for job in jobs]
    finally:
        gateway_turns._models.clear()


def test_two_gateways_of_one_model_are_never_recreated_at_the_same_time():
    log: list = []
    assert turns([TurnHost("gw-1", log), TurnHost("gw-2", log)]) == [True, True]
    first = log[0][0]
    second = "gw-2" if first == "gw-1" else "gw-1"
    # the second one's turn starts only once the first one passed its gate, answers and lists its workers healthy
    # again
    assert log == [(first, "view"), (first, "up"), (first, "gate"), (first, "ready"), (second, "view"),
                   (second, "up"), (second, "gate"), (second, "ready")]


def test_gateways_of_other_models_restart_in_parallel():
    log: list = []
    assert turns([TurnHost("gw-1", log), TurnHost("gw-2", log)], models=["a", "b"]) == [True, True]
    assert [step for _, step in log[:2]] == ["view", "view"]


@pytest.mark.parametrize("failing,why", [
    ({"up_fails": True}, "docker compose up failed; nothing was gated"),
    ({"gate_fails": True}, "tool calling: no tool call; rolled back to the last good config"),
    ({"not_ready": True}, "not ready after 120 s"),
])
def test_a_failed_turn_stops_the_models_later_turns_and_names_the_gateway(failing, why):
    log: list = []
    bad, good = TurnHost("gw-1", log, **failing), TurnHost("gw-2", log)
    assert turns([bad, good]) == [False, False]
    assert [name for name, _ in log] == ["gw-1"] * len(log)   # gw-2's gateway was never touched
    assert any("gw-1/m failed" in line and why in line for line in bad.messages), bad.messages
    assert any("not restarted" in line and "stopped at gw-1/m: " in line and "keeps serving its old config" in line
               for line in good.messages), good.messages
