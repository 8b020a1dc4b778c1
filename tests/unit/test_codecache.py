"""The snapshot's compiled-code cache (hostside/read/codecache.py): root's own entry, keyed by the sources' digest
(sent by the control side), is run on a hit, without the sources; an entry that is absent, stale, changed, another
program's, or not root's own 0600 file in root's own 0700 directory is never executed: the host answers MISSING and
is sent the sources on stdin (factcache.read), which are compiled (and kept, by root only) when their digest is the
key."""

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
ROWS = codecache.rows_of(MODULES)
SNAPSHOT = f"{ship.PACKAGE}.read.snapshot"
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


def name(modules) -> str:
    """The entry ``modules`` are kept under by this Python."""
    return codecache.entry_name(modules[-1][0], codecache.key(modules))


def value_of(codes) -> str:
    """VALUE as the first module of ``codes`` (or of load()'s (rows, codes)) sets it."""
    if isinstance(codes[0], tuple):
        assert codes[0] == ROWS
        codes = codes[1]
    found: dict = {}
    exec(codes[0], found)
    return found["VALUE"]


def entry(cache):
    return cache / name(MODULES)


def plant(cache, under=None):
    """A sound entry under MODULES' name whose code differs from MODULES' sources: running it shows a hit."""
    codecache.store(str(cache), under or name(MODULES), (ROWS, PLANTED))


def test_a_miss_compiles_and_keeps_a_root_only_entry(cache):
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    st = entry(cache).lstat()
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (0, "0o600")
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert value_of(codecache.load(str(cache), name(MODULES))) == "compiled"


def test_a_hit_runs_the_kept_code(cache):
    plant(cache)
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "from the cache"


def test_an_entry_changed_after_it_was_written_is_never_run(cache):
    plant(cache)
    raw = entry(cache).read_bytes()
    assert raw.count(b"from the cache") == 1
    entry(cache).write_bytes(raw.replace(b"from the cache", b"tampered cache"))   # still loads, runs elsewhere
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert value_of(codecache.load(str(cache), name(MODULES))) == "compiled"   # replaced by a sound one


def test_an_entry_of_other_sources_is_never_run_under_this_key(cache):
    plant(cache, name(OTHER))
    (cache / name(OTHER)).rename(entry(cache))   # its header still names OTHER's digest
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"


def test_sources_changed_since_the_entry_was_kept_are_compiled_and_the_stale_entry_removed(cache):
    plant(cache, name(OTHER))
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert sorted(os.listdir(cache)) == [name(MODULES)]


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
    assert codecache.load(str(cache), name(MODULES)) is None
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
    assert value_of(codecache.load(str(cache), name(MODULES))) == "compiled"


def test_an_entry_reached_through_a_link_is_never_run_and_is_replaced(cache, root_tree):
    plant(cache)
    elsewhere = root_tree / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    entry(cache).rename(elsewhere / "kept")
    entry(cache).symlink_to(elsewhere / "kept")
    assert codecache.load(str(cache), name(MODULES)) is None
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert not entry(cache).is_symlink()   # the link itself replaced; what it pointed at untouched
    assert value_of(codecache.load(str(cache), name(MODULES))) == "compiled"
    assert (elsewhere / "kept").exists()
    linked = root_tree / "linked"
    linked.symlink_to(elsewhere)
    (elsewhere / "kept").rename(elsewhere / name(MODULES))
    assert codecache.load(str(linked), name(MODULES)) is None


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
    assert codecache.load(str(cache), name(MODULES)) is None
    os.unlink(entry(cache))
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert os.listdir(cache) == []


def test_a_cache_below_a_link_is_never_read(root_tree):
    real = root_tree / "real"
    (real / "cache").mkdir(mode=0o700, parents=True)
    (root_tree / "via").symlink_to(real)
    plant(real / "cache")
    assert value_of(codecache.load(str(real / "cache"), name(MODULES))) == "from the cache"
    assert codecache.load(str(root_tree / "via" / "cache"), name(MODULES)) is None


def test_a_directory_someone_else_may_write_is_neither_read_nor_written(cache):
    os.chmod(cache, 0o777)
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert os.listdir(cache) == []


def test_only_root_keeps_entries(cache, monkeypatch):
    monkeypatch.setattr(codecache.os, "geteuid", lambda: 1000)
    assert value_of(codecache.codes_for(MODULES, str(cache))) == "compiled"
    assert os.listdir(cache) == []


