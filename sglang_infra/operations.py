"""Custom operations. Each reads the host's snapshot (sglang_infra/snapshot.py),
compares it with the wanted state it was given (values from the host's plan),
and yields commands only for the difference; otherwise it calls host.noop.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
from io import BytesIO
from typing import Iterable

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, FunctionCommand, OperationError, StringCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS

from . import render, ship
from .hostside.stack import GATEWAY_PROJECT, GATEWAY_SERVICE
from .platforms import NOLOGIN_SHELL
from .hostside.units import human
from .snapshot import Unreadable, current
from .toolchain import pip_index_options

q = shlex.quote



def _failed(state, host, message: str) -> bool:
    host.log_styled(message, fg="red", log_func=logger.error)
    return False


def snapshot_operation(func):
    """
    pyinfra's @operation, for an operation that reads the snapshot. pyinfra
    does not catch an exception raised while an operation makes its commands,
    so a host that stopped answering would crash the whole run; instead that
    host gets one failing command, and the other hosts go on.
    """
    @functools.wraps(func)
    def guarded(*args, **kwargs):
        try:
            yield from func(*args, **kwargs)
        except Unreadable as error:
            yield FunctionCommand(_failed, (str(error),), {})

    return operation()(guarded)


# Drift categories the snapshot lists (hostside/snapshot.py, layout), each repaired by hostside/repair.py.
DRIFT_CATEGORIES = ("cache_group", "cache_file_mode", "cache_dir_mode", "owner", "world_writable",
                    "docker_group_writable")
# Paths per repair command, so a large repair never exceeds the remote's argument limit.
REPAIR_CHUNK = 200


@snapshot_operation
def service_account(
    user: str,
    home: str,
    uid: int | None = None,
    gid: int | None = None,
    groups: Iterable[str] = ("docker",),
    admins: Iterable[str] = (),
):
    """
    Ensure a locked, nologin system account whose primary group has its name,
    that belongs to ``groups`` (other secondary groups are kept), and whose
    group the ``admins`` belong to.

    + user: account and primary group name
    + home: home directory; never created or moved by this operation
    + uid/gid: fixed ids for a new account (an existing account with other ids
      is refused earlier, by validation, never re-owned here)
    + groups: secondary groups the account must be in (created as system groups if missing)
    + admins: existing users to add to the account's group
    """
    groups, admins = list(groups), list(admins)
    state = current(host)["account"]

    if state["group"] is None:
        yield StringCommand("groupadd", "--system", *(["--gid", str(gid)] if gid is not None else []), q(user))

    for extra in groups:
        if extra not in state["extra_groups"]:
            # Created ahead of the package that normally brings it (docker.io
            # adopts an existing docker group).
            yield f"groupadd --system {q(extra)}"

    account = state["user"]
    if account is None:
        yield StringCommand(
            "useradd", "--system", "--gid", q(user), "--shell", NOLOGIN_SHELL,
            "--home-dir", q(home), "--no-create-home",
            *(["--uid", str(uid)] if uid is not None else []),
            *(["--groups", ",".join(map(q, groups))] if groups else []),
            q(user),
        )
        # useradd leaves the password field locked; lock it explicitly so the
        # state does not depend on the distribution's defaults.
        yield f"usermod --lock {q(user)}"
    else:
        changes = []
        if account["shell"] != NOLOGIN_SHELL:
            changes += ["--shell", NOLOGIN_SHELL]
        if account["home"] != home:
            changes += ["--home", q(home)]  # no --move-home: the data is already in place
        group = state["group"]
        if group is not None and account["gid"] != group["gid"]:
            changes += ["--gid", q(user)]
        missing = [g for g in groups if g not in state["supplementary"]]
        if missing:
            changes += ["--append", "--groups", ",".join(map(q, missing))]
        if not state["password_locked"]:
            changes += ["--lock"]
        if changes:
            yield StringCommand("usermod", *changes, q(user))
        else:
            host.noop(f"account {user} is already a locked nologin system account in {', '.join(groups)}")

    members = (state["group"] or {}).get("members", [])
    for admin in admins:
        if admin in members:
            continue
        yield f"usermod --append --groups {q(user)} {q(admin)}"


# What each drift category expects, for --diff.
EXPECTED = {"cache_group": "group {group}", "cache_file_mode": "group read and write",
            "cache_dir_mode": "group rwx and setgid", "owner": "{user}:{group}", "world_writable": "not world-writable",
            "docker_group_writable": "not group-writable"}
DIFF_PATHS = 50  # drifted paths shown under --diff; the rest are counted


def _show_drift(found: dict, dirs: dict[str, str], user: str, group: str) -> None:
    if not _diff_wanted():
        return
    for path, mode in dirs.items():
        now = found["dirs"].get(path)
        if now != {"owner": user, "group": group, "mode": mode}:
            shown = f"{now['owner']}:{now['group']} {now['mode']}" if now else "missing"
            host.log(f"Will fix {path}: {shown} -> {user}:{group} {mode}", logger.info)
    details = found.get("details", {})
    listed = [(category, path) for category in DRIFT_CATEGORIES for path in found["drift"].get(category, [])]
    for category, path in listed[:DIFF_PATHS]:
        now = details.get(path)
        shown = f"{now[0]}:{now[1]} {now[2]}" if now else "?"
        host.log(f"Will fix {path!r}: {shown} -> {EXPECTED[category].format(user=user, group=group)}", logger.info)
    if len(listed) > DIFF_PATHS:
        host.log(f"... and {len(listed) - DIFF_PATHS} more drifted entries", logger.info)


@snapshot_operation
def layout(home: str, dirs: dict[str, str], user: str, group: str):
    """
    Ensure each of ``dirs`` ({path: octal mode}) exists as ``user:group`` with
    that mode, and that everything under ``home`` conforms: hf-cache entries
    keep the shared group, group read/write and (directories) setgid;
    everything else is owned by the account; nothing is world-writable;
    docker/ content is not group-writable. Only the entries found wrong are
    touched, and the commands name them.
    """
    found = current(host)["layout"]
    if found.get("unnamed"):
        logger.warning(f"[{host.name}] {found['unnamed']} drifted entries under {home} have names that are not UTF-8; "
                       f"they are left as they are: find {home} -name '*[! -~]*' shows them")
    changed = False
    program = q(ship.program("repair"))
    _show_drift(found, dirs, user, group)
    for path, mode in dirs.items():
        if found["dirs"].get(path) != {"owner": user, "group": group, "mode": mode}:
            changed = True
            yield f"python3 -c {program} dir={mode} {q(home)} {q(user)} {q(group)} {q(path)}"
    for category in DRIFT_CATEGORIES:
        paths = found["drift"].get(category, [])
        for start in range(0, len(paths), REPAIR_CHUNK):
            changed = True
            chunk = " ".join(q(p) for p in paths[start:start + REPAIR_CHUNK])
            yield f"python3 -c {program} {category} {q(home)} {q(user)} {q(group)} {chunk}"
    if not changed:
        host.noop(f"{home} and everything under it already conform")


@snapshot_operation
def docker_service():
    """Ensure the Docker engine's systemd unit is enabled and running."""
    state = current(host)["docker"]
    if state["enabled"] == "enabled" and state["active"] == "active":
        host.noop("docker is already enabled and running")
        return
    yield "systemctl enable --now docker"


