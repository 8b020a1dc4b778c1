"""What ship.py packs with a host program is what the program imports: every hostside module it loads,
transitively, and nothing else, each after the modules it imports itself. So a program that reads the API key
or a server's answer ships apikey.py and bounded.py, not the checks' tool-call and benchmark code."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from sglang_infra.machine import ship

PROGRAMS = ship.programs()

# Every program imported by Python itself, each into a fresh set of hostside modules (one interpreter for all):
# what it loads is what it imports, whatever ship.py's reading of the source says (a subpackage, pull/, is no
# module of its own: ship.py registers it empty).
PROBE = """
import importlib, json, sys
package_name, names = sys.argv[1], json.loads(sys.argv[2])
prefix = package_name + "."
package = importlib.import_module(package_name)
found = {}
for name in names:
    for loaded in [m for m in sys.modules if m.startswith(prefix)]:
        del sys.modules[loaded]
        if hasattr(package, loaded[len(prefix):]):
            delattr(package, loaded[len(prefix):])
    importlib.import_module(prefix + name)
    found[name] = sorted(m[len(prefix):] for m in sys.modules
                         if m.startswith(prefix) and m != prefix + name and not hasattr(sys.modules[m], "__path__"))
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def imported():
    """{program: the hostside modules importing it loads}."""
    out = subprocess.run([sys.executable, "-c", PROBE, ship.PACKAGE, json.dumps(PROGRAMS)], capture_output=True,
                         text=True, timeout=120, cwd=ship.HOSTSIDE.parent.parent)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_carries_exactly_the_modules_it_imports(imported, name):
    carried = ship.carried(name)
    assert len(carried) == len(set(carried)) and name not in carried
    assert set(carried) == set(imported[name])
    for k, module in enumerate(carried):   # each loaded after what it needs
        assert set(imported[module]) <= set(carried[:k]), (module, carried)


@pytest.mark.parametrize("name", ["roll.drain", "roll.gateway_workers", "gate.report"])
def test_the_programs_that_read_the_key_or_a_server_ship_without_the_checks(name):
    carried = ship.carried(name)
    assert {"apikey", "bounded"} <= set(carried) and "checks" not in carried
    assert "hostside/checks.py" not in ship.program(name)


def test_the_gateways_launcher_reads_the_key_with_the_one_reader():
    # read_key opens as safefs does (and reads the key's JSON string as the read does, formats/jsonio.py)
    assert ship.carried("gateway_launch") == ["safefs", "formats.jsonio", "apikey", "names"]



# What the hosts keep does not depend on where the programs run per command lie (issue 41 moved them into read/,
# write/ and roll/ and no converged host changed): the installed programs are built from the modules the hosts
# keep alone, and every program the control side writes onto a host goes through installed().

@contextmanager
def shipping_from(folder: Path):
    """ship.py reading its modules from ``folder`` instead of hostside/."""
    caches = (ship._source, ship._neighbours, ship.program)
    real = ship.HOSTSIDE
    for function in caches:
        function.cache_clear()
    ship.HOSTSIDE = folder
    try:
        yield
    finally:
        ship.HOSTSIDE = real
        for function in caches:
            function.cache_clear()


def test_the_programs_the_hosts_keep_are_built_from_the_kept_modules_alone(tmp_path):
    shipped = {entry: ship.installed(entry) for entry in ship.INSTALLED}
    kept = ship.kept()
    copy = tmp_path / "hostside"
    shutil.copytree(ship.HOSTSIDE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    removed = [path for path in copy.rglob("*.py")
               if path.name != "__init__.py" and ".".join(path.relative_to(copy).with_suffix("").parts) not in kept]
    for path in removed:
        path.unlink()
    assert {"read/snapshot.py", "write/put.py", "roll/drain.py"} <= {str(p.relative_to(copy)) for p in removed}
    with shipping_from(copy):
        assert {entry: ship.installed(entry) for entry in ship.INSTALLED} == shipped


def test_a_program_run_per_command_is_refused_as_an_installed_one():
    with pytest.raises(ValueError, match="read/snapshot.py is not a program the hosts keep"):
        ship.installed("read.snapshot")


def test_the_control_side_writes_a_host_program_only_through_installed():
    """ship.program() called outside ship.py would write a program onto a host that ship.INSTALLED does not name,
    and the tree's rule (test_tree_shape) would not know it."""
    root = ship.HOSTSIDE.parent.parent
    callers = []
    for path in [*root.joinpath("sglang_infra").rglob("*.py"), *root.joinpath("tasks").rglob("*.py"),
                 root / "deploy.py"]:
        if path == Path(ship.__file__):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "program"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "ship"):
                callers.append(f"{path.relative_to(root)}:{node.lineno}")
    assert callers == []


