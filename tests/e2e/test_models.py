"""Models on real hosts, pulled from the STAND-IN Hub (tests/support/testbed/hub.py):
the first pull lands in huggingface_hub's cache layout, its large shard in
parallel ranges; a re-run asks the Hub nothing; a killed pull resumes every
range with only the missing bytes; a 429's Retry-After is waited out; a cut in
the middle of a range is resumed; a Hub error stops the pull; a corrupted blob
and an orphaned partial download are repaired; a gated repo needs the token,
which appears nowhere but its own file; pruning keeps every referenced
revision; an admin can still pull by hand."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import time

import pytest

from harness import read_snapshot, run_deploy, run_dry, start_deploy
from sglang_infra.hostside.pull import ranges
from testbed import hub as standin_hub

HUB = "/opt/sglang/hf-cache/hub"
TINY = "standin-org/tiny-chat"
TINY_DIR = f"{HUB}/models--standin-org--tiny-chat"
SHARD = "model-00001-of-00002.safetensors"
SHARD_SIZE = 12 << 20
SMALL_SHARD = "model-00002-of-00002.safetensors"
SMALL_SIZE = 3 << 20
WORKERS = 8  # group_data's sglang_pull_workers
ADMIN = "alice"


def pull_results(output: str) -> list[dict]:
    return [json.loads(m) for m in re.findall(r"SGLANG_PULL_RESULT (\{.*\})", output)]


def shard_sha256(path: str = SHARD) -> str:
    commit = standin_hub.commits()[TINY]["main"]
    return hashlib.sha256(standin_hub.file_bytes(TINY, commit, path)).hexdigest()


def planned(size: int) -> list[str | None]:
    """The Range headers a first pull asks for a file of ``size`` bytes."""
    return sorted(ranges.header(start, end, size) for start, end, _ in ranges.plan(size, WORKERS))


def resolve_gets(requests: list[dict], path: str) -> list[dict]:
    return [r for r in requests if r["method"] == "GET" and "/resolve/" in r["path"] and r["path"].endswith(path)]


@pytest.fixture(scope="module")
def hub():
    return standin_hub.ensure_hub()


@pytest.fixture(scope="module")
def pulled(testbed, workdir, hub):
    host = testbed.host("sg-models-1")
    host.exec(f"useradd -m -s /bin/bash {ADMIN}")
    inventory = testbed.inventory(workdir / "models.py", {"production": [(host, {
        "sglang_admins": [ADMIN], "sglang_cached_models": ["qwen3.6-27b-awq-int4"]})]})
    hub.reset()
    first = run_deploy(inventory)
    assert first.returncode == 0, first.output[-4000:]
    return host, inventory, first, hub.requests()


def test_first_pull_lands_in_the_hub_cache_layout(pulled):
    host, _, first, _ = pulled
    commit = standin_hub.commits()[TINY]["main"]
    link = host.exec(f"readlink {TINY_DIR}/snapshots/{commit}/{SHARD}").stdout.strip()
    assert link == f"../../blobs/{shard_sha256()}"
    blob = host.exec(f"sha256sum {TINY_DIR}/snapshots/{commit}/{SHARD}").stdout.split()[0]
    assert blob == shard_sha256()
    owner = host.exec(f"stat -L -c '%G %A' {TINY_DIR}/snapshots/{commit}/{SHARD}").stdout.split()
    assert owner[0] == "sglang" and owner[1][4:6] == "rw"
    assert {r["repo_id"] for r in pull_results(first.output)} == {TINY, "standin-org/tiny-chat-quality"}


def test_the_large_shard_came_in_parallel_ranges_and_was_verified(pulled):
    host, _, first, requests = pulled
    gets = resolve_gets(requests, SHARD)
    assert sorted(g["range"] for g in gets) == planned(SHARD_SIZE) and len(gets) == WORKERS
    assert {g["status"] for g in gets} == {206} and sum(g["bytes_sent"] for g in gets) == SHARD_SIZE
    assert re.search(rf"file \d/4 {SHARD} fetched and verified", first.output)
    assert host.exec(f"ls {TINY_DIR}/blobs | grep -c incomplete", check=False).stdout.strip() == "0"


def test_the_server_loads_the_pinned_snapshot_offline(pulled):
    host = pulled[0]
    commit = standin_hub.commits()[TINY]["main"]
    env = host.exec("cd /opt/sglang/docker && docker compose exec -T sglang env").stdout
    assert "HF_HUB_OFFLINE=1" in env
    command = host.exec("cd /opt/sglang/docker && docker compose ps --format '{{.Command}}' --no-trunc").stdout
    assert f"/hf-cache/hub/models--standin-org--tiny-chat/snapshots/{commit}" in command


def test_a_rerun_changes_nothing_and_asks_the_hub_nothing(pulled, hub):
    _, inventory, _, _ = pulled
    hub.reset()
    again = run_deploy(inventory)
    assert again.returncode == 0, again.output[-3000:]
    assert again.changed("sg-models-1") == []
    assert hub.requests() == []


# What a member of the sglang group can do (issue 31, item 2): rewrite a verified blob in place (hf-cache is
# group-writable), then write a record of the revision with the blob's new inode and ctime and its old sha256
# (the lock's content digest kept), into every place a record could be that the member can write to.
FORGE = r"""
import json, os, sys
blob, records = sys.argv[1], sys.argv[2:]
data = json.load(open(next(p for p in records if os.path.exists(p))))
with open(blob, "r+b") as f:
    f.seek(1000)
    byte = f.read(1)[0]
    f.seek(1000)
    f.write(bytes([byte ^ 0xFF]))
