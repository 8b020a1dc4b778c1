"""The snapshot: the one read of a host (hostside/read/snapshot.py), run for real
on temp trees the way the deploy ships it (python3 -c, one JSON document)."""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_infra.hostside.read import snapshot as hostsnapshot
from sglang_infra.machine import ship
from sglang_infra.machine.platforms import engine_works
from sglang_infra.run.facts import Snapshot


def _ids():
    return pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name


def read(home, tools=None, user=None, **spec) -> dict:
    user = user or _ids()[0]
    spec = {"user": user, "home": str(home), "tools_dir": str(tools or home.parent / "tools"), "admins": [],
            "groups": [], "uid": None, "gid": None, "dirs": [], **spec}
    command = Snapshot().command(spec=json.dumps(spec))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, input="")
    if ship.missed(out.stdout.splitlines()):   # as factcache.read: the sources on stdin once root's cache lacks them
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60,
                             input=ship.cached_sources("read.snapshot"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1
    return Snapshot().process(out.stdout.splitlines())


@pytest.fixture
def tree(tmp_path):
    """A small home laid out as the deploy leaves it, owned by whoever runs the tests."""
    home = tmp_path / "home"
    hub = home / "hf-cache" / "hub"
    (hub / "models--a--b" / "blobs").mkdir(parents=True)
    (home / "docker").mkdir()
    home.chmod(0o750)
    for d in (home / "hf-cache", hub, hub / "models--a--b", hub / "models--a--b" / "blobs"):
        d.chmod(0o2775)
    blob = hub / "models--a--b" / "blobs" / "abc"
    blob.write_text("x")
    blob.chmod(0o664)
    compose = home / "docker" / "compose.yaml"
    compose.write_text("x")
    compose.chmod(0o644)
    return home


def _dirs(tree):
    return [str(tree), str(tree / "docker"), str(tree / "hf-cache"), str(tree / "hf-cache" / "hub")]


def test_layout_reads_the_managed_directories_and_no_drift(tree):
    user, group = _ids()
    found = read(tree, dirs=_dirs(tree))["layout"]
    assert found["drift"] == {}
    assert found["dirs"][str(tree / "hf-cache" / "hub")] == {"owner": user, "group": group, "mode": "2775"}
    assert set(found["dirs"]) == set(_dirs(tree))


def test_layout_finds_each_kind_of_drift(tree):
    hub = tree / "hf-cache" / "hub"
    (hub / "models--a--b" / "blobs" / "abc").chmod(0o644)
    (hub / "models--a--b").chmod(0o775)
    (tree / "notes.txt").write_text("x")
    (tree / "notes.txt").chmod(0o666)
    (tree / "docker" / "compose.yaml").chmod(0o664)
    assert read(tree, dirs=_dirs(tree))["layout"]["drift"] == {
        "cache_file_mode": [str(hub / "models--a--b" / "blobs" / "abc")],
        "cache_dir_mode": [str(hub / "models--a--b")],
        "world_writable": [str(tree / "notes.txt")],
        "docker_group_writable": [str(tree / "docker" / "compose.yaml")],
    }


def test_a_file_name_with_a_newline_stays_one_path(tree):
    """A name planted in the group-writable cache cannot split into a second, chosen path."""
    planted = tree / "hf-cache" / "hub" / "x\ncache_group=" / "etc" / "passwd"
    planted.parent.mkdir(parents=True)
    for d in (planted.parent, planted.parent.parent):
        d.chmod(0o2775)
    planted.write_text("x")
    planted.chmod(0o644)
    drift = read(tree, dirs=_dirs(tree))["layout"]["drift"]
    assert drift == {"cache_file_mode": [str(planted)]}


def test_layout_is_empty_before_the_home_exists(tmp_path):
    found = read(tmp_path / "missing", dirs=[str(tmp_path / "missing")])["layout"]
    assert found == {"dirs": {}, "drift": {}, "details": {}, "unnamed": 0}


def test_layout_ignores_symlinks_for_modes(tree):
    snapshot = tree / "hf-cache" / "hub" / "models--a--b" / "snapshots"
    snapshot.mkdir()
    snapshot.chmod(0o2775)
    (snapshot / "link").symlink_to("../blobs/abc")
    assert read(tree, dirs=_dirs(tree))["layout"]["drift"] == {}


def test_files_reads_owner_mode_and_hash_and_never_follows_a_link(tmp_path):
    home = tmp_path / "home"
    docker = home / "docker"
    docker.mkdir(parents=True)
    (docker / "compose.yaml").write_text("hello\n")
    (docker / "compose.yaml").chmod(0o640)
    (docker / ".env").write_text("")
    (docker / ".env").chmod(0o644)
    (docker / "sub").mkdir()
    (docker / "link").symlink_to("compose.yaml")
    user, group = _ids()
    assert read(home)["files"][str(docker)] == {
        "compose.yaml": {"owner": user, "group": group, "mode": "640",
                         "sha256": "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"},
        ".env": {"owner": user, "group": group, "mode": "644",
                 "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        "sub": False,
        "link": False,
    }


def test_files_of_missing_directories_are_empty(tmp_path):
    found = read(tmp_path / "nope")["files"]
    assert found and all(entries == {} for entries in found.values())


def test_the_gate_stamp_is_read_and_the_digest_is_of_the_files_as_they_are(tree):
    (tree / "docker" / ".validated").write_text("abc123\n")
    first = read(tree)["gate"]
    assert first["stamp"] == "abc123"
    (tree / "docker" / "compose.yaml").write_text("changed")
    assert read(tree)["gate"]["digest"] != first["digest"]


def _hand_pulled_snapshot(hub, commit="a" * 40):
    repo = hub / "models--org--model"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "b1").write_bytes(b"{}")
    (repo / "snapshots" / commit).mkdir(parents=True)
    os.symlink("../../blobs/b1", repo / "snapshots" / commit / "config.json")
    return repo


def test_models_reads_the_cache_and_the_compose_references(tmp_path):
    home = tmp_path / "home"
    _hand_pulled_snapshot(home / "hf-cache" / "hub")
    docker = home / "docker"
    docker.mkdir()
    (docker / "compose.yaml").write_text('    labels:\n      sglang.model: "org/model@' + "a" * 40 + '"\n')
    (docker / "compose.yaml.good").write_text('      sglang.model: "org/model@' + "b" * 40 + '"\n')
    found = read(home)["models"]
    revision = found["repos"]["org/model"]["revisions"]["a" * 40]
    assert revision["complete"] is False and revision["files"] == 1
    assert found["referenced"] == ["org/model@" + "a" * 40, "org/model@" + "b" * 40]


def test_models_of_a_host_without_a_cache(tmp_path):
    assert read(tmp_path / "none")["models"] == {"repos": {}, "referenced": [], "stopped_early": None}


def test_tools_reads_the_venv_release_without_starting_it(tmp_path):
    tools = tmp_path / "tools"
    site = tools / "venv" / "lib" / "python3.13" / "site-packages"
    (site / "huggingface_hub-2.4.0.dist-info").mkdir(parents=True)
    (tools / "venv" / "bin").mkdir()
    (tools / "venv" / "bin" / "python").write_text("#!/bin/sh\n")
    os.chmod(tools / "venv" / "bin" / "python", 0o755)
    found = read(tmp_path / "home", tools=tools)["tools"]
    assert found["venv_python"] and found["hub_versions"] == ["2.4.0"] and found["secret"] is None
    assert found["tools"]["mode"] == oct(os.stat(tools).st_mode & 0o777)[2:]
    assert read(tmp_path / "home", tools=tmp_path / "none")["tools"]["hub_versions"] == []


def test_account_is_read_without_the_password_hash(tmp_path):
    user, group = _ids()
    found = read(tmp_path, user=user)["account"]
    assert found["user"]["name"] == user and group in found["supplementary"]
    assert found["password_locked"] in (True, False, None)
    assert "$" not in json.dumps(found)


def test_a_host_without_python3_still_says_what_it_is(tmp_path):
    command = Snapshot().command(spec="{}")
    # A PATH with only a shell on it: no python3 to be found.
    (tmp_path / "sh").symlink_to("/bin/sh")
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env={"PATH": str(tmp_path)})
    found = Snapshot().process(out.stdout.splitlines())
    assert found["python3"] is None and "id" in found["os"]


