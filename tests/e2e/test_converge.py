"""Converge a fleet of fresh hosts in two groups, molecule-style: converge,
converge again and require zero changes, then verify with the host checks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from harness import PROJECT_DIR, run_deploy, run_dry, run_host_checks, with_trust

PRODUCTION = ("sg-prod-1", "sg-prod-2")
QUALITY = ("sg-qual-1",)
FIXED_ID = 950  # the quality group pins the account's ids, as a fleet would


@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    # sg-prod-2 is reached as a non-root login with passwordless sudo, as real servers mostly are.
    hosts = {name: testbed.host(name, login="deploy" if name == "sg-prod-2" else "root")
             for name in (*PRODUCTION, *QUALITY)}
    for host in hosts.values():
        host.exec("useradd --create-home --shell /bin/bash alice")
    inventory = testbed.inventory(workdir / "fleet.py", {
        "production": [(hosts[n], {"sglang_admins": ["alice"]}) for n in PRODUCTION],
        "quality": [(hosts[n], {"sglang_uid": FIXED_ID, "sglang_gid": FIXED_ID}) for n in QUALITY],
    })
    first = run_deploy(inventory)
    second = run_deploy(inventory)
    return hosts, inventory, first, second


def test_first_converge_succeeds_on_every_host(fleet):
    hosts, _, first, _ = fleet
    assert first.returncode == 0, first.why(3000)
    for name in hosts:
        assert first.changed(name), f"{name} reported no change on a fresh host"
        assert not first.errors(name)


def test_first_converge_installs_docker_from_the_distribution(fleet):
    _, _, first, _ = fleet
    op = "tasks/docker_engine.py | Ensure the Docker engine and compose v2 are installed (distribution packages)"
    assert set(first.statuses[op].values()) == {"Success"}


@pytest.mark.parametrize("name", (*PRODUCTION, *QUALITY))
def test_second_converge_changes_nothing(fleet, name):
    _, _, _, second = fleet
    assert second.returncode == 0, second.output[-3000:]
    assert name in second.hosts()
    assert second.changed(name) == []


def test_dry_run_of_a_converged_fleet_plans_nothing(fleet):
    _, inventory, _, _ = fleet
    returncode, plan, output = run_dry(inventory)
    assert returncode == 0, output[-3000:]
    assert len(plan) >= 10  # every task's operations were planned
    assert {op: hosts for op, hosts in plan.items() if hosts} == {}


@pytest.fixture(scope="module")
def checks(fleet, workdir):
    return run_host_checks(fleet[1], workdir)


@pytest.mark.parametrize("name", (*PRODUCTION, *QUALITY))
def test_host_checks_pass(checks, name):
    assert checks.passed(name), checks.output[-3000:]
    assert checks.failed(name) == set(), checks.output[-3000:]


@pytest.fixture(scope="module")
def control_side(tmp_path_factory):
    """The project as an operator installs the control side: a copy of the checkout with a FRESH .venv made from
    requirements.txt alone (pip's cache may serve the wheels), nothing of requirements-test.txt."""
    root = tmp_path_factory.mktemp("operator") / "sglang-hosts"
    shutil.copytree(PROJECT_DIR, root, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".sandbox", ".lanes", "bench", "__pycache__", ".*_cache"))
    subprocess.run(["python3", "-m", "venv", str(root / ".venv")], check=True, timeout=300)
    pip = subprocess.run([str(root / ".venv" / "bin" / "pip"), "install", "-q", "-r", "requirements.txt"], cwd=root,
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    return root


def test_check_sh_runs_from_a_venv_of_the_control_side_alone(fleet, control_side):
    """scripts/check.sh, from that copy and its venv, against the converged fleet: every host's checks pass."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(["bash", "scripts/check.sh", str(fleet[1])], cwd=control_side, env=env,
                          capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    outcomes = [line.split()[0] for line in output.splitlines() if line.startswith(("PASSED ", "FAILED ", "ERROR "))]
    assert outcomes and set(outcomes) == {"PASSED"}, output[-3000:]
    for name in (*PRODUCTION, *QUALITY):
        assert any(line.startswith("PASSED ") and f"[{name}]" in line for line in output.splitlines()), name


@pytest.mark.parametrize("name", PRODUCTION)
def test_production_hosts_serve_the_production_model(fleet, name):
    host = fleet[0][name]
    config = json.loads(host.exec("docker compose --project-directory /opt/sglang/docker config --format json").stdout)
    command = config["services"]["sglang"]["command"]
    # The stand-in registry maps the production key to a stand-in repo (tests/support/testbed/hub.py).
    assert any(arg.startswith("--model-path=/hf-cache/hub/models--standin-org--tiny-chat/snapshots/")
               for arg in command)
    assert "--served-model-name=qwen3.6-35b-a3b" in command


def test_quality_host_serves_the_quality_model_with_fixed_ids(fleet):
    host = fleet[0]["sg-qual-1"]
    config = json.loads(host.exec("docker compose --project-directory /opt/sglang/docker config --format json").stdout)
    command = config["services"]["sglang"]["command"]
    assert any(arg.startswith("--model-path=/hf-cache/hub/models--standin-org--tiny-chat-quality/snapshots/")
               for arg in command)
    assert "--served-model-name=qwen3.6-27b" in command
    assert host.exec("id -u sglang; id -g sglang").stdout.split() == [str(FIXED_ID), str(FIXED_ID)]


def test_admin_can_write_to_the_hub_and_the_group_is_inherited(fleet):
    host = fleet[0]["sg-prod-1"]
    host.exec("su alice -c 'umask 002; mkdir -p /opt/sglang/hf-cache/hub/models--a--b && "
              "echo w > /opt/sglang/hf-cache/hub/models--a--b/file'")
    assert host.exec("stat -c '%G' /opt/sglang/hf-cache/hub/models--a--b/file").stdout.strip() == "sglang"
    host.exec("rm -rf /opt/sglang/hf-cache/hub/models--a--b")


def test_compose_renders_every_runbook_flag_with_its_reason(fleet):
    # No GPU on a test host: tp-size 1, the model's own dtype, no custom all-reduce to disable.
    text = fleet[0]["sg-prod-1"].exec("cat /opt/sglang/docker/compose.yaml").stdout
    assert "[derived: 0 GPUs found by nvidia-smi]" in text
    for flag in ("--mamba-full-memory-ratio=0.9", "--mem-fraction-static=0.85",
                 "--allow-auto-truncate", "--cuda-graph-backend-prefill=disabled",
                 "--reasoning-parser=qwen3", "--tool-call-parser=qwen3_coder", "--context-length=262144",
                 "--tp-size=1"):
        lines = text.splitlines()
        index = next(i for i, line in enumerate(lines) if flag in line)
        assert lines[index - 1].strip().startswith("# "), f"{flag} has no reason comment above it"
    for debug in ("--log-level=debug", "--log-requests", "--log-requests-level=3"):
        assert f"# - {debug}\n" in text


def test_sandbox_inventory_targets_the_sandbox_state(testbed, fleet, workdir):
    """inventory.py with no hosts configured reads the sandbox state file."""
    host = fleet[0]["sg-prod-1"]
    state = workdir / "sandbox-hosts.json"
    # The sandbox declares its network trusted in the data it writes (testbed/sandbox.py), as with_trust() does.
    state.write_text(json.dumps([{**host.to_json(), "data": with_trust(testbed.standin)}]))
    result = run_deploy(__import__("harness").PROJECT_DIR / "inventory.py", "--data", 'sglang_admins=["alice"]',
                        env={"SGLANG_SANDBOX_STATE": str(state)})
    assert result.returncode == 0, result.why(3000)
    assert result.hosts() == {"sg-prod-1"}
    assert result.changed("sg-prod-1") == []


def _checks_with(testbed, workdir, name, host, strict, known_hosts):
    inventory = testbed.inventory(workdir / f"checks_{strict}.py", {"production": [(host, {
        "sglang_admins": ["alice"], "ssh_strict_host_key_checking": strict,
        "ssh_known_hosts_file": str(known_hosts)})]})
    return run_host_checks(inventory, workdir)


def test_the_checks_connect_as_the_deploy_does_with_accept_new(testbed, fleet, workdir):
    """A host not yet in known_hosts, under accept-new: the deploy connects, so do the checks."""
    hosts = fleet[0]
    empty = workdir / "known_hosts.empty"
    empty.write_text("")
    report = _checks_with(testbed, workdir, "sg-prod-1", hosts["sg-prod-1"], "accept-new", empty)
    assert report.returncode == 0 and report.passed("sg-prod-1"), report.output[-3000:]
    assert empty.read_text() == ""  # read-only: nothing learned is saved


def test_an_unknown_host_key_is_one_line_with_the_fix(testbed, fleet, workdir):
    hosts = fleet[0]
    empty = workdir / "known_hosts.none"
    empty.write_text("")
    report = _checks_with(testbed, workdir, "sg-prod-1", hosts["sg-prod-1"], "yes", empty)
    assert report.returncode != 0
    lines = [line for line in report.output.splitlines() if line.startswith("host sg-prod-1:")]
    assert len(lines) == 1 and "its SSH host key is unknown" in lines[0] and "ssh-keyscan" in lines[0], \
        report.output[-3000:]
    assert "Traceback" not in report.output and "ERROR at setup" not in report.output
