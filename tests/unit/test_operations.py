from __future__ import annotations

import importlib
import pkgutil
import re
from types import SimpleNamespace
from unittest import mock

import pytest
from conftest import FakeHost, command_text, load_cases, on_host
from pyinfra.api import OperationError

from sglang_infra import operations
from sglang_infra.operations import account, files, gate
from sglang_infra.operations import stack as stack_ops
from sglang_infra.run import factcache
from sglang_infra.run import operation as base

CASES = load_cases("operations")


def _operations() -> dict:
    """Every operation of sglang_infra/operations/, by name, found in the module that defines it: what pyinfra's
    @operation made (directly or through operation.snapshot_operation), which pyinfra marks with ``_inner``, the
    generator an operation runs inside another (pyinfra.api.operation._wrap_operation)."""
    found = {}
    for info in pkgutil.iter_modules(operations.__path__):
        module = importlib.import_module(f"{operations.__name__}.{info.name}")
        for name, value in vars(module).items():
            if callable(getattr(value, "_inner", None)) and value.__module__ == module.__name__:
                assert name not in found, f"{name} is defined in two operation modules"
                found[name] = value
    return found


OPERATIONS = _operations()


def _arguments(op: str, args: dict) -> dict:
    """A fixture's arguments as the operation takes them: JSON has no types.Worker, so gateway_workers'
    workers are written as their fields (and so are the other records an operation takes)."""
    if op == "gateway_workers":
        from sglang_infra.plan.types import Worker

        args = {**args, "workers": [Worker(**worker) for worker in args["workers"]]}
    if op == "group_up":
        from sglang_infra.plan.types import GroupMember, NodeGroup

        group = args["group"]
        args = {**args, "group": NodeGroup(**{**group, "members": tuple(group["members"]),
                                              "member_plans": tuple(GroupMember(**m) for m in group["member_plans"])})}
    if op in ("blobs_listed", "door_checked"):
        from sglang_infra.plan.types import PeerDoor, PeerPin

        door = args["door"]
        args = {**args, "door": PeerDoor(**{**door, "key": door["key"].encode(),
                                            "pins": tuple(PeerPin(*pin) for pin in door["pins"])})}
    if op == "keyring_pinned":
        from sglang_infra.machine.keyrings import VendorKey

        args = {**args, "key": VendorKey(**args["key"])}
    if op in ("rolled", "driver_rolled"):
        from sglang_infra.plan.types import Gate

        args = {**args, "gate": Gate(**args["gate"])}
    if op == "model_pulled":
        from sglang_infra.hostside import names
        from sglang_infra.models.registry import Model
        from sglang_infra.plan.types import Paths, Pull

        pull = args["pull"]
        args = {**args, "pull": Pull(**{**pull, "token": pull["token"] and pull["token"].encode()}),
                "paths": Paths.of(args["paths"]["home"], args["paths"]["tools"], names.GATEWAY_DIR),
                "model": Model(**args["model"])}
    return args


def run(op: str, args: dict, facts: dict, executing: bool = False):
    fake = FakeHost(facts, executing=executing)
    try:
        with on_host(fake):
            commands = [command_text(c) for c in OPERATIONS[op]._inner(**_arguments(op, args))]
    finally:
        factcache.invalidate(fake)
    return commands, fake


@pytest.mark.parametrize("name,case", CASES, ids=[name for name, _ in CASES])
def test_operation_yields_the_recorded_commands(name, case):
    commands, fake = run(case["op"], case["args"], case["facts"], case.get("executing", False))
    assert commands == case["commands"]
    assert bool(fake.noops) == case["noop"]


def test_every_operation_has_a_noop_case():
    """Every operation the project defines, found in sglang_infra/operations/ itself, has a fixture in which it
    yields nothing and calls host.noop."""
    assert len(OPERATIONS) >= 21  # the search finds them: 21 when every operation got its no-op fixture
    ops_with_noop = {case["op"] for _, case in CASES if case["noop"] and not case["commands"]}
    assert sorted(set(OPERATIONS) - ops_with_noop) == [], "operations without a no-op fixture in fixtures/operations/"
    assert sorted(ops_with_noop - set(OPERATIONS)) == [], "no-op fixtures of operations that do not exist"


SECRET_DIR = "/var/lib/sglang-tools/secret"


def secret_facts(sha: str | None, owner="sglang", mode="600"):
    files = {} if sha is None else {"hf-token": {"owner": owner, "group": owner, "mode": mode, "sha256": sha}}
    return {"Snapshot": {"files": {SECRET_DIR: files}}}


