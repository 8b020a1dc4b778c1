"""A vendor's apt repository: its signing key, pinned (keyrings.py), and its source line."""

from pyinfra.operations import apt

from ..operations.system import keyring_pinned
from .keyrings import DATA_KEYS, VendorKey


def vendor_repository(vendor: str, key_url: str, repo_line: str, filename: str, fingerprint: str) -> None:
    """Ensure ``vendor``'s keyring (``filename``: one of keyrings.DATA_KEYS) holds exactly the key ``fingerprint``
    pins, downloaded from ``key_url`` and checked when it is absent or anything else, and ``repo_line`` (with
    {keyring}) is an apt source."""
    if filename not in DATA_KEYS:
        raise ValueError(f"{filename}: not a vendor keyring the snapshot reads (keyrings.DATA_KEYS)")
    key = VendorKey(vendor, filename, key_url, fingerprint)
    keyring_pinned(name=f"Ensure {key.vendor}'s apt signing key is the pinned {key.fingerprint}", key=key,
                   present_only=False)
    apt.repo(
        name=f"Ensure {key.vendor}'s apt repository is configured",
        src=repo_line.format(keyring=key.keyring),
        filename=filename,
    )


def keyrings_checked(keys) -> None:
    """Every vendor keyring the host holds (``keys``: the plan's vendor_keys), judged on every run whether or not
    this run uses its repository: apt trusts it on any update. One that is not sound is replaced; an absent one is
    left to vendor_repository, where this run configures its repository."""
    for key in keys:
        keyring_pinned(name=f"Ensure {key.keyring} holds only {key.vendor}'s pinned key", key=key, present_only=True)
