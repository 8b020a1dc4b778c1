"""The settled host (sglang_infra/run/settled.py): the plan's fingerprint changes with every input of a plan and with
the deploy's own code, and not otherwise; the snapshot's digest changes with any drift and not with what moves by
itself; who skips, and who takes the full plan when another host does."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from conftest import FIXTURES, converged_snapshot, pinned_defaults

from sglang_infra.hostside import dockerapi
from sglang_infra.hostside.gpu import nvsmi
from sglang_infra.hostside.read import settled as stamp_file
from sglang_infra.plan.resolve import resolve
from sglang_infra.plan.types import FrontDoor, GatewaySettings, Monitor, MonitorSettings
from sglang_infra.run import settled

DEFAULTS = pinned_defaults()


def plan(name: str = "gpu-01", **data):
    return resolve(name, {**DEFAULTS, **data}, converged_snapshot())


def test_fingerprint_is_the_same_for_the_same_inputs():
    assert settled.plan_fingerprint(plan()) == settled.plan_fingerprint(plan())


def test_fingerprint_leaves_out_the_inventory_name_alone():
    """Aliases of one host (one SSH target, several names) plan the same state: one stamp, no fight."""
    assert settled.plan_fingerprint(plan("gpu-01")) == settled.plan_fingerprint(plan("gpu-99"))


@pytest.mark.parametrize("key, value", [
    ("sglang_mem_fraction_static", 0.8),           # a rendered flag: compose.yaml changes
    ("sglang_drain_timeout", 301),                 # a plan value that is no file of its own
    ("sglang_benchmark_max_tokens", 128),          # the gate's scripts
    ("sglang_node_exporter_port", 9101),           # the exporter's drop-in
    ("sglang_apt_cache_time", 3600),               # how the engine's packages would be installed
])
def test_fingerprint_changes_with_any_data_value(key, value):
    assert key in DEFAULTS, key
    assert settled.plan_fingerprint(plan(**{key: value})) != settled.plan_fingerprint(plan())


def test_fingerprint_changes_with_the_api_key_file_content(tmp_path):
    """The key is in the plan (the server's private config) but in no repr: the fingerprint still sees it."""
    key = tmp_path / "api-key"
    key.write_text("first-key-" + "a" * 40 + "\n")
    first = settled.plan_fingerprint(plan(sglang_api_key_file=str(key)))
    key.write_text("second-key-" + "b" * 40 + "\n")
    assert settled.plan_fingerprint(plan(sglang_api_key_file=str(key))) != first


def test_fingerprint_changes_with_a_fleet_value_the_preflight_sets():
    base = plan()
    assert settled.plan_fingerprint(dataclasses.replace(base, roll_settings=dataclasses.replace(
        base.roll_settings, drain_timeout=base.roll_settings.drain_timeout + 1))) \
        != settled.plan_fingerprint(base)


def test_fingerprint_changes_with_the_code():
    base = plan()
    assert settled.plan_fingerprint(base, code="a" * 64) != settled.plan_fingerprint(base, code="b" * 64)


def _tree(root):
    for rel, text in {"deploy.py": "x = 1\n", "tasks/stack.py": "y = 2\n", "templates/compose.yaml.j2": "a: 1\n",
                      "sglang_infra/plan.py": "z = 3\n", "group_data/all.py": "sglang_x = 1\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.parametrize("changed", ["deploy.py", "tasks/stack.py", "templates/compose.yaml.j2",
                                     "sglang_infra/plan.py", "group_data/all.py"])
def test_code_digest_changes_with_any_code_or_template(tmp_path, changed):
    before = settled.code_digest.__wrapped__(_tree(tmp_path / "a"))
    root = _tree(tmp_path / "b")
    (root / changed).write_text((root / changed).read_text() + "# edited\n")
    assert settled.code_digest.__wrapped__(root) != before


def test_code_digest_ignores_bytecode_caches(tmp_path):
    before = settled.code_digest.__wrapped__(_tree(tmp_path / "a"))
    root = _tree(tmp_path / "b")
    (root / "sglang_infra" / "__pycache__").mkdir()
    (root / "sglang_infra" / "__pycache__" / "plan.cpython-311.pyc").write_bytes(b"\0\1")
    assert settled.code_digest.__wrapped__(root) == before


def test_code_digest_of_this_checkout_covers_the_templates():
    assert all((settled.ROOT / top).exists() for top in settled.CODE)


