"""The peer door, control side: what each serving host's nginx serves to the
fleet's other hosts, and the rules for its data.

A host with `sglang_peer_key_file` set runs Debian's nginx (its
nginx.service, through a drop-in that makes it read only the door's own
config under DOOR_DIR). It answers `GET /blobs/<blob name>` (and HEAD, and
ranges) on one address and port, only to a request carrying
`Authorization: Bearer <site key>`, and only for a blob of a verified
revision of a model in the registry: the list of those blobs (BLOBS_CONF,
exact locations, one per blob) is worked out here from the host's snapshot
when the operation runs, after this run's pulls. Every other path is 404;
a request without the key is 401; a method other than GET or HEAD is 405;
nginx refuses a file with a link anywhere on its path (disable_symlinks).

The key reaches the host only inside KEY_CONF (root's, 0600, written
through stdin), which nginx's master process (root) includes; the workers
never read it. The workers run as a user and group of their own (WORKER_USER), never with the
account's group (which may write in hf-cache): the group's ACL entry on the home
(hostside/write/acl.py) lets them pass through it, and the cache's "other" bits
let them read, never write. The door speaks TLS alone, with a key pair made
on the host by root (TLS_KEY, TLS_CERT: operations.peerdoor.tls_made); the
run reads the certificate's sha256 when it checks the door, and each pull
trusts that certificate alone there (peering.checked, hostside/pull/peers.py).
The snapshot's part is in resolve.snapshot_spec (door_spec) and
hostside/read/snapshot.py (peer_address); the task is tasks/peer_door.py.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import shlex
from typing import Any, Mapping

from ..hostside.formats.netloc import netloc
from ..machine.templating import render_template
from .roles import fleet_address
from .types import PeerDoor, dropin_dir

DOOR_DIR = "/etc/nginx/sglang-peer-door"    # root's: the door's config, its key and its list of blobs
CONFIG = f"{DOOR_DIR}/nginx.conf"
KEY_CONF = f"{DOOR_DIR}/key.conf"           # 0600, root's: the one line that holds the site's key
BLOBS_CONF = f"{DOOR_DIR}/blobs.conf"       # the verified blobs nginx serves, one exact location each
# The door's TLS identity, made on the host by root once and kept (tls_command): the key never leaves the host.
TLS_KEY = f"{DOOR_DIR}/tls.key"             # 0600, root's: read by nginx's master process alone
TLS_CERT = f"{DOOR_DIR}/tls.crt"            # 0644: self-signed; each puller pins its sha256 (read/doorcheck.py)
TLS_PACKAGE = "openssl"                     # Debian's CLI that makes the pair
SERVICE = "nginx"
PACKAGE = "nginx"
# The door's nginx workers' own system user and group: not Debian's shared www-data, whose other services would
# pass through the home wherever the door's ACL entry lets www-data pass. Nothing else runs as it.
WORKER_USER = WORKER_GROUP = "sglang-door"
LEGACY_WORKER_USER = "www-data"             # the workers' user before: its ACL entry on the home is taken back
URL_PREFIX = "/blobs/"
# A Bearer token as RFC 6750 spells one (its b64token), long enough that guessing it is hopeless.
KEY_MIN, KEY_MAX = 32, 512
_KEY_RE = re.compile(rb"[A-Za-z0-9._~+/-]+=*")
# The HF cache's blob names: a git blob's sha1 (small files) or an LFS file's sha256.
_BLOB_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# A path nginx reads literally inside double quotes: no quote, backslash, `$` (a variable), space or `;`.
_PATH_RE = re.compile(r"/[A-Za-z0-9._/-]+")


def dropin() -> str:
    """Where nginx.service's drop-in is."""
    return f"{dropin_dir(SERVICE)}/sglang.conf"


def door_spec() -> dict[str, list[str]]:
    """What the snapshot reads of the door's files, unit and package on every host (also where the door is off:
    a door left from an earlier run is found and removed)."""
    return {"system_dirs": [DOOR_DIR, dropin_dir(SERVICE)], "services": [f"{SERVICE}.service"],
            "packages": [PACKAGE, TLS_PACKAGE]}


