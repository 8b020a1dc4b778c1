"""The control library's shape (issue 41): its import graph has no cycle and stays shallow, a module above
everything it imports, and no folder of it holds more modules side by side than a reader can take in at once.

The graph is read from the source, not from Python's own import machinery: an edge is a module-level import of
one module of sglang_infra/ by another (an import inside a function is not counted: it runs late, and a test
of its own would be needed to hold it; nor is one under `if TYPE_CHECKING:`, which names a type for the checker and
never runs). `from .a import b` is an edge to a; `from . import a` to the module a;
a package's __init__ counts only for what its own lines import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sglang_infra.machine import ship

ROOT = Path(__file__).resolve().parent.parent.parent
LIBRARY = ROOT / "sglang_infra"
# hostside/'s top holds only the modules a change of which re-gates every worker, recreates a gateway or rebuilds the
# toolchain image (ship.costly(): the programs ship.COSTLY names and what they carry): moving one changes its text
# or its bundle's, so they stay where converged hosts hold them. The set is computed from ship.py, so the top cannot
# grow silently: any other program or module belongs in a folder by concern (gate/, gpu/, read/, write/, ...).
HOSTSIDE = LIBRARY / "hostside"
# Issue 41's bound: eight floors, the preflight at the top, hostside's shared modules at the bottom.
MAX_DEPTH = 8
MAX_SIDE_BY_SIDE = 12


def _module_of(path: Path, root: Path) -> tuple[str, bool]:
    """The dotted name of a file of the package ``root``, and whether it is a package's __init__."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _type_checking_only(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _top_level_imports(tree: ast.Module):
    """Import statements that run when the module is imported: its body, and inside its top-level if/try."""
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _type_checking_only(node.test):
            continue
        elif isinstance(node, (ast.If, ast.Try)):
            yield from (sub for sub in ast.walk(node) if isinstance(sub, (ast.Import, ast.ImportFrom)))


def import_graph(root: Path = LIBRARY) -> dict[str, set[str]]:
    """{module: the modules of the library it imports at module level}."""
    files = {_module_of(path, root): path for path in root.rglob("*.py")}
    modules = {name for name, _ in files}
    graph: dict[str, set[str]] = {}
    for (name, is_package), path in files.items():
        package = name if is_package else name.rpartition(".")[0]
        edges = set()
        for node in _top_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names if alias.name in modules}
                continue
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = {f"{source}.{alias.name}" for alias in node.names} & modules
            edges |= submodules
            if source in modules and len(submodules) < len(node.names):
                edges.add(source)
        graph[name] = edges - {name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, as the modules on it, or None."""
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> list[str] | None:
        if name in trail:
            return trail[trail.index(name):] + [name]
        if name in done:
            return None
        for other in sorted(graph[name]):
            found = visit(other, trail + [name])
            if found:
                return found
        done.add(name)
        return None

    for name in sorted(graph):
        found = visit(name, [])
        if found:
            return found
    return None


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest chain of imports, from the module that stands highest down to a module that imports nothing
    of the library: its length is the graph's depth (a module alone is 1 deep)."""
    chains: dict[str, list[str]] = {}

    def chain(name: str) -> list[str]:
        if name not in chains:
            below = [chain(other) for other in sorted(graph[name])]
            chains[name] = [name] + max(below, key=len, default=[])
        return chains[name]

    return max((chain(name) for name in sorted(graph)), key=len)


def _write(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "sglang_infra"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_control_library_has_no_import_cycle():
    assert cycle(import_graph()) is None


def test_the_control_library_is_at_most_max_depth_deep():
    chain = longest_chain(import_graph())
    assert len(chain) <= MAX_DEPTH, " -> ".join(chain)


@pytest.mark.parametrize("folder", sorted({p.parent for p in LIBRARY.rglob("*.py")}),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_folder_of_the_control_library_holds_more_than_12_modules(folder):
    modules = sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= MAX_SIDE_BY_SIDE, modules


def misplaced(folder: Path, allowed: set[str]) -> list[str]:
    """The modules at ``folder``'s top not in ``allowed`` (dotted names below the folder)."""
    return sorted(p.stem for p in folder.glob("*.py") if p.name != "__init__.py" and p.stem not in allowed)


def test_hostsides_top_holds_only_modules_a_change_of_which_regates_recreates_or_rebuilds():
    assert misplaced(HOSTSIDE, ship.costly()) == []


def test_the_costly_programs_are_installed_and_their_set_is_computed_from_them():
    assert set(ship.COSTLY) <= set(ship.INSTALLED)
    assert ship.costly() >= set(ship.COSTLY) | set(ship.carried("checks"))
    assert "gate.gate" not in ship.costly() and "pull.hfpull" not in ship.costly()


def test_an_inline_program_at_hostsides_top_is_caught(tmp_path):
    for name in ("gate.py", "stamp.py", "drain.py", "__init__.py"):
        (tmp_path / name).write_text("")
    assert misplaced(tmp_path, {"gate", "stamp", "pull.hfpull"}) == ["drain"]


def test_every_package_of_the_control_library_says_what_it_holds():
    for init in LIBRARY.rglob("__init__.py"):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), init.relative_to(ROOT)


# The reading of the graph itself, on small trees: what it counts is what the tests above hold the library to.

def test_the_graph_follows_every_form_of_import(tmp_path):
    root = _write(tmp_path, {
        "__init__.py": "", "a.py": "X = 1\n", "b.py": "from .a import X\n",
        "p/__init__.py": "", "p/c.py": "from .. import a, b\n", "p/d.py": "from . import c\nimport sglang_infra.a\n",
        "e.py": "def late():\n    from .p import d\n",   # inside a function: not counted
        "f.py": "try:\n    from .p.d import y\nexcept ImportError:\n    pass\n",
        "g.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .f import Z\n",   # for the checker
    })
    graph = import_graph(root)
    assert graph["sglang_infra.b"] == {"sglang_infra.a"}
    assert graph["sglang_infra.p.c"] == {"sglang_infra.a", "sglang_infra.b"}
    assert graph["sglang_infra.p.d"] == {"sglang_infra.p.c", "sglang_infra.a"}
    assert graph["sglang_infra.e"] == set() and graph["sglang_infra.f"] == {"sglang_infra.p.d"}
    assert graph["sglang_infra.g"] == set()
    assert longest_chain(graph) == ["sglang_infra.f", "sglang_infra.p.d", "sglang_infra.p.c", "sglang_infra.b",
                                    "sglang_infra.a"]
    assert cycle(graph) is None


def test_a_cycle_is_found_and_named(tmp_path):
    root = _write(tmp_path, {"__init__.py": "", "a.py": "from . import b\n", "b.py": "from .c import Z\n",
                             "c.py": "from .a import Y\n"})
    assert cycle(import_graph(root)) == ["sglang_infra.a", "sglang_infra.b", "sglang_infra.c", "sglang_infra.a"]
