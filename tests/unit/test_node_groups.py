"""Multi-node groups without hosts: ranks in inventory order, the members' launch flags and compose file (host
networking, the group's labels, no revival alone), tp-size as the group's GPUs, the group's refusals, a group as one
worker behind the gateway, and the stale-group rule."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import yaml
from conftest import converged_snapshot, pinned_defaults

from sglang_infra.fleet import nodegroups
from sglang_infra.fleet.hosts import InventoryHost
from sglang_infra.hostside import names
from sglang_infra.plan.problems import DeployDataError
from sglang_infra.plan.resolve import check_reach, resolve

DEFAULTS = pinned_defaults()


def host(name, address, group="ds-a", serves=True, **data):
    values = {**DEFAULTS, "ssh_hostname": address, "sglang_node_group": group, "sglang_trusted_network": True, **data}
    return InventoryHost(name, values, (), serves, False)


MEMBERS = [host("gpu-01", "10.0.0.11"), host("gpu-02", "10.0.0.12"), host("solo", "10.0.0.13", group=None)]


def plans(hosts=MEMBERS):
    groups = nodegroups.membership(hosts)
    return {h.name: resolve(h.name, h.data, converged_snapshot(), (), groups.get(h.name)) for h in hosts}, groups


def service(plan):
    return yaml.safe_load(plan.compose)["services"]["sglang"]


def test_ranks_follow_inventory_order_and_rank_0s_address_is_the_dist_init_addr():
    groups = nodegroups.membership(MEMBERS)
    assert set(groups) == {"gpu-01", "gpu-02"}   # the host without a group is no member
    assert [groups[n].rank for n in ("gpu-01", "gpu-02")] == [0, 1]
    assert groups["gpu-02"].members == ("gpu-01", "gpu-02")
    assert groups["gpu-02"].dist_init_addr == "10.0.0.11:29500"
    swapped = nodegroups.membership(list(reversed(MEMBERS)))
    assert swapped["gpu-02"].rank == 0 and swapped["gpu-01"].dist_init_addr == "10.0.0.12:29500"


def test_every_member_renders_the_same_command_but_its_rank_with_tp_the_groups_gpus():
    found, _ = plans()
    args = {name: service(found[name])["command"] for name in ("gpu-01", "gpu-02")}
    per_host = found["solo"].derived["sglang_tp_size"].value
    for name, rank in (("gpu-01", 0), ("gpu-02", 1)):
        assert f"--tp-size={2 * per_host}" in args[name]
        assert "--nnodes=2" in args[name] and f"--node-rank={rank}" in args[name]
        assert "--dist-init-addr=10.0.0.11:29500" in args[name]
    assert [a for a in args["gpu-01"] if not a.startswith(("--node-rank", "--host="))] == \
        [a for a in args["gpu-02"] if not a.startswith(("--node-rank", "--host="))]
    assert f"--tp-size={per_host}" in service(found["solo"])["command"]
    assert not any("nnodes" in a for a in service(found["solo"])["command"])
    # each flag keeps its reason beside it in the file
    assert "# This host's position among the members in inventory order" in found["gpu-02"].compose


def test_a_member_runs_on_the_hosts_network_with_the_groups_labels_and_is_never_revived_alone():
    found, _ = plans()
    member, solo = service(found["gpu-02"]), service(found["solo"])
    assert member["network_mode"] == "host" and "ports" not in member
    assert member["restart"] == "no" and solo["restart"] == "unless-stopped"
    assert member["labels"][names.NODE_GROUP_LABEL] == "ds-a"
    assert (member["labels"][names.NODE_RANK_LABEL], member["labels"][names.NNODES_LABEL]) == ("1", "2")
    assert "network_mode" not in solo and names.NODE_GROUP_LABEL not in solo["labels"]
    assert "--host=10.0.0.12" in member["command"]   # its fleet address, not every address of the host


def test_the_interface_key_names_nccls_and_gloos_interface():
    hosts = [host("gpu-01", "10.0.0.11", sglang_node_interface="eth1"), host("gpu-02", "10.0.0.12")]
    found, _ = plans(hosts)
    env = service(found["gpu-02"])["environment"]   # rank 0's data decide the group's interface
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("eth1", "eth1")


def refused(hosts, in_run=None):
    found, groups = plans(hosts)
    return nodegroups.check_groups(found, groups, in_run) + nodegroups.not_serving(hosts)


def test_a_consistent_group_is_not_refused():
    assert refused(MEMBERS) == []


def test_a_group_of_one_is_refused_naming_the_host_and_the_key():
    [line] = refused([host("gpu-01", "10.0.0.11"), host("solo", "10.0.0.13", group=None)])
    assert "gpu-01" in line and "sglang_node_group" in line and "no other member" in line


def test_members_with_different_models_images_flags_or_gpus_are_refused():
    base = [host("gpu-01", "10.0.0.11")]
    cases = {"sglang_model": {"sglang_model": "qwen3.6-27b-awq-int4"},
             "sglang_image": {"sglang_image": "lmsysorg/sglang:v0.5.15"},
             "sglang_context_length": {"sglang_context_length": 4096},
             "sglang_tp_size": {"sglang_tp_size": 1},
             "sglang_dist_init_port": {"sglang_dist_init_port": 29600}}
    for key, data in cases.items():
        lines = refused(base + [host("gpu-02", "10.0.0.12", **data)])
        assert any(key in line and "gpu-02" in line and "rank 0 (gpu-01)" in line for line in lines), (key, lines)


def test_a_member_with_another_gpu_count_is_refused_once_naming_sglang_tp_size_and_each_members_own_count():
    """sglang_tp_size = 1 on one member, 2 on the others: the key the operator set, the counts per host (not the
    group's totals, 3 and 6, nor sglang_gpus, the container's reservation), and no second line for --tp-size."""
    lines = refused([host("gpu-01", "10.0.0.11", sglang_tp_size=2), host("gpu-02", "10.0.0.12", sglang_tp_size=1),
                     host("gpu-03", "10.0.0.13", sglang_tp_size=2)])
    assert lines == ["host gpu-02: sglang_tp_size: differs from rank 0 (gpu-01) of group 'ds-a': 1 GPU(s) per host "
                     "(set in data) here, 2 GPU(s) per host (set in data) on rank 0; every member runs the same model, "
                     "image, flags and GPU count. Fix: set the same sglang_tp_size on every member of 'ds-a'."]


def test_a_derived_gpu_count_is_named_with_where_it_came_from_and_a_flag_by_its_own_key():
    lines = refused([host("gpu-01", "10.0.0.11"), host("gpu-02", "10.0.0.12", sglang_tp_size=1,
                                                        sglang_enable_metrics=False)])
    assert [line.split(": differs")[0] for line in lines] == ["host gpu-02: sglang_tp_size",
                                                              "host gpu-02: sglang_enable_metrics"]
    assert "1 GPU(s) per host (set in data) here, 2 GPU(s) per host (derived: 2 GPUs found by nvidia-smi) on rank 0" \
        in lines[0]
    assert "no such flag here, --enable-metrics on rank 0" in lines[1]


def test_a_group_off_a_trusted_network_or_with_an_api_key_is_refused():
    lines = refused([host("gpu-01", "10.0.0.11"), host("gpu-02", "10.0.0.12", sglang_trusted_network=False)])
    assert any("gpu-02" in line and "sglang_trusted_network" in line for line in lines)


def test_a_group_member_that_serves_nothing_and_a_group_deployed_in_part_are_refused():
    lines = refused(MEMBERS + [host("gw-1", "10.0.0.9", group="ds-a", serves=False)])
    assert any("gw-1" in line and "serves no model" in line for line in lines)
    lines = refused(MEMBERS, in_run=["gpu-02", "solo"])
    assert any("deployed in part" in line and "gpu-01" in line for line in lines)


def snapshot(started, state="running"):
    return {"stack": {"container": {"state": state, "started_at": started}}}


def test_a_member_started_after_rank_0_or_rank_0_restarted_alone_is_a_stale_group():
    group = nodegroups.membership(MEMBERS)["gpu-01"]
    ok = {"gpu-01": snapshot("2026-12-04T10:00:05.123456789Z"), "gpu-02": snapshot("2026-12-04T10:00:01.5Z")}
    assert nodegroups.stale(ok, group) == []
    late = dict(ok, **{"gpu-02": snapshot("2026-12-04T10:30:00.000000001Z")})
    assert nodegroups.stale(late, group) == ["gpu-02: started after rank 0 (gpu-01), against a group that already "
                                             "formed"]
    alone = dict(ok, **{"gpu-01": snapshot("2026-12-04T11:00:00Z")})
    assert "gpu-02: rank 0 (gpu-01) restarted after it, alone" in nodegroups.stale(alone, group)


def gated(started, gate_saw):
    """A member's snapshot: its running container started at ``started``, its last gate stamped one started at
    ``gate_saw`` (None: a record from before the gate kept it)."""
    return {**snapshot(started), "gate": {"started_at": gate_saw}}


GATED = {"gpu-01": gated("2026-12-04T10:00:05.123456789Z", "2026-12-04T10:00:05.123456789Z"),
         "gpu-02": gated("2026-12-04T10:00:01.5Z", "2026-12-04T10:00:01.5Z")}


def test_rank_0_restarted_alone_since_the_groups_gate_is_a_stale_group_however_soon():
    """Issue 40: `docker restart` of rank 0 a minute after the group formed: rank 0 started after every member, within
    START_WINDOW, yet the others never join it again; its gate's record says it is not the container it stamped."""
    group = nodegroups.membership(MEMBERS)["gpu-01"]
    assert nodegroups.stale(GATED, group) == []
    restarted = dict(GATED, **{"gpu-01": gated("2026-12-04T10:01:05.5Z", "2026-12-04T10:00:05.123456789Z")})
    assert nodegroups.stale(restarted, group) == [
        "gpu-01 (rank 0): restarted alone at 2026-12-04T10:01:05.5Z, since the group's last gate (its container then "
        "started at 2026-12-04T10:00:05.123456789Z); the other members never join it again, so the group serves "
        "nothing until every member restarts together"]


