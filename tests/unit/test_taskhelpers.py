"""The helpers the task files share: the operations they call, with the names and arguments the task files
used to spell out (the run log's names)."""

from __future__ import annotations

from unittest import mock

from sglang_infra.operations import files as taskhelpers


def calls(helper, *args):
    recorded = []
    with mock.patch.object(taskhelpers, "checked_file", lambda **kwargs: recorded.append(kwargs)):
        helper(*args)
    return recorded


def test_scripts_are_executable_and_the_launcher_is_not_in_the_given_order():
    scripts = {"gate.sh": "g", "launch.py": "l", "benchmark.sh": "b"}
    assert calls(taskhelpers.scripts_in_place, "/opt/sglang/router/m", scripts, "sglang") == [
        {"name": f"Ensure /opt/sglang/router/m/{name} is up to date", "dest": f"/opt/sglang/router/m/{name}",
         "content": text, "user": "sglang", "group": "sglang", "mode": mode, "check": None}
        for (name, text), mode in zip(scripts.items(), ("755", "644", "755"))]


def test_a_compose_file_is_checked_by_compose_in_its_directory():
    [call] = calls(taskhelpers.compose_file, "Ensure it", "/opt/sglang/docker", "services: {}\n", "sglang")
    assert call == {"name": "Ensure it", "dest": "/opt/sglang/docker/compose.yaml", "content": "services: {}\n",
                    "user": "sglang", "group": "sglang", "mode": "644",
                    "check": "docker compose --project-directory /opt/sglang/docker -f {candidate} config -q"}
