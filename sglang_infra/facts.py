"""Custom facts. Each one is a single remote command that prints `key=value`
lines, so a host is read in as few round trips as possible.
"""

from __future__ import annotations

import json
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
            # Presence checks only: starting the docker CLI and the compose plugin costs
            # ~100 ms of CPU per host on every run, which dominated a fleet re-run.
            'echo "docker_cli=$(command -v docker)"',
            '[ -S /var/run/docker.sock ] && echo docker_socket=yes',
            "for d in /usr/libexec/docker/cli-plugins /usr/lib/docker/cli-plugins /usr/local/lib/docker/cli-plugins"
            " /usr/local/libexec/docker/cli-plugins; do"
            ' [ -x "$d/docker-compose" ] && echo "docker_compose_plugin=$d/docker-compose"; done',
            'echo "docker_active=$(systemctl is-active docker 2>/dev/null)"',
            'echo "python3=$(command -v python3)"',
            'echo "arch=$(dpkg --print-architecture 2>/dev/null)"',
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
            "docker_cli": _first(values, "docker_cli") or None,
            "docker_socket": _first(values, "docker_socket") == "yes",
            "docker_compose_plugin": _first(values, "docker_compose_plugin") or None,
            "docker_active": _first(values, "docker_active") or None,
            "python3": _first(values, "python3") or None,
            "arch": _first(values, "arch") or None,
            "docker_enabled": _first(values, "docker_enabled") or None,
            "uid_owner": _first(values, "uid_owner") or None,
            "gid_owner": _first(values, "gid_owner") or None,
            "admins_present": values.get("admin", []),
        }


def engine_works(state: dict) -> bool:
    """
    A Docker engine that is up (active unit, listening socket, CLI present)
    and has the compose v2 CLI plugin. Compose v1 was a standalone program,
    never a plugin, so the plugin's presence means v2 or newer.
    """
    return bool(state.get("docker_cli") and state.get("docker_socket") and state.get("docker_active") == "active"
                and state.get("docker_compose_plugin"))


# Drift categories found by TreeDrift, each with the fix the operation applies.
DRIFT_FIXES = {
    "cache_group": "chgrp -h {group}",     # entry in hf-cache lost the shared group
    "cache_file_mode": "chmod g+rw",       # file in hf-cache lost group read/write
    "cache_dir_mode": "chmod g+rwxs",      # directory in hf-cache lost group rwx or setgid
    "owner": "chown -h {user}:{group}",    # entry outside hf-cache not owned by the account
    "world_writable": "chmod o-w",         # anything under home writable by everyone
    "docker_group_writable": "chmod g-w",  # docker/ content must not be group-writable
}


class Layout(FactBase):
    """
    The managed directories and everything below the service account's home
    that does not conform, in one command and one walk of the tree. Contents
    are never read, so a multi-terabyte cache costs one stat per entry.

    Returns {"dirs": {path: {"owner", "group", "mode"} or None}, "drift":
    {category: [path, ...]}} with only non-empty categories. Drift is only
    looked for once the account exists.
    """

    def command(self, home, dirs=(), user="sglang", group="sglang"):
        q = shlex.quote
        cache, docker, results = q(f"{home}/hf-cache"), q(f"{home}/docker"), q(f"{home}/results")
        parts = [
            f"if [ -d {q(d)} ] && [ ! -L {q(d)} ]; then stat -c 'dir=%n\t%U\t%G\t%a' {q(d)}; fi"
            for d in dirs
        ]
        home, user, group = q(home), q(user), q(group)
        parts.append(
            f"getent passwd {user} >/dev/null && getent group {group} >/dev/null && [ -d {home} ] || exit 0; "
            f"if [ -d {cache} ]; then find {cache} -mindepth 1 "
            f"\\( ! -group {group} -printf 'cache_group=%p\\n' \\) , "
            f"\\( ! -type l ! -type d ! -perm -060 -printf 'cache_file_mode=%p\\n' \\) , "
            f"\\( -type d ! -perm -2070 -printf 'cache_dir_mode=%p\\n' \\); fi; "
            f"find {home} -mindepth 1 \\( -path {cache} -prune -o -path {results} -prune \\) -o "
            f"\\( \\( ! -user {user} -o ! -group {group} \\) -printf 'owner=%p\\n' \\); "
            f"find {home} ! -type l -perm -002 -printf 'world_writable=%p\\n'; "
            f"if [ -d {docker} ]; then find {docker} -mindepth 1 ! -type l -perm -020 "
            f"-printf 'docker_group_writable=%p\\n'; fi"
        )
        return "; ".join(parts) + "; true"

    def process(self, output):
        values = _kv_lines(output)
        dirs = {}
        for line in values.pop("dir", []):
            path, owner, group, mode = line.split("\t")
            dirs[path] = {"owner": owner, "group": group, "mode": mode}
        return {"dirs": dirs, "drift": {k: v for k, v in values.items() if k in DRIFT_FIXES}}

    def default(self):
        return {"dirs": {}, "drift": {}}


