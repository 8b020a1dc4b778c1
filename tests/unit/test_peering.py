"""Where each serving host's pull looks for a model's blobs (peering.py): the seed rule, the peers of each host, and
the pull's command line (the site key by its path alone)."""

from __future__ import annotations

from dataclasses import replace

from conftest import converged_snapshot, pinned_defaults

from sglang_infra.fleet import peering
from sglang_infra.fleet.hosts import Fleet, InventoryHost
from sglang_infra.hostside import names
from sglang_infra.models.lockfile import LockedModel
from sglang_infra.operations.models import pull_command
from sglang_infra.plan import peerdoor
from sglang_infra.plan.resolve import resolve
from sglang_infra.plan.types import PeerDoor

DEFAULTS = pinned_defaults()
PROD, QUALITY = "qwen3.6-35b-a3b-awq", "qwen3.6-27b-awq-int4"
KEY = b"k" * 40


def host(name, address, model=PROD, key_file="/ctl/peer.key", cached=()):
    data = {**DEFAULTS, "sglang_model": model, "ssh_hostname": address, "sglang_peer_key_file": key_file,
            "sglang_cached_models": list(cached)}
    return InventoryHost(name, data, ("production",), True, False)


def plan_of(each: InventoryHost, door=True, key: bytes = KEY):
    plan = resolve(each.name, {**each.data, "sglang_peer_key_file": None}, converged_snapshot())
    if door and each.data["sglang_peer_key_file"]:
        plan = replace(plan, peer_door=PeerDoor(address=each.data["ssh_hostname"], port=880, group="sglang",
                                                hub=plan.paths.hub, pins=(), key=key, key_id=peerdoor.key_id(key)))
    return plan


def test_the_first_host_of_a_model_in_this_run_is_its_seed_and_every_other_one_pulls_from_its_peers():
    hosts = [host("gpu-01", "10.0.0.11"), host("gpu-02", "10.0.0.12"), host("gpu-03", "10.0.0.13"),
             host("gpu-04", "10.0.0.14", QUALITY, cached=[PROD]), host("gpu-05", "10.0.0.15", QUALITY)]
    plans = {h.name: plan_of(h) for h in hosts if h.name != "gpu-01"}  # gpu-01 is not in this run
    out = peering.with_sources(plans, Fleet.of(hosts))
    prod = {name: out[name].peer_sources[PROD] for name in ("gpu-02", "gpu-03", "gpu-04")}
    assert prod["gpu-02"].seed and not prod["gpu-03"].seed and not prod["gpu-04"].seed
    # inventory order; gpu-01, outside this run, is nobody's peer (its door is not checked by this run)
    assert prod["gpu-02"].peers == ("10.0.0.13:880", "10.0.0.14:880")
    assert prod["gpu-03"].peers == ("10.0.0.12:880", "10.0.0.14:880")
    assert prod["gpu-03"].hosts == ("gpu-02", "gpu-04")
    assert (prod["gpu-02"].wait, prod["gpu-03"].wait) == (0, peering.SETTLE)
    quality = out["gpu-04"].peer_sources[QUALITY]
    assert quality.seed and quality.peers == ("10.0.0.15:880",)
    assert not out["gpu-05"].peer_sources[QUALITY].seed
    assert set(out["gpu-05"].peer_sources) == {QUALITY}
    # the seed pulls in tasks/models.py, the others after the seeds' doors list what they hold
    assert not peering.after_seeds(out["gpu-02"], out["gpu-02"].kept[0])
    assert peering.after_seeds(out["gpu-03"], out["gpu-03"].kept[0])


