"""A multi-node group (issue 34) on real test hosts with the stand-in's multi-node protocol: two hosts serve one
model as a group (rank 0 answers only once rank 1 joined), one more worker of the same model, and a gateway host
with the REAL gateway in front of both (the group is one worker: rank 0's URL).

- The group serves with --tp-size twice the per-host GPUs, the gate passes through rank 0 only, rank 1 is stamped
  after it; the gateway lists rank 0 and the other worker, never rank 1. A second run changes nothing.
- A config change of the group under steady load through the gateway: both members restarted (rank 1 first, rank 0
  last), no failed request, no cut stream.
- A config whose gate fails on the group leaves both members on the last good config, started again together.
- rank 1's container killed: the next ordinary run recreates both members and the group serves again.
- rank 0's container restarted alone (issue 40): its /health answers 503 for good (the stand-in, as SGLang), status.sh
  and check.sh name the group failing within 60 s; the next ordinary run recreates both members (rank 0 last), gates
  the group, exits 0 and marks no config failed; a run after it changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from harness import PROJECT_DIR, SETTLED_OP, planned, run_deploy, run_host_checks
from rolling_load import Load, gateway_workers
from sglang_infra.hostside import names

G0, G1, SOLO, GW = "sg-grp-0", "sg-grp-1", "sg-grp-solo", "sg-grp-gw"
GROUP = (G0, G1)
PORT = 30080
MODEL = "qwen3.6-35b-a3b"
DOCKER = "/opt/sglang/docker"
ENV = {"STANDIN_LOAD_SECONDS": "2"}


@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    hosts = {name: testbed.host(name) for name in (G0, G1, SOLO, GW)}

    def inventory(file, env=None, **data):
        values = {"sglang_drain_timeout": 30, "sglang_extra_env": {**ENV, **(env or {})}, **data}
        group = {**values, "sglang_node_group": "ds-a"}
        # the other worker keeps its own config: only the group's data change in these tests
        solo = {"sglang_drain_timeout": 30, "sglang_extra_env": ENV}
        return testbed.inventory(workdir / file, {
            "production": [(hosts[G0], group), (hosts[G1], group), (hosts[SOLO], solo)],
            "router": [(hosts[GW], {"sglang_router_bind_address": hosts[GW].address})]})

    first = run_deploy(inventory("groups.py"))
    return hosts, inventory, first


def container(host) -> dict:
    found = host.exec(f"cd {DOCKER} && docker inspect $(docker compose ps -aq sglang)").stdout
    return json.loads(found)[0] if found.strip() else {}


def started(host) -> str:
    return container(host).get("State", {}).get("StartedAt", "")


def command(host) -> list[str]:
    return container(host).get("Config", {}).get("Cmd") or []


def env(host) -> str:
    return json.dumps(container(host).get("Config", {}).get("Env") or [])


def url_of(hosts, name) -> str:
    return f"http://{hosts[name].address}:30000"


def listed(hosts):
    return gateway_workers(f"http://{hosts[GW].address}:{PORT}")


def test_a_group_of_two_serves_with_twice_the_gpus_gated_through_rank_0(fleet):
    hosts, _, first = fleet
    assert first.returncode == 0, first.why(4000)
    for rank, name in enumerate(GROUP):
        args = command(hosts[name])
        assert "--tp-size=2" in args, args            # 1 per stand-in host (no GPU), times 2 members
        assert "--nnodes=2" in args and f"--node-rank={rank}" in args, args
        assert f"--dist-init-addr={hosts[G0].address}:29500" in args, args
        assert container(hosts[name])["HostConfig"]["NetworkMode"] == "host"
        assert container(hosts[name])["Config"]["Labels"]["sglang.node_rank"] == str(rank)
        # on the host's network: its own address alone (never every interface), and no raw sockets
        assert f"--host={hosts[name].address}" in args, args
        assert [c.upper().removeprefix("CAP_") for c in container(hosts[name])["HostConfig"]["CapDrop"] or []] \
            == ["NET_RAW"]
        assert hosts[name].exec("curl -s -o /dev/null --max-time 5 http://127.0.0.1:30000/health",
                                check=False).returncode == 7   # refused: nothing listens on loopback
    assert f"gate[{G0}]: passed; this config is now the last known-good one" in first.output
    assert f"gate[{G1}]: passed through the group's rank 0" in first.output
    # rank 1's own answers are never asked: its record has no benchmark, rank 0's has
    records = {n: json.loads(hosts[n].exec(f"cat {DOCKER}/.last-gate").stdout) for n in GROUP}
    assert records[G1]["benchmark"] is None and records[G0]["benchmark"], records
    assert listed(hosts) == {url_of(hosts, G0): True, url_of(hosts, SOLO): True}
    assert started(hosts[G1]) < started(hosts[G0])   # rank 0 last


def test_a_second_run_changes_nothing(fleet):
    hosts, inventory, _ = fleet
    before = {name: started(hosts[name]) for name in (*GROUP, SOLO)}
    again = run_deploy(inventory("groups.py"))
    assert again.returncode == 0, again.why(3000)
    assert {name: again.changed(name) for name in hosts} == {name: [] for name in hosts}
    assert {name: started(hosts[name]) for name in (*GROUP, SOLO)} == before
    settled = run_deploy(inventory("groups.py"))   # issue 56: and the run after it is the settled path, everywhere
    assert {name: planned(settled, name) for name in hosts} == {name: [SETTLED_OP] for name in hosts}, \
        [line for line in settled.output.splitlines() if "takes the full plan" in line]


def test_a_config_change_of_the_group_under_load_loses_no_request(fleet):
    hosts, inventory, _ = fleet
    before = {name: started(hosts[name]) for name in (*GROUP, SOLO)}
    with Load(f"http://{hosts[GW].address}:{PORT}", MODEL, max_tokens=200) as load:
        result = run_deploy(inventory("groups-b.py", env={"GROUP_MARK": "b"}))
    assert result.returncode == 0, result.why(4000)
    assert all("GROUP_MARK=b" in env(hosts[name]) for name in GROUP)
    assert all(started(hosts[name]) != before[name] for name in GROUP)
    assert started(hosts[SOLO]) == before[SOLO]
    assert started(hosts[G1]) < started(hosts[G0])
    assert load.sent > 10, load.sent
    assert (load.failed, load.cut) == (0, 0), load.errors[:5]
    assert listed(hosts) == {url_of(hosts, G0): True, url_of(hosts, SOLO): True}


def test_a_config_whose_gate_fails_leaves_both_members_on_the_last_good_config(fleet):
    hosts, inventory, _ = fleet
    result = run_deploy(inventory("groups-bad.py", env={"GROUP_MARK": "b", "STANDIN_FAILURE": "slow"},
                                  sglang_ready_timeout=12))
    assert result.returncode != 0
    assert f"gate[{G0}]: FAILED" in result.output and "rolled back: every member serves its last good config" \
        in result.output, result.why(4000)
    for name in GROUP:
        assert "STANDIN_FAILURE" not in env(hosts[name]) and "GROUP_MARK=b" in env(hosts[name])
        assert "STANDIN_FAILURE" in hosts[name].exec(f"cat {DOCKER}/compose.yaml.failed").stdout
    assert started(hosts[G1]) < started(hosts[G0])
    record = json.loads(hosts[G0].exec(f"cat {DOCKER}/.last-gate").stdout)
    assert (record["passed"], record["rolled_back"]) == (False, True), record
    assert listed(hosts) == {url_of(hosts, G0): True, url_of(hosts, SOLO): True}


def test_a_groups_gate_step_for_a_config_not_on_the_member_judges_and_keeps_nothing(fleet):
    """#60: the group's gate steps carry the config their run rendered (--config-sha, operations/group.py); a step
    whose config is no longer the member's compose.yaml (here: the failed config the test above rolled back from,
    as when another run changed the member meanwhile) keeps nothing as good or failed and records nothing."""
    hosts, _, _ = fleet
    member = hosts[G1]
    files = f"{DOCKER}/compose.yaml {DOCKER}/compose.yaml.good {DOCKER}/compose.yaml.failed {DOCKER}/.last-gate"
    before = member.exec(f"sha256sum {files}").stdout
    other = member.exec(f"sha256sum {DOCKER}/compose.yaml.failed").stdout.split()[0]
    for step in ("keep", "failed"):
        done = member.exec(f"bash /opt/sglang/{names.GATE_SCRIPT} --group-step {step} --config-sha {other}",
                           check=False)
        assert done.returncode == 4 and "is not the config this run rendered" in done.stderr, done
    assert member.exec(f"sha256sum {files}").stdout == before


def test_a_killed_member_is_healed_by_the_next_run_recreating_the_whole_group(fleet):
    hosts, inventory, _ = fleet
    hosts[G1].exec(f"cd {DOCKER} && docker kill $(docker compose ps -q sglang)")
    before = started(hosts[G0])
    result = run_deploy(inventory("groups-b.py", env={"GROUP_MARK": "b"}))
    assert result.returncode == 0, result.why(4000)
    assert f"{G1}: the container is exited" in result.output
    assert started(hosts[G0]) != before and started(hosts[G1]) < started(hosts[G0])
    assert listed(hosts) == {url_of(hosts, G0): True, url_of(hosts, SOLO): True}


# ---------------------------------------------------------------- issue 34 item 3, reported (status, checks, metrics)
def run_status(inventory) -> tuple[int, dict]:
    env = {k: v for k, v in os.environ.items() if k != "PYINFRA_YES"}
    proc = subprocess.run(["bash", "scripts/status.sh", str(inventory), "--json"], cwd=PROJECT_DIR, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {"error": proc.stderr[-2000:]}


def textfile(host) -> str:
    return host.exec(f"cat {names.TEXTFILE_DIR}/{names.GATE_METRICS_FILE}").stdout


def test_a_killed_member_is_named_failing_by_status_check_and_metrics_within_60s(fleet, workdir):
    """`docker kill` of rank 1: within 60 s status.sh and check.sh name group ds-a failing, the member and why, and
    its textfile says its container does not run (what SGLangGroupMemberDown reads; the rule itself is tested with
    promtool); started again alone, status names the group stale; the next ordinary run recreates the group and
    status says it is whole again."""
    hosts, inventory, _ = fleet
    current = inventory("groups-b.py", env={"GROUP_MARK": "b"})   # the config the module's earlier tests left
    hosts[G1].exec(f"cd {DOCKER} && docker kill $(docker compose ps -q sglang)")
    killed = time.monotonic()
    why = f"group ds-a: member {G1} (rank 1): its container is exited"

    code, report = run_status(current)
    status_took = time.monotonic() - killed
    assert code == 1, report
    assert report["groups"] == [{"name": "ds-a", "members": [G0, G1], "head": G0, "problems": [why],
                                 "verdict": "failing"}], report
    by_host = {row["host"]: row for row in report["hosts"]}
    assert f"failing: {why}" in by_host[G0]["problems"] and by_host[G0]["verdict"] == "failing"
    assert by_host[SOLO]["verdict"] == "ok", by_host[SOLO]["problems"]

    started_checks = time.monotonic()
    checks = run_host_checks(current, workdir)
    checks_took = time.monotonic() - started_checks
    assert checks.outcomes.get(f"{G0}::test_the_multi_node_group_is_whole") == "failure", checks.output[-3000:]
    assert checks.outcomes.get(f"{G1}::test_the_multi_node_group_is_whole") == "skipped"
    assert f"group ds-a is failing: {why}" in checks.output
    assert status_took < 60 and checks_took < 60, (status_took, checks_took)

    deadline = time.monotonic() + 90   # the textfile's timer runs every minute
    while "sglang_container_running 0" not in textfile(hosts[G1]) and time.monotonic() < deadline:
        time.sleep(5)
    assert "sglang_container_running 0" in textfile(hosts[G1]) and \
        "sglang_container_running 1" in textfile(hosts[G0])

    # Revived alone (as a restart policy would): every container runs, and the group is stale.
    hosts[G1].exec(f"cd {DOCKER} && docker start $(docker compose ps -aq sglang)")
    code, report = run_status(current)
    assert code == 1 and report["groups"][0]["problems"] == [
        f"group ds-a: member {G1}: started after rank 0 ({G0}), against a group that already formed"], report["groups"]

    healed = run_deploy(current)
    assert healed.returncode == 0, healed.why(4000)
    code, report = run_status(current)
    assert report["groups"][0]["verdict"] == "ok" and report["groups"][0]["problems"] == [], report["groups"]
    assert listed(hosts) == {url_of(hosts, G0): True, url_of(hosts, SOLO): True}


# ---------------------------------------------------------------- issue 40 items 2 and 3: rank 0 restarted alone
def health(host) -> str:
    """The HTTP status of the member's own /health (host networking: its port on the host), from the host itself."""
    return host.exec(f"curl -s -o /dev/null -m 5 -w '%{{http_code}}' http://{host.address}:30000/health").stdout.strip()


