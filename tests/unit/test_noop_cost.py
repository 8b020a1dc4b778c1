"""What a no-op run of a settled host does once per run, not once per host or per call (issue 56, item 3): each
of these was measured in the run's profile (docs/benchmarks.md, "Issue 56, item 3")."""

from __future__ import annotations

import ast
import dataclasses
import enum
import hashlib
import os
import shlex
import socket
import subprocess
import sys
import types
import zlib
from pathlib import Path

import pytest
import yaml
from conftest import pinned_defaults, plan_for
from pyinfra.api import connectors
from pyinfra_cli import cli as pyinfra_cli

from sglang_infra.machine import ship
from sglang_infra.machine.sglang_args import launch
from sglang_infra.plan import inventoryfile, refusals
from sglang_infra.run import settled, workarounds


def test_judging_hosts_scans_the_installed_distributions_once(monkeypatch):
    """pyinfra's connectors are found by scanning every installed distribution's entry points (5 to 9 ms a scan):
    judging a hundred names scanned a hundred times."""
    scans = []
    real = connectors.entry_points

    def counted(*args, **kwargs):
        scans.append(kwargs.get("group"))
        return real(*args, **kwargs)

    monkeypatch.setattr(connectors, "entry_points", counted)
    getattr(refusals.pyinfra_keys, "cache_clear", lambda: None)()
    data = pinned_defaults()
    for name in ("gpu-01", "gpu-02", "gpu-03"):
        assert refusals.judge(name, dict(data)).problems == []
    assert scans == ["pyinfra.connectors"]


def test_a_key_of_a_pyinfra_connector_is_still_known():
    """The keys worked out once are still every connector's and pyinfra's global arguments: known, and offered for
    a typo of one."""
    getattr(refusals.pyinfra_keys, "cache_clear", lambda: None)()
    assert {"ssh_user", "ssh_port", "_sudo"} <= refusals.pyinfra_keys()
    assert refusals.judge("gpu-01", {**pinned_defaults(), "ssh_user": "ops"}).problems == []
    [typo] = refusals.judge("gpu-01", {**pinned_defaults(), "ssh_usr": "ops"}).problems
    assert "did you mean ssh_user?" in typo


def test_the_command_line_is_parsed_once_per_run(monkeypatch):
    """Every host's judging asks which inventory file this run has (the lock lives beside it): click's parse of
    pyinfra's options, about 1 ms, once per host before."""
    parses = []
    real = pyinfra_cli.cli.make_context

    def counted(*args, **kwargs):
        parses.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(pyinfra_cli.cli, "make_context", counted)
    monkeypatch.setattr(inventoryfile, "_parsed", {}, raising=False)
    monkeypatch.setattr(sys, "argv", ["pyinfra", "-y", "inventory.py", "deploy.py", "--dry"])
    first = inventoryfile.run_parameters()
    first["dry"] = "changed by a caller"
    for _ in range(3):
        assert inventoryfile.run_parameters()["dry"] is True
        assert inventoryfile.run_parameters()["inventory"] == "inventory.py"
    assert len(parses) == 1


def test_another_command_line_is_parsed_anew(monkeypatch):
    monkeypatch.setattr(inventoryfile, "_parsed", {}, raising=False)
    monkeypatch.setattr(sys, "argv", ["pyinfra", "-y", "inventory.py", "deploy.py"])
    assert not inventoryfile.run_parameters()["dry"]
    monkeypatch.setattr(sys, "argv", ["pyinfra", "-y", "other.py", "deploy.py", "--dry"])
    assert inventoryfile.run_parameters()["dry"] is True
    assert inventoryfile.run_parameters()["inventory"] == "other.py"


def test_a_plans_plain_values_skip_the_costlier_checks(monkeypatch):
    """Most of a plan's values are plain strings and numbers; each went through the dataclass, named-tuple,
    mapping (an ABC check) and set checks before it was returned as it is (a third of the fingerprint's time)."""
    asked = []
    real = dataclasses.is_dataclass
    monkeypatch.setattr(dataclasses, "is_dataclass", lambda value: asked.append(value) or real(value))
    assert settled.canonical(["a", 1, 2.5, True, None, {"b": "c"}]) == [
        "a", 1, 2.5, True, None, {"@map": [["b", "c"]]}]
    assert all(type(value) in (list, dict) for value in asked), asked


