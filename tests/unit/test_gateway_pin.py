"""The gateway's version is written once, in templates/gateway-requirements.txt: the code reads it from there
(plan/gateway_pin.py) and spells it nowhere else, and the tests' own smg (requirements-test.txt, for smg's parser)
is that version."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglang_infra.plan.gateway_pin import GATEWAY_VERSION, REQUIREMENTS, _pinned
from sglang_infra.plan.schema import SCHEMA

ROOT = Path(__file__).resolve().parent.parent.parent
# Where the version may still be spelled out, and why: the pin itself; the tests' pin (pip reads it; checked equal
# below); group_data/all.py, whose comment is a key's reason, mirrored in docs/variables.md; and the gateway's
# launcher, whose text the gateway's stamp covers (a change would re-gate every gateway host).
SPELLED = {"templates/gateway-requirements.txt", "requirements-test.txt", "group_data/all.py",
           "sglang_infra/hostside/gateway_launch.py"}
CODE = sorted({str(p.relative_to(ROOT)) for d in ("sglang_infra", "tasks", "scripts", "templates", "group_data")
               for p in (ROOT / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
              | {"deploy.py", "requirements-test.txt"})


def test_the_version_is_the_pinned_smg_wheel():
    text = REQUIREMENTS.read_text()
    assert re.search(rf"^smg=={re.escape(GATEWAY_VERSION)} \\$", text, flags=re.MULTILINE)
    assert re.search(r"--hash=sha256:[0-9a-f]{64}", text.split(f"smg=={GATEWAY_VERSION}")[1])


def test_a_file_that_pins_smg_twice_or_never_is_refused():
    with pytest.raises(ValueError, match="pins smg 2 times"):
        _pinned("smg==1.0\nsmg==2.0\n", "smg")
    with pytest.raises(ValueError, match="pins smg 0 times"):
        _pinned("grpcio==1.0\n", "smg")


def test_the_tests_install_the_gateways_version():
    assert _pinned((ROOT / "requirements-test.txt").read_text(), "smg") == GATEWAY_VERSION


def test_the_policy_key_says_the_pinned_version():
    assert f"SMG {GATEWAY_VERSION}'s policies" in SCHEMA["sglang_router_policy"].kind


@pytest.mark.parametrize("path", sorted(set(CODE) - SPELLED))
def test_no_other_file_spells_the_version(path):
    text = (ROOT / path).read_text(encoding="utf-8", errors="replace")
    assert re.findall(rf"(?:SMG|smg)[ =-]+{re.escape(GATEWAY_VERSION)}\b", text) == []
