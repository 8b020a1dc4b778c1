"""The model cache: the pull's Python environment, the pull of a pinned
revision (verified, resumable) and the pruning of revisions nothing keeps."""

from __future__ import annotations

import json
from typing import Iterable

from pyinfra import host, logger
from pyinfra.api import FunctionCommand

from ..fleet.peering import checked
from ..hostside.formats.units import human
from ..hostside.printable import printable
from ..machine import ship
from ..machine.toolchain import pip_index_options
from ..models.lockfile import LockedModel
from ..models.registry import Model
from ..plan.types import Paths, PeerSources, Pull
from ..run.facts import current
from ..run.operation import diff_wanted, q, run_streamed, snapshot_operation
from .files import swap_in


@snapshot_operation
def pull_tools(tools_dir: str, hub_version: str, script: str, group: str, index_url: str | None = None):
    """
    Ensure the pull's Python environment: ``tools_dir`` (root-owned, readable
    by ``group``), a venv in it with huggingface_hub==``hub_version`` and
    nothing else of ours, the pull ``script`` as hfpull.py, and a secret/
    directory only the account can enter (the Hub token lives there).
    """
    state = current(host)["tools"]
    t = q(tools_dir)
    changed = False
    if state["tools"] != {"owner": "root", "group": group, "mode": "755"}:
        changed = True
        yield f"install -d -o root -g {q(group)} -m 755 {t}"
    if state["secret"] != {"owner": group, "group": group, "mode": "700"}:
        changed = True
        yield f"install -d -o {q(group)} -g {q(group)} -m 700 {t}/secret"
    # A venv without its pip was cut mid-way (a run killed, its connection lost): made again, from scratch, beside
    # it. The cut run's `venv` and its ensurepip may still be running (a cut connection leaves them orphaned, not
    # killed): they name the venv by its path, so after a rename they would write into the new one (measured: an
    # ensurepip still upgrading pip removed the new venv's bin/pip; the re-run failed "venv/bin/pip: not found").
    # They are stopped first (only they run the venv's python while it has no pip: no pull can), then the old one
    # is renamed out of the way and removed.
    fresh = not state["venv_python"] or not state["venv_pip"]
    if fresh and state["venv_python"]:
        changed = True
        yield (f"{{ {cut_writers_stopped(tools_dir)}; }} && "
               f"mv -T {t}/venv {t}/venv.cut.$$ && {ship.PYTHON} -m venv {t}/venv && "
               f"{{ rm -rf {t}/venv.cut.$$ || true; }}")
    elif fresh:
        changed = True
        yield f"{ship.PYTHON} -m venv {t}/venv"
    if fresh or state["hub_versions"] != [hub_version]:
        changed = True
        index = "".join(f" {option}" for option in pip_index_options(index_url))
        yield (f"{t}/venv/bin/pip install --quiet --disable-pip-version-check --no-input{index} "
               f"{q('huggingface-hub==' + hub_version)}")
    if not changed:
        host.noop(f"{tools_dir}/venv already has huggingface_hub {hub_version}")
    yield from swap_in(f"{tools_dir}/hfpull.py", script.encode(), "root", group, "644", None)


def cut_writers_stopped(tools_dir: str) -> str:
    """The command that kills what a cut run left making ``tools_dir``/venv: its `python3 -m venv` and the venv's
    own python (ensurepip), each matched from the start of its command line (never the shell running this)."""
    venv = f"{tools_dir}/venv"
    patterns = (f"^{ship.PYTHON} -m venv {venv}$", f"^{venv}/bin/python")
    return "; ".join(f"pkill -KILL -f {q(pattern)}" for pattern in patterns) + "; sleep 0.2; true"


def pull_command(pull: Pull, paths: Paths, model: Model, locked: bool = False,
                 peers: PeerSources | None = None) -> str:
    """hfpull.py's command line for ``model``: the Hub token and the site's peer key by their files alone."""
    tools = paths.tools
    args = [f"{tools}/venv/bin/python", "-I", f"{tools}/hfpull.py", "pull", "--cache-dir", paths.hub,
            "--records-dir", paths.verified, "--repo-id", model.repo_id, "--revision", model.revision,
            "--lock-wait", str(pull.lock_wait), "--workers", str(pull.workers), "--min-free", str(pull.min_free)]
    if locked:
        args.append("--locked-stdin")
    if pull.hf_endpoint:
        args += ["--endpoint", pull.hf_endpoint]
    if pull.token:
        args += ["--token-file", paths.token]
    if peers is not None and peers.peers:  # the key itself never on the command line
        args += ["--peer-key-file", paths.peer_key, "--peer-wait", str(peers.wait)]
        args += ["--peer-seed"] if peers.seed else []
        for door in peers.peers:
            args += ["--peer", door]
    # umask 002: files the pull creates stay group-writable, so admins can pull by hand too.
    return "cd / && umask 002 && " + " ".join(q(a) for a in args)


