"""Files the deploy writes: swapped in only after their check (checked_file,
account_env_file), and the secret that travels only through stdin
(secret_file)."""

from __future__ import annotations

import hashlib
from io import BytesIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, StringCommand

from .. import render
from ..snapshot import current
from .base import file_entry, q, show_diff, snapshot_operation


def swap_in(dest: str, content: bytes, user: str, group: str, mode: str, check: str | None):
    """
    Upload ``content`` next to ``dest``, run ``check`` on it (with {candidate}
    substituted), and only then move it into place, keeping the previous
    version as ``dest``.previous. A candidate that fails the check is deleted
    and the old file stays in place.
    """
    current = file_entry(dest)
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

    show_diff(dest, current, content)
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
    upload = f"{dest}.upload"
    # Through the command's stdin, as root, straight into a directory only the account can enter: never on a
    # command line, never in a file the SSH login writes (an SFTP upload under a sudo login goes via /tmp).
    yield StringCommand(
        f"umask 077 && head -c {len(content)} > {q(upload)} && chown {q(user)}:{q(user)} {q(upload)} && "
        f"chmod 600 {q(upload)} && mv -f {q(upload)} {q(dest)}",
        _stdin=content.decode())
