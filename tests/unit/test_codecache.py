"""The snapshot's compiled-code cache (hostside/read/codecache.py): root's own entry, keyed by the sources' digest, is
run on a hit; an entry that is absent, stale, changed, or not root's own 0600 file in root's own 0700 directory is
never executed: the sources the command carries are compiled instead (and kept, by root only)."""

from __future__ import annotations

import binascii
import hashlib
import json
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest

from sglang_infra.hostside.read import codecache
from sglang_infra.machine import ship

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the cache is root's: the tests chown its entries")

MODULES = (("pkg.helper", "pkg", "hostside/helper.py", "VALUE = 'compiled'\n"),
           ("pkg.entry", "pkg", "hostside/entry.py", "from pkg.helper import VALUE\n"))
OTHER = (("pkg.helper", "pkg", "hostside/helper.py", "VALUE = 'older sources'\n"),
         MODULES[1])
PLANTED = (compile("VALUE = 'from the cache'\n", "hostside/helper.py", "exec"), compile("", "e", "exec"))


@pytest.fixture
def root_tree():
    """A folder of root's, 0700, below folders no group or other may write (root's home): pytest's tmp_path lies
    below /tmp, which everyone may write, and root keeps no code there."""
    kept = os.umask(0o022)   # root's own: a test before this one may have left the shared cache's 002
    top = Path(tempfile.mkdtemp(prefix="codecache-test-", dir=pwd.getpwuid(0).pw_dir))
    yield top
    shutil.rmtree(top, ignore_errors=True)
    os.umask(kept)


@pytest.fixture
def cache(root_tree):
    directory = root_tree / "cache"
    directory.mkdir(mode=0o700)
    return directory


def value_of(codes) -> str:
    found: dict = {}
    exec(codes[0], found)
    return found["VALUE"]


def entry(cache):
    return cache / codecache.key(MODULES)


def plant(cache, name=None):
    """A sound entry under MODULES' key whose code differs from MODULES' sources: running it shows a hit."""
    codecache.store(str(cache), name or codecache.key(MODULES), PLANTED)


def test_a_miss_compiles_and_keeps_a_root_only_entry(cache):
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    st = entry(cache).lstat()
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (0, "0o600")
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert value_of(codecache.load(str(cache), codecache.key(MODULES))) == "compiled"


def test_a_hit_runs_the_kept_code(cache):
    plant(cache)
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "from the cache"


def test_an_entry_changed_after_it_was_written_is_never_run(cache):
    plant(cache)
    raw = entry(cache).read_bytes()
    assert raw.count(b"from the cache") == 1
    entry(cache).write_bytes(raw.replace(b"from the cache", b"tampered cache"))   # still loads, runs elsewhere
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert value_of(codecache.load(str(cache), codecache.key(MODULES))) == "compiled"   # replaced by a sound one


def test_an_entry_of_other_sources_is_never_run_under_this_key(cache):
    plant(cache, codecache.key(OTHER))
    (cache / codecache.key(OTHER)).rename(entry(cache))   # its header still names OTHER's digest
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"


def test_sources_changed_since_the_entry_was_kept_are_compiled_and_the_stale_entry_removed(cache):
    plant(cache, codecache.key(OTHER))
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert sorted(os.listdir(cache)) == [codecache.key(MODULES)]


@pytest.mark.parametrize("change", [
    pytest.param(lambda cache: os.chown(entry(cache), 1000, -1), id="entry-not-roots"),
    pytest.param(lambda cache: os.chmod(entry(cache), 0o640), id="entry-readable-by-group"),
    pytest.param(lambda cache: os.chmod(entry(cache), 0o606), id="entry-writable-by-others"),
    pytest.param(lambda cache: os.chown(cache, 1000, -1), id="directory-not-roots"),
    pytest.param(lambda cache: os.chmod(cache, 0o770), id="directory-group-writable"),
    pytest.param(lambda cache: os.chmod(cache.parent, 0o777), id="parent-writable-by-others"),
])
def test_an_entry_not_kept_by_root_alone_is_never_run(cache, change):
    plant(cache)
    change(cache)
    assert codecache.load(str(cache), codecache.key(MODULES)) is None
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"