class _Colour(str, enum.Enum):
    RED = "red"


class _Size(enum.IntEnum):
    BIG = 2


def test_an_enum_that_is_a_string_or_a_number_stays_an_enum():
    """The plain values' shortcut takes exactly str, int, float and bool: their enums and subclasses are written
    as before."""
    assert settled.canonical([_Colour.RED, _Size.BIG]) == [{"@enum": "_Colour.RED"}, {"@enum": "_Size.BIG"}]


def _rglob_digest(root):
    """The code digest as pathlib's rglob walked it (what code_digest() must still equal)."""
    digest = hashlib.sha256(f"pyinfra {settled.PYINFRA_VERSION}\n".encode())
    for top in settled.CODE:
        path = root / top
        files = sorted(p for p in ([path] if path.is_file() else path.rglob("*"))
                       if p.is_file() and "__pycache__" not in p.parts)
        for each in files:
            digest.update(f"{each.relative_to(root)}\n".encode())
            digest.update(hashlib.sha256(each.read_bytes()).digest())
    return digest.hexdigest()


def test_the_code_digest_is_the_checkouts_files_walked_without_pathlib(monkeypatch):
    """The digest of this checkout as pathlib's rglob walked it, made without rglob (a Path per entry: a third of
    the digest's time, every run)."""
    expected = _rglob_digest(settled.ROOT)

    def refused(*args, **kwargs):
        raise AssertionError("the code digest walked the tree with pathlib")

    monkeypatch.setattr(Path, "rglob", refused)
    assert settled.code_digest.__wrapped__(settled.ROOT) == expected


def test_the_code_digest_walks_as_rglob_did(tmp_path):
    """Order by path parts (a-b after a/), dotfiles, __pycache__ left out wherever it is, a link to a file read
    through, a linked folder and a dangling link left out."""
    (tmp_path / "deploy.py").write_text("deploy\n")
    for name in ("sglang_infra/a/b.py", "sglang_infra/a-b.py", "sglang_infra/a/.hidden", "sglang_infra/z.py",
                 "sglang_infra/__pycache__/x.pyc", "sglang_infra/a/__pycache__/y.pyc", "tasks/t.py",
                 "templates/x/y/z.j2", "group_data/all.py", "elsewhere/f.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    (tmp_path / "tasks" / "linked.py").symlink_to(tmp_path / "elsewhere" / "f.py")
    (tmp_path / "tasks" / "folder").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "tasks" / "dangling").symlink_to(tmp_path / "missing")
    first = settled.code_digest.__wrapped__(tmp_path)
    assert first == _rglob_digest(tmp_path)
    (tmp_path / "sglang_infra" / "a" / "__pycache__" / "y.pyc").write_text("changed")
    assert settled.code_digest.__wrapped__(tmp_path) == first
    (tmp_path / "elsewhere" / "f.py").write_text("changed")
    assert settled.code_digest.__wrapped__(tmp_path) != first
    assert settled.code_digest.__wrapped__(tmp_path) == _rglob_digest(tmp_path)


def test_the_rendered_compose_file_is_parsed_with_libyaml(monkeypatch):
    """The launch flags' check reads the server's command from the rendered compose.yaml on every run: PyYAML's
    pure-Python loader took 3.5 ms of it, libyaml's 0.3 ms; the same flags either way."""
    compose = plan_for(pinned_defaults()).compose
    expected = launch._command_flags.__wrapped__(compose)
    assert expected and "--tp-size=2" in expected
    slow = yaml.load(compose, Loader=yaml.SafeLoader)

    def refused(*args, **kwargs):
        raise AssertionError("parsed with PyYAML's pure-Python loader")

    monkeypatch.setattr(yaml.SafeLoader, "__init__", refused)
    monkeypatch.setattr(yaml, "safe_load", refused)
    assert launch._command_flags.__wrapped__(compose) == expected
    assert yaml.load(compose, Loader=yaml.CSafeLoader) == slow