def _file(path: str):
    """The snapshot's entry for a file the deploy writes: its owner, mode and sha256, False when it is not a
    regular file, None when absent."""
    return current(host)["files"].get(os.path.dirname(path), {}).get(os.path.basename(path))


def _diff_wanted() -> bool:
    return bool(getattr(getattr(host.state, "config", None), "DIFF", False))


def _show_diff(dest: str, current, content: bytes) -> None:
    """Under --diff, as pyinfra's own files operations do: the unified diff between the host's copy and ours."""
    if not _diff_wanted():
        return
    from pyinfra.facts.files import FileContents
    from pyinfra.operations.util.files import generate_color_diff

    host.log(f"Will {'modify' if current else 'create'} {dest}", logger.info)
    old = [line + "\n" for line in (host.get_fact(FileContents, path=dest) or [])] if current else []
    for line in generate_color_diff(old, content.decode(errors="replace").splitlines(keepends=True)):
        logger.info("  %s", line)


def _swap_in(dest: str, content: bytes, user: str, group: str, mode: str, check: str | None):
    """
    Upload ``content`` next to ``dest``, run ``check`` on it (with {candidate}
    substituted), and only then move it into place, keeping the previous
    version as ``dest``.previous. A candidate that fails the check is deleted
    and the old file stays in place.
    """
    current = _file(dest)
    if current is False:
        raise OperationError(f"{dest} exists but is not a regular file; move it away by hand")
    digest = hashlib.sha256(content).hexdigest()
    if current and current["sha256"] == digest:
        fixes = []
        if (current["owner"], current["group"]) != (user, group):
            fixes.append(f"chown {q(user)}:{q(group)} {q(dest)}")
        if current["mode"] != mode:
            fixes.append(f"chmod {mode} {q(dest)}")
        if fixes:
            yield " && ".join(fixes)
        else:
            host.noop(f"{dest} is already up to date")
        return

    _show_diff(dest, current, content)
    candidate = f"{dest}.candidate"
    yield FileUploadCommand(BytesIO(content), candidate,
                            remote_temp_filename=host.get_temp_filename(candidate))
    steps = [f"chown {q(user)}:{q(group)} {q(candidate)}", f"chmod {mode} {q(candidate)}"]
    if check:
        checked = check.format(candidate=q(candidate))
        steps.append(
            f"{{ out=$({checked} 2>&1) || {{ rm -f {q(candidate)}; "
            f"echo \"refused: the new {dest} failed its check, the current file is unchanged: $out\" >&2; "
            f"exit 1; }}; }}"
        )
    if current:
        steps.append(f"cp -p {q(dest)} {q(dest + '.previous')}")
    steps.append(f"mv -f {q(candidate)} {q(dest)}")
    yield " && ".join(steps)


