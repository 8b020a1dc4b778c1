"""The gate's metrics for the node exporter's textfile collector (hostside/gate/gate_metrics.py), written for real
into a temp home and a temp textfile directory. No Docker here: the worker's container is a stand-in
dictionary, shaped as stack.container() returns the engine's answer, put where stack.state() looks it up."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess

import pytest

from sglang_infra.hostside import dockerapi, names, safefs, stack
from sglang_infra.hostside.gate import gate_metrics, stamp

CONTAINER = {"id": "c" * 64, "state": "running", "status": "Up 5 minutes", "image_id": "sha256:" + "ee" * 32,
             "labels": {}, "ports": [], "started_at": "2026-01-01T10:00:00.000000000Z", "health": None}
PASSED = {"time": "2026-01-01T10:05:00Z", "passed": True, "reason": None, "rolled_back": None, "tool_call_ok": True,
          "benchmark": {"time": "2026-01-01T10:04:59Z", "tok_per_s": 812.5, "baseline_tok_per_s": 985,
                        "ratio_to_baseline": 0.825, "ok": True, "result_file": "/opt/sglang/results/b.json"}}
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
RECORD_METRICS = {"sglang_gate_last_run_timestamp_seconds", "sglang_gate_passed", "sglang_gate_tool_call_ok",
                  "sglang_gate_tokens_per_second", "sglang_gate_baseline_tokens_per_second"}


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A worker's home as the deploy lays it out: compose.yaml and .env, both scripts, hf-cache; its container
    running (the stand-in)."""
    home = tmp_path / "home"
    (home / "docker").mkdir(parents=True)
    (home / "hf-cache").mkdir()
    (home / "docker" / names.COMPOSE_FILE).write_text("services: {sglang: {image: x}}\n")
    (home / "docker" / names.ENV_FILE).write_text("SGLANG_UID=999\n")
    for script in names.VALIDATION_SCRIPTS:
        (home / script).write_text("#!/bin/bash\nexit 0\n")
    if os.geteuid() == 0:
        os.chown(home, 65534, 65534)   # the account's home, as on a host: not root's alone
    monkeypatch.setattr(stack, "container", lambda *a, **k: dict(CONTAINER))
    return home


@pytest.fixture
def textfile(tmp_path):
    directory = tmp_path / "textfile"
    directory.mkdir()
    return directory


def record(home, found):
    (home / "docker" / stamp.LAST).write_text(found if isinstance(found, str) else json.dumps(found))


def validated(home, container=CONTAINER):
    """The stamp a gate that passed with ``container`` serving writes."""
    (home / "docker" / stamp.STAMP).write_text(stamp.digest(str(home), container) + "\n")


def parse(text):
    """{metric: value} of a Prometheus text exposition, asserting its shape on the way: every line a HELP, a
    TYPE or a sample, valid names, each sample after its own HELP and TYPE, once, with a finite value."""
    assert text.endswith("\n")
    samples, described = {}, []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            found = re.fullmatch(rf"# HELP ({NAME}) (\S.*)", line)
            assert found, line
            described.append(("HELP", found.group(1)))
        elif line.startswith("# TYPE "):
            found = re.fullmatch(rf"# TYPE ({NAME}) gauge", line)
            assert found, line
            described.append(("TYPE", found.group(1)))
        else:
            found = re.fullmatch(rf"({NAME}) (\S+)", line)
            assert found, line
            name, value = found.group(1), float(found.group(2))
            assert described[-2:] == [("HELP", name), ("TYPE", name)] and name not in samples
            assert math.isfinite(value)
            samples[name] = value
    return samples


def written(home, textfile):
    path = gate_metrics.write(str(home), str(textfile))
    assert path == str(textfile / names.GATE_METRICS_FILE)
    return parse((textfile / names.GATE_METRICS_FILE).read_text())


# ---------------------------------------------------------------- the last gate's record
@pytest.mark.parametrize("found, expected", [
    (PASSED, {"sglang_gate_passed": 1, "sglang_gate_tool_call_ok": 1, "sglang_gate_tokens_per_second": 812.5,
              "sglang_gate_baseline_tokens_per_second": 985}),
    ({**PASSED, "passed": False, "reason": "benchmark.sh: 400.0 tok/s is below 0.5 of the baseline",
      "rolled_back": True, "benchmark": {**PASSED["benchmark"], "tok_per_s": 400.0, "ok": False}},
     {"sglang_gate_passed": 0, "sglang_gate_tool_call_ok": 1, "sglang_gate_tokens_per_second": 400.0,
      "sglang_gate_baseline_tokens_per_second": 985}),
    ({**PASSED, "passed": False, "reason": "test_tool_calling.sh: no tool_calls", "tool_call_ok": False,
      "benchmark": None},
     {"sglang_gate_passed": 0, "sglang_gate_tool_call_ok": 0}),
    ({**PASSED, "passed": False, "reason": "the server did not become ready", "tool_call_ok": None,
      "benchmark": None},
     {"sglang_gate_passed": 0, "sglang_gate_tool_call_ok": 0}),
], ids=["passed", "benchmark-failed", "tool-call-failed", "never-ready"])
def test_the_record_gives_the_gates_outcome(home, textfile, found, expected):
    record(home, found)
    samples = written(home, textfile)
    assert {name: samples[name] for name in RECORD_METRICS if name in samples} == \
        {**expected, "sglang_gate_last_run_timestamp_seconds": 1767261900}


