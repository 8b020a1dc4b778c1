"""Rolling, drained restarts behind the REAL gateway (sglang-router 0.3.2) (issue 23): one router host and three
stand-in workers of one model, under steady load from this test through the gateway (6 clients, half streaming,
each request a short generation). A config change of every worker ends with the new config everywhere, no failed
request, no cut stream, and never fewer than N-1 healthy workers listed; a re-run that changes nothing touches no
gateway and restarts nothing; a config whose gate fails stops the roll at the first worker (rolled back and put
back), the others never restart, and no request fails."""

from __future__ import annotations


import pytest

from harness import run_deploy
from rolling_load import Load, gateway_workers

W1, W2, W3, GW = "sg-roll-w1", "sg-roll-w2", "sg-roll-w3", "sg-roll-gw"
WORKERS = (W1, W2, W3)
PORT = 30080
MODEL = "qwen3.6-35b-a3b"
BASE = {"sglang_drain_timeout": 60}
ENV = {"STANDIN_LOAD_SECONDS": "2"}


@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    hosts = {name: testbed.host(name, login="deploy" if name in (W2, GW) else "root")
             for name in (*WORKERS, GW)}

    def inventory(file, env=None, **data):
        values = {**BASE, "sglang_extra_env": {**ENV, **(env or {})}, **data}
        return testbed.inventory(workdir / file, {"production": [(hosts[n], values) for n in WORKERS],
                                                  "router": [(hosts[GW], {"sglang_router_bind_address": hosts[GW].address})]})

    first = run_deploy(inventory("rolling.py"))
    assert first.returncode == 0, first.output[-4000:]
    return hosts, inventory


def gateway(hosts) -> str:
    return f"http://{hosts[GW].address}:{PORT}"


def url_of(hosts, name) -> str:
    return f"http://{hosts[name].address}:30000"


def listed(hosts) -> dict[str, bool] | None:
    return gateway_workers(gateway(hosts))


def started(host) -> str:
    return host.exec("cd /opt/sglang/docker && docker inspect -f '{{.Id}} {{.State.StartedAt}}' "
                     "$(docker compose ps -q)").stdout.strip()


def running_env(host) -> str:
    return host.exec("cd /opt/sglang/docker && docker inspect -f '{{json .Config.Env}}' $(docker compose ps -q)").stdout


def test_a_config_change_rolls_every_worker_without_a_failed_request(fleet):
    hosts, inventory = fleet
    before = {name: started(hosts[name]) for name in WORKERS}
    with Load(gateway(hosts), MODEL, max_tokens=200) as load:
        result = run_deploy(inventory("rolling-b.py", env={"ROLL_MARK": "b"}))
    assert result.returncode == 0, result.output[-4000:]
    assert all("ROLL_MARK=b" in running_env(hosts[name]) for name in WORKERS)
    assert all(started(hosts[name]) != before[name] for name in WORKERS)
    assert load.sent > 20, load.sent
    assert (load.failed, load.cut) == (0, 0), load.errors[:5]
    assert load.fewest is not None and load.fewest >= len(WORKERS) - 1, load.fewest
    assert listed(hosts) == {url_of(hosts, name): True for name in WORKERS}
    assert result.output.count("roll: ") >= len(WORKERS) * 3


def test_a_rerun_that_changes_nothing_touches_no_gateway_and_restarts_nothing(fleet):
    hosts, inventory = fleet
    before = {name: started(hosts[name]) for name in WORKERS}
    touched = "stat -c %y /opt/sglang/router/*/workers.json && cd /opt/sglang/router/* && " \
              "docker inspect -f '{{.State.StartedAt}}' $(docker compose ps -q)"
    gateway_before = hosts[GW].exec(touched).stdout
    again = run_deploy(inventory("rolling-b.py", env={"ROLL_MARK": "b"}))
    assert again.returncode == 0, again.output[-3000:]
    assert {name: again.changed(name) for name in (*WORKERS, GW)} == {name: [] for name in (*WORKERS, GW)}
    assert "roll: " not in again.output
    assert {name: started(hosts[name]) for name in WORKERS} == before
    assert hosts[GW].exec(touched).stdout == gateway_before


def test_a_config_whose_gate_fails_stops_at_the_first_worker_and_no_request_fails(fleet):
    hosts, inventory = fleet
    before = {name: started(hosts[name]) for name in WORKERS}
    with Load(gateway(hosts), MODEL, max_tokens=200) as load:
        result = run_deploy(inventory("rolling-bad.py", env={"ROLL_MARK": "b", "STANDIN_FAILURE": "slow"},
                                      sglang_ready_timeout=12))
    assert result.returncode != 0
    restarted = [name for name in WORKERS if started(hosts[name]) != before[name]]
    assert len(restarted) == 1, restarted
    [bad] = restarted
    assert f"gate[{bad}]: FAILED" in result.output
    for name in WORKERS:
        assert "STANDIN_FAILURE" not in running_env(hosts[name])   # the bad one was rolled back
        if name != bad:
            assert f"stopped at {bad}: " in result.output
    assert (load.failed, load.cut) == (0, 0), load.errors[:5]
    assert load.fewest is not None and load.fewest >= len(WORKERS) - 1, load.fewest
    assert listed(hosts) == {url_of(hosts, name): True for name in WORKERS}   # the bad one is back, serving
