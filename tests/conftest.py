"""Shared fixtures: the testbed of real hosts, and the options of the host checks."""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption("--hosts-inventory", default=None,
                     help="inventory whose hosts tests/host_checks checks (read-only)")


def pytest_ignore_collect(collection_path, config):
    # The host checks run only against an inventory the caller names.
    if collection_path.name == "host_checks" and config.getoption("--hosts-inventory") is None:
        return True
    return None


@pytest.fixture(scope="session")
def testbed(tmp_path_factory):
    from harness import Testbed

    bed = Testbed(tmp_path_factory.mktemp("testbed"))
    yield bed
    bed.close()


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


_MEASUREMENTS: list[str] = []


@pytest.fixture(scope="session")
def measure():
    """Record a figure a test measured; all of them are printed at the end of the run."""
    return _MEASUREMENTS.append


def pytest_terminal_summary(terminalreporter):
    if _MEASUREMENTS:
        terminalreporter.section("measured")
        for line in _MEASUREMENTS:
            terminalreporter.write_line(line)
