"""A vendor's apt repository: its signing key and its source line."""

from pyinfra.operations import apt, files


def vendor_repository(vendor: str, key_url: str, repo_line: str, filename: str) -> None:
    """Ensure ``vendor``'s key is in /etc/apt/keyrings and ``repo_line`` (with {keyring}) is an apt source."""
    keyring = f"/etc/apt/keyrings/{filename}.asc"
    files.download(
        name=f"Ensure {vendor}'s apt signing key is present",
        src=key_url,
        dest=keyring,
        mode="644",
    )
    apt.repo(
        name=f"Ensure {vendor}'s apt repository is configured",
        src=repo_line.format(keyring=keyring),
        filename=filename,
    )
