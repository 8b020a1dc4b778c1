"""What a fleet status report reads beyond the deploy's own snapshot
(snapshot.py adds it as the "report" section when its spec says
"report": true; scripts/status.sh asks for it). Read-only and bounded, like
the rest of the snapshot: hf-cache and results are group-writable, so names
there are never followed (lstat only) and nothing is opened below them.

Sections: now (the host's clock, for the container's uptime), gpus (memory
used and total per GPU), engine (Docker's version from the Engine API),
compose (the plugin's own `version --short`), cache (the bytes of hf-cache,
each file counted once), disk (free and total bytes where hf-cache lives),
gate (the last gate's record, stamp.LAST, written by gate.py), gateways
(on a gateway host: each gateway's port and its workers with their health, as
the gateway's own GET /workers reports them).
"""

import os
import re
import shutil
import stat
import subprocess
import time
import urllib.request

from .. import apikey, bounded, dockerapi, names, safefs, stack
from ..formats import jsonio
from . import stamp

GATEWAY_TIMEOUT = 5   # seconds, for one gateway's /workers, its reply read in full

COMMAND_TIMEOUT = 30   # seconds, for nvidia-smi and the compose plugin
MAX_ENTRIES = 1_000_000  # entries hf-cache's size walks at most; a larger tree is reported as partial
MAX_SECONDS = 60         # and the time it takes at most


def _run(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def gpu_memory(nvidia_smi):
    """[{"name", "used_mib", "total_mib"}] per GPU, or None without nvidia-smi."""
    if not nvidia_smi:
        return None
    out = []
    for line in _run([nvidia_smi, "--query-gpu=name,memory.used,memory.total",
                      "--format=csv,noheader,nounits"]).splitlines():
        parts = [p.strip() for p in line.rsplit(",", 2)]
        if len(parts) == 3:
            try:
                out.append({"name": parts[0], "used_mib": int(float(parts[1])), "total_mib": int(float(parts[2]))})
            except ValueError:
                out.append({"name": parts[0], "used_mib": None, "total_mib": None})
    return out


def engine(api):
    """Docker's version and API version, from the Engine API (None when the engine does not answer)."""
    if not api:
        return None
    try:
        found = dockerapi.get("/version") or {}
    except (dockerapi.Unavailable, ValueError):
        return None
    return {"version": found.get("Version"), "api": found.get("ApiVersion")}


def compose(plugin):
    """The compose plugin's version (`docker-compose version --short`), or None."""
    if not plugin:
        return None
    return _run([plugin, "version", "--short"]).strip().lstrip("v") or None


def cache_size(top):
    """Bytes of the regular files below ``top``, each inode once (blobs and their links), no link followed
    (safefs.walk: every directory opened from its parent's descriptor), at most MAX_ENTRIES entries and
    MAX_SECONDS."""
    seen, files = set(), 0
    budget = safefs.Budget(MAX_ENTRIES, MAX_SECONDS)
    try:
        fd = safefs.open_dir(top)
    except OSError:
        return {"bytes": 0, "files": 0, "partial": True}
    try:
        for _path, st in safefs.walk(fd, top, budget):
            if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                files += st.st_size
    finally:
        os.close(fd)
    return {"bytes": files, "files": len(seen), "partial": budget.stopped is not None}


def disk(path):
    """Free (for unprivileged users) and total bytes of the filesystem holding ``path``."""
    try:
        found = os.statvfs(path)
    except OSError:
        return None
    return {"path": path, "free": found.f_bavail * found.f_frsize, "total": found.f_blocks * found.f_frsize}


def last_gate(home):
    """The last gate's record, without the API key (a record written before the gate redacted may hold it)."""
    raw = safefs.read_regular(os.path.join(home, names.DOCKER_DIR, stamp.LAST), 65536)
    try:
        found = jsonio.loads(apikey.redact(raw.decode(errors="replace"))) if raw else None
    except ValueError:
        return {"unreadable": True}
    return found if isinstance(found, dict) else None


def gated_start(home):
    """When the container the last gate stamped had started (its record, stamp.LAST), or None: a multi-node group's
    member running a container started since restarted alone (nodegroups.stale, gate_metrics.py)."""
    found = (last_gate(home) or {}).get("container")
    started = found.get("started_at") if isinstance(found, dict) else None
    return started if isinstance(started, str) else None


def use_key(home):
    """Read the API key (the server's config file) and the gateways' control-plane key, when there are: both are
    redacted from everything the report carries; the control-plane key alone is sent, to the gateways' worker API
    (/workers takes no other key), only to a port one of their own running containers publishes, asked for every
    request."""
    key_file = os.path.join(home, names.SECRETS_DIR, names.SERVER_CONFIG)
    if os.path.isfile(key_file) and not os.path.islink(key_file):
        apikey.use_api_key_file(key_file)   # redacted, sent nowhere
    control_file = os.path.join(home, names.GATEWAY_SECRETS_DIR, names.CONTROL_PLANE_CONFIG)
    if os.path.isfile(control_file) and not os.path.islink(control_file):
        apikey.use_api_key_file(control_file, lambda url: any(stack.holds(url, *stack.gateway(slug))
                                                              for slug in stack.gateway_dirs(home)))


def gateways(home):
    """[{"slug", "port", "workers": [{"url", "healthy"}] or None, "error"}] of the gateways below the home."""
    out = []
    for slug, directory in stack.gateway_dirs(home).items():
        raw = safefs.read_regular(os.path.join(directory, names.COMPOSE_FILE), 1 << 20) or b""
        text = raw.decode(errors="replace")
        port = re.search(r"--port=(\d+)", text)
        found = {"slug": slug, "port": int(port.group(1)) if port else None, "workers": None, "error": None}
        try:
            if port is None:
                raise OSError("no --port in its compose.yaml")
            # Only to the port the gateway's own running container publishes: a port no container holds is
            # anyone's to listen on, and the request carries the key.
            addresses = stack.published(found["port"], *stack.gateway(slug))
            if not addresses:
                raise OSError(f"its container does not run and publish port {found['port']}; nothing was sent")
            address = "127.0.0.1" if addresses[0] in ("0.0.0.0", "::") else addresses[0]
            url = f"http://[{address}]:{found['port']}" if ":" in address else f"http://{address}:{found['port']}"
            started = time.monotonic()
            with bounded.open_url(urllib.request.Request(url + "/workers"), GATEWAY_TIMEOUT) as reply:
                listed = jsonio.loads(bounded.read_bounded(reply, started + GATEWAY_TIMEOUT,
                                                         bounded.MAX_GATEWAY_BYTES)).get("workers", [])
            found["workers"] = [{"url": w.get("url"), "healthy": bool(w.get("is_healthy"))} for w in listed]
        except (OSError, ValueError) as error:
            found["error"] = f"the gateway does not answer: {error}"
        out.append(found)
    return out


def read(home, docker):
    """The report section; ``docker`` is the snapshot's own docker section (socket, plugin)."""
    use_key(home)
    cache = os.path.join(home, names.HF_CACHE_DIR)
    try:
        real_cache = stat.S_ISDIR(os.lstat(cache).st_mode)
    except OSError:
        real_cache = False
    return {
        "now": time.time(),
        "gpus": gpu_memory(shutil.which("nvidia-smi")),
        "engine": engine(docker.get("api")),
        "compose": compose(docker.get("compose_plugin")),
        "cache": cache_size(cache) if real_cache else None,
        "disk": disk(cache if real_cache else home),
        "gate": last_gate(home),
        "gateways": gateways(home),
    }
