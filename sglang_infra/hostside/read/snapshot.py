"""The one read of a host: everything the deploy compares against, as one JSON
document on stdout, in one remote command. Read-only; never follows a symlink
under the home; paths travel as JSON strings, so no file name can break the
document apart.

    python3 snapshot.py '{"user": "sglang", "home": "/opt/sglang", "tools_dir": ..., "admins": [...],
                          "groups": ["docker"], "uid": null, "gid": null}'

Sections: os, account, docker (engine, images, runtimes), gpus (nvidia-smi's
own output, parsed on the control side), layout (the managed directories and
the drifted entries below the home), files (owner, mode and sha256 of the
files the deploy writes, the home's and root's system_dirs), models (cachestate.py), tools (the pull's venv),
stack (stack.py), gate (stamp.py), services and packages (the fleet
metrics' and the peer door's systemd units and Debian packages), routers: each
gateway in router/<slug>/ (its stack, stamp and the worker set in its
workers.json), settled (settled.py: the stamp of the last run that found the host as
its plan wants it), and, with "peer_address" in the spec, peer: the peer door's
address resolved and whether it is the host's, and with "door" in the spec (its port, config and certificate)
who holds that address and port (doorcheck.py, as the run's door check reads it); with "report": true in the
spec also report (report.py), what scripts/status.sh shows beyond the deploy's needs.
"""

import grp
import hashlib
import importlib.machinery
import io
import ipaddress
import os
import pwd
import re
import select
import socket
import stat
import sys
import time

from .. import dockerapi, names, safefs, stack
from ..formats import jsonio
from ..gate import report, stamp
from ..gpu import nvsmi
from ..pull import manifest
from ..write import acl
from . import cachestate, doorcheck, openpgp, settled, unitstate

# Where the docker CLI finds its plugins, after the user's own ~/.docker/cli-plugins (root's: the deploy's commands
# run as root): docker/cli's cli-plugins/manager defaultSystemPluginDirs.
COMPOSE_PLUGIN_DIRS = ("/usr/libexec/docker/cli-plugins", "/usr/lib/docker/cli-plugins",
                       "/usr/local/lib/docker/cli-plugins", "/usr/local/libexec/docker/cli-plugins")
# The engine's configuration, where `nvidia-ctk runtime configure` writes the nvidia runtime.
DAEMON_JSON = "/etc/docker/daemon.json"
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64el", "s390x": "s390x"}
COMMAND_TIMEOUT = 30  # seconds, for nvidia-smi and systemctl
MAX_DETAILS = 1000    # drifted entries whose owner and mode travel along (for --diff)
MAX_LINKED = 100      # hard-linked entries named (the rest counted): enough to find the planter's pattern
PROTECTED_HARDLINKS = "/proc/sys/fs/protected_hardlinks"


SIGKILL = 9  # Linux's (the signal module's enums cost ~1 ms to import)
MAX_OUTPUT = 16 << 20  # bytes a program's answer may hold (nvidia-smi -q -x of 8 GPUs is well under 1 MB)


def _run(*argv):
    """What ``argv`` (found on PATH) prints on stdout, whatever its exit status, decoded as subprocess.run(text=True)
    decodes; "" when it cannot start, prints over MAX_OUTPUT or runs past COMMAND_TIMEOUT (killed). Its stderr is
    dropped. Not the subprocess module: its imports were a tenth of a read's own CPU (docs/benchmarks.md)."""
    return _output(_start(*argv))


def _start(*argv):
    """``argv`` started as _run() runs it: (its pid, the read end of its stdout), or None when it cannot start.
    Several started before the first is read run at once (gpus(): each nvidia-smi initialises the driver's
    library on its own)."""
    try:
        out, into = os.pipe()
    except OSError:
        return None
    try:
        return os.posix_spawnp(argv[0], argv, os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, into, 1), (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)]), out
    except OSError:
        os.close(out)
        return None
    finally:
        os.close(into)


def _output(started):
    """What the program _start() started prints (see _run()), COMMAND_TIMEOUT counted from now: a program started
    with others waits on a full pipe until its turn to be read."""
    if started is None:
        return ""
    pid, out = started
    try:
        deadline, received, size, ended = time.monotonic() + COMMAND_TIMEOUT, [], 0, False
        poller = select.poll()
        poller.register(out, select.POLLIN)
        while not ended and size <= MAX_OUTPUT and time.monotonic() < deadline:
            if poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                chunk = os.read(out, 1 << 16)
                received.append(chunk)
                size, ended = size + len(chunk), not chunk
        while ended and size <= MAX_OUTPUT and time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0]:
                text = b"".join(received).decode(io.TextIOWrapper(io.BytesIO()).encoding)
                return text.replace("\r\n", "\n").replace("\r", "\n")
            time.sleep(0.001)
        os.kill(pid, SIGKILL)
        os.waitpid(pid, 0)
        return ""
    finally:
        os.close(out)