@snapshot_operation
def checked_file(dest: str, content: str, user: str, group: str, mode: str = "644", check: str | None = None):
    """
    Ensure ``dest`` holds ``content`` with the given owner and mode. A new
    version replaces the old one only after ``check`` accepts it.

    + check: shell command run on the uploaded candidate, ``{candidate}`` is
      replaced by its quoted path; non-zero refuses the new file
    """
    yield from _swap_in(dest, content.encode(), user, group, mode, check)


@snapshot_operation
def account_env_file(dest: str, user: str, mode: str = "640"):
    """
    Ensure ``dest`` is templates/env.j2 rendered with the account's real
    ``uid`` and ``gid``, read when the operation runs: the account may be
    created by an earlier operation of the same deploy.
    """
    account = current(host)["account"]["user"]
    if account is None:
        if host.state.is_executing:
            raise OperationError(f"the account {user} does not exist, so {dest} cannot carry its ids")
        # Planning a fresh host: the account is created by an earlier operation.
        yield f"# write {dest} with the ids of {user} once it exists"
        return
    content = render.env_file(account["uid"], account["gid"])
    yield from _swap_in(dest, content.encode(), user, user, mode, None)


@snapshot_operation
def image_present(image: str, archive: str | None = None):
    """
    Ensure ``image`` is on the host: from ``archive`` (a `docker save` file on
    the control machine, gzipped or not) when given, else `docker pull`.
    An image already present is never pulled or loaded again.
    """
    if image in current(host)["docker"]["images"]:
        host.noop(f"{image} is already on the host")
        return
    if _diff_wanted():
        host.log(f"Will {'load' if archive else 'pull'} {image}: it is not on the host", logger.info)
    if not archive:
        yield f"docker pull {q(image)}"
        return
    remote = f"/var/tmp/sglang-image-{_file_digest(archive)[:16]}.tar"
    yield FileUploadCommand(archive, remote, remote_temp_filename=host.get_temp_filename(remote))
    yield (f"docker load -i {q(remote)} >/dev/null; loaded=$?; rm -f {q(remote)}; [ $loaded = 0 ] && "
           f"{{ docker image inspect {q(image)} >/dev/null 2>&1 || "
           f"{{ echo 'the archive {archive} does not contain {image}' >&2; exit 1; }}; }}")


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _image_id(image: str) -> str | None:
    return (current(host)["docker"]["images"].get(image) or {}).get("id")