def test_every_member_restarted_since_the_gate_or_no_record_of_it_is_not_a_restart_alone():
    group = nodegroups.membership(MEMBERS)["gpu-01"]
    # the deploy's recreate before its gate stamps them again: every member restarted, rank 0 last
    together = {"gpu-01": gated("2026-12-04T11:00:09Z", "2026-12-04T10:00:05.123456789Z"),
                "gpu-02": gated("2026-12-04T11:00:02Z", "2026-12-04T10:00:01.5Z")}
    assert nodegroups.stale(together, group) == []
    unknown = dict(GATED, **{"gpu-01": gated("2026-12-04T10:01:05.5Z", None),
                             "gpu-02": gated("2026-12-04T10:00:01.5Z", None)})
    assert nodegroups.stale(unknown, group) == []   # records from before the gate kept the container


def test_a_member_restarted_alone_after_rank_0_is_named_once():
    group = nodegroups.membership(MEMBERS)["gpu-01"]
    late = dict(GATED, **{"gpu-02": gated("2026-12-04T10:30:00Z", "2026-12-04T10:00:01.5Z")})
    assert nodegroups.stale(late, group) == ["gpu-02: started after rank 0 (gpu-01), against a group that already "
                                             "formed"]


def test_a_members_restart_reasons():
    found, _ = plans()
    plan = found["gpu-02"]
    docker = plan.paths.docker
    snap = {"stack": {"container": {"state": "running", "image_id": "sha256:x"}, "current": True},
            "files": {docker: {names.COMPOSE_FILE: {"sha256": plan.compose_sha}}}}
    assert nodegroups.member_reasons("gpu-02", snap, plan.compose_sha, "sha256:x", docker) == []
    exited = {**snap, "stack": {"container": {"state": "exited", "image_id": "sha256:x"}, "current": True}}
    assert nodegroups.member_reasons("gpu-02", exited, plan.compose_sha, "sha256:x", docker) == \
        ["gpu-02: the container is exited"]
    gone = {**snap, "stack": {"container": None, "current": False}}
    assert nodegroups.member_reasons("gpu-02", gone, plan.compose_sha, "sha256:x", docker) == \
        ["gpu-02: the service has no container"]
    assert nodegroups.member_reasons("gpu-02", snap, replace(plan, compose_sha="other").compose_sha, "sha256:x",
                                     docker) == ["gpu-02: compose.yaml changes"]