WORKING = {"cli": "/usr/bin/docker", "api": True, "active": "active", "loaded": True,
           "compose_plugin": "/usr/libexec/docker/cli-plugins/docker-compose"}


@pytest.mark.parametrize("broken", [
    {"compose_plugin": None},               # engine without compose v2 (v1 was never a plugin)
    {"cli": None},                          # no client
    {"api": False, "loaded": False},        # no engine answers and systemd has none to start (or it is masked)
])
def test_engine_works_needs_every_part(broken):
    assert engine_works(WORKING)
    assert not engine_works({**WORKING, **broken})


@pytest.mark.parametrize("state", [
    {"api": False, "active": "inactive"},   # docker.service stopped: the deploy starts it
    {"api": True, "active": "inactive"},    # socket-activated: the snapshot's own query started it after the read
    {"api": False, "active": "failed"},     # failed once: started again, not refused
    {"api": True, "loaded": False},         # an engine that answers without a unit (dockerd run by hand)
])
def test_an_engine_that_can_be_started_works_whatever_it_does_now(state):
    assert engine_works({**WORKING, **state})


def fake_docker_host(tmp_path, monkeypatch, plugin_in=None, daemon_json=None):
    """docker() against a fake root: a CLI on PATH, no socket, the compose plugin in ``plugin_in``."""
    bin_dir, home = tmp_path / "bin", tmp_path / "home"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\n")
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(hostsnapshot.pwd, "getpwuid", lambda uid: type("pw", (), {"pw_dir": str(home)})())
    system = tmp_path / "system-plugins"
    monkeypatch.setattr(hostsnapshot, "COMPOSE_PLUGIN_DIRS", (str(system),))
    monkeypatch.setattr(hostsnapshot.dockerapi, "SOCKET", str(tmp_path / "no-socket"))
    monkeypatch.setattr(hostsnapshot, "DAEMON_JSON", str(tmp_path / "daemon.json"))
    if daemon_json is not None:
        (tmp_path / "daemon.json").write_text(daemon_json)
    if plugin_in is not None:
        folder = {"root": home / ".docker" / "cli-plugins", "system": system}[plugin_in]
        folder.mkdir(parents=True)
        (folder / "docker-compose").write_text("#!/bin/sh\n")
        (folder / "docker-compose").chmod(0o755)
    return home


