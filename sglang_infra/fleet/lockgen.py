"""Resolve once, write sglang.lock (the format is sglang_infra/models/lockfile.py).

    scripts/lock.sh [INVENTORY] [--update SPEC ...] [--out PATH]

SPEC is a registry key (lock the registry's revision again), KEY@REVISION (a
branch, tag or commit: e.g. qwen3.6-35b-a3b-awq@main locks that branch's head),
`image` (read every image digest again) or `wheels` (read every wheel hash
again). Without --update, what the lock already holds is kept as it is and only
what it lacks is resolved, so running it again changes nothing.

Everything is read where the deploy will read it:
- models through huggingface_hub (model_info with files_metadata) from the
  hosts' sglang_hf_endpoint, or the Hub, with the control machine's token;
- image digests through the Docker engine's distribution API (the engine on
  this machine, or DOCKER_HOST=unix://...), so names resolve exactly as
  `docker pull` resolves them, with the engine's own registry settings; no
  image is pulled;
- wheels from the package indexes the image build uses (sglang_pip_index_url,
  or pip's own default, plus flashinfer's index), with the sha256 the index
  lists, or computed from the file when it lists none.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html.parser
import http.client
import json
import os
import re
import socket
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterable, Mapping

from ..hostside import bounded, dockerapi
from ..hostside.safefs import write_atomic
from ..machine import toolchain
from ..models import lockfile, registry

# a regular (non-LFS) file is small on the Hub; its bytes are hashed in memory-bounded chunks
MAX_REGULAR_FILE = 64 << 20
HTTP_TIMEOUT = 60             # seconds for one index or Hub request
# An index's page of one project lists every file of every release (a few MB for the largest); read whole, so
# bounded, in bytes and in total time (a server dripping a byte a minute never trips HTTP_TIMEOUT).
MAX_INDEX_PAGE = 64 << 20
INDEX_PAGE_SECONDS = 300
WHEEL_PLATFORMS = ("any", "linux", "manylinux", "musllinux")   # wheels a Linux serving image could install


class LockGenError(RuntimeError):
    """Resolving failed; the message names what, where and the fix."""


def say(line: str) -> None:
    print(f"lock: {line}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- models

def _regular_file_hashes(repo_id: str, path: str, commit: str, endpoint: str | None, token: str | None,
                         size: int, keep: list[bytes] | None = None) -> tuple[str, str]:
    """(sha256, git blob sha1) of a regular file's bytes, fetched at ``commit``; ``keep`` collects the bytes."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    from ..hostside.pull import hublimits

    if size > MAX_REGULAR_FILE:
        raise LockGenError(f"{repo_id}@{commit[:12]}: {path} is a {size}-byte regular (non-LFS) file; refusing "
                           f"to hash more than {MAX_REGULAR_FILE} bytes of one")
    url = hf_hub_url(repo_id, path, revision=commit, endpoint=endpoint)
    headers = build_hf_headers(token=token or False)
    headers["Accept-Encoding"] = "identity"
    content, git = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
    got = 0
    _bounded_hub()
    with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=HTTP_TIMEOUT,
                              extensions={hublimits.FILE_BODY: True}) as reply:
        hf_raise_for_status(reply)
        for chunk in reply.iter_bytes():
            got += len(chunk)
            if got > size:
                break
            content.update(chunk)
            git.update(chunk)
            if keep is not None:
                keep.append(chunk)
    if got != size:
        raise LockGenError(f"{repo_id}@{commit[:12]}: {path} came with {got} bytes, the listing says {size}")
    return content.hexdigest(), git.hexdigest()


def _bounded_hub() -> None:
    """huggingface_hub's client for this process: the pull's (hostside/pull/hublimits.py), every answer from the Hub
    or a mirror bounded in bytes and in total time."""
    from huggingface_hub import set_client_factory

    from ..hostside.pull import transfer

    set_client_factory(transfer.bounded_client)


