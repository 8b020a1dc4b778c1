"""Custom facts. Each one is a single remote command that prints `key=value`
lines, so a host is read in as few round trips as possible.
"""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase


def _kv_lines(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def _first(values: dict[str, list[str]], key: str) -> str:
    return (values.get(key) or [""])[0]


def _passwd_entry(line: str) -> dict[str, Any] | None:
    parts = line.split(":")
    if len(parts) < 7 or not parts[2].isdigit():
        return None
    return {"name": parts[0], "uid": int(parts[2]), "gid": int(parts[3]), "home": parts[5], "shell": parts[6]}


def _group_entry(line: str) -> dict[str, Any] | None:
    parts = line.split(":")
    if len(parts) < 4 or not parts[2].isdigit():
        return None
    members = [m for m in parts[3].split(",") if m]
    return {"name": parts[0], "gid": int(parts[2]), "members": members}


class HostState(FactBase):
    """
    Everything the deploy needs to know about a host before it acts, in one
    command: the OS, the service account and its groups, the admins, and
    whether a Docker engine with compose v2 already answers.

    The password hash never leaves the host: only whether it is locked.
    """

    def command(self, user="sglang", admins=(), groups=("docker",), uid=None, gid=None):
        q = shlex.quote
        parts = [
            '. /etc/os-release 2>/dev/null; echo "os_id=$ID"; echo "os_version=$VERSION_ID"',
            f'echo "user=$(getent passwd {q(user)})"',
            f'echo "group=$(getent group {q(user)})"',
            f'echo "supplementary=$(id -nG {q(user)} 2>/dev/null)"',
            # Only the first character of the hash field: '!' or '*' means locked.
            f'echo "password=$(getent shadow {q(user)} | cut -d: -f2 | cut -c1)"',
            'echo "docker_server=$(docker version --format "{{.Server.Version}}" 2>/dev/null)"',
            'echo "docker_compose=$(docker compose version --short 2>/dev/null)"',
            'echo "docker_active=$(systemctl is-active docker 2>/dev/null)"',
            'echo "docker_enabled=$(systemctl is-enabled docker 2>/dev/null)"',
        ]
        if uid is not None:
            parts.append(f'echo "uid_owner=$(getent passwd {int(uid)} | cut -d: -f1)"')
        if gid is not None:
            parts.append(f'echo "gid_owner=$(getent group {int(gid)} | cut -d: -f1)"')
        for name in groups:
            parts.append(f'echo "extra_group=$(getent group {q(name)})"')
        for admin in admins:
            parts.append(f"getent passwd {q(admin)} >/dev/null && echo admin={q(admin)}")
        return "; ".join(parts) + "; true"

    def process(self, output):
        values = _kv_lines(output)
        user = _passwd_entry(_first(values, "user"))
        group = _group_entry(_first(values, "group"))
        extra_groups = [_group_entry(line) for line in values.get("extra_group", [])]
        password = _first(values, "password")
        return {
            "os_id": _first(values, "os_id") or None,
            "os_version": _first(values, "os_version") or None,
            "user": user,
            "group": group,
            "extra_groups": {g["name"]: g for g in extra_groups if g},
            "supplementary": _first(values, "supplementary").split() if user else [],
            "password_locked": password in ("!", "*") if user else None,
            "docker_server": _first(values, "docker_server") or None,
            "docker_compose": _first(values, "docker_compose") or None,
            "docker_active": _first(values, "docker_active") or None,
            "docker_enabled": _first(values, "docker_enabled") or None,
            "uid_owner": _first(values, "uid_owner") or None,
            "gid_owner": _first(values, "gid_owner") or None,
            "admins_present": values.get("admin", []),
        }


def engine_works(state: dict) -> bool:
    """A Docker engine that answers and has compose v2 (or newer)."""
    compose = (state.get("docker_compose") or "").lstrip("v")
    major = compose.split(".")[0]
    return bool(state.get("docker_server")) and major.isdigit() and int(major) >= 2


# Drift categories found by TreeDrift, each with the fix the operation applies.
DRIFT_FIXES = {
    "cache_group": "chgrp -h {group}",     # entry in hf-cache lost the shared group
    "cache_file_mode": "chmod g+rw",       # file in hf-cache lost group read/write
    "cache_dir_mode": "chmod g+rwxs",      # directory in hf-cache lost group rwx or setgid
    "owner": "chown -h {user}:{group}",    # entry outside hf-cache not owned by the account
    "world_writable": "chmod o-w",         # anything under home writable by everyone
    "docker_group_writable": "chmod g-w",  # docker/ content must not be group-writable
}


class TreeDrift(FactBase):
    """
    Lists only the non-conforming entries under the service account's home,
    by category, in one walk of the tree. Contents are never read, so a
    multi-terabyte cache costs one stat per entry.

    Returns {category: [path, ...]} with only non-empty categories, or {} when
    the home or the account does not exist yet.
    """

    def command(self, home, user="sglang", group="sglang"):
        q = shlex.quote
        cache, docker = q(f"{home}/hf-cache"), q(f"{home}/docker")
        home, user, group = q(home), q(user), q(group)
        return (
            f"getent passwd {user} >/dev/null && getent group {group} >/dev/null && [ -d {home} ] || exit 0; "
            f"if [ -d {cache} ]; then find {cache} -mindepth 1 "
            f"\\( ! -group {group} -printf 'cache_group=%p\\n' \\) , "
            f"\\( ! -type l ! -type d ! -perm -060 -printf 'cache_file_mode=%p\\n' \\) , "
            f"\\( -type d ! -perm -2070 -printf 'cache_dir_mode=%p\\n' \\); fi; "
            f"find {home} -mindepth 1 \\( -path {cache} -prune \\) -o "
            f"\\( \\( ! -user {user} -o ! -group {group} \\) -printf 'owner=%p\\n' \\); "
            f"find {home} ! -type l -perm -002 -printf 'world_writable=%p\\n'; "
            f"if [ -d {docker} ]; then find {docker} -mindepth 1 ! -type l -perm -020 "
            f"-printf 'docker_group_writable=%p\\n'; fi; true"
        )

    def process(self, output):
        return _kv_lines(output)

    def default(self):
        return {}



class FileState(FactBase):
    """
    Owner, group, octal mode and sha256 of one regular file, in one command.
    Returns None when the path does not exist and False when it is not a file.
    """

    def command(self, path):
        p = shlex.quote(path)
        return (
            f"if [ -L {p} ] || {{ [ -e {p} ] && [ ! -f {p} ]; }}; then echo kind=other; "
            f"elif [ -f {p} ]; then echo kind=file; stat -c 'owner=%U' {p}; stat -c 'group=%G' {p}; "
            f"stat -c 'mode=%a' {p}; echo sha256=$(sha256sum < {p} | cut -d' ' -f1); fi"
        )

    def process(self, output):
        values = _kv_lines(output)
        kind = _first(values, "kind")
        if kind == "other":
            return False
        if kind != "file":
            return None
        return {key: _first(values, key) for key in ("owner", "group", "mode", "sha256")}