st = os.stat(blob)
for entry in data["files"]:
    if entry["blob"] == os.path.basename(blob):
        entry.update(ino=st.st_ino, ctime_ns=st.st_ctime_ns, mtime_ns=st.st_mtime_ns)
for path in records:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".forged", "w") as f:
            json.dump(data, f)
        os.replace(path + ".forged", path)
        print("FORGED", path)
    except OSError as error:
        print("REFUSED", path, error.strerror)
"""



def test_a_members_forged_record_verifies_nothing_and_the_next_pull_hashes_the_blob_again(pulled, hub):
    host, inventory, _, _ = pulled
    commit = standin_hub.commits()[TINY]["main"]
    blob = f"{TINY_DIR}/blobs/{shard_sha256()}"
    records = [f"/opt/sglang/verified/models--standin-org--tiny-chat/{commit}.json",
               f"{TINY_DIR}/.sglang/{commit}.json"]
    assert read_snapshot(host)["models"]["repos"][TINY]["revisions"][commit]["verified"]
    forged = host.exec(f"sudo -u {ADMIN} python3 -c {shlex.quote(FORGE)} {blob} {' '.join(records)}").stdout
    try:
        assert f"FORGED {TINY_DIR}/.sglang/{commit}.json" in forged, forged   # the cache: the member's to write
        assert f"REFUSED {records[0]}" in forged, forged                       # the records: the account's alone
        assert host.exec(f"sha256sum {blob}").stdout.split()[0] != shard_sha256()
        revision = read_snapshot(host)["models"]["repos"][TINY]["revisions"][commit]
        assert revision["verified"] is False and revision["complete"] is False, revision
        hub.reset()
        result = run_deploy(inventory)
        assert result.returncode == 0, result.output[-3000:]
        # what the pull does with a blob that is not its name's content: hashed, found wrong, fetched again
        assert re.search(rf"{SHARD} blob on disk is wrong \(size or hash\); fetching it again", result.output), \
            result.output[-3000:]
        assert not re.search(rf"{SHARD} present .*verified by an earlier pull", result.output)
        assert sorted(g["range"] for g in resolve_gets(hub.requests(), SHARD)) == planned(SHARD_SIZE)
        assert host.exec(f"sha256sum {blob}").stdout.split()[0] == shard_sha256()
        assert read_snapshot(host)["models"]["repos"][TINY]["revisions"][commit]["verified"]
        assert host.exec(f"stat -c '%U %a' {records[0]} /opt/sglang/verified").stdout.split() == [
            "sglang", "644", "sglang", "755"]
    finally:
        host.exec(f"rm -rf {TINY_DIR}/.sglang")


def test_an_admin_can_pull_by_hand_into_the_shared_cache(pulled, hub):
    host, inventory, _, _ = pulled
    proc = host.exec(f"sudo -u {ADMIN} env HF_HUB_DISABLE_TELEMETRY=1 HF_HOME=/opt/sglang/hf-cache "
                     f"HF_ENDPOINT={hub.url} /var/lib/sglang-tools/venv/bin/hf download standin-org/admin-extra",
                     check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    groups = host.exec(f"find {HUB}/models--standin-org--admin-extra -printf '%g\\n' | sort -u").stdout.split()
    assert groups == ["sglang"]
    # huggingface_hub writes its tree cache 0600 (mkstemp); the layout task gives it group read/write back.
    repair = run_deploy(inventory)
    assert repair.returncode == 0, repair.output[-3000:]
    assert all(op.startswith("tasks/layout.py") for op in repair.changed("sg-models-1")), repair.output[-3000:]
    again = run_deploy(inventory)
    assert again.returncode == 0 and again.changed("sg-models-1") == [], again.output[-3000:]


def test_prune_lists_then_removes_only_unreferenced_revisions(pulled, hub):
    host, inventory, _, _ = pulled
    commits = standin_hub.commits()
    # An older revision of the served repo, sharing its first shard's blob, and the admin's extra repo.
    host.exec(f"sudo -u sglang env HF_HUB_DISABLE_TELEMETRY=1 HF_ENDPOINT={hub.url} "
              f"/var/lib/sglang-tools/venv/bin/hf download {TINY} --revision {commits[TINY]['old']} "
              f"--cache-dir {HUB} >/dev/null", timeout=120)
    before = host.exec(f"ls {TINY_DIR}/snapshots").stdout.split()
    assert sorted(before) == sorted([commits[TINY]["main"], commits[TINY]["old"]])

    code, plan, output = run_dry(inventory, "--data", "sglang_prune_models=True")
    assert code == 0, output[-3000:]
    assert f"prune: {TINY}@{commits[TINY]['old'][:12]}" in output
    assert "prune: standin-org/admin-extra@" in output
    planned = [op for op, changed in plan.items() if changed]
    assert "tasks/model_pruning.py | Ensure hf-cache/hub holds only the revisions this host serves, keeps or " \
           "references" in planned
    # The hand pull above ran with umask 022, so the layout task also plans to restore group write.
    assert all(op.startswith(("tasks/model_pruning.py", "tasks/layout.py")) for op in planned), planned
    assert sorted(host.exec(f"ls {TINY_DIR}/snapshots").stdout.split()) == sorted(before)

    real = run_deploy(inventory, "--data", "sglang_prune_models=True")
    assert real.returncode == 0, real.output[-3000:]
    assert host.exec(f"ls {TINY_DIR}/snapshots").stdout.split() == [commits[TINY]["main"]]
    assert host.exec(f"test -d {HUB}/models--standin-org--admin-extra", check=False).returncode != 0
    assert host.exec(f"ls {HUB}/models--standin-org--tiny-chat-quality/snapshots").stdout.split() == [
        commits["standin-org/tiny-chat-quality"]["main"]]
    # The shard shared with the removed revision is still whole.
    assert host.exec(f"sha256sum {TINY_DIR}/blobs/{shard_sha256()}").stdout.split()[0] == shard_sha256()
    assert re.search(r"SGLANG_PRUNE_RESULT .*\"freed_bytes\": [1-9]", real.output)
    again = run_deploy(inventory, "--data", "sglang_prune_models=True")
    assert again.returncode == 0 and again.changed("sg-models-1") == []


@pytest.fixture(scope="module")
def fresh(testbed, workdir, hub):
    """A converged host for the fault tests; each leaves the model whole again."""
    host = testbed.host("sg-models-2")
    inventory = testbed.inventory(workdir / "models_fresh.py", {"production": [(host, {})]})
    first = run_deploy(inventory)
    assert first.returncode == 0, first.output[-4000:]
    return host, inventory


def recorded_ranges(host, sha: str, size: int) -> list[list[int]]:
    """What a partial on the host holds, as the next pull reads it (its range sidecar, else its length)."""
    partial = f"{TINY_DIR}/blobs/{sha}.incomplete"
    length = int(host.exec(f"stat -c %s {partial} 2>/dev/null || echo 0", check=False).stdout.strip() or 0)
    note = host.exec(f"cat {partial}{ranges.SIDECAR} 2>/dev/null", check=False).stdout
    return ranges.resume(size, length, note or None, WORKERS)


def test_a_killed_pull_resumes_every_range_with_only_the_missing_bytes(fresh, hub, workdir, measure):
    host, inventory = fresh
    host.exec(f"rm -rf {TINY_DIR}")
    hub.set_throttle(256 << 10)  # per connection: the 12 MiB shard's 8 ranges take about 6 s
    try:
        deploy = start_deploy(inventory, workdir / "killed-pull.log")
        done = 0
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and done < (3 << 20):
            done = ranges.done(recorded_ranges(host, shard_sha256(), SHARD_SIZE))
            time.sleep(0.3)
        assert done >= 3 << 20, "the pull never got going"
        host.exec("pkill -KILL -f 'hfpull.py pull'", check=False)
        deploy.wait(timeout=300)
    finally:
        hub.set_throttle(None)
    assert deploy.returncode != 0
    kept = recorded_ranges(host, shard_sha256(), SHARD_SIZE)
    assert len(kept) == WORKERS and 0 < ranges.missing(kept) < SHARD_SIZE

    hub.reset()
    resumed = run_deploy(inventory)
    assert resumed.returncode == 0, resumed.output[-3000:]
    gets = resolve_gets(hub.requests(), SHARD)
    assert sorted(g["range"] for g in gets) == sorted(
        ranges.header(start + done, end, SHARD_SIZE) for start, end, done in kept if done < end - start)
    assert sum(g["bytes_sent"] for g in gets) == ranges.missing(kept)
    (result,) = [r for r in pull_results(resumed.output) if r["repo_id"] == TINY]
    ratio = result["bytes_fetched"] / result["bytes_missing"]
    measure(f"pull killed mid-file: {ranges.done(kept)} of {SHARD_SIZE} bytes of the shard kept in {len(kept)} "
            f"ranges; the resumed pull fetched {result['bytes_fetched']} bytes for {result['bytes_missing']} "
            f"missing (ratio {ratio:.3f})")
    assert ratio <= 1.01
    assert host.exec(f"ls {TINY_DIR}/blobs | grep -c incomplete", check=False).stdout.strip() == "0"
    assert host.exec(f"sha256sum {TINY_DIR}/blobs/{shard_sha256()}").stdout.split()[0] == shard_sha256()


def drop_small_shard(host) -> str:
    """Delete the small shard's blob (its revision is then incomplete); its sha256."""
    sha = shard_sha256(SMALL_SHARD)
    host.exec(f"rm {TINY_DIR}/blobs/{sha}")
    return sha