def _os_release():
    values = {}
    raw = safefs.read_regular("/etc/os-release", 65536) or safefs.read_regular("/usr/lib/os-release", 65536) or b""
    for line in raw.decode(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return {"id": values.get("ID"), "version": values.get("VERSION_ID"),
            "arch": DEBIAN_ARCH.get(os.uname().machine, os.uname().machine)}


def _user(name):
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return {"name": entry.pw_name, "uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir,
            "shell": entry.pw_shell}


def _group(name):
    try:
        entry = grp.getgrnam(name)
    except KeyError:
        return None
    return {"name": entry.gr_name, "gid": entry.gr_gid, "members": list(entry.gr_mem)}


def _password_locked(name):
    raw = safefs.read_regular("/etc/shadow", 1 << 22)
    if raw is None:
        return None
    for line in raw.decode(errors="replace").splitlines():
        fields = line.split(":")
        if fields[0] == name and len(fields) > 1:
            return fields[1][:1] in ("!", "*")
    return None


def account(spec):
    name = spec["user"]
    user = _user(name)
    supplementary = []
    if user:
        supplementary = [g.gr_name for g in grp.getgrall() if name in g.gr_mem or g.gr_gid == user["gid"]]
    out = {
        "user": user,
        "group": _group(name),
        "supplementary": supplementary,
        "password_locked": _password_locked(name) if user else None,
        "extra_groups": {g: _group(g) for g in spec.get("groups", ()) if _group(g)},
        "admins_present": [a for a in spec.get("admins", ()) if _user(a)],
        "uid_owner": None,
        "gid_owner": None,
    }
    if spec.get("uid") is not None:
        try:
            out["uid_owner"] = pwd.getpwuid(spec["uid"]).pw_name
        except KeyError:
            pass
    if spec.get("gid") is not None:
        try:
            out["gid_owner"] = grp.getgrgid(spec["gid"]).gr_name
        except KeyError:
            pass
    return out


DOCKER_UNIT = "docker.service"


def plugin_dirs():
    """Every folder the docker CLI run by root takes plugins from, in its order: root's own ~/.docker/cli-plugins
    first, then the system's."""
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return COMPOSE_PLUGIN_DIRS
    return (os.path.join(home, ".docker", "cli-plugins"), *COMPOSE_PLUGIN_DIRS)


def configured_runtimes():
    """The runtimes daemon.json names (sorted), read when the engine does not answer: a stopped engine starts with
    them."""
    return sorted(_named_runtimes(safefs.read_regular(DAEMON_JSON, 1 << 20)) or ())


def _named_runtimes(raw):
    """The runtime names in daemon.json's text ``raw`` (an empty set when it names none or is absent), or None
    when it cannot be read as the engine would."""
    try:
        found = jsonio.loads(raw).get("runtimes", {}) if raw else {}
    except (ValueError, AttributeError):
        return None
    return {name for name in found if isinstance(name, str)} if isinstance(found, dict) else None


# The engine's runtimes, kept between reads (GET /info makes dockerd and containerd probe every runtime: about
# 6 ms of a host's CPU and 10 ms of the read's time, on every run; docs/benchmarks.md). Kept in root's own code
# cache directory (read/codecache.py's DIRECTORY), used only while it is root's and 0700, reached without a link below
# any folder another user may write (safefs.open_dir), the entry root's own 0600 regular file; for as long as
# everything they follow from is unchanged: the running dockerd (its PID file's process, its start time and whole
# command line) and daemon.json's inode, size, modification and change times. And kept only when the engine's
# answer is what that daemon.json makes (every runtime it names, nothing beyond dockerd's own built-in ones), so an
# edit the engine has not loaded yet is never kept: reloading (SIGHUP) that same unchanged file gives the same
# runtimes, and any edit, restart or other command line asks the engine again.
ENGINE_PIDFILE = "/var/run/docker.pid"
PROC = "/proc"
CACHE_DIRECTORY = "/var/cache/sglang-infra"
KEPT_RUNTIMES = "engine-runtimes"
KEPT_MAGIC = b"sglang-infra engine runtimes 1\n"
BUILT_IN_RUNTIMES = frozenset({"runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux"})
MAX_KEPT = 4096   # bytes: a few runtime names


def _engine_key():
    """(the digest of what the engine's runtimes follow from, daemon.json's stat) or None when they cannot be kept:
    no PID file, its process not dockerd, a command line naming another config file or runtimes of its own."""
    raw = safefs.read_regular(ENGINE_PIDFILE, 32)
    if not raw or not raw.strip().isdigit():
        return None
    pid = int(raw)
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            status = f.read(4096)
        with open(f"{PROC}/{pid}/cmdline", "rb") as f:
            command = f.read(MAX_KEPT * 16 + 1)
    except OSError:
        return None
    head, _, tail = status.rpartition(b")")
    fields = tail.split()
    if not head.endswith(b" (dockerd") or len(fields) < 20 or len(command) > MAX_KEPT * 16 or \
            b"--config-file" in command or b"--add-runtime" in command:
        return None
    try:
        st = os.stat(DAEMON_JSON)
        config = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except FileNotFoundError:
        config = None
    except OSError:
        return None
    # field 22 of /proc/PID/stat, the process's start time (fields[0] is field 3)
    return hashlib.sha256(repr((pid, fields[19], command, config)).encode()).hexdigest(), config


def _cache_dir():
    """A descriptor of root's code cache directory when it is sound (root's, 0700), else None."""
    try:
        fd = safefs.open_dir(CACHE_DIRECTORY)
    except (OSError, safefs.Refused):
        return None
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o077 and os.geteuid() == 0:
        return fd
    os.close(fd)
    return None


def _kept_runtimes(fd, key):
    """The runtimes kept under ``key``, or None (none kept, another key, or an entry not root's own 0600 file)."""
    found = safefs.read_regular_with_stat(KEPT_RUNTIMES, MAX_KEPT, fd)
    if found is None or found[1].st_uid != 0 or found[1].st_mode & 0o077:
        return None
    lines = found[0].split(b"\n")
    if found[0][:len(KEPT_MAGIC)] != KEPT_MAGIC or len(lines) < 3 or lines[1] != key.encode() or lines[-1]:
        return None
    names = lines[2:-1]
    if not all(name and name.isascii() and name.decode().isprintable() and b" " not in name for name in names):
        return None
    return sorted(name.decode() for name in names)


def _keep_runtimes(fd, key, runtimes):
    """Keep ``runtimes`` under ``key`` (root's 0600 file, written anew and renamed over); a failure keeps nothing."""
    if not all(name and name.isascii() and name.isprintable() and " " not in name for name in runtimes):
        return
    tmp = f".{KEPT_RUNTIMES}.{os.getpid()}"
    data = KEPT_MAGIC + key.encode() + b"\n" + b"".join(name.encode() + b"\n" for name in runtimes)
    try:
        safefs.rename_own(fd, tmp, KEPT_RUNTIMES, safefs.create_new(fd, tmp, data, 0o600))
    except (OSError, safefs.Refused):
        try:
            os.unlink(tmp, dir_fd=fd)
        except OSError:
            pass


def engine_runtimes():
    """The engine's runtimes (sorted): kept ones while their key holds (above), else GET /info's (and kept when the
    engine runs daemon.json as it is)."""
    key = _engine_key()
    fd = _cache_dir() if key else None
    try:
        if fd is not None:
            kept = _kept_runtimes(fd, key[0])
            if kept is not None:
                return kept
        found = dockerapi.runtimes()
        if fd is not None:
            raw = safefs.read_regular(DAEMON_JSON, 1 << 20)
            named = _named_runtimes(raw)
            again = _engine_key()
            if named is not None and again == key and named <= set(found) and \
                    set(found) - named <= BUILT_IN_RUNTIMES and (raw is None) == (key[1] is None):
                _keep_runtimes(fd, key[0], found)
        return found
    finally:
        if fd is not None:
            os.close(fd)


def docker(unit):
    """The engine: its CLI, socket, compose plugin, API, images and runtimes; ``unit`` is docker.service's state
    as services() read it (read() asks systemctl once for it and the spec's units). ``loaded``: systemd knows the
    unit (not masked), so a stopped engine can be started; an engine that does not answer reports the runtimes
    its daemon.json names."""
    out = {
        "cli": safefs.which("docker"),
        "socket": stat.S_ISSOCK(os.stat(dockerapi.SOCKET).st_mode) if os.path.exists(dockerapi.SOCKET) else False,
        "compose_plugin": next((f"{d}/docker-compose" for d in plugin_dirs()
                                if os.access(f"{d}/docker-compose", os.X_OK)), None),
        "active": (unit or {}).get("active") or None,
        "enabled": (unit or {}).get("enabled") or None,
        "loaded": bool((unit or {}).get("loaded")),
        "api": False, "images": {}, "runtimes": [],
    }
    if out["socket"]:
        try:
            out["images"] = dockerapi.images()
            out["runtimes"] = engine_runtimes()
            out["api"] = True
        except dockerapi.Unavailable:
            pass
    if not out["api"]:
        out["runtimes"] = configured_runtimes()
    return out


def _is_dir(path):
    """True when ``path`` is a directory itself (not a link to one)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def services(units):
    """Each systemd unit's state: loaded, active, enabled, and whether systemd must re-read it (a drop-in
    changed); asked of PID 1 on its private socket (unitstate.py), else in one systemctl call for all."""
    out = {}
    if not units:
        return out
    asked = unitstate.states(units, COMMAND_TIMEOUT)   # PID 1 itself, when root: no process, five properties
    for found in (asked or {}).values():
        if found["Id"] in units:
            out[found["Id"]] = {"loaded": found["LoadState"] == "loaded", "active": found["ActiveState"],
                                "enabled": found["UnitFileState"], "reload_needed": found["NeedDaemonReload"] is True}
    if asked is not None:
        return out
    raw = _run("systemctl", "show", *units, "-p", "Id", "-p", "LoadState", "-p", "ActiveState",
               "-p", "UnitFileState", "-p", "NeedDaemonReload")
    for block in raw.split("\n\n"):
        found = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if found.get("Id") in units:
            out[found["Id"]] = {"loaded": found.get("LoadState") == "loaded", "active": found.get("ActiveState"),
                                "enabled": found.get("UnitFileState"),
                                "reload_needed": found.get("NeedDaemonReload") == "yes"}
    return out


DPKG_ADMINDIR = "/var/lib/dpkg"
DPKG_STATUS_LIMIT = 64 << 20   # bytes: a server's status file is a few MB


def dpkg_status(wanted, admindir=None):
    """{name: version or None} of ``wanted`` read from dpkg's status file as dpkg-query reads it: installed means
    wanted "install" and "installed" (its db:Status-Abbrev "ii"). None when dpkg-query must answer instead: a
    journal in updates/ (a dpkg run cut short, which dpkg-query would apply first), a database moved by DPKG_ADMINDIR
    or DPKG_ROOT, no status file or one over DPKG_STATUS_LIMIT. Reading it saves starting dpkg-query, which parses
    every package's entry: 0.005 s of a test host's CPU per read, more with a server's thousands of packages."""
    admindir = admindir or DPKG_ADMINDIR
    if os.environ.get("DPKG_ADMINDIR") or os.environ.get("DPKG_ROOT"):
        return None
    try:
        if any(name.isdigit() for name in os.listdir(os.path.join(admindir, "updates"))):
            return None
    except OSError:
        return None
    raw = safefs.read_regular(os.path.join(admindir, "status"), DPKG_STATUS_LIMIT + 1)
    if raw is None or len(raw) > DPKG_STATUS_LIMIT:
        return None
    raw = b"\n" + raw
    out = {}
    for name in wanted:
        out[name], at = None, 0
        while (at := raw.find(f"\nPackage: {name}\n".encode(), at)) >= 0:
            end = raw.find(b"\n\n", at + 1)
            fields = {}
            for line in raw[at + 1:end if end >= 0 else len(raw)].decode(errors="replace").split("\n"):
                key, sep, value = line.partition(":")
                if sep and not line[:1].isspace():
                    fields[key] = value.strip()
            status = fields.get("Status", "").split()
            if len(status) == 3 and status[0] == "install" and status[2] == "installed":
                out[name] = fields.get("Version")
            at += 1
    return out


