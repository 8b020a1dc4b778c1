"""The rolling, drained restart of workers behind a gateway (operations/roll.py), without hosts: fake worker and
gateway hosts record what runs where, in greenlets as pyinfra runs one operation on every host at once."""

from __future__ import annotations

import json
from types import SimpleNamespace

import gevent
import pytest
from conftest import converged_snapshot, pinned_defaults

from sglang_infra.fleet.gateways import fleet as fleet_of
from sglang_infra.fleet.hosts import read_fleet
from sglang_infra.hostside.roll.drain import in_flight
from sglang_infra.operations import roll as roll_ops
from sglang_infra.plan.problems import DeployDataError
from sglang_infra.plan.refusals import check_data
from sglang_infra.plan.resolve import resolve
from sglang_infra.plan.types import Front, Roll
from sglang_infra.run.operation import detached, restarted_then_gated

FRONT = Front(gateway_host="gw-1", slug="m", url="http://127.0.0.1:30080", metrics="http://127.0.0.1:29000/metrics",
              directory="/opt/sglang/router/m", key_file=None)
UP = roll_ops.Up("docker compose -f compose.yaml up -d",
                 "docker compose -f compose.yaml stop --timeout 10 && docker compose -f compose.yaml up -d")
GATE = "bash /opt/sglang/gate.sh"


class Output(SimpleNamespace):
    def __init__(self, out=(), err=()):
        super().__init__(stdout_lines=list(out), stderr_lines=list(err))


def shipped(program, command):
    """True when ``command`` runs hostside/<program>.py as ship.command packs it (its path in clear), or through
    the code cache (ship.cached_command)."""
    from sglang_infra.machine import ship

    return f'"hostside/{program}.py","exec"' in command or \
        command.startswith(ship.cached_command(program.replace("/", ".")))


class Host:
    """A worker or a gateway host: run_shell_command records (host, what) in the shared log and yields to others."""

    def __init__(self, name, log, gate_fails=False, validated=True):
        self.name, self.log, self.gate_fails, self.validated = name, log, gate_fails, validated
        self.gateway = {}   # on a gateway host: {worker url: healthy}, what its gateway lists
        self.connected, self.current_op_global_arguments, self.state = True, {}, None
        self.messages = []

    def log_styled(self, message, log_func=None, **_):
        self.messages.append(message)

    def connect(self, **_):
        self.connected = True

    def run_shell_command(self, command, print_output=False, _stdin=None, **_):
        text = str(command)
        gevent.sleep(0.01)
        if shipped("roll/gateway_workers", text):
            change = json.loads(_stdin)
            if change.get("view"):
                self.log.append((self.name, "view"))
                return True, Output([json.dumps({"answers": True, "listed": sorted(self.gateway),
                                                 "healthy": sorted(u for u, ok in self.gateway.items() if ok)})])
            url = change.get("remove") or change.get("add")
            if "add" in change:
                self.gateway[url] = True
            else:
                self.gateway.pop(url, None)
            self.log.append((self.name, ("add " if "add" in change else "remove ") + url))
            return True, Output([f"gateway_workers: {url} done"])
        if shipped("roll/restore_good", text):
            self.log.append((self.name, "restore good config"))
            return True, Output()
        if shipped("roll/drain", text):
            self.log.append((self.name, "drain"))
            return True, Output(["drain: no request in flight"])
        for up, what in ((UP.drained, "up"), (UP.at_once, "stop at once, up")):
            if text == restarted_then_gated(up, GATE):   # the restart, then its gate, as one detached program
                self.log.append((self.name, what))
                gevent.sleep(0.01)
                text = detached(GATE)
        if text == UP.drained:
            self.log.append((self.name, "up"))
            return True, Output()
        if text == UP.at_once:
            self.log.append((self.name, "stop at once, up"))
            return True, Output()
        if text == detached(GATE):   # the gate runs apart from the run's connection (hostside/roll/detach.py)
            self.log.append((self.name, "gate"))
            if self.gate_fails:
                return False, Output(err=["gate[x]: FAILED: benchmark.sh: 12 tok/s. Rolled back to the last "
                                          "known-good config"])
            return True, Output()
        raise AssertionError(text)


def url(n):
    return f"http://10.0.0.{n}:30000"