# ---------------------------------------------------------------- the group's turn (operations/group.py)
class Output:
    def __init__(self, stderr=()):
        self.stderr_lines, self.stdout_lines = list(stderr), []


def turn(monkeypatch, gate_results, changed=True, restart=True, commands=None):
    """The group's turn with every member's commands recorded; ``gate_results``: rank 0's gate answers in order;
    ``commands``: a list that gets each (member, command) as sent."""
    from types import SimpleNamespace

    from sglang_infra.operations import group as group_ops

    found, _ = plans()
    group = nodegroups.with_members(found)["gpu-01"].node_group
    ran, answers = [], list(gate_results)

    def on_member(state, name, command):
        step = re.search(r"--group-step ([a-z-]+)", command)
        kind = "up" if " up -d " in command else "stop" if " stop --timeout " in command else step and step[1]
        ran.append((name, kind))
        if commands is not None:
            commands.append((name, command))
        if kind in ("validate", "revalidate", "rolled-back"):
            return answers.pop(0)
        return True, Output()

    monkeypatch.setattr(group_ops, "on_member", on_member)
    host = SimpleNamespace(name="gpu-01", log_styled=lambda *a, **k: None)
    return group_ops.restart_and_gate(None, host, group, restart, "compose.yaml changes", changed), ran