def _clear_ship_caches():
    for cached in (getattr(ship, "_compressed_dir", None), ship.cached_program):
        if cached is not None:
            cached.cache_clear()


@pytest.fixture
def compressed_dir(tmp_path, monkeypatch):
    """ship's kept compressed programs in a folder of this test's: tmp/cache/sglang-infra/compressed."""
    folder = tmp_path / "cache" / "sglang-infra" / "compressed"
    monkeypatch.setattr(ship, "COMPRESSED_DIR", folder, raising=False)
    _clear_ship_caches()
    yield folder
    _clear_ship_caches()


def test_the_snapshots_command_is_compressed_once_and_kept(compressed_dir, monkeypatch):
    """Compressing the snapshot's 146 KB of sources at level 9 was 11 ms of every run: the next run reads it."""
    first = ship.cached_command("read.snapshot")
    ship.cached_program.cache_clear()

    def refused(*args, **kwargs):
        raise AssertionError("compressed again")

    monkeypatch.setattr(zlib, "compress", refused)
    assert ship.cached_command("read.snapshot") == first
    assert {entry.stat().st_mode & 0o777 for entry in compressed_dir.iterdir()} == {0o600}


@pytest.mark.parametrize("kept", [b"not zlib at all", zlib.compress(b"another program", 9), b"", "with more"])
def test_a_kept_entry_that_is_not_the_text_is_never_sent(compressed_dir, kept):
    """Whatever the folder holds, the host gets the program as bundled now: an entry that does not decompress to
    exactly its text (another text, a stream with more after it, garbage) is replaced."""
    text = b"print('the program as bundled now')\n" * 50
    ship.compressed(text)
    [entry] = compressed_dir.iterdir()
    entry.write_bytes(zlib.compress(text, 9) + b"more" if kept == "with more" else kept)
    assert zlib.decompress(ship.compressed(text)) == text
    assert entry.read_bytes() == zlib.compress(text, 9)


def test_a_folder_others_may_write_is_not_used(compressed_dir):
    compressed_dir.mkdir(parents=True)
    compressed_dir.chmod(0o777)
    text = b"x = 1\n" * 100
    assert zlib.decompress(ship.compressed(text)) == text
    assert list(compressed_dir.iterdir()) == []


def test_at_most_so_many_entries_are_kept(compressed_dir, monkeypatch):
    monkeypatch.setattr(ship, "KEPT_COMMANDS", 3)
    texts = [f"program {i}\n".encode() * 20 for i in range(5)]
    for i, text in enumerate(texts):
        ship.compressed(text)
        os.utime(compressed_dir / hashlib.sha256(text).hexdigest(), ns=(i * 10**9, i * 10**9))
    assert sorted(entry.name for entry in compressed_dir.iterdir()) == sorted(
        hashlib.sha256(text).hexdigest() for text in texts[-3:])


class _Sent(Exception):
    pass


def test_the_hold_starts_python_without_the_site_module(monkeypatch):
    """Every run waits for the hold before its read: its Python starts without the site module (-S, as the
    snapshot's), which imports no package of the host's."""
    import pyinfra.connectors.util as connector_util

    from sglang_infra.run import hold as run_hold

    def sent(state, host, command, **arguments):
        raise _Sent(command.get_raw_value())

    monkeypatch.setattr(connector_util, "make_unix_command_for_host", sent)
    monkeypatch.setattr(run_hold, "connector_arguments", lambda state, host: {})
    host = types.SimpleNamespace(name="gpu-01", connector=types.SimpleNamespace(client=object()))
    with pytest.raises(_Sent) as command:
        run_hold.take(types.SimpleNamespace(), host, 5)
    words = shlex.split(str(command.value))
    assert words[:4] == ["python3", "-I", "-S", "-c"] and words[5:] == ["take", "5"]


