"""The names a host program and the control side share are spelled out once, in hostside/names.py: no other
module of sglang_infra/ or tasks/ writes one of them as a string, and the gate's stamp is compared with the
host's digest in one function."""

from __future__ import annotations

import ast
import re

import pytest

from harness import PROJECT_DIR
from sglang_infra.hostside import names

NAMES_FILE = PROJECT_DIR / "sglang_infra" / "hostside" / "names.py"
MODULES = sorted(p for d in ("sglang_infra", "tasks") for p in (PROJECT_DIR / d).rglob("*.py") if p != NAMES_FILE)
# Every shared value, and the names derived from them that a caller would otherwise spell out.
SHARED = {value for key, value in vars(names).items() if key.isupper() and isinstance(value, str)} \
    | set(names.VALIDATION_SCRIPTS) | {names.failed(names.COMPOSE_FILE), names.failed(names.ENV_FILE)}
# The home's directories below another (docker/secrets, hf-cache/hub): each component is a name of its own, which
# os.path.join(docker_dir, "secrets") would spell out. Not the absolute paths (the textfile collector's).
SHARED |= {part for value in SHARED if "/" in value and not value.startswith("/") for part in value.split("/")}
# Plain words that are also the names of other things (a compose service, a Docker group, the results of a
# check): counted only where they are a path's component.
WORDS = {value for value in SHARED if re.fullmatch(r"[a-z]+", value)}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def spelled_out(source: str) -> list[tuple[int, str]]:
    """(line, shared value) of each string literal in ``source`` that spells out a shared name."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    in_fstring = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    joined = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and node.func.attr == "join" for arg in node.args}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in skip:
            continue
        text = node.value
        for value in SHARED:
            if value in WORDS:
                # An absolute path outside an f-string is the system's (/var/lib/docker), not the home's.
                path_like = id(node) in in_fstring or ("/" in text and not text.startswith("/"))
                hit = (text == value and id(node) in joined) or \
                    (path_like and re.search(rf"(^|/){re.escape(value)}/|/{re.escape(value)}$", text))
            elif id(node) in in_fstring or "/" in text:
                hit = re.search(rf"(^|/){re.escape(value)}($|/)", text)
            else:
                hit = text == value
            if hit:
                found.append((node.lineno, value))
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PROJECT_DIR)))
def test_no_module_spells_out_a_shared_name(path):
    assert spelled_out(path.read_text()) == [], \
        f"{path.relative_to(PROJECT_DIR)} spells out names of sglang_infra/hostside/names.py: use the constant"


@pytest.mark.parametrize("source", [
    'FILE = "workers.json"',
    'failed = f"{where}/compose.yaml.failed"',
    'top = os.path.join(home, "router")',
    'labels.get("sglang.model")',
    'SCRIPTS = ("test_tool_calling.sh", "benchmark.sh")',
    'key = os.path.join(home, "docker", "secrets", "server.yaml")',
    'context = os.path.join(docker_dir, "toolchain")',
    'hub = f"{home}/hf-cache/hub"',
    'LAYOUT = {"docker/secrets": "700", "results": "2775"}',
    'cache = os.path.join(home, "hf-cache")',
])
def test_the_check_finds_a_name_spelled_out(source):
    assert spelled_out(source)


def test_a_word_that_names_something_else_is_not_a_shared_name():
    assert spelled_out('SERVICE = "router"\nGROUP = "router"\nwhat = "the gateway (router)"') == []


@pytest.mark.parametrize("source", [
    'groups = ["docker"]',
    'PLUGINS = ("/usr/libexec/docker/cli-plugins", "/var/lib/docker")',
    'say(f"the toolchain check of {image} found no results")',
    'name = "Ensure hf-cache/hub holds only the revisions this host keeps"',
])
def test_a_home_name_in_prose_or_a_system_path_is_not_spelled_out(source):
    assert spelled_out(source) == []


def test_the_stamp_is_compared_in_one_function():
    compared = [str(p.relative_to(PROJECT_DIR)) for p in MODULES
                if re.search(r"\[\"stamp\"\]\s*==|stamp\"\)\s*==|==\s*\S*\[\"digest\"\]", p.read_text())]
    assert compared == []
    assert names.stamp_current("ab" * 32, "ab" * 32)
    assert not names.stamp_current(None, None) and not names.stamp_current("", "")
    assert not names.stamp_current("ab" * 32, "cd" * 32)
