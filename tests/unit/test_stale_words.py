"""No stale word (issue 41): where a docstring, a comment or a page of docs/ names a module, a function or a file
of this project, that module, function or file exists. A name outlives its thing when code moves; a reader sent
to `plan.check_fleet` or `sglang_infra/toolchain.py` finds nothing.

What is read: the docstrings and comments of every Python file of the project (not its strings: a message names
what the operator sees), and docs/*.md and README.md whole. What counts as a reference:
- a dotted name whose first word is a module or package of sglang_infra/ (`refusals.check_data`,
  `hostside.names`, `sglang_infra.plan.resolve`), or a module name the tree no longer has (FORMER): the modules it
  walks down must exist, and the name after the last of them must be defined at that module's top level
  (imported is not defined: `gateways.roles` was `groups.roles`, only imported there). `plan.X` may also be a
  field of the host's plan, HostPlan (the pages call a host's plan `plan`);
- a file path ending in .py, .md, .sh, .j2, .json, .yml, .yaml, .txt or .toml that starts with a folder of the
  checkout or of sglang_infra/ (`tasks/models.py`, `hostside/pull/hfpull.py`): some file of the checkout must end
  with it (a path below the home, `docker/compose.yaml`, is the host's); a bare module file (`refusals.py`): some
  file of the checkout has that name, or it is a name the hosts know (hostside/names.py), a module of Python's
  standard library, or a file of another project (UPSTREAM);
- a folder of the checkout named from its top (`sglang_infra/machine/toolchain/`).
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
LIBRARY = ROOT / "sglang_infra"
TOPS = ("sglang_infra", "tasks", "templates", "scripts", "tests", "docs", "bench", "group_data")
# Module names the tree had before the packages (issue 41): a dotted word starting with one is stale.
FORMER = {"plantypes", "keyreasons", "taskhelpers", "compat", "groups", "base"}
# A word that reads like a reference and is none, with what it is.
NOT_OURS = {
    "system.posix_acl_access": "the kernel's name of a directory's ACL (an extended attribute), not operations.system",
}
# Files of other projects the texts name: the upstream sources the gateway's and the stand-in's behaviour is
# read from (smg, sglang), pyinfra's command line and huggingface_hub's transfer module.
UPSTREAM = ("smg/", "sglang/", "python/sglang/", "pyinfra_cli/", "managers/", "utils/_http.py", "server_args.py",
            "tokenizer_manager.py")
# Paths that name no file of the checkout by design: what the benches and the sandbox write (ignored by git),
# and an operator's own group file.
NOT_IN_THE_CHECKOUT = ("bench/results/", ".sandbox/", "group_data/router.py")
# Stale words kept on purpose, each with its reason: the text of a host program that the hosts' stamped scripts
# carry is part of what a worker's stamp covers, so a change of a word there re-gates every converged worker.
KEPT = {
    ("sglang_infra/hostside/apikey.py", "plan.py"): "carried by gate.sh (its stamp covers the text)",
    # Issue 55 moved the loader to machine/ship.py and the lock's resolver to fleet/lockgen.py; the host programs
    # that name them by their former paths keep their bytes (hosts hold them), and so does the loader's header.
    ("sglang_infra/hostside/__init__.py", "sglang_infra/run/ship.py"): "hostside's package, shipped with its programs",
    ("sglang_infra/hostside/pull/hfpull.py", "sglang_infra/run/ship.py"): "shipped in the pull's bundle",
    ("sglang_infra/hostside/pull/__init__.py", "models/lockgen.py"): "shipped in the pull's bundle",
    ("sglang_infra/hostside/read/codecache.py", "run/ship.py"): "shipped: runs every bundled program",
    ("sglang_infra/machine/ship.py", "run/ship.py"): "the first line of every nested bundle (_NESTED_BOOT)",
}
FILE = r"[\w-]+(?:\.[\w-]+)*\.(?:py|md|sh|j2|json|yml|yaml|txt|toml)"
PATH_RE = re.compile(rf"(?<![\w/<-])(?:\./)?((?:[\w.-]+/)*{FILE})(?![\w/]|\.\w)")
FOLDER_RE = re.compile(rf"(?<![\w./<-])((?:{'|'.join(TOPS)})/(?:[\w.-]+/)*)(?![\w.])")
DOTTED_RE = re.compile(r"(?<![\w./-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
EXTENSIONS = {"py", "md", "sh", "j2", "json", "yml", "yaml", "txt", "toml", "service", "timer", "conf", "prom",
              "env", "lock", "d", "gz", "pem", "crt", "key", "socket", "io", "com", "org", "net", "example"}


def _defined(tree: ast.Module, is_package: bool) -> set[str]:
    """The names a module defines at its top level (a package's __init__: what it imports, its interface)."""
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif is_package and isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {alias.asname or alias.name for alias in node.names}
    return found


@lru_cache(maxsize=None)
def library() -> dict[str, set[str]]:
    """{dotted module or package of sglang_infra/: the names it defines}."""
    found = {}
    for path in LIBRARY.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = _defined(ast.parse(path.read_text()), is_package)
    return found


@lru_cache(maxsize=None)
def plan_fields() -> set[str]:
    """HostPlan's fields, properties and methods: `plan.X` in a page is a host's plan's X."""
    for path in LIBRARY.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name == "HostPlan":
                return ({n.target.id for n in node.body if isinstance(n, ast.AnnAssign)
                         and isinstance(n.target, ast.Name)}
                        | {n.name for n in node.body if isinstance(n, ast.FunctionDef)})
    return set()


@lru_cache(maxsize=None)
def checkout() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(every file's path, every file's name, every folder's path) of the checkout, relative to its root."""
    skip = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".sandbox", "results"}
    paths = [p for p in ROOT.rglob("*") if not skip & set(p.relative_to(ROOT).parts)]
    files = [p for p in paths if p.is_file()]
    return (frozenset(str(p.relative_to(ROOT)) for p in files), frozenset(p.name for p in files),
            frozenset(str(p.relative_to(ROOT)) + "/" for p in paths if p.is_dir()))


@lru_cache(maxsize=None)
def host_names() -> frozenset[str]:
    """The file names the hosts know (hostside/names.py's constants): launch.py is the gateway's launcher there."""
    tree = ast.parse((LIBRARY / "hostside" / "names.py").read_text())
    return frozenset(node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                     and isinstance(node.value, str))


def dotted_problem(word: str) -> str | None:
    """Why the dotted ``word`` names nothing that exists, or None (also when it is no reference of ours)."""
    parts = word.split(".")
    if parts[0] == "sglang_infra":
        parts = parts[1:]
    modules = library()
    if not parts or word in NOT_OURS or (len(parts) > 1 and parts[1] in EXTENSIONS):
        return None
    starts = [name for name in modules if name.split(".")[-1] == parts[0]]
    if not starts:
        return f"{word}: there is no module {parts[0]} any more" if parts[0] in FORMER else None
    if parts[0] == "plan" and len(parts) > 1 and parts[1] in plan_fields():
        return None
    for module in starts:
        rest = parts[1:]
        while rest and f"{module}.{rest[0]}" in modules:
            module, rest = f"{module}.{rest[0]}", rest[1:]
        if not rest or rest[0] in modules[module]:
            return None
    return f"{word}: no module {' or '.join(sorted(starts))} defines {parts[1]}"


def path_problem(path: str) -> str | None:
    """Why ``path`` names no file of the checkout, or None (also when it is no path of the checkout's)."""
    files, names, folders = checkout()
    name = path.rpartition("/")[2]
    if (path.startswith(UPSTREAM + NOT_IN_THE_CHECKOUT) or name.partition(".")[0].isupper()   # a placeholder (NAME)
            or ("/" in path and not any(f.endswith("/" + path.partition("/")[0] + "/") or f == path.partition("/")[0]
                                        + "/" for f in folders))
            or ("/" not in path and not name.endswith(".py"))):
        return None
    if "/" in path:
        found = path in files or any(f.endswith("/" + path) for f in files)
    else:
        found = name in names or name in host_names() or name[:-3] in sys.stdlib_module_names
    return None if found else f"{path}: no such file"


def folder_problem(folder: str) -> str | None:
    if folder.startswith(NOT_IN_THE_CHECKOUT):
        return None
    return None if folder in checkout()[2] else f"{folder}: no such folder"


def texts(path: Path):
    """(line, text) of every docstring and comment of a Python file; a page of docs whole."""
    source = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        yield 1, source
        return
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, doc
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def stale_words(text: str) -> list[tuple[str, str]]:
    """(word, why) for every reference of ``text`` that names nothing."""
    found = [(m.group(1), dotted_problem(m.group(1).rstrip("."))) for m in DOTTED_RE.finditer(text)]
    found += [(m.group(1), path_problem(m.group(1))) for m in PATH_RE.finditer(text)]
    found += [(m.group(1), folder_problem(m.group(1))) for m in FOLDER_RE.finditer(text)]
    return [(word, why) for word, why in found if why]


def _texts_of_the_project() -> list[str]:
    paths = [ROOT / "README.md", ROOT / "deploy.py", ROOT / "inventory.py", *sorted((ROOT / "docs").glob("*.md"))]
    for top in ("sglang_infra", "tasks", "tests", "bench", "scripts", "group_data"):
        paths += sorted(p for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)
    # This file's own texts name stale words on purpose, as examples.
    return [str(p.relative_to(ROOT)) for p in paths if p != Path(__file__).resolve()]


@pytest.mark.parametrize("path", _texts_of_the_project())
def test_every_module_function_and_file_a_text_names_exists(path):
    stale = [f"{path}:{line}: {why}" for line, text in texts(ROOT / path) for word, why in stale_words(text)
             if (path, word) not in KEPT]
    assert stale == []


@pytest.mark.parametrize("word", ["plan.check_fleet", "gateways.roles", "nodegroups.restart_reasons",
                                  "sglang_infra/toolchain.py", "plantypes.GatewaySettings", "groups.ROUTER_GROUP",
                                  "hostside/peers.py", "sglang_infra/operations/base.py", "sglang_infra/compat/"])
def test_the_issues_stale_words_are_found(word):
    assert [found for found, _ in stale_words(f"see `{word}` for it")] == [word]


@pytest.mark.parametrize("text", ["refusals.check_data", "render.LAUNCH_FLAGS", "hostside.names.TEXTFILE_DIR",
                                  "sglang_infra.plan.resolve", "plan.resolve()", "plan.template_values",
                                  "hostside/pull/hfpull.py", "gate.sh", "sglang_infra/machine/toolchain/",
                                  "hostside/NAME.py", "smg/router_args.py", "launch.py", "json.py", "e.g. host.noop",
                                  "system.posix_acl_access", "docs/variables.md"])
def test_a_word_that_names_what_exists_or_no_reference_of_ours_passes(text):
    assert stale_words(text) == []