@pytest.fixture
def fleet(monkeypatch):
    """A gateway host whose gateway lists gpu-01..gpu-03 healthy (in service), and the run's active hosts."""
    log = []
    gateway_host = Host("gw-1", log)
    gateway_host.gateway = {url(n): True for n in (1, 2, 3)}
    active = []   # run_all: the workers it runs
    state = SimpleNamespace(inventory=SimpleNamespace(get_host=lambda name: gateway_host,
                                                      get_active_hosts=lambda: active),
                            active=active)
    monkeypatch.setattr(roll_ops, "connector_arguments", lambda state, other: {})
    monkeypatch.setattr(roll_ops, "serving_validated", lambda this: this.validated)
    monkeypatch.setattr(roll_ops, "ARRIVAL_SECONDS", 3)
    yield state, gateway_host, log
    roll_ops._pools.clear()


def roll(size=3, max_unavailable=1, pool="m behind gw-1/m", first=1):
    members = tuple((f"gpu-0{n}", url(n)) for n in range(first, first + size))
    return lambda n: Roll(url=url(n), fronts=(FRONT,), pool=pool, pool_size=size,
                          max_unavailable=max_unavailable, drain_timeout=5, members=members)


def run_all(state, workers, rolls, stamped=None):
    stamped = stamped or [True] * len(workers)
    state.active[:] = workers
    jobs = [gevent.spawn(roll_ops.roll_worker, state, w, r, UP, GATE, "compose.yaml changes",
                         "http://127.0.0.1:30000/metrics", None, 60, "/opt/sglang/docker", (), s)
            for w, r, s in zip(workers, rolls, stamped)]
    gevent.joinall(jobs, raise_error=True)
    return [job.value for job in jobs]


def most_out(log, out=0):
    """The most workers of the pool out of service at once, from the gateway's removals and additions."""
    most = out
    for _, what in log:
        out += what.startswith("remove ") - what.startswith("add ")
        most = max(most, out)
    return most


def test_each_worker_leaves_drains_restarts_passes_and_comes_back_before_the_next_one_leaves(fleet):
    state, _, log = fleet
    workers = [Host(f"gpu-0{n}", log) for n in (1, 2, 3)]
    assert run_all(state, workers, [roll()(n) for n in (1, 2, 3)]) == [True, True, True]
    out = 0
    for _, what in log:   # at most one worker of the pool between its removal and its return
        out += what.startswith("remove ") - what.startswith("add ")
        assert out <= 1
    assert [what for _, what in log[:1]] == ["view"]   # the gateway is asked once what it lists
    log = log[1:]
    turns = [log[i:i + 5] for i in range(0, len(log), 5)]
    assert len(turns) == 3
    for turn in turns:
        worker = next(name for name, what in turn if what == "up")
        url = [what for _, what in turn][0].split(" ", 1)[1]
        assert turn == [("gw-1", f"remove {url}"), (worker, "drain"), (worker, "up"), (worker, "gate"),
                        ("gw-1", f"add {url}")]


def test_max_unavailable_two_lets_two_workers_out_at_once(fleet):
    state, _, log = fleet
    workers = [Host(f"gpu-0{n}", log) for n in (1, 2, 3)]
    assert run_all(state, workers, [roll(size=3, max_unavailable=2)(n) for n in (1, 2, 3)]) == [True] * 3
    out, most = 0, 0
    for _, what in log:
        out += what.startswith("remove ") - what.startswith("add ")
        most = max(most, out)
    assert most == 2


def test_pools_roll_in_parallel(fleet):
    state, gateway_host, log = fleet
    a, b = Host("gpu-01", log), Host("gpu-04", log)
    gateway_host.gateway.update({url(4): True, url(5): True})
    rolls = [roll(size=2, pool="a behind gw-1/a")(1), roll(size=2, pool="b behind gw-1/b", first=4)(4)]
    assert run_all(state, [a, b], rolls) == [True, True]
    removals = [what for _, what in log if what.startswith("remove")]
    assert removals[:2] == ["remove http://10.0.0.1:30000", "remove http://10.0.0.4:30000"]
    assert [what for _, what in log].index("add http://10.0.0.1:30000") > 3   # both were out at once


