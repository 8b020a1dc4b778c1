"""The fleet status report: a host's row from its plan and snapshot (the lock
rules), the verdicts, table, summary and exit code from rows, and the
report's host-side reads (hf-cache size, the gate's record) on temp trees."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from types import SimpleNamespace

import pytest
from conftest import pinned_defaults, plan_for

from sglang_infra.hostside.gate import gate, report, stamp
from sglang_infra.models.lockfile import Lock, LockedModel
from sglang_infra.status import fleetstatus, statusrows

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
FILES = ({"path": "config.json", "size": 2, "sha256": "1" * 64, "sha256_from": "computed"},)
IMAGE_ID = "sha256:" + "ee" * 32


def _plan(toolchain=False, **data):
    # A trusted network unless a test says otherwise: without a key the deploy would refuse the host.
    return plan_for({**pinned_defaults(), "sglang_toolchain_image": toolchain, "sglang_trusted_network": True, **data})


def _locked(plan, lock):
    """The plan as resolve makes it with ``lock``: the lock, and the digest it pins for the image."""
    return replace(plan, lock=lock, image=replace(plan.image, locked=lock.pinned_image(plan.image.tag)))


def _lock(plan, digest=DIGEST, commit=None):
    model = LockedModel(plan.served.key, plan.served.repo_id, commit or plan.served.revision, FILES)
    return Lock(path="/inv/sglang.lock", written_at="", models={plan.served.key: model},
                images={plan.image.tag: digest} if digest else {}, wheels={})


def _snapshot(plan, repo_digest=None, labels=None, content=None, verified=True, gate_record=None, state="running"):
    repo = plan.image.tag.split(":")[0]
    images = {plan.image.serving: {"id": IMAGE_ID, "labels": labels or {}}}
    if repo_digest:
        images[f"{repo}@{repo_digest}"] = {"id": IMAGE_ID, "labels": labels or {}}
    revision = {"complete": verified, "verified": verified, "size": 2,
                "content": content if content is not None else LockedModel("k", "r", "c", FILES).content}
    return {
        "os": {"id": "debian", "version": "13"},
        "docker": {"images": images},
        "stack": {"container": {"id": "c1", "state": state, "health": "healthy", "image_id": IMAGE_ID,
                                "started_at": "2026-01-01T10:00:00.123456789Z",
                                "labels": {"sglang.model": plan.served.pinned}}},
        "models": {"repos": {plan.served.repo_id: {"revisions": {plan.served.revision: revision}}}},
        "gate": {"stamp": "s", "digest": "s"},
        "report": {"now": 1767261600.0 + 3725,   # 2026-01-01T11:02:05Z
                   "gpus": [{"name": "NVIDIA GeForce RTX 4090", "used_mib": 20000, "total_mib": 24564}] * 2,
                   "engine": {"version": "26.1.5"}, "compose": "2.26.1",
                   "cache": {"bytes": 2048, "files": 1, "partial": False},
                   "disk": {"free": 10 << 30, "total": 100 << 30},
                   "gate": gate_record if gate_record is not None else {
                       "time": "2026-01-01T10:01:00Z", "passed": True, "reason": None, "rolled_back": None,
                       "benchmark": {"tok_per_s": 900.0, "baseline_tok_per_s": 985, "ratio_to_baseline": 0.914}}},
    }


# ---------------------------------------------------------------- one host's row

def test_a_row_says_what_the_host_runs():
    plan = _plan()
    row = statusrows.row("gpu-01", plan, _snapshot(plan), [])
    assert row["os"] == "debian 13"
    assert row["gpus"] == {"count": 2, "names": {"NVIDIA GeForce RTX 4090": 2}, "used_mib": 40000,
                           "total_mib": 49128}
    assert row["docker"] == {"engine": "26.1.5", "compose": "2.26.1"}
    assert row["image"]["ref"] == plan.image.serving and row["image"]["id"] == "ee" * 6
    assert row["image"]["lock"] == "no lock" and row["model"]["lock"] == "no lock"
    assert row["model"]["key"] == plan.served.key and row["model"]["short"] == plan.served.revision[:7]
    assert row["container"]["uptime_s"] == 3725
    assert row["gate"]["ratio_to_baseline"] == 0.914 and row["gate"]["current"] is True
    assert row["drift"] == {"operations": 0, "names": []}


@pytest.mark.parametrize("case,lock_digest,running_digest,expected", [
    ("the container runs the lock's digest", DIGEST, DIGEST, "yes"),
    ("the container runs another digest", DIGEST, OTHER, "no"),
    ("the running image has no registry digest", DIGEST, None, "no"),
    ("the lock pins no digest for the image", None, DIGEST, "n/a"),
])
def test_the_image_matches_the_lock_by_the_running_images_repo_digest(case, lock_digest, running_digest, expected):
    plain = _plan()
    plan = _locked(plain, _lock(plain, lock_digest))
    row = statusrows.row("gpu-01", plan, _snapshot(plan, repo_digest=running_digest), [])
    assert row["image"]["lock"] == expected, case


@pytest.mark.parametrize("base,expected", [(f"lmsysorg/sglang@{DIGEST}", "yes"),
                                           (f"lmsysorg/sglang@{OTHER}", "no"), (None, "no")])
def test_the_toolchain_image_matches_the_lock_by_the_base_it_was_built_from(base, expected):
    plain = _plan(toolchain=True)
    plan = _locked(plain, _lock(plain))
    labels = {statusrows.TOOLCHAIN_BASE_LABEL: base} if base else {}
    assert statusrows.row("gpu-01", plan, _snapshot(plan, labels=labels), [])["image"]["lock"] == expected


def test_an_image_loaded_from_an_archive_is_not_judged_against_the_lock(tmp_path):
    archive = tmp_path / "sglang.tar"
    archive.write_bytes(b"")
    plain = _plan(sglang_image_archive=str(archive))
    plan = _locked(plain, _lock(plain))
    assert statusrows.row("gpu-01", plan, _snapshot(plan), [])["image"]["lock"] == "n/a"


@pytest.mark.parametrize("case,commit,content,verified,expected", [
    ("the lock's commit, verified with the lock's content", None, None, True, "yes"),
    ("another commit", "9" * 40, None, True, "no"),
    ("other content", None, "f" * 64, True, "no"),
    ("not verified", None, None, False, "no"),
])
def test_the_model_matches_the_lock_by_commit_and_content(case, commit, content, verified, expected):
    plain = _plan()
    plan = _locked(plain, _lock(plain, commit=commit))
    row = statusrows.row("gpu-01", plan, _snapshot(plan, content=content, verified=verified), [])
    assert row["model"]["lock"] == expected, case


# ---------------------------------------------------------------- verdicts, table, exit code

def _row(**changes):
    plan = _plan()
    return {**statusrows.row("gpu-01", plan, _snapshot(plan), []), **changes}


def test_an_ok_fleet_exits_zero_and_says_so():
    judged = fleetstatus.judged([_row(), _row(host="gpu-02")])
    assert judged["exit"] == 0 and [h["verdict"] for h in judged["hosts"]] == ["ok", "ok"]
    assert fleetstatus.table(judged).splitlines()[-1] == "fleet: 2 host(s): 2 ok; no drift"


def test_drift_is_shown_but_is_no_failure():
    judged = fleetstatus.judged([_row(drift={"operations": 3, "names": ["a", "b", "c"]})])
    assert judged["exit"] == 0 and judged["hosts"][0]["verdict"] == "ok"
    assert fleetstatus.table(judged).splitlines()[-1] == \
        "fleet: 1 host(s): 1 ok; 3 operation(s) would change on 1 host(s)"


@pytest.mark.parametrize("changes,verdict,problem", [
    ({"container": None}, "failing", "failing: the service has no container"),
    ({"container": {"state": "exited", "health": None, "uptime_s": None}}, "failing",
     "failing: the container is exited"),
    ({"container": {"state": "running", "health": "unhealthy", "uptime_s": 5}}, "failing",
     "failing: the container is unhealthy"),
    ({"gate": {"passed": False, "reason": "benchmark.sh: 12 tok/s is below 80% of the baseline"}}, "failing",
     "failing: the last gate failed: benchmark.sh: 12 tok/s is below 80% of the baseline"),
    ({"image": {"ref": "lmsysorg/sglang:v0.5.16", "lock": "no"}, "lock": "/inv/sglang.lock"}, "off the lock",
     "off the lock: the container runs lmsysorg/sglang:v0.5.16, not the image digest of /inv/sglang.lock"),
    ({"refused": ["host gpu-01: sglang_port: 'x' is not an integer. Fix: ..."]}, "refused",
     "refused: host gpu-01: sglang_port: 'x' is not an integer. Fix: ..."),
])
def test_each_problem_fails_the_fleet_with_its_verdict(changes, verdict, problem):
    judged = fleetstatus.judged([_row(), _row(host="gpu-02", **changes)])
    assert judged["exit"] == 1
    assert judged["hosts"][1]["verdict"] == verdict and problem in judged["hosts"][1]["problems"]
    assert f"gpu-02: {problem}" in fleetstatus.table(judged).splitlines()


def test_an_unreachable_host_is_a_row_of_its_own_and_the_worst_verdict_counts():
    down = statusrows.unanswered("gpu-03", "Could not connect ([Errno 113] No route to host)")
    judged = fleetstatus.judged([_row(container=None), down])
    lines = fleetstatus.table(judged).splitlines()
    assert lines[2].split() == ["gpu-03", "unreachable", "?"]
    assert "gpu-03: unreachable: Could not connect ([Errno 113] No route to host)" in lines
    assert lines[-1] == "fleet: 2 host(s): 1 unreachable, 1 failing, 0 ok; no drift"
    assert judged["exit"] == 1


def test_the_table_shows_each_column_of_a_row():
    line = fleetstatus.table(fleetstatus.judged([_row()])).splitlines()[1]
    for cell in ("gpu-01", "ok", "debian 13", "2×NVIDIA GeForce RTX 4090 39.1/48.0 GiB", "26.1.5 / 2.26.1",
                 f"id {'ee' * 6}", "verified", "running (healthy) 1h2m", "2026-01-01T10:01:00Z pass 900 tok/s (0.914x)",
                 "2.0 KiB / 10.0 GiB"):
        assert cell in line, (cell, line)


def test_pyinfras_connect_error_becomes_the_reason():
    output = ("\x1b[1m[gpu-02]\x1b[0m over group_data, its inventory data sets sglang_image\n"
              "    [gpu-02] \x1b[31mCould not connect (timed out)\x1b[0m\n")
    assert fleetstatus._connect_errors(output, ["gpu-02"]) == {"gpu-02": "Could not connect (timed out)"}


# ---------------------------------------------------------------- the host-side reads

def test_hf_cache_size_counts_each_blob_once_and_follows_no_link(tmp_path):
    cache = tmp_path / "hf-cache"
    blobs, snap = cache / "hub" / "models--a--b" / "blobs", cache / "hub" / "models--a--b" / "snapshots" / "c"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    (blobs / "x").write_bytes(b"1" * 1000)
    os.link(blobs / "x", snap / "hardlinked")
    (snap / "model.safetensors").symlink_to("../../blobs/x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"2" * 5000)
    (cache / "hub" / "planted").symlink_to(outside)
    assert report.cache_size(str(cache)) == {"bytes": 1000, "files": 1, "partial": False}


def test_the_gate_records_its_outcome_and_the_benchmarks_figures(tmp_path):
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "compose.yaml").write_text("x")
    run = gate.Gate(SimpleNamespace(home=str(tmp_path)))
    line = json.dumps({"time": "2026-01-01T10:01:00Z", "tok_per_s": 812.5, "baseline_tok_per_s": 985,
                       "ratio_to_baseline": 0.825, "ok": True, "result_file": "/r.json", "ttft_p50_s": 0.1})
    run.record("test_tool_calling.sh: no tool_calls", gate.benchmark_fields(line), rolled_back=True)
    found = report.last_gate(str(tmp_path))
    assert found["passed"] is False and found["reason"] == "test_tool_calling.sh: no tool_calls"
    assert found["rolled_back"] is True and found["benchmark"]["tok_per_s"] == 812.5
    assert "ttft_p50_s" not in found["benchmark"]
    assert (docker / stamp.LAST).stat().st_mode & 0o777 == 0o644


def test_a_planted_symlink_as_the_gate_record_is_not_followed(tmp_path):
    (tmp_path / "docker").mkdir()
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"passed": True}))
    (tmp_path / "docker" / stamp.LAST).symlink_to(secret)
    assert report.last_gate(str(tmp_path)) is None


def test_the_snapshot_reads_the_report_section_only_when_asked(tmp_path):
    from test_snapshot import read

    home = tmp_path / "home"
    (home / "hf-cache" / "hub").mkdir(parents=True)
    (home / "docker").mkdir()
    (home / "hf-cache" / "hub" / "blob").write_bytes(b"x" * 10)
    assert "report" not in read(home)
    found = read(home, report=True)["report"]
    assert found["cache"] == {"bytes": 10, "files": 1, "partial": False}
    assert found["disk"]["path"] == str(home / "hf-cache") and 0 < found["disk"]["free"] <= found["disk"]["total"]
    assert found["gate"] is None and isinstance(found["now"], float)


# ---------------------------------------------------------------- what came from a host
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b1m\r\u202e"


@pytest.mark.parametrize("record", [
    {"time": 5, "passed": "yes", "reason": ["x"], "benchmark": {"tok_per_s": "fast", "ratio_to_baseline": "x"}},
    {"time": "t", "passed": True, "benchmark": ["not", "a", "mapping"]},
    {"passed": False, "benchmark": {"tok_per_s": True, "baseline_tok_per_s": {}, "ratio_to_baseline": None}},
    ["not", "a", "record"],
    "a string",
])
def test_a_malformed_gate_record_does_not_crash_the_report(record):
    plan = _plan()
    row = statusrows.row("gpu-01", plan, _snapshot(plan, gate_record=record), [])
    lines = fleetstatus.table(fleetstatus.judged([row])).splitlines()
    assert lines[-1].startswith("fleet: 1 host(s)")
    gate = row["gate"]
    if gate is not None:
        assert gate["passed"] in (True, False, None) and gate["time"] in ("t", None)
        assert all(gate[k] is None or isinstance(gate[k], float) for k in ("tok_per_s", "ratio_to_baseline"))


def test_text_from_a_host_is_printed_with_its_control_characters_escaped():
    plan = _plan()
    record = {"time": "2026-01-01T10:01:00Z", "passed": False, "reason": f"gate.sh: HTTP 500: {ESCAPES}"}
    row = {**statusrows.row("gpu-01", plan, _snapshot(plan, gate_record=record), []),
           "gateways": [{"slug": "m", "port": 30080, "error": None,
                         "workers": [{"url": f"http://10.0.0.1:30000/{ESCAPES}", "healthy": True}]}]}
    text = fleetstatus.table(fleetstatus.judged([row]))
    assert not any(c in text for c in "\x1b\x07\x9b\r\u202e"), repr(text)
    assert "gate.sh: HTTP 500: \\x1b]0;owned\\x07\\x1b[2J\\x9b1m\\x0d\\u202e" in text
    assert "http://10.0.0.1:30000/\\x1b]0;owned" in text


def test_the_one_escape_helper_keeps_printable_text_and_escapes_the_rest():
    from sglang_infra.hostside.printable import printable, printable_lines

    assert printable("Qwen/Qwen3.6 — ok ✓") == "Qwen/Qwen3.6 — ok ✓"
    assert printable("a\nb\tc\x00") == "a\\x0ab\\x09c\\x00"
    assert printable(b"\xff\x1b") == "\ufffd\\x1b"
    assert printable_lines("one\x1b[2J\ntwo") == "one\\x1b[2J\ntwo"


def test_the_gate_prints_the_servers_log_lines_escaped(capsys):
    gate.say(f"| {ESCAPES}")
    err = capsys.readouterr().err
    assert not any(c in err for c in "\x1b\x07\x9b\r\u202e") and "\\x1b]0;owned" in err


@pytest.mark.parametrize("listen,expected", [
    ("10.0.0.9:9090", "http://10.0.0.9:9090"), ("0.0.0.0:9090", "http://mon-1:9090"),
    ("[fd00::9]:9191", "http://[fd00::9]:9191"), ("127.0.0.1:9090", "http://127.0.0.1:9090"),
])
def test_the_report_names_a_monitor_hosts_prometheus(listen, expected):
    from conftest import converged_snapshot

    from sglang_infra.plan.resolve import resolve

    plan = resolve("mon-1", {**pinned_defaults(), "sglang_require_gpu": False,
                             "sglang_prometheus_listen_address": listen}, converged_snapshot(None), ("monitor",))
    row = statusrows.row("mon-1", plan, _snapshot(plan), [])
    assert row["prometheus"] == expected
    assert f"mon-1: the fleet's Prometheus (metrics, alerts, the dashboard's source) at {expected}" in \
        fleetstatus.table(fleetstatus.judged([row])).splitlines()
    assert statusrows.row("gpu-01", _plan(), _snapshot(_plan()), [])["prometheus"] is None


@pytest.mark.parametrize("data,expected", [
    ({"sglang_trusted_network": True}, "no key, trusted network"),
    ({"sglang_trusted_network": False, "sglang_bind_address": "127.0.0.1"}, "no key, loopback only"),
])
def test_the_report_shows_who_may_call_the_api_without_a_key(data, expected):
    plan = _plan(**data)
    row = statusrows.row("gpu-01", plan, _snapshot(plan), [])
    assert row["api"] == expected
    judged = fleetstatus.judged([row])
    assert judged["hosts"][0]["verdict"] == "ok"
    assert fleetstatus.table(judged).splitlines()[1].endswith(expected)


def test_an_api_open_to_the_network_without_the_operators_word_is_reported_refused():
    plan = _plan(sglang_trusted_network=False)
    row = statusrows.row("gpu-01", plan, _snapshot(plan), [])
    assert row["api"] == "NO KEY, OPEN"
    judged = fleetstatus.judged([row])
    assert judged["hosts"][0]["verdict"] == "refused" and judged["exit"] == 1
    assert "gpu-01: refused: no sglang_api_key_file and sglang_trusted_network is False, yet a port of this host " \
        "answers the network without a key; the next deploy refuses that" in fleetstatus.table(judged).splitlines()


def test_the_report_says_key_when_the_api_wants_one(tmp_path):
    key_file = tmp_path / "api-key"
    key_file.write_text("k3y-0123456789abcdef\n")
    plan = _plan(sglang_api_key_file=str(key_file), sglang_trusted_network=False)
    row = statusrows.row("gpu-01", plan, _snapshot(plan), [])
    assert row["api"] == "key" and fleetstatus.judged([row])["hosts"][0]["verdict"] == "ok"


def test_a_failing_gpu_is_named_with_its_reason_and_fails_the_host():
    """The snapshot's driver facts of a hand-written failing H200 (fixtures/nvidia-smi/h200-failing-handwritten)."""
    from pathlib import Path

    from sglang_infra.hostside.gpu import nvsmi

    document = (Path(__file__).resolve().parent / "fixtures" / "nvidia-smi" / "h200-failing-handwritten.q.xml")
    plan = _plan()
    snapshot = {**_snapshot(plan), "gpus": {"driver": nvsmi.parse(document.read_text()), "nvswitches": []}}
    judged = fleetstatus.judged([statusrows.row("gpu-01", plan, snapshot, [])])
    fault = ("failing: GPU 0 (00000000:00:06.0): 2 uncorrectable ECC error(s) since the driver loaded; a memory row "
             "remap (or page retirement) waits for a GPU reset; 92 C, at or over its slowdown temperature (91 C)")
    assert judged["exit"] == 1 and judged["hosts"][0]["problems"] == [fault]
    assert f"gpu-01: {fault}" in fleetstatus.table(judged).splitlines()


