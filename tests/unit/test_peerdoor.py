"""The peer door (sglang_infra/plan/peerdoor.py): the nginx config it renders, the blobs it lists, its refusals and
its place in the plan and the snapshot. The door itself, answering on a real host: tests/e2e/test_peer_door.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import converged_snapshot, pinned_defaults, plan_for

from sglang_infra.hostside.read import doorcheck
from sglang_infra.hostside.read import snapshot as host_snapshot
from sglang_infra.plan import peerdoor
from sglang_infra.plan.problems import DeployDataError
from sglang_infra.plan.refusals import check_data, check_host_state
from sglang_infra.plan.resolve import resolve, snapshot_spec
from sglang_infra.plan.types import PeerDoor, PeerPin

DEFAULTS = pinned_defaults()
KEY = "0123456789abcdef" * 4
LFS, SMALL = "a" * 64, "b" * 40
HUB = "/opt/sglang/hf-cache/hub"


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "peer.key"
    path.write_text(KEY + "\n")
    return str(path)


def door_data(key_file, **overrides):
    return {**DEFAULTS, "sglang_peer_key_file": key_file, "ssh_hostname": "10.0.0.11", **overrides}


PEER = {"peer": {"address": "10.0.0.11", "local": True}}


def door_of(key_file, **overrides) -> PeerDoor:
    door = plan_for(door_data(key_file, **overrides), **PEER).peer_door
    assert door is not None
    return door


def revision(blobs, verified=True, problems=(), content=None):
    return {"verified": verified, "complete": verified, "problems": list(problems), "content": content,
            "blobs": list(blobs)}


def cache(**repos):
    """A snapshot's models section: repo id (with / as __) -> {commit: revision}."""
    return {"repos": {repo.replace("__", "/"): {"revisions": revisions} for repo, revisions in repos.items()}}


# ---------------------------------------------------------------- the rendered door


def test_the_door_listens_on_its_one_address_and_port(key_file):
    door = door_of(key_file, sglang_peer_port=30051)
    assert (door.address, door.port) == ("10.0.0.11", 30051)
    assert re.findall(r"^\s*listen\s+(.*);$", door.config, re.M) == ["10.0.0.11:30051 ssl"]
    assert "sites-enabled" not in door.config and "conf.d" not in door.config   # Debian's default site is not read


def test_an_ipv6_address_is_bracketed(key_file):
    door = plan_for(door_data(key_file, sglang_peer_bind_address="fd00::11"),
                    peer={"address": "fd00::11", "local": True}).peer_door
    assert re.findall(r"^\s*listen\s+(.*);$", door.config, re.M) == ["[fd00::11]:880 ssl"]


def test_the_door_speaks_tls_alone_with_its_hosts_own_key_pair(key_file):
    """Every listen is TLS (no plain HTTP port), 1.2 and 1.3 only, with the pair made on the host (tls_made),
    whose key is root's alone and which nginx's master process reads; no other certificate, no other key."""
    config = door_of(key_file).config
    assert all(line.endswith(" ssl") for line in re.findall(r"^\s*listen\s+(.*);$", config, re.M))
    assert re.findall(r"^\s*ssl_protocols\s+(.*);$", config, re.M) == ["TLSv1.2 TLSv1.3"]
    assert re.findall(r"^\s*ssl_certificate\s+(.*);$", config, re.M) == [peerdoor.TLS_CERT]
    assert re.findall(r"^\s*ssl_certificate_key\s+(.*);$", config, re.M) == [peerdoor.TLS_KEY]
    assert peerdoor.TLS_KEY.startswith(peerdoor.DOOR_DIR + "/") and peerdoor.TLS_CERT.startswith(peerdoor.DOOR_DIR)