def test_canonical_refuses_what_it_cannot_write_the_same_way_twice():
    with pytest.raises(settled.Unfingerprintable):
        settled.canonical({"x": object()})


def snapshot(**changes):
    found = converged_snapshot()
    found["stack"] = {"container": {"state": "running", "started_at": "2026-12-05T00:00:00Z", "health": "healthy",
                                    "status": "Up 3 minutes (healthy)"}, "current": True}
    found.update(changes)
    return found


def test_snapshot_digest_ignores_what_moves_by_itself_and_the_stamp():
    later = snapshot()
    later["stack"]["container"]["status"] = "Up 2 hours (unhealthy)"
    later["stack"]["container"]["health"] = "unhealthy"   # a slow healthcheck under load: no operation reads it
    later["settled"] = {"plan": "a" * 64, "snapshot": "b" * 64}
    assert settled.snapshot_digest(later) == settled.snapshot_digest(snapshot())


@pytest.mark.parametrize("drift", [
    lambda s: s["stack"]["container"].update(state="exited"),
    lambda s: s["stack"]["container"].update(started_at="2026-12-05T01:00:00Z"),   # restarted
    lambda s: s["account"].update(password_locked=False),
    lambda s: s.setdefault("files", {}).setdefault("/opt/sglang/docker", {}).update(
        {"compose.yaml": {"owner": "root", "group": "root", "mode": "644", "sha256": "0" * 64}}),
])
def test_snapshot_digest_changes_with_drift(drift):
    drifted = snapshot()
    drift(drifted)
    assert settled.snapshot_digest(drifted) != settled.snapshot_digest(snapshot())


def stamped(plans, drifted=()):
    """Each host's snapshot carrying the stamp of its plan, except the ``drifted`` ones."""
    snapshots = {}
    for name, each in plans.items():
        found = snapshot()
        found["settled"] = {"plan": settled.plan_fingerprint(each), "snapshot": settled.snapshot_digest(found)}
        if name in drifted:
            found["account"] = {**found["account"], "password_locked": False}
        snapshots[name] = found
    return snapshots


def test_every_host_as_stamped_skips():
    plans = {"a": plan("a"), "b": plan("b")}
    skips, stamps = settled.decide(plans, stamped(plans))
    assert skips == {"a", "b"}
    assert set(stamps) == {"a", "b"}


def test_a_drifted_host_takes_the_full_plan_and_a_standalone_one_still_skips():
    plans = {"a": plan("a"), "b": plan("b")}
    skips, _ = settled.decide(plans, stamped(plans, drifted={"a"}))
    assert skips == {"b"}


FRONT_DOOR = FrontDoor(image="smg@sha256:" + "0" * 64, image_archive=None, control_plane_config=None,
                       settings=GatewaySettings.of(DEFAULTS))


@pytest.mark.parametrize("involved", [{"front_door": FRONT_DOOR}, {"monitor": Monitor(MonitorSettings.of(DEFAULTS))},
                                      {"peer_sources": {"m": None}}])
def test_a_host_that_involves_others_skips_only_when_no_host_takes_the_full_plan(involved):
    plans = {"a": plan("a"), "gw": dataclasses.replace(plan("gw"), **involved)}
    assert settled.decide(plans, stamped(plans))[0] == {"a", "gw"}
    assert settled.decide(plans, stamped(plans, drifted={"a"}))[0] == set()
    assert settled.decide(plans, stamped(plans), whole=False)[0] == {"a"}


def test_a_changed_plan_takes_the_full_plan():
    plans = {"a": plan("a")}
    snapshots = stamped(plans)
    assert settled.decide({"a": plan("a", sglang_mem_fraction_static=0.8)}, snapshots)[0] == set()


def test_a_dry_run_never_skips():
    """--dry shows every operation's plan, as before the settled host."""
    plans = {"a": plan("a")}
    assert settled.decide(plans, stamped(plans), dry=True)[0] == set()


def test_validate_always_and_the_status_report_never_skip():
    plans = {"a": plan("a", sglang_validate="always")}
    assert settled.decide(plans, stamped(plans))[0] == set()
    plans = {"a": plan("a")}
    assert settled.decide(plans, stamped(plans), report=True)[0] == set()