def deploy_with_faults(inventory, hub, **faults):
    """One deploy while the stand-in Hub has ``faults`` (its config keys), cleared again whatever happens."""
    hub.reset()
    hub.configure(**faults)
    try:
        return run_deploy(inventory)
    finally:
        hub.clear_faults()


def test_a_429_is_retried_after_the_wait_the_hub_asks_for(fresh, hub):
    host, inventory = fresh
    sha = drop_small_shard(host)
    commit = standin_hub.commits()[TINY]["main"]
    # The Hub's rate limiter: 429 with Retry-After: 2 to the first range, and again to any request for the
    # shard in the next 2 seconds; a client retrying sooner is refused a second time.
    result = deploy_with_faults(inventory, hub, inject_status=429, inject_count=1, retry_after=2,
                                inject_match=f"GET /{TINY}/resolve/{commit}/{SMALL_SHARD}")
    assert result.returncode == 0, result.output[-3000:]
    gets = resolve_gets(hub.requests(), SMALL_SHARD)
    refused = [g["range"] for g in gets if g["status"] == 429]
    assert refused and len(refused) == len(set(refused)), refused  # each range refused once, then waited
    assert sorted(g["range"] for g in gets if g["status"] == 206) == planned(SMALL_SIZE)
    assert "as the Hub asked" in result.output
    assert host.exec(f"sha256sum {TINY_DIR}/blobs/{sha}").stdout.split()[0] == sha


