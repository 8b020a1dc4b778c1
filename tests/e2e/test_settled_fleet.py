"""A settled host takes one no-op operation (sglang_infra/run/settled.py), and drift still comes through.

A fleet of two real hosts, the second reached under two more inventory names as well (aliases, as bench/fleet.py
reaches a hundred), with an API key on every worker (the secure default). After a converge and a re-run that
changes nothing (which stamps every host), a third run plans that one operation alone on each name. Drift planted
on one host is shown by `--dry --diff`, found and repaired by one run, which leaves the other hosts alone; the next
run changes nothing and the one after that finds every host settled again."""

from __future__ import annotations

import dataclasses
import secrets

import pytest

from harness import (
    COMPOSE_HAND_EDITED,
    COMPOSE_OP,
    HUB,
    HUB_LOST_SETGID,
    LAYOUT_OP,
    SETTLED_OP,
    diff_misses,
    planned,
    run_deploy,
    run_dry,
)

DRIFTED, OTHER = "sg-settled-1", "sg-settled-2"
ALIASES = ("sg-settled-2-alias-a", "sg-settled-2-alias-b")
EVERY = (DRIFTED, OTHER, *ALIASES)
STAMP = "/var/lib/sglang-settled.json"
DRIFTS = (HUB_LOST_SETGID, COMPOSE_HAND_EDITED)

@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    drifted, other = testbed.host(DRIFTED), testbed.host(OTHER)
    key = workdir / "settled-api-key"
    key.write_text(secrets.token_urlsafe(32) + "\n")
    key.chmod(0o600)
    keyed = {"sglang_api_key_file": str(key)}
    real = testbed.inventory(workdir / "settled-real.py", {"production": [(drifted, keyed), (other, keyed)]})
    aliases = [dataclasses.replace(other, name=name) for name in ALIASES]
    every = testbed.inventory(workdir / "settled.py", {"production": [(drifted, keyed), (other, keyed)]
                                                       + [(alias, keyed) for alias in aliases]})
    runs = {"converge": run_deploy(real)}
    assert runs["converge"].returncode == 0, runs["converge"].why()
    runs["stamping"] = run_deploy(every)      # changes nothing, takes the full plan, stamps
    runs["settled"] = run_deploy(every)
    runs["stamps"] = {h.name: h.exec(f"stat -c '%U %a' {STAMP}", check=False).stdout.strip()
                      for h in (drifted, other)}
    for command in DRIFTS:
        drifted.exec(command)
    runs["diff"] = run_dry(every, "--diff")
    runs["repair"] = run_deploy(every)
    runs["after"] = run_deploy(every)
    runs["settled_again"] = run_deploy(every)
    runs["hub_mode"] = drifted.exec(f"stat -c '%a' {HUB}").stdout.strip()
    return runs


def test_the_run_after_a_converge_changes_nothing(fleet):
    stamping = fleet["stamping"]
    assert stamping.returncode == 0, stamping.why()
    assert not any(stamping.changed(name) for name in EVERY), stamping.why()


def test_the_stamp_is_roots_alone(fleet):
    assert fleet["stamps"] == {DRIFTED: "root 600", OTHER: "root 600"}


@pytest.mark.parametrize("name", EVERY)
def test_a_settled_host_plans_one_no_op_alone(fleet, name):
    settled = fleet["settled"]
    assert settled.returncode == 0, settled.why()
    assert len(planned(fleet["stamping"], name)) > 10, "the run before took the full plan"
    assert planned(settled, name) == [SETTLED_OP]
    assert settled.statuses[SETTLED_OP][name] == "No changes"


def test_dry_diff_shows_the_drift_of_a_settled_host(fleet):
    code, plan, output = fleet["diff"]
    assert code == 0, output[-3000:]
    assert diff_misses(output) == [], output[-3000:]
    assert DRIFTED in plan[LAYOUT_OP] and DRIFTED in plan[COMPOSE_OP]


def test_one_run_repairs_the_drift(fleet):
    repair = fleet["repair"]
    assert repair.returncode == 0, repair.why()
    assert {LAYOUT_OP, COMPOSE_OP} <= set(repair.changed(DRIFTED))
    assert fleet["hub_mode"] == "2775"


@pytest.mark.parametrize("name", (OTHER, *ALIASES))
def test_the_repair_leaves_the_other_hosts_alone(fleet, name):
    assert fleet["repair"].changed(name) == []


@pytest.mark.parametrize("name", EVERY)
def test_the_run_after_the_repair_changes_nothing(fleet, name):
    after = fleet["after"]
    assert after.returncode == 0, after.why()
    assert after.changed(name) == []


@pytest.mark.parametrize("name", EVERY)
def test_every_host_is_settled_again(fleet, name):
    again = fleet["settled_again"]
    assert again.returncode == 0, again.why()
    assert planned(again, name) == [SETTLED_OP]
