"""Day two on two real hosts already serving (issue #60, #53 items 4 and 6): a tool upgrade restarts nothing; two
runs at once on one host take turns, each gating its own config, failing no more requests than one run alone; an
interrupt stops a run at once, non-zero, naming the host whose gate goes on there by itself; rollout.sh stops at
once on an interrupted canary; a run killed the moment its restart is done leaves its gate (one program with the
restart) to roll back by itself, and status.sh names the host being changed meanwhile."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import tarfile
import time

import pytest

from day_two import DOCKER, Sampler, both, cat, data, results, serving
from harness import (
    PROJECT_DIR,
    PYINFRA,
    _env,
    deploy_with_fault,
    run_deploy,
    start_deploy,
    wait_for,
    wait_for_text,
    write_inventory,
)

CANARY, OTHER = "sg-day2-1", "sg-day2-2"
# The tree the fleet was converged by before this change (the last landing, stop 61): the upgrade's start.
UPGRADE_FROM = "cef8e10"
# Keys of the stand-in profile that tree does not know (none: it knows every one of today's).
NEW_KEYS: tuple[str, ...] = ()
GATE_OP = "Ensure the running config passed test_tool_calling.sh and benchmark.sh (rolled back if not)"
GATE_STARTS = f"--> Starting operation: tasks/stack.py | {GATE_OP}"   # the run's line as its gate begins


def started_at(host) -> str:
    return host.exec(f"docker inspect -f '{{{{.State.StartedAt}}}}' $(cd {DOCKER} && docker compose ps -q sglang)"
                     ).stdout.strip()


def last_gate(host) -> dict:
    return json.loads(cat(host, f"{DOCKER}/.last-gate") or "{}")


def gate_ended(host) -> bool:
    """No gate holds the host's gate lock (a gate run apart from its run, hostside/roll/detach.py)."""
    return host.exec("flock -n /run/sglang/gate.lock true", check=False).returncode == 0


def old_tree(workdir):
    """The project's tree at UPGRADE_FROM, written out of git (nothing of this checkout changes)."""
    tree = workdir / f"tree-{UPGRADE_FROM}"
    if not tree.exists():
        archive = subprocess.run(["git", "archive", UPGRADE_FROM], cwd=PROJECT_DIR, capture_output=True,
                                 check=True).stdout
        tarfile.open(fileobj=io.BytesIO(archive)).extractall(tree)
    return tree


@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    """Two hosts converged by the tree before this change (UPGRADE_FROM), both serving."""
    hosts = {name: testbed.host(name) for name in (CANARY, OTHER)}
    inventory = testbed.inventory(workdir / "day2.py", {"production": [(h, {}) for h in hosts.values()]})
    # the old tree's inventory: the stand-in profile without the keys that tree does not know
    before = write_inventory(workdir / "day2-before.py", {"production": [(h, {}) for h in hosts.values()]},
                             base={k: v for k, v in testbed.standin.items() if k not in NEW_KEYS})
    tree = old_tree(workdir)
    old = subprocess.run([*PYINFRA, "-y", str(before), "deploy.py"], cwd=tree,
                         env=_env({"PYTHONPATH": str(tree)}), capture_output=True, text=True, timeout=900)
    assert old.returncode == 0, (old.stdout + old.stderr)[-4000:]
    return hosts, inventory


@pytest.fixture(scope="module")
def hub():
    from testbed import hub as standin_hub

    return standin_hub.ensure_hub()