def test_a_cut_in_the_middle_of_a_range_resumes_that_range(fresh, hub):
    host, inventory = fresh
    sha = drop_small_shard(host)
    result = deploy_with_faults(inventory, hub, drop_after_bytes=300_000, drop_count=1,
                                drop_range=f"bytes={1 << 20}-")
    assert result.returncode == 0, result.output[-3000:]
    gets = resolve_gets(hub.requests(), SMALL_SHARD)
    assert [(g["range"], g["bytes_sent"]) for g in gets if g["dropped"]] == [
        (f"bytes={1 << 20}-{(2 << 20) - 1}", 300_000)]
    assert f"bytes={(1 << 20) + 300_000}-{(2 << 20) - 1}" in [g["range"] for g in gets if not g["dropped"]]
    (res,) = [r for r in pull_results(result.output) if r["repo_id"] == TINY]
    assert res["bytes_refetched"] == 0 and res["bytes_fetched"] == SMALL_SIZE
    assert host.exec(f"sha256sum {TINY_DIR}/blobs/{sha}").stdout.split()[0] == sha


def test_a_hub_error_on_one_file_stops_the_whole_pull_and_names_the_host(fresh, hub):
    host, inventory = fresh
    host.exec(f"rm -rf {TINY_DIR}")
    commit = standin_hub.commits()[TINY]["main"]
    failed = deploy_with_faults(inventory, hub, throttle_bytes_per_s=256 << 10,  # the large shard: about 6 s
                                inject_status=404, inject_count=1,
                                inject_match=f"HEAD /{TINY}/resolve/{commit}/{SMALL_SHARD}")
    assert failed.returncode != 0
    assert re.search(r"\[sg-models-2\].*pull failed: HTTP 404: Injected failure 404", failed.output), \
        failed.output[-3000:]
    sent = sum(g["bytes_sent"] for g in resolve_gets(hub.requests(), SHARD))
    assert sent < SHARD_SIZE  # its ranges ended with the failure, not when they were done
    assert host.exec(f"test -e {TINY_DIR}/blobs/{shard_sha256()}", check=False).returncode != 0
    again = run_deploy(inventory)
    assert again.returncode == 0, again.output[-3000:]


