"""A vendor's apt repository: its signing key and its source line."""

from pyinfra.operations import apt, files, server


def vendor_repository(vendor: str, key_url: str, repo_line: str, filename: str, fingerprint: str | None = None) -> None:
    """Ensure ``vendor``'s key is in /etc/apt/keyrings and ``repo_line`` (with {keyring}) is an apt source. With
    ``fingerprint``, a downloaded key that is not that key is removed and the host stops before apt trusts it."""
    keyring = f"/etc/apt/keyrings/{filename}.asc"
    if fingerprint:
        apt.packages(name="Ensure gpg is installed (it reads a signing key's fingerprint)", packages=["gpg"])
    key = files.download(
        name=f"Ensure {vendor}'s apt signing key is present",
        src=key_url,
        dest=keyring,
        mode="644",
    )
    if fingerprint:
        server.shell(
            name=f"Ensure {vendor}'s apt signing key is the one pinned ({fingerprint})",
            commands=[f"gpg --show-keys --with-colons {keyring} | grep -qx 'fpr:::::::::{fingerprint}:' || "
                      f"{{ rm -f {keyring}; echo 'the key at {key_url} is not {fingerprint}; removed' >&2; exit 1; }}"],
            _if=key.did_change,
        )
    apt.repo(
        name=f"Ensure {vendor}'s apt repository is configured",
        src=repo_line.format(keyring=keyring),
        filename=filename,
    )