# Written next to compose.yaml by the validation gate: the digest of what last passed.
VALIDATED_STAMP = ".validated"


class DirectoryFiles(FactBase):
    """
    Owner, group, octal mode and sha256 of every entry directly in one
    directory, in one command: the handful of files the deploy writes there
    share one round trip. Entries that are not regular files map to False;
    the validation stamp also carries its "content". Returns {} when the
    directory does not exist.
    """

    def command(self, path):
        p = shlex.quote(path)
        # The validation stamp is small and not secret: its content comes along.
        reads = (f"[ -f {VALIDATED_STAMP} ] && printf 'content=%s\\t%s\\n' {VALIDATED_STAMP} "
                 f"\"$(head -c 512 {VALIDATED_STAMP} | tr '\\n' ' ')\"; ")
        return (
            f"cd {p} 2>/dev/null || exit 0; {reads}for f in * .[!.]*; do "
            "if [ -f \"$f\" ] && [ ! -L \"$f\" ]; then "
            "printf 'file=%s\\t%s\\t%s\\n' \"$f\" \"$(stat -c '%U\t%G\t%a' \"$f\")\" "
            "\"$(sha256sum < \"$f\" | cut -d' ' -f1)\"; "
            "elif [ -e \"$f\" ] || [ -L \"$f\" ]; then printf 'other=%s\\n' \"$f\"; fi; done"
        )

    def process(self, output):
        values = _kv_lines(output)
        out: dict[str, Any] = {name: False for name in values.get("other", [])}
        contents = dict(line.split("\t", 1) if "\t" in line else (line, "") for line in values.get("content", []))
        for line in values.get("file", []):
            name, owner, group, mode, sha256 = line.split("\t")
            out[name] = {"owner": owner, "group": group, "mode": mode, "sha256": sha256}
            if name in contents:
                out[name]["content"] = contents[name].strip()
        return out

    def default(self):
        return {}


class GpuFacts(FactBase):
    """
    The GPUs (index, name, compute capability, memory), how each pair is
    linked (`nvidia-smi topo -m`), and whether Docker has the NVIDIA runtime.
    Empty on a host without nvidia-smi.
    """

    def command(self):
        return (
            "command -v nvidia-smi >/dev/null 2>&1 || exit 0; "
            "echo @query; nvidia-smi --query-gpu=index,name,compute_cap,memory.total --format=csv,noheader,nounits; "
            "echo @topo; nvidia-smi topo -m 2>/dev/null; "
            "echo @runtimes; docker info --format '{{json .Runtimes}}' 2>/dev/null; true"
        )

    def process(self, output):
        from .gpus import parse_fact_output

        return parse_fact_output(output)

    def default(self):
        from .gpus import GpuInventory

        return GpuInventory()


class StackState(FactBase):
    """
    The compose stack as Docker sees it, in one command: the image's id (or
    none when it is not on the host), the config hash compose computes for
    each service of the current compose.yaml, and each container's state,
    config hash and model label (`docker compose ps` JSON).
    """

    def command(self, project_dir, image):
        d, i = shlex.quote(project_dir), shlex.quote(image)
        return (
            "command -v docker >/dev/null 2>&1 || exit 0; "
            f"echo @image; docker image inspect --format '{{{{.Id}}}}' {i} 2>/dev/null; "
            f"cd {d} 2>/dev/null && [ -f compose.yaml ] || exit 0; "
            "echo @hash; docker compose config --hash '*' 2>/dev/null; "
            "echo @ps; docker compose ps -a --format json 2>/dev/null; true"
        )

    def process(self, output):
        sections: dict[str, list[str]] = {}
        current = None
        for line in output:
            if line in ("@image", "@hash", "@ps"):
                current = line[1:]
                sections[current] = []
            elif current:
                sections[current].append(line)
        hashes = dict(line.split(" ", 1) for line in sections.get("hash", []) if " " in line)
        containers = []
        for line in sections.get("ps", []):
            line = line.strip()
            if not line:
                continue
            parsed = json.loads(line)
            for entry in parsed if isinstance(parsed, list) else [parsed]:
                labels = dict(item.split("=", 1) for item in (entry.get("Labels") or "").split(",") if "=" in item)
                containers.append({
                    "service": entry.get("Service"),
                    "state": entry.get("State"),
                    "config_hash": labels.get("com.docker.compose.config-hash"),
                    "model": labels.get("sglang.model"),
                    "image_id": labels.get("com.docker.compose.image"),
                    "name": entry.get("Name"),
                })
        image = (sections.get("image") or [""])[0].strip()
        return {"image_id": image or None, "hashes": hashes, "containers": containers}

    def default(self):
        return {"image_id": None, "hashes": {}, "containers": []}