def test_a_corrupted_blob_is_fetched_again(fresh, hub):
    host, inventory = fresh
    blob = f"{TINY_DIR}/blobs/{shard_sha256()}"
    host.exec(f"printf 'X' | dd of={blob} bs=1 seek=1000 conv=notrunc status=none")
    hub.reset()
    repaired = run_deploy(inventory)
    assert repaired.returncode == 0, repaired.output[-3000:]
    assert host.exec(f"sha256sum {blob}").stdout.split()[0] == shard_sha256()
    assert sorted(g["range"] for g in resolve_gets(hub.requests(), SHARD)) == planned(SHARD_SIZE)


def test_an_orphaned_partial_from_a_hand_pull_is_adopted(fresh, hub):
    host, inventory = fresh
    blob = f"{TINY_DIR}/blobs/{shard_sha256()}"
    # What a killed `hf download` leaves: a partial under a name unique to its process.
    host.exec(f"head -c 5000000 {blob} > {blob}.1a2b3c4d.incomplete && rm {blob} && "
              f"chown sglang:sglang {blob}.1a2b3c4d.incomplete")
    hub.reset()
    repaired = run_deploy(inventory)
    assert repaired.returncode == 0, repaired.output[-3000:]
    asked = sorted(g["range"] for g in resolve_gets(hub.requests(), SHARD))
    assert asked == sorted(ranges.header(start, end, SHARD_SIZE)
                           for start, end, done in ranges.plan(SHARD_SIZE, WORKERS, 5_000_000) if not done)
    assert any(a.startswith("bytes=5000000-") for a in asked)
    assert host.exec(f"ls {TINY_DIR}/blobs | grep -c incomplete", check=False).stdout.strip() == "0"
    assert host.exec(f"sha256sum {blob}").stdout.split()[0] == shard_sha256()


