"""Ships the host-side programs (sglang_infra/hostside/) to the hosts.

A program there may import its neighbours (`from . import safefs`), and a
program of a folder below (hostside/gate/, gpu/, pull/, read/, ...) those of
hostside/ too (`from .. import safefs`, `from ..write import acl`). On a
host there is no sglang_infra package, so `program()` bundles the entry
module with every neighbour it imports, transitively, into one
self-contained Python source: a few lines register the neighbours as
modules, then the entry runs as __main__. The same text is run with
`python3 -c` per command (command(): the snapshot), or written into a file
the host keeps (installed(): the gate and the validation scripts, the pull).
A module is named by its path below hostside/, dotted: `gate`,
`read.snapshot`, `pull.hfpull`.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import re
import shlex
import zlib
from functools import lru_cache
from pathlib import Path

HOSTSIDE = Path(__file__).resolve().parent.parent / "hostside"
# Every Python the deploy starts on a host runs isolated: -I keeps the current directory, the user's site
# directory and PYTHON* variables off the import path, so a module planted where it runs (results/, hf-cache/,
# a member's home) is never imported by root.
PYTHON = "python3 -I"
PACKAGE = "sglang_infra.hostside"
# The programs a host keeps as files (installed()): the validation scripts and the gate (checks, gate,
# gpu_kernel_check), the timers' metrics programs, the gateway's launcher, the toolchain image's check and the
# pull. Their text, and that of every module they carry, is part of what a converged host holds: a change of it
# re-gates a worker, recreates a gateway or rebuilds the toolchain image. Every other program runs inline per
# command (command()) and is never stored on a host.
INSTALLED = ("checks", "gate.gate", "gpu.gpu_kernel_check", "gate.gate_metrics", "gpu.gpu_metrics", "gateway_launch",
             "toolchain_check", "pull.hfpull")
# The installed programs whose text, or that of a module they carry, a converged host holds to more than a file:
# the validation scripts carry checks' (it was in every worker's gate stamp, a change re-gated every worker; the stamp
# now counts the scripts by their command lines, names.judged_text, so the top is kept as it is for now), the
# gateway's container runs gateway_launch's (a change recreates it), the toolchain image bakes toolchain_check's in
# (a change rebuilds it). A change of any other installed program rewrites its file and nothing more.
COSTLY = ("checks", "gateway_launch", "toolchain_check")

# The header still names ship.py's old place (sglang_infra/, before the packages): a program of hostside/ alone is
# kept byte for byte, since a changed header would change every converged host's gate scripts and re-gate them.
_BOOT = '''\
# {entry}.py from sglang_infra/hostside, bundled with {neighbours} by sglang_infra/ship.py.
import sys as _sys, types as _types
for _name in ("sglang_infra", "{package}"):
    _sys.modules.setdefault(_name, _types.ModuleType(_name)).__path__ = []
for _name, _source in {sources}:
    _module = _types.ModuleType("{package}." + _name)
    _module.__package__ = "{package}"
    _sys.modules[_module.__name__] = _module
    exec(compile(_source, "hostside/" + _name + ".py", "exec"), _module.__dict__)
    setattr(_sys.modules["{package}"], _name, _module)
_main = _types.ModuleType("__main__")
_main.__package__ = "{package}"
_sys.modules["__main__"] = _main
exec(compile({entry_source}, "hostside/{entry}.py", "exec"), _main.__dict__)
'''

# A program of a subpackage (hostside/pull/): each module is registered under its own package.
# Its first line names this loader by the path it had when the programs converged hosts hold were bundled
# (run/ship.py): the words are part of every such program's bytes, so they stay as shipped.
_NESTED_BOOT = '''\
# {entry_file} from sglang_infra/hostside, bundled with {neighbours} by sglang_infra/run/ship.py.
import sys as _sys, types as _types
for _name in {packages}:
    _sys.modules.setdefault(_name, _types.ModuleType(_name)).__path__ = []
for _name, _package, _path, _source in {sources}:
    _module = _types.ModuleType(_name)
    _module.__package__ = _package
    _sys.modules[_name] = _module
    exec(compile(_source, _path, "exec"), _module.__dict__)
    setattr(_sys.modules[_package], _name.rpartition(".")[2], _module)
_main = _types.ModuleType("__main__")
_main.__package__ = "{entry_package}"
_sys.modules["__main__"] = _main
exec(compile({entry_source}, "{entry_path}", "exec"), _main.__dict__)
'''


@lru_cache(maxsize=None)
def _source(name: str) -> str:
    return path_of(name).read_text(encoding="utf-8")


def path_of(name: str) -> Path:
    """hostside/<name>.py, the name dotted below hostside/ (`pull.hfpull` is hostside/pull/hfpull.py)."""
    return HOSTSIDE.joinpath(*name.split(".")).with_suffix(".py")


def programs() -> list[str]:
    """Every module below hostside/, by its dotted name, packages' __init__ left out."""
    return sorted(".".join(p.relative_to(HOSTSIDE).with_suffix("").parts) for p in HOSTSIDE.rglob("*.py")
                  if p.name != "__init__.py")


