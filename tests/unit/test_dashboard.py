"""The Grafana dashboard (templates/grafana/sglang-fleet.json), read as a site's Grafana reads it: it loads, its
variables select many with All as '.*', every panel has a query, ids are unique, and every query, its Grafana
variables filled in (tests/support/dashboard_queries.py), is PromQL that Prometheus' own parser accepts
(promtool), reads only metrics the fleet's targets give, filters by $model and $host, takes its rate windows from
$__rate_interval and leaves out the -1 a gateway keeps for a removed worker. Whether the series answer is for the
end-to-end test.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import promtool

from dashboard_queries import concrete, metric_names, panel_queries, panels
from harness import PROJECT_DIR

DASHBOARD = PROJECT_DIR / "templates" / "grafana" / "sglang-fleet.json"
PANELS = [panel for panel in panels(DASHBOARD) if panel["type"] != "row"]
QUERIES = panel_queries(DASHBOARD)
VARIABLES = {variable["name"]: variable for variable in json.loads(DASHBOARD.read_text())["templating"]["list"]}

# What the targets of prometheus.yml give: SGLang's server (--enable-metrics), the gateway (sglang-router 0.3.2),
# the gate's textfile (sglang_infra/hostside/gate/gate_metrics.py) and Prometheus' own `up`; the node exporter's node_*.
HISTOGRAMS = ("sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds",
              "sglang:inter_token_latency_seconds", "smg_router_request_duration_seconds")
KNOWN = {
    "up",
    "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput", "sglang:token_usage",
    "sglang:cache_hit_rate", "sglang:prompt_tokens_total", "sglang:generation_tokens_total",
    "smg_http_requests_total", "smg_http_responses_total", "smg_worker_health", "smg_worker_requests_active",
    "smg_worker_cb_state", "smg_worker_retries_total", "smg_worker_pool_size",
    "sglang_gate_last_run_timestamp_seconds", "sglang_gate_passed", "sglang_gate_tool_call_ok",
    "sglang_gate_tokens_per_second", "sglang_gate_baseline_tokens_per_second", "sglang_config_validated",
    "sglang_hf_cache_avail_bytes", "sglang_hf_cache_size_bytes",
    # the GPU textfile (sglang_infra/hostside/gpu/gpu_metrics.py)
    "sglang_gpus_seen", "sglang_gpus_planned", "sglang_gpu_temperature_celsius",
    "sglang_gpu_slowdown_temperature_celsius", "sglang_gpu_power_watts", "sglang_gpu_power_limit_watts",
    "sglang_gpu_utilization_ratio", "sglang_gpu_memory_used_bytes", "sglang_gpu_memory_total_bytes",
    "sglang_gpu_ecc_errors", "sglang_gpu_row_remap_pending", "sglang_gpu_xid_errors", "sglang_gpu_clock_event_active",
    *(f"{name}{suffix}" for name in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")),
}
# A gateway cannot delete a removed worker's series: it sets smg_worker_health and smg_worker_cb_state to -1,
# where 0 would mean something. smg_worker_requests_active is held to the same rule (drain.py takes no negative
# count either). Each must be compared so that -1 drops out.
REMOVED_AT_MINUS_ONE = ("smg_worker_health", "smg_worker_cb_state", "smg_worker_requests_active")
DROPS_MINUS_ONE = re.compile(r"\s*(>=\s*0|>\s*-1|==\s*[012])(?![\d.])")
SELECTOR = re.compile(r"\{([^}]*)\}")


def query_id(value) -> str:
    return value if isinstance(value, str) and len(value) < 60 else "expr"


def test_the_dashboard_is_grafana_json_with_queries():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["schemaVersion"] >= 39
    assert len(PANELS) > 20 and len(QUERIES) >= len(PANELS)


def test_the_datasource_is_a_variable_of_type_prometheus():
    assert VARIABLES["datasource"]["type"] == "datasource" and VARIABLES["datasource"]["query"] == "prometheus"


@pytest.mark.parametrize("name,query", [("model", 'label_values(up{job="sglang"}, model)'),
                                        ("host", "label_values(up, host)")])
def test_the_model_and_host_variables_select_many_and_all_means_every_value(name, query):
    variable = VARIABLES[name]
    assert variable["definition"] == query and variable["query"]["query"] == query
    assert variable["multi"] and variable["includeAll"] and variable["allValue"] == ".*"


@pytest.mark.parametrize("panel", PANELS, ids=lambda panel: panel["title"])
def test_every_panel_has_a_query_on_the_datasource_variable(panel):
    assert [target for target in panel["targets"] if target.get("expr")], f"{panel['title']}: no query"
    assert {panel["datasource"]["uid"], *(target["datasource"]["uid"] for target in panel["targets"])} == \
        {"${datasource}"}


def test_panel_ids_are_unique():
    ids = [panel["id"] for panel in panels(DASHBOARD)]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("title,expr", QUERIES, ids=query_id)
def test_prometheus_parses_every_query(tmp_path, title, expr):
    # promtool parses a recording rule's expression with Prometheus' own parser, offline.
    rule = {"groups": [{"name": "dashboard", "rules": [{"record": "dashboard:query", "expr": concrete(expr)}]}]}
    (tmp_path / "query.yml").write_text(json.dumps(rule))
    result = promtool("check", "rules", "query.yml", cwd=tmp_path)
    assert result.returncode == 0, f"{title}: {concrete(expr)}\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("title,expr", QUERIES, ids=query_id)
def test_every_query_reads_only_metrics_the_fleet_gives(title, expr):
    names = metric_names(expr)
    assert names, f"{title}: no metric found in {expr}"
    assert {name for name in names if name not in KNOWN and not name.startswith("node_")} == set(), title


@pytest.mark.parametrize("title,expr", QUERIES, ids=query_id)
def test_every_selector_filters_by_model_and_host(title, expr):
    for matchers in SELECTOR.findall(expr):
        assert 'model=~"$model"' in matchers and 'host=~"$host"' in matchers, f"{title}: {{{matchers}}}"


@pytest.mark.parametrize("title,expr", QUERIES, ids=query_id)
def test_every_rate_window_is_grafanas_rate_interval(title, expr):
    assert set(re.findall(r"\[[^\]]*\]", expr)) <= {"[$__rate_interval]"}, title


@pytest.mark.parametrize("title,expr", [(title, expr) for title, expr in QUERIES
                                        if any(name in expr for name in REMOVED_AT_MINUS_ONE)], ids=query_id)
def test_a_removed_workers_minus_one_is_filtered_out(title, expr):
    for name in REMOVED_AT_MINUS_ONE:
        for found in re.finditer(re.escape(name) + r"\{[^}]*\}", expr):
            assert DROPS_MINUS_ONE.match(expr, found.end()), f"{title}: {name} is not compared to drop -1 in {expr}"
