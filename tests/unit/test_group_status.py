"""A multi-node group in the fleet report (scripts/status.sh) and in the host checks (scripts/check.sh): a member
whose container is gone or exited, or that started after rank 0 (a stale group), makes the group failing, every
member's row failing, and each line names the group, the member and why (groupstatus.problems, one judgement for
both); a whole group is one worker with its members."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import converged_snapshot, pinned_defaults

from sglang_infra.fleet import nodegroups
from sglang_infra.fleet.hosts import InventoryHost
from sglang_infra.plan.resolve import resolve
from sglang_infra.status import fleetstatus, groupstatus, statusrows

DEFAULTS = pinned_defaults()
HEAD_STARTED = "2026-01-01T10:00:30.5Z"       # rank 0 starts last (operations/group.py)
MEMBER_STARTED = "2026-01-01T10:00:20.123456789Z"


def member(name, address):
    return InventoryHost(name, {**DEFAULTS, "ssh_hostname": address, "sglang_node_group": "ds-a",
                                "sglang_trusted_network": True}, (), True, False)


HOSTS = [member("gpu-01", "10.0.0.11"), member("gpu-02", "10.0.0.12")]
GROUPS = nodegroups.membership(HOSTS)


def container(started=MEMBER_STARTED, state="running"):
    return {"id": "c", "state": state, "health": None, "image_id": "i", "started_at": started, "labels": {}}


def rows(gated=None, **containers):
    """The status rows of the two members (every other field as a converged host's), with their containers;
    ``gated``: each member's last gate record, with the start of the container it stamped (none: no record)."""
    out = []
    for each in HOSTS:
        plan = resolve(each.name, each.data, converged_snapshot(), (), GROUPS[each.name])
        snapshot = converged_snapshot()
        snapshot["stack"] = {"container": containers.get(each.name.replace("-", "_"), container(
            HEAD_STARTED if each.name == "gpu-01" else MEMBER_STARTED))}
        snapshot["report"] = {"now": 1767261600.0}
        if gated is not None:
            snapshot["gate"] = {**(snapshot.get("gate") or {}), "started_at": gated[each.name]}
            snapshot["report"]["gate"] = {"time": "2026-01-01T10:01:00Z", "passed": True}
        row = statusrows.row(each.name, plan, snapshot, [])
        out.append({**row, "model": {**row["model"], "complete": True, "verified": True},
                    **({} if gated is not None else {"gate": None})})
    return out


GATED = {"gpu-01": HEAD_STARTED, "gpu-02": MEMBER_STARTED}   # the containers the group's last gate stamped


def test_rank_0_restarted_alone_since_the_groups_gate_fails_the_group_naming_it_and_why():
    """Issue 40: `docker restart` of rank 0 seconds after the group formed, its health still "starting": within
    START_WINDOW of the members' start, yet not the container its gate stamped while rank 1 still is."""
    assert fleetstatus.judged(rows(GATED))["exit"] == 0
    restarted = container("2026-01-01T10:03:00.25Z")
    report = fleetstatus.judged(rows(GATED, gpu_01={**restarted, "health": "starting"}))
    line = ("group ds-a: member gpu-01 (rank 0): restarted alone at 2026-01-01T10:03:00.25Z, since the group's last "
            "gate (its container then started at 2026-01-01T10:00:30.5Z); the other members never join it again, so "
            "the group serves nothing until every member restarts together")
    assert report["exit"] == 1 and report["groups"][0]["problems"] == [line], report["groups"]
    for host in report["hosts"]:
        assert host["verdict"] == "failing" and f"failing: {line}" in host["problems"], host["host"]
    # every member restarted since (the deploy's recreate, rank 0 last, before its gate stamps them): not alone
    together = rows(GATED, gpu_01=restarted, gpu_02=container("2026-01-01T10:02:59Z"))
    assert fleetstatus.judged(together)["groups"][0]["problems"] == []


def test_a_whole_group_is_ok_and_one_worker_with_its_members():
    report = fleetstatus.judged(rows())
    assert report["exit"] == 0, report["hosts"][0]["problems"] + report["hosts"][1]["problems"]
    assert report["groups"] == [{"name": "ds-a", "members": ["gpu-01", "gpu-02"], "head": "gpu-01", "problems": [],
                                 "verdict": "ok"}]
    assert "group ds-a: ok, one worker at rank 0 (gpu-01), members gpu-01, gpu-02" in \
        fleetstatus.table(report).splitlines()


@pytest.mark.parametrize("changes,line", [
    ({"gpu_02": None}, "group ds-a: member gpu-02 (rank 1) has no container: it is gone"),
    ({"gpu_02": container(state="exited")}, "group ds-a: member gpu-02 (rank 1): its container is exited"),
    ({"gpu_02": container(started="2026-01-01T10:05:00Z")},
     "group ds-a: member gpu-02: started after rank 0 (gpu-01), against a group that already formed"),
    ({"gpu_01": container(state="exited", started=HEAD_STARTED)},
     "group ds-a: member gpu-01 (rank 0): its container is exited"),
])
def test_a_broken_member_fails_the_group_and_every_member_naming_the_group_member_and_why(changes, line):
    report = fleetstatus.judged(rows(**changes))
    assert report["exit"] == 1
    assert report["groups"][0]["verdict"] == "failing" and line in report["groups"][0]["problems"]
    for host in report["hosts"]:   # rank 0 too, though its own container runs: the group cannot serve
        assert host["verdict"] == "failing" and f"failing: {line}" in host["problems"], host["host"]
    table = fleetstatus.table(report).splitlines()
    assert f"gpu-01: failing: {line}" in table and f"gpu-02: failing: {line}" in table
    assert "group ds-a: FAILING, one worker at rank 0 (gpu-01), members gpu-01, gpu-02" in table


def test_a_member_not_reported_on_leaves_the_group_not_known_to_serve():
    head, _ = rows()
    report = fleetstatus.judged([head, statusrows.unanswered("gpu-02", "Could not connect (timed out)")])
    line = "group ds-a: member gpu-02 (rank 1) could not be read, so the group is not known to serve"
    assert report["groups"][0]["problems"] == [line]
    assert report["hosts"][0]["verdict"] == "failing" and f"failing: {line}" in report["hosts"][0]["problems"]
    assert report["hosts"][1]["verdict"] == "unreachable"


def test_a_host_outside_any_group_carries_no_group():
    plan = resolve("solo", DEFAULTS | {"sglang_trusted_network": True}, converged_snapshot())
    row = statusrows.row("solo", plan, {**converged_snapshot(), "report": {}}, [])
    assert row["node_group"] is None and fleetstatus.judged([row])["groups"] == []


def test_the_row_carries_the_plans_group_as_the_judgement_reads_it_back():
    row = rows()[1]
    wanted = dataclasses.replace(GROUPS["gpu-02"], member_plans=())   # the members' plans stay in the run
    assert groupstatus.of_row(json.loads(json.dumps(row["node_group"]))) == wanted   # as status.sh reads it