def resolve_model(key: str, repo_id: str, revision: str, endpoint: str | None,
                  token: str | None) -> lockfile.LockedModel:
    """The commit ``revision`` names now, and every file of it with its size and sha256."""
    from huggingface_hub import HfApi

    _bounded_hub()

    info = HfApi(endpoint=endpoint, token=token or False).model_info(
        repo_id, revision=revision, files_metadata=True, timeout=HTTP_TIMEOUT)
    commit = info.sha
    if not (isinstance(commit, str) and registry.is_commit(commit)):
        raise LockGenError(f"{key}: {endpoint or 'the Hub'} gave no commit id for {repo_id}@{revision}")
    if registry.is_commit(revision) and commit != revision:
        raise LockGenError(f"{key}: {endpoint or 'the Hub'} resolved commit {revision} to {commit}")
    files = []
    config: dict | None = None
    for sibling in info.siblings or []:
        if sibling.size is None:
            raise LockGenError(f"{key}: {endpoint or 'the Hub'} listed {sibling.rfilename} without its size")
        if sibling.lfs is not None:
            files.append({"path": sibling.rfilename, "size": int(sibling.lfs.size), "sha256": sibling.lfs.sha256,
                          "sha256_from": "lfs"})
            continue
        kept: list[bytes] | None = [] if sibling.rfilename == lockfile.CONFIG_FILE else None
        sha256, git = _regular_file_hashes(repo_id, sibling.rfilename, commit, endpoint, token, int(sibling.size),
                                           kept)
        if kept is not None:
            try:
                config = lockfile.config_subset(json.loads(b"".join(kept)))
            except ValueError:
                config = None
        if sibling.blob_id and git != sibling.blob_id:
            raise LockGenError(f"{key}: {sibling.rfilename} at {commit[:12]} hashes to git blob {git}, the listing "
                               f"says {sibling.blob_id}")
        files.append({"path": sibling.rfilename, "size": int(sibling.size), "sha256": sha256,
                      "sha256_from": "computed", "git_blob": git})
    if not files:
        raise LockGenError(f"{key}: {repo_id}@{commit[:12]} lists no files")
    gated = info.gated if info.gated in (False, True, "auto", "manual") else None
    return lockfile.LockedModel(key, repo_id, commit, tuple(sorted(files, key=lambda f: f["path"])), gated, config)


# ---------------------------------------------------------------- images

def _engine_socket() -> str:
    docker_host = os.environ.get("DOCKER_HOST", "")
    if not docker_host:
        return dockerapi.SOCKET
    if docker_host.startswith("unix://"):
        return docker_host[len("unix://"):]
    raise LockGenError(f"DOCKER_HOST={docker_host}: only a unix:// socket is supported for reading image digests. "
                       "Fix: run lock.sh where a Docker engine answers on a unix socket")


def _registry_of(reference: str) -> str | None:
    """The registry host a reference names, or None for the engine's default registry."""
    first, sep, _ = reference.partition("/")
    return first if sep and ("." in first or ":" in first or first == "localhost") else None


def _registry_auth(reference: str, socket_path: str) -> str | None:
    """X-Registry-Auth for the reference's registry from ~/.docker/config.json ('auth' entries only), or None."""
    config = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        auths = json.loads(config.read_text()).get("auths") or {}
    except (OSError, ValueError):
        return None
    server = _registry_of(reference) or (dockerapi.get("/info", socket_path=socket_path) or {}).get(
        "IndexServerAddress")
    entry = auths.get(server) or {}
    if not entry.get("auth"):
        return None
    user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
    payload = json.dumps({"username": user, "password": password, "serveraddress": server})
    return base64.urlsafe_b64encode(payload.encode()).decode()


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 to the engine on its unix socket: the registry's answer comes through the engine, with the auth
    header (hostside/dockerapi.py asks the engine plain GETs only)."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=HTTP_TIMEOUT)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def resolve_image(reference: str) -> str:
    """The manifest digest (sha256:...) the registry serves for ``reference`` now, read by the Docker engine."""

    socket_path = _engine_socket()
    headers = {}
    auth = _registry_auth(reference, socket_path)
    if auth:
        headers["X-Registry-Auth"] = auth
    connection = _UnixConnection(socket_path)
    try:
        connection.request("GET", f"/distribution/{urllib.parse.quote(reference, safe='/:@')}/json",
                           headers=headers)
        reply = connection.getresponse()
        text = reply.read().decode(errors="replace")
    except OSError as error:
        raise LockGenError(f"no Docker engine answers on {socket_path} ({error}); lock.sh reads image digests "
                           "through it. Fix: start Docker here, or set DOCKER_HOST=unix://PATH") from None
    finally:
        connection.close()
    if reply.status != 200:
        try:
            text = json.loads(text).get("message", text)
        except ValueError:
            pass
        raise LockGenError(f"the registry did not give a digest for {reference}: HTTP {reply.status} {text.strip()}")
    digest = (json.loads(text).get("Descriptor") or {}).get("digest", "")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise LockGenError(f"the registry answered for {reference} without a sha256 digest")
    return digest


# ---------------------------------------------------------------- wheels

