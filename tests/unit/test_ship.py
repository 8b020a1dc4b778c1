"""What ship.py packs with a host program is what the program imports: every hostside module it loads,
transitively, and nothing else, each after the modules it imports itself. So a program that reads the API key
or a server's answer ships apikey.py and bounded.py, not the checks' tool-call and benchmark code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sglang_infra.run import ship

PROGRAMS = ship.programs()

# Every program imported by Python itself, each into a fresh set of hostside modules (one interpreter for all):
# what it loads is what it imports, whatever ship.py's reading of the source says (a subpackage, pull/, is no
# module of its own: ship.py registers it empty).
PROBE = """
import importlib, json, sys
package_name, names = sys.argv[1], json.loads(sys.argv[2])
prefix = package_name + "."
package = importlib.import_module(package_name)
found = {}
for name in names:
    for loaded in [m for m in sys.modules if m.startswith(prefix)]:
        del sys.modules[loaded]
        if hasattr(package, loaded[len(prefix):]):
            delattr(package, loaded[len(prefix):])
    importlib.import_module(prefix + name)
    found[name] = sorted(m[len(prefix):] for m in sys.modules
                         if m.startswith(prefix) and m != prefix + name and not hasattr(sys.modules[m], "__path__"))
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def imported():
    """{program: the hostside modules importing it loads}."""
    out = subprocess.run([sys.executable, "-c", PROBE, ship.PACKAGE, json.dumps(PROGRAMS)], capture_output=True,
                         text=True, timeout=120, cwd=ship.HOSTSIDE.parent.parent)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_carries_exactly_the_modules_it_imports(imported, name):
    carried = ship.carried(name)
    assert len(carried) == len(set(carried)) and name not in carried
    assert set(carried) == set(imported[name])
    for k, module in enumerate(carried):   # each loaded after what it needs
        assert set(imported[module]) <= set(carried[:k]), (module, carried)


@pytest.mark.parametrize("name", ["roll.drain", "roll.gateway_workers", "report"])
def test_the_programs_that_read_the_key_or_a_server_ship_without_the_checks(name):
    carried = ship.carried(name)
    assert {"apikey", "bounded"} <= set(carried) and "checks" not in carried
    assert "hostside/checks.py" not in ship.program(name)


def test_the_gateways_launcher_reads_the_key_with_the_one_reader():
    assert ship.carried("gateway_launch") == ["safefs", "apikey", "names"]   # read_key opens as safefs does
