"""The fleet's metrics on real hosts (issue 25): a monitor-only host runs Debian's Prometheus, scraping two stand-in
workers (one reached as root, one through sudo) behind the REAL gateway (SMG 1.13.0) and every host's
node exporter. Prometheus lists exactly the inventory's targets, all up; a re-run changes nothing anywhere; after a
burst through the gateway every dashboard panel's query returns data and the gateway's request counter grew by
exactly what was sent; a stopped worker fires the target-down alert within its `for` plus two scrapes, and the next
run clears it; a host taken out of the inventory leaves the targets on the next run, and comes back with it."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

import harness
from dashboard_queries import concrete, panel_queries
from harness import PROJECT_DIR, SETTLED_OP, planned, run_deploy, run_host_checks

W1, W2, GW, MON = "sg-mon-w1", "sg-mon-w2", "sg-mon-gw", "sg-mon-prom"
SCRAPE = 5          # seconds: sglang_prometheus_scrape_interval here (the rules are evaluated as often)
DOWN_FOR = 15       # seconds: sglang_alert_down_for here
WAIT = 120          # seconds: bounds every wait on Prometheus
MODEL = "qwen3.6-35b-a3b"
DASHBOARD = PROJECT_DIR / "templates" / "grafana" / "sglang-fleet.json"


@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    hosts = {name: testbed.host(name, login="deploy" if name in (W2, MON) else "root") for name in (W1, W2, GW, MON)}

    def own(name, **data):
        # Every exporter listens on its host's test-network address, never on every address.
        return hosts[name], {"sglang_node_exporter_bind_address": hosts[name].address, **data}

    def inventory(file, production=(W1, W2)):
        return testbed.inventory(workdir / file, {
            "production": [own(name) for name in production],
            "router": [own(GW, sglang_router_bind_address=hosts[GW].address,
                           sglang_router_prometheus_bind_address=hosts[GW].address)],
            "monitor": [own(MON, sglang_prometheus_listen_address=f"{hosts[MON].address}:9090",
                            sglang_prometheus_scrape_interval=f"{SCRAPE}s", sglang_alert_down_for=f"{DOWN_FOR}s")],
        })

    good = inventory("monitor.py")
    first = run_deploy(good)
    assert first.returncode == 0, first.output[-5000:]
    return hosts, inventory, good


def api(hosts, path: str, **params) -> dict:
    url = f"http://{hosts[MON].address}:9090/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as reply:
        found = json.loads(reply.read())
    assert found["status"] == "success", found
    return found["data"]


def wait_for(predicate, seconds: float = WAIT):
    return harness.wait_for(predicate, seconds)


def targets(hosts) -> dict[tuple[str, str], str]:
    """{(job, host label): health} of every target Prometheus scrapes."""
    return {(t["labels"]["job"], t["labels"]["host"]): t["health"] for t in api(hosts, "targets")["activeTargets"]}


def expected(serving=(W1, W2)) -> set[tuple[str, str]]:
    return {*(("sglang", name) for name in serving), ("sglang-router", GW), ("prometheus", MON),
            *(("node", name) for name in (*serving, GW, MON))}


def answering_targets(hosts) -> dict[tuple[str, str], str] | None:
    """targets(), or None while Prometheus does not take connections yet: the deploy leaves its unit started, and
    a Prometheus just (re)started opens its port only once its storage is ready, seconds later on a loaded host."""
    try:
        return targets(hosts)
    except OSError:   # urllib's URLError is an OSError: refused, reset
        return None


def test_prometheus_scrapes_exactly_the_inventorys_targets_and_all_are_up(fleet):
    hosts = fleet[0]
    found = wait_for(lambda: (lambda t: t if t and set(t) == expected() and set(t.values()) == {"up"} else None)(
        answering_targets(hosts)), 2 * SCRAPE + 30)
    assert found, targets(hosts)
    labels = {(t["labels"]["job"], t["labels"]["host"]): t["labels"] for t in api(hosts, "targets")["activeTargets"]}
    assert {k: labels[("sglang", W1)][k] for k in ("group", "model", "role")} == \
        {"group": "production", "model": "qwen3.6-35b-a3b-awq", "role": "worker"}
    assert labels[("sglang-router", GW)]["role"] == "gateway" and labels[("node", MON)]["role"] == "node"


def test_prometheus_and_the_exporters_listen_only_where_the_data_says(fleet):
    hosts = fleet[0]
    listening = hosts[MON].exec("ss -Hltn").stdout
    assert f"{hosts[MON].address}:9090" in listening and "*:9090" not in listening and "0.0.0.0:9090" not in listening
    assert f"{hosts[W1].address}:9100" in hosts[W1].exec("ss -Hltn").stdout
    # A monitor-only host runs no Docker and has no service account.
    assert hosts[MON].exec("command -v docker || id sglang", check=False).returncode != 0


def test_the_host_checks_pass_on_every_host_and_check_the_monitors_prometheus(fleet, workdir):
    hosts, _, good = fleet
    checks = run_host_checks(good, workdir)
    for name in hosts:
        assert checks.failed(name) == set() and checks.passed(name), checks.output[-3000:]
    assert "test_prometheus_runs_the_rendered_config_and_rules" in checks.passed(MON)
    assert "test_the_node_exporter_runs_with_the_deploys_flags" in checks.passed(W1)
    assert "test_account_is_a_nologin_system_account" in checks.skipped(MON)


def test_a_rerun_changes_nothing_on_any_host_the_monitor_included(fleet):
    hosts, _, good = fleet
    started = hosts[MON].exec("systemctl show prometheus -p ExecMainStartTimestampMonotonic").stdout
    again = run_deploy(good)
    assert again.returncode == 0, again.output[-3000:]
    assert {name: again.changed(name) for name in hosts} == {name: [] for name in hosts}
    assert hosts[MON].exec("systemctl show prometheus -p ExecMainStartTimestampMonotonic").stdout == started


def test_the_run_after_it_is_the_settled_path_on_every_host_the_monitor_and_gateway_included(fleet):
    """Issue 56: the re-run above changed nothing and stamped every host; the next run plans the settled no-op
    alone on each (sglang_infra/run/settled.py), the monitor-only host and the gateway host too."""
    hosts, _, good = fleet
    settled = run_deploy(good)
    assert settled.returncode == 0, settled.output[-3000:]
    assert {name: planned(settled, name) for name in hosts} == {name: [SETTLED_OP] for name in hosts}, \
        [line for line in settled.output.splitlines() if "takes the full plan" in line]


def complete(hosts, i: int) -> None:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": f"[{i}] Say hi."}],
                       "max_tokens": 16, "stream": i % 2 == 1}).encode()
    request = urllib.request.Request(f"http://{hosts[GW].address}:30080/v1/chat/completions", data=body,
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        reply.read()


def gateway_requests(hosts) -> float | None:
    """The gateway's count of chat completions (its compose healthcheck's own requests have another path)."""
    result = api(hosts, "query",
                 query=f'sum(smg_http_requests_total{{host="{GW}", path="/v1/chat/completions"}})')["result"]
    return float(result[0]["value"][1]) if result else None


def test_after_a_burst_every_panel_has_data_and_the_gateway_counted_every_request(fleet, measure):
    hosts = fleet[0]
    time.sleep(2 * SCRAPE)   # the counter as Prometheus last saw it is the counter now
    before = gateway_requests(hosts) or 0.0
    sent = 24
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda i: complete(hosts, i), range(sent)))
    grown = wait_for(lambda: (gateway_requests(hosts) or 0.0) - before >= sent, 4 * SCRAPE)
    time.sleep(2 * SCRAPE)   # and nothing more arrives after the burst
    assert grown and gateway_requests(hosts) - before == sent, (before, gateway_requests(hosts))
    # The GPU panels read the GPU metrics file, which a host without GPUs has not: test_gpu_driver.py checks them
    # against the file written on a real H200.
    empty = [title for title, expr in panel_queries(DASHBOARD)
             if "sglang_gpu" not in expr and not api(hosts, "query", query=concrete(expr))["result"]]
    measure(f"monitor: {len(panel_queries(DASHBOARD))} dashboard queries checked against the live Prometheus")
    assert empty == []


def firing(hosts, host: str) -> list[dict]:
    return [a for a in api(hosts, "alerts")["alerts"] if a["labels"].get("alertname") == "SGLangTargetDown"
            and a["labels"].get("host") == host and a["labels"].get("job") == "sglang" and a["state"] == "firing"]


def test_a_stopped_worker_fires_target_down_in_time_and_the_next_run_clears_it(fleet, measure):
    hosts, _, good = fleet
    hosts[W1].exec("cd /opt/sglang/docker && docker compose stop -t 60")
    stopped = time.monotonic()
    assert wait_for(lambda: firing(hosts, W1)), api(hosts, "alerts")
    took = time.monotonic() - stopped
    measure(f"monitor: SGLangTargetDown fired {took:.1f} s after the worker stopped (for {DOWN_FOR} s, "
            f"scrapes every {SCRAPE} s)")
    # its `for`, plus two scrapes to see the target down, plus one rule evaluation, plus the machine's slack
    assert took <= DOWN_FOR + 2 * SCRAPE + SCRAPE + 10, took
    again = run_deploy(good)
    assert again.returncode == 0, again.output[-3000:]
    assert wait_for(lambda: not firing(hosts, W1), 4 * SCRAPE), firing(hosts, W1)


def test_a_host_leaves_the_targets_with_the_inventory_and_comes_back_with_it(fleet):
    hosts, inventory, good = fleet
    without = run_deploy(inventory("monitor-without-w2.py", production=(W1,)))
    assert without.returncode == 0, without.output[-3000:]
    assert wait_for(lambda: set(targets(hosts)) == expected(serving=(W1,)), 2 * SCRAPE + 10), targets(hosts)
    back = run_deploy(good)
    assert back.returncode == 0, back.output[-3000:]
    assert wait_for(lambda: (lambda t: set(t) == expected() and set(t.values()) == {"up"})(targets(hosts)),
                    2 * SCRAPE + 30), targets(hosts)
