"""The lock (sglang.lock): what passed, pinned to the byte, and enforced on
every host.

    scripts/lock.sh [INVENTORY] [--update KEY[@REVISION] | --update image | --update wheels]

writes it (sglang_infra/fleet/lockgen.py); the deploy reads it here. One JSON file,
diff-friendly (sorted keys, one file per line of its own), committed by the
operator beside the inventory:

- models: per registry key, the repo id, the commit, whether the repo is
  gated ("gated": false, "auto" or "manual", as the Hub says), and every file
  with its size and sha256. An LFS file's sha256 is the one the Hub lists; a
  small regular file has only a git blob id in the Hub's API, so its sha256 is
  computed from its bytes when the lock is written ("sha256_from": "lfs" or
  "computed"), and its git blob id is kept beside it. So the lock lists a
  revision's files whole: a pull holding it asks the Hub for no listing.
- images: per image reference, the manifest digest the registry served, so
  compose runs `repo@sha256:...` and a tag moved upstream changes nothing.
- wheels: per toolchain pin (`name==version`), every wheel file the index
  serves for it with its sha256; the image build installs them with
  `pip install --require-hashes`.

With a lock present, a host's plan takes the commit, the image digest and the
wheel hashes from it; a lock that disagrees with the data is refused before
anything changes (problems()). Without one, nothing changes from before.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..hostside.pull.manifest import content_digest
from .registry import kept_keys as registry_kept_keys

FORMAT = 1
DEFAULT_NAME = "sglang.lock"
HEADER = ("Written by scripts/lock.sh: what passed, pinned to the byte. Commit this file; "
          "the deploy pulls exactly this. Update with scripts/lock.sh --update.")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class LockError(ValueError):
    """The lock file cannot be used as it is; the message names the file and the fix."""


@dataclass(frozen=True)
class LockedModel:
    key: str
    repo_id: str
    commit: str
    files: tuple[dict, ...]   # {"path", "size", "sha256", "sha256_from", "git_blob"?}
    gated: bool | str | None = None   # the Hub's word when the lock was written (False, "auto", "manual"); None: unsaid
    # what the model's config.json says of its shape (CONFIG_KEYS: layers, KV heads, head size, dtype), for the
    # preflight's fit on the GPUs (machine/modelfit.py); None: a lock written before it said so
    config: Mapping[str, Any] | None = None

    @property
    def weights(self) -> int:
        """Bytes of the weight files (the .safetensors, else the .bin / .pt / .pth ones), as the lock lists them."""
        for suffixes in ((".safetensors",), (".bin", ".pt", ".pth")):
            found = [f["size"] for f in self.files if f["path"].endswith(suffixes)]
            if found:
                return sum(found)
        return 0

    @property
    def content(self) -> str:
        """The digest of every file's path, size and sha256, as the host's pull manifest reports it."""
        return content_digest(self.files)

    def record(self) -> dict:
        """What the pull verifies against (hfpull.py --locked-stdin)."""
        return {"commit": self.commit, "files": [dict(f) for f in self.files],
                **({"gated": self.gated} if self.gated is not None else {})}


# The keys of a model's config.json the lock keeps (and of its text_config, where a multimodal model nests its
# language model's): what the KV cache of one token needs (machine/modelfit.py), nothing else.
CONFIG_FILE = "config.json"
CONFIG_KEYS = ("architectures", "model_type", "torch_dtype", "dtype", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "hidden_size", "max_position_embeddings", "layer_types",
               "full_attention_interval", "kv_lora_rank", "qk_rope_head_dim", "text_config")


def config_subset(config: Any) -> dict | None:
    """The CONFIG_KEYS of a parsed config.json (and of its text_config), or None when it is not a JSON object."""
    if not isinstance(config, Mapping):
        return None
    out = {key: config[key] for key in CONFIG_KEYS if key in config and key != "text_config"}
    text = config_subset(config.get("text_config"))
    return {**out, "text_config": text} if text else out


@dataclass(frozen=True)
class Lock:
    path: str
    written_at: str
    models: Mapping[str, LockedModel]
    images: Mapping[str, str]                       # reference -> "sha256:..."
    wheels: Mapping[str, tuple[tuple[str, str], ...]]  # "name==version" -> ((file name, sha256), ...)

    def pinned_image(self, reference: str) -> str | None:
        """``reference`` by digest (`repo@sha256:...`), or None when the lock has no digest for it."""
        digest = self.images.get(reference)
        return None if digest is None else f"{repository(reference)}@{digest}"


def repository(reference: str) -> str:
    """An image reference without its tag or digest: 'reg:5000/a/b:tag' -> 'reg:5000/a/b'."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: len(name) - len(last[-1]) + last[-1].index(":")]
    return name


def path_for(setting: str | None, inventory_dir: str | None) -> str | None:
    """The lock file for the `sglang_lock` setting: relative paths are beside the inventory; None is none."""
    if not setting:
        return None
    return setting if os.path.isabs(setting) else os.path.join(inventory_dir or os.getcwd(), setting)


# ---------------------------------------------------------------- reading

def _fail(path: str, what: str) -> LockError:
    return LockError(f"{path}: {what}. Fix: write it again with scripts/lock.sh, or restore it from version "
                     "control")


