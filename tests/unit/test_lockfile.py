"""The lock (sglang.lock): written from the stand-in Hub on 127.0.0.1 by
lockgen, enforced by the plan, the pull and the image build. The registry and
the wheel index parts run against real ones in tests/e2e/test_lock.py,
tests/e2e/test_toolchain.py and tests/e2e/test_toolchain_build.py."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyinfra_cli.exceptions  # noqa: F401  first, before any thread: it patches threading (problems._refusal)
import pytest
from conftest import FakeHost, command_text, on_host, pinned_defaults, plan_for

from hfstandin import StandinHub
from sglang_infra.fleet import lockgen
from sglang_infra.machine import ship, toolchain
from sglang_infra.models import lockfile
from sglang_infra.operations import models as model_ops
from sglang_infra.plan.problems import DeployDataError
from sglang_infra.plan.refusals import check_data
from sglang_infra.run import factcache

SCRIPT = Path(tempfile.mkdtemp(prefix="hfpull-lock-")) / "hfpull.py"
SCRIPT.write_text(ship.program("pull.hfpull"))
REPO = "org/locked"
SPEC = {"repos": [{"repo_id": REPO, "commits": [
    {"branch": "main", "files": [
        {"path": "config.json", "text": '{"v": 1}'},
        {"path": "sub/tokenizer.json", "text": '{"vocab": []}'},
        {"path": "model.safetensors", "size": 200_000, "seed": 7, "lfs": True}]},
    {"branch": "next", "files": [
        {"path": "config.json", "text": '{"v": 2}'},
        {"path": "model.safetensors", "size": 100_000, "seed": 8, "lfs": True}]}]}]}


PINNED_IMAGE = "lmsysorg/sglang@sha256:" + "e" * 64
TAGGED = "lmsysorg/sglang:v0.5.16"


@pytest.fixture
def hub():
    with StandinHub(SPEC, access_log=False) as running:
        yield running


def host_data(hub, **changes) -> dict:
    data = pinned_defaults()
    data["sglang_models"] = {"m": {**data["sglang_models"]["qwen3.6-35b-a3b-awq"], "repo_id": REPO,
                                   "revision": None}}
    # An image by digest needs no lookup (lockgen would ask the Docker engine, which asks the registry).
    data.update({"sglang_model": "m", "sglang_hf_endpoint": hub.url, "sglang_toolchain_image": False,
                 "sglang_image": PINNED_IMAGE, **changes})
    return data


def records_of(cache: Path) -> Path:
    return cache.with_name(cache.name + "-verified")


def record(cache: Path, commit: str) -> Path:
    return records_of(cache) / "models--org--locked" / f"{commit}.json"


def pull(cache: Path, hub, commit: str, locked: dict | None):
    args = [sys.executable, str(SCRIPT), "pull", "--cache-dir", str(cache), "--records-dir", str(records_of(cache)),
            "--repo-id", REPO, "--revision", commit, "--endpoint", hub.url]
    args += ["--locked-stdin"] if locked is not None else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return subprocess.run(args, input=json.dumps(locked) if locked is not None else None, capture_output=True,
                          text=True, timeout=60, env=env)


# ---------------------------------------------------------------- what lock.sh reads is bounded

def test_the_hubs_answers_to_lock_sh_are_bounded_like_the_pulls(hub):
    from sglang_infra.hostside.pull import hublimits

    hub.configure(hostile_body="endless", hostile_match=f"GET /api/models/{REPO}")
    with pytest.raises(hublimits.Unbounded, match=f"^model info from {hub.url} exceeded 32 MiB$"):
        lockgen.resolve_model("m", REPO, "main", hub.url, None)
    # A regular file's body is the one answer read as it comes (hashed, bounded by its listed size).
    hub.configure(hostile_body=None)
    assert lockgen.resolve_model("m", REPO, "main", hub.url, None).commit == hub.commit(REPO, "main")


def test_an_index_page_is_bounded_in_bytes_and_in_time(hub, monkeypatch):
    hub.configure(hostile_body="endless", hostile_match="/simple/")
    with pytest.raises(lockgen.LockGenError, match=r"the index page .*/simple/x/: the answer is larger than"):
        lockgen._get(f"{hub.url}/simple/x/")
    monkeypatch.setattr(lockgen, "INDEX_PAGE_SECONDS", 1)
    hub.configure(hostile_body="drip")
    with pytest.raises(lockgen.LockGenError, match=r"did not finish in time \(at most 64 MiB within 1 s\)"):
        lockgen._get(f"{hub.url}/simple/x/")


# ---------------------------------------------------------------- writing the lock

def test_a_model_is_locked_with_every_file_sha256_and_says_where_each_came_from(hub):
    locked = lockgen.resolve_model("m", REPO, "main", hub.url, None)
    assert locked.commit == hub.commit(REPO, "main")
    files = {f["path"]: f for f in locked.files}
    assert sorted(files) == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    for path, entry in files.items():
        content = hub.file_bytes(REPO, "main", path)
        assert entry["sha256"] == hashlib.sha256(content).hexdigest() and entry["size"] == len(content)
    assert files["model.safetensors"]["sha256_from"] == "lfs" and "git_blob" not in files["model.safetensors"]
    assert files["config.json"]["sha256_from"] == "computed"
    assert files["config.json"]["git_blob"] == hub.file_meta(REPO, "main", "config.json")["git_oid"]


def test_running_it_again_without_update_changes_nothing_and_asks_no_one(hub, tmp_path):
    hosts = [("gpu-01", host_data(hub))]
    with pytest.raises(lockgen.LockGenError, match=r"--update m@main"):
        lockgen.generate(hosts, None, [])   # no revision anywhere: the operator names the branch
    doc = lockgen.generate(hosts, None, ["m@main"])
    path = tmp_path / "sglang.lock"
    assert lockgen.write(str(path), doc) is True
    before = path.stat().st_mtime_ns, path.read_bytes()
    hub.reset()
    again = lockgen.generate(hosts, lockfile.load(str(path)), [])
    assert hub.requests() == []
    assert lockgen.write(str(path), again) is False
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before
    assert lockfile.load(str(path)).models["m"].commit == hub.commit(REPO, "main")


def test_update_to_a_branch_moves_the_commit(hub, tmp_path):
    hosts = [("gpu-01", host_data(hub))]
    path = tmp_path / "sglang.lock"
    lockgen.write(str(path), lockgen.generate(hosts, None, ["m@main"]))
    lockgen.write(str(path), lockgen.generate(hosts, lockfile.load(str(path)), ["m@next"]))
    assert lockfile.load(str(path)).models["m"].commit == hub.commit(REPO, "next")
    with pytest.raises(lockgen.LockGenError, match="no host serves or keeps"):
        lockgen.generate(hosts, lockfile.load(str(path)), ["other@main"])


def test_one_key_with_two_pins_across_hosts_is_refused(hub):
    a = host_data(hub)
    b = host_data(hub)
    b["sglang_models"] = {"m": {**b["sglang_models"]["m"], "revision": "1" * 40}}
    with pytest.raises(lockgen.LockGenError, match="on host b but"):
        lockgen.generate([("a", a), ("b", b)], None, ["m@main"])


def test_a_malformed_lock_names_the_file_and_the_fix(tmp_path):
    path = tmp_path / "sglang.lock"
    path.write_text('{"format": 1, "models": {"m": {"repo_id": "a/b", "commit": "main", "files": []}}}')
    with pytest.raises(lockfile.LockError, match=rf"{path}: models\['m'\].*Fix: write it again"):
        lockfile.load(str(path))


def test_image_references_lose_only_their_tag():
    assert lockfile.repository("lmsysorg/sglang:v0.5.16") == "lmsysorg/sglang"
    assert lockfile.repository("10.0.0.5:5000/team/sglang:v1") == "10.0.0.5:5000/team/sglang"
    assert lockfile.repository("10.0.0.5:5000/sglang") == "10.0.0.5:5000/sglang"
    assert lockfile.repository("a/b:t@sha256:" + "0" * 64) == "a/b"


# ---------------------------------------------------------------- the plan against the lock

def write_lock(tmp_path, hub, **images) -> str:
    doc = lockgen.generate([("gpu-01", host_data(hub))], None, ["m@main"]) if hub else lockfile.document({}, {}, {}, "")
    doc["images"] = {ref: {"digest": d, "pinned": f"{lockfile.repository(ref)}@{d}"} for ref, d in images.items()}
    path = tmp_path / "sglang.lock"
    path.write_text(lockfile.render(doc))
    return str(path)


def test_with_a_lock_the_plan_takes_its_commit_and_pulls_the_image_by_digest(hub, tmp_path):
    digest = "sha256:" + "ab" * 32
    data = host_data(hub, sglang_lock=write_lock(tmp_path, hub, **{TAGGED: digest}), sglang_image=TAGGED)
    plan = plan_for(data)
    assert plan.served.revision == hub.commit(REPO, "main")
    assert plan.image.pulled == plan.image.serving == f"lmsysorg/sglang@{digest}"
    assert f'image: "lmsysorg/sglang@{digest}"\n    # {TAGGED} by the digest sglang.lock records' in plan.compose
    assert plan.locked["m"].commit == plan.served.revision


def test_without_the_lock_file_nothing_changes(hub, tmp_path):
    data = host_data(hub, sglang_lock=str(tmp_path / "absent.lock"), sglang_image=TAGGED)
    data["sglang_models"]["m"]["revision"] = "1" * 40
    plan = plan_for(data)
    assert plan.lock is None and plan.image.pulled == "lmsysorg/sglang:v0.5.16" and plan.served.revision == "1" * 40


@pytest.mark.parametrize("change,expected", [
    (lambda d: d["sglang_models"]["m"].update(revision="2" * 40),
     "sglang_models: entry 'm' pins revision 2222222222222222222222222222222222222222, but"),
    (lambda d: d.update(sglang_cached_models=["qwen3.6-27b-awq-int4"],
                        sglang_models={**d["sglang_models"], "qwen3.6-27b-awq-int4": pinned_defaults()[
                            "sglang_models"]["qwen3.6-27b-awq-int4"]}),
     "has no entry for the model 'qwen3.6-27b-awq-int4'. Fix: add it with scripts/lock.sh"),
    (lambda d: d.update(sglang_image="lmsysorg/sglang:v0.5.17"),
     "has no digest for the image lmsysorg/sglang:v0.5.17. Fix: add it with scripts/lock.sh (or --update image)"),
    (lambda d: d.update(sglang_toolchain_image=True),
     "has no hashes for the wheel flashinfer-python==0.6.14"),
])
def test_a_lock_that_disagrees_is_refused_naming_the_key_and_the_fix(hub, tmp_path, change, expected):
    data = host_data(hub, sglang_lock=write_lock(tmp_path, hub, **{TAGGED: "sha256:" + "c" * 64}),
                     sglang_image=TAGGED)
    change(data)
    problems = check_data("gpu-01", data)
    assert any(expected in p and p.startswith("host gpu-01: ") for p in problems), problems
    with pytest.raises(DeployDataError):
        plan_for(data)


# ---------------------------------------------------------------- the pull against the lock

def test_the_pull_verifies_every_file_against_the_lock(hub, tmp_path):
    locked = lockgen.resolve_model("m", REPO, "main", hub.url, None)
    cache = tmp_path / "hub"
    done = pull(cache, hub, locked.commit, locked.record())
    assert done.returncode == 0, done.stderr
    manifest = json.loads(record(cache, locked.commit).read_text())
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == {f["path"]: f["sha256"] for f in locked.files}
    from sglang_infra.hostside.pull import manifest
    from sglang_infra.hostside.read import cachestate
    records = manifest.Records(str(records_of(cache)), manifest.owners())
    state = cachestate.scan(str(cache), records)["repos"][REPO]["revisions"][locked.commit]
    assert state["complete"] and state["content"] == locked.content
    hub.reset()
    assert pull(cache, hub, locked.commit, locked.record()).returncode == 0
    assert hub.requests() == []   # verified against the lock once: no request on the next pull


def test_with_the_lock_the_pull_asks_the_hub_for_no_info_and_no_listing(hub, tmp_path):
    locked = lockgen.resolve_model("m", REPO, "main", hub.url, None)
    hub.reset()
    done = pull(tmp_path / "hub", hub, locked.commit, locked.record())
    assert done.returncode == 0, done.stderr
    # the lock lists the files (an LFS file by its sha256, a regular one by its git blob): only the file endpoint
    assert hub.counts(REPO) == {"info": 0, "listing": 0, "auth": 0, "file-head": 3, "file-get": 3, "other": 0}
    assert locked.gated is False and locked.record()["gated"] is False   # not gated: no access check either
    assert sorted(os.listdir(tmp_path / "hub" / "models--org--locked" / "blobs")) == sorted(
        f["sha256"] if f["sha256_from"] == "lfs" else f["git_blob"] for f in locked.files)


def test_with_the_lock_the_pull_never_loads_the_hub_api_module(hub, tmp_path):
    """huggingface_hub.hf_api (the info, listing and access-check client) is a large part of the pull's start
    (0.06-0.18 s here): a pull that asks none of them, as with the lock, never imports it; one without the lock does."""
    locked = lockgen.resolve_model("m", REPO, "main", hub.url, None)
    probe = ("import runpy, sys\nsys.argv = sys.argv[1:]\ntry:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
             "except SystemExit as e:\n    print('EXIT', e.code, 'HF_API', 'huggingface_hub.hf_api' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    loaded = {}
    for name, record_in in (("locked", locked.record()), ("unlocked", None)):
        cache = tmp_path / name
        args = [sys.executable, "-c", probe, str(SCRIPT), "pull", "--cache-dir", str(cache), "--records-dir",
                str(records_of(cache)), "--repo-id", REPO, "--revision", locked.commit, "--endpoint", hub.url]
        args += ["--locked-stdin"] if record_in is not None else []
        done = subprocess.run(args, input=json.dumps(record_in) if record_in is not None else None,
                              capture_output=True, text=True, timeout=60, env=env)
        last = done.stdout.splitlines()[-1]
        assert last.startswith("EXIT 0 HF_API "), done.stdout + done.stderr
        loaded[name] = last.endswith("True")
    assert loaded == {"locked": False, "unlocked": True}


def test_a_lock_without_a_regular_files_git_blob_takes_the_hubs_listing(hub, tmp_path):
    locked = lockgen.resolve_model("m", REPO, "main", hub.url, None)
    record = locked.record()
    for entry in record["files"]:
        entry.pop("git_blob", None)   # a lock written before it kept them: the blob's name is not known
    hub.reset()
    done = pull(tmp_path / "hub", hub, locked.commit, record)
    assert done.returncode == 0, done.stderr
    assert (hub.counts(REPO)["info"], hub.counts(REPO)["listing"]) == (1, 1)


def test_a_lock_records_whether_the_repo_is_gated_and_an_older_lock_learns_it_at_its_own_commit(hub, tmp_path):
    hosts = [("gpu-01", host_data(hub))]
    path = tmp_path / "sglang.lock"
    lockgen.write(str(path), lockgen.generate(hosts, None, ["m@main"]))
    older = json.loads(path.read_text())
    assert older["models"]["m"]["gated"] is False
    del older["models"]["m"]["gated"]   # as a lock written before this
    older["models"]["m"]["commit"] = hub.commit(REPO, "next")
    older["models"]["m"]["files"] = [dict(f) for f in lockgen.resolve_model("m", REPO, "next", hub.url, None).files]
    path.write_text(json.dumps(older))
    assert lockfile.load(str(path)).models["m"].gated is None and "gated" not in lockfile.load(
        str(path)).models["m"].record()
    again = lockgen.generate(hosts, lockfile.load(str(path)), [])
    assert again["models"]["m"]["gated"] is False
    assert again["models"]["m"]["commit"] == hub.commit(REPO, "next")   # main has moved on: the lock's commit stays
    hub.tamper(REPO, "next", "config.json")
    with pytest.raises(lockgen.LockGenError, match="lists other files for org/locked@.* than the lock does"):
        lockgen.generate(hosts, lockfile.load(str(path)), [])


@pytest.mark.parametrize("path", ["model.safetensors", "config.json"])
def test_a_mirror_that_rewrites_a_file_is_refused_naming_it(hub, tmp_path, path):
    locked = lockgen.resolve_model("m", REPO, "main", hub.url, None)
    hub.tamper(REPO, "main", path, offset=5)   # the listing, the ETag and the bytes agree on the new content
    cache = tmp_path / "hub"
    unlocked = pull(tmp_path / "other", hub, locked.commit, None)
    assert unlocked.returncode == 0, unlocked.stderr   # what the endpoint says is self-consistent
    refused = pull(cache, hub, locked.commit, locked.record())
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert refused.stderr.startswith(f"verification failed: {path}: ") and "lock" in refused.stderr
    assert not record(cache, locked.commit).exists()


def test_a_revision_pulled_before_the_lock_is_verified_again_without_fetching(hub, tmp_path):
    locked = lockgen.resolve_model("m", REPO, "main", hub.url, None)
    cache = tmp_path / "hub"
    assert pull(cache, hub, locked.commit, None).returncode == 0
    manifest_path = record(cache, locked.commit)
    old = json.loads(manifest_path.read_text())
    for entry in old["files"]:   # a manifest written before sha256 was recorded
        entry.pop("sha256")
    manifest_path.write_text(json.dumps(old))
    hub.reset()
    again = pull(cache, hub, locked.commit, locked.record())
    assert again.returncode == 0, again.stderr
    assert not [r for r in hub.requests() if r["method"] == "GET" and "/resolve/" in r["path"]]
    assert all(f.get("sha256") for f in json.loads(manifest_path.read_text())["files"])


# ---------------------------------------------------------------- the operation and the image build

def test_a_complete_revision_with_other_content_than_the_lock_is_pulled_again(hub):
    locked = lockgen.resolve_model("m", REPO, "main", hub.url, None)
    state = {"complete": True, "verified": True, "files": 3, "size": 1, "problems": [], "content": "0" * 64}
    facts = {"Snapshot": {"models": {"repos": {REPO: {"revisions": {locked.commit: state}}}}}}
    plan = plan_for(pinned_defaults())
    args = dict(pull=plan.pull, paths=plan.paths, model=dataclasses.replace(plan.served, repo_id=REPO,
                                                                            revision=locked.commit), locked=locked)

    def run(facts):
        fake = FakeHost(facts)
        try:
            with on_host(fake):
                return list(model_ops.model_pulled._inner(**args)), fake
        finally:
            factcache.invalidate(fake)

    commands, _ = run(facts)
    assert len(commands) == 1 and "--locked-stdin" in command_text(commands[0])
    assert json.loads(commands[0].kwargs["_stdin"]) == locked.record()
    state["content"] = locked.content
    commands, fake = run(facts)
    assert commands == [] and "as the lock records it" in fake.noops[0]

    # a swarm's round 1 (peering.split): the share's paths on stdin beside the lock's record, never on the command
    # line; nothing to do once the snapshot says the share's files are verified (the revision still in part)
    share = (locked.files[0]["path"],)
    args["share"] = share
    state.update(complete=False, verified=False, content=None)
    commands, _ = run(facts)
    assert json.loads(commands[0].kwargs["_stdin"]) == {**locked.record(), "share": list(share)}
    assert share[0] not in command_text(commands[0])
    state["verified_blobs"] = {"c" * 64: locked.files[1]["sha256"]}   # another file of the revision
    assert len(run(facts)[0]) == 1
    state["verified_blobs"] = {"b" * 64: locked.files[0]["sha256"]}
    commands, fake = run(facts)
    assert commands == [] and "share" in fake.noops[0]


def test_the_image_build_requires_the_locked_wheel_hashes():
    data = pinned_defaults()
    hashes = {f"{n}=={v}": (("a.whl", "a" * 64),) for n, v in toolchain.pins(data).items()}
    plain = toolchain.build_context(data, toolchain.pins(data), None, "lmsysorg/sglang:v0.5.16")
    locked = toolchain.build_context(data, toolchain.pins(data), None, "lmsysorg/sglang@sha256:" + "c" * 64,
                                     wheel_hashes=hashes, tag_from="lmsysorg/sglang:v0.5.16")
    assert "--require-hashes" not in plain.dockerfile and "requirements.txt" not in plain.files
    assert "--require-hashes -r /tmp/sglang-requirements.txt" in locked.dockerfile
    assert b"flashinfer-python==0.6.14 \\\n    --hash=sha256:" + b"a" * 64 in locked.files["requirements.txt"]
    assert locked.tag.startswith("sglang-serving:v0.5.16-") and locked.tag != plain.tag


def test_lock_sh_keeps_the_shape_config_json_gives_and_reads_it_again_for_an_older_lock(hub, tmp_path):
    """The lock carries what config.json says of the model's shape (lockfile.CONFIG_KEYS), read from the bytes it
    hashes, for the preflight's fit on the GPUs (machine/modelfit.py); an entry locked before it is read again at its
    commit, and a lock written again without --update changes nothing."""
    shaped = {"repos": [{"repo_id": "org/shaped", "commits": [{"branch": "main", "files": [
        {"path": "config.json", "text": json.dumps({"num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 64,
                                                    "torch_dtype": "bfloat16", "vocab_size": 1000})},
        {"path": "model.safetensors", "size": 1000, "seed": 3, "lfs": True}]}]}]}
    with StandinHub(shaped, access_log=False) as shaped_hub:
        model = lockgen.resolve_model("s", "org/shaped", "main", shaped_hub.url, None)
        assert model.config == {"num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 64,
                                "torch_dtype": "bfloat16"}
        assert model.weights == 1000
        written = lockfile.parse("x", lockfile.render(lockfile.document({"s": model}, {}, {}, "now")))
        assert written.models["s"].config == model.config
        data = {**host_data(hub), "sglang_hf_endpoint": shaped_hub.url, "sglang_models": {"s": {
            **host_data(hub)["sglang_models"]["m"], "repo_id": "org/shaped"}}, "sglang_model": "s"}
        older = lockfile.parse("x", lockfile.render(lockfile.document(
            {"s": lockfile.LockedModel("s", model.repo_id, model.commit, model.files, False)}, {}, {}, "then")))
        again = lockgen.generate([("h", data)], older, [])
        assert again["models"]["s"]["config"] == model.config
        kept = lockgen.generate([("h", data)], lockfile.parse("x", lockfile.render(again)), [])
        assert lockfile.body(kept) == lockfile.body(again)