def test_a_failed_gate_stops_the_pool_and_the_others_never_restart(fleet):
    state, _, log = fleet
    bad = Host("gpu-01", log, gate_fails=True)
    others = [Host("gpu-02", log), Host("gpu-03", log)]
    results = run_all(state, [bad, *others], [roll()(n) for n in (1, 2, 3)])
    assert results == [False, False, False]
    assert [what for name, what in log if name == "gpu-01"] == ["drain", "up", "gate"]
    # the others never restarted, and their last good config is back on disk (what their container runs)
    assert [what for name, what in log if name in ("gpu-02", "gpu-03")] == ["restore good config"] * 2
    # the failed worker, rolled back and gated by its gate, is back in its gateway
    assert [each for each in log if each[0] == "gw-1"][-1] == ("gw-1", "add http://10.0.0.1:30000")
    for other in others:
        assert any("stopped at gpu-01: benchmark.sh: 12 tok/s" in m for m in other.messages), other.messages


def test_a_new_pool_starts_every_worker_at_once_and_a_broken_one_fails_alone(fleet):
    """Issue 35: no gateway lists them yet (a first converge): nobody is served, so nobody waits for a turn."""
    state, gateway_host, log = fleet
    gateway_host.gateway = {}
    bad = Host("gpu-02", log, gate_fails=True, validated=False)
    workers = [Host("gpu-01", log), bad, Host("gpu-03", log)]
    assert run_all(state, workers, [roll()(n) for n in (1, 2, 3)], stamped=[False] * 3) == [True, False, True]
    whats = [what for _, what in log]
    # every container started before any gate ended: the three went together, stopped at once, never drained
    assert whats.count("stop at once, up") == 3 and "drain" not in whats and "up" not in whats
    assert max(i for i, w in enumerate(whats) if w == "stop at once, up") < whats.index("gate") + 3
    assert gateway_host.gateway == {url(1): True, url(3): True}   # the two that passed serve
    assert any("it was out of service, so the roll of m behind gw-1/m goes on" in m for m in bad.messages)


def test_workers_out_of_service_go_first_and_count_against_the_limit(fleet):
    """A new worker joins a pool of three in service: it goes at once; the others wait until it is back, and
    never more than one is out at a time, counting the new one."""
    state, gateway_host, log = fleet
    workers = [Host(f"gpu-0{n}", log) for n in (1, 2, 3, 4)]
    rolls = [roll(size=4)(n) for n in (1, 2, 3, 4)]
    assert run_all(state, workers, rolls, stamped=[True, True, True, False]) == [True] * 4
    whats = [what for _, what in log]
    assert whats.index("add " + url(4)) < min(whats.index("remove " + url(n)) for n in (1, 2, 3))
    assert most_out(log, out=1) == 1


def test_a_share_of_the_pool_lets_that_many_out_at_once(fleet):
    state, gateway_host, log = fleet
    gateway_host.gateway = {url(n): True for n in (1, 2, 3, 4)}
    workers = [Host(f"gpu-0{n}", log) for n in (1, 2, 3, 4)]
    assert run_all(state, workers, [roll(size=4, max_unavailable=2)(n) for n in (1, 2, 3, 4)]) == [True] * 4
    assert most_out(log) == 2


def test_workers_in_service_do_not_go_while_the_pool_has_no_worker_to_spare(fleet):
    """A worker of the pool is out and stays out (outside this run): taking another out would pass the limit."""
    state, gateway_host, log = fleet
    gateway_host.gateway.pop(url(3))
    workers = [Host("gpu-01", log), Host("gpu-02", log)]
    assert run_all(state, workers, [roll()(n) for n in (1, 2)]) == [False, False]
    assert not any(what.startswith(("remove", "add", "up", "stop")) for _, what in log)
    said = workers[0].messages[-1]
    assert "1 of the 3 workers of m behind gw-1/m are out of service (http://10.0.0.3:30000)" in said
    assert "sglang_max_unavailable allows 1" in said


def test_a_failed_new_worker_leaves_the_workers_in_service_no_spare(fleet):
    state, gateway_host, log = fleet
    gateway_host.gateway.pop(url(3))
    workers = [Host("gpu-01", log), Host("gpu-03", log, gate_fails=True, validated=False)]
    assert run_all(state, workers, [roll()(n) for n in (1, 3)], stamped=[True, False]) == [False, False]
    assert [what for name, what in log if name == "gpu-01"] == ["restore good config"]
    assert "out of service (http://10.0.0.3:30000)" in workers[0].messages[-1]


