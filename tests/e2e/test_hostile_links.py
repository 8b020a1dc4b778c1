"""Links planted where root writes or reads, on a real converged host: the account's (or a group member's)
link at compose.yaml.previous is refused and named, its target untouched; links in hf-cache to / and /etc steer
neither the snapshot nor the prune plan, and the snapshot reads nothing through them."""

from __future__ import annotations

import json
import time

import pytest

from harness import read_snapshot, run_deploy, run_dry

HOST = "sg-links"
HUB = "/opt/sglang/hf-cache/hub"
COMPOSE = "/opt/sglang/docker/compose.yaml"
VICTIM = "/etc/sglang-victim"
MARKER = "ROOT-ONLY-MARKER-4711"
EVIL = f"{HUB}/models--evil--x"
REV = "e" * 40
VICTIM_STATE = f"stat -c '%U %G %a' {VICTIM} && cat {VICTIM}"


@pytest.fixture(scope="module")
def converged(testbed, workdir):
    host = testbed.host(HOST, login="deploy")
    # The gate's benchmark is not what this module tests: on a shared, loaded machine the stand-in may run well
    # below its baseline, so the fraction it must reach is low here.
    inventory = testbed.inventory(workdir / "links.py", {"production": [(host, {
        "sglang_benchmark_min_fraction": 0.05})]})
    first = run_deploy(inventory)
    assert first.returncode == 0, first.output[-3000:]
    host.exec(f"echo {MARKER} > {VICTIM} && chmod 600 {VICTIM}")
    return host, inventory


def test_a_link_at_compose_previous_is_refused_named_and_its_target_untouched(converged):
    host, inventory = converged
    before = host.exec(VICTIM_STATE).stdout
    host.exec(f"ln -s {VICTIM} {COMPOSE}.previous && chown -h sglang:sglang {COMPOSE}.previous && "
              f"sed -i 's/--mem-fraction-static=0.85/--mem-fraction-static=0.95/' {COMPOSE}")
    result = run_deploy(inventory)
    assert result.returncode != 0
    assert f"{COMPOSE}.previous is a symlink" in result.output, result.output[-3000:]
    assert host.exec(VICTIM_STATE).stdout == before
    assert "0.95" in host.exec(f"cat {COMPOSE}").stdout   # refused before anything took the name
    host.exec(f"rm {COMPOSE}.previous")
    again = run_deploy(inventory)
    assert again.returncode == 0, again.output[-3000:]
    assert "0.85" in host.exec(f"cat {COMPOSE}").stdout
    assert host.exec(f"test -f {COMPOSE}.previous && ! test -L {COMPOSE}.previous", check=False).returncode == 0



def test_links_in_hf_cache_to_root_and_etc_are_never_followed(converged):
    host, inventory = converged
    host.exec(f"mkdir -p {EVIL}/snapshots && ln -s / {EVIL}/snapshots/{REV} && ln -s /etc {EVIL}/refs && "
              f"chown -hR sglang:sglang {EVIL}")
    try:
        started = time.monotonic()
        found = read_snapshot(host)
        assert time.monotonic() - started < 60
        assert MARKER not in json.dumps(found)
        assert found["models"]["repos"]["evil/x"]["refs"] == {}
        assert found["models"]["repos"]["evil/x"]["revisions"] == {}
        assert found["models"]["stopped_early"] is None and found["layout"]["stopped_early"] is None
        code, _, output = run_dry(inventory, "--data", "sglang_prune_models=True")
        assert code == 0, output[-3000:]
        assert f"evil/x@{REV[:12]}" not in output
    finally:
        host.exec(f"rm -rf {EVIL}")


PLANTED = "/tmp/planted-module-ran"


def test_root_running_the_scripts_from_a_members_folder_imports_none_of_their_modules(converged):
    """Issue 31, item 3: results/ is group-writable; a member's argparse.py and json.py there must not run when
    root starts the gate or a validation script from that folder (python3 -I, and the scripts cd to /)."""
    host, _ = converged
    planted = f"open({PLANTED!r}, 'a').write(__name__ + '\\n')\n"
    for name in ("argparse.py", "json.py"):
        host.exec(f"cat > /opt/sglang/results/{name} <<'EOF'\n{planted}EOF\n"
                  f"chown sglang:sglang /opt/sglang/results/{name}")
    try:
        for script in ("test_tool_calling.sh", "benchmark.sh", "gate.sh"):
            ran = host.exec(f"cd /opt/sglang/results && bash /opt/sglang/{script}", check=False)
            assert ran.returncode == 0, (script, ran.stdout[-1500:], ran.stderr[-1500:])
        assert host.exec(f"test -e {PLANTED}", check=False).returncode != 0, host.exec(f"cat {PLANTED}").stdout
    finally:
        host.exec(f"rm -f /opt/sglang/results/argparse.py /opt/sglang/results/json.py {PLANTED}")