@pytest.mark.parametrize("plugin_in", ["root", "system"])
def test_the_compose_plugin_is_found_where_the_cli_finds_it_roots_own_folder_included(tmp_path, monkeypatch,
                                                                                       plugin_in):
    fake_docker_host(tmp_path, monkeypatch, plugin_in)
    found = hostsnapshot.docker({"loaded": True, "active": "inactive", "enabled": "enabled"})
    assert found["compose_plugin"] and found["compose_plugin"].endswith("/docker-compose")
    assert found["loaded"] is True and found["api"] is False and engine_works(found)


def test_no_compose_plugin_anywhere_is_no_working_engine(tmp_path, monkeypatch):
    fake_docker_host(tmp_path, monkeypatch)
    found = hostsnapshot.docker({"loaded": True, "active": "active", "enabled": "enabled"})
    assert found["compose_plugin"] is None and not engine_works(found)


@pytest.mark.parametrize("daemon_json,runtimes", [
    ('{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}', ["nvidia"]),
    ('{"runtimes": {"nvidia": ', []),      # torn: nothing claimed
    ('["nvidia"]', []),                    # not the engine's shape
    (None, []),                            # no file
])
def test_a_stopped_engine_reports_the_runtimes_its_daemon_json_names(tmp_path, monkeypatch, daemon_json, runtimes):
    fake_docker_host(tmp_path, monkeypatch, "system", daemon_json)
    assert hostsnapshot.docker({"loaded": True, "active": "inactive"})["runtimes"] == runtimes


