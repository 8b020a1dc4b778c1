"""pip's index options, for the pull's venv on hosts and for the image build."""

from __future__ import annotations

import shlex
from urllib.parse import urlsplit


def pip_index_options(index_url: str | None, extra_index_url: str | None = None) -> list[str]:
    """pip's index options; an index served over plain http (a site mirror) must also be named trusted,
    or pip ignores it."""
    options, trusted = [], []
    for flag, url in (("--index-url", index_url), ("--extra-index-url", extra_index_url)):
        if not url:
            continue
        options.append(f"{flag} {shlex.quote(url)}")
        parts = urlsplit(url)
        if parts.scheme == "http" and parts.netloc not in trusted:
            trusted.append(parts.netloc)
    return options + [f"--trusted-host {shlex.quote(host)}" for host in trusted]