def test_a_host_whose_model_fits_shows_the_figures_the_preflight_judged_it_by():
    """Two RTX 4090 and the lock's 8 GB of weights: the row carries modelfit's figures, the table says them."""
    plan = _plan()
    shard = {"path": "model.safetensors", "size": 8 * 10**9, "sha256": "2" * 64, "sha256_from": "lfs"}
    model = LockedModel(plan.served.key, plan.served.repo_id, plan.served.revision, FILES + (shard,))
    plan = replace(_locked(plan, _lock(plan)), locked={plan.served.key: model})
    row = statusrows.row("gpu-01", plan, _snapshot(plan), [])
    assert row["fit"]["fits"] is True and row["fit"]["tp"] == 2 and row["fit"]["gpu_mib"] == 24564
    assert row["fit"]["fraction"] == 0.85 and row["fit"]["fraction_source"] == "sglang_mem_fraction_static"
    text = fleetstatus.table(fleetstatus.judged([row]))
    assert "gpu-01: fits its GPUs: 'qwen3.6-35b-a3b-awq' (QuantTrio/Qwen3.6-35B-A3B-AWQ@" in text
    assert "on 2 x NVIDIA GeForce RTX 4090 (24564 MiB each) at --tp-size=2" in text
    assert statusrows.row("gpu-01", _plan(), _snapshot(_plan()), [])["fit"] is None   # no lock: not judged