# A line that begins a relative import at a module's top, and the lines of its parenthesised names.
_RELATIVE_IMPORT = re.compile(r"^from \.[^\n(]*(?:\([^)]*\))?[^\n]*$", re.M)


def relative_imports(source: str) -> str:
    """The relative imports at the top level of ``source`` (a statement at column 0 beginning `from .`), as Python
    text: what _neighbours parses. Parsing only these lines, not the whole module, takes a few milliseconds from
    every run instead of about 40 (ast.parse of a program's 150 KB of modules; docs/benchmarks.md);
    tests/unit/test_ship.py holds it equal to the whole module's parse for every module of hostside/."""
    return "\n".join(_RELATIVE_IMPORT.findall(source))


@lru_cache(maxsize=None)
def _neighbours(name: str) -> list[str]:
    """Modules below hostside/ that hostside/<name>.py imports (`from . import a`, `from .a import b`,
    `from .. import c` and `from ..read import d` in a subpackage), by their dotted names."""
    package = name.split(".")[:-1]
    found = []
    for node in ast.parse(relative_imports(_source(name))).body:
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level - 1 > len(package):
                raise ValueError(f"hostside/{name}.py imports from outside hostside/")
            base = package[:len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            if node.module and not HOSTSIDE.joinpath(*base).is_dir():
                found.append(".".join(base))   # `from .a import b`: b is a name of the module a
            else:   # `from . import a`, `from ..read import a`: a is a module of that package
                found += [".".join(base + [alias.name]) for alias in node.names]
    return found


def _load_order(entry: str) -> list[str]:
    """Every neighbour ``entry`` needs, each after the ones it imports itself."""
    order: list[str] = []

    def visit(name: str, trail: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in trail:
            raise ValueError(f"hostside modules import each other in a cycle: {' -> '.join(trail + (name,))}")
        for neighbour in _neighbours(name):
            visit(neighbour, trail + (name,))
        order.append(name)

    visit(entry, ())
    return order[:-1]


def carried(entry: str) -> list[str]:
    """The hostside modules program(entry) carries besides hostside/<entry>.py: every one it imports, transitively,
    each after the ones it imports itself (none: the entry runs alone)."""
    return _load_order(entry)


@lru_cache(maxsize=None)
def program(entry: str) -> str:
    """The self-contained source of hostside/<entry>.py."""
    neighbours = carried(entry)
    if not neighbours:
        return _source(entry)
    if any("." in name for name in [entry, *neighbours]):
        return _nested(entry, neighbours)
    return _BOOT.format(
        entry=entry, package=PACKAGE, neighbours=", ".join(neighbours) or "nothing",
        sources=repr(tuple((name, _source(name)) for name in neighbours)),
        entry_source=repr(_source(entry)),
    )


def installed(entry: str) -> str:
    """program(entry) for a program a host keeps as a file, one of INSTALLED."""
    if entry not in INSTALLED:
        raise ValueError(f"hostside/{entry.replace('.', '/')}.py is not a program the hosts keep (ship.INSTALLED)")
    return program(entry)


def kept() -> set[str]:
    """Every module whose text the hosts keep: the installed programs and the modules they carry."""
    return {name for entry in INSTALLED for name in [entry, *carried(entry)]}


def costly() -> set[str]:
    """Every module a change of which re-gates a worker, recreates a gateway or rebuilds the toolchain image: the
    COSTLY programs and the modules they carry (hostside/'s top holds these and nothing else)."""
    return {name for entry in COSTLY for name in [entry, *carried(entry)]}


def _package(name: str) -> str:
    return ".".join([PACKAGE, *name.split(".")[:-1]])


def _path(name: str) -> str:
    return "hostside/" + name.replace(".", "/") + ".py"


def _packages(names: list[str]) -> list[str]:
    """Every package the modules ``names`` lie in, each after its parents."""
    packages = sorted({_package(name) for name in names})
    return sorted({".".join(p.split(".")[:k]) for p in packages for k in range(1, p.count(".") + 2)})


def _nested(entry: str, neighbours: list[str]) -> str:
    """program(entry) where a module lies in a subpackage of hostside/."""
    package, path = _package, _path
    packages = _packages([entry, *neighbours])
    return _NESTED_BOOT.format(
        entry_file=entry.replace(".", "/") + ".py", entry_path=path(entry), neighbours=", ".join(neighbours),
        packages=repr(tuple(packages)),
        sources=repr(tuple((f"{PACKAGE}.{name}", package(name), path(name), _source(name)) for name in neighbours)),
        entry_package=package(entry), entry_source=repr(_source(entry)),
    )


# The one line a program run per command travels in: program(entry) compressed, in base64, unpacked and run as
# __main__ (its name, stdin and arguments as before). Sent as text, the largest (roll.restore_good, a rollback
# path) was 118.6 KiB quoted, within 10 KiB of the 128 KiB Linux allows one argument (MAX_ARG_STRLEN, pyinfra's
# `sh -c` around it); compressed it is 44 KiB, and base64 holds no quote for the shell to escape.
# binascii's decoder, not base64's: base64 imports re (and with it enum), 6 ms of every such command's CPU before the
# program runs on a test host (the hold's among them, which every run waits for).
_PACKED = 'import binascii,zlib;exec(compile(zlib.decompress(binascii.a2b_base64("{blob}")),"{path}","exec"))'

# The programs' compressed text kept between runs, in the operator's own cache folder (machine/pycache.py's rules),
# by the sha256 of the text: compressing the snapshot's 146 KB of sources at level 9 was 11 ms of every run's CPU,
# 18 ms with the rest of its command. A kept entry is used only when it decompresses to exactly that text, so
# whatever the folder holds, a host runs the program as bundled now; at most KEPT_COMMANDS entries stay.
COMPRESSED_DIR: Path | None = None   # None: ~/.cache/sglang-infra/compressed ($XDG_CACHE_HOME when set)
KEPT_COMMANDS = 64


@lru_cache(maxsize=1)
def _compressed_dir() -> Path | None:
    # pycache.py, a leaf of machine/ beside this one, imported when first needed: ship.py stays the bottom of the
    # operations' import chain (tests/unit/test_tree_shape.py's depth)
    from .pycache import cache_home, own_dir

    folder = COMPRESSED_DIR or (cache_home() or Path("/nonexistent")) / "sglang-infra" / "compressed"
    return own_dir(folder)


def _kept_is(kept: bytes, text: bytes) -> bool:
    """Whether ``kept`` is one whole zlib stream of ``text`` and nothing more (read at most one byte past it)."""
    unpacker = zlib.decompressobj()
    try:
        found = unpacker.decompress(kept, len(text) + 1)
    except zlib.error:
        return False
    return found == text and unpacker.eof and not unpacker.unused_data and not unpacker.unconsumed_tail


def compressed(text: bytes) -> bytes:
    """zlib.compress(text, 9), read from the operator's cache when a run compressed the same text before."""
    folder = _compressed_dir()
    if folder is None:
        return zlib.compress(text, 9)
    path = folder / hashlib.sha256(text).hexdigest()
    try:
        with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NOFOLLOW)) as file:
            kept = file.read(len(text) + len(text) // 100 + 1024)   # zlib's output is never that much larger
        if _kept_is(kept, text):
            return kept
    except OSError:
        pass
    packed = zlib.compress(text, 9)
    try:
        _keep(folder, path, packed)
    except OSError:   # a full disk, a folder gone: compressed on every run, as before
        pass
    return packed


def _keep(folder: Path, path: Path, packed: bytes) -> None:
    """``packed`` written as ``path`` (a new file, renamed into place), then the oldest entries beyond
    KEPT_COMMANDS removed."""
    temporary = folder / f".{path.name}.{os.getpid()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(packed)
    os.replace(temporary, path)
    entries = sorted(os.scandir(folder), key=lambda entry: entry.stat(follow_symlinks=False).st_mtime_ns)
    for entry in entries[:max(0, len(entries) - KEPT_COMMANDS)]:
        os.unlink(entry.path)


@lru_cache(maxsize=None)
def packed(entry: str) -> str:
    """program(entry) as the one line -c runs (_PACKED): the same program, about a third of the bytes."""
    blob = base64.b64encode(compressed(program(entry).encode())).decode("ascii")
    return _PACKED.format(blob=blob, path=_path(entry))


def command(entry: str, site: bool = True) -> str:
    """The shell command that runs ``entry`` on a host: isolated (PYTHON), its bundled source, compressed
    (packed()), as -c's argument; without the site module (-S, as cached_command()) when ``site`` is False."""
    return f"{PYTHON}{'' if site else ' -S'} -c {shlex.quote(packed(entry))}"


CODECACHE = "read.codecache"
# The standard-library modules a program run through the code cache loads only when it first uses them
# (codecache.run): a read of a converged host imports them through modules it carries, never uses them, and they
# were a third of its imports' CPU (docs/benchmarks.md): TLS (the door's certificate, HTTPS), urllib.request (the
# gateways' and the reach checks'), the XML of `nvidia-smi -q -x`, addresses (the peer door's), and the compressors
# shutil imports for its archives (bz2, lzma: two C libraries loaded, about 1 ms, for shutil.which alone), and
# subprocess, which the gate's modules import and a read never uses (snapshot._run starts its programs itself);
# re (with enum, functools), socket (its enum conversions), shutil (fnmatch, re), urllib.parse and contextlib, which
# a plain host's read no longer uses (formats/jsonio.py, dockerapi.py and unitstate.py on _socket, safefs.which,
# dockerapi.urlencode, plain string checks for the patterns it ran: issue 56, docs/benchmarks.md).
LAZY = ("ssl", "urllib.request", "xml.etree.ElementTree", "ipaddress", "bz2", "lzma", "subprocess", "re", "socket",
        "shutil", "urllib.parse", "contextlib")


# A line that holds a comment alone, and a comment after code (with no quote in it): sent_source() blanks them.
_COMMENT_LINE = re.compile(r"^[ \t]*#[^\n]*$", re.M)
_TRAILING_COMMENT = re.compile(r"[ \t]+#[^\n\"']*$", re.M)


@lru_cache(maxsize=None)
def sent_source(name: str) -> str:
    """hostside/<name>.py as cached_program() sends it, its comments left out (each line kept, so a traceback's
    line numbers still match the file): the same program, and 7% fewer bytes in the command, which one argument of
    128 KiB must hold (tests/unit/test_ship.py holds each module's syntax tree equal to its file's). The patterns
    run on the lines that hold a '#' alone: the same text as over the whole source, a fifth of the time (the
    trailing comment's pattern tried every blank of every indented line, 3 ms of the snapshot's command a run)."""
    lines = _source(name).split("\n")
    for number, line in enumerate(lines):
        if "#" in line:
            lines[number] = _TRAILING_COMMENT.sub("", _COMMENT_LINE.sub("", line))
    return "\n".join(lines)


# The inline program's first line: hashlib's OpenSSL backend (_hashlib) is not loaded, so hashlib's own sha256 (the
# same digests) serves the read: loading libcrypto was about 3 ms of a read's CPU, and a read hashes only small files
# (safefs.MAX_HASHED_BYTES; the stamp's, the config's, the code cache's entry).
NO_OPENSSL = 'import sys\nsys.modules.setdefault("_hashlib", None)\n'


def _cached_modules(entry: str) -> list[list[str]]:
    """The modules cached_program(entry) runs, each [name, package, path, source], the entry last."""
    names = [*carried(entry), entry]
    return [[f"{PACKAGE}.{name}", _package(name), _path(name), sent_source(name)] for name in names]


@lru_cache(maxsize=None)
def cached_key(entry: str) -> str:
    """The digest of the sources cached_program(entry) runs (codecache.key): what a host keeps their code under."""
    # imported here, not at the top: the run's chain of imports stays 8 deep (test_tree_shape)
    from ..hostside.read import codecache
    return codecache.key(_cached_modules(entry))


def _runner() -> tuple[str, str]:
    """hostside/read/codecache.py as sent (sent_source), cut where its miss path begins (codecache._MISS_PATH): what
    every command carries, and what only a miss is sent (its lines kept where they are, for a traceback's numbers)."""
    text = sent_source(CODECACHE)
    cut = text.index("\n_MISS_PATH = ") + 1
    return text[:cut], "\n" * text[:cut].count("\n") + text[cut:]


@lru_cache(maxsize=None)
def cached_sources(entry: str) -> str:
    """What a host reads on its stdin when its code cache holds no entry for cached_key(entry) (codecache.received):
    two lines, the code cache's miss path (_runner), then the sources cached_program(entry) runs, each base64 of its
    zlib: the sources as each module's name, package, path and source, all joined by NUL (codecache.unpack)."""
    joined = "\0".join(sum(_cached_modules(entry), []))
    miss = base64.b64encode(compressed(_runner()[1].encode())).decode("ascii")
    return miss + "\n" + base64.b64encode(compressed(joined.encode())).decode("ascii")


@lru_cache(maxsize=None)
def cached_program(entry: str, directory: str | None = None) -> str:
    """The program that runs hostside/<entry>.py with its neighbours through hostside/read/codecache.py: the same
    modules as program(entry), compiled once per host and then read from root's own cache (``directory``,
    codecache.DIRECTORY when None), each run when first used, the LAZY modules loaded when first used. It carries
    the runner (compressed, in base64) and the sources' key, not the sources: a host whose cache holds no entry for
    the key answers codecache.MISSING, and is sent the same command again with cached_sources(entry) on its stdin
    (run/factcache.read). So the command is a few KB, whatever the programs grow to, where one argument of `sh -c`
    holds 128 KiB (Linux's MAX_ARG_STRLEN) and pyinfra quotes it twice."""
    names = [*carried(entry), entry]
    where = "DIRECTORY" if directory is None else json.dumps(directory)
    runner = base64.b64encode(compressed(_runner()[0].encode())).decode("ascii")
    return (f"{NO_OPENSSL}import binascii, zlib\nexec(compile(zlib.decompress(binascii.a2b_base64(\"{runner}\")), "
            f"\"{_path(CODECACHE)}\", \"exec\"))\n"
            f"run({json.dumps(_packages(names))}, \"{cached_key(entry)}\", {where}, {json.dumps(LAZY)}, "
            f"\"{PACKAGE}.{entry}\")\n")


def missed(lines) -> bool:
    """Whether a host answered cached_command's run with codecache.MISSING alone: its code cache holds no entry for
    the program's key, and the command must be sent again with cached_sources() on its stdin."""
    from ..hostside.read import codecache
    return [line.strip() for line in lines] == [codecache.MISSING]


def cached_command(entry: str, directory: str | None = None) -> str:
    """command(entry) through the compiled-code cache (cached_program), without the site module (-S): a program of
    the standard library needs no site-packages, and the .pth files there are not run on every read (2 to 3 ms)."""
    return f"{PYTHON} -S -c {shlex.quote(cached_program(entry, directory))}"
