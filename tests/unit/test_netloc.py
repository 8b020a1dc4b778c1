"""host:port is written in one place (hostside/formats/netloc.py), for the host programs and the control side alike: an
IPv6 address in brackets, anything else as it is. A module that writes the bracketed form again fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglang_infra.hostside.formats.netloc import netloc

ROOT = Path(__file__).resolve().parent.parent.parent
# An f-string that brackets an address before a port: `[{address}]:{port}`.
BRACKETED = re.compile(r"\[\{[^{}]+\}\]:\{")
# gate/report.py is carried by the gate's scripts, whose text a worker's stamp covers (see netloc.py).
ALLOWED = {"sglang_infra/hostside/formats/netloc.py", "sglang_infra/hostside/gate/report.py"}


@pytest.mark.parametrize(("address", "port", "expected"), [
    ("10.0.0.5", 880, "10.0.0.5:880"),
    ("fd00::1", 880, "[fd00::1]:880"),
    ("::", 9100, "[::]:9100"),
    ("gpu-01.example.net", 30000, "gpu-01.example.net:30000"),
    ("fe80::1%eth0", 30000, "[fe80::1%eth0]:30000"),
])
def test_an_ipv6_address_is_bracketed_and_nothing_else_is(address, port, expected):
    assert netloc(address, port) == expected


@pytest.mark.parametrize("path", sorted({str(p.relative_to(ROOT)) for d in ("sglang_infra", "tasks")
                                         for p in (ROOT / d).rglob("*.py")} - ALLOWED))
def test_no_other_module_brackets_an_address_itself(path):
    assert BRACKETED.findall((ROOT / path).read_text(encoding="utf-8")) == []