def test_an_upgrade_restarts_nothing_gates_nothing_and_asks_the_hub_nothing(fleet, hub):
    """The tool upgraded under a serving fleet: its new checks program (since stop 61: dockerapi's sorted ports,
    which test_tool_calling.sh and benchmark.sh carry) rewrites both scripts, yet the config each worker serves and
    the values it is judged by are the same: no restart, no gate (the stamp cef8e10 wrote is rewritten in this
    version's form, hostside/write/restamp.py), no Hub request, and the next run changes nothing."""
    hosts, inventory = fleet
    before = {name: (started_at(h), results(h), last_gate(h), scripts(h)) for name, h in hosts.items()}
    hub.reset()
    upgraded = run_deploy(inventory)
    assert upgraded.returncode == 0, upgraded.why()
    for name, host in hosts.items():
        started, gated, record, checks = before[name]
        assert started_at(host) == started, name   # no restart
        assert scripts(host) != checks, name        # the upgrade did rewrite the scripts the gate runs
        assert results(host) == gated and last_gate(host) == record, name   # and no gate ran
        assert GATE_OP not in upgraded.changed(name), upgraded.why()
    assert hub.requests() == []
    again = run_deploy(inventory)
    assert again.returncode == 0 and again.changed(CANARY) == [] and again.changed(OTHER) == []
    assert all(results(host) == before[name][1] for name, host in hosts.items())


def scripts(host) -> str:
    """The validation scripts' sha256 on the host."""
    return host.exec("sha256sum /opt/sglang/test_tool_calling.sh /opt/sglang/benchmark.sh").stdout


def test_two_runs_of_one_change_at_once_take_turns_and_fail_no_more_requests_than_one(fleet, workdir, measure):
    hosts, inventory = fleet
    host = hosts[CANARY]
    with Sampler(host) as alone:
        result = run_deploy(inventory, "--limit", CANARY, *data("alone"))
    assert result.returncode == 0, result.why()
    count = results(host)
    with Sampler(host) as met:
        runs = both(inventory, workdir, CANARY, data("met"), data("met"))
    assert [rc for rc, _ in runs] == [0, 0], runs[0][1][-3000:] + runs[1][1][-3000:]
    assert any(f"[{CANARY}] another run is changing this host" in output for _, output in runs)
    assert results(host) == count + 1   # one gate: the second run found the change made
    assert '"met"' in cat(host, f"{DOCKER}/compose.yaml")
    assert host.exec(f"ls {DOCKER} | grep -c candidate", check=False).stdout.strip() == "0"
    measure(f"requests failed: one run alone {alone.failed}/{alone.sent} (outage {alone.outage():.1f} s), "
            f"two runs at once {met.failed}/{met.sent} (outage {met.outage():.1f} s); container events alone "
            f"{[a for _, a in alone.events]}, met {[a for _, a in met.events]}")
    # Exactly what one run alone does to the server: one restart, and no request failed outside its outage (from
    # the old container told to stop to the new one's first answer). The count of failed requests within that
    # one outage depends on where the samples fall in it (0.5 s apart: one more or less), so it is compared
    # through the restarts and where each failure falls, not through the counts themselves.
    assert (alone.starts(), met.starts()) == (1, 1), (alone.events, met.events)
    assert alone.outside_the_restart() == [] and met.outside_the_restart() == [], (alone.samples, met.samples)


def test_two_runs_with_different_data_each_gate_their_own_config(fleet, workdir):
    hosts, inventory = fleet
    host = hosts[CANARY]
    (rc1, out1), (rc2, out2) = both(inventory, workdir, CANARY, data("one"), data("two"), apart=1)
    assert (rc1, rc2) == (0, 0), out1[-3000:] + out2[-3000:]
    for output in (out1, out2):
        assert f"gate[{CANARY}]: passed; this config is now the last known-good one" in output
    assert '"two"' in cat(host, f"{DOCKER}/compose.yaml") == cat(host, f"{DOCKER}/compose.yaml.good")
    assert '"two"' not in cat(host, f"{DOCKER}/compose.yaml.failed")


