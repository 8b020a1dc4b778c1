"""Runs a bundled host program (run/ship.py) from the compiled code root keeps for it, keyed by the digest of its
sources: the snapshot is read on every run of every host, and compiling its bundle again each time was about a
tenth of the host CPU of one read (docs/benchmarks.md).

The command carries this module and the key of the sources (key(), worked out by the control side), not the
sources: run() runs the code kept under the key (and this Python, entry_name()) in DIRECTORY when that entry is
there and sound. When it is not, run() reads the sources from stdin, where the control side sends them only then:
on the first read of a command with no stdin, run() prints MISSING alone and exits 0, and the control side sends the
same command again with the sources on stdin (run/factcache.py; ship.cached_sources). Sources whose digest is not
the key are refused. They are compiled, run, and kept (by root only) for the next read. So the command stays a few
KB whatever the programs grow to (one argument of `sh -c` holds 128 KiB, pyinfra quotes it twice), and a read
that finds its entry neither decompresses nor hashes the sources.

An entry is used only when all of these hold, else it is ignored (and replaced on a miss): the directory belongs to
root, is 0700 and no link, below folders (from /) only root writes, none a link; the entry is a regular file of
root, 0600, no link, within LIMIT; its header names the entry's name (the digest of the sources and of this Python:
the marshal format changes with Python), and the CRC-32 of its payload, which the payload matches. So an entry for
other sources (stale, or another program's) or one changed after it was written (truncated, edited) is never
executed. Writing the entry changes nothing the deploy reads or reports: the snapshot does not look in DIRECTORY.
This text travels compressed, in base64 (ship.cached_program); the sources on a miss travel as unpack() reads them.

A bundled module runs when the program first uses one of its names, not at the start (_Deferred), and the
standard-library modules the command names (ship.LAZY) load when first used too (_LazyFinder): a
read of a converged host never uses the HTTP helpers of the gateways (bounded.py, urllib.request), TLS (ssl), the
XML of nvidia-smi or the checks of the door, and importing them was about half of its imports (docs/benchmarks.md).
"""
import _thread
import binascii
import hashlib
import importlib.machinery
import marshal
import os
import stat
import sys
import time
import types
import zlib

DIRECTORY = "/var/cache/sglang-infra"
LIMIT = 16 << 20   # bytes: the compiled snapshot is a few hundred KB
MAGIC = b"sglang-infra code cache 3\n"   # 2: the payload holds the modules' names with their code; 3: its CRC-32
# The payload's check is a CRC-32 (zlib's, 0.06 ms for the snapshot's 250 KB), not a sha256 (hashlib's own, without
# OpenSSL: about 1 ms on the test hosts' Python 3.13): it guards against an entry damaged or cut short by accident;
# against a hand, neither would, since whoever may write the entry may write its header too, and only root may
# (the directory's and the entry's checks above are what keep everyone else out).
# What run() prints, alone, when root keeps no sound entry for the key and no sources came on stdin: the control
# side then sends the same command again, the sources on its stdin (run/factcache.read).
MISSING = "sglang-infra code cache: no entry for this program's key; send its sources on stdin"
OWNER = 0
PATH = "hostside/read/codecache.py"   # as ship.cached_program names this text when it compiles it
CANDIDATE_SECONDS = 600   # a read writes its entry in well under a second


def entry_name(program, sources_key):
    """The name the code of ``program`` (its entry module's dotted name) from the sources of ``sources_key`` is kept
    under by this Python (its marshal format and bytecode change with the version): the program's name, a dash,
    a sha256. Each program keeps its own entry (the snapshot's is not replaced by the reach check's)."""
    if not program or program.startswith(".") or not all(c.isascii() and (c.isalnum() or c in "._") for c in program):
        raise SystemExit(f"sglang-infra code cache: {program!r} is not a program's name")
    return program + "-" + hashlib.sha256(f"{sys.version}\0{sources_key}".encode()).hexdigest()


def _root_only(st, kind):
    return kind(st.st_mode) and st.st_uid == OWNER and not st.st_mode & 0o077


