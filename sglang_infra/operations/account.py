"""The service account and the layout under its home (with the --diff
listing of what drifted)."""

from __future__ import annotations

from typing import Iterable

from pyinfra import host, logger
from pyinfra.api import StringCommand

from ..hostside.printable import printable
from ..machine import ship
from ..machine.platforms import NOLOGIN_SHELL
from ..run.facts import current
from ..run.operation import diff_wanted, q, snapshot_operation

# Drift categories the snapshot lists (hostside/read/snapshot.py, layout), each repaired by hostside/write/repair.py.
DRIFT_CATEGORIES = ("cache_group", "cache_file_mode", "cache_dir_mode", "owner", "world_writable",
                    "docker_group_writable")
# Bytes of one repair command, program and paths together, as the shell receives it: pyinfra runs a command as
# one `sh -c` argument, and Linux refuses any one argument longer than 128 KiB (MAX_ARG_STRLEN), whatever the
# count of paths in it. Paths are batched by their size, not their count.
REPAIR_COMMAND_BYTES = 96 * 1024


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
    if not diff_wanted():
        return
    for path, mode in dirs.items():
        now = found["dirs"].get(path)
        if now != {"owner": user, "group": group, "mode": mode}:
            shown = f"{now['owner']}:{now['group']} {now['mode']}" if now else "missing"
            host.log(f"Will fix {path}: {printable(shown)} -> {user}:{group} {mode}", logger.info)
    details = found.get("details", {})
    listed = [(category, path) for category in DRIFT_CATEGORIES for path in found["drift"].get(category, [])]
    for category, path in listed[:DIFF_PATHS]:
        now = details.get(path)
        shown = f"{now[0]}:{now[1]} {now[2]}" if now else "?"
        host.log(f"Will fix {path!r}: {printable(shown)} -> {EXPECTED[category].format(user=user, group=group)}",
                 logger.info)
    if len(listed) > DIFF_PATHS:
        host.log(f"... and {len(listed) - DIFF_PATHS} more drifted entries", logger.info)


def by_size(prefix: str, words: list[str], limit: int):
    """``words`` in batches, each of which with ``prefix`` stays within ``limit`` bytes once quoted again for
    `sh -c` (a word too long alone goes in a batch of its own)."""
    batch: list[str] = []
    size = len(q(prefix))
    for word in words:
        cost = 1 + len(q(word))
        if batch and size + cost > limit:
            yield batch
            batch, size = [], len(q(prefix))
        batch.append(word)
        size += cost
    if batch:
        yield batch


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
    if found.get("linked"):
        more = f" and {found['linked_more']} more" if found.get("linked_more") else ""
        logger.warning(f"[{host.name}] files under {home} with more than one hard link, which the deploy never makes, "
                       "are left as they are (their owner and mode are not repaired: another name may be a file "
                       f"from elsewhere): {', '.join(printable(p) for p in found['linked'])}{more}")
    changed = False
    program = ship.command("write.repair")
    _show_drift(found, dirs, user, group)
    for path, mode in dirs.items():
        if found["dirs"].get(path) != {"owner": user, "group": group, "mode": mode}:
            changed = True
            yield f"{program} dir={mode} {q(home)} {q(user)} {q(group)} {q(path)}"
    for category in DRIFT_CATEGORIES:
        prefix = f"{program} {category} {q(home)} {q(user)} {q(group)}"
        for batch in by_size(prefix, [q(p) for p in found["drift"].get(category, [])], REPAIR_COMMAND_BYTES):
            changed = True
            yield " ".join([prefix, *batch])
    if not changed:
        host.noop(f"{home} and everything under it already conform")
