"""The hosts' programs are indexed where a reader looks first: hostside/__init__.py lists every module of
hostside/'s top and every folder below it (a line each, its name first), and each folder's __init__.py (pull/,
read/, write/, roll/) every module of that folder; an index line names a module that exists (the issue 41 count:
the index had left out 5 of its modules)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

HOSTSIDE = Path(__file__).resolve().parent.parent.parent / "sglang_infra" / "hostside"
ENTRY = re.compile(r"^    (\S+\.py|\S+/)\s", re.MULTILINE)


def index(package: Path) -> list[str]:
    """The names the package's docstring lists, a line each (`    NAME.py   what it is`)."""
    return ENTRY.findall(ast.get_docstring(ast.parse((package / "__init__.py").read_text()), clean=False) or "")


PACKAGES = sorted(init.parent for init in HOSTSIDE.rglob("__init__.py"))


@pytest.mark.parametrize("package", PACKAGES, ids=[str(p.relative_to(HOSTSIDE.parent)) for p in PACKAGES])
def test_the_index_lists_every_module_once_and_nothing_else(package):
    modules = sorted(p.name for p in package.glob("*.py") if p.name != "__init__.py")
    folders = sorted(p.name + "/" for p in package.iterdir() if (p / "__init__.py").is_file())
    listed = index(package)
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(modules + folders)


def test_an_index_that_leaves_a_module_out_is_caught(tmp_path):
    (tmp_path / "__init__.py").write_text('"""Programs.\n\n    a.py    one\n"""\n')
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    assert index(tmp_path) == ["a.py"]
    with pytest.raises(AssertionError):
        test_the_index_lists_every_module_once_and_nothing_else(tmp_path)