class _Links(html.parser.HTMLParser):
    """The file links of a PEP 503 simple page: (file name, url, sha256 or None)."""

    def __init__(self, base: str):
        super().__init__()
        self.base = base
        self.links: list[tuple[str, str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href") if tag == "a" else None
        if not href:
            return
        url, _, fragment = urllib.parse.urljoin(self.base, href).partition("#")
        name = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        sha = fragment[len("sha256="):] if fragment.startswith("sha256=") else None
        self.links.append((name, url, sha))


def default_index() -> str:
    """The index pip itself uses here: PIP_INDEX_URL, else pip's own default."""
    from pip._internal.models.index import PyPI

    return os.environ.get("PIP_INDEX_URL") or PyPI.simple_url


def _get(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "text/html", "User-Agent": "sglang-infra-lock"})
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as reply:
        try:
            return bounded.read_bounded(reply, time.monotonic() + INDEX_PAGE_SECONDS, MAX_INDEX_PAGE)
        except bounded.Unbounded as error:
            raise LockGenError(f"the index page {url}: {error} (at most {MAX_INDEX_PAGE >> 20} MiB within "
                               f"{INDEX_PAGE_SECONDS} s)") from None


def _sha256_of(url: str) -> str:
    digest = hashlib.sha256()
    request = urllib.request.Request(url, headers={"User-Agent": "sglang-infra-lock"})
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as reply:
        for block in iter(lambda: reply.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _wheel_version(filename: str, name: str) -> str | None:
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    try:
        wheel_name, version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    if canonicalize_name(wheel_name) != canonicalize_name(name):
        return None
    if not any(tag.platform.startswith(WHEEL_PLATFORMS) for tag in tags):
        return None
    return str(version)


def resolve_wheels(name: str, version: str, indexes: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """Every wheel of exactly ``name==version`` that the indexes serve, with its sha256."""
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    found: dict[tuple[str, str], None] = {}
    for index in indexes:
        page = index.rstrip("/") + f"/{canonicalize_name(name)}/"
        try:
            text = _get(page).decode(errors="replace")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                continue
            raise LockGenError(f"{page}: HTTP {error.code}") from None
        except OSError as error:
            raise LockGenError(f"{page}: {error}") from None
        parser = _Links(page)
        parser.feed(text)
        for filename, url, sha in parser.links:
            found_version = _wheel_version(filename, name)
            if found_version is None or Version(found_version) != Version(version):
                continue
            found[(filename, sha or _sha256_of(url))] = None
    if not found:
        raise LockGenError(f"no index serves a wheel of {name}=={version} ({', '.join(indexes)})")
    return tuple(sorted(found))


# ---------------------------------------------------------------- the fleet

def _hosts_data(inventory_path: str) -> list[tuple[str, dict]]:
    from ..plan import inventoryfile

    return [(host.name, host.data.dict()) for host in inventoryfile.load(inventory_path)]


def _parse_updates(updates: list[str]) -> tuple[dict[str, str | None], bool, bool]:
    models, images, wheels = {}, False, False
    for spec in updates:
        if spec == "image":
            images = True
        elif spec == "wheels":
            wheels = True
        else:
            key, _, revision = spec.partition("@")
            models[key] = revision or None
    return models, images, wheels


def generate(hosts: list[tuple[str, dict]], old: lockfile.Lock | None, updates: list[str]) -> dict:
    """The lock document for these hosts' data, keeping what ``old`` holds unless an update names it."""
    update_models, update_images, update_wheels = _parse_updates(updates)
    wanted: dict[str, tuple[str, dict]] = {}   # registry key -> (first host, data)
    for name, data in hosts:
        for key in registry.kept_keys(data):
            entry = data["sglang_models"].get(key)
            if not isinstance(entry, Mapping):
                raise LockGenError(f"host {name}: {key!r} is not in sglang_models. Fix: use a registry key")
            first = wanted.setdefault(key, (name, data))
            other = first[1]["sglang_models"][key]
            if (other.get("repo_id"), other.get("revision")) != (entry.get("repo_id"), entry.get("revision")):
                raise LockGenError(f"{key!r} is {entry.get('repo_id')}@{entry.get('revision')} on host {name} but "
                                   f"{other.get('repo_id')}@{other.get('revision')} on host {first[0]}; one lock "
                                   "pins one commit per key. Fix: give the two different keys")
    unknown = sorted(set(update_models) - set(wanted))
    if unknown:
        raise LockGenError(f"--update {', '.join(unknown)}: no host serves or keeps such a model. Fix: name a "
                           f"registry key the inventory uses ({', '.join(sorted(wanted))})")

    locked_models = {}
    for key, (host_name, data) in sorted(wanted.items()):
        entry = data["sglang_models"][key]
        kept = old.models.get(key) if old else None
        asked = key in update_models
        revision = update_models.get(key) or entry.get("revision")
        if not asked and kept and kept.repo_id == entry["repo_id"] and entry.get("revision") in (None, kept.commit):
            if kept.gated is not None and (kept.config is not None
                                           or not any(f["path"] == lockfile.CONFIG_FILE for f in kept.files)):
                locked_models[key] = kept
                continue
            # locked before the lock said whether the repo is gated, or what its config.json says of its shape:
            # read it again at that commit
            revision = kept.commit
        if not revision:
            raise LockGenError(f"{key!r} has no revision in sglang_models and is not in the lock yet. Fix: lock a "
                               f"branch's head with --update {key}@main, or pin 'revision'")
        say(f"{key}: resolving {entry['repo_id']}@{revision} at {data['sglang_hf_endpoint'] or 'the Hub'}")
        token = registry.control_token(data)
        locked_models[key] = resolve_model(key, entry["repo_id"], revision, data["sglang_hf_endpoint"],
                                           token.decode() if token else None)
        if kept is not None and not asked and revision == kept.commit and locked_models[key].files != kept.files:
            raise LockGenError(f"{key}: {data['sglang_hf_endpoint'] or 'the Hub'} lists other files for "
                               f"{entry['repo_id']}@{revision} than the lock does. Fix: find out why (a mirror that "
                               f"rewrote them?), then lock it again with --update {key}")
        say(f"{key}: {entry['repo_id']}@{locked_models[key].commit} ({len(locked_models[key].files)} files)")

    images = {}
    for name, data in hosts:
        reference = data["sglang_image"]
        if data["sglang_image_archive"] or "@" in reference or reference in images:
            continue
        if old and reference in old.images and not update_images:
            images[reference] = old.images[reference]
            continue
        images[reference] = resolve_image(reference)
        say(f"image {reference}: {images[reference]}")

    wheels = {}
    for name, data in hosts:
        if not data["sglang_toolchain_image"]:
            continue
        problems = toolchain.problems(data)   # pins are worked out from data the refusals accept
        if problems:
            key, what, fix = problems[0]
            raise LockGenError(f"host {name}: {key}: {what}. Fix: {fix}")
        indexes = [data["sglang_pip_index_url"] or default_index()]
        extra = toolchain.flashinfer_index_url(data)
        if extra:
            indexes.append(extra)
        for package, version in toolchain.pins(data).items():
            pin = f"{package}=={version}"
            if pin in wheels:
                continue
            if old and pin in old.wheels and not update_wheels:
                wheels[pin] = old.wheels[pin]
                continue
            wheels[pin] = resolve_wheels(package, version, indexes)
            say(f"wheel {pin}: {len(wheels[pin])} file(s)")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return lockfile.document(locked_models, images, wheels, stamp)


def write(path: str, doc: dict) -> bool:
    """Write the lock unless it already says the same (its date alone never changes the file)."""
    try:
        old = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        old = None
    if old is not None and lockfile.body(old) == lockfile.body(doc):
        return False
    write_atomic(path, lockfile.render(doc).encode(), mode=0o644, trusted_dir=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/lock.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("inventory", nargs="?", default="inventory.py")
    parser.add_argument("--update", action="append", default=[], metavar="SPEC",
                        help="KEY, KEY@REVISION, 'image' or 'wheels': resolve it again")
    parser.add_argument("--out", default=None, help="the lock file (default: the hosts' sglang_lock)")
    parser.add_argument("--candidate", action="store_true",
                        help="write LOCK.candidate instead, starting from LOCK, and print its path (rollout.sh "
                             "--lock moves it over LOCK once the canary passed)")
    args = parser.parse_args(argv)
    try:
        hosts = _hosts_data(args.inventory)
        if not hosts:
            raise LockGenError(f"{args.inventory} has no hosts")
        settings = {data.get("sglang_lock") for _, data in hosts}
        out = args.out
        if out is None:
            if len(settings) != 1 or not next(iter(settings)):
                raise LockGenError("the hosts disagree on sglang_lock (or set None). Fix: name the file with --out")
            out = lockfile.path_for(next(iter(settings)), os.path.dirname(os.path.abspath(args.inventory)))
        try:
            old = lockfile.load(out)
        except lockfile.LockError as error:
            if args.update:
                raise LockGenError(str(error)) from None
            raise
        doc = generate(hosts, old, args.update)
        if args.candidate:
            out += ".candidate"
            Path(out).unlink(missing_ok=True)
    except (LockGenError, lockfile.LockError) as error:
        say(f"refused, nothing written: {error}")
        return 1
    except Exception as error:  # the Hub, the engine or an index failed: say which, in one line
        say(f"failed, nothing written: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        return 1
    changed = write(out, doc)
    say(f"{out} {'written' if changed else 'unchanged'}: {len(doc['models'])} model(s), {len(doc['images'])} "
        f"image(s), {len(doc['wheels'])} wheel pin(s)")
    if args.candidate:
        print(os.path.abspath(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
