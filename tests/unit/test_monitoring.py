"""The fleet's metrics without hosts: what a monitor host scrapes (targets, labels, where each is reached), its
refusals, the Prometheus config promtool accepts, and the operations that install and run the exporters."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from conftest import FakeHost, command_text, converged_snapshot, on_host, pinned_defaults

from sglang_infra.fleet.hosts import Fleet, InventoryHost
from sglang_infra.fleet.monitoring import scrape_address, targets_of, with_monitor
from sglang_infra.operations import system as ops
from sglang_infra.plan.problems import DeployDataError
from sglang_infra.plan.refusals import check_data
from sglang_infra.plan.resolve import resolve, snapshot_spec
from sglang_infra.plan.roles import roles
from sglang_infra.run import factcache

DEFAULTS = pinned_defaults()
PROD = "qwen3.6-35b-a3b-awq"


def inventory_host(name, groups, **data):
    values = {**DEFAULTS, "sglang_require_gpu": False, **data}
    return InventoryHost(name, values, tuple(groups), *roles(groups))


def fleet(node_bind="0.0.0.0", gateway_metrics="10.0.0.5"):
    return [
        inventory_host("gpu-01", ["production"], ssh_hostname="10.0.0.11", sglang_model=PROD,
                       sglang_node_exporter_bind_address=node_bind),
        inventory_host("gpu-02", ["production"], ssh_hostname="10.0.0.12", sglang_model=PROD,
                       sglang_node_exporter_bind_address=node_bind),
        inventory_host("gw-1", ["router"], ssh_hostname="10.0.0.5", sglang_router_bind_address="10.0.0.5",
                       sglang_router_prometheus_bind_address=gateway_metrics,
                       sglang_node_exporter_bind_address=node_bind),
        inventory_host("mon-1", ["monitor"], ssh_hostname="10.0.0.9"),
    ]


def monitor_plan(**data):
    values = {**DEFAULTS, "sglang_require_gpu": False, **data}
    return resolve("mon-1", values, converged_snapshot(None), ("monitor",))


def by_job(targets):
    out = {}
    for target in targets:
        out.setdefault(target.job, {})[target.address] = dict(target.labels)
    return out


def test_a_monitor_only_host_serves_no_model_and_runs_no_gateway():
    plan = monitor_plan()
    assert (plan.serves, plan.runs_gateways, plan.monitors) == (False, False, True)


def test_a_monitor_scrapes_every_worker_gateway_and_node_exporter_of_the_inventory_with_their_labels():
    targets, unreachable = targets_of("mon-1", Fleet.of(fleet()))
    assert unreachable == []
    jobs = by_job(targets)
    assert jobs["sglang"] == {
        "10.0.0.11:30000": {"host": "gpu-01", "group": "production", "model": PROD, "role": "worker"},
        "10.0.0.12:30000": {"host": "gpu-02", "group": "production", "model": PROD, "role": "worker"}}
    # The gateway's metrics port follows its model's position in the registry (gateways.place).
    [(gateway, labels)] = jobs["sglang-router"].items()
    assert gateway.startswith("10.0.0.5:290") and labels == {"host": "gw-1", "group": "router", "model": PROD,
                                                              "role": "gateway"}
    assert set(jobs["node"]) == {"10.0.0.11:9100", "10.0.0.12:9100", "10.0.0.5:9100", "127.0.0.1:9100"}
    # The monitor's own node exporter listens on loopback by default: it scrapes it there.
    assert jobs["node"]["127.0.0.1:9100"] == {"host": "mon-1", "group": "monitor", "model": "", "role": "node"}


def test_a_multi_node_groups_members_are_scraped_with_their_group_and_rank():
    """The rules judge a group from its members' series (SGLangGroupMemberDown, SGLangGroupStale): each member's
    worker and node targets name its group and its rank; a host outside any group gets neither label."""
    hosts = fleet()
    for i in (0, 1):
        hosts[i] = inventory_host(hosts[i].name, ["production"], **{**hosts[i].data, "sglang_node_group": "ds-a"})
    jobs = by_job(targets_of("mon-1", Fleet.of(hosts))[0])
    for job, port in (("sglang", 30000), ("node", 9100)):
        assert {(labels["host"], labels.get("node_group"), labels.get("node_rank"))
                for address, labels in jobs[job].items() if address.startswith("10.0.0.1")} == \
            {("gpu-01", "ds-a", "0"), ("gpu-02", "ds-a", "1")}, job
    assert "node_group" not in jobs["node"]["10.0.0.5:9100"] and "node_rank" not in jobs["node"]["127.0.0.1:9100"]


def test_a_worker_address_is_where_the_monitor_reaches_its_server_as_the_gateways_do():
    hosts = [inventory_host("gpu-01", ["production"], ssh_hostname="gpu-01.example", sglang_model=PROD,
                            sglang_worker_address="10.1.0.11"), inventory_host("mon-1", ["monitor"])]
    targets, _ = targets_of("mon-1", Fleet.of(hosts))
    assert "10.1.0.11:30000" in by_job(targets)["sglang"]


def test_a_worker_without_metrics_is_not_scraped_for_them():
    hosts = [inventory_host("gpu-01", ["production"], ssh_hostname="10.0.0.11", sglang_enable_metrics=False),
             inventory_host("mon-1", ["monitor"])]
    assert "sglang" not in by_job(targets_of("mon-1", Fleet.of(hosts))[0])


@pytest.mark.parametrize("bind,same,expected", [
    ("127.0.0.1", True, "127.0.0.1:9100"), ("127.0.0.1", False, None), ("0.0.0.0", False, "10.0.0.11:9100"),
    ("10.2.0.11", False, "10.2.0.11:9100"), ("::", False, "10.0.0.11:9100"), ("fd00::11", False, "[fd00::11]:9100"),
])
def test_a_port_is_scraped_where_it_is_published(bind, same, expected):
    assert scrape_address(bind, 9100, "10.0.0.11", same) == expected


def refusals(plan, hosts):
    with pytest.raises(DeployDataError) as caught:
        with_monitor(plan, Fleet.of(hosts))
    return caught.value.problems


def test_a_node_exporter_on_loopback_elsewhere_is_refused_naming_the_host_the_key_and_the_fix():
    problems = refusals(monitor_plan(), fleet(node_bind="127.0.0.1"))
    assert len(problems) == 3
    assert problems[0].startswith("host gpu-01: sglang_node_exporter_bind_address: 127.0.0.1 is loopback, "
                                  "but monitor host mon-1 scrapes")
    assert "Fix: set sglang_node_exporter_bind_address for gpu-01 to the address mon-1 reaches it on" in problems[0]


def test_a_gateways_metrics_on_loopback_elsewhere_is_refused():
    [problem] = refusals(monitor_plan(), fleet(gateway_metrics="127.0.0.1"))
    assert problem.startswith("host gw-1: sglang_router_prometheus_bind_address: 127.0.0.1 is loopback")


def test_a_monitor_group_with_no_host_to_scrape_is_refused():
    [problem] = refusals(monitor_plan(), [inventory_host("mon-1", ["monitor"])])
    assert problem.startswith("host mon-1: inventory: the monitor group has no host to scrape")


@pytest.mark.parametrize("key,value", [
    ("sglang_prometheus_retention", "15 days"), ("sglang_prometheus_retention", "0d"),
    ("sglang_prometheus_retention", 15), ("sglang_prometheus_listen_address", "localhost:9090"),
    ("sglang_prometheus_listen_address", "127.0.0.1"), ("sglang_prometheus_listen_address", "::1:9090"),
    ("sglang_prometheus_scrape_interval", "fast"), ("sglang_node_exporter_bind_address", "every"),
    ("sglang_alert_throughput_fraction", 0), ("sglang_alert_disk_free_fraction", 1.0),
])
def test_bad_metrics_settings_are_refused_naming_the_key(key, value):
    problems = check_data("mon-1", {**DEFAULTS, key: value})
    assert [p for p in problems if p.startswith(f"host mon-1: {key}: ")], problems


def test_the_defaults_listen_on_loopback_only():
    assert DEFAULTS["sglang_node_exporter_bind_address"] == "127.0.0.1"
    assert DEFAULTS["sglang_prometheus_listen_address"].startswith("127.0.0.1:")
    assert DEFAULTS["sglang_router_prometheus_bind_address"] == "127.0.0.1"


def config_of(plan):
    return yaml.safe_load(plan.monitor.config)


def test_the_config_lists_every_target_with_its_labels_and_the_rules():
    plan = with_monitor(monitor_plan(sglang_prometheus_scrape_interval="5s"), Fleet.of(fleet()))
    config = config_of(plan)
    assert config["global"]["scrape_interval"] == "5s"
    assert config["rule_files"] == ["/etc/prometheus/sglang-alerts.yml"]
    jobs = {job["job_name"]: job["static_configs"] for job in config["scrape_configs"]}
    assert set(jobs) == {"sglang", "sglang-router", "node", "prometheus"}
    assert {"targets": ["10.0.0.11:30000"], "labels": {"host": "gpu-01", "group": "production", "model": PROD,
                                                       "role": "worker"}} in jobs["sglang"]
    assert jobs["prometheus"] == [{"targets": ["127.0.0.1:9090"],
                                   "labels": {"host": "mon-1", "group": "monitor", "model": "", "role": "monitor"}}]


def test_a_host_name_with_quotes_stays_one_yaml_string():
    hosts = [inventory_host('gpu-"01": x', ["production"], ssh_hostname="10.0.0.11",
                            sglang_node_exporter_bind_address="10.0.0.11"),
             inventory_host("mon-1", ["monitor"])]
    config = config_of(with_monitor(monitor_plan(), Fleet.of(hosts)))
    [worker] = [job for job in config["scrape_configs"] if job["job_name"] == "sglang"]
    assert worker["static_configs"][0]["labels"]["host"] == 'gpu-"01": x'


def test_the_drop_in_sets_listen_address_and_retention_on_the_command_line():
    plan = with_monitor(monitor_plan(sglang_prometheus_listen_address="10.0.0.9:9191",
                                     sglang_prometheus_retention="30d"), Fleet.of(fleet()))
    [start] = [line for line in plan.monitor.dropin.splitlines() if line.startswith("ExecStart=/")]
    assert "--web.listen-address=10.0.0.9:9191" in start and "--storage.tsdb.retention.time=30d" in start
    assert "--config.file=/etc/prometheus/prometheus.yml" in start


def test_the_node_exporter_listens_where_the_data_says_and_reads_the_gates_textfile():
    from sglang_infra.hostside import names

    plan = resolve("gpu-01", {**DEFAULTS, "sglang_node_exporter_bind_address": "10.0.0.11"}, converged_snapshot())
    [start] = [line for line in plan.node_exporter.dropin.splitlines() if line.startswith("ExecStart=/")]
    assert f"--web.listen-address=10.0.0.11:9100 --collector.textfile.directory={names.TEXTFILE_DIR}" in start
    # A host with GPUs also gets the GPU metrics' program and timer, expecting the GPUs found now.
    assert set(plan.node_exporter.gate_metrics_units) == {"/usr/local/lib/sglang/gate_metrics.py",
                                            "/etc/systemd/system/sglang-gate-metrics.service",
                                            "/etc/systemd/system/sglang-gate-metrics.timer",
                                            "/usr/local/lib/sglang/gpu_metrics.py",
                                            "/etc/systemd/system/sglang-gpu-metrics.service",
                                            "/etc/systemd/system/sglang-gpu-metrics.timer"}
    service = plan.node_exporter.gate_metrics_units["/etc/systemd/system/sglang-gpu-metrics.service"]
    assert f"--planned {plan.gpus.count} --textfile-dir {names.TEXTFILE_DIR}" in service


def test_a_host_without_gpus_gets_no_gpu_metrics():
    snapshot = {**converged_snapshot(), "gpus": None}
    plan = resolve("gpu-01", {**DEFAULTS, "sglang_require_gpu": False}, snapshot)
    units = plan.node_exporter.gate_metrics_units
    assert units and not [path for path in units if "gpu" in path]


def test_no_node_exporter_when_it_is_off():
    plan = resolve("gpu-01", {**DEFAULTS, "sglang_node_exporter": False}, converged_snapshot())
    assert plan.node_exporter is None


def test_the_snapshot_reads_the_metrics_units_and_packages():
    spec = snapshot_spec(DEFAULTS)
    assert "/etc/prometheus" in spec["system_dirs"]
    # (then the peer door's unit, sglang_infra/plan/peerdoor.py)
    assert spec["services"][:3] == ["prometheus.service", "prometheus-node-exporter.service",
                                    "sglang-gate-metrics.timer"]


def test_promtool_accepts_the_rendered_config_and_rules(tmp_path):
    assert shutil.which("promtool"), "promtool is missing: scripts/setup-machine.sh installs Debian's prometheus"
    plan = with_monitor(monitor_plan(), Fleet.of(fleet()))
    rules = tmp_path / "sglang-alerts.yml"
    rules.write_text(plan.monitor.rules)
    config = tmp_path / "prometheus.yml"
    config.write_text(plan.monitor.config.replace("/etc/prometheus/sglang-alerts.yml", str(rules)))
    found = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stdout + found.stderr


def run(operation, snapshot, executing=False, **kwargs):
    fake = FakeHost({"Snapshot": snapshot}, executing=executing)
    try:
        with on_host(fake):
            commands = [command_text(c) for c in operation._inner(**kwargs)]
    finally:
        factcache.invalidate(fake)
    return commands, fake.noops


def test_installed_packages_are_left_alone():
    commands, noops = run(ops.packages_installed, {"packages": {"prometheus": "2.53.3"}}, packages=["prometheus"])
    assert commands == [] and noops


def test_a_missing_package_is_installed_without_recommends_keeping_the_deploys_conffiles():
    [command], _ = run(ops.packages_installed, {"packages": {"prometheus": None}}, packages=["prometheus"])
    assert "apt-get install -y -qq --no-install-recommends" in command and "--force-confold" in command
    assert command.count(" prometheus") == 2   # once, then again after apt-get update when the lists lack it


RUNNING = {"loaded": True, "active": "active", "enabled": "enabled", "reload_needed": False}


@pytest.mark.parametrize("state,restart,reload,expected", [
    (RUNNING, False, False, None),
    (RUNNING, False, True, "systemctl reload prometheus.service"),
    (RUNNING, True, True, "systemctl daemon-reload && systemctl restart prometheus.service"),
    ({**RUNNING, "reload_needed": True}, False, False,
     "systemctl daemon-reload && systemctl restart prometheus.service"),
    ({**RUNNING, "active": "inactive", "enabled": "disabled"}, False, False,
     "systemctl enable prometheus.service && systemctl start prometheus.service"),
])
def test_a_service_restarts_only_for_new_flags_and_reloads_only_for_new_files(state, restart, reload, expected):
    commands, noops = run(ops.service_running, {"services": {"prometheus.service": state}}, executing=True,
                          unit="prometheus.service", restart_if=lambda: restart, reload_if=lambda: reload)
    assert commands == ([expected] if expected else [])
    assert bool(noops) == (expected is None)


def test_an_existing_system_directory_is_left_alone():
    commands, noops = run(ops.root_directory, {"system_dirs": {"/usr/local/lib/sglang": True}},
                          path="/usr/local/lib/sglang")
    assert commands == [] and noops
    commands, _ = run(ops.root_directory, {"system_dirs": {}}, path="/usr/local/lib/sglang")
    assert commands == ["install -d -m 0755 -o root -g root /usr/local/lib/sglang"]


def test_the_snapshot_reads_each_units_state_from_one_systemctl_call(monkeypatch):
    from sglang_infra.hostside.read import snapshot

    calls = []
    shown = ("Id=prometheus.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n"
             "NeedDaemonReload=yes\n\nId=sglang-gate-metrics.timer\nLoadState=not-found\nActiveState=inactive\n"
             "UnitFileState=\nNeedDaemonReload=no\n")
    monkeypatch.setattr(snapshot, "_run", lambda *argv: calls.append(argv) or shown)
    found = snapshot.services(["prometheus.service", "sglang-gate-metrics.timer"])
    assert len(calls) == 1
    assert found == {"prometheus.service": {"loaded": True, "active": "active", "enabled": "enabled",
                                            "reload_needed": True},
                     "sglang-gate-metrics.timer": {"loaded": False, "active": "inactive", "enabled": "",
                                                   "reload_needed": False}}


def test_the_snapshot_counts_only_installed_packages(monkeypatch, tmp_path):
    from sglang_infra.hostside.read import snapshot

    monkeypatch.setattr(snapshot, "DPKG_ADMINDIR", str(tmp_path / "no-dpkg"))   # dpkg-query answers
    monkeypatch.setattr(snapshot.safefs, "which", lambda name: "/usr/bin/dpkg-query")
    monkeypatch.setattr(snapshot, "_run", lambda *argv: "prometheus\tii \t2.53.3+ds1-2\n"
                                                        "prometheus-node-exporter\trc \t1.9.0-1\n")
    assert snapshot.packages(["prometheus", "prometheus-node-exporter"]) == {
        "prometheus": "2.53.3+ds1-2", "prometheus-node-exporter": None}


def test_a_malformed_bind_address_on_a_host_outside_the_run_is_refused_not_a_crash():
    hosts = [inventory_host("gpu-01", ["production"], ssh_hostname="10.0.0.11",
                            sglang_node_exporter_bind_address="gpu-01.internal"),
             inventory_host("mon-1", ["monitor"])]
    [problem] = refusals(monitor_plan(), hosts)
    assert problem.startswith("host gpu-01: sglang_node_exporter_bind_address: 'gpu-01.internal' is not an IP "
                              "address, so monitor host mon-1 cannot tell where to scrape")