@pytest.mark.parametrize("change", [
    pytest.param(lambda cache: os.chown(entry(cache), 1000, -1), id="entry-not-roots"),
    pytest.param(lambda cache: os.chmod(entry(cache), 0o660), id="entry-writable-by-group"),
    pytest.param(lambda cache: os.chmod(entry(cache), 0o606), id="entry-writable-by-others"),
])
def test_an_entry_not_roots_alone_is_replaced_by_a_sound_one(cache, change):
    plant(cache)
    change(cache)
    codecache.codes_for(MODULES, str(cache))
    st = entry(cache).lstat()
    assert (st.st_uid, stat.S_ISREG(st.st_mode), oct(st.st_mode & 0o777)) == (0, True, "0o600")
    assert value_of(codecache.load(str(cache), codecache.key(MODULES))) == "compiled"


def test_an_entry_reached_through_a_link_is_never_run_and_is_replaced(cache, root_tree):
    plant(cache)
    elsewhere = root_tree / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    entry(cache).rename(elsewhere / "kept")
    entry(cache).symlink_to(elsewhere / "kept")
    assert codecache.load(str(cache), codecache.key(MODULES)) is None
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert not entry(cache).is_symlink()   # the link itself replaced; what it pointed at untouched
    assert value_of(codecache.load(str(cache), codecache.key(MODULES))) == "compiled"
    assert (elsewhere / "kept").exists()
    linked = root_tree / "linked"
    linked.symlink_to(elsewhere)
    (elsewhere / "kept").rename(elsewhere / codecache.key(MODULES))
    assert codecache.load(str(linked), codecache.key(MODULES)) is None


@pytest.mark.parametrize("change", [
    pytest.param(lambda top: os.chmod(top, 0o770), id="group-writable"),
    pytest.param(lambda top: os.chmod(top, 0o1777), id="writable-by-all-sticky"),
    pytest.param(lambda top: os.chown(top, 1000, -1), id="not-roots"),
])
def test_a_cache_below_a_folder_someone_else_may_write_is_neither_read_nor_written(root_tree, change):
    """Every folder above the cache, not only its parent: whoever may write one of them may rename what is below
    it and put a tree of their own in its place."""
    cache = root_tree / "middle" / "cache"
    cache.mkdir(mode=0o700, parents=True)
    (root_tree / "middle").chmod(0o755)
    plant(cache)
    change(root_tree)
    assert codecache.load(str(cache), codecache.key(MODULES)) is None
    os.unlink(entry(cache))
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert os.listdir(cache) == []


def test_a_cache_below_a_link_is_never_read(root_tree):
    real = root_tree / "real"
    (real / "cache").mkdir(mode=0o700, parents=True)
    (root_tree / "via").symlink_to(real)
    plant(real / "cache")
    assert value_of(codecache.load(str(real / "cache"), codecache.key(MODULES))) == "from the cache"
    assert codecache.load(str(root_tree / "via" / "cache"), codecache.key(MODULES)) is None


def test_a_directory_someone_else_may_write_is_neither_read_nor_written(cache):
    os.chmod(cache, 0o777)
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert os.listdir(cache) == []


def test_only_root_keeps_entries(cache, monkeypatch):
    monkeypatch.setattr(codecache.os, "geteuid", lambda: 1000)
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert os.listdir(cache) == []


def test_the_key_names_the_sources_and_this_python(monkeypatch):
    assert codecache.key(MODULES) != codecache.key(OTHER)
    kept = codecache.key(MODULES)
    monkeypatch.setattr(codecache.sys, "version", sys.version + " (another build)")
    assert codecache.key(MODULES) != kept