def test_the_snapshot_reads_every_package_the_door_installs():
    """packages_installed judges by the snapshot's packages: one the snapshot does not read (openssl, which makes
    the door's key pair) would be installed again on every run, a change on a converged host."""
    import ast

    tree = ast.parse(open("tasks/peer_door.py").read())
    installed = [ast.unparse(kw.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and getattr(node.func, "id", "") == "packages_installed" for kw in node.keywords
                 if kw.arg == "packages"]
    assert installed == ["[peerdoor.TLS_PACKAGE]", "[peerdoor.PACKAGE]"]
    assert {peerdoor.TLS_PACKAGE, peerdoor.PACKAGE} <= set(peerdoor.door_spec()["packages"])


def test_the_door_never_follows_a_link_serves_read_only_and_refuses_what_it_does_not_list(key_file):
    config = door_of(key_file).config
    assert re.search(r"^\s*disable_symlinks on;$", config, re.M)
    assert re.search(r'if \(\$request_method !~ \^\(GET\|HEAD\)\$\) \{\s*return 405;', config)
    assert re.search(r"location / \{\s*return 404;\s*\}", config)
    assert "autoindex off;" in config
    # The only other locations are the list's exact ones (included), never a prefix or a pattern of blobs/.
    assert re.findall(r"^\s*location\s+(\S+)", config, re.M) == ["/"]
    assert f"include {peerdoor.BLOBS_CONF};" in config


def test_the_key_is_checked_before_any_location_and_only_in_roots_file(key_file):
    door = door_of(key_file)
    assert KEY not in door.config and KEY not in door.dropin
    server = door.config[door.config.index("server {"):]
    assert server.index(f"include {peerdoor.KEY_CONF};") < server.index("location")
    assert door.key_conf.endswith(f'if ($http_authorization != "Bearer {KEY}") {{\n    return 401;\n}}\n')


def test_no_log_carries_the_authorization_header(key_file):
    config = door_of(key_file).config
    assert "$http_authorization" not in config
    formats = re.findall(r"^\s*log_format\s+(\S+)\s+'([^']*)';", config, re.M)
    assert formats and all("authorization" not in fmt.lower() for _, fmt in formats)
    assert re.findall(r"^\s*access_log\s+\S+\s+(\S+);", config, re.M) == [formats[0][0]]
    assert re.search(r"^error_log \S+ warn;", config, re.M)   # never debug, which logs request headers


def test_the_workers_run_as_a_user_and_group_of_their_own_never_the_accounts_group_nor_www_data(key_file):
    """Issue 52 item 8: the shared www-data's other services passed where the door's ACL entry let www-data pass."""
    assert re.search(r"^user sglang-door sglang-door;$", door_of(key_file).config, re.M)
    assert peerdoor.WORKER_USER == peerdoor.WORKER_GROUP == "sglang-door"


def test_nginx_service_runs_the_doors_config_alone(key_file):
    dropin = door_of(key_file).dropin
    for directive in ("ExecStartPre", "ExecStart", "ExecReload"):
        lines = re.findall(rf"^{directive}=(.*)$", dropin, re.M)
        assert lines[0] == "" and len(lines) == 2, directive   # the packaged command cleared, then ours
        assert f"-c {peerdoor.CONFIG}" in lines[1]


# ---------------------------------------------------------------- what the door lists


def list_door(pins):
    return PeerDoor(address="10.0.0.11", port=30050, group="sglang", hub=HUB, key=KEY.encode(),
                    pins=tuple(PeerPin(*pin) for pin in pins))


def test_only_verified_revisions_of_the_registrys_pins_are_served():
    door = list_door([("org/m", "1" * 40, None), ("org/other", "3" * 40, None)])
    found = cache(org__m={"1" * 40: revision([LFS, SMALL]), "2" * 40: revision(["c" * 64])},   # not the pin
                  org__other={"3" * 40: revision(["d" * 64], verified=False)},               # not verified
                  org__stranger={"4" * 40: revision(["e" * 64])})                            # not in the registry
    assert peerdoor.served_blobs(door, found) == {LFS: f"{HUB}/models--org--m/blobs/{LFS}",
                                                  SMALL: f"{HUB}/models--org--m/blobs/{SMALL}"}


def test_a_revision_with_problems_or_not_the_locks_content_is_not_served():
    door = list_door([("org/m", "1" * 40, "f" * 64), ("org/n", "2" * 40, None)])
    found = cache(org__m={"1" * 40: revision([LFS], content="0" * 64)},
                  org__n={"2" * 40: revision([SMALL], problems=["blob of x changed"])})
    assert peerdoor.served_blobs(door, found) == {}
    found["repos"]["org/m"]["revisions"]["1" * 40]["content"] = "f" * 64
    assert list(peerdoor.served_blobs(door, found)) == [LFS]


@pytest.mark.parametrize("name", ["../../../etc/shadow", "A" * 64, "a" * 63, "a" * 64 + ".incomplete",
                                  "a" * 40 + "/x", 'a" ; x', "$uri"])
def test_a_recorded_name_that_is_not_a_blob_name_is_never_listed(name):
    door = list_door([("org/m", "1" * 40, None)])
    assert peerdoor.served_blobs(door, cache(org__m={"1" * 40: revision([name, LFS])})) == {
        LFS: f"{HUB}/models--org--m/blobs/{LFS}"}


def test_the_list_is_one_exact_location_per_blob():
    door = list_door([("org/m", "1" * 40, None)])
    text = peerdoor.blobs_conf(door, cache(org__m={"1" * 40: revision([SMALL, LFS])}))
    assert re.findall(r"^location (\S+) (\S+) \{$", text, re.M) == [("=", f"/blobs/{LFS}"), ("=", f"/blobs/{SMALL}")]
    assert f'alias "{HUB}/models--org--m/blobs/{LFS}";' in text
    assert peerdoor.blobs_conf(door, {"repos": {}}).count("location") == 0


# ---------------------------------------------------------------- refusals, before any change


@pytest.mark.parametrize("content,why", [
    ("", "is empty"),
    ("\n", "is empty"),
    ("short-key", "holds a key of 9 characters, not 32-512"),
    ("x" * 31, "holds a key of 31 characters"),
    ("a b" * 20, "holds characters a Bearer token cannot carry"),
    ('"' + "a" * 40, "holds characters a Bearer token cannot carry"),
])
def test_a_bad_key_file_is_refused(tmp_path, content, why):
    path = tmp_path / "peer.key"
    path.write_text(content)
    errors = check_data("gpu-01", door_data(str(path)))
    assert len(errors) == 1 and errors[0].startswith(f"host gpu-01: sglang_peer_key_file: {path} {why}")
    assert "openssl rand -hex 32" in errors[0]


def test_a_missing_key_file_is_refused(tmp_path):
    errors = check_data("gpu-01", door_data(str(tmp_path / "nope")))
    assert len(errors) == 1 and errors[0].startswith("host gpu-01: sglang_peer_key_file: ")
    assert "None or a readable file on the control machine" in errors[0]


def test_an_address_that_is_not_the_hosts_is_refused(key_file):
    data = door_data(key_file, sglang_peer_bind_address="10.9.9.9")
    errors = [e for e in check_host_state("gpu-01", data, converged_snapshot(peer={"address": "10.9.9.9",
                                                                                    "local": False}))
              if "sglang_peer" in e]
    assert len(errors) == 1 and errors[0].startswith(
        "host gpu-01: sglang_peer_bind_address: 10.9.9.9 (10.9.9.9) is not an address of gpu-01")
    with pytest.raises(DeployDataError):
        resolve("gpu-01", data, converged_snapshot(peer={"address": "10.9.9.9", "local": False}))
    unresolved = [e for e in check_host_state("gpu-01", door_data(key_file, ssh_hostname="nowhere.invalid"),
                                  converged_snapshot(peer={"address": None, "local": False})) if "peer" in e]
    assert "nowhere.invalid does not resolve to an address on gpu-01" in unresolved[0]


@pytest.mark.parametrize("data, address, source", [
    ({"ssh_hostname": "gpu-01"}, "127.0.1.1", "ssh_hostname 'gpu-01'"),   # Debian's /etc/hosts for its own name
    ({"sglang_worker_address": "localhost"}, "127.0.0.1", "sglang_worker_address 'localhost'"),
    ({"sglang_worker_address": "0.0.0.0"}, "0.0.0.0", "sglang_worker_address '0.0.0.0'"),
    ({"ssh_hostname": "::"}, "::", "ssh_hostname '::'"),
    ({"ssh_hostname": "gpu-01"}, "::1", "ssh_hostname 'gpu-01'"),
])
def test_a_loopback_or_wildcard_door_address_is_refused_naming_where_it_came_from(key_file, data, address, source):
    """Every peer connects to the door's address with the site key: a loopback address (a peer would reach itself,
    where any local user holding the port first is sent the key) or every address is refused before any change,
    though a socket binds to it (the snapshot's "local")."""
    errors = [e for e in check_host_state("gpu-01", door_data(key_file, **data),
                                          converged_snapshot(peer={"address": address, "local": True}))
              if "sglang_peer" in e]
    assert len(errors) == 1, errors
    assert errors[0].startswith("host gpu-01: sglang_peer_bind_address: ")
    assert ("loopback address" if address not in ("0.0.0.0", "::") else "every address of the host") in errors[0]
    assert f"from {source}" in errors[0] and "Fix: set sglang_peer_bind_address to the IP address" in errors[0]
    with pytest.raises(DeployDataError):
        resolve("gpu-01", door_data(key_file, **data), converged_snapshot(peer={"address": address, "local": True}))


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "127.0.0.1", "127.0.1.1", "::1", "::ffff:127.0.0.1"])
def test_sglang_peer_bind_address_is_never_loopback_nor_every_address(address):
    errors = check_data("gpu-01", {**DEFAULTS, "sglang_peer_bind_address": address})
    assert len(errors) == 1 and errors[0].startswith("host gpu-01: sglang_peer_bind_address: ") and \
        "not loopback, not every address" in errors[0], errors
    assert check_data("gpu-01", {**DEFAULTS, "sglang_peer_bind_address": "10.0.0.11"}) == []


