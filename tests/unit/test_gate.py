"""The gate's own pieces: saving the known-good config, its record and its metrics, run on temp files."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
from types import SimpleNamespace

import pytest

from sglang_infra.hostside import names, safefs
from sglang_infra.hostside.gate import gate, stamp


def test_the_known_good_copy_keeps_content_mode_and_replaces_a_planted_symlink(tmp_path):
    source, other = tmp_path / "compose.yaml", tmp_path / "victim"
    source.write_text("services: {}\n")
    source.chmod(0o644)
    other.write_text("untouched\n")
    dest = tmp_path / "compose.yaml.good"
    dest.symlink_to(other)
    gate.copy(str(source), str(dest))
    assert not dest.is_symlink() and dest.read_text() == "services: {}\n"
    assert oct(dest.stat().st_mode & 0o777) == "0o644"
    assert other.read_text() == "untouched\n"


def test_a_full_disk_leaves_the_last_known_good_copy_as_it_was(tmp_path, monkeypatch):
    source, dest = tmp_path / "compose.yaml", tmp_path / "compose.yaml.good"
    source.write_text("new\n")
    dest.write_text("old known-good\n")

    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gate.os, "fsync", full)
    with pytest.raises(OSError):
        gate.copy(str(source), str(dest))
    assert dest.read_text() == "old known-good\n"
    assert sorted(os.listdir(tmp_path)) == ["compose.yaml", "compose.yaml.good"]


def test_the_gate_copies_no_file_through_a_link_and_names_it(tmp_path):
    """compose.yaml (or .good, in a rollback) made a link to a file root can read: never copied from."""
    docker, secret = tmp_path / "docker", tmp_path / "server.yaml"
    docker.mkdir()
    secret.write_text("api-key: s3cret\n")
    (docker / "compose.yaml.good").symlink_to(secret)
    with pytest.raises(OSError, match="compose.yaml.good is a symlink"):
        gate.copy(str(docker / "compose.yaml.good"), str(docker / "compose.yaml"))
    assert not (docker / "compose.yaml").exists()


def test_the_gate_walks_no_directory_link_to_its_files(tmp_path):
    if os.geteuid() == 0:
        os.chown(tmp_path, 65534, 65534)  # the account's directory, as on a host: not root's alone
    real, elsewhere = tmp_path / "docker", tmp_path / "elsewhere"
    real.mkdir()
    elsewhere.mkdir()
    (elsewhere / "compose.yaml").write_text("services: {}\n")
    os.symlink(elsewhere, tmp_path / "linked")
    with pytest.raises(OSError, match="linked is a symlink"):
        gate.copy(str(tmp_path / "linked" / "compose.yaml"), str(real / "compose.yaml.good"))
    with pytest.raises(OSError, match="linked is a symlink"):
        gate.copy(str(elsewhere / "compose.yaml"), str(tmp_path / "linked" / "compose.yaml.good"))
    assert sorted(os.listdir(elsewhere)) == ["compose.yaml"] and not os.listdir(real)


# ---------------------------------------------------------------- the record and the metrics, from a run of the gate
SUMMARY = '{"time": "2026-01-01T10:04:59Z", "tok_per_s": 812.5, "baseline_tok_per_s": 985, "ok": true}'
TOOL_CALLS_PASS = "#!/bin/bash\necho '{\"ok\": true}'\n"
TOOL_CALLS_FAIL = "#!/bin/bash\necho '{\"ok\": false}'\necho 'no tool_calls in the answer' >&2\nexit 1\n"


def _worker(tmp_path, monkeypatch, tool_calls=TOOL_CALLS_PASS, ready=True, gateway=None):
    """A gate over a temp home whose scripts are real bash files; the server's readiness, compose and the
    container are stand-ins (no Docker here)."""
    home = tmp_path / "home"
    docker = home / (os.path.join(names.GATEWAY_DIR, gateway) if gateway else "docker")
    docker.mkdir(parents=True)
    (docker / names.COMPOSE_FILE).write_text("services: {}\n")
    scripts = docker if gateway else home
    (scripts / names.VALIDATION_SCRIPTS[0]).write_text(tool_calls)
    (scripts / names.VALIDATION_SCRIPTS[1]).write_text(f"#!/bin/bash\necho '{SUMMARY}'\n")
    monkeypatch.setattr(gate.checks, "wait_ready",
                        lambda *a, **k: {"ok": ready, "problems": [] if ready else ["not ready after 1 s"]})
    monkeypatch.setattr(gate.stack, "container", lambda *a, **k: {"id": "c" * 64, "state": "running",
                                                                   "image_id": "sha256:" + "e" * 64,
                                                                   "started_at": "2026-01-01T10:00:00Z"})
    run = gate.Gate(SimpleNamespace(home=str(home), url="http://127.0.0.1:30000", model="m", ready_timeout=1,
                                    toolchain_check=None, gateway=gateway))
    monkeypatch.setattr(run, "compose", lambda *words: subprocess.CompletedProcess(words, 0, "", ""))
    return run, docker


@pytest.mark.parametrize("tool_calls, ready, code, expected", [
    (TOOL_CALLS_PASS, True, 0, True),
    (TOOL_CALLS_FAIL, True, 1, False),
    (TOOL_CALLS_PASS, False, 1, None),
], ids=["passed", "tool-calls-failed", "never-ready"])
def test_the_gate_record_carries_whether_the_tool_calls_passed(tmp_path, monkeypatch, tool_calls, ready, code,
                                                               expected):
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch, tool_calls, ready)
    assert run.run() == code
    found = json.loads((docker / stamp.LAST).read_text())
    assert found["tool_call_ok"] is expected and found["passed"] is (code == 0)
    assert set(found) == {"time", "passed", "reason", "rolled_back", "tool_call_ok", "benchmark", "container",
                          "boot_id"}
    assert found["boot_id"] == stamp.boot_id()   # a later boot keeps the stamp of the container it restarted
    # the container it stamped (a multi-node group's member started since restarted alone); none when it failed
    assert found["container"] == ({"id": "c" * 64, "started_at": "2026-01-01T10:00:00Z"} if code == 0 else None)


@pytest.mark.parametrize("tool_calls, passed", [(TOOL_CALLS_PASS, 1), (TOOL_CALLS_FAIL, 0)],
                         ids=["passed", "failed"])
def test_a_worker_gate_writes_its_metrics_whatever_the_outcome(tmp_path, monkeypatch, tool_calls, passed):
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    write = gate.gate_metrics.write
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: write(home, str(textfile)))
    run, _docker = _worker(tmp_path, monkeypatch, tool_calls)
    run.run()
    text = (textfile / names.GATE_METRICS_FILE).read_text()
    assert f"\nsglang_gate_passed {passed}\n" in text and f"\nsglang_gate_tool_call_ok {passed}\n" in text
    assert f"\nsglang_config_validated {passed}\n" in text


def test_a_gateways_gate_writes_no_metrics(tmp_path, monkeypatch):
    written = []
    monkeypatch.setattr(gate.gate_metrics, "write", written.append)
    run, _docker = _worker(tmp_path, monkeypatch, gateway="m")
    assert run.run() == 0 and written == []


def test_metrics_that_cannot_be_written_fail_nothing_and_are_said_in_one_line(tmp_path, monkeypatch, capsys):
    def refused(home):
        raise safefs.Refused("/var/lib/prometheus/node-exporter is a symlink; refusing to follow it")

    monkeypatch.setattr(gate.gate_metrics, "write", refused)
    run, _docker = _worker(tmp_path, monkeypatch)
    assert run.run() == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "metrics" in line]
    assert len(said) == 1 and "is a symlink" in said[0]


def test_the_rollback_stops_the_failed_config_at_once_before_the_good_one_starts(tmp_path, monkeypatch):
    """Issue 35: a failed config serves nobody; a hung server must not hold the rollback for the whole
    stop_grace_period (the drain plus 30 s) that compose would otherwise give it."""
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    monkeypatch.setattr(gate.stack, "record", lambda *a, **k: None)
    run, docker = _worker(tmp_path, monkeypatch, ready=False)
    (docker / (names.COMPOSE_FILE + ".good")).write_text("services: {}\n")
    calls = _compose_recorded(run, monkeypatch)
    assert run.run() == 2   # never ready, the good config neither (the stand-in readiness says no to both)
    verbs = [words[0] for words in calls if words[0] in ("stop", "up")]
    assert verbs == ["stop", "up"]
    assert calls[[w[0] for w in calls].index("stop")] == ("stop", "--timeout", str(gate.stack.QUICK_STOP_SECONDS))


# ---------------------------------------------------------------- a multi-node group's steps (operations/group.py)
def _compose_recorded(run, monkeypatch):
    """The words of every compose command the run gives, each answered as done; the list they land in."""
    calls = []
    monkeypatch.setattr(run, "compose", lambda *words: calls.append(words) or subprocess.CompletedProcess(words, 0,
                                                                                                          "", ""))
    return calls


def test_a_groups_rank_0_that_fails_keeps_its_config_as_failed_and_rolls_nothing_back(tmp_path, monkeypatch):
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch, TOOL_CALLS_FAIL)
    (docker / "compose.yaml.good").write_text("services: {good: {}}\n")
    calls = _compose_recorded(run, monkeypatch)
    run.args.group_step = "validate"
    assert run.run() == gate.GROUP_FAILED
    assert (docker / "compose.yaml").read_text() == "services: {}\n"          # not rolled back here
    assert (docker / "compose.yaml.failed").read_text() == "services: {}\n"
    assert calls == [] and not (docker / stamp.STAMP).exists()                # nothing restarted, nothing stamped


def test_a_group_member_keeps_the_groups_passed_config_and_stamps_it_without_asking_its_own_health(tmp_path,
                                                                                                 monkeypatch):
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch, TOOL_CALLS_FAIL, ready=False)   # its own answers would fail
    run.args.group_step = "keep"
    assert run.run() == 0
    assert (docker / "compose.yaml.good").read_text() == "services: {}\n"
    assert (docker / stamp.STAMP).exists()


def test_a_group_member_after_a_failed_gate_puts_its_last_good_config_back(tmp_path, monkeypatch):
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch)
    run.args.group_step = "failed"
    assert run.run() == 1                                                     # a first deploy: nothing to go back to
    assert (docker / "compose.yaml").read_text() == "services: {}\n"
    (docker / "compose.yaml.good").write_text("services: {good: {}}\n")
    assert run.run() == 0
    assert (docker / "compose.yaml").read_text() == "services: {good: {}}\n"
    assert (docker / "compose.yaml.failed").read_text() == "services: {}\n"


@pytest.mark.parametrize("step", ["keep", "failed"])
def test_a_group_members_step_keeps_or_fails_only_the_config_this_run_rendered(tmp_path, monkeypatch, step):
    """#60: a member's keep or failed step with --config-sha of another config than its compose.yaml (another run
    changed it meanwhile) keeps nothing as good or failed, puts nothing back and stamps nothing (gate.NOT_OWN);
    with its own config's sha256 it does its step."""
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch)
    (docker / "compose.yaml.good").write_text("services: {good: {}}\n")
    run.args.group_step, run.args.config_sha = step, "0" * 64
    assert run.run() == gate.NOT_OWN
    assert (docker / "compose.yaml").read_text() == "services: {}\n"
    assert (docker / "compose.yaml.good").read_text() == "services: {good: {}}\n"
    assert not (docker / "compose.yaml.failed").exists() and not (docker / stamp.STAMP).exists()
    run.args.config_sha = hashlib.sha256(b"services: {}\n").hexdigest()
    assert run.run() == 0
    kept = "compose.yaml.good" if step == "keep" else "compose.yaml.failed"
    assert (docker / kept).read_text() == "services: {}\n"


