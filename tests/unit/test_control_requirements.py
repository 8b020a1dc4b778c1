"""The control side's pins (requirements.txt) carry what the operator's read-only host checks load: scripts/check.sh
runs tests/host_checks with pytest and pytest-testinfra, so a venv of requirements.txt alone must have them. Every
distribution those modules load, here, is pinned there or required by a pin (tests/e2e/test_converge.py runs
check.sh from a fresh venv of that file)."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys

from packaging.requirements import Requirement

from harness import PROJECT_DIR

HOST_CHECKS = sorted(str(path) for path in (PROJECT_DIR / "tests" / "host_checks").glob("*.py"))

# Loads each host-check module as pytest would (the project's root on sys.path) and prints the top-level names of
# every module loaded by then; a child process, so what this test session has loaded does not count.
LOADER = """
import importlib.util, sys
sys.path[:0] = [sys.argv[1]]
for path in sys.argv[2:]:
    spec = importlib.util.spec_from_file_location("host_check_" + path.rsplit("/", 1)[1][:-3], path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
print("\\n".join(sorted({name.partition(".")[0] for name in sys.modules})))
"""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(path) -> set[str]:
    """The distributions a requirements file pins itself (not those of a file it includes with -r)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {canonical(Requirement(line).name) for line in lines if line and not line.startswith("-")}


def installed_with(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, transitively, as installed here (no extras)."""
    found, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        for text in importlib.metadata.requires(name) or ():
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonical(requirement.name))
    return found


def _loaded(*paths: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", LOADER, str(PROJECT_DIR), *paths], capture_output=True,
                          text=True, timeout=120, cwd=PROJECT_DIR)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return set(proc.stdout.split())


def loaded_by_the_host_checks() -> set[str]:
    """The distributions whose modules the host checks load, beyond what the interpreter loads at its start (a
    venv's setuptools hook, which every venv has)."""
    owners = importlib.metadata.packages_distributions()
    return {canonical(dist) for top in _loaded(*HOST_CHECKS) - _loaded() if top not in sys.stdlib_module_names
            for dist in owners.get(top, ())}


def test_the_host_checks_load_only_what_the_control_sides_pins_install():
    control = installed_with(pinned(PROJECT_DIR / "requirements.txt"))
    loaded = loaded_by_the_host_checks()
    assert {"pytest", "pytest-testinfra", "paramiko"} <= loaded   # what check.sh's run needs, seen here
    assert loaded - control == set(), "pin these in requirements.txt (the control side), not requirements-test.txt"


def test_the_test_requirements_pin_nothing_the_control_side_pins():
    """requirements-test.txt adds on top of requirements.txt (-r) and repeats none of its pins."""
    test = PROJECT_DIR / "requirements-test.txt"
    assert "-r requirements.txt" in test.read_text().splitlines()
    assert pinned(test) & pinned(PROJECT_DIR / "requirements.txt") == set()


def test_check_sh_without_the_checks_dependencies_says_in_one_line_what_to_install(tmp_path):
    """A venv without them (one made before they moved, or by hand): one line naming requirements.txt, not a
    traceback, and nothing run."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "check.sh").write_bytes((PROJECT_DIR / "scripts" / "check.sh").read_bytes())
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(tmp_path / ".venv")], check=True, timeout=120)
    proc = subprocess.run(["bash", "scripts/check.sh", "inventory.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert "lacks pytest or pytest-testinfra" in line and ".venv/bin/pip install -r requirements.txt" in line