def test_a_host_without_the_site_key_has_no_peers_and_is_no_peer():
    hosts = [host("gpu-01", "10.0.0.11", key_file=None), host("gpu-02", "10.0.0.12"), host("gpu-03", "10.0.0.13")]
    out = peering.with_sources({h.name: plan_of(h) for h in hosts}, Fleet.of(hosts))
    assert out["gpu-01"].peer_sources == {}
    assert not peering.after_seeds(out["gpu-01"], out["gpu-01"].kept[0])
    assert out["gpu-02"].peer_sources[PROD].seed
    assert out["gpu-02"].peer_sources[PROD].peers == ("10.0.0.13:880",)
    args = peering.pull_arguments(out["gpu-01"], out["gpu-01"].kept[0])
    assert args["peers"] is None
    assert "--peer" not in pull_command(args["pull"], args["paths"], args["model"], False, args["peers"])


def test_a_fleet_of_one_pulls_from_the_hub_as_before():
    (only,) = hosts = [host("gpu-01", "10.0.0.11")]
    out = peering.with_sources({only.name: plan_of(only)}, Fleet.of(hosts))
    sources = out["gpu-01"].peer_sources[PROD]
    assert sources.seed and sources.peers == ()
    args = peering.pull_arguments(out["gpu-01"], out["gpu-01"].kept[0])
    assert args["peers"] is None


def test_the_pull_gets_its_peers_and_the_key_file_path_never_the_key():
    hosts = [host("gpu-01", "10.0.0.11"), host("gpu-02", "10.0.0.12")]
    out = peering.with_sources({h.name: plan_of(h) for h in hosts}, Fleet.of(hosts))
    plan = out["gpu-02"]
    args = peering.pull_arguments(plan, plan.kept[0])
    assert args["paths"].peer_key == f"{plan.paths.tools}/secret/{names.PEER_KEY}"
    command = pull_command(args["pull"], args["paths"], args["model"], False, args["peers"])
    assert f"--peer-key-file {plan.paths.tools}/secret/peer-key" in command
    assert "--peer 10.0.0.11:880" in command and "--peer-seed" not in command
    assert f"--peer-wait {peering.SETTLE}" in command
    assert KEY.decode() not in command
    seed = out["gpu-01"]
    seed_args = peering.pull_arguments(seed, seed.kept[0])
    assert "--peer-seed" in pull_command(seed_args["pull"], seed_args["paths"], seed_args["model"], False,
                                         seed_args["peers"])


def f(path, size, sha=None):
    return {"path": path, "size": size, "sha256": sha or path.ljust(64, "0")[:64]}


def test_the_split_gives_each_content_once_largest_first_to_the_host_with_the_fewest_bytes():
    files = [f("c", 5), f("a", 10), f("e", 1), f("b", 7), f("d", 3), f("a-copy", 10, f("a", 10)["sha256"])]
    shares = peering.split(files, ["h1", "h2", "h3"])
    # 10 -> h1; 7 -> h2; 5 -> h3; 3 -> h3 (5 is least); 1 -> h2 (7 < 8 < 10); a copy of a's content goes with a
    assert shares == {"h1": ("a", "a-copy"), "h2": ("b", "e"), "h3": ("c", "d")}
    assert peering.split(list(reversed(files)), ["h1", "h2", "h3"]) == shares   # the lock's order does not matter
    assert peering.split(files, ["h1"]) == {"h1": ("a", "a-copy", "b", "c", "d", "e")}
    even = peering.split([f(str(n), 100) for n in range(8)], ["h1", "h2", "h3", "h4"])
    assert [len(share) for share in even.values()] == [2, 2, 2, 2]              # ties: inventory order, in turn


def locked_plan(each: InventoryHost, door=True):
    plan = plan_of(each, door)
    model = plan.kept[0]
    files = (f("config.json", 600), f("model-1.safetensors", 12 << 20), f("model-2.safetensors", 3 << 20))
    return replace(plan, locked={model.key: LockedModel(model.key, model.repo_id, model.revision, files)})


