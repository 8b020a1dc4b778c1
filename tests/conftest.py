"""What every run under tests/ shares: the option of the host checks, and their skip without it.

The end-to-end tests' fixtures (the testbed) are in tests/e2e/conftest.py, the code they and the unit tests import
(harness, testbed, stand-ins) in tests/support/, which pytest.ini puts on sys.path."""

from __future__ import annotations


def pytest_addoption(parser):
    parser.addoption("--hosts-inventory", default=None,
                     help="inventory whose hosts tests/host_checks checks (read-only)")


def pytest_ignore_collect(collection_path, config):
    # The host checks run only against an inventory the caller names.
    if collection_path.name == "host_checks" and config.getoption("--hosts-inventory") is None:
        return True
    return None
