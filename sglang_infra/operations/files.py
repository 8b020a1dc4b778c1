"""Files the deploy writes: swapped in only after their check (checked_file,
account_env_file), and the secret that travels only through stdin
(secret_file). Below them, what several task files do alike, as plain
functions that call checked_file: a file the service account owns, a
compose.yaml that compose accepts before it replaces the old one, and a set of
scripts put in place (the operations keep the names the task files give them:
the run log's)."""

from __future__ import annotations

import hashlib
from typing import Mapping

from pyinfra import host
from pyinfra.api import OperationError, StringCommand

from ..hostside.names import COMPOSE_FILE
from ..machine import ship
from ..plan import render
from ..run.facts import current
from ..run.operation import file_entry, q, show_diff, snapshot_operation


def put_command(dest: str, content: bytes, user: str, group: str, mode: str, keep_previous: bool = False,
                check: str | None = None) -> StringCommand:
    """
    hostside/write/put.py writing ``content`` (through the command's stdin, never
    on its command line) into ``dest``: a new file root creates itself,
    checked, then renamed into place; a symlink at ``dest``, beside it or on
    the way to it is refused and named, never followed.
    """
    words = [q(dest), q(user), q(group), mode, str(len(content))]
    if keep_previous:
        words.append("--keep-previous")
    if check:
        words += ["--check", q(check)]
    return StringCommand(f"{ship.command('write.put')} {' '.join(words)}", _stdin=content.decode())


def swap_in(dest: str, content: bytes, user: str, group: str, mode: str, check: str | None):
    """
    Write ``content`` next to ``dest``, run ``check`` on it (with {candidate}
    substituted), and only then move it into place, keeping the previous
    version as ``dest``.previous. A candidate that fails the check is deleted
    and the old file stays in place.
    """
    current = file_entry(dest)
    if current is False:
        raise OperationError(f"{dest} exists but is not a regular file; move it away by hand")
    digest = hashlib.sha256(content).hexdigest()
    if current and current["sha256"] == digest:
        if (current["owner"], current["group"], current["mode"]) != (user, group, mode):
            # The same content, rewritten with its owner and mode: a chown by path would follow a link.
            yield put_command(dest, content, user, group, mode)
        else:
            host.noop(f"{dest} is already up to date")
        return

    show_diff(dest, current, content)
    # put.py names its candidate by its own pid, and hands it to the check as $CANDIDATE
    checked = check.format(candidate='"$CANDIDATE"') if check else None
    yield put_command(dest, content, user, group, mode, keep_previous=bool(current), check=checked)


@snapshot_operation
def checked_file(dest: str, content: str, user: str, group: str, mode: str = "644", check: str | None = None):
    """
    Ensure ``dest`` holds ``content`` with the given owner and mode. A new
    version replaces the old one only after ``check`` accepts it.

    + check: shell command run on the uploaded candidate, ``{candidate}`` is
      replaced by its quoted path; non-zero refuses the new file
    """
    yield from swap_in(dest, content.encode(), user, group, mode, check)


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
    yield from swap_in(dest, content.encode(), user, user, mode, None)


@snapshot_operation
def secret_file(dest: str, content: bytes | None, user: str):
    """
    Ensure ``dest`` holds ``content``, mode 0600 and owned by ``user``, or is
    absent when ``content`` is None. The secret is compared by its sha256 and
    travels only inside the upload; no copy of an older version is kept.
    """
    found = file_entry(dest)
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
    # Through the command's stdin, as root, straight into a directory only the account can enter: never on a
    # command line, never in a file the SSH login writes (an SFTP upload under a sudo login goes via /tmp).
    yield put_command(dest, content, user, user, "600")


def account_file(name: str, dest: str, content: str, account: str, mode: str = "644", check: str | None = None):
    """checked_file: ``dest`` holds ``content``, owned by ``account`` and its group."""
    return checked_file(name=name, dest=dest, content=content, user=account, group=account, mode=mode, check=check)


def compose_file(name: str, directory: str, content: str, account: str):
    """``directory``/compose.yaml holds ``content``; a new version replaces the old one only after the host's own
    `docker compose config -q` accepts it, in that directory."""
    return account_file(name, f"{directory}/{COMPOSE_FILE}", content, account,
                        check=f"docker compose --project-directory {directory} -f {{candidate}} config -q")


def scripts_in_place(directory: str, scripts: Mapping[str, str], account: str) -> None:
    """Each of ``scripts`` (file name: text, in that order) as ``directory``/name: a script 0755, the gateway's
    launcher (launch.py, which python reads) 0644."""
    for name, text in scripts.items():
        account_file(f"Ensure {directory}/{name} is up to date", f"{directory}/{name}", text, account,
                     mode="644" if name.endswith(".py") else "755")