def test_the_hold_program_imports_no_socket_json_or_re_module():
    """socket's import (its enums converted) was 2 to 4 ms of the host's CPU, for gethostname() alone; json's (re,
    enum) and base64's (re) about 6 ms more, before every run's read (formats/jsonio.py, binascii)."""
    found = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", "-c", ship.packed("write.hold"), "show"],
                           capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in found.stderr.splitlines() if "|" in line}
    assert "_json" in imported and not {"socket", "_socket", "site", "json", "re", "enum", "base64"} & imported


def test_the_sent_sources_are_the_whole_sources_patterns_applied():
    """sent_source() blanks comments line by line where a '#' is: the same text as the two patterns applied to
    each whole module of hostside/."""
    names = [path.relative_to(ship.HOSTSIDE).with_suffix("").as_posix().replace("/", ".")
             for path in ship.HOSTSIDE.rglob("*.py") if "__pycache__" not in path.parts]
    assert len(names) > 40
    for name in names:
        whole = ship._source(name)
        assert ship.sent_source(name) == ship._TRAILING_COMMENT.sub("", ship._COMMENT_LINE.sub("", whole)), name


def test_each_sent_source_is_worked_out_once_per_process():
    """The snapshot's command, built once per run, and the fingerprint's programs ask for the same modules."""
    ship.sent_source.cache_clear()
    ship.sent_source("read.snapshot")
    ship.sent_source("read.snapshot")
    assert ship.sent_source.cache_info().hits == 1


def _connected_host(name, sock):
    transport = types.SimpleNamespace(sock=sock)
    client = types.SimpleNamespace(get_transport=lambda: transport)
    return types.SimpleNamespace(name=name, connector=types.SimpleNamespace(client=client))


def test_each_hosts_ssh_connection_sends_without_delay():
    """paramiko sets no socket option: Nagle's algorithm held each command's small packets up to 40 ms (one `true`
    over an open connection 48 ms, 2.8 ms without the wait)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        one = socket.create_connection(server.getsockname())
        two = socket.create_connection(server.getsockname())
        inventory = [_connected_host("gpu-01", one), _connected_host("gpu-02", two),
                     types.SimpleNamespace(name="local", connector=types.SimpleNamespace()),   # @local: no client
                     _connected_host("proxied", types.SimpleNamespace())]   # a proxy command: no socket of its own
        try:
            assert one.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
            workarounds.no_delay(inventory)
            assert one.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            assert two.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            one.close()
            two.close()


def test_deploy_sets_the_connections_before_the_preflight_reads_any_host():
    """The hold's and the snapshot's channels are the first a run opens: no_delay() comes before preflight()."""
    calls = [node.value.func for node in ast.parse((settled.ROOT / "deploy.py").read_text()).body
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)]
    named = [getattr(call, "attr", getattr(call, "id", None)) for call in calls]
    assert "no_delay" in named
    preflight_line = next(node.lineno for node in ast.walk(ast.parse((settled.ROOT / "deploy.py").read_text()))
                          if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "preflight")
    assert calls[named.index("no_delay")].lineno < preflight_line


def test_the_run_ends_without_a_last_collection_over_every_object():
    """When the run's process exits, what it loaded is frozen first (gc.freeze): Python's shutdown collections
    walked every object pyinfra, paramiko and gevent made, 55 to 90 ms of a no-op run. The exit handlers
    registered before it still run, after it; the exit status and the output are the process's own."""
    root = Path(__file__).resolve().parents[2]
    probe = """import atexit, gc, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
from sglang_infra.run import workarounds
workarounds.exit_without_collecting()
workarounds.exit_without_collecting()
print("frozen before exit:", gc.get_freeze_count() > 0, flush=True)
sys.exit(3)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 3, out.stderr
    assert out.stdout.splitlines() == ["frozen before exit: False", "frozen at exit: True"]
    deploy = (root / "deploy.py").read_text()
    assert "compat.exit_without_collecting()" in deploy