def _sent() -> set[tuple[str, str]]:
    """Every program the control side sends in a command, found at its call sites: ("cached_", name) through the
    code cache (ship.cached_command), ("", name) as ship.command sends it."""
    import re

    root = Path(__file__).resolve().parents[2]
    sites = r"ship\.(cached_)?command\(['\"]([\w.]+)['\"]\)"
    # a fact's program (its command is ship.cached_command(self.program)) and run_cached's: through the code cache
    cached_sites = r"(?:^    program = |run_cached\(\w+, )['\"]([\w.]+)['\"]"
    texts = [path.read_text() for folder in ("sglang_infra", "tasks") for path in (root / folder).rglob("*.py")]
    return {found for text in texts for found in re.findall(sites, text)} | \
        {("cached_", name) for text in texts for name in re.findall(cached_sites, text, re.M)}


def test_every_program_sent_in_a_command_travels_compressed_with_room_to_double():
    """Issue 53: sent as text, roll.restore_good (the rollback's own program) was 118.6 KiB quoted twice, within
    10 KiB of the 128 KiB one argument may hold (MAX_ARG_STRLEN: pyinfra's `sh -c` quotes it once more), so a
    feature added to a rollback path could break the rollback. Every program sent per command travels compressed
    (ship.command packs it; cached_command compresses it for the code cache): each fits in half the limit, quoted
    twice, and its text is no longer in the command at all."""
    import shlex

    found = _sent()
    sent = {name for _, name in found}
    assert {"write.put", "roll.restore_good", "stack", "read.snapshot"} <= sent, sent   # the call sites were found
    sizes = {name: len(shlex.quote(shlex.quote((ship.cached_command if cached else ship.command)(name))).encode())
             for cached, name in found}
    assert max(sizes.values()) <= 64 * 1024, sorted(sizes.items(), key=lambda item: -item[1])
    for cached, name in found:
        assert ship.program(name).splitlines()[-1] not in (ship.cached_command if cached else ship.command)(name)


@pytest.mark.parametrize("name, args", [("roll.restore_good", ["/nonexistent"]), ("write.acl", []),
                                        ("write.put", ["/nonexistent/a"])])
def test_a_compressed_program_runs_as_its_text_did(name, args, tmp_path):
    """The same program, the same arguments, the same stdin: the same exit status and output as the text run
    from a file (stdin reaches it: write.put reads the file's content there)."""
    def run(line: list[str]):
        return subprocess.run(line, input="content", capture_output=True, text=True, timeout=60)

    whole_file = tmp_path / "program.py"
    whole_file.write_text(ship.program(name))
    packed = run(["sh", "-c", ship.command(name).replace("python3", sys.executable, 1) + " " + " ".join(args)])
    whole = run([sys.executable, "-I", str(whole_file), *args])
    assert (packed.returncode, packed.stdout, packed.stderr.splitlines()[-1:]) == \
        (whole.returncode, whole.stdout, whole.stderr.splitlines()[-1:])
    assert packed.returncode != 0 or name == "roll.restore_good"   # each ran far enough to judge its arguments


@pytest.mark.parametrize("name", ship.programs())
def test_the_relative_imports_read_are_those_of_the_whole_module(name):
    """ship reads a module's imports from its `from .` lines alone (relative_imports): for every module of
    hostside/, exactly the relative imports at its top level that the whole module's parse finds, in order."""
    def imports(source: str) -> list[tuple[int, str | None, list[str]]]:
        return [(node.level, node.module, [alias.name for alias in node.names])
                for node in ast.parse(source).body if isinstance(node, ast.ImportFrom) and node.level]

    source = ship.path_of(name).read_text(encoding="utf-8")
    assert imports(ship.relative_imports(source)) == imports(source)


def test_the_source_sent_inline_is_each_modules_own_program_with_its_comment_lines_blank():
    """cached_program() sends each module with its comment-only lines emptied (the command must fit one argument):
    the same syntax tree, docstrings and strings included, on the same line numbers, for every module of
    hostside/."""
    for name in ship.programs():
        source, sent = ship._source(name), ship.sent_source(name)
        assert ast.dump(ast.parse(sent)) == ast.dump(ast.parse(source)), name
        assert sent.count("\n") == source.count("\n"), name
        assert not any(line.lstrip().startswith("#") for line in sent.splitlines()), name
    assert len(ship.sent_source("read.snapshot")) < len(ship._source("read.snapshot"))


def test_a_program_run_per_command_is_unpacked_without_importing_re(tmp_path):
    """The one line a packed program travels in decodes its base64 with binascii: base64 imports re (and enum) on
    newer Pythons, several ms of every such command (the hold's, which every run waits for) before the program."""
    import base64
    import zlib

    probe = "import sys\nprint(sorted(name for name in ('re', 'enum', 'base64') if name in sys.modules))\n"
    line = ship._PACKED.format(blob=base64.b64encode(zlib.compress(probe.encode())).decode(), path="probe.py")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", line], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.replace("'", '"')) == []
    hold = subprocess.run(["sh", "-c", ship.command("write.hold", site=False) + " show"], capture_output=True,
                          text=True, timeout=60)
    assert hold.returncode == 0, hold.stderr
