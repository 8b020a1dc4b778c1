"""A driver change on workers behind a gateway goes in the pool's turns (issue 52, item 3): each worker out of its
gateways and drained, rebooted into the driver installed on disk, its driver checked loaded, gated on it, and back,
before the next one leaves; a multi-node group's members reboot together in rank 0's turn; a host alone reboots in
pyinfra's step (sglang_allow_reboot is its operator's call). Fake worker and gateway hosts record what runs where, in
greenlets as pyinfra runs one operation on every host at once (test_roll.py's); the reboot itself is run/reboot.py's,
recorded (a real one is what a GPU server does; a container host cannot boot)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import gevent
import pytest
from test_driver_install import plan, task_calls
from test_roll import GATE, Output, most_out, roll, url
from test_roll import Host as RollHost

from sglang_infra.operations import roll as roll_ops
from sglang_infra.plan.types import Front, NodeGroup, Roll
from sglang_infra.run import reboot

VERSION = "580.105.08"
INSTALL = ["kernel_headers_installed", "vendor_repository", "nvidia_driver_installed"]   # Debian's, in order
REAL_START, REAL_WAIT = reboot.start, reboot.wait   # before the fixture records them
UP = roll_ops.Reboot(VERSION, ("nvidia-fabricmanager.service",), 1200)


class Host(RollHost):
    """A worker that reboots: its reboot and return are recorded, and its driver loads unless ``driver_fails``."""

    def __init__(self, name, log, driver_fails=False, **kwargs):
        super().__init__(name, log, **kwargs)
        self.driver_fails = driver_fails

    def run_shell_command(self, command, print_output=False, _stdin=None, **_):
        if str(command) == reboot.after_boot(UP.version, UP.units):
            gevent.sleep(0.01)
            self.log.append((self.name, "driver loaded" if not self.driver_fails else "driver NOT loaded"))
            if self.driver_fails:
                return False, Output(err=[f"NVIDIA driver {VERSION} is installed and the host rebooted, but the "
                                          "kernel loaded no NVIDIA driver (dkms status; dmesg)"])
            return True, Output()
        return super().run_shell_command(command, print_output, _stdin, **_)


@pytest.fixture(autouse=True)
def recorded_reboots(monkeypatch):
    """run/reboot.py's start and wait, recorded in the host's log (the boot id changes at once)."""
    def start(each, arguments=None):
        each.log.append((each.name, "reboot"))
        return "boot-before", None

    def wait(each, before, timeout, arguments=None):
        gevent.sleep(0.02)
        each.log.append((each.name, "back from its boot"))
        return None
    monkeypatch.setattr(reboot, "start", start)
    monkeypatch.setattr(reboot, "wait", wait)


@pytest.fixture
def fleet(monkeypatch):
    """test_roll.py's: a gateway host whose gateway lists gpu-01..gpu-03 healthy (in service), the run's hosts."""
    log: list = []
    gateway_host = Host("gw-1", log)
    gateway_host.gateway = {url(n): True for n in (1, 2, 3)}
    active: list = []
    state = SimpleNamespace(inventory=SimpleNamespace(get_host=lambda name: gateway_host,
                                                      get_active_hosts=lambda: active), active=active)
    monkeypatch.setattr(roll_ops, "connector_arguments", lambda state, other: {})
    monkeypatch.setattr(roll_ops, "serving_validated", lambda this: this.validated)
    monkeypatch.setattr(roll_ops, "ARRIVAL_SECONDS", 3)
    yield state, gateway_host, log
    roll_ops._pools.clear()


def run_driver_turns(state, workers, rolls, stamped=None):
    stamped = stamped or [True] * len(workers)
    state.active[:] = workers
    jobs = [gevent.spawn(roll_ops.roll_worker, state, w, r, roll_ops.Up(UP, UP), GATE, "a reboot",
                         "http://127.0.0.1:30000/metrics", None, 60, "/opt/sglang/docker", (), s, phase="driver")
            for w, r, s in zip(workers, rolls, stamped)]
    gevent.joinall(jobs, raise_error=True)
    return [job.value for job in jobs]


def test_each_worker_reboots_in_its_turn_out_of_its_gateways_drained_and_gated_before_the_next_leaves(fleet):
    state, gateway_host, log = fleet
    workers = [Host(f"gpu-0{n}", log) for n in (1, 2, 3)]
    assert run_driver_turns(state, workers, [roll()(n) for n in (1, 2, 3)]) == [True, True, True]
    assert most_out(log) == 1
    assert log[0] == ("gw-1", "view")
    turns = [log[i:i + 7] for i in range(1, len(log), 7)]
    assert len(turns) == 3
    for turn in turns:
        worker = next(name for name, what in turn if what == "reboot")
        address = turn[0][1].split(" ", 1)[1]
        assert turn == [("gw-1", f"remove {address}"), (worker, "drain"), (worker, "reboot"),
                        (worker, "back from its boot"), (worker, "driver loaded"), (worker, "gate"),
                        ("gw-1", f"add {address}")]
    assert all(gateway_host.gateway.values()) and len(gateway_host.gateway) == 3


def test_two_at_a_time_where_the_pool_allows_two(fleet):
    state, _, log = fleet
    workers = [Host(f"gpu-0{n}", log) for n in (1, 2, 3)]
    assert run_driver_turns(state, workers, [roll(max_unavailable=2)(n) for n in (1, 2, 3)]) == [True] * 3
    assert most_out(log) == 2


def test_a_driver_that_did_not_load_fails_the_worker_named_out_of_its_gateways_and_stops_the_pool(fleet):
    """A driver cannot be rolled back: the worker stays out of its gateways, failed, and the later workers keep
    their old driver (not rebooted)."""
    state, gateway_host, log = fleet
    bad = Host("gpu-01", log, driver_fails=True, validated=False)
    others = [Host("gpu-02", log), Host("gpu-03", log)]
    assert run_driver_turns(state, [bad, *others], [roll()(n) for n in (1, 2, 3)]) == [False, False, False]
    assert [what for name, what in log if name == "gpu-01"] == ["drain", "reboot", "back from its boot",
                                                                "driver NOT loaded"]
    assert roll()(1).url not in gateway_host.gateway
    assert [what for name, what in log if name in ("gpu-02", "gpu-03")] == ["restore good config"] * 2
    assert any("gpu-01 failed: gpu-01: NVIDIA driver 580.105.08 is installed and the host rebooted, but the kernel "
               "loaded no NVIDIA driver" in m for m in bad.messages), bad.messages


def test_a_gate_that_fails_on_the_new_driver_fails_the_worker_and_stops_the_pool(fleet):
    state, _, log = fleet
    bad = Host("gpu-01", log, gate_fails=True, validated=False)
    others = [Host("gpu-02", log), Host("gpu-03", log)]
    assert run_driver_turns(state, [bad, *others], [roll()(n) for n in (1, 2, 3)]) == [False, False, False]
    assert [what for name, what in log if name == "gpu-01"][-1] == "gate"
    assert not any(what == "reboot" for name, what in log if name != "gpu-01")


def test_a_groups_members_reboot_together_then_the_group_is_recreated_and_gated_as_one(monkeypatch):
    log: list = []
    members = {name: Host(name, log) for name in ("gpu-01", "gpu-02")}
    state = SimpleNamespace(inventory=SimpleNamespace(get_host=members.__getitem__,
                                                      get_active_hosts=lambda: list(members.values())))
    monkeypatch.setattr(roll_ops, "connector_arguments", lambda state, other: {})
    gated = []
    monkeypatch.setattr(roll_ops, "group_restart_and_gate",
                        lambda state, host, group, restart, why: gated.append(restart) or None)
    group = NodeGroup(name="g", rank=0, members=("gpu-01", "gpu-02"), head="10.0.0.1", port=5000, ports=100)
    assert roll_ops.restart_and_gate(members["gpu-01"], UP, GATE, state, group) is None
    assert log == [("gpu-01", "reboot"), ("gpu-02", "reboot"), ("gpu-01", "back from its boot"),
                   ("gpu-02", "back from its boot"), ("gpu-01", "driver loaded"), ("gpu-02", "driver loaded")]
    assert gated == [True]   # recreated as one unit after the boot, then gated through rank 0


def test_a_group_member_whose_install_failed_keeps_the_whole_group_from_rebooting():
    log: list = []
    members = {name: Host(name, log) for name in ("gpu-01", "gpu-02")}
    state = SimpleNamespace(inventory=SimpleNamespace(get_host=members.__getitem__,
                                                      get_active_hosts=lambda: [members["gpu-01"]]))
    group = NodeGroup(name="g", rank=0, members=("gpu-01", "gpu-02"), head="10.0.0.1", port=5000, ports=100)
    failure = roll_ops.restart_and_gate(members["gpu-01"], UP, GATE, state, group)
    assert failure == "gpu-02 failed before its reboot (its driver install): not rebooted"
    assert log == []


# ------------------------------------------------------------------ which hosts take turns (tasks/gpu_driver.py)
FRONT = Front(gateway_host="gw-1", slug="m", url="http://127.0.0.1:30080", metrics="http://127.0.0.1:29000/metrics",
              directory="/opt/sglang/router/m", key_file=None)


def behind_a_gateway(the_plan):
    return replace(the_plan, roll=Roll(url="http://10.0.0.1:30000", fronts=(FRONT,), pool="m behind gw-1/m",
                                       pool_size=3, max_unavailable=1, drain_timeout=60))


def in_group(the_plan, rank):
    return replace(the_plan, node_group=NodeGroup(name="g", rank=rank, members=("gpu-01", "gpu-02"),
                                                  head="10.0.0.1", port=5000, ports=100))


def test_a_worker_behind_a_gateway_reboots_in_its_pools_turn_not_in_pyinfras_step():
    calls = task_calls(behind_a_gateway(plan(VERSION, sglang_allow_reboot=True)))
    assert [name for name, _ in calls] == [*INSTALL, "driver_rolled"]
    turn = calls[-1][1]
    assert turn["version"] == VERSION and turn["roll"].pool == "m behind gw-1/m" and turn["group"] is None
    assert "in its pool's turn in m behind gw-1/m, out of its gateways and drained" in turn["name"]


@pytest.mark.parametrize("rank, expected", [(0, [*INSTALL, "driver_rolled"]),
                                            (1, INSTALL)])
def test_a_groups_rank_0_reboots_the_group_and_its_members_wait_for_it(rank, expected):
    calls = task_calls(in_group(plan(VERSION, sglang_allow_reboot=True), rank))
    assert [name for name, _ in calls] == expected


def test_a_host_alone_reboots_in_pyinfras_step_as_its_operator_allowed():
    calls = task_calls(plan(VERSION, sglang_allow_reboot=True))
    assert [name for name, _ in calls] == [*INSTALL, "reboot",
                                           "nvidia_driver_loaded"]


def test_without_reboot_permission_a_worker_behind_a_gateway_stops_for_its_operator():
    calls = task_calls(behind_a_gateway(plan(VERSION)))
    assert [name for name, _ in calls] == [*INSTALL, "nvidia_driver_loaded"]


# ------------------------------------------------------------------------------------------- run/reboot.py itself
class Booting:
    """A host that answers its boot id: the old one ``old_answers`` times after the reboot, then a new one (or
    never comes back)."""

    def __init__(self, old_answers=1, comes_back=True):
        self.name, self.state, self.connected = "gpu-01", None, True
        self.current_op_global_arguments = {}
        self.boot, self.old_answers, self.comes_back, self.sent = "boot-1", old_answers, comes_back, []

    def disconnect(self):
        self.connected = False

    def connect(self, show_errors=True):
        self.connected = self.comes_back

    def run_shell_command(self, command, print_output=False, **_):
        text = str(command)
        self.sent.append(text)
        if text == reboot.BOOT_ID:
            if len(self.sent) > 2:   # asked after the reboot was sent
                if self.old_answers:
                    self.old_answers -= 1
                else:
                    self.boot = "boot-2"
            return True, Output([self.boot])
        if text == reboot.REBOOT:
            return True, Output()
        raise AssertionError(text)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_the_reboot_is_detached_and_confirmed_by_a_new_boot_id_not_by_uptime():
    host, clock = Booting(old_answers=2), Clock()
    before, why = REAL_START(host)
    assert (before, why) == ("boot-1", None)
    assert host.sent == [reboot.BOOT_ID, reboot.REBOOT] and "&" in reboot.REBOOT   # detached from the session
    assert REAL_WAIT(host, before, 60, clock=clock, sleep=clock.sleep) is None
    assert host.boot == "boot-2" and host.sent.count(reboot.BOOT_ID) == 4   # the old id twice, then the new one


def test_a_host_that_never_comes_back_fails_within_the_bound():
    host, clock = Booting(comes_back=False), Clock()
    assert REAL_WAIT(host, "boot-1", 60, clock=clock, sleep=clock.sleep) == \
        "it did not answer from a new boot within 60 s"
    assert clock.now <= 60 + reboot.FIRST_LOOK + reboot.INTERVAL


def test_after_the_boot_the_loaded_driver_is_checked_and_the_units_started(tmp_path):
    """The shell run once the host is back, for real in bash: /proc/driver/nvidia/version as the H200 recorded it."""
    import subprocess
    from pathlib import Path

    recorded = (Path(__file__).parent / "fixtures" / "driver" / "h200-proc-driver-nvidia-version.txt").read_text()
    version = tmp_path / "version"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "systemctl").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/systemctl.log\n")
    (stubs / "systemctl").chmod(0o755)

    def after(line, units=("nvidia-fabricmanager.service",)):
        version.write_text(line)
        command = reboot.after_boot("580.159.04", units).replace("/proc/driver/nvidia/version", str(version))
        return subprocess.run(["bash", "-c", command], env={"PATH": f"{stubs}:/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=30)

    done = after(recorded)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "systemctl.log").read_text().splitlines() == [
        "cat nvidia-fabricmanager.service", "enable --now nvidia-fabricmanager.service"]
    done = after(recorded.replace("580.159.04", "570.172.08"))
    assert done.returncode == 1
    assert "the kernel loaded 570.172.08" in done.stderr and "stays out of its gateways" in done.stderr
    done = after("")
    assert done.returncode == 1 and "the kernel loaded no NVIDIA driver" in done.stderr


def test_a_bare_server_behind_a_gateway_stops_after_its_turn_for_a_new_plan():
    calls = task_calls(behind_a_gateway(plan(VERSION, gpus=None, sglang_allow_reboot=True)))
    assert [name for name, _ in calls] == [*INSTALL, "driver_rolled",
                                           "nvidia_driver_loaded"]
    assert calls[-1][1]["planned_gpus"] == 0 and calls[-1][1]["rebooted"] is True