def _open_directory(directory, create):
    """A descriptor of ``directory`` when it is a 0700 directory of root and every folder above it, from /, is a
    directory of root that no group or other may write, none of them a link (each opened through the one above
    it, O_NOFOLLOW, so nothing can be swapped in between); ``directory`` made so when ``create`` and absent. Else
    None: under a folder someone else may write, a rename there could put the code of anyone in the path root runs."""
    parts = [part for part in directory.split("/") if part]
    if not directory.startswith("/") or not parts or "." in parts or ".." in parts:
        return None
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open("/", flags)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != OWNER or st.st_mode & 0o022:
                return None
            below = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = below
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != OWNER or st.st_mode & 0o022:
            return None
        if create:
            try:
                os.mkdir(parts[-1], 0o700, dir_fd=fd)
            except FileExistsError:
                pass
        found = os.open(parts[-1], flags, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if _root_only(os.fstat(found), stat.S_ISDIR):
        return found
    os.close(found)
    return None


def load(directory, name):
    """What is kept under ``name`` in ``directory``: (the modules' (name, package) rows, their code objects), or None
    (absent, or not sound: see above)."""
    fd = _open_directory(directory, create=False)
    if fd is None:
        return None
    try:
        entry = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        os.close(fd)
        return None
    try:
        st = os.fstat(entry)
        if not _root_only(st, stat.S_ISREG) or st.st_size > LIMIT:
            return None
        with os.fdopen(entry, "rb", closefd=False) as f:
            raw = f.read(LIMIT + 1)
    finally:
        os.close(entry)
        os.close(fd)
    head = MAGIC + name.encode() + b"\n"
    if not raw.startswith(head) or len(raw) < len(head) + 9:
        return None
    check, payload = raw[len(head):len(head) + 8], raw[len(head) + 9:]
    if raw[len(head) + 8:len(head) + 9] != b"\n" or b"%08x" % zlib.crc32(payload) != check:
        return None
    try:
        kept = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    if not isinstance(kept, tuple) or len(kept) != 2 or not all(isinstance(part, tuple) for part in kept):
        return None
    rows, codes = kept
    if not codes or len(rows) != len(codes) or not all(isinstance(code, types.CodeType) for code in codes) or \
            not all(isinstance(row, tuple) and len(row) == 2 and all(isinstance(s, str) for s in row) for row in rows):
        return None
    return rows, codes


class _Deferred(types.ModuleType):
    """A bundled module whose code runs when the program first asks it for a name it does not hold yet (a
    function, a class, a constant): ``from .. import bounded`` alone runs nothing, ``bounded.open_url`` runs
    bounded.py first. The import system reads only what every module holds (__spec__, __path__ of a package)."""

    def __getattr__(self, attribute):
        code = _PENDING.pop(self.__name__, None)
        if code is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attribute!r}")
        self.__class__ = types.ModuleType
        exec(code, self.__dict__)
        return getattr(self, attribute)


_PENDING: dict = {}   # a deferred module's name: its code, until it runs


class _LazyStandard(types.ModuleType):
    """A standard-library module not yet run: it runs when first asked for a name (not a __dunder__: a second
    `import` reads only __spec__, which ran importlib.util.LazyLoader's). Threads that ask while it runs wait for
    it (reach.py's do at once); the lock is _thread's, LazyLoader's imports threading."""

    def __getattribute__(self, attribute):
        if attribute.startswith("__"):
            return object.__getattribute__(self, attribute)
        with _LAZY_LOCK:
            loader = _PENDING_LOADERS.pop(object.__getattribute__(self, "__name__"), None)
            if loader is not None:
                self.__spec__.loader = self.__loader__ = loader
                loader.exec_module(self)
                self.__class__ = types.ModuleType
        return object.__getattribute__(self, attribute)


_LAZY_LOCK = _thread.RLock()
_PENDING_LOADERS: dict = {}   # a lazy standard module's name: its own loader, until it runs


class _LazyLoader:
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return _LazyStandard(spec.name)

    def exec_module(self, module):
        _PENDING_LOADERS[module.__name__] = self.loader


class _LazyFinder:
    """Finds each standard-library module of ``names`` where Python would, and runs it when first used."""

    def __init__(self, names):
        self.names = frozenset(names)

    def find_spec(self, name, path=None, target=None):
        if name not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        spec.loader = _LazyLoader(spec.loader)
        return spec


def sent_sources():
    """What came on stdin, at most LIMIT bytes, as text; "" when nothing did (a closed or empty stdin, a terminal)."""
    try:
        if os.isatty(0):
            return ""
        chunks, size = [], 0
        while size <= LIMIT:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return ""
    if size > LIMIT:
        raise SystemExit(f"sglang-infra code cache: the sources on stdin are over {LIMIT} bytes")
    return b"".join(chunks).decode().strip()


def received():
    """The modules sent on stdin on a miss, or None when nothing came. ship.cached_sources sends two lines: this
    module's miss path (below _MISS_PATH, compressed, in base64), run into this module's namespace when the runner
    came without it, then the sources (unpack())."""
    text = sent_sources()
    if not text:
        return None
    miss, _, blob = text.partition("\n")
    if "codes_for" not in globals():
        exec(compile(zlib.decompress(binascii.a2b_base64(miss)).decode(), PATH, "exec"), globals())
    return unpack(blob)