def test_with_a_lock_every_host_of_the_model_in_this_run_pulls_its_share_then_the_rest_from_its_peers():
    hosts = [host("gpu-01", "10.0.0.11"), host("gpu-02", "10.0.0.12"), host("gpu-03", "10.0.0.13"),
             host("gpu-04", "10.0.0.14")]
    plans = {h.name: locked_plan(h) for h in hosts if h.name != "gpu-01"}   # gpu-01 is not in this run
    out = peering.with_sources(plans, Fleet.of(hosts))
    sources = {name: out[name].peer_sources[PROD] for name in plans}
    assert {name: s.share for name, s in sources.items()} == {
        "gpu-02": ("model-1.safetensors",), "gpu-03": ("model-2.safetensors",), "gpu-04": ("config.json",)}
    assert all(s.seed and s.wait == 0 for s in sources.values())   # round 2: the Hub at once for what no peer has
    assert sources["gpu-03"].peers == ("10.0.0.12:880", "10.0.0.14:880")   # gpu-01 is not in this run
    plan = out["gpu-03"]
    assert peering.in_swarm(plan, plan.kept[0]) and peering.after_seeds(plan, plan.kept[0])
    first = peering.pull_arguments(plan, plan.kept[0], first_round=True)
    assert first["share"] == ("model-2.safetensors",) and "1 of 3 files" in first["name"]
    assert "share" not in peering.pull_arguments(plan, plan.kept[0])


def test_with_a_lock_a_fleet_of_one_in_this_run_pulls_as_before():
    hosts = [host("gpu-01", "10.0.0.11"), host("gpu-02", "10.0.0.12")]
    # gpu-01 outside the run: not a peer
    out = peering.with_sources({"gpu-02": locked_plan(hosts[1])}, Fleet.of(hosts))
    sources = out["gpu-02"].peer_sources[PROD]
    assert sources.seed and sources.share is None and sources.peers == ()
    assert not peering.in_swarm(out["gpu-02"], out["gpu-02"].kept[0])
    assert not peering.after_seeds(out["gpu-02"], out["gpu-02"].kept[0])


def test_a_host_holding_another_site_key_is_not_a_peer():
    """Peers hold the very same key: compared by its fingerprint (peerdoor.key_id), never the key."""
    other = b"o" * 40
    hosts = [host("gpu-01", "10.0.0.11"), host("gpu-02", "10.0.0.12"), host("gpu-03", "10.0.0.13")]
    out = peering.with_sources({h.name: plan_of(h, key=other if h.name == "gpu-03" else KEY) for h in hosts},
                               Fleet.of(hosts))
    assert out["gpu-01"].peer_sources[PROD].peers == ("10.0.0.12:880",)
    assert out["gpu-02"].peer_sources[PROD].peers == ("10.0.0.11:880",)
    assert out["gpu-03"].peer_sources[PROD].peers == () and out["gpu-03"].peer_sources[PROD].seed
    assert peerdoor.key_id(KEY) != peerdoor.key_id(other) and KEY.hex() not in peerdoor.key_id(KEY)


def test_a_pull_asks_only_the_doors_this_run_checked():
    """When the pull's command is made (the operation runs), a peer whose door this run did not find held by the
    door's own nginx (not up yet, its host failed before it) is left out: no request, no key, goes there."""
    from types import SimpleNamespace

    hosts = [host("gpu-01", "10.0.0.11"), host("gpu-02", "10.0.0.12"), host("gpu-03", "10.0.0.13")]
    out = peering.with_sources({h.name: plan_of(h) for h in hosts}, Fleet.of(hosts))
    sources = out["gpu-03"].peer_sources[PROD]
    state = SimpleNamespace()
    assert peering.checked(state, sources).peers == ()
    peering.door_checked(state, "gpu-02", "ab" * 32)
    # with the certificate this run read on gpu-02: the pull trusts that one alone there (hostside/pull/peers.py)
    assert peering.checked(state, sources).peers == ("10.0.0.12:880=" + "ab" * 32,)
    assert peering.checked(state, sources).hosts == ("gpu-02",)
    peering.door_checked(state, "gpu-02", "cd" * 32)   # rebuilt since: the certificate read last is the one pinned
    assert peering.checked(state, sources).peers == ("10.0.0.12:880=" + "cd" * 32,)
    assert peering.checked(SimpleNamespace(), sources).peers == ()   # another run checks its own doors