def _section(gateway: str | None) -> dict:
    """The snapshot's stack and gate of the server (``gateway`` None) or of the gateway in router/<gateway>/."""
    snapshot = current(host)
    if gateway is None:
        return {"stack": snapshot["stack"], **snapshot["gate"]}
    found = snapshot.get("routers", {}).get(gateway) or {}
    return {"stack": found.get("stack") or {"container": None, "record": None, "current": False},
            "stamp": found.get("stamp"), "digest": found.get("digest"), "workers": found.get("workers")}


@snapshot_operation
def stack_up(project_dir: str, image: str, model: str | None, compose_sha: str, recreate_if=None,
             gateway: str | None = None):
    """
    Ensure the stack runs the current compose.yaml (``compose_sha``) from
    ``image``: `docker compose up -d` only when the service has no running
    container, or its container is not the one the last `up` recorded for
    the files as they are (hostside/stack.py), or it runs another image. A
    model switch recreates (--force-recreate), and so does ``recreate_if()``
    being true when it runs (the server's private config changed: compose
    cannot see a file's content). Otherwise nothing is restarted.

    + gateway: the slug of a gateway's stack (router/<slug>/, its own compose project) instead of the server's
    """
    stack = _section(gateway)["stack"]
    found = stack["container"]
    on_disk = (_file(f"{project_dir}/compose.yaml") or {}).get("sha256")
    reasons = []
    if found is None:
        reasons.append("the service has no container")
    elif found["state"] != "running":
        reasons.append(f"the container is {found['state']}")
    elif on_disk != compose_sha:
        reasons.append("compose.yaml changes")
    elif not stack["current"]:
        reasons.append("the container was not started from compose.yaml and .env as they are")
    elif found["image_id"] != _image_id(image):
        reasons.append(f"the container runs another image than {image}")
    forced = bool(recreate_if is not None and host.state.is_executing and recreate_if())
    if forced:
        reasons.append("the server's private config changed")
    if not reasons:
        host.noop("the stack already runs the current compose.yaml")
        return
    switched = found is not None and found["labels"].get("sglang.model") not in (None, model)
    force = " --force-recreate" if switched or forced else ""
    record = f" {q(GATEWAY_PROJECT.format(slug=gateway))} {GATEWAY_SERVICE}" if gateway else ""
    yield (f"cd {q(project_dir)} && docker compose up -d --remove-orphans{force} && "
           f"python3 -c {q(ship.program('stack'))} {q(project_dir)}{record}")


def _run_streamed(state, host, command: str, _stdin: str | None = None) -> bool:
    """Run a long command (the gate, a pull) with its progress streamed to the operator, prefixed with the host's name."""
    # The operation's own connector arguments (_sudo and friends) apply to this command too.
    arguments = {key: value for key, value in (host.current_op_global_arguments or {}).items()
                 if key in CONNECTOR_ARGUMENT_KEYS}
    if _stdin is not None:
        arguments["_stdin"] = _stdin
    status, _ = host.run_shell_command(StringCommand(command), print_output=True, **arguments)
    return status


@snapshot_operation
def not_failed_before(failed: str, sha: str, retry: bool = False):
    """
    Refuse, on this host only, to apply again the config (sha256 ``sha``)
    that already failed its gate here (the gate kept it as ``failed``),
    unless ``retry``: the host keeps serving its last known-good config and
    the run fails for it, saying how to go on.
    """
    if retry or (_file(failed) or {}).get("sha256") != sha:
        host.noop("this config has not failed its gate on this host")
        return
    message = (f"refused: this config failed its gate on this host before (kept as {failed}); the host keeps "
               "serving its last known-good config. Change the data, or run again with "
               "--data sglang_retry_failed=True")
    yield f"echo {q(message)} >&2; exit 1"


