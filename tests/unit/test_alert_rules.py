"""The alert rules a monitor host's Prometheus loads (templates/prometheus/sglang-alerts.yml.j2), rendered the way
the deploy renders them (render.alert_rules, from the sglang_alert_* keys of group_data/all.py): promtool accepts
them, they pass promtool's unit tests in tests/support/promtool/, every rule has a case there that fires and one that
stays silent, their annotations keep Prometheus' own templates through Jinja, and each sglang_alert_* value lands
in the rule it sets. promtool is Debian's (package prometheus); scripts/setup-machine.sh installs it."""

from __future__ import annotations

import shutil

import pytest
import yaml
from conftest import pinned_defaults, promtool

from harness import PROJECT_DIR
from sglang_infra.plan import render
from sglang_infra.plan.types import MonitorSettings

DATA = pinned_defaults()
RULES_FILE = "sglang-alerts.yml"   # the name the promtool tests' rule_files give, beside them in a temp dir
PROMTOOL_TESTS = sorted((PROJECT_DIR / "tests" / "support" / "promtool").glob("*.yml"))


def rules_text(**alert_keys) -> str:
    """The rules file as the deploy renders it, with group_data's defaults and ``alert_keys`` (without the
    sglang_alert_ prefix) changed."""
    data = {**DATA, **{f"sglang_alert_{key}": value for key, value in alert_keys.items()}}
    return render.alert_rules(MonitorSettings.of(data))


def rules_of(text: str) -> dict[str, dict]:
    return {rule["alert"]: rule for group in yaml.safe_load(text)["groups"] for rule in group["rules"]}


RULES = rules_of(rules_text())


def cases() -> list[tuple[str, str, str, bool]]:
    """(test file, case name, alert name, fires) for every alert_rule_test of tests/support/promtool/."""
    found = []
    for path in PROMTOOL_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for check in test.get("alert_rule_test", []):
                found.append((path.name, test["name"], check["alertname"], bool(check.get("exp_alerts"))))
    return found


CASES = cases()


@pytest.fixture
def rendered(tmp_path):
    """The rules, rendered with the defaults, as RULES_FILE in a temp dir."""
    (tmp_path / RULES_FILE).write_text(rules_text())
    return tmp_path


def test_there_are_promtool_tests():
    assert PROMTOOL_TESTS and CASES


def test_promtool_accepts_the_rules(rendered):
    result = promtool("check", "rules", RULES_FILE, cwd=rendered)
    assert result.returncode == 0, f"promtool check rules failed:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("test_file", PROMTOOL_TESTS, ids=lambda path: path.name)
def test_the_rules_pass_their_promtool_tests(rendered, test_file):
    shutil.copy(test_file, rendered / test_file.name)
    result = promtool("test", "rules", test_file.name, cwd=rendered)
    assert result.returncode == 0, f"promtool test rules {test_file.name} failed:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("alert", sorted(RULES))
def test_every_rule_has_a_case_where_it_fires(alert):
    assert [case for case in CASES if case[2] == alert and case[3]], \
        f"{alert}: no promtool test in tests/support/promtool/ expects it to fire"


@pytest.mark.parametrize("alert", sorted(RULES))
def test_every_rule_has_a_case_where_it_stays_silent(alert):
    assert [case for case in CASES if case[2] == alert and not case[3]], \
        f"{alert}: no promtool test in tests/support/promtool/ expects it to stay silent"


@pytest.mark.parametrize("test_file,name,alert,fires", CASES, ids=lambda value: str(value))
def test_every_case_names_a_rule_that_exists(test_file, name, alert, fires):
    # A silent case of a misspelt alert would pass, testing nothing.
    assert alert in RULES, f"{test_file}: {name!r} tests {alert}, which no rule defines"


@pytest.mark.parametrize("alert", sorted(RULES))
def test_each_rule_has_a_for_a_severity_and_annotations_naming_the_host(alert):
    rule = RULES[alert]
    assert rule["for"] and rule["labels"]["severity"] in ("warning", "critical")
    # Jinja left Prometheus' own templates in place: the host is named when the alert fires.
    assert "{{ $labels.host }}" in rule["annotations"]["summary"]
    assert "{{ $labels.host }}" in rule["annotations"]["description"]


@pytest.mark.parametrize("key,value,alert,field,expected", [
    ("down_for", "7m", "SGLangTargetDown", "for", "7m"),
    ("down_for", "7m", "SGLangWorkerUnhealthy", "for", "7m"),
    ("throughput_fraction", 0.25, "SGLangThroughputLow", "expr", "< 0.25 * sglang_gate_baseline_tokens_per_second"),
    ("queue_depth", 40, "SGLangQueueHigh", "expr", ") > 40"),
    ("queue_for", "25m", "SGLangQueueHigh", "for", "25m"),
    ("disk_free_fraction", 0.05, "SGLangHfCacheDiskFull", "expr", "< 0.05 * sglang_hf_cache_size_bytes"),
    ("config_for", "1h", "SGLangConfigNotValidated", "for", "1h"),
])
def test_each_setting_lands_in_its_rule(key, value, alert, field, expected):
    rule = rules_of(rules_text(**{key: value}))[alert]
    if field == "for":
        assert rule["for"] == expected
    else:
        assert expected in rule[field]