def foreign_nginx(snapshot: Mapping[str, Any]) -> str | None:
    """How an nginx.service that is not the door's runs on the host ("active", "enabled"), None when there is none
    (not installed, or stopped and disabled) or the door's drop-in is already there (the door's own nginx)."""
    unit = snapshot.get("services", {}).get(f"{SERVICE}.service") or {}
    folder, _, name = dropin().rpartition("/")
    if name in (snapshot.get("files", {}).get(folder) or {}):
        return None
    states = [state for state, on in (("active", unit.get("active") in ("active", "activating", "reloading")),
                                      ("enabled", unit.get("enabled") in ("enabled", "enabled-runtime"))) if on]
    return " and ".join(states) or None


def key_problem(key: bytes | None) -> str | None:
    """Why ``key`` (the key file's content, stripped) is not a site key, or None."""
    if not key:
        return "is empty"
    if not _KEY_RE.fullmatch(key):
        return "holds characters a Bearer token cannot carry (only letters, digits and ._~+/- then any '=')"
    if not KEY_MIN <= len(key) <= KEY_MAX:
        return f"holds a key of {len(key)} characters, not {KEY_MIN}-{KEY_MAX}"
    return None


def door_address(data: Mapping[str, Any], name: str) -> str:
    """The address the door listens on: sglang_peer_bind_address, else the host's fleet address
    (roles.fleet_address)."""
    return data["sglang_peer_bind_address"] or fleet_address(name, data)


def address_source(data: Mapping[str, Any], name: str) -> str:
    """Where door_address() took the door's address from, said as the key (or the inventory name)."""
    for key in ("sglang_peer_bind_address", "sglang_worker_address", "ssh_hostname"):
        if data.get(key):
            return f"{key} {data[key]!r}"
    return f"the inventory name {name!r}"