def test_the_key_names_the_sources_and_the_entry_this_python(monkeypatch):
    assert codecache.key(MODULES) != codecache.key(OTHER)
    assert name(MODULES) != name(OTHER)
    sources_key, kept = codecache.key(MODULES), name(MODULES)
    monkeypatch.setattr(codecache.sys, "version", sys.version + " (another build)")
    assert (codecache.key(MODULES), name(MODULES) != kept) == (sources_key, True)


def run_snapshot(tmp_path, program: str, *flags: str, stdin: str = ""):
    spec = {"user": "nobody", "home": str(tmp_path / "home"), "tools_dir": str(tmp_path / "tools"), "admins": [],
            "groups": [], "uid": None, "gid": None, "dirs": []}
    # from a file: the plain bundle is past one argument's 128 KiB (the run sends the cached one, facts.py)
    path = tmp_path / "program.py"
    path.write_text(program)
    return subprocess.run([sys.executable, "-I", *flags, str(path), json.dumps(spec)], capture_output=True,
                          text=True, timeout=60, input=stdin)


def snapshot(tmp_path, program: str, *flags: str, stdin: str = "") -> dict:
    """The snapshot of an empty home, minus what the engine says (other runs change its images meanwhile)."""
    out = run_snapshot(tmp_path, program, *flags, stdin=stdin)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    return {key: value for key, value in found.items() if key not in ("docker", "stack", "routers")}


def test_the_snapshot_through_the_cache_reads_what_the_bundle_reads(tmp_path, cache):
    """A miss answers MISSING alone and keeps nothing; sent again with the sources on stdin, it reads what the whole
    bundle reads and keeps the entry; a hit reads the same with nothing on stdin."""
    cached, sources = ship.cached_program("read.snapshot", str(cache)), ship.cached_sources("read.snapshot")
    whole = snapshot(tmp_path, ship.packed("read.snapshot"))
    missed = run_snapshot(tmp_path, cached, "-S")
    assert (missed.returncode, missed.stdout, os.listdir(cache)) == (0, codecache.MISSING + "\n", [])
    assert ship.missed(missed.stdout.splitlines())
    assert snapshot(tmp_path, cached, "-S", stdin=sources + "\n") == whole   # the miss, its sources sent
    assert os.listdir(cache) == [codecache.entry_name(SNAPSHOT, ship.cached_key("read.snapshot"))]
    assert snapshot(tmp_path, cached, "-S") == whole   # a hit: nothing on stdin


def test_a_hit_never_reads_or_unpacks_the_sources(tmp_path, cache):
    """On a hit stdin is left alone (what is there is not even read: not sources, it would fail), and neither zlib
    nor base64 decodes anything but the runner: its work is the entry's."""
    cached, sources = ship.cached_program("read.snapshot", str(cache)), ship.cached_sources("read.snapshot")
    snapshot(tmp_path, cached, "-S", stdin=sources)
    assert snapshot(tmp_path, cached, "-S", stdin="not the sources at all") == snapshot(tmp_path, cached, "-S")
    traced = cached.replace("import binascii, zlib\n", "import binascii, zlib\n_decompress = zlib.decompress\n"
                            "def _counted(data, *a):\n    _counted.n += 1\n    return _decompress(data, *a)\n"
                            "_counted.n = 0\nzlib.decompress = _counted\nimport atexit\n"
                            "atexit.register(lambda: __import__('sys').stderr.write(f'decompressed {_counted.n}'))"
                            "\n", 1)
    assert traced != cached
    out = run_snapshot(tmp_path, traced, "-S")
    assert out.returncode == 0 and json.loads(out.stdout)
    assert out.stderr.endswith("decompressed 1")   # the runner's own text, and nothing else


def test_a_hit_checks_its_entry_without_hashing_it(tmp_path, cache):
    """The entry's payload is checked by its CRC-32 (zlib), not hashed with sha256 (hashlib's own, without OpenSSL,
    about 1 ms for the snapshot's 250 KB on Python 3.13): a hit of an empty home's read hashes a few hundred bytes
    (the entry's name), nothing of the entry."""
    cached, sources = ship.cached_program("read.snapshot", str(cache)), ship.cached_sources("read.snapshot")
    snapshot(tmp_path, cached, "-S", stdin=sources)
    counted = cached.replace("import binascii, zlib\n", "import binascii, zlib, hashlib, atexit\n_hashed = [0]\n"
                             "_sha256 = hashlib.sha256\n"
                             "def _counted(data=b'', **kw):\n    _hashed[0] += len(data)\n"
                             "    return _sha256(data, **kw)\n"
                             "hashlib.sha256 = _counted\n"
                             "atexit.register(lambda: __import__('sys').stderr.write(f'hashed {_hashed[0]}'))\n", 1)
    out = run_snapshot(tmp_path, counted, "-S")
    assert out.returncode == 0 and json.loads(out.stdout)
    assert 0 < int(out.stderr.rsplit("hashed ", 1)[1]) < 1024, out.stderr
    assert os.path.getsize(cache / os.listdir(cache)[0]) > 100 * 1024