@pytest.mark.parametrize("setting, size, allowed", [(1, 5, 1), (3, 5, 3), ("25%", 4, 1), ("50%", 4, 2),
                                                    ("25%", 3, 1), ("10%", 32, 3), ("99%", 2, 1), ("1%", 1, 1)])
def test_max_unavailable_as_a_count_or_a_share_rounded_down_never_below_one(setting, size, allowed):
    from sglang_infra.fleet.gateways import unavailable

    assert unavailable(setting, size) == allowed


def test_a_worker_whose_rollback_failed_too_is_not_put_back(fleet, monkeypatch):
    state, _, log = fleet
    monkeypatch.setattr(roll_ops, "serving_validated", lambda this: False)
    assert run_all(state, [Host("gpu-01", log, gate_fails=True)], [roll(size=2)(1)]) == [False]
    assert not any(what.startswith("add ") for _, what in log)


def test_the_turn_is_given_back_when_a_step_raises(fleet, monkeypatch):
    state, _, log = fleet

    def broken(*args, **kwargs):
        raise OSError("connection lost")

    monkeypatch.setattr(roll_ops, "drain", broken)
    with pytest.raises(OSError):
        run_all(state, [Host("gpu-01", log)], [roll(size=2)(1)])
    pool = roll_ops.pool_state(state, roll(size=2)(1))   # its turn is over: the next worker may go
    assert not pool.rolling and url(1) in pool.done and url(1) not in pool.out


def test_a_single_worker_pool_says_so_once_per_gateway_and_goes_on(fleet):
    state, _, log = fleet
    alone = Host("gpu-01", log)
    assert run_all(state, [alone], [roll(size=1)(1)]) == [True]
    said = [m for m in alone.messages if "only worker" in m]
    assert said == ["roll: gpu-01 is the only worker of gateway gw-1/m: it cannot serve while this worker restarts"]
    assert ("gpu-01", "up") in log


def test_a_gateway_host_outside_the_run_is_connected_first(fleet):
    state, gateway_host, log = fleet
    gateway_host.connected = False
    assert run_all(state, [Host("gpu-01", log)], [roll(size=2)(1)]) == [True]
    assert gateway_host.connected


def test_a_current_worker_yields_nothing_and_touches_no_gateway():
    from test_operations import CASES, run

    case = dict(CASES)["rolled.noop"]
    commands, fake = run("rolled", case["args"], case["facts"])
    assert commands == [] and fake.noops
    stale = json.loads(json.dumps(case["facts"]))
    stale["Snapshot"]["gate"]["stamp"] = "d0"   # the gate is due: the worker takes its turn
    args = {**case["args"], "roll": SimpleNamespace(others=(), stamped=True)}
    commands, _ = run("rolled", args, stale)
    assert [c.split("(")[0] for c in commands] == ["function roll_worker"]
    # the same model: it leaves no other model's gateway; it ran a stamped config when the run began
    assert commands[0].endswith(", (), True)")


def test_a_model_switch_hands_the_roll_the_other_models_gateways():
    from test_operations import CASES, run

    case = dict(CASES)["rolled.noop"]
    switched = json.loads(json.dumps(case["facts"]))
    switched["Snapshot"]["stack"]["container"]["labels"]["sglang.model"] = "org/previous"
    switched["Snapshot"]["gate"]["stamp"] = "d0"   # what runs is not what the data asks for
    args = {**case["args"], "roll": SimpleNamespace(others=("the-other-gateway",), stamped=False)}
    commands, _ = run("rolled", args, switched)
    assert len(commands) == 1 and commands[0].endswith(", ('the-other-gateway',), False)")
    assert "a model switch" in commands[0]


def test_in_flight_counts_from_the_worker_and_from_the_gateway():
    text = ('# HELP sglang:num_running_reqs x\nsglang:num_running_reqs{model_name="m"} 2.0\n'
            'sglang:num_queue_reqs{model_name="m"} 1\n'
            'smg_worker_requests_active{worker="http://a:1"} 3\nsmg_worker_requests_active{worker="http://b:1"} -1\n')
    assert in_flight(text) == 3
    assert in_flight(text, "http://a:1") == 3
    assert in_flight(text, "http://b:1") == 0   # a removed worker's series stays behind at -1
    assert in_flight(text, "http://c:1") is None
    assert in_flight("other_metric 4\n") is None


# ---------------------------------------------------------------- the plan: who fronts whom, and the refusals