def test_a_planted_lock_symlink_ends_the_pull_at_once_and_says_why(fresh):
    """A group member links the pull's lock of a repo the host is about to keep to a file root owns."""
    host, inventory = fresh
    repo = f"{HUB}/models--standin-org--tiny-chat-quality"
    lock = f"{repo}/.sglang-pull.lock"
    host.exec(f"mkdir -p {repo} && ln -s /opt/sglang/docker/compose.yaml {lock}")
    before = host.exec("stat -c '%U %G %a' /opt/sglang/docker/compose.yaml").stdout
    started = time.monotonic()
    result = run_deploy(inventory, "--data", 'sglang_cached_models=["qwen3.6-27b-awq-int4"]')
    assert time.monotonic() - started < 120
    assert result.returncode != 0
    assert f"{lock} is a symlink, not a lock file" in result.output, result.output[-3000:]
    assert f"rm {lock}" in result.output
    assert host.exec("stat -c '%U %G %a' /opt/sglang/docker/compose.yaml").stdout == before
    host.exec(f"rm {lock}")
    again = run_deploy(inventory, "--data", 'sglang_cached_models=["qwen3.6-27b-awq-int4"]')
    assert again.returncode == 0, again.output[-3000:]


def test_a_gated_repo_needs_the_token_and_the_token_stays_in_its_file(testbed, workdir, hub):
    # The gated-repo host logs in as a non-root user with sudo: the token travels through sudo.
    host = testbed.host("sg-models-3", login="deploy")
    # A token never crosses the network in clear: this host pulls from the Hub's HTTPS listener, whose test CA
    # it trusts; over plain http the run is refused before any change.
    host.exec(standin_hub.Hub.trust_command())
    token = standin_hub.GATED_TOKEN
    plain = testbed.inventory(workdir / "models_gated_http.py", {"production": [(host, {
        "sglang_cached_models": ["gated-chat"]})]})
    cleartext = run_deploy(plain, env={"HF_TOKEN": token})
    assert cleartext.returncode != 0 and "sglang_hf_endpoint: http://" in cleartext.output
    assert "the token would cross the network in clear" in cleartext.output and cleartext.statuses == {}
    data = {"sglang_cached_models": ["gated-chat"], "sglang_hf_endpoint": hub.https_url}
    inventory = testbed.inventory(workdir / "models_gated.py", {"production": [(host, data)]})
    refused = run_deploy(inventory)
    assert refused.returncode != 0
    assert re.search(r"\[sg-models-3\].*pull failed: GatedRepo", refused.output), refused.output[-3000:]

    allowed = run_deploy(inventory, "-vvv", env={"HF_TOKEN": token})
    assert allowed.returncode == 0, allowed.output[-3000:]
    assert token not in allowed.output and token not in refused.output
    holders = host.exec(f"grep -rlsF {token} /opt /etc /var/lib/sglang-tools /tmp /root /home /var/log",
                        check=False).stdout.split()
    assert holders == ["/var/lib/sglang-tools/secret/hf-token"]
    assert host.exec("stat -c '%U %a' /var/lib/sglang-tools/secret/hf-token").stdout.split() == ["sglang", "600"]
    assert token not in host.exec("docker inspect $(docker ps -aq)").stdout
    assert token not in host.exec("journalctl --no-pager -q", check=False).stdout
