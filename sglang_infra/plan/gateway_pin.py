"""The gateway's version, read once from the file that pins it: templates/gateway-requirements.txt (the wheels
scripts/build-gateway-image.sh installs, hashes checked). What the code says of the gateway's version (a
refusal, a key's shape, the gateway's compose.yaml) takes it from here, so a new pin is one edit of that file.
"""

from __future__ import annotations

import re
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parent.parent.parent / "templates" / "gateway-requirements.txt"


def _pinned(text: str, package: str) -> str:
    """The version ``package`` is pinned at (`package==X`) in a requirements file's text."""
    found = re.findall(rf"^{re.escape(package)}==(\S+)", text, flags=re.MULTILINE)
    if len(found) != 1:
        raise ValueError(f"{REQUIREMENTS} pins {package} {len(found)} times, not once")
    return found[0]


# Shepherd Model Gateway, PyPI smg.
GATEWAY_VERSION = _pinned(REQUIREMENTS.read_text(encoding="utf-8"), "smg")