DEFAULTS = pinned_defaults()
PROD = "qwen3.6-35b-a3b-awq"


class InvHost:
    def __init__(self, name, groups, **data):
        self.name = name
        self.groups = groups
        # A trusted network: these tests are about rolls; the open-port refusals have theirs in test_gateway_plan.py.
        values = {**DEFAULTS, "sglang_model": PROD, "ssh_hostname": name, "sglang_trusted_network": True, **data}
        self.data = SimpleNamespace(dict=lambda: values)
        self.values = values


def inventory_plans(workers=3, **data):
    hosts = [InvHost(f"gpu-0{n}", ["production"], **data) for n in range(1, workers + 1)]
    hosts.append(InvHost("gw-1", ["router"], sglang_require_gpu=False, sglang_router_bind_address="127.0.0.1"))
    plans = {}
    for each in hosts:
        groups = each.groups
        snapshot = converged_snapshot(None if groups == ["router"] else "rtx4090-2gpu-node")
        plans[each.name] = resolve(each.name, each.values, snapshot, groups)
    return hosts, plans


def fleet_plans(hosts, plans, names=None):
    from unittest import mock

    with mock.patch("sglang_infra.fleet.hosts.groups_of", lambda host, path=None: host.groups):
        return fleet_of({n: p for n, p in plans.items() if names is None or n in names}, read_fleet(hosts, None))


def test_each_worker_knows_the_gateways_in_front_of_it_and_its_pool():
    hosts, plans = inventory_plans()
    out = fleet_plans(hosts, plans)
    roll = out["gpu-01"].roll
    assert roll.pool_size == 3 and roll.max_unavailable == 1 and roll.drain_timeout == 300
    assert roll.url == "http://gpu-01:30000"
    (front,) = roll.fronts
    assert (front.gateway_host, front.slug, front.url) == ("gw-1", "qwen3-6-35b-a3b-awq", "http://127.0.0.1:30080")
    assert front.metrics == "http://127.0.0.1:29000/metrics"
    assert out["gw-1"].roll is None


def test_a_gateway_host_outside_the_run_still_fronts_its_workers():
    hosts, plans = inventory_plans()
    out = fleet_plans(hosts, plans, names={"gpu-01"})   # --limit gpu-01
    assert [f.gateway_host for f in out["gpu-01"].roll.fronts] == ["gw-1"]


def test_no_gateway_host_means_todays_parallel_restart():
    hosts, plans = inventory_plans()
    hosts = [h for h in hosts if h.name != "gw-1"]
    out = fleet_plans(hosts, {n: p for n, p in plans.items() if n != "gw-1"})
    assert out["gpu-01"].roll is None


def test_max_unavailable_not_below_the_pool_is_refused():
    hosts, plans = inventory_plans(workers=2, sglang_max_unavailable=2)
    with pytest.raises(DeployDataError) as caught:
        fleet_plans(hosts, plans)
    assert any("host gpu-01: sglang_max_unavailable: 2 would let every one of the 2 workers" in p
               for p in caught.value.problems)


def test_in_service_is_judged_from_the_snapshot_before_any_change():
    """The new compose.yaml is on disk before the roll runs, so the stamp no longer matches then: whether the
    worker served a stamped config is taken from the snapshot the plan was resolved against."""
    hosts, plans = inventory_plans(workers=2)
    running = {"stack": {"container": {"state": "running"}}}
    for stamp, stamped in (("d1", True), ("d0", False)):
        snapshot = converged_snapshot("rtx4090-2gpu-node", gate={"stamp": stamp, "digest": "d1"}, **running)
        plans["gpu-01"] = resolve("gpu-01", hosts[0].values, snapshot, hosts[0].groups)
        assert fleet_plans(hosts, plans)["gpu-01"].roll.stamped is stamped


def test_a_share_is_worked_out_for_the_pool():
    hosts, plans = inventory_plans(workers=3, sglang_max_unavailable="50%")
    roll = fleet_plans(hosts, plans)["gpu-01"].roll
    assert roll.max_unavailable == 1 and roll.pool_size == 3
    assert [name for name, _ in roll.members] == ["gpu-01", "gpu-02", "gpu-03"]


def test_a_single_worker_pool_is_not_refused():
    hosts, plans = inventory_plans(workers=1)
    assert fleet_plans(hosts, plans)["gpu-01"].roll.pool_size == 1


