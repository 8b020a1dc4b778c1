"""One real virtual machine (testbed/vm.py: QEMU, a stock Debian kernel, its own systemd) converged with the run's
stand-ins, keyed (API keys on, a peer door), as the container hosts are: `scripts/check.sh` passes and a re-run
changes nothing; then the guest reboots and, with no deploy run, comes back serving: the units the deploy enabled
(Docker, node exporter, the peer door's nginx) are started by systemd at boot, the stack's restart policy brings the
serving container back, the tool-call check answers through its port with the key, `scripts/check.sh` passes whole
(the stamp still names the container the daemon started at the new boot: hostside/gate/stamp.py) and a run of the deploy
changes nothing. (A crash within one boot, the container's process killed and restarted by its policy, needs no
VM: tests/e2e/test_serve.py shows it asks for the gate.) What a container host cannot show, because it shares this
machine's kernel and is never booted: the guest's own kernel reports fs.protected_hardlinks = 1 (as the deploy
requires) and loads no NVIDIA module, which the deploy of a GPU-less host accepts."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from harness import PROJECT_DIR, run_deploy, wait_for

NAME = "sg-vm-1"
KEY = "vm-apikey-0123456789abcdef0123456789"
PEER_KEY = "vm-peerkey-0123456789abcdef0123456789"
DOCKER = "/opt/sglang/docker"
# The units the deploy enables; after a reboot systemd alone must start them.
UNITS = ("docker.service", "prometheus-node-exporter.service", "nginx.service")
# Seconds the stack may take after SSH answers to serve again (dockerd starting, then the container restarted).
SERVE_AGAIN_TIMEOUT = 240


def check_sh(inventory) -> subprocess.CompletedProcess:
    """`scripts/check.sh INVENTORY` as an operator runs it (its -rA lists every check's outcome)."""
    return subprocess.run(["bash", "scripts/check.sh", str(inventory)], cwd=PROJECT_DIR, capture_output=True,
                          text=True, timeout=900)


def outcome_checks(output: str, outcome: str) -> set[str]:
    """The checks that -rA lists with ``outcome`` (PASSED, FAILED, ERROR)."""
    return {line.split("::", 1)[1].split("[", 1)[0] for line in output.splitlines()
            if line.startswith(f"{outcome} ") and "::" in line}


def tool_call(host) -> dict:
    """The deploy's tool-call check run by hand on the host: through the server's port, with the key from its file."""
    got = host.exec("bash /opt/sglang/test_tool_calling.sh", check=False, timeout=120)
    try:
        return json.loads(got.stdout)
    except ValueError:
        return {"ok": False, "output": (got.stdout + got.stderr)[-500:]}


def serving_container(host) -> dict:
    ids = host.exec(f"cd {DOCKER} && docker compose ps -aq", check=False).stdout.split()
    if not ids:
        return {}
    return json.loads(host.exec(f"docker inspect {ids[0]}").stdout)[0]


@pytest.fixture(scope="module")
def vm(testbed, measure):
    host = testbed.vm(NAME)
    measure(f"vm: {NAME} booted to SSH in {host.boot_seconds:.0f} s under {host.accel.upper()}")
    print(f"\nvm: accelerator {host.accel}, booted to SSH in {host.boot_seconds:.0f} s")
    return host


@pytest.fixture(scope="module")
def converged(vm, testbed, workdir, measure):
    (workdir / "vm-api-key").write_text(KEY + "\n")
    (workdir / "vm-peer-key").write_text(PEER_KEY + "\n")
    inventory = testbed.inventory(workdir / "vm.py", {"production": [(vm, {
        "sglang_api_key_file": str(workdir / "vm-api-key"), "sglang_peer_key_file": str(workdir / "vm-peer-key"),
        # The stand-in decodes on the guest's emulated CPU: under TCG it made 201 of its 300 tok/s baseline.
        "sglang_benchmark_min_fraction": 0.05})]})
    began = time.monotonic()
    first = run_deploy(inventory)
    measure(f"vm: first converge {time.monotonic() - began:.0f} s ({vm.accel})")
    assert first.returncode == 0, first.why() + "\n--- console ---\n" + vm.console()
    return vm, inventory, first


@pytest.fixture(scope="module")
def rebooted(converged, measure):
    host, inventory, _ = converged
    before = serving_container(host)
    seconds = host.reboot()
    measure(f"vm: reboot to SSH {seconds:.0f} s ({host.accel})")
    began = time.monotonic()
    answer = wait_for(lambda: (lambda got: got if got.get("ok") else None)(tool_call(host)), SERVE_AGAIN_TIMEOUT, 5)
    measure(f"vm: serving again {time.monotonic() - began:.0f} s after SSH answered")
    return host, inventory, before, answer or tool_call(host)


def test_the_host_is_a_vm_with_its_own_kernel(vm):
    assert vm.accel in ("kvm", "tcg")
    assert vm.exec("systemd-detect-virt").stdout.strip() == ("kvm" if vm.accel == "kvm" else "qemu")
    assert vm.exec("cat /proc/1/comm").stdout.strip() == "systemd"
    assert vm.exec("cat /proc/sys/kernel/random/boot_id").stdout != \
        open("/proc/sys/kernel/random/boot_id").read()


def test_the_converge_passes_the_gate_with_the_key(converged):
    _, _, first = converged
    assert f"gate[{NAME}]: passed" in first.output, first.why()
    assert KEY not in first.output and PEER_KEY not in first.output


def test_check_sh_passes(converged):
    _, inventory, _ = converged
    checked = check_sh(inventory)
    assert checked.returncode == 0, checked.stdout[-4000:]
    assert {"test_the_last_gate_passed_for_what_runs_now", "test_the_node_exporter_runs_with_the_deploys_flags",
            "test_the_peer_door_runs_its_config_on_its_address_alone"} <= outcome_checks(checked.stdout, "PASSED")


def test_a_rerun_changes_nothing(converged):
    host, inventory, _ = converged
    again = run_deploy(inventory)
    assert again.returncode == 0 and again.changed(NAME) == [], again.why()


def test_the_kernel_protects_hardlinks_as_the_deploy_requires(converged):
    host, _, _ = converged
    assert host.exec("sysctl -n fs.protected_hardlinks").stdout.strip() == "1"


def test_no_nvidia_module_is_loaded_and_the_gpu_less_host_serves(converged):
    host, _, first = converged
    assert host.exec("grep -c '^nvidia' /proc/modules", check=False).stdout.strip() == "0"
    assert host.exec("test -e /proc/driver/nvidia", check=False).returncode != 0
    assert f"gate[{NAME}]: passed" in first.output


def test_the_units_the_deploy_enabled_are_enabled_not_only_started(converged):
    host, _, _ = converged
    for unit in UNITS:
        assert host.exec(f"systemctl is-enabled {unit}", check=False).stdout.strip() == "enabled", unit


def test_after_a_reboot_the_tool_call_check_answers_through_its_port_with_the_key(rebooted):
    _, _, _, answer = rebooted
    assert answer.get("ok") and answer.get("tool_calls") == 1, answer


def test_after_a_reboot_systemd_started_every_unit_the_deploy_enabled(rebooted):
    host, _, _, _ = rebooted
    for unit in UNITS:
        assert host.exec(f"systemctl is-active {unit}", check=False).stdout.strip() == "active", unit


def test_after_a_reboot_the_restart_policy_brought_the_same_container_back(rebooted):
    host, _, before, _ = rebooted
    after = serving_container(host)
    assert after["Id"] == before["Id"], "the container was recreated, not restarted"
    assert after["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert after["State"]["Running"] and after["State"]["StartedAt"] != before["State"]["StartedAt"]


def test_after_a_reboot_the_api_still_refuses_a_client_without_the_key(rebooted):
    host, _, _, _ = rebooted
    probe = "python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:30000/v1/models', timeout=10)\""
    refused = host.exec(probe, check=False)
    assert refused.returncode != 0 and "401" in refused.stderr, refused.stderr[-500:]


def test_after_a_reboot_check_sh_passes_whole_with_no_deploy(rebooted):
    """A reboot asks for no deploy: the gate's record names its boot, and the stamp still names the container the
    Docker daemon started again at this boot (hostside/gate/stamp.py as_gated),
    so every check passes, the stamp's too."""
    host, inventory, _, _ = rebooted
    record = json.loads(host.exec(f"cat {DOCKER}/.last-gate").stdout)
    assert record["boot_id"] != host.exec("cat /proc/sys/kernel/random/boot_id").stdout.strip()
    checked = check_sh(inventory)
    assert checked.returncode == 0, checked.stdout[-4000:]
    assert {"test_the_last_gate_passed_for_what_runs_now", "test_the_node_exporter_runs_with_the_deploys_flags",
            "test_docker_engine_is_running_and_enabled", "test_the_peer_door_runs_its_config_on_its_address_alone",
            "test_the_server_container_runs_and_is_not_unhealthy",
            "test_the_api_answers_with_the_served_model"} <= outcome_checks(checked.stdout, "PASSED")


def test_after_a_reboot_a_rerun_changes_nothing(rebooted):
    """The deploy after the reboot finds the host as it wants it: no gate, no restart, no change."""
    host, inventory, before, _ = rebooted
    started = serving_container(host)["State"]["StartedAt"]
    again = run_deploy(inventory)
    assert again.returncode == 0 and again.changed(NAME) == [], again.why()
    assert f"gate[{NAME}]" not in again.output
    assert serving_container(host)["State"]["StartedAt"] == started


def test_after_a_reboot_the_kernel_still_protects_hardlinks(rebooted):
    host, _, _, _ = rebooted
    assert host.exec("sysctl -n fs.protected_hardlinks").stdout.strip() == "1"