def test_the_token_is_uploaded_private_and_only_when_it_differs():
    token = b"hf_secret_value_1234567890"
    sha = __import__("hashlib").sha256(token).hexdigest()
    fake = FakeHost(secret_facts(None))
    with on_host(fake):
        raw = list(files.secret_file._inner(dest=f"{SECRET_DIR}/hf-token", content=token, user="sglang"))
    factcache.invalidate(fake)
    assert [command_text(c) for c in raw] == [
        f"python3 -I -c <hostside/write/put.py> {SECRET_DIR}/hf-token sglang sglang 600 {len(token)} "
        f"<stdin sha256={sha}>"]
    assert raw[0].connector_arguments["_stdin"] == token.decode()
    commands, fake = run("secret_file", {"dest": f"{SECRET_DIR}/hf-token", "content": token, "user": "sglang"},
                         secret_facts(sha))
    assert commands == [] and fake.noops
    commands, _ = run("secret_file", {"dest": f"{SECRET_DIR}/hf-token", "content": token, "user": "sglang"},
                      secret_facts(sha, mode="644"))
    assert len(commands) == 1


def test_without_a_token_the_token_file_is_removed():
    commands, _ = run("secret_file", {"dest": f"{SECRET_DIR}/hf-token", "content": None, "user": "sglang"},
                      secret_facts("ab"))
    assert commands == [f"rm -f {SECRET_DIR}/hf-token"]
    commands, fake = run("secret_file", {"dest": f"{SECRET_DIR}/hf-token", "content": None, "user": "sglang"},
                         secret_facts(None))
    assert commands == [] and fake.noops


def test_image_archive_is_uploaded_and_loaded_once(tmp_path):
    archive = tmp_path / "standin.tar.gz"
    archive.write_bytes(b"not really an image")
    missing = {"Snapshot": {"docker": {"images": {}}}}
    commands, _ = run("image_present", {"image": "sglang-standin:abc", "archive": str(archive)}, missing)
    remote = commands[0].split()[-1]
    assert re.fullmatch(r"/var/tmp/sglang-image-[0-9a-f]{32}\.tar", remote)
    assert commands[0] == f"upload {archive} {remote}"
    # issue 52 item 8: a name no one can guess ahead (not the archive's digest, new on every run), nor pyinfra's
    # temporary name under a sudo login
    again = run("image_present", {"image": "sglang-standin:abc", "archive": str(archive)}, missing)[0][0].split()[-1]
    assert again != remote and __import__("hashlib").sha256(archive.read_bytes()).hexdigest()[:16] not in remote
    fake = FakeHost(missing)
    with on_host(fake):
        uploads = [next(OPERATIONS["image_present"]._inner(image="sglang-standin:abc", archive=str(archive)))
                   for _ in range(2)]
    factcache.invalidate(fake)
    assert uploads[0].remote_temp_filename != uploads[1].remote_temp_filename
    assert commands[1].startswith(f"docker load -i {remote} >/dev/null; loaded=$?; rm -f {remote}")
    assert "does not contain sglang-standin:abc" in commands[1]
    present = {"Snapshot": {"docker": {"images": {"sglang-standin:abc": {"id": "sha256:1", "labels": {}}}}}}
    assert run("image_present", {"image": "sglang-standin:abc", "archive": str(archive)}, present)[0] == []


def test_env_file_refuses_to_guess_ids_when_the_account_is_missing_at_execution():
    name, case = next(c for c in CASES if c[0] == "account_env_file.planning_before_the_account_exists")
    with pytest.raises(OperationError, match="does not exist"):
        run(case["op"], case["args"], case["facts"], executing=True)


def test_checked_file_refuses_to_replace_a_directory():
    with pytest.raises(OperationError, match="not a regular file"):
        run("checked_file", {"dest": "/opt/sglang/docker/compose.yaml", "content": "x", "user": "sglang",
                             "group": "sglang"},
            {"Snapshot": {"files": {"/opt/sglang/docker": {"compose.yaml": False}}}})


def test_layout_batches_repairs_by_size_within_the_kernels_limit_on_one_argument():
    """pyinfra runs a command as one `sh -c` argument; Linux refuses one longer than 128 KiB (MAX_ARG_STRLEN).
    Long paths (near PATH_MAX each) must be batched by their size, not by their count."""
    import shlex

    deep = "/opt/sglang/hf-cache/hub/models--a--b/" + "/".join(["d" * 250] * 15)
    paths = [f"{deep}/it's-{i}" for i in range(300)]
    short = [f"/opt/sglang/hf-cache/hub/f{i}" for i in range(450)]
    commands, _ = run("layout", {"home": "/opt/sglang", "dirs": {}, "user": "sglang", "group": "sglang"},
                      {"Snapshot": {"layout": {"dirs": {}, "drift": {"cache_file_mode": paths,
                                                                     "cache_group": short}}}})
    program = shlex.quote(__import__("sglang_infra.machine.ship", fromlist=["packed"]).packed("write.repair"))
    sent = [c.replace("<hostside/write/repair.py>", program) for c in commands]
    assert all(len(shlex.quote(c).encode()) < 128 * 1024 for c in sent), [len(c) for c in sent]
    listed = [w for c in sent for w in shlex.split(c)[8:]]   # python3 -I -c PROGRAM CATEGORY HOME USER GROUP
    assert sorted(listed) == sorted(paths + short)
    assert len([c for c in commands if " cache_group " in c]) == 1   # short paths still travel together