def address_problem(address: str) -> str | None:
    """Why ``address`` (an IP address) cannot be the door's, or None: every peer connects there with the site key,
    so it must be the host's own on the fleet's network, never loopback (a peer would reach itself, where any
    local user who took the port first would be sent the key) nor every address (the door is for the fleet's
    network alone)."""
    try:
        ip = ipaddress.ip_address(address.partition("%")[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        return f"{address} is every address of the host, not one on the fleet's network"
    if ip.is_loopback:
        return (f"{address} is a loopback address: a peer connecting there reaches itself, where whoever holds "
                "the port would be sent the site key")
    return None


def key_id(key: bytes) -> str:
    """The site key's fingerprint: what hosts compare to know they hold the same key, never the key itself (a
    sha256 under a label of its own, so it is no other digest of the key)."""
    return hashlib.sha256(b"sglang peer key id\0" + key).hexdigest()[:16]


def tls_command() -> str:
    """The shell command that makes the door's key pair and self-signed certificate on the host, as root: an
    EC P-256 key written 0600 (umask) beside its certificate, each under a temporary name then renamed, the key
    first, so a cut leaves either the old pair or a new key without a certificate (made again next run). The
    certificate's dates and name are not checked by anyone: a puller trusts exactly this certificate (its sha256)."""
    key, cert = TLS_KEY, TLS_CERT
    return (f"umask 077 && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 -nodes "
            f"-days 36500 -subj /CN=sglang-peer-door -keyout {key}.new -out {cert}.new 2>/dev/null "
            f"&& chmod 644 {cert}.new && mv -f {key}.new {key} && mv -f {cert}.new {cert}")


def config_check() -> str:
    """The command that must accept the door's files (its config, key pair, key and list) before nginx reloads or
    restarts them: nginx's own test of exactly the config it runs."""
    return f"nginx -t -q -c {shlex.quote(CONFIG)}"


def tls_ready(files: Mapping[str, Any], pair: bool | None) -> bool:
    """Whether the door's directory (the snapshot's files of DOOR_DIR) holds its key pair: the key root's alone
    (0600), the certificate beside it, and the two one pair (``pair``: the snapshot's tls_pair, doorcheck's check,
    so a half-replaced pair never reaches nginx's next reload). Anything else: the pair is made anew."""
    key, cert = (files.get(name.rpartition("/")[2]) for name in (TLS_KEY, TLS_CERT))
    return (isinstance(key, Mapping) and key.get("owner") == "root" and key.get("mode") == "600"
            and isinstance(cert, Mapping) and cert.get("owner") == "root" and pair is True)


def render(door: PeerDoor, reason: str) -> tuple[str, str, str]:
    """(nginx.conf, key.conf, nginx.service's drop-in) of ``door``."""
    config = render_template("templates/nginx/peer-door.conf.j2", worker_user=WORKER_USER, worker_group=WORKER_GROUP,
                             listen=netloc(door.address, door.port), key_conf=KEY_CONF, blobs_conf=BLOBS_CONF,
                             reason=reason, tls_cert=TLS_CERT, tls_key=TLS_KEY)
    service = render_template("templates/nginx/peer-door-service.conf.j2", config=CONFIG)
    return config, key_conf(door.key), service


def key_conf(key: bytes) -> str:
    """The door's key check: anything but this exact Authorization header is answered 401 (a string compare in
    nginx's `if` is case-sensitive, unlike a map's)."""
    assert key_problem(key) is None, "refusals.judge refuses any other key"
    return ("# Written by the sglang deploy: the site's peer key (root's alone, 0600).\n"
            f'if ($http_authorization != "Bearer {key.decode()}") {{\n    return 401;\n}}\n')


def _repo(models: Mapping[str, Any], repo_id: str) -> Mapping[str, Any]:
    for found, repo in (models.get("repos") or {}).items():
        if found.lower() == repo_id.lower():
            return repo
    return {}


def served_blobs(door: PeerDoor, models: Mapping[str, Any]) -> dict[str, str]:
    """Blob name -> its file, for every blob the door serves: those of each registry model's pinned revision that
    the host's own records say is verified and unchanged (and, with a lock, whose content is the lock's); of a
    revision pulled in part (a swarm's first round), each file its record of the files verified so far lists that
    is still the very inode verified (and, with a lock, whose sha256 is one of the lock's files'); in that repo's
    own blobs/; a name that is not a blob's (40 or 64 hex) is never listed."""
    out: dict[str, str] = {}
    for pin in door.pins:
        revision = (_repo(models, pin.repo_id).get("revisions") or {}).get(pin.commit) or {}
        if revision.get("verified") and not revision.get("problems"):
            if pin.content is not None and revision.get("content") != pin.content:
                continue
            blobs = revision.get("blobs") or ()
        else:
            part = revision.get("verified_blobs") or {}
            blobs = [blob for blob, sha256 in part.items() if pin.content is None or sha256 in pin.sha256s]
        folder = "models--" + pin.repo_id.replace("/", "--")
        for blob in blobs:
            path = f"{door.hub}/{folder}/blobs/{blob}"
            if isinstance(blob, str) and _BLOB_RE.fullmatch(blob) and _PATH_RE.fullmatch(path):
                out.setdefault(blob, path)
    return out


def blobs_conf(door: PeerDoor, models: Mapping[str, Any]) -> str:
    """The door's list: one exact location per served blob (no prefix, no pattern, so no other path matches)."""
    lines = ["# Written by the sglang deploy: the verified blobs this host's peer door serves, one each.\n"]
    for blob, path in sorted(served_blobs(door, models).items()):
        lines.append(f'location = {URL_PREFIX}{blob} {{\n    alias "{path}";\n}}\n')
    return "".join(lines)


def bind_problem(host_name: str, wanted: str, peer: Mapping[str, Any] | None) -> str | None:
    """Why the door cannot listen on ``wanted`` on this host (the snapshot's `peer`), or None."""
    peer = peer or {}
    address = peer.get("address")
    if address is None:
        return f"{wanted} does not resolve to an address on {host_name}"
    bad = address_problem(address)
    if bad:
        return f"{wanted} resolves on {host_name} to {bad}" if wanted != address else bad
    if peer.get("local"):
        return None
    return f"{wanted} ({address}) is not an address of {host_name}, so the door could not listen on it"