def packages(wanted):
    """The installed version of each of ``wanted`` (Debian packages), None when it is not installed: from dpkg's
    status file (dpkg_status), else as dpkg-query prints it."""
    out = {name: None for name in wanted}
    if wanted and safefs.which("dpkg-query"):
        found = dpkg_status(wanted)
        if found is not None:
            return found
        for line in _run("dpkg-query", "-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Version}\n",
                         *wanted).splitlines():
            name, _, rest = line.partition("\t")
            status, _, version = rest.partition("\t")
            if name in out and status.startswith("ii"):
                out[name] = version.strip()
    return out


def gpus():
    """nvidia-smi's query and topology as printed; the driver's facts (nvsmi.parse of `nvidia-smi -q -x`: driver,
    the CUDA it supports, each GPU's persistence mode and fabric state); the NVSwitch devices the driver found;
    the Fabric Manager's version (its binary's own word) and the units that keep the driver ready."""
    if not safefs.which("nvidia-smi"):
        return None
    # started at once: each nvidia-smi initialises the driver's library alone, about 0.17 s one after the other
    # and 0.11 s together on an H100 host (docs/benchmarks.md)
    started = [_start("nvidia-smi", "--query-gpu=index,name,compute_cap,memory.total", "--format=csv,noheader,nounits"),
               _start("nvidia-smi", "-q", "-x"), _start("nvidia-smi", "topo", "-m")]
    query, described, topo = (_output(each) for each in started)
    try:
        driver = nvsmi.parse(described)
    except ValueError as error:
        driver = {"error": str(error)}
    manager = _run("nv-fabricmanager", "--version") if safefs.which("nv-fabricmanager") else ""
    version = re.findall(r"\d+\.\d+(?:\.\d+)?", manager)
    return {"query": query.splitlines(), "topo": topo.splitlines(), "driver": driver,
            "nvswitches": nvsmi.nvswitches(), "fabric_manager": version[-1] if version else None,
            "units": services(list(nvsmi.DRIVER_UNITS))}