@snapshot_operation
def validated(home: str, image: str, gate: str, files: dict[str, str], always: bool = False,
              gateway: str | None = None):
    """
    Ensure what runs has passed the validation gate: unless the stamp the gate
    wrote matches the host as it is (hostside/stamp.py) and ``files`` (path:
    sha256, the plan's compose.yaml and scripts) and ``image`` are what is on
    it, run ``gate`` (wait for ready, test_tool_calling.sh, benchmark.sh, roll
    back on failure). ``always`` runs it regardless.

    + gateway: the slug of a gateway (router/<slug>/), whose stamp also covers its worker set
    """
    section = _section(gateway)
    found = section["stack"]["container"]
    same = (section["stamp"] is not None and section["stamp"] == section["digest"]
            and all((_file(path) or {}).get("sha256") == sha for path, sha in files.items())
            and found is not None and found["image_id"] == _image_id(image))
    if same and not always:
        host.noop("this compose.yaml, .env, image and scripts already passed the gate")
        return
    yield FunctionCommand(_run_streamed, (f"bash {q(gate)}",), {})


@snapshot_operation
def nvidia_runtime():
    """Ensure Docker lists the nvidia runtime (configured by nvidia-ctk, then a Docker restart)."""
    if "nvidia" in current(host)["docker"]["runtimes"]:
        host.noop("Docker already has the NVIDIA runtime")
        return
    yield "nvidia-ctk runtime configure --runtime=docker && systemctl restart docker"


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
    if not state["venv_python"]:
        changed = True
        yield f"python3 -m venv {t}/venv"
    if state["hub_versions"] != [hub_version]:
        changed = True
        index = "".join(f" {option}" for option in pip_index_options(index_url))
        yield (f"{t}/venv/bin/pip install --quiet --disable-pip-version-check --no-input{index} "
               f"{q('huggingface-hub==' + hub_version)}")
    if not changed:
        host.noop(f"{tools_dir}/venv already has huggingface_hub {hub_version}")
    yield from _swap_in(f"{tools_dir}/hfpull.py", script.encode(), "root", group, "644", None)


@snapshot_operation
def secret_file(dest: str, content: bytes | None, user: str):
    """
    Ensure ``dest`` holds ``content``, mode 0600 and owned by ``user``, or is
    absent when ``content`` is None. The secret is compared by its sha256 and
    travels only inside the upload; no copy of an older version is kept.
    """
    found = _file(dest)
    if content is None:
        if found is None:
            host.noop(f"{dest} is already absent (no token configured)")
        else:
            yield f"rm -f {q(dest)}"
        return
    digest = hashlib.sha256(content).hexdigest()
    if found and found["sha256"] == digest and (found["owner"], found["group"], found["mode"]) == (
            user, user, "600"):
        host.noop(f"{dest} already holds the configured token")
        return
    upload = f"{dest}.upload"
    # Through the command's stdin, as root, straight into a directory only the account can enter: never on a
    # command line, never in a file the SSH login writes (an SFTP upload under a sudo login goes via /tmp).
    yield StringCommand(
        f"umask 077 && head -c {len(content)} > {q(upload)} && chown {q(user)}:{q(user)} {q(upload)} && "
        f"chmod 600 {q(upload)} && mv -f {q(upload)} {q(dest)}",
        _stdin=content.decode())


def pull_command(tools_dir: str, hub: str, repo_id: str, revision: str, endpoint: str | None,
                 token_file: str | None, lock_wait: int, workers: int, locked: bool = False) -> str:
    args = [f"{tools_dir}/venv/bin/python", f"{tools_dir}/hfpull.py", "pull", "--cache-dir", hub,
            "--repo-id", repo_id, "--revision", revision, "--lock-wait", str(lock_wait), "--workers", str(workers)]
    if locked:
        args.append("--locked-stdin")
    if endpoint:
        args += ["--endpoint", endpoint]
    if token_file:
        args += ["--token-file", token_file]
    # umask 002: files the pull creates stay group-writable, so admins can pull by hand too.
    return "cd / && umask 002 && " + " ".join(q(a) for a in args)