def test_sources_that_are_not_those_of_the_key_are_refused(tmp_path, cache):
    """The key comes from the command, the sources from stdin: another program's sources (or any other text) are
    neither run nor kept under this program's key."""
    cached = ship.cached_program("read.snapshot", str(cache))
    for wrong in (ship.cached_sources("read.reach"), "bm90IHNvdXJjZXM="):
        out = run_snapshot(tmp_path, cached, "-S", stdin=wrong)
        assert out.returncode != 0 and out.stdout == "", out.stderr
        assert os.listdir(cache) == []


def test_another_programs_entry_put_under_this_name_is_never_run(tmp_path, cache):
    """A sound entry of another program (its header names its own name) moved to this program's name: refused, the
    host answers MISSING, then runs the sources it is sent and replaces the entry."""
    cached, sources = ship.cached_program("read.snapshot", str(cache)), ship.cached_sources("read.snapshot")
    mine = codecache.entry_name(SNAPSHOT, ship.cached_key("read.snapshot"))
    foreign = codecache.entry_name(SNAPSHOT, ship.cached_key("read.reach"))
    codecache.store(str(cache), foreign, ((("x.entry", "x"),), (compile("print('foreign ran')", "f", "exec"),)))
    (cache / foreign).rename(cache / mine)
    out = run_snapshot(tmp_path, cached, "-S")
    assert (out.returncode, out.stdout) == (0, codecache.MISSING + "\n")
    assert json.loads(run_snapshot(tmp_path, cached, "-S", stdin=sources).stdout)
    assert codecache.load(str(cache), mine)[0] == codecache.rows_of(ship._cached_modules("read.snapshot"))


def test_the_snapshot_fact_runs_through_roots_cache():
    from sglang_infra.run.facts import Snapshot

    command = Snapshot().command(spec="{}")
    assert f"exec python3 -I -S -c {shlex.quote(ship.cached_program('read.snapshot'))} " in command
    runner = ship.cached_program("read.snapshot").split('a2b_base64("', 1)[1].split('"', 1)[0]
    carried = zlib.decompress(binascii.a2b_base64(runner)).decode()
    # the runner up to its miss path, which travels on stdin on a miss only (its first line): together the module
    miss = zlib.decompress(binascii.a2b_base64(ship.cached_sources("read.snapshot").split("\n")[0])).decode()
    whole = ship.sent_source("read.codecache")
    assert carried == whole[:len(carried)] and miss == "\n" * carried.count("\n") + whole[len(carried):]
    assert "def load(" in carried and "def store(" not in carried and "def store(" in miss


def test_the_snapshot_command_leaves_room_in_one_argument():
    """pyinfra sends a fact's command as one argument of `sh -c`, quoted once more, and Linux takes at most 128 KiB
    in one argument (MAX_ARG_STRLEN): the bundle's own text, quoted twice, was 125 KiB of it, compressed 64 KiB; the
    command now carries the runner and the sources' key, not the sources (they go on stdin on a miss), so it stays
    a few KB however the programs grow, and the sources are not in it at all."""
    from sglang_infra.run.facts import Snapshot

    sent = "sh -c " + shlex.quote(Snapshot().command(spec=json.dumps({"home": "/opt/sglang"})))
    assert len(sent.encode()) <= 12 * 1024
    assert ship.cached_key("read.snapshot") in sent and ship.cached_sources("read.snapshot")[:200] not in sent
    assert len(ship.cached_sources("read.snapshot")) > 32 * 1024   # what the command no longer carries


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
    assert sorted(os.listdir(cache)) == sorted([name(MODULES), writing.name])


def bundled(modules, cache, lazy=()) -> tuple[str, str]:
    """A program as ship.cached_program builds one, of ``modules`` ((name, source), the entry last, all in pkg), and
    its sources as ship.cached_sources sends them."""
    rows = [[f"pkg.{name}", "pkg", f"hostside/{name}.py", source] for name, source in modules]
    blob = binascii.b2a_base64(zlib.compress("\0".join(sum(rows, [])).encode()), newline=False).decode()
    return (f"{ship.path_of('read.codecache').read_text()}\n"
            f"run([\"pkg\"], \"{codecache.key(rows)}\", {str(cache)!r}, {list(lazy)!r}, \"{rows[-1][0]}\")\n",
            "the miss path: this program carries the whole module\n" + blob)