def parse(path: str, text: str) -> Lock:
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise _fail(path, f"not JSON ({error})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise _fail(path, f"not a lock of format {FORMAT}")
    models = {}
    for key, entry in (raw.get("models") or {}).items():
        try:
            files = tuple(sorted(({"path": f["path"], "size": int(f["size"]), "sha256": f["sha256"],
                                   "sha256_from": f["sha256_from"], **({"git_blob": f["git_blob"]}
                                                                       if f.get("git_blob") else {})}
                                  for f in entry["files"]), key=lambda f: f["path"]))
            gated = entry.get("gated")
            ok = (isinstance(entry["repo_id"], str) and _COMMIT.fullmatch(entry["commit"])
                  and (gated is None or isinstance(gated, bool) or gated in ("auto", "manual"))
                  and files and all(_SHA256.fullmatch(f["sha256"]) and f["sha256_from"] in ("lfs", "computed")
                                    and f["size"] >= 0 for f in files))
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise _fail(path, f"models[{key!r}] is not a repo id, a 40-hex commit, a list of files with size and "
                        "sha256, and a 'gated' of false, \"auto\" or \"manual\"")
        config = entry.get("config")
        if config is not None and not isinstance(config, dict):
            raise _fail(path, f"models[{key!r}].config is not the object config.json holds")
        models[key] = LockedModel(key, entry["repo_id"], entry["commit"], files, entry.get("gated"), config)
    images = raw.get("images") or {}
    if not all(isinstance(k, str) and isinstance(v, dict) and _DIGEST.fullmatch(str(v.get("digest")))
               for k, v in images.items()):
        raise _fail(path, "images must map references to {'digest': 'sha256:...'}")
    wheels = {}
    for pin, files in (raw.get("wheels") or {}).items():
        if not (isinstance(files, list) and files and all(
                isinstance(f, dict) and isinstance(f.get("file"), str) and _SHA256.fullmatch(str(f.get("sha256")))
                for f in files)):
            raise _fail(path, f"wheels[{pin!r}] must list the files with their sha256")
        wheels[pin] = tuple((f["file"], f["sha256"]) for f in files)
    return Lock(path=path, written_at=str(raw.get("written_at", "")), models=models,
                images={k: v["digest"] for k, v in images.items()}, wheels=wheels)


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, size: int) -> Lock:
    return parse(path, Path(path).read_text(encoding="utf-8"))


def load(path: str | None) -> Lock | None:
    """The lock at ``path``; None when there is no such file (the deploy then runs without a lock)."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return _load_cached(path, st.st_mtime_ns, st.st_size)


# ---------------------------------------------------------------- the deploy against the lock

def problems(lock: Lock, data: Mapping[str, Any], wanted_pins: Mapping[str, str] | None) -> list[tuple[str, str, str]]:
    """(key, problem, fix) wherever this host's data and the lock disagree. ``wanted_pins`` are the
    toolchain pins {name: version} when the host builds the toolchain image, else None."""
    out = []
    where = lock.path
    registry = data["sglang_models"]
    for key in registry_kept_keys(data):
        entry = registry.get(key)
        if not isinstance(entry, Mapping):
            continue  # judged by registry.problems
        locked = lock.models.get(key)
        if locked is None:
            out.append(("sglang_lock", f"{where} has no entry for the model {key!r}",
                        f"add it with scripts/lock.sh (or --update {key}@main to lock the branch head)"))
            continue
        if str(entry.get("repo_id", "")).lower() != locked.repo_id.lower():
            out.append(("sglang_models", f"entry {key!r} is {entry.get('repo_id')}, but {where} locks "
                        f"{locked.repo_id} under that key", f"run scripts/lock.sh --update {key}"))
        revision = entry.get("revision")
        if revision is not None and revision != locked.commit:
            out.append(("sglang_models", f"entry {key!r} pins revision {revision}, but {where} locks commit "
                        f"{locked.commit}",
                        f"lock the registry's revision with scripts/lock.sh --update {key}, or set 'revision' to "
                        f"{locked.commit!r} (or None, to follow the lock)"))
    image = data["sglang_image"]
    if not data["sglang_image_archive"] and "@" not in image and image not in lock.images:
        out.append(("sglang_lock", f"{where} has no digest for the image {image}",
                    "add it with scripts/lock.sh (or --update image)"))
    for name, version in (wanted_pins or {}).items():
        if f"{name}=={version}" not in lock.wheels:
            out.append(("sglang_lock", f"{where} has no hashes for the wheel {name}=={version}",
                        "add them with scripts/lock.sh (or --update wheels)"))
    return out


def with_commits(lock: Lock, data: Mapping[str, Any]) -> dict[str, Any]:
    """The host's data with each locked model's revision taken from the lock (a registry revision of None
    is fine when the lock has the commit)."""
    registry = dict(data["sglang_models"])
    for key, locked in lock.models.items():
        entry = registry.get(key)
        if isinstance(entry, Mapping) and entry.get("revision") is None:
            registry[key] = {**entry, "revision": locked.commit}
    return {**data, "sglang_models": registry}


# ---------------------------------------------------------------- writing

def document(models: Mapping[str, LockedModel], images: Mapping[str, str],
             wheels: Mapping[str, tuple[tuple[str, str], ...]], written_at: str) -> dict:
    return {
        "_": HEADER,
        "format": FORMAT,
        "written_by": "scripts/lock.sh (sglang_infra/models/lockgen.py)",
        "written_at": written_at,
        "models": {key: {"repo_id": m.repo_id, "commit": m.commit, "files": [dict(f) for f in m.files],
                         **({"gated": m.gated} if m.gated is not None else {}),
                         **({"config": dict(m.config)} if m.config is not None else {})}
                   for key, m in sorted(models.items())},
        "images": {ref: {"digest": digest, "pinned": f"{repository(ref)}@{digest}"}
                   for ref, digest in sorted(images.items())},
        "wheels": {pin: [{"file": name, "sha256": sha} for name, sha in sorted(files)]
                   for pin, files in sorted(wheels.items())},
    }


def render(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def body(doc: Mapping[str, Any]) -> dict:
    """What a lock says, without when it was written: two locks with the same body are the same lock."""
    return {k: v for k, v in doc.items() if k != "written_at"}