def _revision_state(cache: dict, repo_id: str, revision: str) -> dict | None:
    for found_id, repo in cache["repos"].items():
        if found_id.lower() == repo_id.lower():
            return (repo.get("revisions") or {}).get(revision)
    return None


@snapshot_operation
def model_pulled(hub: str, repo_id: str, revision: str, tools_dir: str, lock_wait: int, workers: int,
                 endpoint: str | None = None, token_file: str | None = None, locked=None):
    """
    Ensure ``repo_id`` at commit ``revision`` is complete and verified in the
    cache ``hub``. Decided from the cache alone (the snapshot): a complete
    revision costs no request to the Hub. Otherwise hfpull.py fetches only
    what is missing, resuming partial files, ``workers`` files and
    connections at a time, and marks the snapshot complete only after every
    file matches the Hub's size and hash, and with ``locked`` (the lock's
    record, lock.LockedModel) the lock's sha256 of every file too: until then
    a complete revision whose content digest is not the lock's counts as not
    pulled.
    """
    cache = current(host)["models"]
    found = _revision_state(cache, repo_id, revision)
    matches = found and found.get("complete") and (locked is None or found.get("content") == locked.content)
    if matches:
        host.noop(f"{repo_id}@{revision[:12]} is already complete and verified in the cache"
                  + (" (as the lock records it)" if locked is not None else ""))
        return
    if _diff_wanted():
        state = "missing" if not found else "not verified against the lock" if found.get("complete") else \
            f"incomplete ({'; '.join(found.get('problems', [])[:3]) or 'unverified'})"
        host.log(f"Will pull {repo_id}@{revision[:12]}: {state}", logger.info)
    command = pull_command(tools_dir, hub, repo_id, revision, endpoint, token_file, lock_wait, workers,
                           locked is not None)
    stdin = {"_stdin": json.dumps(locked.record())} if locked is not None else {}
    yield FunctionCommand(_run_streamed, (command,), stdin)


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
def models_pruned(hub: str, keep: list[str], tools_dir: str):
    """
    Ensure the cache holds no revision other than ``keep`` ("org/name@commit")
    and those the compose files reference (the running config and its
    rollback). Removal goes through huggingface_hub's cache API, which keeps
    blobs still shared with a kept revision. A dry run lists what would go.
    """
    cache = current(host)["models"]
    plan = prune_plan(cache, keep)
    if not plan:
        host.noop("the cache holds only revisions this host serves or keeps")
        return
    for repo_id, commit, size in plan:
        logger.info(f"[{host.name}] prune: {repo_id}@{commit[:12]} ({human(size)}) is not kept")
    keep_all = sorted({*keep, *cache.get("referenced", [])})
    args = [f"{tools_dir}/venv/bin/python", f"{tools_dir}/hfpull.py", "prune", "--cache-dir", hub]
    for pinned in keep_all:
        args += ["--keep", pinned]
    yield FunctionCommand(_run_streamed, ("cd / && " + " ".join(q(a) for a in args),), {})


