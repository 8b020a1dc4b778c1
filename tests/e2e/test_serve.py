"""The stack starts, serves and passes the gate; a re-run restarts nothing and
runs no benchmark; each failure mode of the stand-in server is caught by the
right check and the host rolls back and serves again; a model switch
recreates; a failing canary stops the rollout."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from harness import PROJECT_DIR, run_deploy, run_host_checks, wait_for

CANARY, OTHER = "sg-serve-1", "sg-serve-2"
DOCKER = "/opt/sglang/docker"
QUALITY_MODEL = "qwen3.6-27b-awq-int4"  # served from standin-org/tiny-chat-quality (tests/support/testbed/hub.py)


def started_at(host) -> str:
    return host.exec(f"docker inspect -f '{{{{.State.StartedAt}}}} {{{{.Id}}}}' "
                     f"$(cd {DOCKER} && docker compose ps -q sglang)").stdout.strip()


def results(host) -> int:
    return int(host.exec("ls /opt/sglang/results | wc -l").stdout)


def sha(host, path) -> str:
    return host.exec(f"sha256sum {path}").stdout.split()[0]


@pytest.fixture(scope="module")
def served(testbed, workdir):
    # The second host is reached as a non-root login with passwordless sudo.
    hosts = {name: testbed.host(name, login="deploy" if name == OTHER else "root") for name in (CANARY, OTHER)}
    inventory = testbed.inventory(workdir / "serve.py", {"production": [(h, {}) for h in hosts.values()]})
    first = run_deploy(inventory)
    assert first.returncode == 0, first.output[-4000:]
    return hosts, inventory, first


def failing(mode: str, timeout: int = 12) -> list[str]:
    env = {"STANDIN_LOAD_SECONDS": "2", "STANDIN_FAILURE": mode}
    return ["--data", f"sglang_extra_env={json.dumps(env)}", "--data", f"sglang_ready_timeout={timeout}"]


def test_converge_starts_the_stack_and_passes_the_gate(served):
    hosts, _, first = served
    for name, host in hosts.items():
        assert f"gate[{name}]: passed; this config is now the last known-good one" in first.output
        assert host.exec(f"cd {DOCKER} && docker compose ps --format '{{{{.State}}}}'").stdout.split() == ["running"]
        assert results(host) == 1


def test_validation_scripts_run_by_hand(served):
    host = served[0][CANARY]
    summary = json.loads(host.exec("bash /opt/sglang/test_tool_calling.sh").stdout)
    assert summary["ok"] and summary["tool_calls"] == 1


@pytest.fixture(scope="module")
def rerun(served):
    hosts, inventory, _ = served
    host = hosts[CANARY]
    before = (started_at(host), results(host))
    result = run_deploy(inventory)
    return result, before, (started_at(host), results(host))


def test_rerun_changes_nothing(rerun):
    result, _, _ = rerun
    assert result.returncode == 0 and result.changed(CANARY) == [] and result.changed(OTHER) == []


def test_rerun_restarts_nothing_and_runs_no_benchmark(rerun):
    _, before, after = rerun
    assert after == before


def test_validate_always_runs_the_gate_without_a_restart(served, rerun):
    hosts, inventory, _ = served
    host = hosts[CANARY]
    before = started_at(host)
    count = results(host)
    result = run_deploy(inventory, "--limit", CANARY, "--data", "sglang_validate=always")
    assert result.returncode == 0, result.output[-3000:]
    assert started_at(host) == before
    assert results(host) == count + 1


# A crash: the server's main process killed; Docker's restart policy starts it again within the same boot.
CRASH = "kill -KILL"


def crash(host) -> None:
    def state() -> tuple[int, bool, int]:
        got = host.exec(f"docker inspect -f '{{{{.RestartCount}}}} {{{{.State.Running}}}} {{{{.State.Pid}}}}' "
                        f"$(cd {DOCKER} && docker compose ps -aq sglang)").stdout.split()
        return int(got[0]), got[1] == "true", int(got[2])

    def answers() -> bool:
        got = host.exec("bash /opt/sglang/test_tool_calling.sh", check=False, timeout=120).stdout
        return got.startswith("{") and json.loads(got).get("ok") is True

    restarts, _, pid = state()
    host.exec(f"kill -KILL {pid}")
    assert wait_for(lambda: (lambda now: now[0] > restarts and now[1])(state()), 60), state()
    assert wait_for(answers, 60, 2)   # serving again before the checks judge it


@pytest.mark.parametrize("how", ["docker compose stop", "docker compose restart", CRASH],
                         ids=["stop", "restart", "crash"])
def test_every_start_or_restart_is_followed_by_the_gate(served, rerun, workdir, how):
    """A container stopped, restarted or crashed (its process killed, restarted by its policy) behind the deploy's
    back: the next run starts it and runs the gate. After the crash the host checks fail the gate's stamp alone (it
    names the container as the last gate saw it: hostside/gate/stamp.py); once the run gated it, they pass."""
    hosts, inventory, _ = served
    host = hosts[CANARY]
    count = results(host)
    if how == CRASH:
        crash(host)
        checks = run_host_checks(inventory, workdir)
        assert checks.failed(CANARY) == {"test_the_last_gate_passed_for_what_runs_now"}, checks.output[-3000:]
        assert checks.failed(OTHER) == set()
    else:
        host.exec(f"cd {DOCKER} && {how}")
    if how == "docker compose stop":
        checks = run_host_checks(inventory, workdir)
        assert checks.returncode != 0
        # (The last gate record still names this config and container: it passed, then the container stopped.)
        assert {"test_the_server_container_runs_and_is_not_unhealthy",
                "test_the_api_answers_with_the_served_model"} <= checks.failed(CANARY), checks.output[-3000:]
        assert checks.failed(OTHER) == set()
    result = run_deploy(inventory, "--limit", CANARY)
    assert result.returncode == 0, result.output[-3000:]
    assert "tasks/stack.py | Ensure the running config passed test_tool_calling.sh and benchmark.sh " \
           "(rolled back if not)" in result.changed(CANARY)
    assert results(host) == count + 1
    if how == CRASH:
        assert run_host_checks(inventory, workdir).failed(CANARY) == set()
    again = run_deploy(inventory, "--limit", CANARY)
    assert again.returncode == 0 and again.changed(CANARY) == []


FAILURES = {
    "repetition_loop": "test_tool_calling.sh: tool_calling FAILED: reasoning_content is a repetition loop",
    "tool_call_as_text": "test_tool_calling.sh: tool_calling FAILED: finish_reason is 'stop'",
    "slow": "benchmark.sh: benchmark FAILED",
    "crash_at_start": "the container is not running",
    "never_ready": "ready FAILED: not ready after 12 s (waiting for health, last answer 503)",
    # /health answers but no completion ever returns: the wait still ends at sglang_ready_timeout (12 s here).
    "never_completes": "ready FAILED: not ready after 12 s (waiting for completion",
}


@pytest.mark.parametrize("mode", FAILURES)
def test_failure_is_caught_and_the_host_rolls_back(served, rerun, mode):
    hosts, inventory, _ = served
    host = hosts[CANARY]
    good = sha(host, f"{DOCKER}/compose.yaml")
    result = run_deploy(inventory, "--limit", CANARY, *failing(mode))
    assert result.returncode != 0
    assert FAILURES[mode] in result.output, result.output[-4000:]
    assert "Rolled back to the last known-good config, which serves and validates again" in result.output
    assert f"--> Failed hosts (1 of 2): {CANARY}" in result.output
    assert sha(host, f"{DOCKER}/compose.yaml") == good
    assert f"STANDIN_FAILURE: \"{mode}\"" in host.exec(f"cat {DOCKER}/compose.yaml.failed").stdout
    assert json.loads(host.exec("bash /opt/sglang/test_tool_calling.sh").stdout)["ok"]


def test_a_config_that_failed_is_not_applied_again(served, rerun):
    """The last failure's data, run again (as a cron'd re-run would): refused on that host, nothing restarted."""
    hosts, inventory, _ = served
    host = hosts[CANARY]
    before = (started_at(host), results(host), sha(host, f"{DOCKER}/compose.yaml"))
    result = run_deploy(inventory, "--limit", CANARY, *failing(list(FAILURES)[-1]))
    assert result.returncode != 0
    assert "refused: this config failed its gate on this host before" in result.output, result.output[-3000:]
    assert "--data sglang_retry_failed=True" in result.output
    assert (started_at(host), results(host), sha(host, f"{DOCKER}/compose.yaml")) == before


def test_after_a_rollback_the_good_data_restarts_and_validates_nothing(served, rerun):
    hosts, inventory, _ = served
    host = hosts[CANARY]
    before = (started_at(host), results(host))
    result = run_deploy(inventory, "--limit", CANARY)
    assert result.returncode == 0
    # Only gate.sh differs (the failing runs rendered it with a shorter ready timeout).
    assert result.changed(CANARY) == ["tasks/stack.py | Ensure /opt/sglang/gate.sh is up to date"]
    assert (started_at(host), results(host)) == before


def test_model_switch_recreates_the_container(served, rerun):
    hosts, inventory, _ = served
    host = hosts[CANARY]
    before = started_at(host)
    result = run_deploy(inventory, "--limit", CANARY, "--data", f"sglang_model={QUALITY_MODEL}")
    assert result.returncode == 0, result.output[-3000:]
    after = started_at(host)
    assert after.split()[1] != before.split()[1]
    labels = host.exec(f"cd {DOCKER} && docker compose ps --format '{{{{.Labels}}}}'").stdout
    assert "sglang.model=standin-org/tiny-chat-quality@" in labels
    back = run_deploy(inventory, "--limit", CANARY)
    assert back.returncode == 0


def test_failing_canary_stops_the_rollout(served, rerun, workdir):
    hosts, inventory, _ = served
    other = hosts[OTHER]
    before = (sha(other, f"{DOCKER}/compose.yaml"), started_at(other))
    env = dict(os.environ, PYTHONPATH=str(PROJECT_DIR))
    proc = subprocess.run(["bash", "scripts/rollout.sh", "--canary", CANARY, str(inventory), *failing("slow")],
                          cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode != 0
    assert f"rollout: the canary ({CANARY}) failed; stopped before the other hosts" in proc.stderr
    assert (sha(other, f"{DOCKER}/compose.yaml"), started_at(other)) == before


def test_passing_canary_rolls_out_to_the_others(served, rerun):
    hosts, inventory, _ = served
    env = dict(os.environ, PYTHONPATH=str(PROJECT_DIR))
    proc = subprocess.run(["bash", "scripts/rollout.sh", "--canary", CANARY, str(inventory),
                           "--data", "sglang_benchmark_concurrency=4"],
                          cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    for name, host in hosts.items():
        assert "--concurrency 4" in host.exec("cat /opt/sglang/benchmark.sh").stdout, name
