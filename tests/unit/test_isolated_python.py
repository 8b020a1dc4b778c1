"""Issue 31, items 3 and 6: every Python the deploy starts on a host runs isolated (python3 -I: the current
folder, the user's site and PYTHON* variables are off its import path), the scripts run from /, the library's
CACHEDIR.TAG is never written through a link, and every `docker compose` names its file."""

from __future__ import annotations

import re
import subprocess
from types import SimpleNamespace

from conftest import load_cases, pinned_defaults, plan_for

from sglang_infra.hostside import names, safefs
from sglang_infra.hostside.gate import gate
from sglang_infra.machine import ship
from sglang_infra.plan import render

PYTHON_RUN = re.compile(r"(?:^|[\s/;&|])python3?(?= )(?! -I)")


def test_every_command_the_operations_send_runs_python_isolated():
    """The operations' recorded commands (tests/unit/fixtures/operations): each python started on a host has -I."""
    commands = [c for _, case in load_cases("operations") for c in case["commands"] if "python" in c]
    assert commands, "no recorded command starts python"
    for command in commands:
        assert not PYTHON_RUN.search(command.replace("venv/bin/python -I", "")), command


def test_the_gate_and_the_validation_scripts_run_from_slash_isolated():
    scripts = render.scripts(plan_for(pinned_defaults()))
    assert set(scripts) == {names.GATE_SCRIPT, *names.VALIDATION_SCRIPTS}
    for name, text in scripts.items():
        assert f"\ncd /\nexec {ship.PYTHON} - " in text, name
        assert "exec python3 - " not in text, name


def test_the_gate_metrics_timer_runs_its_program_isolated():
    units = render.gate_metrics_units(plan_for(pinned_defaults()))
    [service] = [text for path, text in units.items() if path.endswith(".service")]
    assert "\nExecStart=/usr/bin/python3 -I " in service


def test_the_cachedir_tag_is_created_but_never_through_a_link(tmp_path):
    victim = tmp_path / "docker" / "compose.override.yaml"
    victim.parent.mkdir()
    cache = tmp_path / "hub"
    cache.mkdir()
    (cache / "CACHEDIR.TAG").symlink_to(victim)   # a member's link, dangling
    assert safefs.create_if_absent(str(cache / "CACHEDIR.TAG"), b"Signature: x\n") is False
    assert not victim.exists() and (cache / "CACHEDIR.TAG").is_symlink()
    (cache / "CACHEDIR.TAG").unlink()
    assert safefs.create_if_absent(str(cache / "CACHEDIR.TAG"), b"Signature: x\n") is True
    assert (cache / "CACHEDIR.TAG").read_bytes() == b"Signature: x\n"


def test_the_pull_no_longer_lets_the_library_write_the_tag():
    source = ship.path_of("pull.pull").read_text()
    assert "_create_cachedir_tag" not in source and "create_if_absent(" in source


def test_the_gates_compose_names_its_file(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(gate.subprocess, "run", lambda args, **kw: seen.append(args) or
                        subprocess.CompletedProcess(args, 0, "", ""))
    run = gate.Gate(SimpleNamespace(home=str(tmp_path), url="http://127.0.0.1:30000", model="m", ready_timeout=1,
                                    toolchain_check=None, gateway=None))
    run.compose("up", "-d")
    assert seen == [["docker", "compose", "-f", names.COMPOSE_FILE, "up", "-d"]]