@snapshot_operation
def toolchain_image(tag: str, inputs_hash: str, dockerfile: str, context_dir: str, check: str,
                    label: str = "sglang.toolchain.inputs"):
    """
    Ensure the toolchain image ``tag`` exists, built from ``dockerfile`` with
    ``context_dir`` as context, and carries ``inputs_hash`` in ``label``: a
    re-run with the same inputs builds nothing. The build's last step checks
    the pins inside the new image, and ``check`` runs once more on the tagged
    result; an image that fails is removed, so compose never switches to it.
    """
    found = (current(host)["docker"]["images"].get(tag) or {}).get("labels", {}).get(label)
    if found == inputs_hash:
        host.noop(f"{tag} is already built from these inputs")
        return
    t = q(tag)
    # --no-cache: the pip step's text does not change when an index is fixed, so a cached layer from a
    # failed build would be reused with the wrong wheels in it (seen after a bad index was corrected).
    build = f"docker build --no-cache --network host -t {t} -f {q(dockerfile)} {q(context_dir)}"
    verify = (f"docker run --rm --entrypoint /bin/sh {t} -c {q(check)} || "
              f"{{ docker rmi {t} >/dev/null 2>&1; echo \"refused: {tag} failed its toolchain check and was "
              f"removed; the stack keeps its current image\" >&2; exit 1; }}")
    failed = f"echo \"refused: building {tag} failed (above); the stack keeps its current image\" >&2; exit 1"
    # The build streams its progress; a failed build tags nothing, so compose never sees it.
    yield FunctionCommand(_run_streamed, (f"if {build}; then {verify}; else {failed}; fi",), {})


@operation()
def fleet_barrier(reason: str):
    """
    An ordering point that changes nothing. pyinfra orders operations by each
    host's own sequence: a router-only host, which runs no gate, gives no
    reason to run its gateway operations after the workers' gates. Every host
    calls this at the same place (tasks/router.py), so everything before it on
    any host runs before everything after it on any host.
    """
    host.noop(reason)
    yield from ()


def _fleet_snapshot(name: str) -> dict | None:
    """Another host's snapshot as it is now (read again after its own commands ran), None when unreadable."""
    from . import factcache
    from .snapshot import Snapshot

    try:
        return factcache.current(host.inventory.get_host(name), Snapshot)
    except Exception as error:   # a host lost mid-run, or not reachable: its worker counts as not validated
        logger.warning(f"[{host.name}] the worker {name} could not be read ({error!r}); it counts as not validated")
        return None


def worker_validated(snapshot: dict | None, docker_dir: str, compose_sha: str) -> bool:
    """
    A worker passed its gate with the config its data asks for: the gate's
    stamp is the digest of what runs now, its container runs, and the
    compose.yaml in ``docker_dir`` is the one its plan renders (a host rolled
    back to an older config does not count until its own config passes).
    """
    if not snapshot or not snapshot.get("gate"):
        return False
    container = (snapshot.get("stack") or {}).get("container") or {}
    compose = ((snapshot.get("files") or {}).get(docker_dir) or {}).get("compose.yaml") or {}
    return bool(snapshot["gate"]["stamp"] and snapshot["gate"]["stamp"] == snapshot["gate"]["digest"]
                and container.get("state") == "running" and compose.get("sha256") == compose_sha)


@snapshot_operation
def gateway_workers(directory: str, gateway: str, url: str, workers, key_file: str | None = None):
    """
    Ensure the gateway in ``directory`` (router/<gateway>/) has exactly the
    ``workers`` (plan.Worker) that passed their gate with their own config:
    decided when the operation runs, from each worker's snapshot read after
    its own gate ran in this same run (tasks/router.py comes after
    tasks/validation.py). A worker outside this run (--limit) keeps the
    membership it has. On a difference, workers.json is rewritten (the
    gateway's launcher reads it on start) and the gateway's /workers API adds
    and removes workers without a restart (hostside/router_workers.py).
    """
    have = _section(gateway)["workers"]
    wanted = sorted(w.url for w in workers
                    if (w.url in (have or ()) if w.compose_sha is None
                        else worker_validated(_fleet_snapshot(w.host), w.docker_dir, w.compose_sha)))
    if host.state.is_executing:
        logger.info(f"[{host.name}] gateway {gateway}: workers that passed their gate: {wanted or 'none'}")
    if have is not None and sorted(have) == wanted:
        host.noop(f"the gateway already has the {len(wanted)} worker(s) that passed their gate")
        return
    if _diff_wanted():
        host.log(f"Will set the gateway's workers: {sorted(have or [])} -> {wanted}", logger.info)
    args = [directory, url, *([key_file] if key_file else [])]
    yield StringCommand(f"python3 -c {q(ship.program('router_workers'))} " + " ".join(q(a) for a in args),
                        _stdin=json.dumps(wanted))
