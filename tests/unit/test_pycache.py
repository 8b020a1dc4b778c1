"""The project's modules kept compiled between runs (machine/pycache.py): pyinfra's command line turns bytecode
writing off for its process, so without keep_bytecode() every run compiled our modules from source; with it their
bytecode is kept in the operator's own 0700 folder, and a folder another user could change is never used."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_infra.machine import pycache

PROJECT = Path(__file__).resolve().parents[2]

# A run as pyinfra makes it: writing off (pyinfra_cli/main.py), then deploy.py's first call, then an import of ours.
RUN = """
import sys
sys.dont_write_bytecode = True
from sglang_infra.machine.pycache import keep_bytecode
print(keep_bytecode())
import sglang_infra.plan.problems
print(type(sglang_infra.plan.problems.__loader__).__name__, sglang_infra.plan.problems.__cached__)
"""


def _run(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    environ.update({"XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(PROJECT), **(env or {})})
    proc = subprocess.run([sys.executable, *flags, "-v", "-c", RUN], cwd=tmp_path, env=environ, capture_output=True,
                          text=True, timeout=60, check=True)
    compiled = [line for line in proc.stderr.splitlines()
                if line.startswith("# code object from") and line.endswith("plan/problems.py")]
    return [*proc.stdout.splitlines(), "compiled" if compiled else "kept"]


def test_a_module_is_compiled_once_and_its_bytecode_kept_for_the_next_run(tmp_path):
    folder = tmp_path / "cache" / "sglang-infra" / "pycache"
    first = _run(tmp_path)
    assert first[0] == str(folder)
    assert first[2] == "compiled"
    kept = Path(first[1].split()[1])
    assert kept.is_file() and folder in kept.parents
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert _run(tmp_path)[2] == "kept"                           # the next run reads it: nothing compiled


def test_the_operators_own_choice_is_kept(tmp_path):
    assert _run(tmp_path, "-B")[0] == "None"                    # -B: nothing written
    assert not (tmp_path / "cache").exists()
    theirs = tmp_path / "theirs"
    out = _run(tmp_path, env={"PYTHONPYCACHEPREFIX": str(theirs)})
    assert out[0] == str(theirs) and theirs in Path(out[1].split()[1]).parents


def under_pyinfra(tmp_path: Path, monkeypatch) -> Path:
    """This process as pyinfra's CLI leaves it (bytecode off, no -B of the operator's, no prefix), PYCACHE_DIR in a
    fresh home whose .cache/sglang-infra exists; the folder keep_bytecode would use."""
    folder = tmp_path / "home" / ".cache" / "sglang-infra" / "pycache"
    monkeypatch.setattr(pycache, "PYCACHE_DIR", folder)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(sys, "flags", type("F", (), {"dont_write_bytecode": 0})())
    folder.parent.mkdir(parents=True)
    return folder


@pytest.mark.parametrize("spoil", ["group-writable", "other-writable", "not ours", "a link", "parent group-writable",
                                   "parent another's"])
def test_a_folder_another_user_could_change_is_never_used(tmp_path, monkeypatch, spoil):
    folder = under_pyinfra(tmp_path, monkeypatch)
    if spoil == "a link":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        elsewhere.chmod(0o777)
        folder.symlink_to(elsewhere)
    else:
        folder.mkdir(mode=0o700)
    if spoil == "group-writable":
        folder.chmod(0o770)
    elif spoil == "other-writable":
        folder.chmod(0o707)
    elif spoil == "not ours":
        os.chown(folder, 12345, 12345) if os.getuid() == 0 else pytest.skip("needs root to give a folder away")
    elif spoil == "parent group-writable":
        folder.parent.chmod(0o775)
    elif spoil == "parent another's":
        os.chown(folder.parent, 12345, 12345) if os.getuid() == 0 else pytest.skip("needs root")
    assert pycache.keep_bytecode() is None
    assert sys.dont_write_bytecode is True and sys.pycache_prefix is None


def test_the_folders_made_are_the_operators_alone_whatever_the_umask(tmp_path, monkeypatch):
    folder = tmp_path / "home" / ".cache" / "sglang-infra" / "pycache"
    (tmp_path / "home").mkdir()
    old = os.umask(0)
    try:
        assert pycache.own_dir(folder) == folder
    finally:
        os.umask(old)
    for made in (folder, folder.parent, folder.parent.parent):
        assert oct(made.stat().st_mode & 0o777) == "0o700"


def test_a_sound_folder_is_used(tmp_path, monkeypatch):
    folder = under_pyinfra(tmp_path, monkeypatch)
    assert pycache.keep_bytecode() == str(folder)
    assert sys.dont_write_bytecode is False


def test_deploy_keeps_bytecode_before_importing_any_other_module_of_ours():
    tree = ast.parse((PROJECT / "deploy.py").read_text())
    order = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang_infra"):
            order.append(node.module)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and getattr(node.value.func, "id", None) == "keep_bytecode":
            order.append("keep_bytecode()")
    assert order[:2] == ["sglang_infra.machine.pycache", "keep_bytecode()"]
    assert len(order) > 2