def _names(st, users={}, groups={}):
    if st.st_uid not in users:
        try:
            users[st.st_uid] = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            users[st.st_uid] = str(st.st_uid)
    if st.st_gid not in groups:
        try:
            groups[st.st_gid] = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            groups[st.st_gid] = str(st.st_gid)
    return users[st.st_uid], groups[st.st_gid]


LAYOUT_ENTRIES = 2_000_000   # entries below the home one read walks
LAYOUT_SECONDS = 120


def _walk(top, budget):
    """(path, lstat) of everything below ``top``, never following a symlink (safefs.walk), within ``budget``."""
    try:
        fd = safefs.open_dir(top)
    except OSError as error:
        budget.stopped = str(error)
        return
    try:
        yield from safefs.walk(fd, top, budget)
    finally:
        os.close(fd)


def layout(spec):
    """The managed directories, and every entry below the home that drifted, by category."""
    home, user, group = spec["home"], spec["user"], spec["user"]
    cache, docker_dir, results = (os.path.join(home, d)
                                  for d in (names.HF_CACHE_DIR, names.DOCKER_DIR, names.RESULTS_DIR))
    dirs = {}
    for path in spec.get("dirs", ()):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            owner, owner_group = _names(st)
            dirs[path] = {"owner": owner, "group": owner_group, "mode": format(stat.S_IMODE(st.st_mode), "o")}
    drift, details, unnamed, linked = {}, {}, [], []
    if not (_user(user) and _group(group) and os.path.isdir(home) and not os.path.islink(home)):
        return {"dirs": dirs, "drift": drift, "details": details, "unnamed": 0}

    def add(category, path, st=None):
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            # A name that is not UTF-8 cannot travel in a command; it is counted and left for a person.
            unnamed.append(category)
            return
        drift.setdefault(category, []).append(path)
        if st is not None and len(details) < MAX_DETAILS:
            owner_, group_ = _names(st)
            details[path] = [owner_, group_, format(stat.S_IMODE(st.st_mode), "o")]

    try:
        if os.lstat(home).st_mode & 0o002:
            add("world_writable", home)
    except OSError:
        pass
    budget = safefs.Budget(LAYOUT_ENTRIES, LAYOUT_SECONDS)
    for path, st in _walk(home, budget):
        owner, owner_group = _names(st)
        link, directory = stat.S_ISLNK(st.st_mode), stat.S_ISDIR(st.st_mode)
        mode = stat.S_IMODE(st.st_mode)
        in_cache = path.startswith(cache + "/")
        wrong = []
        if in_cache:
            if owner_group != group:
                wrong.append("cache_group")
            if not link and not directory and mode & 0o060 != 0o060:
                wrong.append("cache_file_mode")
            if directory and mode & 0o2070 != 0o2070:
                wrong.append("cache_dir_mode")
        elif not (path == cache or path == results or path.startswith(results + "/")):
            if owner != user or owner_group != group:
                wrong.append("owner")
        if not link and mode & 0o002:
            wrong.append("world_writable")
        if path.startswith(docker_dir + "/") and not link and mode & 0o020:
            wrong.append("docker_group_writable")
        if wrong and not (link or directory) and st.st_nlink > 1:
            # The deploy and the pull never hard-link a file (huggingface_hub's cache links with symlinks): a
            # second name may be a file from elsewhere linked in, whose owner and mode no repair may change.
            linked.append(path)
            continue
        for category in wrong:
            add(category, path, st)
    for paths in drift.values():
        paths.sort()
    stopped = budget.stopped and f"the walk of {home} stopped early: {budget.stopped}; drift past that point is " \
                                 "not repaired by this run"
    linked.sort()
    return {"dirs": dirs, "drift": drift, "details": details, "unnamed": len(unnamed), "stopped_early": stopped,
            "linked": linked[:MAX_LINKED], "linked_more": max(0, len(linked) - MAX_LINKED)}


