"""The vendors' apt signing keys the deploy writes, each pinned by its full fingerprint, and the judgement of a
keyring as the snapshot reads it (hostside/read/openpgp.py).

apt trusts every key of a `signed-by` keyring, so a keyring is sound only when it holds exactly the pinned key
(one primary key with the pinned fingerprint, and its subkeys), in a regular file (not a link) of root's that no
group or other user can write. Anything else is replaced by the key downloaded anew and checked on the host
(hostside/write/keyring.py); a download that is not exactly the pinned key is refused and the keyring removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

KEYRING_DIR = "/etc/apt/keyrings"
# The keyrings' names, each also its apt source's file name below /etc/apt/sources.list.d/.
DOCKER, NVIDIA_TOOLKIT, NVIDIA_CUDA = "docker", "nvidia-container-toolkit", "nvidia-cuda"
# The data key that pins each one's fingerprint: a refusal names it, for a mirror that signs with its own key.
DATA_KEYS = {DOCKER: "sglang_docker_apt_key_fingerprint", NVIDIA_TOOLKIT: "sglang_nvidia_toolkit_apt_key_fingerprint",
             NVIDIA_CUDA: "sglang_nvidia_cuda_apt_key_fingerprint"}


def keyring_path(name: str) -> str:
    return f"{KEYRING_DIR}/{name}.asc"


# Every keyring the deploy may write: the snapshot reads each on every run.
KEYRING_PATHS = tuple(keyring_path(name) for name in (DOCKER, NVIDIA_TOOLKIT, NVIDIA_CUDA))


@dataclass(frozen=True)
class VendorKey:
    """A vendor's apt signing key: who signs, where apt finds it, where it is downloaded from, and the full
    fingerprint it must have (the data key that sets it names the fix for a mirror that signs with its own)."""

    vendor: str
    name: str            # DOCKER, NVIDIA_TOOLKIT or NVIDIA_CUDA
    key_url: str
    fingerprint: str     # 40 upper-case hex digits

    @property
    def keyring(self) -> str:
        return keyring_path(self.name)

    @property
    def data_key(self) -> str:
        return DATA_KEYS[self.name]


def problem(found: Mapping[str, Any] | None, fingerprint: str) -> str | None:
    """Why the keyring the snapshot read (openpgp.keyring's entry) is not sound for ``fingerprint``, None when it
    is; an absent keyring (None) is 'absent'."""
    if found is None:
        return "absent"
    if found.get("type") != "file":
        return f"a {found.get('type', 'thing')} where a regular file must be"
    if found.get("uid") != 0:
        return f"owned by uid {found.get('uid')}, not root"
    try:
        mode = int(str(found.get("mode")), 8)
    except ValueError:
        return "its mode could not be read"
    if mode & 0o022:
        return f"mode {mode:o}: a group or other users may write it"
    if found.get("error"):
        return f"not a keyring apt can trust ({found['error']})"
    keys = found.get("keys") or []
    primaries = [key[0] for key in keys]
    if primaries != [fingerprint]:
        return f"holds the key(s) {', '.join(primaries) or 'none'}, not exactly {fingerprint}"
    return None