def test_the_host_prefers_a_name_s_address_that_is_not_loopback(monkeypatch):
    """A name resolving to 127.0.1.1 and then to an address of the host's network gives the latter."""
    infos = [(2, 1, 6, "", ("127.0.1.1", 0)), (2, 1, 6, "", ("127.0.0.9", 0))]
    monkeypatch.setattr(host_snapshot.socket, "getaddrinfo", lambda *a, **k: list(infos))
    monkeypatch.setattr(host_snapshot, "_nowhere", lambda address: address == "127.0.1.1")   # 127.0.0.9 binds here
    assert host_snapshot.peer_address("gpu-01") == {"address": "127.0.0.9", "local": True}


def test_an_nginx_of_the_hosts_own_is_never_taken_over(key_file):
    """A host whose nginx.service runs (or starts at boot) without the door's drop-in serves something else: the
    door would replace its config, so the run is refused; the door's own nginx (drop-in present) is not."""
    folder, _, name = peerdoor.dropin().rpartition("/")
    running = {"nginx.service": {"loaded": True, "active": "active", "enabled": "enabled", "reload_needed": False}}
    stopped = {"nginx.service": {"loaded": True, "active": "inactive", "enabled": "disabled", "reload_needed": False}}

    def refused(services, files=None):
        snapshot = converged_snapshot(services=services, files=files or {}, **PEER)
        return [e for e in check_host_state("gpu-01", door_data(key_file), snapshot) if "nginx.service" in e]

    errors = refused(running)
    assert len(errors) == 1 and errors[0].startswith("host gpu-01: sglang_peer_key_file: nginx.service is already "
                                                     "active and enabled on this host")
    assert refused({"nginx.service": {**stopped["nginx.service"], "enabled": "enabled"}})   # starts at boot
    assert refused(stopped) == [] and refused({}) == []
    assert refused(running, {folder: {name: {}}}) == []   # the door's own nginx
    assert [e for e in check_host_state("gpu-01", DEFAULTS, converged_snapshot(services=running))
            if "nginx" in e] == []   # no door, no judgement