def test_the_group_stops_every_member_then_starts_rank_0_last_and_gates_through_rank_0_only(monkeypatch):
    failure, ran = turn(monkeypatch, [(True, Output())])
    assert failure is None
    assert ran == [("gpu-01", "stop"), ("gpu-02", "stop"), ("gpu-02", "up"), ("gpu-01", "up"),
                     ("gpu-01", "validate"), ("gpu-02", "keep")]


def test_a_failed_gate_puts_every_member_back_on_its_last_good_config_and_restarts_them_together(monkeypatch):
    from sglang_infra.hostside.gate.gate import GROUP_NOT_ROLLED_BACK

    failed = (False, Output([f"gate[gpu-01]: FAILED: benchmark.sh: too slow. {GROUP_NOT_ROLLED_BACK}"]))
    failure, ran = turn(monkeypatch, [failed, (True, Output())])
    assert failure == "benchmark.sh: too slow; rolled back: every member serves its last good config again"
    names_steps = [(name, what) for name, what in ran if what in ("validate", "keep", "failed", "rolled-back")]
    assert names_steps == [("gpu-01", "validate"), ("gpu-01", "failed"), ("gpu-02", "failed"),
                           ("gpu-01", "rolled-back"), ("gpu-02", "keep")]
    # after the rollback every member was stopped before any started again
    after = ran[ran.index(("gpu-02", "failed")) + 1:]
    kinds = [what for _, what in after if what in ("stop", "up")]
    assert kinds == ["stop", "stop", "up", "up"]


