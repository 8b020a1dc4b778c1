"""Values the tasks used to work out themselves, now fields of the plan: each equals what its task computed."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import converged_snapshot, pinned_defaults, plan_for

from sglang_infra.fleet.gateways import fleet_worker, with_gateways
from sglang_infra.fleet.hosts import InventoryHost
from sglang_infra.hostside import names
from sglang_infra.hostside.gate.gate import CHECKS_BUDGET
from sglang_infra.machine import platforms
from sglang_infra.plan.resolve import resolve

DEFAULTS = pinned_defaults()
NO_ENGINE = {"cli": None, "api": False, "active": "inactive", "compose_plugin": None, "images": {}, "runtimes": []}


def gateway_plan():
    values = {**DEFAULTS, "ssh_hostname": "10.0.0.11"}
    key = values["sglang_model"]
    worker = fleet_worker(InventoryHost("gpu-01", values, ("production",), True, False),
                          resolve("gpu-01", values, converged_snapshot()))
    gateway_host = resolve("gw-1", {**DEFAULTS, "sglang_require_gpu": False, "sglang_router_bind_address": "10.0.0.5",
                                    "sglang_trusted_network": True}, converged_snapshot(None), ("router",))
    return with_gateways(gateway_host, {key: [worker]})


def test_the_gate_reads_the_servers_metrics_on_the_host():
    plan = plan_for(DEFAULTS)
    assert plan.gate.metrics_url == f"{plan.gate.url}/metrics"


def test_a_turn_lasts_the_readiness_wait_and_the_checks():
    plan = plan_for({**DEFAULTS, "sglang_ready_timeout": 900})
    assert plan.gate.turn_seconds == 900 + CHECKS_BUDGET


def judged_as(name, text):
    """How the gate's files count a file: a gate script by what it judges with, anything else by its sha256."""
    return names.judged_digest(text) if name in names.GATE_SCRIPTS else names.text_digest(text)


def test_the_gate_validates_the_scripts_then_compose_yaml_by_digest():
    plan = plan_for(DEFAULTS)
    written = {f"{plan.paths.home}/{script}": judged_as(script, text) for script, text in plan.scripts.items()}
    written[f"{plan.paths.docker}/{names.COMPOSE_FILE}"] = names.text_digest(plan.compose)
    assert list(plan.gate.files.items()) == list(written.items())


def test_a_gateways_gate_validates_its_scripts_launcher_and_compose_yaml_in_its_directory():
    gateway = gateway_plan().front_door.gateways[0]
    expected = {f"{gateway.dir}/{name}": judged_as(name, text)
                for name, text in {**gateway.scripts, names.COMPOSE_FILE: gateway.compose}.items()}
    assert list(gateway.gate.files.items()) == list(expected.items())
    assert gateway.gate.metrics_url is None   # a gateway's metrics are on its own Prometheus port


def test_dockers_repository_is_worked_out_for_its_platform():
    plan = plan_for({**DEFAULTS, "sglang_docker_source": "docker"}, docker=NO_ENGINE)
    url = f"{plan.engine.apt_url}/{plan.engine.platform.docker_repo_family}"
    assert (plan.engine.repo.key_url, plan.engine.repo.line) == \
        (f"{url}/gpg", f"deb [signed-by={{keyring}}] {url} {plan.engine.platform.codename} stable")
    assert plan.engine.packages == platforms.DOCKER_REPO_PACKAGES


def test_the_distributions_engine_needs_no_repository():
    plan = plan_for({**DEFAULTS, "sglang_docker_source": "distribution"}, docker=NO_ENGINE)
    assert plan.engine.repo is None
    assert plan.engine.packages == platforms.docker_packages(plan.engine.platform, "distribution")


@pytest.mark.parametrize("source", ["distribution", "docker"])
def test_a_working_engine_gets_no_repository_and_no_packages(source):
    plan = plan_for({**DEFAULTS, "sglang_docker_source": source})
    assert (plan.engine.repo, plan.engine.packages) == (None, ())


def test_the_template_values_are_read_where_the_plan_says_alone():
    """HostPlan.template_values is read by render.py and nodegroups._same alone (its comment says so); a value
    another caller needs is a field of its own (the gateway's turn: GatewaySettings.worker_startup_timeout)."""
    root = Path(__file__).resolve().parents[2]
    allowed = {"sglang_infra/plan/render.py", "sglang_infra/plan/resolve.py", "sglang_infra/plan/types.py",
               "sglang_infra/fleet/nodegroups.py"}
    sources = [path for folder in ("sglang_infra", "tasks") for path in (root / folder).rglob("*.py")]
    readers = {str(path.relative_to(root)) for path in sources if "template_values" in path.read_text()}
    assert readers - allowed == set()