def _revision_state(cache: dict, repo_id: str, revision: str) -> dict | None:
    for found_id, repo in cache["repos"].items():
        if found_id.lower() == repo_id.lower():
            return (repo.get("revisions") or {}).get(revision)
    return None


@snapshot_operation
def model_pulled(pull: Pull, paths: Paths, model: Model, locked: LockedModel | None = None,
                 peers: PeerSources | None = None, share: tuple[str, ...] | None = None):
    """
    Ensure ``model`` at its pinned commit is complete and verified in the
    cache (paths.hub), as the pull's records in paths.verified (the account's
    alone, outside hf-cache) say. Decided from the cache alone (the snapshot): a complete
    revision costs no request to the Hub. Otherwise hfpull.py (paths.tools) fetches only
    what is missing, resuming partial files, ``pull``.workers files and
    connections at a time, and marks the snapshot complete only after every
    file matches the Hub's size and hash, and with ``locked`` (the lock's
    record, lock.LockedModel) the lock's sha256 of every file too: until then
    a complete revision whose content digest is not the lock's counts as not
    pulled. With ``peers`` (peering.py), each file from the fleet's peers
    that hold it verified first, the site key read from paths.peer_key:
    when the operation runs, only the peers whose door this run has checked.
    With ``share`` (a swarm's round 1, peering.split; needs ``locked``), only
    the files of those paths, recorded as a revision verified in part.
    """
    cache = current(host)["models"]
    repo_id, revision = model.repo_id, model.revision
    found = _revision_state(cache, repo_id, revision)
    matches = found and found.get("complete") and (locked is None or found.get("content") == locked.content)
    if matches:
        host.noop(f"{repo_id}@{revision[:12]} is already complete and verified in the cache"
                  + (" (as the lock records it)" if locked is not None else ""))
        return
    if share is not None:
        assert locked is not None, "peering.with_sources gives a share only with a lock"
        if found and {f["sha256"] for f in locked.files if f["path"] in share} <= set(
                (found.get("verified_blobs") or {}).values()):
            host.noop(f"this host's share of {repo_id}@{revision[:12]} is already verified in the cache")
            return
    if diff_wanted():
        state = "missing" if not found else "not verified against the lock" if found.get("complete") else \
            f"incomplete ({'; '.join(found.get('problems', [])[:3]) or 'unverified'})"
        host.log(f"Will pull {repo_id}@{revision[:12]}: {state}", logger.info)
    if peers is not None and host.state.is_executing:  # only the doors this run has checked (peering.checked)
        peers = checked(host.state, peers)
    command = pull_command(pull, paths, model, locked is not None, peers)
    record = locked.record() if locked is not None else None
    if record is not None and share is not None:
        record["share"] = list(share)  # the paths, on stdin: never on a command line
    stdin = {"_stdin": json.dumps(record)} if record is not None else {}
    yield FunctionCommand(run_streamed, (command,), stdin)


def prune_plan(cache: dict, keep: Iterable[str]) -> list[tuple[str, str, int]]:
    """(repo_id, commit, size) of every cached revision that is neither kept nor referenced."""
    keep = {k.lower() for k in [*keep, *cache.get("referenced", [])]}
    plan = []
    for repo_id, repo in sorted(cache["repos"].items()):
        for commit, info in sorted((repo.get("revisions") or {}).items()):
            if f"{repo_id}@{commit}".lower() not in keep:
                plan.append((repo_id, commit, int(info.get("size") or 0)))
    return plan


@snapshot_operation
def models_pruned(hub: str, verified: str, keep: list[str], tools_dir: str):
    """
    Ensure the cache holds no revision other than ``keep`` ("org/name@commit")
    and those the compose files reference (the running config and its
    rollback), nor the pull's records in ``verified`` of what goes. Removal
    goes through huggingface_hub's cache API, which keeps blobs still shared
    with a kept revision. A dry run lists what would go.
    """
    cache = current(host)["models"]
    plan = prune_plan(cache, keep)
    if not plan:
        host.noop("the cache holds only revisions this host serves or keeps")
        return
    for repo_id, commit, size in plan:
        # repo ids and commits here are hf-cache's folder names, which a group member can choose
        logger.info(printable(f"[{host.name}] prune: {repo_id}@{commit[:12]} ({human(size)}) is not kept"))
    keep_all = sorted({*keep, *cache.get("referenced", [])})
    args = [f"{tools_dir}/venv/bin/python", "-I", f"{tools_dir}/hfpull.py", "prune", "--cache-dir", hub,
            "--records-dir", verified]
    for pinned in keep_all:
        args += ["--keep", pinned]
    yield FunctionCommand(run_streamed, ("cd / && " + " ".join(q(a) for a in args),), {})