def test_the_groups_gate_judges_only_the_config_this_run_rendered_and_runs_detached_on_rank_0(monkeypatch):
    """#60: rank 0's gate and every member's keep or failed step name the member's own compose.yaml (its plan's
    sha256: another config is judged by nobody, gate.NOT_OWN); rank 0's gate runs apart from the run's connection
    (hostside/roll/detach.py); after a rollback, the last good config put back is kept with no such check."""
    from sglang_infra.hostside.gate.gate import GROUP_NOT_ROLLED_BACK
    from sglang_infra.run.operation import detached

    found, _ = plans()
    sha = {name: found[name].compose_sha for name in ("gpu-01", "gpu-02")}
    gate = {name: f"bash {found[name].paths.home}/{names.GATE_SCRIPT}" for name in sha}
    commands: list[tuple[str, str]] = []
    turn(monkeypatch, [(True, Output())], commands=commands)
    steps = [(name, command) for name, command in commands if "--group-step" in command]
    assert steps == [("gpu-01", detached(f"{gate['gpu-01']} --group-step validate --config-sha {sha['gpu-01']}")),
                     ("gpu-02", f"{gate['gpu-02']} --group-step keep --config-sha {sha['gpu-02']}")]
    commands.clear()
    failed = (False, Output([f"gate[gpu-01]: FAILED: benchmark.sh: too slow. {GROUP_NOT_ROLLED_BACK}"]))
    turn(monkeypatch, [failed, (True, Output())], commands=commands)
    steps = [(name, command) for name, command in commands if "--group-step" in command]
    assert steps[1:] == [("gpu-01", f"{gate['gpu-01']} --group-step failed --config-sha {sha['gpu-01']}"),
                         ("gpu-02", f"{gate['gpu-02']} --group-step failed --config-sha {sha['gpu-02']}"),
                         ("gpu-01", f"{gate['gpu-01']} --group-step rolled-back"),
                         ("gpu-02", f"{gate['gpu-02']} --group-step keep")]


def test_a_group_recreated_on_its_good_config_is_gated_so_that_a_failure_marks_no_config_failed(monkeypatch):
    """Issue 40: rank 0 restarted alone, every member's config its last good one: recreated, rank 0 last, and gated
    with revalidate; a failure then rolls nothing back and marks nothing failed on any member."""
    from sglang_infra.hostside.gate.gate import GROUP_STATE_FAILED

    healed, ran = turn(monkeypatch, [(True, Output())], changed=False)
    assert healed is None
    assert ran == [("gpu-01", "stop"), ("gpu-02", "stop"), ("gpu-02", "up"), ("gpu-01", "up"),
                   ("gpu-01", "revalidate"), ("gpu-02", "keep")]
    failed = (False, Output([f"gate[gpu-01]: FAILED: the server did not become ready. {GROUP_STATE_FAILED}"]))
    failure, ran = turn(monkeypatch, [failed], changed=False)
    assert failure is not None and "the server did not become ready" in failure and "no config is marked failed" \
        in failure, failure
    assert [what for _, what in ran if what not in ("stop", "up")] == ["revalidate"]   # no failed, no rolled-back


def test_a_good_config_that_fails_on_a_group_not_recreated_is_recreated_and_gated_once_more(monkeypatch):
    """A member restarted alone that no record can show (one written before records kept the container): the gate,
    due, fails with every config its last good one; the group is recreated (rank 0 last) and gated once more."""
    from sglang_infra.hostside.gate.gate import GROUP_STATE_FAILED

    failed = (False, Output([f"gate[gpu-01]: FAILED: the server did not become ready. {GROUP_STATE_FAILED}"]))
    healed, ran = turn(monkeypatch, [failed, (True, Output())], changed=False, restart=False)
    assert healed is None
    assert ran == [("gpu-01", "revalidate"), ("gpu-01", "stop"), ("gpu-02", "stop"), ("gpu-02", "up"),
                   ("gpu-01", "up"), ("gpu-01", "revalidate"), ("gpu-02", "keep")]
    failure, ran = turn(monkeypatch, [failed, failed], changed=False, restart=False)
    assert failure is not None and "no config is marked failed" in failure
    assert [what for _, what in ran if what not in ("stop", "up")] == ["revalidate", "revalidate"]