def test_a_link_at_cachedir_tag_makes_no_file_and_compose_loads_no_override(converged, workdir, testbed):
    """Issue 31, item 6: huggingface_hub writes CACHEDIR.TAG through a link there, which would make the account
    create docker/compose.override.yaml; and compose, run without -f, loads such a file beside compose.yaml."""
    host, _ = converged
    override = "/opt/sglang/docker/compose.override.yaml"
    host.exec(f"rm -f {HUB}/CACHEDIR.TAG && ln -s {override} {HUB}/CACHEDIR.TAG && chown -h sglang:sglang "
              f"{HUB}/CACHEDIR.TAG")
    # a second model to pull makes the pull run (it writes the tag first)
    pulls = testbed.inventory(workdir / "links-pull.py", {"production": [(host, {
        "sglang_benchmark_min_fraction": 0.05, "sglang_cached_models": ["qwen3.6-27b-awq-int4"]})]})
    result = run_deploy(pulls)
    assert result.returncode == 0, result.output[-3000:]
    assert "models--standin-org--tiny-chat-quality" in host.exec(f"ls {HUB}").stdout   # the pull ran
    assert host.exec(f"test -e {override}", check=False).returncode != 0
    assert host.exec(f"readlink {HUB}/CACHEDIR.TAG").stdout.strip() == override   # left as it is, not followed
    # an override that is there anyway (left by hand, or by an older deploy) is not loaded by the deploy's compose
    host.exec(f"printf 'services:\\n  sglang:\\n    environment:\\n      PLANTED_BY_OVERRIDE: \"1\"\\n' > {override}")
    try:
        changed = testbed.inventory(workdir / "links-change.py", {"production": [(host, {
            "sglang_benchmark_min_fraction": 0.05, "sglang_cached_models": ["qwen3.6-27b-awq-int4"],
            "sglang_extra_env": {"LINKS_MARK": "2"}})]})
        again = run_deploy(changed)
        assert again.returncode == 0, again.output[-3000:]
        env = host.exec("docker inspect -f '{{json .Config.Env}}' $(docker ps -q --filter "
                        "label=com.docker.compose.project=sglang)").stdout
        assert "LINKS_MARK=2" in env and "PLANTED_BY_OVERRIDE" not in env, env
    finally:
        host.exec(f"rm -f {override} {HUB}/CACHEDIR.TAG")


def test_a_link_above_the_blobs_of_a_model_to_pull_is_refused_and_nothing_written_through_it(converged, workdir,
                                                                                          testbed):
    """Issue 42, item 9: a member makes models--X/blobs of a model the next run pulls a link into the account's
    docker/: the pull (as the account) refuses it, naming it, and writes nothing there."""
    host, _ = converged
    repo = f"{HUB}/models--standin-org--tiny-chat-quality"
    docker = "/opt/sglang/docker"
    host.exec(f"rm -rf {repo} && mkdir -p {repo} && ln -s {docker} {repo}/blobs && chown -hR sglang:sglang {repo}")
    blobs_there = f"ls -A {docker} | grep -E '^[0-9a-f]{{40}}|incomplete|tmplink' || true"
    try:
        pulls = testbed.inventory(workdir / "links-blobs.py", {"production": [(host, {
            "sglang_benchmark_min_fraction": 0.05, "sglang_cached_models": ["qwen3.6-27b-awq-int4"]})]})
        result = run_deploy(pulls)
        assert result.returncode != 0
        assert f"{repo}/blobs is a symlink; refusing to follow it" in result.output, result.output[-3000:]
        assert host.exec(blobs_there).stdout.strip() == ""   # no blob, partial or link written through it
    finally:
        host.exec(f"rm -rf {repo}")


MEMBER = "mallory"


def test_a_file_with_two_hard_links_in_hf_cache_is_left_and_named(converged):
    """Issue 31, item 7: a member's file with a second name in hf-cache, with a mode and a group the repair would
    change, is left as it is and named (the repair never changes a hard-linked file: with the kernel's
    fs.protected_hardlinks off, the other name could be root's file). The run itself passes."""
    host, inventory = converged
    mine, again = f"{HUB}/planted-mine", f"{HUB}/planted-second-name"
    host.exec(f"id {MEMBER} >/dev/null 2>&1 || useradd -m -s /bin/bash {MEMBER}; usermod -aG sglang {MEMBER}")
    host.exec(f"sudo -u {MEMBER} sh -c 'umask 077 && echo mine > {mine} && chgrp {MEMBER} {mine} && "
              f"ln {mine} {again}'")
    state = f"stat -c '%U %G %a %h' {mine} {again}"
    before = host.exec(state).stdout
    assert before.split("\n")[0] == f"{MEMBER} {MEMBER} 600 2", before   # a group and a mode the repair would fix
    try:
        result = run_deploy(inventory)
        assert result.returncode == 0, result.output[-3000:]
        assert host.exec(state).stdout == before
        assert "with more than one hard link, which the deploy never makes, are left as they are" in result.output
        assert mine in result.output and again in result.output
        # With one name again, it is the member's own file in the cache, and is repaired like any other.
        host.exec(f"rm {again}")
        result = run_deploy(inventory)
        assert result.returncode == 0, result.output[-3000:]
        assert host.exec(f"stat -c '%G %a' {mine}").stdout.strip() == "sglang 660"
    finally:
        host.exec(f"rm -f {mine} {again}; userdel -r {MEMBER} 2>/dev/null; true")
