"""One host stops answering in the middle of a run: the others converge, the
exit code is non-zero and the summary names the lost host."""

from __future__ import annotations

import pytest

from harness import deploy_with_fault, run_deploy, run_host_checks
from testbed.hosts import stop_host

SURVIVORS = ("sg-unr-1", "sg-unr-2")
LOST = "sg-unr-3"
# The lost host goes away once execution has begun on every host.
KILL_AFTER = "--> Starting operation: tasks/layout.py"


@pytest.fixture(scope="module")
def outcome(testbed, workdir):
    hosts = {name: testbed.host(name) for name in (*SURVIVORS, LOST)}
    inventory = testbed.inventory(workdir / "unreachable.py", {
        "production": [(hosts[name], {}) for name in (*SURVIVORS, LOST)],
    })
    lost = deploy_with_fault(inventory, workdir / "unreachable.log", KILL_AFTER, lambda: stop_host(LOST), timeout=900)
    reached, returncode, output = lost.reached, lost.returncode, lost.output
    survivors_inventory = testbed.inventory(workdir / "survivors.py", {
        "production": [(hosts[name], {}) for name in SURVIVORS],
    })
    return dict(reached=reached, returncode=returncode, output=output,
                checks=run_host_checks(survivors_inventory, workdir),
                rerun=run_deploy(survivors_inventory))


def test_the_host_was_lost_mid_run(outcome):
    assert outcome["reached"], outcome["output"][-3000:]


def test_exit_code_is_non_zero(outcome):
    assert outcome["returncode"] != 0


def test_summary_names_the_lost_host(outcome):
    summary = outcome["output"].split("--> Results:")[-1]
    failed_line = next(line for line in summary.splitlines() if line.startswith("--> Failed hosts"))
    assert LOST in failed_line
    assert not any(name in failed_line for name in SURVIVORS)


@pytest.mark.parametrize("name", SURVIVORS)
def test_other_hosts_converged(outcome, name):
    assert outcome["checks"].failed(name) == set(), outcome["checks"].output[-3000:]
    assert len(outcome["checks"].passed(name)) >= 17


@pytest.mark.parametrize("name", SURVIVORS)
def test_other_hosts_need_nothing_more(outcome, name):
    assert outcome["rerun"].returncode == 0
    assert outcome["rerun"].changed(name) == []