def ran(bundle: tuple[str, str]) -> str:
    program, sources = bundle
    out = subprocess.run([sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, timeout=60,
                         input=sources)
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


def test_every_lazy_standard_module_works_when_a_program_uses_it(cache):
    """ship.LAZY's modules (re, socket, shutil, urllib.parse, contextlib since issue 56) run whole on first use,
    json's decoder importing a lazy re included, and a JSON error reaches the caller as json's."""
    entry = ("entry", "import contextlib, re, shutil, socket, sys, urllib.parse\n"
                      "from pkg import jsonio\n"
                      "print('_sre' in sys.modules, 'enum' in sys.modules)\n"
                      "try:\n    jsonio.loads('[1,')\nexcept ValueError as error:\n    print(type(error).__name__)\n"
                      "print(re.fullmatch(r'a+', 'aa') is not None, socket.AF_UNIX > 0, shutil.which('sh') is not None,"
                      " urllib.parse.quote(' /'), callable(contextlib.suppress), '_sre' in sys.modules)\n")
    jsonio_source = ship.path_of("formats.jsonio").read_text()
    assert ran(bundled([("jsonio", jsonio_source), entry], cache, lazy=ship.LAZY)) \
        == "False False\nJSONDecodeError\nTrue True True %20/ True True\n"


def test_the_snapshot_of_a_plain_host_loads_no_tls_xml_url_opener_json_re_or_socket(tmp_path):
    """What a read that needs none of them never imports: TLS (ssl), the XML of nvidia-smi, urllib.request's
    (through bounded.py and report.py), an HTTP library and its email package (dockerapi.py speaks HTTP/1.0 itself),
    the compressors shutil imports (bz2, lzma), subprocess with threading and locale (snapshot._run spawns its
    programs itself); python3 -X importtime lists every module a run loads."""
    spec = {"user": "nobody", "home": str(tmp_path / "home"), "tools_dir": str(tmp_path / "tools"), "admins": [],
            "groups": [], "uid": None, "gid": None, "dirs": []}
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "compose.yaml").write_bytes(b"services: {}\n" * 1000)
    (tmp_path / "home" / "docker").mkdir()
    (tmp_path / "home" / "docker" / "compose.yaml").write_text('    labels:\n      sglang.model: "org/m@0123abcd"\n')
    (tmp_path / "home" / "docker" / ".last-gate").write_text('{"container": {"started_at": "2026-12-06T16:00:00Z"}}')
    path = tmp_path / "program.py"
    path.write_text(ship.cached_program("read.snapshot"))
    out = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", str(path), json.dumps(spec)],
                         capture_output=True, text=True, timeout=60, input=ship.cached_sources("read.snapshot"))
    assert out.returncode == 0, out.stderr
    loaded = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    # hashlib's own sha256 (_sha2, _sha256 before Python 3.12), which it imports only without OpenSSL's (_hashlib:
    # libcrypto, ~3 ms a read): the same digest
    assert loaded & {"_sha2", "_sha256"}
    assert json.loads(out.stdout)["files"][str(tmp_path / "home")]["compose.yaml"]["sha256"] \
        == hashlib.sha256(b"services: {}\n" * 1000).hexdigest()
    assert not loaded & {"_ssl", "_elementtree", "pyexpat", "urllib.response", "http.client", "email.parser",
                         "_bz2", "_lzma", "_posixsubprocess", "threading", "locale"}
    # the compose files and the hub's dist-info found by listing their folder (snapshot._named), the venv's modules
    # by the path finder itself (issue 56: a read's imports are most of its CPU)
    assert not loaded & {"glob", "importlib.util"}
    # the JSON read and written with _json alone (formats/jsonio.py), no re (with enum and functools: json's decoder,
    # safefs's, names' and the compose files' patterns), no socket module (dockerapi and unitstate on _socket),
    # shutil (safefs.which), urllib.parse (dockerapi.urlencode) or contextlib (manifest.Held) run: ship.LAZY names
    # them, and what they import is what shows whether they ran (issue 56)
    assert "_json" in loaded
    assert not loaded & {"json", "json.decoder", "json.scanner", "_sre", "re._compiler", "enum", "functools",
                         "collections", "operator", "fnmatch", "selectors", "array", "copyreg", "keyword", "reprlib"}
    assert json.loads(out.stdout)["models"]["referenced"] == ["org/m@0123abcd"]


