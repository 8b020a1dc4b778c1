"""Rolling, drained restarts behind the REAL gateway (SMG 1.13.0) (issues 23, 35 and 40): one router host and
four stand-in workers of one model, keys on every host (the secure default: sglang_api_key_file), under steady
load from this test through the gateway (6 clients with the clients' key, half streaming, each request a short
generation). A worker counts as listed only when the gateway lists it healthy WITH ITS MODEL: SMG lists a worker
it could not read /v1/models from (one added without the worker's key) with model "unknown" and routes it nothing.

- The pool's first converge: no worker serves yet, so all start at once (every container before any gate's
  verdict), and the one whose config fails its gate fails alone: the others serve, listed healthy.
- A config change of every worker at sglang_max_unavailable 1 and at "50%": the new config everywhere, no failed
  request, no cut stream, never more out of service than allowed.
- A re-run that changes nothing touches no gateway and restarts nothing.
- A config whose gate fails, on workers in service, stops the roll at the first worker (rolled back and put back),
  the others never restart, and no request fails.
- A server whose completions never return, with sglang_ready_timeout 20: the run fails within a minute and the
  worker serves its last good config again (the rollback stops the hung container at once).
- A worker whose container was killed is restored by the next run, listed with its model, and takes traffic again.
"""

from __future__ import annotations

import re
import time
import urllib.request
from datetime import datetime

import pytest

import harness
from harness import run_deploy
from rolling_load import Load, gateway_workers, most_out_at_once, roll_lines
from testbed.hosts import ADMIN_KEY

W1, W2, W3, W4, GW = "sg-roll-w1", "sg-roll-w2", "sg-roll-w3", "sg-roll-w4", "sg-roll-gw"
WORKERS = (W1, W2, W3, W4)
PORT = 30080
MODEL = "qwen3.6-35b-a3b"
BASE = {"sglang_drain_timeout": 60}
ENV = {"STANDIN_LOAD_SECONDS": "2"}
BROKEN = {"STANDIN_FAILURE": "crash_at_start"}
LAST_GATE = "/opt/sglang/docker/.last-gate"
KEY = "rolling-clients-key-0123456789abcdef"   # sglang_api_key_file of every host: workers and the gateway


@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    hosts = {name: testbed.host(name, login="deploy" if name in (W2, GW) else "root")
             for name in (*WORKERS, GW)}

    key_file = workdir / "rolling-api-key"
    key_file.write_text(KEY + "\n")
    keyed = {"sglang_api_key_file": str(key_file)}

    def inventory(file, env=None, only=None, **data):
        """``only``: {host: extra env} for some workers, beside ``env`` for all."""
        def values(name):
            extra = (only or {}).get(name, {})
            return {**BASE, **keyed, "sglang_extra_env": {**ENV, **(env or {}), **extra}, **data}
        return testbed.inventory(workdir / file, {"production": [(hosts[n], values(n)) for n in WORKERS],
                                                  "router": [(hosts[GW], {**keyed, "sglang_router_bind_address":
                                                                          hosts[GW].address})]})

    first = run_deploy(inventory("rolling-first.py", only={W4: BROKEN}))
    facts = {"first": first, "started": {n: started_at(hosts[n]) for n in WORKERS[:3]},
             "gated": {n: gate_time(hosts[n]) for n in WORKERS[:3]}, "listed": listed(hosts)}
    fixed = run_deploy(inventory("rolling.py"))
    assert fixed.returncode == 0, fixed.output[-4000:]
    return hosts, inventory, facts


def gateway(hosts) -> str:
    return f"http://{hosts[GW].address}:{PORT}"


def url_of(hosts, name) -> str:
    return f"http://{hosts[name].address}:30000"


def listed(hosts) -> dict[str, bool] | None:
    return gateway_workers(gateway(hosts))


def started(host) -> str:
    return host.exec("cd /opt/sglang/docker && docker inspect -f '{{.Id}} {{.State.StartedAt}}' "
                     "$(docker compose ps -q)").stdout.strip()


def started_at(host) -> datetime:
    """When the server's container started (Docker's RFC 3339 time, cut to microseconds)."""
    stamp = started(host).split()[-1]
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", stamp).replace("Z", "+00:00"))


def gate_time(host) -> datetime:
    """When the worker's gate recorded its verdict (.last-gate, to the second)."""
    import json

    found = json.loads(host.exec(f"cat {LAST_GATE}").stdout)
    return datetime.fromisoformat(found["time"].replace("Z", "+00:00"))


def running_env(host) -> str:
    return host.exec("cd /opt/sglang/docker && docker inspect -f '{{json .Config.Env}}' $(docker compose ps -q)").stdout


def test_a_new_pool_starts_its_workers_together_and_a_broken_one_fails_alone(fleet):
    hosts, _, facts = fleet
    first = facts["first"]
    assert first.returncode != 0
    failed = re.search(r"--> Failed hosts \((\d+) of \d+\): (.*)", first.output)
    assert failed and failed[1] == "1" and failed[2].startswith(f"{W4} ("), failed and failed[0]
    # every good worker serves and is listed healthy; the broken one is not listed
    assert facts["listed"] == {url_of(hosts, n): True for n in WORKERS[:3]}, facts["listed"]
    # together, not one turn apart: every container started before any worker's gate gave its verdict
    assert max(facts["started"].values()) < min(facts["gated"].values()), (facts["started"], facts["gated"])
    assert "drain" not in " ".join(line for line in first.output.splitlines() if "roll: " in line)