def _door_plans():
    from sglang_infra.plan.types import PeerDoor

    door = PeerDoor(address="10.0.0.1", port=8765, group="sglang", hub="/opt/sglang/hf-cache/hub", pins=(),
                    key=b"k" * 32)
    return {"a": plan("a"), "door": dataclasses.replace(plan("door"), peer_door=door)}


def _with_door(snapshots, name, door):
    """``snapshots`` with the door check ``door`` in ``name``'s snapshot, its stamp made for that snapshot."""
    found = snapshots[name]
    found["peer"] = {"address": "10.0.0.1", "local": True, "door": door}
    found["settled"] = {**found["settled"], "snapshot": settled.snapshot_digest(found)}
    return snapshots


HELD = {"held": True, "pid": 4242, "why": "10.0.0.1:8765 is held by nginx.service (pid 4242)", "cert": "c" * 64}


def test_a_host_whose_door_its_snapshot_found_held_skips():
    """A fleet with the site key settles too: the snapshot checks the door as the run's door check would."""
    plans = _door_plans()
    assert settled.decide(plans, _with_door(stamped(plans), "door", HELD))[0] == {"a", "door"}


@pytest.mark.parametrize("door", [
    None,                                                  # no door check in the snapshot: an older reader
    {**HELD, "held": False, "why": "another process holds 10.0.0.1:8765"},
    {**HELD, "cert": None},                                # no certificate a puller could pin
])
def test_a_host_whose_door_is_not_found_held_takes_the_full_plan(door):
    """Even with a stamp that matches (a door lost since its last settled run would change the digest; here the
    stamp was made for this very snapshot): an unheld door goes to the run's door check."""
    plans = _door_plans()
    assert settled.decide(plans, _with_door(stamped(plans), "door", door))[0] == {"a"}


def test_another_listener_on_the_door_is_a_drift():
    plans = _door_plans()
    snapshots = _with_door(stamped(plans), "door", HELD)
    snapshots["door"]["peer"]["door"] = {**HELD, "pid": 999, "why": "held by another process"}
    assert settled.decide(plans, snapshots)[0] == {"a"}


def test_no_stamp_takes_the_full_plan():
    plans = {"a": plan("a")}
    assert settled.decide(plans, {"a": snapshot()})[0] == set()


STAMP = {"plan": "a" * 64, "snapshot": "b" * 64}


def test_stamp_reads_back_as_written(tmp_path):
    path = tmp_path / "settled.json"
    os.umask(0o022)
    os.system(f"printf '%s' '{json.dumps(STAMP)}' | sh -c '{stamp_file.write_command(str(path))}'")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert stamp_file.read(str(path)) == STAMP


@pytest.mark.parametrize("spoil", [
    lambda p: p.chmod(0o644),                                # not root's alone
    lambda p: p.write_text("{not json"),
    lambda p: p.write_text(json.dumps({"plan": "a" * 64})),  # a key missing
])
def test_stamp_not_as_written_reads_as_none(tmp_path, spoil):
    path = tmp_path / "settled.json"
    path.write_text(json.dumps(STAMP))
    path.chmod(0o600)
    spoil(path)
    assert stamp_file.read(str(path)) is None


def test_stamp_behind_a_link_reads_as_none(tmp_path):
    real = tmp_path / "real.json"
    real.write_text(json.dumps(STAMP))
    real.chmod(0o600)
    (tmp_path / "settled.json").symlink_to(real)
    assert stamp_file.read(str(tmp_path / "settled.json")) is None


def test_why_a_stamped_host_takes_the_full_plan_is_said():
    wanted = {"plan": "a" * 64, "snapshot": "b" * 64}
    assert settled.unsettled_because(None, wanted) is None
    assert settled.unsettled_because(wanted, wanted) is None
    assert "snapshot" in settled.unsettled_because({**wanted, "snapshot": "c" * 64}, wanted)
    assert "plan" in settled.unsettled_because({**wanted, "plan": "c" * 64}, wanted)