def kernel(protected_hardlinks=PROTECTED_HARDLINKS):
    """The kernel settings the deploy relies on, as their text (None when unreadable): fs.protected_hardlinks,
    which lets a user hard-link only a file they own (or may read and write), so that no member can link a
    file of root's or the account's into the group-writable cache."""
    try:
        with open(protected_hardlinks, encoding="ascii") as f:
            value = f.read(16).strip()
    except (OSError, ValueError):
        value = None
    return {"protected_hardlinks": value}


def _nowhere(address):
    """True for a loopback address or the wildcard (0.0.0.0, ::): a socket binds to them on any host, so binding
    says nothing of the fleet's network; the control side refuses them as the door's (peerdoor.address_problem)."""
    try:
        ip = ipaddress.ip_address(address.partition("%")[0])
    except ValueError:
        return False
    ip = getattr(ip, "ipv4_mapped", None) or ip
    return ip.is_loopback or ip.is_unspecified


def peer_address(wanted):
    """The peer door's address: ``wanted`` (an IP address, or a name this host resolves) as an IP address, and
    whether it is one of this host's (a socket binds to it). A name resolving to several gives the first of them
    that is neither loopback nor the wildcard (Debian's /etc/hosts gives the host's own name 127.0.1.1 first),
    else the first, which the control side then refuses. Nothing listens."""
    try:
        infos = socket.getaddrinfo(wanted, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return {"address": None, "local": False}
    infos.sort(key=lambda info: _nowhere(info[4][0]))  # stable: the resolver's order otherwise
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((sockaddr[0], 0))
        except OSError:
            continue
        return {"address": sockaddr[0], "local": True}
    return {"address": infos[0][4][0] if infos else None, "local": False}


def peer(spec):
    """peer_address() of the spec's "peer_address", and with "door" in the spec (its port, config and certificate)
    who holds that address and port, as the run's door check reads it (doorcheck.py)."""
    found = peer_address(spec["peer_address"])
    door = spec.get("door")
    if door and found["local"]:
        found["door"] = doorcheck.checked(found["address"], door["port"], door["config"], door["cert"])
    if door and door.get("key"):
        found["tls_pair"] = doorcheck.pair_matches(door["cert"], door["key"])
    return found


def files(directory):
    """Owner, group, mode and sha256 of each regular file directly in ``directory``; False for anything else."""
    out = {}
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return out
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            owner, group = _names(st)
            out[entry.name] = {"owner": owner, "group": group, "mode": format(stat.S_IMODE(st.st_mode), "o"),
                               "sha256": safefs.sha256_regular(entry.path)}
        else:
            out[entry.name] = False
    return out


def labelled(text, labels=(names.MODEL_LABEL, names.DRAFTER_LABEL)):
    """The values of ``labels`` in a compose file's text, as
    re.findall(r'^\\s*(?:LABEL|LABEL):\\s*"?([^"\\s]+)"?\\s*$', text, re.M) finds them (a value may follow its label on
    the next line, as the pattern's blanks take newlines), without importing re (a read's CPU, docs/benchmarks.md;
    tests/unit/test_read_imports.py holds the two equal)."""
    found, at, size = [], 0, len(text)
    while at <= size:   # at: where a line starts; each turn moves it on
        i = at
        while i < size and text[i].isspace():
            i += 1
        end = None
        label = next((label for label in labels if text.startswith(label + ":", i)), None)
        if label is not None:
            j = i + len(label) + 1
            while j < size and text[j].isspace():
                j += 1
            j += j < size and text[j] == '"'
            k = j
            while k < size and text[k] != '"' and not text[k].isspace():
                k += 1
            if k > j:
                value, k = text[j:k], k + (k < size and text[k] == '"')
                m = k
                while m < size and text[m].isspace():
                    m += 1
                end = size if m == size else text.rfind("\n", k, m)   # `$`: the end, or before a newline
        if end is not None and end >= 0:
            found.append(value)
            at = end if end == size or text[end - 1] == "\n" else end + 1
            if end == size:
                break
        else:
            newline = text.find("\n", at)
            if newline < 0:
                break
            at = newline + 1
    return found


def _named(directory, prefix, suffix=""):
    """The paths in ``directory`` whose names begin with ``prefix`` and end with ``suffix`` (no dot first), in the
    order it lists them; none when it cannot be listed: what glob.glob(directory/prefix*suffix) finds, without
    importing glob (a read's imports are most of its CPU, docs/benchmarks.md)."""
    try:
        found = os.listdir(directory)
    except OSError:
        return []
    return [os.path.join(directory, name) for name in found if name.startswith(prefix) and name.endswith(suffix)
            and len(name) >= len(prefix) + len(suffix)]


def models(home, user):
    """The cache as cachestate reads it, verified only by records the account (or root) keeps outside hf-cache,
    and the revisions the compose files reference."""
    records = manifest.Records(os.path.join(home, names.VERIFIED_DIR), manifest.owners(user))
    found = cachestate.scan(os.path.join(home, names.HUB_DIR), records)
    referenced = set()
    for path in _named(os.path.join(home, names.DOCKER_DIR), names.COMPOSE_FILE):
        text = safefs.read_regular(path, 1 << 20)
        referenced.update(m for m in labelled((text or b"").decode(errors="replace")) if "@" in m)
    found["referenced"] = sorted(referenced)
    return found


def tools(tools_dir):
    def owner_mode(path):
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        owner, group = _names(st)
        return {"owner": owner, "group": group, "mode": format(stat.S_IMODE(st.st_mode), "o")}

    lib = os.path.join(tools_dir, "venv", "lib")
    dists = [dist for python in _named(lib, "python3")
             for dist in _named(os.path.join(python, "site-packages"), "huggingface_hub-", ".dist-info")]
    return {
        # where `import ensurepip` would find it (no import: importlib.util's find_spec asks the same path finder)
        "venv_module": all(importlib.machinery.PathFinder.find_spec(m) is not None for m in ("ensurepip", "venv")),
        "venv_python": os.access(os.path.join(tools_dir, "venv", "bin", "python"), os.X_OK),
        # a venv made but cut before ensurepip gave it pip (a run killed or its connection lost there)
        "venv_pip": os.access(os.path.join(tools_dir, "venv", "bin", "pip"), os.X_OK),
        "hub_versions": sorted(os.path.basename(d)[len("huggingface_hub-"):-len(".dist-info")] for d in dists),
        "tools": owner_mode(tools_dir),
        "secret": owner_mode(os.path.join(tools_dir, "secret")),
    }


def adopted(path):
    """An existing directory's owner, whether it has entries and the first of their names (sorted, at most
    names.EXISTING_ENTRIES_SHOWN, ``more`` when there are others): the deploy refuses to adopt a stranger's."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    owner, group = _names(st)
    shown, more = [], False
    if stat.S_ISDIR(st.st_mode):
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    if len(shown) == names.EXISTING_ENTRIES_SHOWN:
                        more = True
                        break
                    shown.append(entry.name)
        except OSError:
            pass
    return {"owner": owner, "group": group, "directory": stat.S_ISDIR(st.st_mode), "empty": not shown,
            "entries": sorted(shown), "more": more}


def routers(home, engine_api):
    """Each gateway: its stack as stack.state() sees it, its stamp, the digest it has now, the workers file."""
    out = {}
    for slug, directory in stack.gateway_dirs(home).items():
        project, service = stack.gateway(slug)
        running = {"container": None, "record": None, "current": False}
        if engine_api:
            try:
                running = stack.state(directory, project, service)
            except dockerapi.Unavailable:
                pass
        raw = safefs.read_regular(os.path.join(directory, names.WORKERS_FILE), 1 << 20)
        try:
            workers = jsonio.loads(raw) if raw else None
        except ValueError:
            workers = None
        digest, legacy = stamp.compare(directory, running["container"], directory, stamp.GATEWAY_FILES)
        out[slug] = {"stack": running, "stamp": stamp.read(home, directory), "digest": digest, "legacy": legacy,
                     "judged": stamp.scripts_judged(directory), "workers": workers}
    return out


# Seconds a member of a multi-node group waits for rank 0's dist-init address to answer (the preflight's check).
REACH_SECONDS = 3


def reach(target):
    """Whether this host reaches ``target`` ([address, port, answering port]: rank 0's dist-init address and a
    port rank 0 is known to answer on, its ssh port), each try within REACH_SECONDS. A connection to the dist-init
    port reaches it. A refusal there does not prove it (a router or firewall on the way refuses for a host that is
    not there), so the answering port must then take a connection: nothing listens on the dist-init port yet (a
    first deploy), but rank 0 is there. A timeout, no route or an unknown name does not reach it. None without a
    target."""
    if not target:
        return None
    address, port, answering = target

    def connect(to):
        with socket.create_connection((address, int(to)), timeout=REACH_SECONDS):
            pass

    try:
        connect(port)
        return {"ok": True, "said": "connected"}
    except ConnectionRefusedError:
        pass
    except (OSError, ValueError) as error:
        return {"ok": False, "said": str(error) or type(error).__name__}
    try:
        connect(answering)
        return {"ok": True, "said": f"nothing listens on {port} yet; the host answers on {answering}"}
    except (OSError, ValueError) as error:
        return {"ok": False, "said": f"port {port} refused, and port {answering} did not answer either "
                                     f"({str(error) or type(error).__name__}): no host answers there"}
def gate_state(home, container):
    """The server's gate as the deploy decides on it (operations/gate.py): its stamp, the digest of the host as
    it is now and whether the stamp is an earlier version's that names it (stamp.compare), each gate script's
    judged digest, and when the container it stamped started."""
    digest, legacy = stamp.compare(home, container)
    return {"stamp": stamp.read(home), "digest": digest, "legacy": legacy, "judged": stamp.scripts_judged(home),
            "started_at": report.gated_start(home)}


def layout_dirs(spec, home, gateways):
    """The directories whose owner and mode the layout reads: the spec's, and on a gateway host router/, its
    router/.secrets/ (the control-plane key) and each gateway's router/<slug>/, which the plan's layout names too."""
    routers = [os.path.join(home, names.GATEWAY_DIR), os.path.join(home, names.GATEWAY_SECRETS_DIR)] if gateways else []
    return [*spec.get("dirs", ()), *routers, *gateways.values()]


def read(spec):
    home, tools_dir = spec["home"], spec["tools_dir"]
    docker_dir = os.path.join(home, names.DOCKER_DIR)
    gateways = stack.gateway_dirs(home)
    spec = dict(spec, dirs=layout_dirs(spec, home, gateways))
    units = services([DOCKER_UNIT, *spec.get("services", [])])
    engine = docker(units.get(DOCKER_UNIT))
    running = {"container": None, "record": None, "current": False}
    if engine["api"]:
        try:
            running = stack.state(docker_dir)
        except dockerapi.Unavailable:
            pass
    container = running["container"]
    found_gpus = gpus()
    if found_gpus is not None:
        found_gpus["runtimes"] = engine["runtimes"]
        found_gpus["gated"] = nvsmi.read_gated(docker_dir)   # the GPUs the last good config was gated on
    found = {
        "python3": sys.executable,
        "os": _os_release(),
        "kernel": kernel(),
        "account": account(spec),
        "docker": engine,
        "gpus": found_gpus,
        "layout": layout(spec),
        "existing": {"home": adopted(home), "tools": adopted(tools_dir)},
        "files": {d: files(d) for d in (home, docker_dir, os.path.join(home, names.TOOLCHAIN_DIR),
                                        os.path.join(home, names.SECRETS_DIR), tools_dir,
                                        os.path.join(tools_dir, "secret"), *gateways.values(),
                                        os.path.join(home, names.GATEWAY_SECRETS_DIR),
                                        *spec.get("system_dirs", ()))},
        "system_dirs": {d: _is_dir(d) for d in spec.get("system_dirs", ())},
        "services": {name: units[name] for name in spec.get("services", []) if name in units},
        "packages": packages(spec.get("packages", [])),
        "models": models(home, spec["user"]),
        "tools": tools(tools_dir),
        "stack": running,
        "gate": gate_state(home, container),
        "routers": routers(home, engine["api"]),
        "reach": reach(spec.get("reach")),
        "settled": settled.read(),
        "keyrings": {path: openpgp.keyring(path) for path in spec.get("keyrings", ())},
    }
    if spec.get("peer_address"):
        found["peer"] = peer(spec)
    if spec.get("door_reader"):
        reader = spec["door_reader"]
        found["door_reader"] = {"group": acl.search_only(home, reader["group"], "group"),
                                "group_entry": acl.has_entry(home, reader["group"], "group"),
                                "legacy_entry": acl.has_entry(home, reader["legacy_user"], "user"),
                                "user": _user(reader["user"]) is not None}
    if spec.get("report"):
        found["report"] = report.read(home, engine)
    return found


if __name__ == "__main__":
    print(jsonio.dumps(read(jsonio.loads(sys.argv[1])), sort_keys=True))