def test_an_interrupt_stops_the_run_at_once_and_the_gate_ends_on_the_host(fleet, workdir):
    hosts, inventory = fleet
    host = hosts[CANARY]
    log = workdir / "interrupted.log"
    run = start_deploy(inventory, log, "--limit", CANARY, *data("interrupted", STANDIN_LOAD_SECONDS="6"))
    assert wait_for_text(log, GATE_STARTS, timeout=300), log.read_text()[-3000:]
    time.sleep(2)
    run.send_signal(signal.SIGINT)
    stopped = time.monotonic()
    rc = run.wait(timeout=60)
    took = time.monotonic() - stopped
    output = log.read_text()
    assert rc == 130 and took < 5, (rc, took, output[-3000:])
    assert f"with the gate still going on {CANARY}" in output
    assert wait_for(lambda: gate_ended(host), 120)
    assert last_gate(host)["passed"] is True
    assert '"interrupted"' in cat(host, f"{DOCKER}/compose.yaml.good")
    again = run_deploy(inventory, "--limit", CANARY, *data("interrupted", STANDIN_LOAD_SECONDS="6"))
    assert again.returncode == 0 and GATE_OP not in again.changed(CANARY), again.why()


def test_rollout_stops_at_once_on_an_interrupted_canary(fleet, workdir):
    hosts, inventory = fleet
    canary, other = hosts[CANARY], hosts[OTHER]
    good = cat(canary, f"{DOCKER}/compose.yaml")
    other_before = (started_at(other), cat(other, f"{DOCKER}/compose.yaml"))
    log = workdir / "rollout.log"
    with log.open("w") as handle:
        rollout = subprocess.Popen(["bash", "scripts/rollout.sh", "--canary", CANARY, str(inventory),
                                    *data("rollout", STANDIN_FAILURE="tool_call_as_text")],
                                   cwd=PROJECT_DIR, env=_env(), stdout=handle, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    assert wait_for_text(log, GATE_STARTS, timeout=300), log.read_text()[-3000:]
    time.sleep(2)
    os.killpg(rollout.pid, signal.SIGINT)   # as Ctrl-C: the script and its step alike
    rc = rollout.wait(timeout=60)
    output = log.read_text()
    assert rc == 130, output[-3000:]
    assert "rollout: interrupted" in output or "was interrupted" in output
    assert "deploying the other hosts" not in output
    assert (started_at(other), cat(other, f"{DOCKER}/compose.yaml")) == other_before
    # the canary's gate failed by itself after the interrupt, and rolled back
    assert wait_for(lambda: gate_ended(canary), 120)
    assert last_gate(canary)["rolled_back"] is True and cat(canary, f"{DOCKER}/compose.yaml") == good
    assert '"rollout"' in cat(canary, f"{DOCKER}/compose.yaml.failed")


def test_a_run_killed_right_after_the_restart_leaves_its_gate_to_roll_back_and_status_names_the_host(fleet, workdir):
    """#53 item 4, #60: SIGKILL the moment the new container runs (before, the run was then between its restart
    and its gate, two commands). The restart and its gate are one program on the host (operations/gate.py
    validated): the host gates the new config by itself and rolls it back with no next run (before, the failing
    config kept serving, ungated, until a next run)."""
    hosts, inventory = fleet
    host = hosts[CANARY]
    good, record = cat(host, f"{DOCKER}/compose.yaml"), last_gate(host)
    before = serving(host)
    log = workdir / "killed.log"
    run = start_deploy(inventory, log, "--limit", CANARY, *data("killed", STANDIN_FAILURE="tool_call_as_text",
                                                                 STANDIN_LOAD_SECONDS="8"))
    try:
        assert wait_for(lambda: serving(host) not in ("", before), 300, every=0.1), log.read_text()[-3000:]
    finally:
        run.kill()
    run.wait(timeout=30)
    status = subprocess.run(["bash", "scripts/status.sh", str(inventory), "--json"], cwd=PROJECT_DIR,
                            env={k: v for k, v in _env().items() if k != "PYINFRA_YES"}, capture_output=True,
                            text=True, timeout=300, stdin=subprocess.DEVNULL)
    row = {r["host"]: r for r in json.loads(status.stdout)["hosts"]}[CANARY]
    # (its verdict is the worst problem's: the rollout's failed gate before it is "failing")
    assert status.returncode == 1 and any(p.startswith(("changing: ", "ungated: ")) for p in row["problems"]), row
    assert wait_for(lambda: gate_ended(host), 120)
    # the host's own gate judged the new config by itself (a record of its own) and rolled it back
    assert last_gate(host) != record, "no gate ran for the new config"
    assert last_gate(host)["passed"] is False and last_gate(host)["rolled_back"] is True
    assert cat(host, f"{DOCKER}/compose.yaml") == good and '"killed"' in cat(host, f"{DOCKER}/compose.yaml.failed")
    again = run_deploy(inventory, "--limit", CANARY)
    assert again.returncode == 0, again.why()


def power_cycle(host) -> None:
    """The host loses power and boots again, as a container host can: every process killed at once (`docker restart
    -t 0`: SIGKILL, no shutdown), /run (a tmpfs) empty, systemd boots, sshd and the Docker engine start and the
    serving container is restarted by its policy. Its disk is kept (SSH host keys included); its address may change,
    so it is read again and its host key pinned there."""
    from testbed.hosts import NETWORK

    subprocess.run(["docker", "restart", "-t", "0", host.container], check=True, capture_output=True, timeout=120)
    info = json.loads(subprocess.run(["docker", "inspect", host.container], check=True, capture_output=True,
                                     text=True, timeout=60).stdout)[0]
    host.address = info["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]
    # the same host keys (its disk is kept), pinned at the address it came back on
    pinned = [line.split(None, 1)[1] for line in host.known_hosts.read_text().splitlines() if line.strip()]
    host.known_hosts.write_text("".join(f"{host.address} {key}\n" for key in pinned))
    assert wait_for(lambda: host.exec("systemctl is-active ssh docker", check=False).returncode == 0, 120), \
        "the host did not come back with sshd and Docker"


def test_a_host_rebooted_mid_gate_converges_and_is_gated_on_the_next_run(fleet, testbed, workdir):
    """#53 item 6: the host loses power while its gate runs (a good new config). The run fails naming the host; the
    host boots serving the new config, which no gate passed; the next plain run gates it and passes, and the run
    after that changes nothing."""
    hosts, _ = fleet
    host = hosts[CANARY]

    def cycled():
        time.sleep(2)
        power_cycle(host)

    run = deploy_with_fault(testbed.inventory(workdir / "rebooted.py", {"production": [(host, {})]}),
                            workdir / "rebooted.log", GATE_STARTS, cycled,
                            *data("rebooted", STANDIN_LOAD_SECONDS="8"), timeout=300)
    output = run.output
    assert run.reached, output[-3000:]
    assert run.returncode != 0, output[-3000:]
    failed = [line for line in output.splitlines() if line.startswith("--> Failed hosts")]
    assert failed and CANARY in failed[-1], output[-3000:]
    assert '"rebooted"' in cat(host, f"{DOCKER}/compose.yaml")   # the new config was written before the gate
    inventory = testbed.inventory(workdir / "rebooted.py", {"production": [(host, {})]})   # its address now
    again = run_deploy(inventory, *data("rebooted", STANDIN_LOAD_SECONDS="8"))
    assert again.returncode == 0, again.why()
    assert f"gate[{CANARY}]: passed; this config is now the last known-good one" in again.output, again.why()
    record = last_gate(host)
    assert record["passed"] is True and '"rebooted"' in cat(host, f"{DOCKER}/compose.yaml")
    settled = run_deploy(inventory, *data("rebooted", STANDIN_LOAD_SECONDS="8"))
    assert settled.returncode == 0 and settled.changed(CANARY) == [], settled.why()


# The host's own state makes every check fail (not the config): loopback callers of the API port are refused.
REFUSE_API = "iptables -I INPUT -i lo -p tcp --dport 30000 -j REJECT"
ALLOW_API = "iptables -D INPUT -i lo -p tcp --dport 30000 -j REJECT"


def test_a_good_config_that_fails_after_a_restart_is_not_filed_as_failed(fleet, testbed, workdir):
    """#53 item 9: the serving container is killed and restarted by its policy, and its gate then fails through the
    host's state while the config is its own last known-good copy. The good config is not kept as *.failed (before,
    it was, and the next run refused the good config itself); once the host is well again the next run gates it."""
    hosts, _ = fleet
    host = hosts[CANARY]
    inventory = testbed.inventory(workdir / "restarted.py", {"production": [(host, {})]})
    good = cat(host, f"{DOCKER}/compose.yaml")
    assert '"rebooted"' in good and last_gate(host)["passed"] is True   # left by the test above
    before = started_at(host)
    host.exec(f"kill -KILL $(docker inspect -f '{{{{.State.Pid}}}}' $(cd {DOCKER} && docker compose ps -q sglang))")
    assert wait_for(lambda: started_at(host) not in ("", before), 60), "the container was not restarted"
    host.exec(REFUSE_API)
    try:
        # a short readiness wait keeps the failing gate quick (it changes gate.sh, never compose.yaml)
        failed = run_deploy(inventory, *data("rebooted", STANDIN_LOAD_SECONDS="8"), "--data", "sglang_ready_timeout=10")
    finally:
        host.exec(ALLOW_API)
    assert failed.returncode != 0 and last_gate(host)["passed"] is False, failed.why()
    assert cat(host, f"{DOCKER}/compose.yaml") == good
    assert '"rebooted"' not in cat(host, f"{DOCKER}/compose.yaml.failed"), "the good config was filed as failed"
    again = run_deploy(inventory, *data("rebooted", STANDIN_LOAD_SECONDS="8"))
    assert again.returncode == 0, again.why()
    assert f"gate[{CANARY}]: passed; this config is now the last known-good one" in again.output, again.why()


# The serving service's containers on the host, by name (compose's own labels).
SERVICE_CONTAINERS = ("docker ps -a --filter label=com.docker.compose.project=sglang "
                      "--filter label=com.docker.compose.service=sglang --format '{{.Names}}'")


def test_a_host_that_lost_power_mid_recreate_converges_with_one_container(fleet, testbed, workdir):
    """Compose recreates a container by making the new one under a temporary name (<id>_sglang-sglang-1), then
    stopping and removing the old one and renaming the new. Power lost between those steps boots the host with both
    (the old one started again by its restart policy); the next run's `up` then failed "port is already allocated"
    (seen in a whole-suite run). The host loses power the moment the new container is made: the next run converges
    and gates, and the service has its one container under compose's own name."""
    hosts, _ = fleet
    host = hosts[CANARY]
    inventory = testbed.inventory(workdir / "mid-recreate.py", {"production": [(host, {})]})
    since = host.exec("date +%s.%N").stdout.strip()

    def cut_when_made():
        # the engine's own record of the new container's creation (replayed from before the run: no race)
        made = host.exec(f"timeout 120 docker events --since {since} --filter type=container --filter event=create "
                         "--format '{{.Actor.Attributes.name}}' > /root/made & p=$!; for i in $(seq 1200); do "
                         "grep -q '_sglang-sglang-1$' /root/made && break; sleep 0.1; done; kill $p; "
                         "grep -q '_sglang-sglang-1$' /root/made", check=False)
        power_cycle(host)
        return made.returncode == 0

    run = deploy_with_fault(inventory, workdir / "mid-recreate.log", GATE_STARTS, cut_when_made,
                            *data("mid-recreate"), timeout=300)
    assert run.reached and run.fault, run.output[-3000:]
    assert run.returncode != 0, run.output[-3000:]
    inventory = testbed.inventory(workdir / "mid-recreate.py", {"production": [(host, {})]})   # its address now
    again = run_deploy(inventory, *data("mid-recreate"))
    assert again.returncode == 0, again.why()
    assert f"gate[{CANARY}]: passed; this config is now the last known-good one" in again.output, again.why()
    assert host.exec(SERVICE_CONTAINERS).stdout.split() == ["sglang-sglang-1"]
    assert '"mid-recreate"' in cat(host, f"{DOCKER}/compose.yaml") and last_gate(host)["passed"] is True