@pytest.mark.parametrize("key,value", [("sglang_drain_timeout", 0), ("sglang_drain_timeout", -5),
                                       ("sglang_drain_timeout", "300"), ("sglang_drain_timeout", 1.5),
                                       ("sglang_max_unavailable", 0), ("sglang_max_unavailable", "0%"),
                                       ("sglang_max_unavailable", "100%"), ("sglang_max_unavailable", "50"),
                                       ("sglang_max_unavailable", "half"), ("sglang_max_unavailable", "12.5%"),
                                       ("sglang_max_unavailable", True)])
def test_bad_roll_settings_are_refused(key, value):
    problems = check_data("gpu-01", {**DEFAULTS, key: value})
    assert any(p.startswith(f"host gpu-01: {key}:") for p in problems), problems


def test_the_stop_grace_period_outlasts_the_drain():
    import yaml

    plan = resolve("gpu-01", {**DEFAULTS, "sglang_drain_timeout": 120}, converged_snapshot())
    assert yaml.safe_load(plan.compose)["services"]["sglang"]["stop_grace_period"] == "150s"


def test_a_worker_whose_turn_was_called_off_gets_its_last_good_config_back_on_disk(tmp_path, capsys):
    from sglang_infra.hostside.roll import restore_good

    (tmp_path / "compose.yaml").write_text("new")
    (tmp_path / "compose.yaml.good").write_text("old")
    (tmp_path / ".env").write_text("UID=1\n")
    assert restore_good.main([str(tmp_path)]) == 0
    assert (tmp_path / "compose.yaml").read_text() == "old"
    assert (tmp_path / ".env").read_text() == "UID=1\n"   # no .env.good: left as it is
    assert "compose.yaml put back" in capsys.readouterr().out


def test_pyinfra_hands_the_roll_its_state_and_host(fleet):
    """FunctionCommand passes state and host only to a function whose parameters are named so."""
    from pyinfra.api import FunctionCommand

    state, _, log = fleet
    command = FunctionCommand(roll_ops.roll_worker, (roll(size=2)(1), UP, GATE, "compose.yaml changes",
                                                     "http://127.0.0.1:30000/metrics", None, 60, "/opt/sglang/docker"),
                              {})
    assert command.execute(state, Host("gpu-01", log), {}) is True
    assert ("gpu-01", "gate") in log


def test_drain_says_unknown_when_the_worker_has_no_metrics(capsys):
    from sglang_infra.hostside.roll import drain

    assert drain.main(["1", "http://127.0.0.1:9/metrics"]) == 3
    assert capsys.readouterr().out.startswith("drain: unknown: ")


def test_a_linked_good_copy_is_not_followed(tmp_path, capsys):
    """The docker directory is the account's: a .good that is a link to a file elsewhere is left, never read."""
    from sglang_infra.hostside.roll import restore_good

    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("root's own file\n")
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "compose.yaml").write_text("new")
    (docker / "compose.yaml.good").symlink_to(elsewhere)
    assert restore_good.main([str(docker)]) == 0
    assert (docker / "compose.yaml").read_text() == "new"
    assert "nothing put back" in capsys.readouterr().out


@pytest.mark.parametrize("own_port, sent", [(True, True), (False, False)])
def test_drain_sends_the_key_only_to_the_servers_own_port(monkeypatch, own_port, sent):
    from sglang_infra.hostside import apikey, bounded, stack
    from sglang_infra.hostside.roll import drain

    seen = []

    class Reply:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read1(self, size=-1):
            body, self.body = getattr(self, "body", b"sglang:num_running_reqs 0\n"), b""
            return body

    def urlopen(request, timeout):
        seen.append(request.get_header("Authorization"))
        return Reply()

    monkeypatch.setattr(apikey, "_HEADERS", {"Authorization": "Bearer k"})
    monkeypatch.setattr(apikey, "_HOLDS", [lambda url: stack.holds(url)])
    monkeypatch.setattr(stack, "holds", lambda url, *a: own_port)
    monkeypatch.setattr(bounded.OPENER, "open", urlopen)
    assert drain.main(["1", "http://127.0.0.1:30000/metrics"]) == 0
    assert seen == (["Bearer k"] if sent else [None])