def test_a_groups_rank_0_after_the_rollback_records_the_failure_though_the_good_config_serves(tmp_path, monkeypatch):
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch)
    run.args.group_step = "rolled-back"
    assert run.run() == 0
    found = json.loads((docker / stamp.LAST).read_text())
    assert (found["passed"], found["rolled_back"]) == (False, True) and "rolled back" in found["reason"]
    assert (docker / stamp.STAMP).exists()   # what serves is the last good config, which validated again


def test_a_groups_rank_0_recreated_on_its_good_config_that_fails_marks_nothing_failed(tmp_path, monkeypatch, capsys):
    """Issue 40: the group recreated with every member's config unchanged (a member restarted alone): a failure is
    the group's state, not the config's. No compose.yaml.failed (a later run would refuse the good config), no
    rollback, nothing stamped, the failure recorded."""
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch, ready=False)
    (docker / "compose.yaml.good").write_text("services: {}\n")
    calls = _compose_recorded(run, monkeypatch)
    run.args.group_step = "revalidate"
    assert run.run() == gate.GROUP_FAILED
    assert not (docker / "compose.yaml.failed").exists() and not (docker / stamp.STAMP).exists()
    assert (docker / "compose.yaml").read_text() == "services: {}\n"
    assert [words for words in calls if words[0] in ("stop", "up")] == []
    assert gate.GROUP_STATE_FAILED in capsys.readouterr().err
    found = json.loads((docker / stamp.LAST).read_text())
    assert found["passed"] is False and found["rolled_back"] is None, found