def snapshot(tmp_path, program: str, *flags: str) -> dict:
    """The snapshot of an empty home, minus what the engine says (other runs change its images meanwhile)."""
    spec = {"user": "nobody", "home": str(tmp_path / "home"), "tools_dir": str(tmp_path / "tools"), "admins": [],
            "groups": [], "uid": None, "gid": None, "dirs": []}
    # from a file: the plain bundle is past one argument's 128 KiB (the run sends the cached one, facts.py)
    path = tmp_path / "program.py"
    path.write_text(program)
    out = subprocess.run([sys.executable, "-I", *flags, str(path), json.dumps(spec)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    return {key: value for key, value in found.items() if key not in ("docker", "stack", "routers")}


def test_the_snapshot_through_the_cache_reads_what_the_bundle_reads(tmp_path, cache):
    cached = ship.cached_program("read.snapshot", str(cache))
    assert snapshot(tmp_path, cached, "-S") == snapshot(tmp_path, ship.packed("read.snapshot"))   # a miss
    assert len(os.listdir(cache)) == 1
    assert snapshot(tmp_path, cached, "-S") == snapshot(tmp_path, ship.packed("read.snapshot"))   # a hit


def test_the_snapshot_fact_runs_through_roots_cache():
    from sglang_infra.run.facts import Snapshot

    command = Snapshot().command(spec="{}")
    assert f"exec python3 -I -S -c {shlex.quote(ship.cached_program('read.snapshot'))} " in command
    runner = ship.cached_program("read.snapshot").split('a2b_base64("', 1)[1].split('"', 1)[0]
    assert zlib.decompress(binascii.a2b_base64(runner)).decode() == ship.sent_source("read.codecache")


def test_the_snapshot_command_leaves_room_in_one_argument():
    """pyinfra sends a fact's command as one argument of `sh -c`, quoted once more, and Linux takes at most 128 KiB
    in one argument (MAX_ARG_STRLEN): the bundle's own text, quoted twice, was 125 KiB of it; compressed, the
    command keeps at least half of it free for the host programs to grow."""
    from sglang_infra.run.facts import Snapshot

    sent = "sh -c " + shlex.quote(Snapshot().command(spec=json.dumps({"home": "/opt/sglang"})))
    assert len(sent.encode()) <= 64 * 1024


def test_the_snapshot_runs_without_site_packages(tmp_path):
    """The cached command starts python3 without the site module: no site-packages on the path, no .pth run."""
    probe = ship.cached_command("read.snapshot").replace(ship.PYTHON, sys.executable, 1).split(" -c ")[0]
    found = subprocess.run([*probe.split(), "-c", "import sys; print(any('-packages' in p for p in sys.path))"],
                           capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == "False"


def test_a_candidate_left_by_a_killed_read_goes_and_one_being_written_stays(cache):
    left, writing = cache / ".left-by-a-killed-read.123", cache / ".being-written.456"
    for candidate in (left, writing):
        candidate.write_bytes(b"partial")
    os.utime(left, (0, 0))
    codecache.codes_for(MODULES, str(cache))
    assert sorted(os.listdir(cache)) == sorted([codecache.key(MODULES), writing.name])


def bundled(modules, cache, lazy=()) -> str:
    """A program as ship.cached_program builds one, of ``modules`` ((name, source), the entry last, all in pkg)."""
    rows = [[f"pkg.{name}", "pkg", f"hostside/{name}.py", source] for name, source in modules]
    blob = binascii.b2a_base64(zlib.compress("\0".join(sum(rows, [])).encode()), newline=False).decode()
    return f"{ship.path_of('read.codecache').read_text()}\nrun([\"pkg\"], \"{blob}\", {str(cache)!r}, {list(lazy)!r})\n"


def ran(program: str) -> str:
    out = subprocess.run([sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


NOISY = ("noisy", "print('noisy ran')\nVALUE = 'noisy value'\n")


def test_a_carried_module_runs_only_when_the_program_uses_it(cache):
    assert ran(bundled([NOISY, ("entry", "from pkg import noisy\nprint('entry ran')\n")], cache)) == "entry ran\n"
    assert ran(bundled([NOISY, ("entry", "from pkg import noisy\nprint('entry ran', noisy.VALUE)\n")], cache)) \
        == "noisy ran\nentry ran noisy value\n"
    assert ran(bundled([NOISY, ("entry", "from pkg.noisy import VALUE\nprint(VALUE)\n")], cache)) \
        == "noisy ran\nnoisy value\n"


def test_a_lazy_standard_module_loads_when_first_used(cache):
    entry = ("entry", "import sys, ssl\nprint('_ssl' in sys.modules)\nssl.PROTOCOL_TLS_CLIENT\n"
                      "print('_ssl' in sys.modules)\n")
    assert ran(bundled([entry], cache, lazy=["ssl"])) == "False\nTrue\n"
    assert ran(bundled([entry], cache)) == "True\nTrue\n"


def test_a_lazy_standard_module_imported_by_two_modules_still_waits_for_its_first_use(cache):
    """The gate's stamp.py and report.py both import subprocess, which a read never uses: the second import (which
    reads the module's __spec__) must not run it, as importlib.util.LazyLoader's modules do."""
    first = ("first", "import ssl\nVALUE = 1\n")
    entry = ("entry", "import sys\nfrom pkg import first\nfirst.VALUE\nimport ssl\nprint('_ssl' in sys.modules)\n"
                      "print(ssl.PROTOCOL_TLS_CLIENT.name, '_ssl' in sys.modules)\n")
    assert ran(bundled([first, entry], cache, lazy=["ssl"])) == "False\nPROTOCOL_TLS_CLIENT True\n"


def test_threads_that_first_use_a_lazy_standard_module_at_once_each_get_it_whole(cache):
    """reach.py's threads use urllib.request at once: none may see it half run (a name missing, or one defined
    before the names it needs), so the others wait while the first runs it."""
    entry = ("entry", "import threading, urllib.request\nout = []\n"
                      "def use():\n    out.append(callable(urllib.request.build_opener) and urllib.request.Request('http://x')"
                      ".full_url)\n"
                      "threads = [threading.Thread(target=use) for _ in range(16)]\n"
                      "[t.start() for t in threads]\n[t.join() for t in threads]\nprint(out.count('http://x'))\n")
    for _ in range(5):
        assert ran(bundled([entry], cache, lazy=["urllib.request"])) == "16\n"


def test_a_lazy_name_that_is_not_a_source_module_loads_as_usual(cache):
    entry = ("entry", "import sys, _json\nprint(type(sys.modules['_json']).__name__, _json.__name__)\n")
    assert ran(bundled([entry], cache, lazy=["_json"])) == "module _json\n"


def test_the_snapshot_of_a_plain_host_loads_no_tls_xml_or_url_opener(tmp_path):
    """What a read that needs none of them never imports: TLS (ssl), the XML of nvidia-smi, urllib.request's
    (through bounded.py and report.py), an HTTP library and its email package (dockerapi.py speaks HTTP/1.0 itself),
    the compressors shutil imports (bz2, lzma), subprocess with threading and locale (snapshot._run spawns its
    programs itself); python3 -X importtime lists every module a run loads."""
    spec = {"user": "nobody", "home": str(tmp_path / "home"), "tools_dir": str(tmp_path / "tools"), "admins": [],
            "groups": [], "uid": None, "gid": None, "dirs": []}
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "compose.yaml").write_bytes(b"services: {}\n" * 1000)
    path = tmp_path / "program.py"
    path.write_text(ship.cached_program("read.snapshot"))
    out = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", str(path), json.dumps(spec)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "json" in loaded
    # hashlib's own sha256 (_sha2, _sha256 before Python 3.12), which it imports only without OpenSSL's (_hashlib:
    # libcrypto, ~3 ms a read): the same digest
    assert loaded & {"_sha2", "_sha256"}
    assert json.loads(out.stdout)["files"][str(tmp_path / "home")]["compose.yaml"]["sha256"] \
        == hashlib.sha256(b"services: {}\n" * 1000).hexdigest()
    assert not loaded & {"_ssl", "_elementtree", "pyexpat", "urllib.response", "http.client", "email.parser",
                         "_bz2", "_lzma", "_posixsubprocess", "threading", "locale"}
