"""The house's layers (issue 55): each folder is a layer that imports only the layers below it.

The order is the table under "## Layers" in docs/architecture.md, one line a layer from the top down, read here
from the page itself: the page and the tree cannot drift apart. Two folders on one line stand side by side and
import neither of the other; a folder may import its own modules. Every import counts, wherever it stands (inside
a function, under `if TYPE_CHECKING:`): each is a dependency a reader meets, and an upward one is a knot.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "architecture.md"
# What the layers must cover: the control library, the task files, the benchmarks and the table of contents.
COVERED = ("sglang_infra", "tasks", "bench", "deploy.py")
ROW_RE = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|")


def layers(page: Path = PAGE) -> dict[str, int]:
    """{a folder ("sglang_infra/plan/") or a file ("deploy.py"): its floor, 1 the ground}, from the page's table."""
    text = page.read_text(encoding="utf-8").split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    found: dict[str, int] = {}
    for line in text.splitlines():
        row = ROW_RE.match(line)
        if row:
            for place in re.findall(r"`([^`]+)`", row.group(2)):
                assert place not in found, f"{place} is on two lines of the layers"
                found[place] = int(row.group(1))
    return found


def place_of(path: str, table: dict[str, int]) -> str | None:
    """The entry of the table ``path`` (relative to the root) belongs to: the longest that holds it."""
    holding = [p for p in table if path == p or (p.endswith("/") and path.startswith(p))]
    return max(holding, key=len, default=None)


def _sources(root: Path) -> list[Path]:
    out = []
    for top in COVERED:
        where = root / top
        out += [where] if where.is_file() else sorted(where.rglob("*.py")) if where.is_dir() else []
    return out


def _target(root: Path, dotted: str) -> str | None:
    """The file of the checkout a dotted module name is, relative to the root, or None (not ours)."""
    base = root.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.relative_to(root).as_posix()
    return None


def imports(root: Path, path: Path) -> list[tuple[int, str]]:
    """(line, the file of the checkout it imports) for every import of ``path``, wherever it stands."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    package = parts[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - (node.level - 1)] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            names = [f"{source}.{alias.name}" for alias in node.names if _target(root, f"{source}.{alias.name}")]
            if len(names) < len(node.names):
                names.append(source)
        else:
            continue
        out += [(node.lineno, found) for found in map(lambda n: _target(root, n), names) if found]
    return out


def upward(root: Path = ROOT, page: Path = PAGE) -> list[str]:
    """Every import from a layer to one above it or beside it, as "file:line: place (floor) -> place (floor)"."""
    table = layers(page)
    out = []
    for path in _sources(root):
        here = place_of(path.relative_to(root).as_posix(), table)
        for line, target in imports(root, path):
            there = place_of(target, table)
            if here is None or there is None or here == there:
                continue
            if table[there] >= table[here]:
                out.append(f"{path.relative_to(root)}:{line}: {here} ({table[here]}) -> {there} ({table[there]})")
    return out


def test_every_import_points_down():
    assert upward() == []


def test_the_layers_cover_the_tree_and_name_only_what_exists():
    table = layers()
    assert set(table.values()) == set(range(1, max(table.values()) + 1)), "the floors are numbered 1 up, none skipped"
    assert [p for p in table if not (ROOT / p).exists()] == []
    files = [p.relative_to(ROOT).as_posix() for p in _sources(ROOT)]
    assert [path for path in files if place_of(path, table) is None] == []
    # every folder of the library is on a line of its own or under one that is
    packages = {p.parent.relative_to(ROOT).as_posix() + "/" for p in (ROOT / "sglang_infra").glob("*/__init__.py")}
    assert sorted(p for p in packages if place_of(p, table) is None) == []


# The reading itself, on a small tree and page: an import up, or beside, is caught wherever it stands.

def _tree(tmp_path: Path, files: dict[str, str], rows: list[str]) -> tuple[Path, Path]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    page = tmp_path / "architecture.md"
    page.write_text("# A\n\n## Layers\n\n| floor | folders |\n|---|---|\n" + "\n".join(rows) + "\n\n## Next\n")
    return tmp_path, page


def test_an_import_up_or_beside_is_caught_wherever_it_stands(tmp_path):
    root, page = _tree(tmp_path, {
        "sglang_infra/__init__.py": "",
        "sglang_infra/low/__init__.py": "", "sglang_infra/low/a.py": "X = 1\n",
        "sglang_infra/side/__init__.py": "", "sglang_infra/side/b.py": "from ..low.a import X\n",
        "sglang_infra/high/__init__.py": "",
        "sglang_infra/high/c.py": "from ..low import a\nfrom . import d\nimport sglang_infra.side.b\n",
        "sglang_infra/high/d.py": "Y = 2\n",
        # planted: a function's late import up, a checker's import beside
        "sglang_infra/low/e.py": "def late():\n    from ..high.c import Z\n",
        "sglang_infra/side/f.py":
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sglang_infra.low import e\n",
        "tasks/t.py": "from sglang_infra.high import c\n",
        "deploy.py": "import tasks.t\n",
    }, ["| 3 | `deploy.py`, `tasks/` |", "| 2 | `sglang_infra/high/` |",
        "| 1 | `sglang_infra/low/`, `sglang_infra/side/`, `sglang_infra/__init__.py` |"])
    assert sorted(upward(root, page)) == [
        "deploy.py:1: deploy.py (3) -> tasks/ (3)",
        "sglang_infra/low/e.py:2: sglang_infra/low/ (1) -> sglang_infra/high/ (2)",
        "sglang_infra/side/b.py:1: sglang_infra/side/ (1) -> sglang_infra/low/ (1)",
        "sglang_infra/side/f.py:3: sglang_infra/side/ (1) -> sglang_infra/low/ (1)",
    ]
