"""The fleet front door with the REAL gateway (SMG 1.13.0, from its PyPI wheel, in its own image) in front of
stand-in workers: a completion through it, concurrent load reaching both workers, a re-run that changes nothing;
a worker whose gate fails is never added, one rolled back keeps serving its last good config in the gateway; a stopped
worker is dropped by the gateway's health checks while it keeps answering, and the next deploy restores it; the
refusals (an open front door, a missing or empty control-plane key, an unpinned gateway image among them), before
any change."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest

import harness
from harness import PROJECT_DIR, run_deploy, run_host_checks
from sglang_infra.hostside.write import hold
from sglang_infra.machine import ship
from testbed.hosts import ADMIN_KEY

W1, W2, W3, GW = "sg-rt-w1", "sg-rt-w2", "sg-rt-w3", "sg-rt-gw"
GATEWAY_DIR = "/opt/sglang/router/qwen3-6-35b-a3b-awq"  # production model (tests/support/testbed/hub.py: tiny-chat)
PORT = 30080
FAILING = {"sglang_extra_env": {"STANDIN_LOAD_SECONDS": "2", "STANDIN_FAILURE": "slow"}, "sglang_ready_timeout": 12}
HEALTH_WAIT = 60   # seconds, bounds every wait on the gateway's health checks (5 s interval, 2 failures)


@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    hosts = {name: testbed.host(name, login="deploy" if name == W2 else "root") for name in (W1, W2, W3, GW)}

    def inventory(file, production=(W1, W2), router=(GW,), data=None, extra=None):
        data = data or {}
        # No API key here: the harness declares the test network trusted (harness.with_trust), and each router
        # host publishes its gateway on its own test-network address, named.
        groups = {"production": [(hosts[n], data.get(n, {})) for n in production],
                  "router": [(hosts[n], {"sglang_router_bind_address": hosts[n].address, **data.get(n, {})})
                             for n in router]}
        return testbed.inventory(workdir / file, {g: m for g, m in groups.items() if m})

    good = inventory("router.py")
    first = run_deploy(good)
    assert first.returncode == 0, "\n".join(line for line in first.output.splitlines()
                                            if "gate[" in line and "router-1" not in line or "gateway" in line
                                            or "worker" in line or "rror" in line)
    return hosts, inventory, good, first


def gateway_url(hosts) -> str:
    return f"http://{hosts[GW].address}:{PORT}"


def get(url: str):
    """GET ``url``; the gateway's worker API with the tests' control-plane key (the deploy's, role admin)."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"} if url.rstrip("/").endswith("/workers") else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as reply:
        return json.loads(reply.read() or b"{}")


def complete(base: str, prompt: str = "Say hello.") -> dict:
    body = json.dumps({"model": "qwen3.6-35b-a3b", "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": 16}).encode()
    request = urllib.request.Request(base + "/v1/chat/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def workers(hosts) -> dict[str, bool]:
    """{worker URL: is_healthy} as the gateway reports it."""
    return {w["url"]: w["is_healthy"] for w in get(gateway_url(hosts) + "/workers")["workers"]}


def url_of(hosts, name) -> str:
    return f"http://{hosts[name].address}:30000"


def served(host) -> int:
    """Chat completions this worker's stand-in has answered (its access log)."""
    out = host.exec("cd /opt/sglang/docker && docker compose logs --no-color sglang 2>&1 | "
                    "grep -c 'POST /v1/chat/completions' || true").stdout
    return int(out.strip() or 0)


def started(host, directory=GATEWAY_DIR) -> str:
    return host.exec(f"cd {directory} && docker inspect -f '{{{{.Id}}}} {{{{.State.StartedAt}}}}' "
                     f"$(docker compose ps -q)").stdout.strip()


def wait_for(predicate, seconds: float = HEALTH_WAIT):
    return harness.wait_for(predicate, seconds)


def test_the_gateway_passed_its_own_gate_with_both_workers(fleet):
    hosts, _, _, first = fleet
    assert f"gate[{GW}]: passed; this config is now the last known-good one" in first.output
    assert workers(hosts) == {url_of(hosts, W1): True, url_of(hosts, W2): True}
    listed = json.loads(hosts[GW].exec(f"cat {GATEWAY_DIR}/workers.json").stdout)
    assert listed == sorted([url_of(hosts, W1), url_of(hosts, W2)])


def test_the_host_checks_judge_a_router_only_host_by_its_gateways(fleet, workdir):
    hosts, _, good, _ = fleet
    checks = run_host_checks(good, workdir)
    for name in (W1, W2, GW):
        assert checks.failed(name) == set() and checks.passed(name), checks.output[-3000:]
    assert {"test_each_gateway_answers_with_its_model", "test_each_gateway_runs_and_passed_its_gate_for_what_runs_now",
            "test_each_gateways_compose_yaml_is_the_rendering_of_the_data"} <= checks.passed(GW)
    # A host only in the router group serves no model: the serving checks do not apply to it.
    assert {"test_the_api_answers_with_the_served_model", "test_every_kept_model_is_complete_and_verified_in_the_cache",
            "test_the_last_gate_passed_for_what_runs_now"} <= checks.skipped(GW)
    assert "test_each_gateway_answers_with_its_model" in checks.skipped(W1)


def test_the_metrics_are_published_on_loopback_only(fleet):
    hosts = fleet[0]
    assert hosts[GW].exec(f"cd {GATEWAY_DIR} && docker compose port router 29000").stdout.split() == \
        ["127.0.0.1:29000"]
    assert "smg_" in hosts[GW].exec("curl -sf --max-time 10 http://127.0.0.1:29000/metrics").stdout
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{hosts[GW].address}:29000/metrics", timeout=5)


def test_a_completion_through_the_gateway_works(fleet):
    answer = complete(gateway_url(fleet[0]))
    assert answer["choices"][0]["message"]["content"]


def test_concurrent_load_through_the_gateway_reaches_both_workers(fleet):
    hosts = fleet[0]
    before = {name: served(hosts[name]) for name in (W1, W2)}
    with ThreadPoolExecutor(16) as pool:   # unrelated prompts, 16 at once: cache_aware spreads them by load
        answers = list(pool.map(lambda i: complete(gateway_url(hosts), f"[{i}-{time.monotonic_ns()}] Say hi."),
                                range(32)))
    assert all(a["choices"] for a in answers)
    after = {name: served(hosts[name]) for name in (W1, W2)}
    gained = {name: after[name] - before[name] for name in (W1, W2)}
    assert sum(gained.values()) == 32 and all(gained.values()), gained


def test_a_rerun_changes_nothing_and_restarts_no_gateway(fleet):
    hosts, _, good, _ = fleet
    before = started(hosts[GW])
    again = run_deploy(good)
    assert again.returncode == 0, again.why(3000)
    assert {name: again.changed(name) for name in (W1, W2, GW)} == {W1: [], W2: [], GW: []}
    assert started(hosts[GW]) == before


def test_the_status_report_shows_the_gateways_workers_and_their_health(fleet):
    hosts, _, good, _ = fleet
    proc = subprocess.run(["bash", "scripts/status.sh", str(good), "--json"], cwd=PROJECT_DIR,
                          env=dict(os.environ, PYTHONPATH=str(PROJECT_DIR)), capture_output=True, text=True,
                          timeout=600)
    rows = {row["host"]: row for row in json.loads(proc.stdout)["hosts"]}
    [gateway] = rows[GW]["gateways"]
    assert gateway["port"] == PORT and {w["url"]: w["healthy"] for w in gateway["workers"]} == \
        {url_of(hosts, W1): True, url_of(hosts, W2): True}
    assert rows[GW]["verdict"] == "ok", rows[GW]["problems"]   # a router-only host has no model of its own
    text = subprocess.run(["bash", "scripts/status.sh", str(good)], cwd=PROJECT_DIR, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(PROJECT_DIR)), timeout=600).stdout
    assert f"{GW}: gateway qwen3-6-35b-a3b-awq :{PORT}: 2/2 workers healthy" in text


def test_a_third_worker_whose_gate_fails_is_never_added(fleet):
    hosts, inventory, _, _ = fleet
    failing = inventory("router-w3.py", production=(W1, W2, W3), data={W3: FAILING})
    result = run_deploy(failing)
    assert result.returncode != 0
    assert f"gate[{W3}]: FAILED: benchmark.sh" in result.output, result.why(4000)
    assert url_of(hosts, W3) not in workers(hosts)
    again = run_deploy(failing)   # a cron'd re-run: refused on W3, which still never joins
    assert again.returncode != 0 and url_of(hosts, W3) not in workers(hosts)
    assert again.changed(GW) == []


def test_a_worker_rolled_back_keeps_serving_in_the_gateway_and_passes_again_later(fleet):
    hosts, inventory, good, _ = fleet
    before = started(hosts[GW])
    result = run_deploy(inventory("router-w2-fails.py", data={W2: FAILING}))
    assert result.returncode != 0
    assert f"gate[{W2}]: FAILED" in result.output and "Rolled back to the last known-good config" in result.output
    # rolled back, it serves its last good config, and its rolling restart put it back in the gateway (issue 23)
    assert set(workers(hosts)) == {url_of(hosts, W1), url_of(hosts, W2)}
    back = run_deploy(good)
    assert back.returncode == 0, back.why(3000)
    assert set(workers(hosts)) == {url_of(hosts, W1), url_of(hosts, W2)}
    assert started(hosts[GW]) == before   # through the worker API: the gateway never restarted


def test_with_a_worker_stopped_the_gateway_keeps_answering_and_the_next_deploy_restores_it(fleet):
    hosts, _, good, _ = fleet
    hosts[W1].exec("cd /opt/sglang/docker && docker compose stop")
    noticed = wait_for(lambda: workers(hosts).get(url_of(hosts, W1)) is False)
    assert noticed, workers(hosts)
    assert all(complete(gateway_url(hosts), f"[{i}] Say hi.")["choices"] for i in range(10))
    result = run_deploy(good)
    assert result.returncode == 0, result.why(3000)
    assert f"gate[{W1}]: passed" in result.output
    assert wait_for(lambda: all(workers(hosts).values()) and len(workers(hosts)) == 2), workers(hosts)


@pytest.mark.parametrize("case,line", [
    ("no_workers", f"host {GW}: sglang_router_models: no host of the inventory serves a model, so this gateway "
                   "host would have no workers. Fix:"),
    ("port_clash", f"host {W1}: sglang_router_port: the gateway of qwen3.6-35b-a3b-awq would listen on 30000, the "
                   "port this host's own server already publishes (sglang_port). Fix:"),
    ("unknown_policy", f"host {GW}: sglang_router_policy: 'fastest' is not one of random, round_robin"),
    ("open_front_door", f"host {GW}: sglang_api_key_file: None, and this host's gateways would be published on "
                        "every address (sglang_router_bind_address): anyone who reaches a gateway's port could use "
                        "every worker of its model"),
    ("no_admin_key", f"host {GW}: sglang_router_admin_key_file: None on a gateway host"),
    ("empty_admin_key", f"host {GW}: sglang_router_admin_key_file: "),
    ("unpinned_image", f"host {GW}: sglang_router_image: 'sglang-smg-gateway:latest' is not None or a pinned image "
                       "reference. Fix:"),
])
def test_bad_input_is_refused_before_any_change(fleet, workdir, case, line):
    hosts, inventory, _, _ = fleet
    if case == "no_workers":
        args, file = (), inventory("refuse-empty.py", production=())
    elif case == "port_clash":
        args, file = ("--data", "sglang_router_port=30000"), inventory("refuse-clash.py", router=(GW, W1))
    elif case == "open_front_door":
        args, file = (), inventory("refuse-open.py", data={GW: {"sglang_router_bind_address": "0.0.0.0",
                                                                "sglang_trusted_network": False}})
    elif case == "no_admin_key":
        args, file = (), inventory("refuse-admin.py", data={GW: {"sglang_router_admin_key_file": None}})
    elif case == "empty_admin_key":
        (workdir / "empty-admin.key").write_text("\n")
        args, file = (), inventory("refuse-admin-empty.py", data={
            GW: {"sglang_router_admin_key_file": str(workdir / "empty-admin.key")}})
    elif case == "unpinned_image":
        args, file = (), inventory("refuse-image.py", data={GW: {"sglang_router_image": "sglang-smg-gateway:latest"}})
    else:
        args, file = ("--data", "sglang_router_policy=fastest"), inventory("refuse-policy.py")
    before = (started(hosts[GW]), hosts[GW].exec(f"sha256sum {GATEWAY_DIR}/compose.yaml").stdout)
    result = run_deploy(file, *args)
    assert result.returncode != 0
    assert "refused before any change on any host" in result.output and line in result.output, result.why(3000)
    assert result.statuses == {}
    assert (started(hosts[GW]), hosts[GW].exec(f"sha256sum {GATEWAY_DIR}/compose.yaml").stdout) == before


def gateway_gate(host) -> dict:
    """The gateway's last gate record (router/<slug>/.last-gate, hostside/gate/gate.py), {} when none."""
    return json.loads(host.exec(f"cat {GATEWAY_DIR}/.last-gate", check=False).stdout or "{}")


def gateway_container(host) -> str:
    """The running gateway container's id (a restart makes a new one), read at once: "" while none runs."""
    return host.exec("docker ps -q --no-trunc --filter label=com.docker.compose.project=sglang-router-"
                     f"{GATEWAY_DIR.rsplit('/', 1)[1]}", check=False).stdout.strip()


def test_a_run_killed_right_after_the_gateways_restart_leaves_its_gate_to_end_on_the_host(fleet, workdir):
    """#60: SIGKILL the moment the gateway's new container runs. Before, the run was then between the gateway's
    restart and its gate (two operations, two commands), and the new gateway served ungated, with no record,
    until a next run. The gateway's restart and its gate are one program on its host (operations/gate.py validated,
    inside hostside/roll/detach.py): the host gates the new gateway and records it by itself, status.sh names the
    host `changing` meanwhile (the host's own holder report, which it reads), and the next run reads how it ended
    and changes nothing."""
    hosts, _, good, _ = fleet
    gw = hosts[GW]
    before, record = gateway_container(gw), gateway_gate(gw)
    assert before
    log = workdir / "gateway-killed.log"
    policy = ("--data", "sglang_router_policy=round_robin")   # the gateway's compose.yaml changes; its gate passes
    run = harness.start_deploy(good, log, *policy)
    try:
        assert harness.wait_for(lambda: gateway_container(gw) not in ("", before), 300, every=0.1), \
            log.read_text()[-3000:]
    finally:
        run.kill()
    run.wait(timeout=30)
    killed = time.time()
    # what status.sh reads from the host (its "changing"): the gate of a run that has ended goes on by itself
    assert json.loads(gw.exec(f"{ship.command('write.hold')} show").stdout) == {"said": hold.GATE_GOING}
    assert harness.wait_for(lambda: gw.exec("flock -n /run/sglang/gate.lock true", check=False).returncode == 0,
                            120), "the gateway's gate did not end"
    ended = datetime.fromisoformat(gateway_gate(gw)["time"].replace("Z", "+00:00")).timestamp()
    print(f"the gateway's gate ended by itself {ended - killed:.0f} s after its run was killed")
    status = subprocess.run(["bash", "scripts/status.sh", str(good), "--json"], cwd=PROJECT_DIR,
                            env=dict(os.environ, PYTHONPATH=str(PROJECT_DIR)), capture_output=True, text=True,
                            timeout=300, stdin=subprocess.DEVNULL)
    row = {r["host"]: r for r in json.loads(status.stdout)["hosts"]}[GW]
    assert row["changing"] is None and row["verdict"] == "ok", row["problems"]   # how it ended: nothing goes on
    # the host's own gate judged the new gateway by itself: a record of its own, of the container the run started
    now = gateway_container(gw)
    assert gateway_gate(gw) != record and gateway_gate(gw)["passed"] is True, gateway_gate(gw)
    assert gateway_gate(gw)["container"]["id"] == now != before
    assert "round_robin" in gw.exec(f"cat {GATEWAY_DIR}/compose.yaml").stdout
    again = run_deploy(good, *policy)
    assert again.returncode == 0, again.why(3000)
    assert again.changed(GW) == [] and gateway_container(gw) == now   # its gate's stamp: nothing left to do