def test_a_groups_rank_0_recreated_on_its_good_config_that_passes_stamps_it(tmp_path, monkeypatch):
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch)
    run.args.group_step = "revalidate"
    assert run.run() == 0
    assert (docker / stamp.STAMP).exists() and (docker / "compose.yaml.good").read_text() == "services: {}\n"
    assert json.loads((docker / stamp.LAST).read_text())["container"]["started_at"] == "2026-01-01T10:00:00Z"


@pytest.mark.parametrize("stdout, expected", [
    ('{"ok": false, "said": "GPU 1 (NVIDIA H200): cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU (209)"}',
     "CUDA kernel check in the running container: GPU 1 (NVIDIA H200): cuModuleLoadData failed: "
     "CUDA_ERROR_NO_BINARY_FOR_GPU (209)"),
    ("", "CUDA kernel check in the running container: OCI runtime exec failed"),
    ('{"ok": true, "said": "sm_90a kernel ran on 8 GPU(s), results checked"}', None),
], ids=["a-gpu-fails", "no-report", "passes"])
def test_the_kernel_check_fails_the_gate_naming_the_gpu(tmp_path, monkeypatch, stdout, expected):
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch)
    run.args.kernel_check_program, run.args.kernel_check_nvcc = "print('the program')", "/usr/local/cuda-pip/bin/nvcc"
    calls = []

    def compose(*words):
        calls.append(words)
        if "exec" in words:
            return subprocess.CompletedProcess(words, 0 if expected is None else 1, stdout,
                                               "" if stdout else "OCI runtime exec failed")
        return subprocess.CompletedProcess(words, 0, "", "")

    monkeypatch.setattr(run, "compose", compose)
    monkeypatch.setattr(run, "compose_bounded", lambda limit, *words: compose(*words))
    assert run.validate() == expected
    assert ("exec", "-T", "sglang", "python3", "-I", "-c", "print('the program')", "--nvcc",
            "/usr/local/cuda-pip/bin/nvcc") in calls


