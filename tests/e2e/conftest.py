"""The end-to-end tests' fixtures: the testbed of real hosts, its run prefix and cleanup."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config):
    """Choose this run's prefix for Docker names once per session ($TESTBED_RUN_PREFIX overrides it).

    The pytest process that owns the run (here: $TESTBED_RUN_OWNER) removes the run's Docker objects at the
    end; pytest processes it starts (the host checks) inherit prefix and owner and leave cleanup to it."""
    from testbed import hosts

    prefix = hosts.new_run_prefix()
    owner = os.environ.get(hosts.OWNER_ENV, "")
    config._testbed_owns_run = (not owner.isdigit() or int(owner) == os.getpid()
                                or not hosts.pid_alive(int(owner)))
    if config._testbed_owns_run:
        os.environ[hosts.OWNER_ENV] = str(os.getpid())
    os.environ[hosts.RUN_PREFIX_ENV] = prefix
    hosts.set_run_prefix(prefix)


def pytest_unconfigure(config):
    """Remove every container and volume of this run (hosts, their volumes, the run's stand-in Hub and registry)
    and this machine's trust in that registry; the shared network, the images and other runs' objects stay."""
    if getattr(config, "_testbed_owns_run", False):
        from testbed import hosts

        hosts.remove_run_objects(hosts.run_prefix())


def pytest_report_header(config):
    from testbed import hosts

    return f"testbed run prefix: {hosts.run_prefix()}"


@pytest.fixture(scope="session")
def testbed(tmp_path_factory, pytestconfig):
    from harness import Testbed
    from testbed import hosts

    if getattr(pytestconfig, "_testbed_owns_run", False):
        hosts.remove_stale_runs()  # runs on this machine killed before their cleanup; live runs stay
    bed = Testbed(tmp_path_factory.mktemp("testbed"))
    pytestconfig._sglang_testbed = bed
    yield bed
    bed.close()


@pytest.fixture(scope="module", autouse=True)
def _hosts_last_one_module(request):
    """A module's hosts are removed at its end, not the session's: every host is a systemd with a nested
    dockerd, and a whole suite's worth at once ran out of the kernel's inotify instances (128 per user by
    default), after which a new host never finished booting."""
    bed = getattr(request.config, "_sglang_testbed", None)
    keep = len(bed.started) if bed else 0
    yield
    bed = getattr(request.config, "_sglang_testbed", None)
    if bed is not None:
        bed.release(keep)


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