@pytest.mark.parametrize("found", [
    "{not json",
    "[1, 2]",
    json.dumps({"time": "yesterday", "passed": "yes", "tool_call_ok": "sure", "benchmark": "fast"}),
    json.dumps({"time": 5, "passed": 1, "benchmark": {"tok_per_s": True, "baseline_tok_per_s": "985"}}),
    '{"benchmark": {"tok_per_s": NaN, "baseline_tok_per_s": Infinity}}',
    "\x00\xff" * 40000,
], ids=["not-json", "a-list", "wrong-types", "numbers-of-the-wrong-kind", "nan", "binary-and-too-large"])
def test_a_malformed_record_still_writes_the_file_without_the_gates_metrics(home, textfile, found):
    record(home, found)
    samples = written(home, textfile)
    assert not RECORD_METRICS & set(samples)
    assert {"sglang_config_validated", "sglang_gate_metrics_written_timestamp_seconds"} <= set(samples)


def test_a_record_from_before_the_gate_kept_tool_call_ok_leaves_it_out(home, textfile):
    record(home, {key: value for key, value in PASSED.items() if key != "tool_call_ok"})
    samples = written(home, textfile)
    assert "sglang_gate_tool_call_ok" not in samples and samples["sglang_gate_passed"] == 1


def test_without_any_gate_yet_the_config_is_not_validated(home, textfile):
    samples = written(home, textfile)
    assert not RECORD_METRICS & set(samples) and samples["sglang_config_validated"] == 0


# ---------------------------------------------------------------- the stamp against the host as it is now
def test_the_config_the_gate_stamped_is_validated(home, textfile):
    validated(home)
    assert written(home, textfile)["sglang_config_validated"] == 1


def _compose_edited(home, monkeypatch):
    (home / "docker" / names.COMPOSE_FILE).write_text("services: {sglang: {image: y}}\n")


def _container_restarted(home, monkeypatch):
    monkeypatch.setattr(stack, "container", lambda *a, **k: {**CONTAINER, "started_at": "2026-01-01T11:00:00Z"})


def _script_changed(home, monkeypatch):
    (home / names.VALIDATION_SCRIPTS[1]).write_text("#!/bin/bash\nexit 1\n")


def _engine_silent(home, monkeypatch):
    def unavailable(*a, **k):
        raise dockerapi.Unavailable("no socket")

    monkeypatch.setattr(stack, "container", unavailable)