def test_a_host_that_stops_answering_fails_alone():
    """pyinfra gives None for a fact it could not read; the operation then yields one failing command for that
    host instead of raising, which would crash the run for every host."""
    commands, _ = run("layout", {"home": "/opt/sglang", "dirs": {}, "user": "sglang", "group": "sglang"},
                      {"Snapshot": None})
    assert commands == ["function _failed('could not read the host unit-test-host (see the error above)',)"]
    logged = []
    host = mock.Mock(log_styled=lambda message, **kwargs: logged.append(message))
    assert base._failed(None, host, "gone") is False and logged == ["gone"]


def test_sizes_read_in_human_units_everywhere():
    from sglang_infra.hostside.formats.units import human
    from sglang_infra.hostside.pull import prune, pull

    assert (human(0), human(1536), human(15_728_722), human(3 * 2**40)) == ("0 B", "1.5 KiB", "15.0 MiB", "3.0 TiB")
    assert pull.human is human and prune.human is human  # the pull and the prune print with the same formatter


def test_the_prune_preview_says_a_small_revision_is_small():
    name, case = next(c for c in CASES if c[0] == "models_pruned.unkept_revisions")
    logged = []
    with mock.patch.object(base.logger, "info", logged.append):
        run(case["op"], case["args"], case["facts"])
    assert logged and all("(0.00 GiB)" not in line and "B)" in line for line in logged), logged


def test_diff_shows_the_file_diff_and_each_drifted_path(monkeypatch):
    """Under --diff, as pyinfra's files operations do: what differs, not only that something does."""
    logged = []
    fake = FakeHost({"Snapshot": {"files": {"/opt/sglang/docker": {"compose.yaml": {
        "owner": "sglang", "group": "sglang", "mode": "644", "sha256": "0"}}},
        "layout": {"dirs": {"/opt/sglang/hf-cache/hub": {"owner": "sglang", "group": "sglang", "mode": "775"}},
                   "drift": {"cache_file_mode": ["/opt/sglang/hf-cache/hub/a"]},
                   "details": {"/opt/sglang/hf-cache/hub/a": ["alice", "sglang", "644"]}}},
        "FileContents": ["services:", "  old: 1"]})
    fake.state.config = SimpleNamespace(DIFF=True)
    fake.log = lambda message, log_func=None: logged.append(message)
    monkeypatch.setattr(base.logger, "info", lambda fmt, *args: logged.append(fmt % args if args else fmt))
    with on_host(fake):
        list(files.checked_file._inner(dest="/opt/sglang/docker/compose.yaml", content="services:\n  new: 2\n",
                                       user="sglang", group="sglang"))
        list(account.layout._inner(home="/opt/sglang", dirs={"/opt/sglang/hf-cache/hub": "2775"},
                                   user="sglang", group="sglang"))
    factcache.invalidate(fake)
    text = "\n".join(logged)
    assert "Will modify /opt/sglang/docker/compose.yaml" in text and "old: 1" in text and "new: 2" in text
    assert "Will fix /opt/sglang/hf-cache/hub: sglang:sglang 775 -> sglang:sglang 2775" in text
    assert "Will fix '/opt/sglang/hf-cache/hub/a': alice:sglang 644 -> group read and write" in text


def test_a_changed_private_config_recreates_the_stack():
    """compose cannot see the API key file's content: when it changed, the stack is recreated."""
    name, case = next(c for c in CASES if c[0] == "validated.noop_with_the_stack")
    fake = FakeHost(case["facts"], executing=True)
    with on_host(fake):
        commands = [command_text(c) for c in gate.validated._inner(**case["args"], recreate_if=lambda: True)]
        unchanged = [command_text(c) for c in gate.validated._inner(**case["args"], recreate_if=lambda: False)]
    factcache.invalidate(fake)
    up = (f"cd /opt/sglang/docker && {stack_ops.leftovers_removed('sglang', 'sglang')} && docker compose -f "
          "compose.yaml up -d --remove-orphans --force-recreate && python3 -I -c <hostside/stack.py> "
          "/opt/sglang/docker")
    assert commands == [f"function run_gate('bash /opt/sglang/gate.sh --config-sha c1', {up!r})"]
    assert unchanged == []


def test_layout_names_hard_linked_files_and_repairs_none_of_them(caplog):
    linked = ["/opt/sglang/hf-cache/hub/a", "/opt/sglang/hf-cache/hub/b\nc"]
    with caplog.at_level("WARNING"):
        commands, fake = run("layout", {"home": "/opt/sglang", "dirs": {}, "user": "sglang", "group": "sglang"},
                             {"Snapshot": {"layout": {"dirs": {}, "drift": {}, "linked": linked,
                                                      "linked_more": 3}}})
    assert commands == [] and fake.noops
    [line] = [r.getMessage() for r in caplog.records if "hard link" in r.getMessage()]
    assert "/opt/sglang/hf-cache/hub/a, /opt/sglang/hf-cache/hub/b\\x0ac and 3 more" in line and "\n" not in line