def test_rank_0_restarted_alone_is_failing_within_60s_and_the_next_run_heals_the_group(fleet, workdir):
    """`docker restart` of rank 0 alone: its health stays "starting" in Docker, its start is within START_WINDOW of
    rank 1's, yet the group never serves again. status.sh and check.sh name it failing within 60 s (the gate's
    record knows the container it stamped); the next ordinary run, with a short readiness wait in its data so a
    wrong turn fails in seconds, recreates the group before its gate, exits 0 and marks no config failed."""
    hosts, inventory, _ = fleet
    for name in GROUP:   # the bad config an earlier test kept: every *.failed now is this run's
        hosts[name].exec(f"rm -f {DOCKER}/compose.yaml.failed {DOCKER}/.env.failed")
    before = {name: started(hosts[name]) for name in (*GROUP, SOLO)}
    hosts[G0].exec(f"cd {DOCKER} && docker restart $(docker compose ps -q sglang)")
    restarted = time.monotonic()
    assert started(hosts[G0]) != before[G0] and started(hosts[G1]) == before[G1]

    current = inventory("groups-b.py", env={"GROUP_MARK": "b"})
    code, report = run_status(current)
    status_took = time.monotonic() - restarted
    assert code == 1, report
    [group] = report["groups"]
    why = f"group ds-a: member {G0} (rank 0): restarted alone at {started(hosts[G0])}, since the group's last gate"
    assert group["verdict"] == "failing" and len(group["problems"]) == 1 and group["problems"][0].startswith(why), \
        group
    by_host = {row["host"]: row for row in report["hosts"]}
    assert by_host[G0]["verdict"] == by_host[G1]["verdict"] == "failing" and by_host[SOLO]["verdict"] == "ok"

    started_checks = time.monotonic()
    checks = run_host_checks(current, workdir)
    checks_took = time.monotonic() - started_checks
    assert checks.outcomes.get(f"{G0}::test_the_multi_node_group_is_whole") == "failure", checks.output[-3000:]
    assert f"group ds-a is failing: {why}" in checks.output, checks.output[-3000:]
    assert status_took < 60 and checks_took < 60, (status_took, checks_took)
    # the stand-in as SGLang: rank 0 never serves again (rank 1 never re-joins), rank 1's dummy health says 200
    assert (health(hosts[G0]), health(hosts[G1])) == ("503", "200")

    healed = run_deploy(inventory("groups-heal.py", env={"GROUP_MARK": "b"}, sglang_ready_timeout=30))
    assert healed.returncode == 0, healed.why(4000)
    assert f"{G0} (rank 0): restarted alone" in healed.output and "every member of ds-a" in healed.output
    assert f"gate[{G0}]: passed" in healed.output and f"gate[{G1}]: passed through the group's rank 0" in healed.output
    assert before[G1] < started(hosts[G1]) < started(hosts[G0])   # both recreated, rank 0 last
    assert started(hosts[SOLO]) == before[SOLO]
    for name in GROUP:
        assert hosts[name].exec(f"ls {DOCKER}").stdout.split().count("compose.yaml.failed") == 0, name
    assert health(hosts[G0]) == "200"
    code, report = run_status(current)
    assert report["groups"][0]["problems"] == [] and report["groups"][0]["verdict"] == "ok", report["groups"]
    assert listed(hosts) == {url_of(hosts, G0): True, url_of(hosts, SOLO): True}

    after = {name: started(hosts[name]) for name in (*GROUP, SOLO)}
    again = run_deploy(inventory("groups-heal.py", env={"GROUP_MARK": "b"}, sglang_ready_timeout=30))
    assert again.returncode == 0, again.why(3000)
    assert {name: again.changed(name) for name in hosts} == {name: [] for name in hosts}
    assert {name: started(hosts[name]) for name in (*GROUP, SOLO)} == after