# ---------------------------------------------------------------- the GPUs the last good config passed on (issue 53)
STANDIN_NVIDIA_SMI = os.path.join(os.path.dirname(__file__), "..", "support", "gpustandin", "nvidia-smi")


def standin_gpus(tmp_path, monkeypatch, present: str) -> None:
    """The stand-in nvidia-smi (tests/support/gpustandin/) first on PATH, listing the GPUs ``present`` names."""
    share, bin_dir = tmp_path / "standin-nvidia-smi", tmp_path / "bin"
    share.mkdir()
    bin_dir.mkdir()
    (share / "q.xml").write_text(open(os.path.join(os.path.dirname(__file__), "fixtures", "h200-2026-12-04",
                                                   "q.xml")).read())
    (share / "present").write_text(present + "\n")
    (bin_dir / "nvidia-smi").symlink_to(os.path.abspath(STANDIN_NVIDIA_SMI))
    monkeypatch.setenv("STANDIN_NVIDIA_SMI_DIR", str(share))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_passed_gate_keeps_the_gpus_it_passed_on_beside_the_good_config(tmp_path, monkeypatch):
    from sglang_infra.hostside.gpu import nvsmi

    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    standin_gpus(tmp_path, monkeypatch, "0 1 2 3 4 5 6 7")
    run, docker = _worker(tmp_path, monkeypatch)
    assert run.run() == 0
    kept = nvsmi.read_gated(str(docker))
    assert [g["index"] for g in kept] == list(range(8))
    assert kept[3] == {"index": 3, "bus_id": "00000000:5D:00.0", "uuid": "GPU-5a1e0000-0000-4000-8000-000000000003"}