class RecordingHost:
    """A host whose get_fact runs the fact's command for real here (sh -c, stdin from _stdin as pyinfra's
    connectors write it: the text and a newline), recording what each call sent."""

    name = "cache-host"

    def __init__(self):
        self.sent: list[str | None] = []

    def get_fact(self, fact_cls, _stdin=None, **kwargs):
        self.sent.append(_stdin)
        out = subprocess.run(["sh", "-c", fact_cls().command(**kwargs)], capture_output=True, text=True,
                             timeout=60, input=f"{_stdin}\n" if _stdin else "")
        assert out.returncode == 0, out.stderr
        return fact_cls().process(out.stdout.splitlines())


def test_the_sources_travel_only_to_a_host_whose_cache_lacks_them(tmp_path, cache, monkeypatch):
    """factcache.read: the first read of a host sends the command alone; a host that answers MISSING is sent the same
    command again with the sources on stdin; the next read, a hit, sends the command alone, one command."""
    from sglang_infra.run import factcache
    from sglang_infra.run.facts import Snapshot

    monkeypatch.setattr(ship, "cached_command", lambda entry, directory=None, real=ship.cached_command:
                        real(entry, str(cache)).replace(ship.PYTHON, f"{sys.executable} -I", 1))
    spec = json.dumps({"user": "nobody", "home": str(tmp_path / "home"), "tools_dir": str(tmp_path / "tools"),
                       "admins": [], "groups": [], "uid": None, "gid": None, "dirs": []})
    host = RecordingHost()
    first = factcache.read(host, Snapshot, spec=spec)
    assert host.sent == [None, ship.cached_sources("read.snapshot")]
    again = factcache.read(host, Snapshot, spec=spec)
    assert host.sent[2:] == [None]
    assert {k: v for k, v in first.items() if k != "docker"} == {k: v for k, v in again.items() if k != "docker"}


def test_a_program_run_through_the_cache_by_an_operation_is_sent_its_sources_on_a_miss(cache, monkeypatch, tmp_path):
    """run_cached (the rollback's restore_good): a miss answered MISSING is run again with the sources on stdin, so
    the program runs (here it judges its argument); a hit takes one command."""
    from sglang_infra.run import operation

    monkeypatch.setattr(ship, "cached_command", lambda entry, directory=None, real=ship.cached_command:
                        real(entry, str(cache)).replace(ship.PYTHON, f"{sys.executable} -I", 1))
    sent = []

    class Host:
        current_op_global_arguments: dict = {}

        def run_shell_command(self, command, print_output=False, _stdin=None, **_):
            sent.append(_stdin)
            out = subprocess.run(["sh", "-c", str(command)], capture_output=True, text=True, timeout=60,
                                 input=f"{_stdin}\n" if _stdin else "")
            return out.returncode == 0, type("Output", (), {"stdout_lines": out.stdout.splitlines(),
                                                            "stderr_lines": out.stderr.splitlines()})()

    missing = str(tmp_path / "no-docker-dir")
    first = operation.run_cached(Host(), "roll.restore_good", missing, print_output=False)
    assert sent == [None, ship.cached_sources("roll.restore_good")]
    assert not ship.missed(first[1].stdout_lines) and first[1].stdout_lines + first[1].stderr_lines
    again = operation.run_cached(Host(), "roll.restore_good", missing, print_output=False)
    assert sent[2:] == [None] and (again[0], again[1].stdout_lines) == (first[0], first[1].stdout_lines)


def test_each_program_keeps_its_own_entry(cache):
    """The reach check's entry does not replace the snapshot's (a read after it would miss, and cost the host a
    second command); an older entry of the same program, and a name no program's entry has (the form before the
    program's name led it), go."""
    other_program = (("pkg.helper", "pkg", "hostside/helper.py", "VALUE = 'compiled'\n"),
                     ("pkg.other", "pkg", "hostside/other.py", ""))
    legacy = cache / ("0" * 64)
    legacy.write_bytes(b"an entry of the form before")
    plant(cache, name(OTHER))   # this program's, older sources
    codecache.codes_for(other_program, str(cache))
    assert sorted(os.listdir(cache)) == sorted([name(OTHER), name(other_program)])
    codecache.codes_for(MODULES, str(cache))
    assert sorted(os.listdir(cache)) == sorted([name(MODULES), name(other_program)])


@pytest.mark.parametrize("program", ["", "../etc/x", "a/b", ".hidden", "pkg entry", "pkg\nentry"])
def test_a_program_name_that_is_no_module_name_is_refused(program):
    with pytest.raises(SystemExit):
        codecache.entry_name(program, "0" * 64)
