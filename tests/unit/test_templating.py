"""The templates' compiled code kept between runs (machine/templating.py): a template is compiled once, and the next
run (a fresh process: the per-run caches cleared) renders it from the kept code; a folder another user may write is
never used."""

from __future__ import annotations

import os

import pytest

from sglang_infra.machine import templating

SOURCE = "{{ name | q }} is {{ 'kept' if kept else 'compiled' }}\n"


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A new run: BYTECODE_DIR in tmp_path, every per-run cache cleared, each compile counted."""
    monkeypatch.setattr(templating, "BYTECODE_DIR", tmp_path / "user-cache" / "templates")
    compiled = []
    compile_ = templating.environment().compile
    monkeypatch.setattr(templating.environment(), "compile", lambda source: compiled.append(source) or compile_(source))

    def run():
        templating._compiled.cache_clear()
        templating.bytecode_cache.cache_clear()
        return templating._compiled(SOURCE).render(name="x", kept=True)

    yield run, compiled
    templating._compiled.cache_clear()
    templating.bytecode_cache.cache_clear()


def test_a_template_is_compiled_once_and_its_code_kept_for_the_next_run(fresh):
    run, compiled = fresh
    assert run() == '"x" is kept\n'
    assert run() == '"x" is kept\n'
    assert len(compiled) == 1
    kept = templating.BYTECODE_DIR
    assert oct(kept.stat().st_mode & 0o777) == "0o700"
    assert len(os.listdir(kept)) == 1


def test_a_changed_template_is_compiled_again(fresh, monkeypatch):
    run, compiled = fresh
    run()
    templating._compiled.cache_clear()
    assert templating._compiled(SOURCE + "#").render(name="y", kept=False) == '"y" is compiled\n#'
    assert len(compiled) == 2


@pytest.mark.parametrize("mode", [0o770, 0o707])
def test_a_folder_others_may_write_is_never_used(fresh, mode):
    run, compiled = fresh
    templating.BYTECODE_DIR.mkdir(parents=True)
    templating.BYTECODE_DIR.chmod(mode)
    assert run() == '"x" is kept\n'
    assert run() == '"x" is kept\n'
    assert len(compiled) == 2
    assert os.listdir(templating.BYTECODE_DIR) == []


def test_a_link_in_its_place_is_never_used(fresh, tmp_path):
    run, compiled = fresh
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    templating.BYTECODE_DIR.parent.mkdir(parents=True)
    templating.BYTECODE_DIR.symlink_to(elsewhere)
    run()
    run()
    assert len(compiled) == 2
    assert os.listdir(elsewhere) == []


def test_without_a_home_nothing_is_made(fresh, tmp_path, monkeypatch):
    run, compiled = fresh
    monkeypatch.setattr(templating, "BYTECODE_DIR", tmp_path / "gone" / ".cache" / "sglang-infra" / "templates")
    assert run() == '"x" is kept\n'
    assert run() == '"x" is kept\n'
    assert len(compiled) == 2
    assert not (tmp_path / "gone").exists()