@pytest.mark.parametrize("change", [_compose_edited, _container_restarted, _script_changed, _engine_silent],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_change_since_the_gate_shows_the_config_not_validated(home, textfile, monkeypatch, change):
    validated(home)
    change(home, monkeypatch)
    assert written(home, textfile)["sglang_config_validated"] == 0


def test_config_validated_is_what_the_snapshot_reports_to_the_deploy(home, textfile, monkeypatch):
    """The same stamp, the same digest, the same comparison as snapshot.py's "gate" section."""
    from sglang_infra.hostside.read import snapshot

    validated(home)
    monkeypatch.setattr(snapshot, "docker", lambda unit: {"api": True, "runtimes": []})
    monkeypatch.setattr(snapshot, "gpus", lambda: None)
    found = snapshot.read({"home": str(home), "tools_dir": str(home / "tools"), "user": "root", "admins": [],
                           "groups": [], "uid": None, "gid": None})["gate"]
    assert names.stamp_current(found["stamp"], found["digest"])
    assert written(home, textfile)["sglang_config_validated"] == 1


# ---------------------------------------------------------------- the worker's container (a multi-node group's members)
def test_a_running_container_gives_running_and_when_it_started(home, textfile, monkeypatch):
    started = {**CONTAINER, "started_at": "2026-01-01T10:00:20.123456789Z"}   # Docker's nanoseconds
    monkeypatch.setattr(stack, "container", lambda *a, **k: started)
    samples = written(home, textfile)
    assert samples["sglang_container_running"] == 1
    assert samples["sglang_container_started_timestamp_seconds"] == pytest.approx(1767261620.123456)


@pytest.mark.parametrize("found", [None, {**CONTAINER, "state": "exited"}, "engine down"],
                         ids=["gone", "exited", "engine-silent"])
def test_a_container_gone_exited_or_unknown_is_not_running_and_has_no_start(home, textfile, monkeypatch, found):
    if found == "engine down":
        _engine_silent(home, monkeypatch)
    else:
        monkeypatch.setattr(stack, "container", lambda *a, **k: found)
    samples = written(home, textfile)
    assert samples["sglang_container_running"] == 0 and "sglang_container_started_timestamp_seconds" not in samples


@pytest.mark.parametrize("gate_saw, expected", [
    (CONTAINER["started_at"], 1),
    ("2026-01-01T09:00:00.000000000Z", 0),     # restarted since the gate (a group's member restarted alone)
    (None, None),                              # a record from before the gate kept its container: not known
], ids=["the-gated-one", "restarted-since", "not-recorded"])
def test_the_running_container_is_gated_when_its_last_gate_stamped_it(home, textfile, gate_saw, expected):
    record(home, {**PASSED, **({"container": {"id": CONTAINER["id"], "started_at": gate_saw}} if gate_saw else {})})
    assert written(home, textfile).get("sglang_container_gated") == expected


# ---------------------------------------------------------------- hf-cache's filesystem
def test_hf_cache_gives_its_filesystems_free_and_total_bytes(home, textfile):
    samples = written(home, textfile)
    found = os.statvfs(home / "hf-cache")
    assert samples["sglang_hf_cache_size_bytes"] == found.f_blocks * found.f_frsize
    assert 0 < samples["sglang_hf_cache_avail_bytes"] <= samples["sglang_hf_cache_size_bytes"]


def test_hf_cache_as_a_link_is_not_followed_and_gives_no_cache_metrics(home, textfile, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home / "hf-cache").rmdir()
    (home / "hf-cache").symlink_to(elsewhere)
    samples = written(home, textfile)
    assert not {"sglang_hf_cache_avail_bytes", "sglang_hf_cache_size_bytes"} & set(samples)
    assert samples["sglang_gate_metrics_written_timestamp_seconds"] > 0


def test_no_hf_cache_gives_no_cache_metrics(home, textfile):
    (home / "hf-cache").rmdir()
    assert not {"sglang_hf_cache_avail_bytes", "sglang_hf_cache_size_bytes"} & set(written(home, textfile))


# ---------------------------------------------------------------- the file itself
def test_a_link_planted_at_the_metrics_file_is_replaced_not_followed(home, textfile, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    (textfile / names.GATE_METRICS_FILE).symlink_to(victim)
    record(home, PASSED)
    written(home, textfile)
    assert not (textfile / names.GATE_METRICS_FILE).is_symlink() and victim.read_text() == "untouched\n"
    assert (textfile / names.GATE_METRICS_FILE).stat().st_mode & 0o777 == 0o644


def test_the_file_is_written_under_a_name_the_collector_skips_then_renamed(home, textfile, monkeypatch):
    created = []
    create_new = safefs.create_new

    def recorded(dir_fd, name, *args, **kwargs):
        created.append(name)
        return create_new(dir_fd, name, *args, **kwargs)

    monkeypatch.setattr(safefs, "create_new", recorded)
    record(home, PASSED)
    written(home, textfile)
    written(home, textfile)
    assert len(created) == 2 and not any(name.endswith(".prom") for name in created)
    assert os.listdir(textfile) == [names.GATE_METRICS_FILE]


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(home, textfile, monkeypatch):
    (textfile / names.GATE_METRICS_FILE).write_text("old\n")

    def full(_fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safefs.os, "fsync", full)
    with pytest.raises(OSError):
        gate_metrics.write(str(home), str(textfile))
    assert os.listdir(textfile) == [names.GATE_METRICS_FILE]
    assert (textfile / names.GATE_METRICS_FILE).read_text() == "old\n"


def test_without_the_textfile_directory_nothing_is_written(home, tmp_path):
    missing = tmp_path / "no-node-exporter"
    assert gate_metrics.write(str(home), str(missing)) is None
    assert gate_metrics.main(["--home", str(home), "--textfile-dir", str(missing)]) == 0
    assert not missing.exists()


def test_a_link_on_the_way_to_the_textfile_directory_is_refused(home, tmp_path, capsys):
    parent, elsewhere = tmp_path / "lib", tmp_path / "elsewhere"
    parent.mkdir()
    elsewhere.mkdir()
    if os.geteuid() == 0:
        os.chown(parent, 65534, 65534)   # a directory someone other than root can write
    (parent / "node-exporter").symlink_to(elsewhere)
    assert gate_metrics.main(["--home", str(home), "--textfile-dir", str(parent / "node-exporter")]) == 1
    assert "node-exporter is a symlink" in capsys.readouterr().err and os.listdir(elsewhere) == []


def test_the_command_line_writes_the_file(home, textfile):
    record(home, PASSED)
    assert gate_metrics.main(["--home", str(home), "--textfile-dir", str(textfile)]) == 0
    assert parse((textfile / names.GATE_METRICS_FILE).read_text())["sglang_gate_passed"] == 1


def test_promtool_accepts_the_file(home, textfile):
    assert shutil.which("promtool"), "promtool is missing: scripts/setup-machine.sh installs Debian's prometheus"
    record(home, PASSED)
    validated(home)
    written(home, textfile)
    with open(textfile / names.GATE_METRICS_FILE, "rb") as handle:
        found = subprocess.run(["promtool", "check", "metrics"], stdin=handle, capture_output=True, text=True,
                               timeout=60)
    assert found.returncode == 0, found.stdout + found.stderr