def test_the_loader_bundles_a_program_with_the_neighbours_it_imports():
    source = ship.program("read.snapshot")
    for neighbour in ("read/cachestate", "write/acl", "pull/manifest", "safefs", "dockerapi", "stack", "gate/stamp"):
        assert f"'hostside/{neighbour}.py'" in source
    assert ship.program("toolchain_check") == (ship.HOSTSIDE / "toolchain_check.py").read_text()
    out = subprocess.run([sys.executable, "-c", ship.program("checks"), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "tool-calling" in out.stdout


# ---------------------------------------------------------------- the repair, run for real on temp trees
def repair(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ship.program("write.repair"), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_repair_fixes_a_newline_name_and_nothing_it_points_to(tree, tmp_path):
    user, group = _ids()
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0\n")
    victim.chmod(0o644)
    planted = tree / "hf-cache" / "hub" / "x\ncache_group=" / "etc" / "passwd"
    planted.parent.mkdir(parents=True)
    planted.write_text("x")
    planted.chmod(0o644)
    link = tree / "hf-cache" / "hub" / "link"
    link.symlink_to(victim)
    assert repair("cache_file_mode", tree, user, group, planted, link).returncode == 0
    assert oct(planted.stat().st_mode & 0o777) == "0o664"
    assert oct(victim.stat().st_mode & 0o777) == "0o644"


def test_repair_never_walks_through_a_directory_swapped_for_a_symlink(tree, tmp_path):
    """Between the snapshot and the repair, a group member replaces a directory with a link to /etc."""
    user, group = _ids()
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "shadow").write_text("secret\n")
    (outside / "shadow").chmod(0o600)
    swapped = tree / "hf-cache" / "hub" / "models--a--b" / "blobs"
    (swapped / "abc").unlink()
    swapped.rmdir()
    swapped.symlink_to(outside)
    result = repair("cache_file_mode", tree, user, group, swapped / "shadow")
    assert result.returncode == 0 and "skipped" in result.stderr
    assert oct((outside / "shadow").stat().st_mode & 0o777) == "0o600"


def test_the_repair_walks_with_safefs_and_names_the_link_it_refused(tree, tmp_path):
    """The repair's walk below the home is safefs.open_below, the one walk that never follows a link: a directory
    swapped for a link is skipped and named as one."""
    user, group = _ids()
    swapped = tree / "hf-cache" / "hub" / "models--a--b" / "blobs"
    (swapped / "abc").unlink()
    swapped.rmdir()
    swapped.symlink_to(tmp_path)
    result = repair("cache_file_mode", tree, user, group, swapped / "abc")
    assert result.returncode == 0
    assert f"skipped {str(swapped / 'abc')!r}: {swapped} is a symlink; refusing to follow it" in result.stderr
    assert "safefs" in ship.carried("write.repair")


def test_a_managed_directory_replaced_by_a_symlink_is_refused_not_followed(tree, tmp_path):
    user, group = _ids()
    outside = tmp_path / "etc"
    outside.mkdir()
    outside.chmod(0o755)
    hub = tree / "hf-cache" / "hub"
    import shutil

    shutil.rmtree(hub)
    hub.symlink_to(outside)
    result = repair("dir=2775", tree, user, group, hub)
    assert result.returncode == 1 and f"{hub} is not a directory" in result.stderr
    assert oct(outside.stat().st_mode & 0o7777) == "0o755"


def test_managed_directories_are_made_with_their_mode(tmp_path):
    user, group = _ids()
    home = tmp_path / "home"
    assert repair("dir=750", home, user, group, home).returncode == 0
    assert repair("dir=2775", home, user, group, home / "results").returncode == 0
    assert oct((home / "results").stat().st_mode & 0o7777) == "0o2775"
    assert oct(home.stat().st_mode & 0o7777) == "0o750"


def test_drifted_entries_carry_their_owner_and_mode_for_diff(tree):
    user, group = _ids()
    blob = tree / "hf-cache" / "hub" / "models--a--b" / "blobs" / "abc"
    blob.chmod(0o640)
    found = read(tree, dirs=_dirs(tree))["layout"]
    assert found["details"] == {str(blob): [user, group, "640"]}


def test_a_name_that_is_not_utf8_is_counted_not_sent(tree):
    """Such a name could not travel in a command; one planted by a group member must not crash the run."""
    import os as _os

    hub = str(tree / "hf-cache" / "hub").encode()
    bad = hub + b"/bad-\xff-name"
    with open(bad, "wb") as handle:
        handle.write(b"x")
    _os.chmod(bad, 0o644)
    found = read(tree, dirs=_dirs(tree))["layout"]
    assert found["unnamed"] == 1 and found["drift"] == {}


def test_an_existing_tools_dir_is_reported_with_its_entries_bounded(tmp_path):
    from sglang_infra.hostside import names

    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "root").write_text("* * * * * true\n")
    (tools / "venv").mkdir()
    found = read(tmp_path / "home", tools)["existing"]["tools"]
    assert (found["empty"], found["entries"], found["more"]) == (False, ["root", "venv"], False)
    for n in range(names.EXISTING_ENTRIES_SHOWN):
        (tools / f"f{n}").write_text("")
    found = read(tmp_path / "home", tools)["existing"]["tools"]
    assert len(found["entries"]) == names.EXISTING_ENTRIES_SHOWN and found["more"] is True


def test_the_layout_walk_is_bounded_and_the_deploy_says_so(tree, monkeypatch):
    from sglang_infra.hostside.read import snapshot as hostsnapshot
    from sglang_infra.run.preflight import walk_warnings

    monkeypatch.setattr(hostsnapshot, "LAYOUT_ENTRIES", 3)
    spec = {"home": str(tree), "user": pwd.getpwuid(os.geteuid()).pw_name, "dirs": []}
    found = hostsnapshot.layout(spec)
    assert "stopped early: more than 3 entries" in found["stopped_early"]
    lines = walk_warnings("h1", {"layout": found, "models": {"stopped_early": "the scan of x stopped early: y"}})
    assert lines == [f"[h1] {found['stopped_early']}", "[h1] the scan of x stopped early: y"]


def test_a_hard_linked_file_is_listed_apart_not_as_drift(tree, tmp_path):
    """A file with a second name is never the deploy's: its repair would change the other name's file too."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("someone else's\n")
    elsewhere.chmod(0o600)
    planted = tree / "hf-cache" / "hub" / "models--a--b" / "blobs" / "planted"
    os.link(elsewhere, planted)
    (tree / "hf-cache" / "hub" / "models--a--b" / "blobs" / "abc").chmod(0o644)  # a plain drift beside it
    found = read(tree, dirs=_dirs(tree))["layout"]
    assert found["drift"] == {"cache_file_mode": [str(tree / "hf-cache" / "hub" / "models--a--b" / "blobs" / "abc")]}
    assert found["linked"] == [str(planted)] and found["linked_more"] == 0
    os.chmod(planted, 0o664)  # one that conforms changes nothing, and is not named
    assert read(tree, dirs=_dirs(tree))["layout"]["linked"] == []


def test_repair_leaves_a_file_with_two_links_and_names_it(tree, tmp_path):
    """Linked in after the snapshot: the repair itself refuses, for the mode and for the owner alike."""
    user, group = _ids()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("someone else's\n")
    elsewhere.chmod(0o600)
    planted = tree / "hf-cache" / "hub" / "models--a--b" / "blobs" / "planted"
    os.link(elsewhere, planted)
    for fix in ("cache_file_mode", "cache_group", "world_writable"):
        result = repair(fix, tree, user, group, planted)
        assert result.returncode == 0, result.stderr
        assert f"repair {fix}: skipped {str(planted)!r}: it has 2 hard links" in result.stderr
    assert oct(elsewhere.stat().st_mode & 0o777) == "0o600"
    # A file with one name is repaired as before.
    os.unlink(elsewhere)
    result = repair("cache_file_mode", tree, user, group, planted)
    assert result.returncode == 0 and result.stderr == ""
    assert oct(planted.stat().st_mode & 0o777) == "0o660"


def test_the_kernels_hard_link_protection_is_read(tmp_path):
    from sglang_infra.hostside.read import snapshot as hostsnapshot

    setting = tmp_path / "protected_hardlinks"
    setting.write_text("0\n")
    assert hostsnapshot.kernel(str(setting)) == {"protected_hardlinks": "0"}
    assert hostsnapshot.kernel(str(tmp_path / "absent")) == {"protected_hardlinks": None}
    assert read(tmp_path / "home")["kernel"]["protected_hardlinks"] in ("0", "1", "2")  # this machine's, as read


def test_a_gateway_hosts_layout_reads_router_secrets_as_the_plan_names_it():
    """router/.secrets/ (0700, the control-plane key) is in the plan's layout: the snapshot reads its mode, or every
    re-run would 'repair' it again."""
    from sglang_infra.hostside.read import snapshot as hostside_snapshot

    dirs = hostside_snapshot.layout_dirs({"dirs": ["/h/docker"]}, "/h", {"m": "/h/router/m"})
    assert dirs == ["/h/docker", "/h/router", "/h/router/.secrets", "/h/router/m"]
    assert hostside_snapshot.layout_dirs({"dirs": ["/h/docker"]}, "/h", {}) == ["/h/docker"]


def test_systemd_is_asked_once_for_the_engine_and_the_units(tree, tmp_path, monkeypatch):
    """One systemctl call answers for docker.service and the spec's units: each call is a process on the host and
    a D-Bus question to PID 1, on every read of every host (docs/benchmarks.md)."""
    fake = tmp_path / "bin" / "systemctl"
    fake.parent.mkdir()
    calls = tmp_path / "calls"
    answer = ("Id=docker.service\\nLoadState=loaded\\nActiveState=active\\nUnitFileState=enabled\\n"
              "NeedDaemonReload=no\\n\\nId=nginx.service\\nLoadState=loaded\\nActiveState=failed\\n"
              "UnitFileState=disabled\\nNeedDaemonReload=yes\\n")
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nprintf "{answer}"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    found = read(tree, services=["nginx.service"])
    assert calls.read_text().count("\n") == 1
    assert (found["docker"]["active"], found["docker"]["enabled"]) == ("active", "enabled")
    assert found["services"] == {"nginx.service": {"loaded": True, "active": "failed", "enabled": "disabled",
                                                   "reload_needed": True}}


def on_a_host(code: str) -> list:
    """What ``code`` prints (a JSON value), run as the hosts run the snapshot: a fresh python3, not this process,
    whose threading, select and os.waitpid pyinfra's command line has patched with gevent (tests/unit/conftest.py)."""
    root = str(Path(hostsnapshot.__file__).resolve().parents[3])
    preamble = "import json\nfrom sglang_infra.hostside.read import snapshot\n"
    out = subprocess.run([sys.executable, "-c", preamble + code],
                         capture_output=True, text=True, timeout=60, cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_program_the_read_starts_gives_its_stdout_as_text_and_nothing_else():
    """snapshot._run starts its programs with os.posix_spawnp (not the subprocess module: its imports were a tenth
    of a read's own CPU): stdout whatever the exit status, newlines made "\\n" as text=True makes them, stderr
    dropped; "" for a program not found."""
    found = on_a_host("""import subprocess
argv = [("sh", "-c", "printf 'a\\r\\nb\\rc\\n'; echo err >&2; exit 3"), ("no-such-program-anywhere",),
        ("sh", "-c", "printf 'caf\\303\\251'")]
print(json.dumps([snapshot._run(*argv[0]), snapshot._run(*argv[1]), snapshot._run(*argv[2]),
                  subprocess.run(argv[2], capture_output=True, text=True).stdout]))""")
    assert found[:2] == ["a\nb\nc\n", ""]
    assert found[2] == found[3]   # decoded as subprocess.run(text=True) decodes, in this locale


def test_a_program_the_read_starts_is_bounded_in_time_and_output():
    found = on_a_host("""import time
snapshot.COMMAND_TIMEOUT = 0.5
began = time.monotonic()
out = [snapshot._run("sh", "-c", "echo partial; exec sleep 30"),
       snapshot._run("sh", "-c", "exec 1>&-; exec sleep 30")]    # closed its stdout, still runs
out.append(time.monotonic() - began < 5)
snapshot.COMMAND_TIMEOUT, snapshot.MAX_OUTPUT = 30, 1000
out += [snapshot._run("sh", "-c", "head -c 5000 /dev/zero"), snapshot._run("sh", "-c", "head -c 900 /dev/zero")]
print(json.dumps(out))""")
    assert found == ["", "", True, "", "\0" * 900]


DPKG_STATUS = """\
Package: nginx
Status: install ok installed
Architecture: amd64
Version: 1.26.3-3
Description: small, powerful, scalable web/proxy server
 Version: 9.9 (a continuation line, not the field)

Package: nginx-common
Status: install ok installed
Version: 1.26.3-3

Package: prometheus
Status: deinstall ok config-files
Version: 2.53.3+ds1-2

Package: openssl
Status: hold ok installed
Version: 3.5.9-1

Package: libfoo
Status: install ok installed
Architecture: amd64
Version: 1:2.0-1

Package: libfoo
Status: install ok half-configured
Architecture: i386
Version: 1:2.0-1
"""


@pytest.fixture
def dpkg(tmp_path):
    admindir = tmp_path / "dpkg"
    (admindir / "updates").mkdir(parents=True)
    (admindir / "status").write_text(DPKG_STATUS)
    return admindir


def test_installed_packages_are_read_from_dpkgs_status_as_dpkg_query_reads_them(dpkg):
    """ii only (wanted install, installed): not a held package (hi), not one left as config files (rc) or half
    configured; a name is the whole name (nginx, not nginx-common); a continuation line is not a field."""
    from sglang_infra.hostside.read import snapshot as hostside_snapshot

    wanted = ["nginx", "prometheus", "openssl", "libfoo", "absent"]
    assert hostside_snapshot.dpkg_status(wanted, str(dpkg)) == {
        "nginx": "1.26.3-3", "prometheus": None, "openssl": None, "libfoo": "1:2.0-1", "absent": None}


def test_dpkg_query_answers_when_the_status_file_may_not_be_the_whole_truth(dpkg, monkeypatch):
    from sglang_infra.hostside.read import snapshot as hostside_snapshot

    (dpkg / "updates" / "tmp.i").write_text("")   # dpkg's scratch file: not a journal entry
    assert hostside_snapshot.dpkg_status(["nginx"], str(dpkg)) == {"nginx": "1.26.3-3"}
    (dpkg / "updates" / "0001").write_text("Package: nginx\nStatus: install ok half-installed\n")
    assert hostside_snapshot.dpkg_status(["nginx"], str(dpkg)) is None   # a run cut short: its journal
    (dpkg / "updates" / "0001").unlink()
    monkeypatch.setattr(hostside_snapshot, "DPKG_STATUS_LIMIT", 100)
    assert hostside_snapshot.dpkg_status(["nginx"], str(dpkg)) is None
    monkeypatch.setattr(hostside_snapshot, "DPKG_STATUS_LIMIT", 1 << 20)
    monkeypatch.setenv("DPKG_ADMINDIR", str(dpkg))
    assert hostside_snapshot.dpkg_status(["nginx"], str(dpkg)) is None
    monkeypatch.delenv("DPKG_ADMINDIR")
    assert hostside_snapshot.dpkg_status(["nginx"], str(dpkg / "absent")) is None


def test_packages_come_from_the_status_file_and_dpkg_query_only_without_it(dpkg, monkeypatch):
    from sglang_infra.hostside.read import snapshot as hostside_snapshot

    monkeypatch.setattr(hostside_snapshot.safefs, "which", lambda name: "/usr/bin/dpkg-query")
    started = []
    monkeypatch.setattr(hostside_snapshot, "_run", lambda *argv: started.append(argv) or "nginx\tii \t1.0\n")
    monkeypatch.setattr(hostside_snapshot, "DPKG_ADMINDIR", str(dpkg))
    assert hostside_snapshot.packages(["nginx"]) == {"nginx": "1.26.3-3"}
    assert started == []
    (dpkg / "updates" / "0001").write_text("")
    assert hostside_snapshot.packages(["nginx"]) == {"nginx": "1.0"}
    assert started[0][0] == "dpkg-query"


def test_named_finds_what_glob_finds(tmp_path):
    """snapshot._named(d, prefix, suffix) stands in for glob.glob(d/prefix*suffix) (glob is not imported on a read):
    the same paths for files, folders, links (broken ones too), names that only begin or only end so, a name that is
    the prefix and suffix overlapping, a folder whose own name holds glob's magic characters, and no folder."""
    import glob

    top = tmp_path / "a[b]*?"
    top.mkdir()
    for name in ("compose.yaml", "compose.yaml.bak", "compose.yamlx", "xcompose.yaml", ".compose.yaml",
                 "huggingface_hub-0.1.dist-info", "huggingface_hub-.dist-info", "huggingface_hub-1.dist-infox",
                 "huggingface_hub-dist-info"):
        (top / name).write_text("")
    (top / "compose.yaml.d").mkdir()
    (top / "compose.yaml.link").symlink_to(top / "nowhere")
    for prefix, suffix in (("compose.yaml", ""), ("huggingface_hub-", ".dist-info"), ("python3", "")):
        expected = glob.glob(str(top).replace("[", "[[]").replace("*", "[*]").replace("?", "[?]") + "/"
                             + prefix + "*" + suffix)
        assert sorted(hostsnapshot._named(str(top), prefix, suffix)) == sorted(expected), (prefix, suffix)
    assert hostsnapshot._named(str(top / "absent"), "compose.yaml") == []
    assert hostsnapshot._named(str(top / "compose.yaml"), "x") == []   # a file, not a folder


def test_nvidia_smis_three_readings_run_at_once(tmp_path):
    """gpus() starts nvidia-smi's query, its XML and its topology together (each initialises the driver's library
    on its own: 0.17 s one after the other, 0.11 s together on an H100 host), and each output lands in its place."""
    fake = tmp_path / "bin"
    fake.mkdir()
    starts = tmp_path / "starts"
    (fake / "nvidia-smi").write_text(f"""#!/bin/sh
date +%s.%N >> {starts}
sleep 1
case "$1" in
  --query-gpu=*) echo "0, NVIDIA H100 80GB HBM3, 9.0, 81559" ;;
  -q) echo "<nvidia_smi_log><driver_version>580.159.04</driver_version>"
      echo "<cuda_version>13.0</cuda_version></nvidia_smi_log>" ;;
  topo) printf '\\tGPU0\\nGPU0\\t X \\n' ;;
esac
""")
    (fake / "nvidia-smi").chmod(0o755)
    found = on_a_host(f"""import os, time
os.environ["PATH"] = "{fake}:" + os.environ["PATH"]
began = time.monotonic()
gpus = snapshot.gpus()
print(json.dumps([time.monotonic() - began, gpus["query"], gpus["topo"], gpus["driver"]]))""")
    took, query, topo, driver = found
    assert query == ["0, NVIDIA H100 80GB HBM3, 9.0, 81559"]
    assert topo == ["\tGPU0", "GPU0\t X "]
    assert (driver["driver"], driver["cuda"]) == ("580.159.04", "13.0")
    began = sorted(float(line) for line in starts.read_text().split())
    assert len(began) == 3 and began[-1] - began[0] < 0.9   # one after the other, 1 s apart at least
    assert took < 2.5