# ---------------------------------------------------------------- the plan and the snapshot


def test_no_door_without_the_key_or_on_a_host_that_serves_nothing(key_file):
    assert plan_for(DEFAULTS).peer_door is None
    gateway_only = resolve("gw-1", door_data(key_file), converged_snapshot(None, **PEER), ("router",))
    assert gateway_only.peer_door is None


def test_the_door_lists_the_registrys_pins(key_file):
    door = door_of(key_file)
    assert {(pin.repo_id, pin.commit) for pin in door.pins} == {
        (entry["repo_id"], entry["revision"]) for entry in DEFAULTS["sglang_models"].values()}


def test_the_snapshot_resolves_the_fleet_address_only_with_the_door(key_file):
    assert "peer_address" not in snapshot_spec(DEFAULTS, name="gpu-01")
    spec = snapshot_spec(door_data(key_file, ssh_hostname=None), name="gpu-01")
    assert spec["peer_address"] == "gpu-01"
    assert snapshot_spec(door_data(key_file, sglang_worker_address="10.0.0.7"))["peer_address"] == "10.0.0.7"
    assert snapshot_spec(door_data(key_file, sglang_peer_bind_address="10.0.0.8"))["peer_address"] == "10.0.0.8"
    # The door's files, unit and package are read on every host, so a door left from an earlier run is found.
    assert peerdoor.DOOR_DIR in snapshot_spec(DEFAULTS)["system_dirs"]
    assert "nginx.service" in snapshot_spec(DEFAULTS)["services"]