def test_a_failed_gate_keeps_the_gpus_of_the_last_good_config(tmp_path, monkeypatch):
    from sglang_infra.hostside.gpu import nvsmi

    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    standin_gpus(tmp_path, monkeypatch, "0 1 2 3 4 5 6 7")
    run, docker = _worker(tmp_path, monkeypatch)
    assert run.run() == 0
    (tmp_path / "standin-nvidia-smi" / "present").write_text("0 1 2 4 5 6 7\n")
    (tmp_path / "home" / names.VALIDATION_SCRIPTS[0]).write_text(TOOL_CALLS_FAIL)
    assert run.run() != 0   # failed (its rollback here fails the same checks)
    assert len(nvsmi.read_gated(str(docker))) == 8


def test_a_gateways_gate_keeps_no_gpus(tmp_path, monkeypatch):
    from sglang_infra.hostside.gpu import nvsmi

    standin_gpus(tmp_path, monkeypatch, "0 1")
    run, docker = _worker(tmp_path, monkeypatch, gateway="m")
    assert run.run() == 0 and not (docker / nvsmi.GATED_FILE).exists()


# ---------------------------------------------------------------- the last good config failing (issue 53)
@pytest.mark.parametrize("recovers", [True, False], ids=["recreated-it-passes", "recreated-it-fails-again"])
def test_a_solo_host_whose_good_config_fails_keeps_it_good_not_failed(tmp_path, monkeypatch, capsys, recovers):
    """A solo host restarted on its last known-good config (a container gone) whose gate then fails: the config is
    not kept as *.failed (the next run would refuse the good config itself, operations/gate.py not_failed_before);
    it is recreated and validated once more."""
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch, TOOL_CALLS_FAIL)
    (docker / "compose.yaml.good").write_text("services: {}\n")
    outcomes = iter(["test_tool_calling.sh: no tool_calls in the answer", None if recovers else "still failing"])
    monkeypatch.setattr(run, "validate", lambda: next(outcomes))
    assert run.run() == (1 if recovers else 2)
    assert not (docker / "compose.yaml.failed").exists()
    assert (docker / "compose.yaml.good").read_text() == "services: {}\n"
    assert "nothing is kept as *.failed" in capsys.readouterr().err


def test_a_new_config_that_fails_is_still_kept_as_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch, TOOL_CALLS_FAIL)
    (docker / "compose.yaml.good").write_text("services: {old: {}}\n")
    outcomes = iter(["test_tool_calling.sh: no tool_calls in the answer", None])
    monkeypatch.setattr(run, "validate", lambda: next(outcomes))
    assert run.run() == 1
    assert (docker / "compose.yaml.failed").read_text() == "services: {}\n"
    assert (docker / "compose.yaml").read_text() == "services: {old: {}}\n"