def test_a_config_change_rolls_every_worker_without_a_failed_request(fleet):
    hosts, inventory, _ = fleet
    before = {name: started(hosts[name]) for name in WORKERS}
    with Load(gateway(hosts), MODEL, max_tokens=200, key=KEY) as load:
        result = run_deploy(inventory("rolling-b.py", env={"ROLL_MARK": "b"}))
    assert result.returncode == 0, result.why(4000)
    assert all("ROLL_MARK=b" in running_env(hosts[name]) for name in WORKERS)
    assert all(started(hosts[name]) != before[name] for name in WORKERS)
    assert load.sent > 20, load.sent
    assert (load.failed, load.cut) == (0, 0), (load.errors[:5], roll_lines(result.output))
    assert load.fewest is not None and load.fewest >= len(WORKERS) - 1, load.fewest
    assert most_out_at_once(result.output) == 1, roll_lines(result.output)
    assert listed(hosts) == {url_of(hosts, name): True for name in WORKERS}
    assert result.output.count("roll: ") >= len(WORKERS) * 3


def test_a_rerun_that_changes_nothing_touches_no_gateway_and_restarts_nothing(fleet):
    hosts, inventory, _ = fleet
    before = {name: started(hosts[name]) for name in WORKERS}
    touched = "stat -c %y /opt/sglang/router/*/workers.json && cd /opt/sglang/router/* && " \
              "docker inspect -f '{{.State.StartedAt}}' $(docker compose ps -q)"
    gateway_before = hosts[GW].exec(touched).stdout
    again = run_deploy(inventory("rolling-b.py", env={"ROLL_MARK": "b"}))
    assert again.returncode == 0, again.why(3000)
    assert {name: again.changed(name) for name in (*WORKERS, GW)} == {name: [] for name in (*WORKERS, GW)}
    assert "roll: " not in again.output
    assert {name: started(hosts[name]) for name in WORKERS} == before
    assert hosts[GW].exec(touched).stdout == gateway_before


def test_a_change_at_half_the_pool_takes_two_out_at_once_and_loses_no_request(fleet):
    hosts, inventory, _ = fleet
    with Load(gateway(hosts), MODEL, max_tokens=200, key=KEY) as load:
        result = run_deploy(inventory("rolling-half.py", env={"ROLL_MARK": "half"}, sglang_max_unavailable="50%"))
    assert result.returncode == 0, result.why(4000)
    assert all("ROLL_MARK=half" in running_env(hosts[name]) for name in WORKERS)
    assert (load.failed, load.cut) == (0, 0), (load.errors[:5], roll_lines(result.output))
    assert load.fewest is not None and load.fewest >= len(WORKERS) // 2, load.fewest
    assert most_out_at_once(result.output) == 2, roll_lines(result.output)
    assert listed(hosts) == {url_of(hosts, name): True for name in WORKERS}


def test_a_config_whose_gate_fails_stops_at_the_first_worker_and_no_request_fails(fleet):
    hosts, inventory, _ = fleet
    before = {name: started(hosts[name]) for name in WORKERS}
    with Load(gateway(hosts), MODEL, max_tokens=200, key=KEY) as load:
        result = run_deploy(inventory("rolling-bad.py", env={"ROLL_MARK": "half", "STANDIN_FAILURE": "slow"},
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


def test_a_server_that_never_answers_fails_within_a_minute_and_the_last_good_config_serves(fleet):
    hosts, inventory, _ = fleet
    began = time.monotonic()
    result = run_deploy(inventory("rolling-hung.py", env={"ROLL_MARK": "half"}, only={W1: {"STANDIN_FAILURE":
                                                                                            "never_completes"}},
                                  sglang_ready_timeout=20), "--limit", W1)
    took = time.monotonic() - began
    assert result.returncode != 0
    assert f"gate[{W1}]: FAILED" in result.output and "Rolled back to the last known-good config" in result.output
    assert "ALSO failed" not in result.output
    assert took < 60 + 30, took   # the deadline, the rollback, and pyinfra's own start and facts
    assert "STANDIN_FAILURE" not in running_env(hosts[W1])
    assert listed(hosts) == {url_of(hosts, name): True for name in WORKERS}


def workers_answer(hosts) -> str:
    """The gateway's GET /workers as it answers it, asked with the control-plane key."""
    request = urllib.request.Request(gateway(hosts) + "/workers", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.read().decode()


def completions_served(host) -> int:
    """How many chat completions the worker's server answered (its access log, one line per request)."""
    return int(host.exec("cd /opt/sglang/docker && docker compose logs --no-log-prefix 2>&1 | "
                         "grep -c 'POST /v1/chat/completions' || true").stdout.strip() or 0)


def test_a_killed_worker_restored_by_the_next_run_takes_traffic_again(fleet):
    """Issue 40: the run restores it (out of service: restarted at once) and adds it back to the gateway with the
    key it sends its workers, so the gateway reads its model and routes it requests again."""
    hosts, inventory, _ = fleet
    hosts[W2].exec("cd /opt/sglang/docker && docker compose kill")
    assert harness.wait_for(lambda: (listed(hosts) or {}).get(url_of(hosts, W2)) is False, 60), listed(hosts)
    result = run_deploy(inventory("rolling-restore.py", env={"ROLL_MARK": "half"}, sglang_max_unavailable="50%"))
    assert result.returncode == 0, result.why(4000)
    assert listed(hosts) == {url_of(hosts, name): True for name in WORKERS}, roll_lines(result.output)
    assert KEY not in workers_answer(hosts)   # the key a worker was added with is not listed back
    before = completions_served(hosts[W2])
    with Load(gateway(hosts), MODEL, max_tokens=20, key=KEY) as load:
        time.sleep(6)
    assert load.sent > 10 and load.failed == 0, (load.sent, load.errors[:5])
    assert completions_served(hosts[W2]) > before, (before, load.sent)
    assert f"{url_of(hosts, W2)} is back and healthy at {gateway(hosts)} with model {MODEL}" in result.output, \
        roll_lines(result.output)