def test_the_snapshot_checks_the_door_as_the_run_does(key_file, monkeypatch):
    """A settled host skips the run's door check (run/settled.py): its snapshot must read who holds the door's port
    the same way, with the door's config and certificate, and only on the host's own address."""
    spec = snapshot_spec(door_data(key_file, sglang_peer_bind_address="10.0.0.8", sglang_peer_port=8443))
    assert spec["door"] == {"port": 8443, "config": peerdoor.CONFIG, "cert": peerdoor.TLS_CERT,
                            "key": peerdoor.TLS_KEY}
    asked = []
    monkeypatch.setattr(host_snapshot.doorcheck, "checked", lambda *args: asked.append(args) or {"held": True})
    monkeypatch.setattr(host_snapshot.doorcheck, "pair_matches", lambda *args: asked.append(args) or True)
    monkeypatch.setattr(host_snapshot, "peer_address", lambda wanted: {"address": wanted, "local": True})
    assert host_snapshot.peer(spec) == {"address": "10.0.0.8", "local": True, "door": {"held": True}, "tls_pair": True}
    assert asked == [("10.0.0.8", 8443, peerdoor.CONFIG, peerdoor.TLS_CERT), (peerdoor.TLS_CERT, peerdoor.TLS_KEY)]
    monkeypatch.setattr(host_snapshot, "peer_address", lambda wanted: {"address": wanted, "local": False})
    assert host_snapshot.peer(spec) == {"address": "10.0.0.8", "local": False,   # not its address: no door here
                                        "tls_pair": True}


def test_a_key_and_certificate_are_judged_one_pair_as_nginx_judges_them(tmp_path):
    """Issue 52 item 6: owner and mode alone passed a half-replaced pair, which breaks nginx at its next reload."""
    tls = Path(__file__).parent / "fixtures" / "peer_tls"
    assert doorcheck.pair_matches(str(tls / "door.crt"), str(tls / "door.key")) is True
    assert doorcheck.pair_matches(str(tls / "door.crt"), str(tls / "other.key")) is False   # half replaced
    assert doorcheck.pair_matches(str(tls / "other.crt"), str(tls / "door.key")) is False
    assert doorcheck.pair_matches(str(tls / "door.crt"), str(tmp_path / "absent.key")) is None
    (tmp_path / "garbage.key").write_text("not a key\n")
    assert doorcheck.pair_matches(str(tls / "door.crt"), str(tmp_path / "garbage.key")) is False
    (tmp_path / "link.key").symlink_to(tls / "door.key")
    assert doorcheck.pair_matches(str(tls / "door.crt"), str(tmp_path / "link.key")) is False   # never followed
    os.mkfifo(tmp_path / "fifo.key")
    assert doorcheck.pair_matches(str(tls / "door.crt"), str(tmp_path / "fifo.key")) is False   # never blocks
    assert not peerdoor.tls_ready({"tls.key": {"owner": "root", "mode": "600"}, "tls.crt": {"owner": "root"}}, False)
    assert peerdoor.tls_ready({"tls.key": {"owner": "root", "mode": "600"}, "tls.crt": {"owner": "root"}}, True)


def test_the_host_says_whether_an_address_is_its_own():
    assert host_snapshot.peer_address("127.0.0.1") == {"address": "127.0.0.1", "local": True}
    assert host_snapshot.peer_address("192.0.2.1") == {"address": "192.0.2.1", "local": False}   # TEST-NET-1
    assert host_snapshot.peer_address("nowhere.invalid") == {"address": None, "local": False}


def test_a_revision_pulled_in_part_lists_only_the_files_its_pull_verified():
    """A swarm's first round (peering.split): the snapshot's verified_blobs (cachestate, from the pull's record of
    the files it verified, each still the very inode verified) are listed file by file; with a lock, only a file
    whose sha256 is one of the lock's; a revision pulled in part without such a record lists nothing."""
    part = {"verified": False, "complete": False, "problems": ["missing blob for model-2.safetensors"],
            "verified_blobs": {LFS: LFS, SMALL: "9" * 64}, "blobs": ["c" * 64]}
    found = cache(org__m={"1" * 40: part}, org__n={"2" * 40: revision(["d" * 64], verified=False)})
    door = list_door([("org/m", "1" * 40, None), ("org/n", "2" * 40, None)])
    assert sorted(peerdoor.served_blobs(door, found)) == [LFS, SMALL]          # never the revision's other blobs
    door = list_door([("org/m", "1" * 40, "f" * 64, frozenset({LFS}))])
    assert list(peerdoor.served_blobs(door, found)) == [LFS]   # the small file's sha256 is not the lock's