@pytest.mark.parametrize("stdout, why", [
    ("null", "answered NoneType null, not its report"),
    ("[]", "answered list [], not its report"),
    ("42", "answered int 42"),
    ('{"ok": "yes", "said": "fine"}', "not its report"),
    ('{"said": "fine"}', "not its report"),
    ("{" + '"pad": "' + "x" * (1 << 20) + '", "ok": true}', "more than 65536 bytes"),
], ids=["null", "empty-list", "a-number", "ok-not-a-boolean", "no-ok", "megabytes"])
def test_whatever_else_the_container_answers_is_a_failed_gate_rolled_back_and_recorded(tmp_path, monkeypatch, stdout,
                                                                                       why):
    """Issue 52 item 5: a container printing null, [] or megabytes where the report is expected made the gate raise
    (no rollback, no record); now it is a failed gate like any other."""
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch)
    run.args.kernel_check_program, run.args.kernel_check_nvcc = "print('the program')", "/usr/local/cuda-pip/bin/nvcc"
    answers = [stdout, '{"ok": true, "said": "the good config ran"}']   # the tried config, then the good one
    monkeypatch.setattr(run, "compose_bounded",
                        lambda limit, *words: subprocess.CompletedProcess(words, 0, answers.pop(0), ""))
    (docker / "compose.yaml.good").write_text("services: {good: {}}\n")
    assert run.run() == 1
    record = json.loads((docker / stamp.LAST).read_text())
    assert record["passed"] is False and why in record["reason"] and len(record["reason"]) < 2000
    assert record["rolled_back"] is True
    assert (docker / names.COMPOSE_FILE).read_text() == "services: {good: {}}\n"


FLOOD = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"


def test_the_container_s_answer_is_read_at_most_the_bound_and_the_command_stopped_there(tmp_path, monkeypatch):
    """A container that prints without end: the gate reads KERNEL_REPORT_BYTES + 1 bytes, kills it, and fails."""
    run, docker = _worker(tmp_path, monkeypatch)
    monkeypatch.setattr(gate.names, "COMPOSE_COMMAND", ("python3", "-c", FLOOD))
    found = run.compose_bounded(gate.KERNEL_REPORT_BYTES, "exec")
    assert len(found.stdout) == gate.KERNEL_REPORT_BYTES + 1 and found.returncode != 0
    assert gate.kernel_report(found.stdout)[0] is None
    monkeypatch.setattr(gate.names, "COMPOSE_COMMAND", ("python3", "-c", """print('{"ok": true, "said": "ran"}')"""))
    found = run.compose_bounded(gate.KERNEL_REPORT_BYTES, "exec")
    assert gate.kernel_report(found.stdout) == ({"ok": True, "said": "ran"}, None)


@pytest.mark.parametrize("changed_during_checks", [False, True], ids=["before", "during-the-checks"])
def test_the_gate_judges_only_the_config_its_run_rendered(tmp_path, monkeypatch, changed_during_checks):
    """Issue #60: two runs met, and one run's gate passed (or filed as failed) the other run's config."""
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch)
    mine = hashlib.sha256((docker / names.COMPOSE_FILE).read_bytes()).hexdigest()
    run.args.config_sha = mine
    if changed_during_checks:
        validate = run.validate
        monkeypatch.setattr(run, "validate", lambda: (docker / names.COMPOSE_FILE).write_text("other: 1\n")
                            or validate())
    else:
        (docker / names.COMPOSE_FILE).write_text("other: 1\n")
    assert run.run() == gate.NOT_OWN
    assert sorted(os.listdir(docker)) == [names.COMPOSE_FILE]   # no record, no stamp, no .good, no .failed


def test_the_gate_passes_its_own_config(tmp_path, monkeypatch):
    monkeypatch.setattr(gate.gate_metrics, "write", lambda home: None)
    run, docker = _worker(tmp_path, monkeypatch)
    run.args.config_sha = hashlib.sha256((docker / names.COMPOSE_FILE).read_bytes()).hexdigest()
    assert run.run() == 0 and (docker / (names.COMPOSE_FILE + ".good")).exists()