def run(packages, sources_key, directory, lazy, program):
    """Run ``program`` (its entry module's dotted name), the bundle whose sources have the digest ``sources_key``
    (key()): from root's entry when sound, else from the sources on stdin (MISSING printed alone when none came).
    Each of ``packages`` registered empty, then each module (the entry last, run as __main__) registered, run when
    first used (_Deferred), as the bundle of run/ship.py runs them in order; the standard-library modules ``lazy``
    load when first used."""
    name = entry_name(program, sources_key)
    kept = load(directory, name)
    if kept is None:
        modules = received()
        if modules is None:
            print(MISSING)
            return
        if key(modules) != sources_key or modules[-1][0] != program:
            raise SystemExit("sglang-infra code cache: the sources on stdin are not those of the command's key")
        kept = rows_of(modules), codes_for(modules, directory)
    rows, codes = kept
    if lazy:
        sys.meta_path.insert(0, _LazyFinder(lazy))
    for package in packages:
        sys.modules.setdefault(package, types.ModuleType(package)).__path__ = []
    for (name, package), code in zip(rows[:-1], codes):
        module = _Deferred(name)
        module.__package__ = package
        _PENDING[name] = code
        sys.modules[name] = module
        setattr(sys.modules[package], name.rpartition(".")[2], module)
    main = types.ModuleType("__main__")
    main.__package__ = rows[-1][1]
    sys.modules["__main__"] = main
    exec(codes[-1], main.__dict__)



# The miss path: what the command does not carry (ship.cached_program cuts this module here), sent on stdin
# with the sources only to a host whose cache lacks them (ship.cached_sources), and run there into the runner's
# own namespace (received()): a hit compiles a third less of the runner's text (about 0.8 ms on Python 3.13).
_MISS_PATH = "the code below travels on stdin, on a miss"


def key(modules):
    """The sha256 of ``modules`` (each (name, package, path, source), the entry last): the control side works it out
    and sends it (ship.cached_program); a host works it out only for sources it was sent (run())."""
    digest = hashlib.sha256()
    for module in modules:
        for part in module:
            digest.update(len(part.encode()).to_bytes(8, "big") + part.encode())
    return digest.hexdigest()


def _program_of(name):
    """The program an entry's ``name`` (entry_name()) is of, or None for any other name."""
    program, dash, digest = name.rpartition("-")
    if not dash or len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        return None
    try:
        return program if entry_name(program, "") else None
    except SystemExit:
        return None


def _writing(name, fd):
    """Whether ``name`` is a candidate another read may be writing now: made within CANDIDATE_SECONDS (an older
    one was left by a read that was killed, and goes with the stale entries)."""
    try:
        made = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mtime
    except OSError:
        return True
    return name.startswith(".") and time.time() - made < CANDIDATE_SECONDS


def store(directory, name, kept):
    """Keep ``kept`` ((rows, codes), as load() returns it) under ``name`` (root only; any other entry of the same
    program there removed, and anything that is no program's entry). Never fails the program."""
    if os.geteuid() != OWNER:
        return
    fd = _open_directory(directory, create=True)
    if fd is None:
        return
    try:
        payload = marshal.dumps(kept)
        raw = MAGIC + name.encode() + b"\n" + b"%08x" % zlib.crc32(payload) + b"\n" + payload
        candidate = f".{name}.{os.getpid()}"
        entry = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
        try:
            os.fchmod(entry, 0o600)
            with os.fdopen(entry, "wb", closefd=False) as f:
                f.write(raw)
        finally:
            os.close(entry)
        os.rename(candidate, name, src_dir_fd=fd, dst_dir_fd=fd)
        program = _program_of(name)
        for other in os.listdir(fd):
            if other == name or _writing(other, fd):
                continue
            if _program_of(other) in (program, None):
                os.unlink(other, dir_fd=fd)
    except (OSError, ValueError):
        pass
    finally:
        os.close(fd)


def rows_of(modules):
    return tuple((name, package) for name, package, _, _ in modules)


def codes_for(modules, directory=DIRECTORY):
    """The code objects of ``modules`` (sources a host was sent): from the cache when sound, else compiled (and
    kept)."""
    name = entry_name(modules[-1][0], key(modules))
    kept = load(directory, name)
    if kept is None or kept[0] != rows_of(modules):
        kept = rows_of(modules), tuple(compile(source, path, "exec") for _, _, path, source in modules)
        store(directory, name, kept)
    return kept[1]


def unpack(blob):
    """The modules of ``blob``: base64 of the zlib of each one's name, package, path and source, all joined by NUL
    (no source holds one; plain text compresses better than JSON's escaped, ship.cached_program)."""
    fields = zlib.decompress(binascii.a2b_base64(blob)).decode().split("\0")
    return [fields[at:at + 4] for at in range(0, len(fields), 4)]