class ModelCache(FactBase):
    """
    The models in hf-cache/hub, read from the cache itself without any request
    to the Hub (sglang_infra/cachestate.py, run by the host's python3: refs,
    snapshots, the manifest each verified pull leaves, partial downloads), and
    the revisions the compose files in ``docker_dir`` reference (their
    `sglang.model` label: the running config, the candidate and the
    known-good one kept for rollback).

    Returns {"repos": {repo_id: {...}}, "referenced": ["org/name@commit", ...]}.
    """

    def command(self, hub, docker_dir):
        from pathlib import Path

        source = (Path(__file__).resolve().parent / "cachestate.py").read_text(encoding="utf-8")
        q = shlex.quote
        return (
            "command -v python3 >/dev/null 2>&1 || exit 0; "
            f"echo @scan; python3 -c {q(source)} {q(hub)}; "
            f"echo @referenced; cat {q(docker_dir)}/compose.yaml* 2>/dev/null | "
            "sed -n 's/^ *sglang\\.model: *\"\\{0,1\\}\\([^\"]*\\)\"\\{0,1\\} *$/\\1/p'; true"
        )

    def process(self, output):
        sections: dict[str, list[str]] = {"scan": [], "referenced": []}
        current = None
        for line in output:
            if line in ("@scan", "@referenced"):
                current = line[1:]
            elif current:
                sections[current].append(line)
        text = "\n".join(sections["scan"]).strip()
        scan = json.loads(text) if text else {"repos": {}}
        scan["referenced"] = sorted({line.strip() for line in sections["referenced"] if "@" in line})
        return scan

    def default(self):
        return {"repos": {}, "referenced": []}


class PullTools(FactBase):
    """
    The pull's Python environment under ``tools_dir``: whether the host's
    python3 can make a venv, the venv's python, the huggingface_hub release
    installed in it (read from its dist-info, without starting Python), and
    the secret directory's owner and mode.
    """

    def command(self, tools_dir):
        t = shlex.quote(tools_dir)
        return (
            'echo "python3=$(command -v python3)"; '
            "python3 -c 'import ensurepip, venv' >/dev/null 2>&1 && echo venv_module=yes; "
            f"[ -x {t}/venv/bin/python ] && echo venv_python=yes; "
            f"for d in {t}/venv/lib/python3*/site-packages/huggingface_hub-*.dist-info; do "
            '[ -d "$d" ] && echo "hub_dist=${d##*/}"; done; '
            f"[ -d {t} ] && stat -c 'tools=%U\t%G\t%a' {t}; "
            f"[ -d {t}/secret ] && stat -c 'secret=%U\t%G\t%a' {t}/secret; true"
        )

    def process(self, output):
        values = _kv_lines(output)
        versions = [d[len("huggingface_hub-"):-len(".dist-info")] for d in values.get("hub_dist", [])]

        def stat(key):
            line = _first(values, key)
            return dict(zip(("owner", "group", "mode"), line.split("\t"))) if line else None

        return {
            "python3": _first(values, "python3") or None,
            "venv_module": _first(values, "venv_module") == "yes",
            "venv_python": _first(values, "venv_python") == "yes",
            "hub_versions": versions,
            "tools": stat("tools"),
            "secret": stat("secret"),
        }

    def default(self):
        return {"python3": None, "venv_module": False, "venv_python": False, "hub_versions": [], "tools": None,
                "secret": None}


class ImageLabel(FactBase):
    """One label of a local image: its value ("" when unset), or None when the image is not on the host."""

    def command(self, image, label):
        q = shlex.quote
        fmt = "{{ index .Config.Labels " + json.dumps(label) + " }}"
        return (f"command -v docker >/dev/null 2>&1 || exit 0; "
                f"docker image inspect --format {q(fmt)} {q(image)} 2>/dev/null | sed 's/^/label=/'; true")

    def process(self, output):
        values = _kv_lines(output)
        if "label" not in values:
            return None
        value = _first(values, "label")
        return "" if value == "<no value>" else value

    def default(self):
        return None