def test_why_a_host_whose_stamp_matches_still_takes_the_full_plan_is_said():
    """A gateway host as stamped takes the full plan because another host does, or the run is limited: the run's
    log says so and names that host, as it says why a host whose stamp differs does (issue 56: the gateway,
    group and worker hosts of a fleet were planned in full without a word, the one cause alone named)."""
    plans = {"a": plan("a"), "gw": dataclasses.replace(plan("gw"), front_door=FRONT_DOOR), "b": plan("b")}
    snapshots = stamped(plans, drifted={"a"})
    skips, stamps = settled.decide(plans, snapshots)
    assert skips == {"b"}
    assert settled.held_back(plans, snapshots, stamps, skips) == {
        "gw": "it involves other hosts, and a takes the full plan"}
    snapshots = stamped(plans)
    skips, stamps = settled.decide(plans, snapshots, whole=False)
    assert settled.held_back(plans, snapshots, stamps, skips, whole=False) == {
        "gw": "it involves other hosts, and this run has not every host of the inventory (--limit)"}
    skips, stamps = settled.decide(plans, snapshots)
    assert skips == set(plans) and settled.held_back(plans, snapshots, stamps, skips) == {}


def test_a_door_not_found_held_or_validate_always_is_said_too():
    plans = {**_door_plans(), "v": plan("v", sglang_validate="always")}
    snapshots = _with_door(stamped(plans), "door", {**HELD, "cert": None})
    skips, stamps = settled.decide(plans, snapshots)
    assert settled.held_back(plans, snapshots, stamps, skips) == {
        "door": "its snapshot did not find its peer door held by the door's nginx with its certificate",
        "v": "sglang_validate is always (it is gated on every run)"}


# ---------------------------------------------------------------- a GPU host's live readings (issue 56)

NVSMI = FIXTURES / "nvidia-smi"
# Two reads of one lent H200, days apart, nothing changed on it: only its temperature and power draw moved.
FIRST_READ = NVSMI / "h200-2026-11-29.q.xml"
SECOND_READ = FIXTURES / "h200-2026-12-04" / "q.xml"


def gpu_snapshot(document=SECOND_READ, move=None):
    """A converged snapshot whose gpus section is what the snapshot program reads on that H200 (the recorded query,
    topology and -q -x document), ``move`` applied to each GPU's parsed reading."""
    driver = nvsmi.parse(document.read_text())
    for gpu in driver["gpus"]:
        (move or (lambda g: None))(gpu)
    found = snapshot()
    found["gpus"] = {"query": (NVSMI / "h200-1gpu.query.csv").read_text().splitlines(),
                     "topo": (NVSMI / "h200-1gpu.topo.txt").read_text().splitlines(), "runtimes": ["nvidia", "runc"],
                     "driver": driver, "nvswitches": [], "fabric_manager": None,
                     "units": {nvsmi.PERSISTENCED_UNIT: {"loaded": True, "active": "active", "enabled": "enabled",
                                                         "reload_needed": False}}}
    return found


def busy(gpu):
    """The readings of a GPU serving: hot, drawing power, busy, its memory full, capped by power, a corrected
    ECC error or two."""
    gpu.update(temperature_c=71, slowdown_c=88, power_w=655.4, utilization=97, memory_utilization=61,
               memory_used_mib=130112, clock_reasons={**gpu["clock_reasons"], "gpu_idle": False, "sw_power_cap": True})
    gpu["ecc_volatile"] = {**gpu["ecc_volatile"], "corrected": 2}
    gpu["ecc_aggregate"] = {**gpu["ecc_aggregate"], "corrected": 5}


def test_two_recorded_reads_of_one_h200_have_one_digest():
    assert settled.snapshot_digest(gpu_snapshot(FIRST_READ)) == settled.snapshot_digest(gpu_snapshot(SECOND_READ))


def test_a_real_h100_read_idle_and_then_busy_has_one_digest():
    """Recorded on the lent H100: the second read 12 s into a matmul loop (33 to 64 C, 71 to 691 W, 100 %)."""
    reads = json.loads((NVSMI / "h100-idle-busy.gpus.json").read_text())
    assert reads["first"]["driver"]["gpus"][0]["power_w"] < 100 < reads["second"]["driver"]["gpus"][0]["power_w"]
    first, second = snapshot(gpus=reads["first"]), snapshot(gpus=reads["second"])
    assert settled.snapshot_digest(first) == settled.snapshot_digest(second)


def test_a_busy_gpu_has_the_digest_of_an_idle_one():
    assert settled.snapshot_digest(gpu_snapshot(move=busy)) == settled.snapshot_digest(gpu_snapshot())