def member_snapshots(found, compose=None, good=None, env=None, env_good=None, started=None, gate_saw=None):
    """Every member's snapshot as the group's operation reads it: running its planned config, files on disk with
    the shas given (default: the plan's), started and gated as given (default: as GATED)."""
    out = {}
    for name in ("gpu-01", "gpu-02"):
        plan = found[name]
        files = {names.COMPOSE_FILE: {"sha256": compose or plan.compose_sha},
                 names.COMPOSE_FILE + ".good": {"sha256": good or plan.compose_sha}}
        if env or env_good:
            files.update({names.ENV_FILE: {"sha256": env}, names.ENV_FILE + ".good": {"sha256": env_good}})
        container = {**GATED[name]["stack"]["container"], "image_id": "sha256:x"}
        if started and name == "gpu-01":
            container["started_at"] = started
        out[name] = {"stack": {"container": container, "current": True}, "files": {plan.paths.docker: files},
                     "docker": {"images": {plan.image.serving: {"id": "sha256:x"}}},
                     "gate": {"started_at": gate_saw if gate_saw and name == "gpu-01" else GATED[name]["gate"]
                              ["started_at"]}}
    return out


def test_the_groups_operation_recreates_a_group_whose_rank_0_restarted_alone(monkeypatch):
    from sglang_infra.operations import group as group_ops

    found, _ = plans()
    group = nodegroups.with_members(found)["gpu-01"].node_group
    monkeypatch.setattr(group_ops, "member_snapshots", lambda state, g: member_snapshots(found))
    assert group_ops.restart_reasons(None, group) == []
    restarted = member_snapshots(found, started="2026-12-04T10:01:05.5Z")
    monkeypatch.setattr(group_ops, "member_snapshots", lambda state, g: restarted)
    assert [line.split(":", 1)[0] for line in group_ops.restart_reasons(None, group)] == ["gpu-01 (rank 0)"]


def test_a_config_is_unchanged_only_when_every_members_files_are_its_last_good_ones():
    from sglang_infra.operations import group as group_ops

    found, _ = plans()
    group = nodegroups.with_members(found)["gpu-01"].node_group
    assert group_ops.unchanged(member_snapshots(found), group)
    assert not group_ops.unchanged(member_snapshots(found, good="sha-of-the-old-config"), group)
    assert group_ops.unchanged(member_snapshots(found, env="e", env_good="e"), group)
    assert not group_ops.unchanged(member_snapshots(found, env="e2", env_good="e"), group)
    first = member_snapshots(found)
    for each in first.values():   # a first deploy: no known-good copy yet
        for files in each["files"].values():
            del files[names.COMPOSE_FILE + ".good"]
    assert not group_ops.unchanged(first, group)