# ---------------------------------------------------------------- the door's check (hostside/read/doorcheck.py)


@pytest.fixture
def listener():
    """A socket of this process listening on 127.0.0.1 (the check reads the real /proc)."""
    import socket

    sock = socket.create_server(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


def test_the_door_check_finds_the_port_held_by_the_process_named(listener):
    import os

    from sglang_infra.hostside.read import doorcheck

    mine = doorcheck.held("127.0.0.1", listener, "pytest", pid=os.getpid())
    assert mine["held"] and mine["pid"] == os.getpid(), mine
    other = doorcheck.held("127.0.0.1", listener, "pytest", pid=os.getppid())   # not the listener's process
    assert not other["held"] and "held by another process than nginx.service's" in other["why"]
    config = doorcheck.held("127.0.0.1", listener, "/etc/nginx/sglang-peer-door/nginx.conf", pid=os.getpid())
    assert not config["held"] and "does not run /etc/nginx/sglang-peer-door/nginx.conf" in config["why"]
    closed = doorcheck.held("127.0.0.2", listener, "pytest", pid=os.getpid())   # another address, same port
    assert closed == {"held": False, "pid": None, "why": f"nothing listens on 127.0.0.2:{listener}"}


def test_the_door_check_reads_the_certificate_a_client_is_sent(listener, tmp_path):
    """doorcheck gives the sha256 of the certificate's DER bytes (what a TLS client sees and the pull pins); a door
    held by nginx whose certificate cannot be read (absent, a link, not PEM) is not held."""
    import hashlib
    import os
    import ssl

    from sglang_infra.hostside.read import doorcheck

    cert = os.path.join(os.path.dirname(__file__), "fixtures", "peer_tls", "door.crt")
    with open(cert) as f:
        der = ssl.PEM_cert_to_DER_cert(f.read())
    assert doorcheck.certificate(cert) == hashlib.sha256(der).hexdigest()
    os.symlink(cert, tmp_path / "link.crt")
    (tmp_path / "junk.crt").write_text("not a certificate\n")
    for bad in (tmp_path / "absent.crt", tmp_path / "link.crt", tmp_path / "junk.crt"):
        assert doorcheck.certificate(str(bad)) is None
    held = dict(doorcheck.held("127.0.0.1", listener, "pytest", pid=os.getpid()))
    with __import__("unittest").mock.patch.object(doorcheck, "held", lambda *a: dict(held)):
        assert doorcheck.checked("127.0.0.1", listener, "pytest", cert)["cert"] == hashlib.sha256(der).hexdigest()
        found = doorcheck.checked("127.0.0.1", listener, "pytest", str(tmp_path / "junk.crt"))
    assert not found["held"] and found["why"] == f"{tmp_path / 'junk.crt'} holds no PEM certificate"


def test_the_door_check_reads_the_kernels_spelling_of_an_address(tmp_path):
    (tmp_path / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0B00000A:0370 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4711 1\n"
        "   1: 0B00000A:0370 0C00000A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4712 1\n"
        "   2: 00000000:0370 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4713 1\n")
    (tmp_path / "tcp6").write_text("header\n")
    from sglang_infra.hostside.read import doorcheck

    assert doorcheck.listening("10.0.0.11", 880, str(tmp_path)) == ["4711"]   # LISTEN on exactly that address
    assert doorcheck.listening("fd00::11", 880, str(tmp_path)) == []


@pytest.mark.parametrize("restart,reload,expected", [
    (False, True, "nginx -t -q -c /etc/nginx/sglang-peer-door/nginx.conf && systemctl reload nginx.service"),
    (True, False, "systemctl daemon-reload && nginx -t -q -c /etc/nginx/sglang-peer-door/nginx.conf "
                  "&& systemctl restart nginx.service"),
])
def test_nginx_reloads_or_restarts_the_door_only_once_nginx_t_accepts_its_files(restart, reload, expected):
    """Issue 52 item 6: a reload of files nginx refuses is not sent (nginx's own reload would keep the old config
    and say nothing); the host stops on nginx -t's error and the door keeps serving what it serves."""
    from test_monitoring import RUNNING, run

    from sglang_infra.operations import system

    commands, _ = run(system.service_running, {"services": {"nginx.service": RUNNING}}, executing=True,
                      unit="nginx.service", restart_if=lambda: restart, reload_if=lambda: reload,
                      check=peerdoor.config_check())
    assert commands == [expected]