@pytest.mark.parametrize("drift", [
    lambda s: s["gpus"]["driver"].update(driver="580.95.05"),                   # another driver running
    lambda s: s["gpus"]["driver"].update(cuda="12.8"),
    lambda s: s["gpus"]["driver"]["gpus"].clear(),                             # the GPU fell off the bus
    lambda s: s["gpus"]["driver"]["gpus"][0].update(name="NVIDIA H100 80GB HBM3"),
    lambda s: s["gpus"]["driver"]["gpus"][0].update(bus_id="00000000:00:07.0"),
    lambda s: s["gpus"]["driver"]["gpus"][0].update(memory_total_mib=81559),
    lambda s: s["gpus"]["driver"]["gpus"][0].update(persistence=False),
    lambda s: s["gpus"]["driver"]["gpus"][0].update(power_limit_w=500),
    lambda s: s["gpus"]["driver"]["gpus"][0].update(remap_pending=True),
    lambda s: s["gpus"]["driver"]["gpus"][0]["ecc_volatile"].update(uncorrected=1),
    lambda s: s["gpus"]["driver"]["gpus"][0].update(temperature_c=92),          # over its slowdown: a fault
    lambda s: s["gpus"]["query"].append("1, NVIDIA H200, 9.0, 143771"),
    lambda s: s["gpus"].update(runtimes=["runc"]),                              # the NVIDIA runtime is gone
    lambda s: s["gpus"]["units"][nvsmi.PERSISTENCED_UNIT].update(active="inactive"),
])
def test_what_a_gpu_is_still_changes_the_digest(drift):
    drifted = gpu_snapshot()
    drift(drifted)
    assert settled.snapshot_digest(drifted) != settled.snapshot_digest(gpu_snapshot())


def _every_role():
    """One plan of each role: a standalone worker, a gateway host, a monitor, a host with peer sources, a host with
    a peer door, and the two members of a multi-node group."""
    from sglang_infra.plan.types import NodeGroup

    plans = {"worker": plan("worker"),
             "gateway": dataclasses.replace(plan("gateway"), front_door=FRONT_DOOR),
             "monitor": dataclasses.replace(plan("monitor"), monitor=Monitor(MonitorSettings.of(DEFAULTS))),
             "peers": dataclasses.replace(plan("peers"), peer_sources={"m": None}),
             "door": _door_plans()["door"]}
    for rank, name in enumerate(("rank-0", "rank-1")):
        group = NodeGroup(name="ds", rank=rank, members=("rank-0", "rank-1"), head="10.0.0.11", port=29500, ports=32)
        plans[name] = dataclasses.replace(plan(name), node_group=group)
    return plans


def test_every_role_settles_while_its_gpus_readings_move():
    """The run that stamped read each host's GPU one way; this run reads it another (both recorded on one real
    H200), nothing else changed: every host, of every role, takes the settled path."""
    plans = _every_role()
    assert all(settled.involves_others(each) for name, each in plans.items() if name != "worker")
    snapshots = {}
    for name, each in plans.items():
        first, second = gpu_snapshot(FIRST_READ), gpu_snapshot(SECOND_READ, move=busy)
        if name == "door":
            first["peer"] = second["peer"] = {"address": "10.0.0.1", "local": True, "door": HELD}
        second["settled"] = {"plan": settled.plan_fingerprint(each), "snapshot": settled.snapshot_digest(first)}
        snapshots[name] = second
    assert settled.decide(plans, snapshots)[0] == set(plans)


GATEWAY_PORTS = [{"IP": "127.0.0.1", "PrivatePort": 29000, "PublicPort": 29000, "Type": "tcp"},
                 {"IP": "172.18.0.6", "PrivatePort": 30080, "PublicPort": 30080, "Type": "tcp"}]


@pytest.mark.parametrize("order", [GATEWAY_PORTS, GATEWAY_PORTS[::-1]])
def test_a_containers_ports_read_the_same_in_the_engines_either_order(monkeypatch, order):
    """The engine lists a container's published ports in no fixed order: a gateway host (its port and its metrics
    port) read them one way in the run that stamped it and the other way in the next (test_groups' gateway host, on
    the machine), and took the full plan. The read sorts them, so its snapshot digest stays."""
    listed = [{"Id": "c1", "Names": ["/gw"], "State": "running", "Status": "Up 3 minutes", "ImageID": "sha256:i",
               "Labels": {"com.docker.compose.service": "router"}, "Ports": order}]
    monkeypatch.setattr(dockerapi, "get", lambda path, query=None, socket_path=None: listed)
    [container] = dockerapi.containers(["com.docker.compose.project=p"])
    assert container["ports"] == GATEWAY_PORTS