def test_a_member_that_cannot_reach_rank_0s_dist_init_address_is_refused(tmp_path):
    import socket

    from sglang_infra.hostside.read import snapshot as host_snapshot
    from sglang_infra.plan.resolve import snapshot_spec

    group = nodegroups.membership(MEMBERS)
    assert snapshot_spec(DEFAULTS, node_group=group["gpu-02"])["reach"] == ["10.0.0.11", 29500, 22]
    assert "reach" not in snapshot_spec(DEFAULTS, node_group=group["gpu-01"])   # rank 0 reaches itself
    with socket.socket() as free, socket.socket() as other, socket.socket() as answering:
        free.bind(("127.0.0.1", 0))
        other.bind(("127.0.0.1", 0))
        answering.bind(("127.0.0.1", 0))
        answering.listen()
        port, closed, ssh = free.getsockname()[1], other.getsockname()[1], answering.getsockname()[1]
        # nothing listens on the dist-init port yet, but the host answers on its ssh port: reached
        assert host_snapshot.reach(["127.0.0.1", port, ssh])["ok"] is True
        # a refusal on both (a router refusing for a host that is not there): not reached
        assert host_snapshot.reach(["127.0.0.1", port, closed])["ok"] is False
        assert host_snapshot.reach(["127.0.0.1", ssh, closed]) == {"ok": True, "said": "connected"}
    assert host_snapshot.reach(["name.invalid", port, ssh])["ok"] is False
    [line] = check_reach("gpu-02", group["gpu-02"], {"reach": {"ok": False, "said": "timed out"}})
    assert "gpu-02" in line and "10.0.0.11:29500" in line and "timed out" in line
    assert check_reach("gpu-02", group["gpu-02"], {"reach": {"ok": True, "said": "connected"}}) == []


def test_a_members_name_with_a_newline_stays_inside_its_compose_comment():
    """Inventory names reach compose.yaml in the group flags' reasons: a newline in one started a YAML line of
    its own (here a top-level key) in every member's file."""
    hosts = [host("gpu-01", "10.0.0.11"), host("gpu-02\ninjected: true\n#", "10.0.0.12")]
    found, _ = plans(hosts)
    for plan in found.values():
        assert set(yaml.safe_load(plan.compose)) == {"name", "services", "volumes"}
        assert "\ninjected" not in plan.compose
        assert "(gpu-01, gpu-02\\x0ainjected: true\\x0a#)." in plan.compose


def test_a_member_listens_on_its_fleet_address_not_every_address_of_the_host():
    """A member runs on the host's network without a key: sglang_bind_address's default ('0.0.0.0') put its API on
    every interface of the host. It binds its fleet address instead, and the gate and Docker's health check reach
    it there; an address the data names is kept."""
    found, _ = plans([host("gpu-01", "10.0.0.11"), host("gpu-02", "fd00::12"),
                      host("gpu-03", "10.0.0.13", group="ds-b", sglang_worker_address="192.168.7.13"),
                      host("gpu-04", "10.0.0.14", group="ds-b", sglang_bind_address="127.0.0.1")])
    for name, address, url in (("gpu-01", "10.0.0.11", "http://10.0.0.11:30000"),
                               ("gpu-02", "fd00::12", "http://[fd00::12]:30000"),
                               ("gpu-03", "192.168.7.13", "http://192.168.7.13:30000"),
                               ("gpu-04", "127.0.0.1", "http://127.0.0.1:30000")):
        plan = found[name]
        assert f"--host={address}" in service(plan)["command"], name
        assert (plan.exposure.bind_address, plan.gate.url) == (address, url), name
        assert f"urlopen('{url}/health'" in service(plan)["healthcheck"]["test"][-1], name
        assert service(plan)["cap_drop"] == ["NET_RAW"], name
    solo = service(plans()[0]["solo"])
    assert "--host=0.0.0.0" in solo["command"] and "cap_drop" not in solo


def test_a_member_named_by_dns_with_every_address_is_refused_naming_the_fix():
    hosts = [host("gpu-01", "gpu-01.dc1.example"), host("gpu-02", "10.0.0.12")]
    with pytest.raises(DeployDataError) as refused:
        plans(hosts)
    [line] = refused.value.problems
    assert line.startswith("host gpu-01: sglang_bind_address: '0.0.0.0' (every address) on a member of group 'ds-a'")
    assert "Fix: set sglang_bind_address to this member's IP address on the group's network" in line
    found, _ = plans([host("gpu-01", "gpu-01.dc1.example", sglang_bind_address="10.0.0.11"), hosts[1]])
    assert "--host=10.0.0.11" in service(found["gpu-01"])["command"]