def test_a_worker_knows_the_other_models_gateways_it_leaves_on_a_switch():
    hosts, plans = inventory_plans()
    other = InvHost("gpu-09", ["production"], sglang_model="qwen3.6-27b-awq-int4")
    hosts.insert(0, other)
    plans[other.name] = resolve(other.name, other.values, converged_snapshot("rtx4090-2gpu-node"), other.groups)
    out = fleet_plans(hosts, plans)
    assert [f.slug for f in out["gpu-01"].roll.fronts] == ["qwen3-6-35b-a3b-awq"]
    assert [f.slug for f in out["gpu-01"].roll.others] == ["qwen3-6-27b-awq-int4"]
    assert [f.slug for f in out["gpu-09"].roll.others] == ["qwen3-6-35b-a3b-awq"]


def test_a_switching_worker_leaves_the_other_models_gateways_first_and_comes_back_only_to_its_own(fleet):
    state, _, log = fleet
    old = Front(gateway_host="gw-1", slug="old", url="http://127.0.0.1:30081", metrics="http://127.0.0.1:29001/metrics",
                directory="/opt/sglang/router/old", key_file=None)
    calls = []
    real = roll_ops.on_gateway_host
    roll_ops.on_gateway_host = lambda state, front, change: (calls.append((front.slug, change))
                                                             or real(state, front, change))
    try:
        assert roll_ops.roll_worker(state, Host("gpu-01", log), roll(size=2)(1), UP, GATE, "a switch",
                                    "http://127.0.0.1:30000/metrics", None, 60, "/opt/sglang/docker", (old,))
    finally:
        roll_ops.on_gateway_host = real
    url = "http://10.0.0.1:30000"
    calls = [call for call in calls if "view" not in call[1]]
    assert [(slug, "add" if "add" in change else "remove") for slug, change in calls] == \
        [("old", "remove"), ("m", "remove"), ("m", "add")]
    assert all((change.get("remove") or change.get("add")) == url for _, change in calls)


@pytest.mark.parametrize("stamped", [True, False], ids=["in-service", "out-of-service"])
def test_a_groups_turn_restarts_and_gates_the_whole_group_from_rank_0(fleet, monkeypatch, stamped):
    """A multi-node group is one worker (its rank 0): in its turn, in service or not, the group's own restart and
    gate run (operations/group.py), never rank 0's `up` and gate alone."""
    from sglang_infra.plan.types import NodeGroup

    state, gateway_host, log = fleet
    group = NodeGroup("ds-a", 0, ("gpu-01", "gpu-04"), "10.0.0.1", 29500, 16)
    calls = []
    monkeypatch.setattr(roll_ops, "group_restart_and_gate",
                        lambda state, host, group, restart, why: calls.append((host.name, group.name, restart)))
    if not stamped:
        gateway_host.gateway.pop(url(1))
    worker = Host("gpu-01", log)
    state.active[:] = [worker]
    assert roll_ops.roll_worker(state, worker, roll()(1), UP, GATE, "compose.yaml changes",
                                "http://127.0.0.1:30000/metrics", None, 60, "/opt/sglang/docker", (), stamped, group)
    assert calls == [("gpu-01", "ds-a", True)]
    assert not [what for name, what in log if name == "gpu-01" and what in ("up", "gate", "stop at once, up")]


def test_a_worker_comes_back_to_its_gateways_with_its_own_key_never_shown(fleet, monkeypatch):
    """Issue 53: a key rotated in this run stopped the roll at the first worker (its gateway sent it the gateway
    host's old key). The worker's own key (its plan's) goes in the change's stdin when it comes back, not when it
    leaves, and is in no repr pyinfra or a fixture prints."""
    state, _, log = fleet
    key = "rotated-0123456789abcdef0123"
    calls = []
    real = roll_ops.on_gateway_host
    monkeypatch.setattr(roll_ops, "on_gateway_host", lambda state, front, change: (calls.append(change)
                                                                                  or real(state, front, change)))
    worker_key = roll_ops.WorkerKey(key)
    assert roll_ops.roll_worker(state, Host("gpu-01", log), roll(size=2)(1), UP, GATE, "the key changed",
                                "http://127.0.0.1:30000/metrics", None, 60, "/opt/sglang/docker", (),
                                worker_key=worker_key)
    changes = [change for change in calls if "view" not in change]
    assert [change.get("api_key") for change in changes if "add" in change] == [key]
    assert all("api_key" not in change for change in changes if "remove" in change)
    assert key not in repr(worker_key)

