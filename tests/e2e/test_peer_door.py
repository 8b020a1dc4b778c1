"""The peer door on two real hosts (sglang_infra/plan/peerdoor.py): each serving host's nginx hands its verified
blobs, over TLS alone with the host's own certificate (curl here does not check it, -k: the pull's pinning is tested
against the real door below), to the other host with the site's key (ranges answered 206, the bytes the lock's), and
nothing else: plain HTTP is not served, a client pinned to another certificate sends nothing; 401 without
the key or with another, 404 for a blob an admin dropped into the cache, for a path outside blobs/ and for a
snapshot's file; a link in place of a listed blob is refused; nothing listens on another address; the key is in
no log. A second run changes nothing; with sglang_peer_key_file None the door is gone."""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path

import pytest

from harness import door_pin, run_deploy, run_host_checks
from sglang_infra.hostside.pull import peers
from sglang_infra.plan import peerdoor
from testbed import hub as standin_hub
from testbed import tls

PORT = 880  # group_data/all.py's sglang_peer_port
KEY = hashlib.sha256(b"the site's peer key, for this test only").hexdigest()
HUB = "/opt/sglang/hf-cache/hub"
TINY = "standin-org/tiny-chat"
BLOBS = f"{HUB}/models--standin-org--tiny-chat/blobs"
SHARD = "model-00001-of-00002.safetensors"
HEADER = "/root/peer-key.header"


def shard() -> tuple[str, bytes]:
    commit = standin_hub.commits()[TINY]["main"]
    data = standin_hub.file_bytes(TINY, commit, SHARD)
    return hashlib.sha256(data).hexdigest(), data


def curl(client, url: str, *args: str, key: bool = True) -> tuple[str, str]:
    """(HTTP status, or curl's exit code when it got none; the first 64 bytes of the body as hex) from ``client``."""
    auth = f"-H @{HEADER}" if key else ""
    out = client.exec(f"curl -s -k --path-as-is --max-time 10 {auth} {' '.join(args)} -o /tmp/body -w '%{{http_code}}' "
                      f"{url}; echo \" $?\"; head -c 64 /tmp/body 2>/dev/null | od -An -tx1 | tr -d ' \\n'",
                      check=False).stdout.split("\n", 1)
    code, _, exit_code = out[0].strip().partition(" ")
    return (code if code != "000" else f"curl exit {exit_code.strip()}"), (out[1] if len(out) > 1 else "")


@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    hosts = [testbed.host("sg-door-1"), testbed.host("sg-door-2")]
    key_file = workdir / "peer.key"
    key_file.write_text(KEY + "\n")
    door = {"sglang_peer_key_file": str(key_file), "sglang_benchmark_min_fraction": 0.05}
    inventory = testbed.inventory(workdir / "door.py", {"production": [(h, door) for h in hosts]})
    first = run_deploy(inventory)
    assert first.returncode == 0, first.why()
    # Run again before any test plants a file or a link in the cache (a renamed blob is hashed again, rightly).
    again = run_deploy(inventory)
    for each in hosts:
        each.exec(f"printf 'Authorization: Bearer %s\\n' {KEY} > {HEADER} && chmod 600 {HEADER}")
    return hosts, inventory, key_file, first, again


def url(host, path: str) -> str:
    return f"https://{host.address}:{PORT}{path}"


def head_from_here(host, pin: str) -> int:
    """The HTTP status of the pull's own HEAD (hostside/pull/peers.py) for the shard at ``host``'s door, pinned to
    ``pin``; peers._Bad when the pull refuses the door."""
    now = time.monotonic()
    answer = peers._request(peers.Peer(host.address, PORT, pin), "HEAD", f"/blobs/{shard()[0]}",
                            {"Authorization": f"Bearer {KEY}"}, now + 10, now + 10)
    answer.close()
    return answer.status


def access_log(host) -> str:
    return host.exec("cat /var/log/nginx/access.log", check=False).stdout


def test_the_door_serves_tls_alone_and_a_client_pinned_to_another_certificate_sends_nothing(fleet):
    """Issue 42, item 2: the key goes only into a TLS connection whose certificate is the one the run read on the
    door's host. Plain HTTP to the door is answered 400 (nginx's refusal), never a blob, even with the key; the
    pull pinned to another certificate fails at the handshake, and the door logs no request of it; pinned to the
    door's own certificate, it is answered."""
    (one, two), _, _, _, _ = fleet
    name, data = shard()
    plain = curl(two, f"http://{one.address}:{PORT}/blobs/{name}", "-r 0-63")
    assert plain[0] == "400" and data[:64].hex() not in plain[1], plain
    before = access_log(one)
    with pytest.raises(peers._Bad, match="TLS certificate other than"):
        head_from_here(one, door_pin(two))   # another host's certificate: a listener with it is not this door
    assert access_log(one) == before   # no request reached nginx: nothing was sent after the handshake
    assert head_from_here(one, door_pin(one)) == 200
    assert one.exec(f"stat -c '%U %G %a' {peerdoor.TLS_KEY}").stdout.split() == ["root", "root", "600"]
    assert door_pin(one) != door_pin(two)   # each host made its own pair


def test_a_peer_with_the_key_gets_ranges_of_a_verified_blob(fleet):
    (one, two), _, _, _, _ = fleet
    name, data = shard()
    assert curl(two, url(one, f"/blobs/{name}"), "-r 100-163") == ("206", data[100:164].hex())
    assert curl(one, url(two, f"/blobs/{name}"), "-I")[0] == "200"


def test_without_the_key_or_with_another_nothing_is_served(fleet):
    (one, two), _, _, _, _ = fleet
    name, _ = shard()
    assert curl(two, url(one, f"/blobs/{name}"), key=False)[0] == "401"
    assert curl(two, url(one, f"/blobs/{name}"), "-H 'Authorization: Bearer " + "0" * 64 + "'", key=False)[0] \
        == "401"
    assert curl(two, url(one, f"/blobs/{name}"), "-H 'Authorization: bearer " + KEY + "'", key=False)[0] == "401"
    assert curl(two, url(one, "/blobs/nothing-here"), key=False)[0] == "401"   # nothing said about what exists


def test_only_listed_blobs_never_a_path_outside_blobs_or_another_method(fleet):
    (one, two), _, _, _, _ = fleet
    name, _ = shard()
    dropped = "f" * 64   # an admin's file in the shared cache, named like a blob: never verified, never listed
    one.exec(f"printf dropped > {BLOBS}/{dropped} && chown sglang:sglang {BLOBS}/{dropped} && "
             f"chmod 664 {BLOBS}/{dropped}")
    assert curl(two, url(one, f"/blobs/{dropped}"))[0] == "404"
    commit = standin_hub.commits()[TINY]["main"]
    for path in ("/", "/blobs/", "/blobs/../blobs/../../../../etc/passwd", "/etc/passwd",
                 f"/snapshots/{commit}/config.json", f"{BLOBS}/{name}", f"/blobs/{name}/", f"/blobs/{name}%2f.."):
        assert curl(two, url(one, path))[0] in ("400", "404"), path
    assert curl(two, url(one, f"/blobs/{name}"), "-X PUT --data x")[0] == "405"
    assert curl(two, url(one, f"/blobs/{name}"), "-X DELETE")[0] == "405"


def test_a_link_in_place_of_a_listed_blob_is_refused(fleet):
    (one, two), _, _, _, _ = fleet
    name, _ = shard()
    one.exec(f"mv {BLOBS}/{name} {BLOBS}/{name}.kept && ln -s {name}.kept {BLOBS}/{name}")
    try:
        assert curl(two, url(one, f"/blobs/{name}"))[0] in ("403", "404")
    finally:
        one.exec(f"rm {BLOBS}/{name} && mv {BLOBS}/{name}.kept {BLOBS}/{name}")
    assert curl(two, url(one, f"/blobs/{name}"), "-I")[0] == "200"


def test_the_door_is_only_on_the_address_named(fleet):
    (one, _), _, _, _, _ = fleet
    name, _ = shard()
    assert curl(one, f"https://127.0.0.1:{PORT}/blobs/{name}")[0] == "curl exit 7"   # refused: nothing listens
    listening = one.exec(f"ss -Hltn 'sport = :{PORT}'").stdout.split()
    assert [word for word in listening if word.endswith(f":{PORT}")] == [f"{one.address}:{PORT}"]
    assert one.exec("ss -Hltn 'sport = :80'").stdout.strip() == ""   # Debian's default site never started


def test_the_key_is_root_only_and_in_no_log(fleet):
    (one, _), _, _, first, _ = fleet
    assert one.exec(f"stat -c '%U %G %a' {peerdoor.KEY_CONF}").stdout.split() == ["root", "root", "600"]
    assert one.exec(f"grep -rl {KEY} /var/log/nginx/ /etc/nginx/nginx.conf {peerdoor.CONFIG} "
                    f"{peerdoor.BLOBS_CONF}", check=False).stdout == ""
    assert KEY not in one.exec("journalctl --no-pager -q", check=False).stdout
    assert KEY not in first.output
    assert one.exec(f"runuser -u www-data -- cat {peerdoor.KEY_CONF}", check=False).returncode != 0


def test_the_doors_workers_read_the_cache_and_cannot_write_it(fleet):
    """nginx's workers ran as www-data with the account's group, which may write in hf-cache: a worker (or
    whoever takes one over) could replace any blob. As the workers run now (their uid, gid and groups, read
    from /proc), nothing under hf-cache can be created, changed or removed, while the door still serves."""
    (one, two), _, _, _, _ = fleet
    name, data = shard()
    pid = one.exec("pgrep -f -o 'nginx: worker process'").stdout.strip()
    ids = dict(line.split(":", 1) for line in one.exec(f"cat /proc/{pid}/status").stdout.splitlines()
               if line.startswith(("Uid:", "Gid:", "Groups:")))
    uid, gid = ids["Uid"].split()[0], ids["Gid"].split()[0]
    groups = ",".join(ids["Groups"].split()) or "-"
    assert one.exec(f"id -u {peerdoor.WORKER_USER}").stdout.strip() == uid
    assert one.exec("id -u www-data").stdout.strip() != uid   # issue 52 item 8: not the shared www-data
    assert one.exec("runuser -u www-data -- ls /opt/sglang/hf-cache", check=False).returncode != 0
    sglang_gid = one.exec("getent group sglang | cut -d: -f3").stdout.strip()
    assert sglang_gid not in [gid, *ids["Groups"].split()]
    as_worker = f"setpriv --reuid={uid} --regid={gid} " + ("--clear-groups" if groups == "-" else f"--groups={groups}")
    for attempt in (f"touch {BLOBS}/planted", f"sh -c 'printf x >> {BLOBS}/{name}'", f"rm -f {BLOBS}/{name}",
                    f"mkdir {HUB}/planted", f"touch {HUB}/../planted"):
        assert one.exec(f"{as_worker} -- {attempt}", check=False).returncode != 0, attempt
    assert one.exec(f"ls {BLOBS}/planted {HUB}/planted", check=False).returncode != 0
    read = one.exec(f"{as_worker} -- head -c 4 {BLOBS}/{name} | od -An -tx1 | tr -d ' \\n'", check=False)
    assert read.stdout.strip() == data[:4].hex()
    assert curl(two, url(one, f"/blobs/{name}"), "-r 0-63") == ("206", data[:64].hex())


def test_the_operators_check_reports_the_door(fleet, workdir):
    (one, two), inventory, _, _, _ = fleet
    report = run_host_checks(inventory, workdir)
    for each in (one, two):
        assert "test_the_peer_door_runs_its_config_on_its_address_alone" in report.passed(each.name), \
            report.output[-3000:]


def test_every_door_is_up_and_checked_before_any_pull_of_the_run(fleet):
    """Issue 42, item 2: on a fresh fleet, a pull sends the key only to a door this run brought up and found held by
    the door's own nginx; so every host's door comes up and is checked before the first pull operation."""
    (one, two), _, _, first, _ = fleet
    out = first.output
    checked = out.find("is held by the peer door's own nginx before any peer asks it")
    pulled = min(i for i in (out.find("is complete and verified in"), out.find("this host's share of")) if i >= 0)
    assert 0 <= checked < pulled, first.why()
    for each in (one, two):   # found so when the operation ran: it passed, changing nothing
        assert [status for op, by_host in first.statuses.items() if "is held by the peer door's own nginx" in op
                for host, status in by_host.items() if host == each.name] == ["No changes"], first.why()


def test_a_door_address_resolving_to_loopback_on_the_host_is_refused_before_any_change(fleet, testbed, workdir):
    """Issue 42, item 1: the door's address as the host resolves it (here a name /etc/hosts maps to 127.0.1.1, as
    Debian does for the host's own name) must not be loopback: every peer would connect to itself with the key."""
    (one, two), _, key_file, _, _ = fleet
    one.exec("cp /etc/hosts /root/hosts.kept && echo '127.0.1.1 sg-door-self' >> /etc/hosts")
    config = f"sha256sum {peerdoor.CONFIG} {peerdoor.BLOBS_CONF}"
    before = one.exec(config).stdout
    try:
        door = {"sglang_peer_key_file": str(key_file), "sglang_benchmark_min_fraction": 0.05}
        named = testbed.inventory(workdir / "door-loopback.py", {"production": [
            (one, {**door, "sglang_worker_address": "sg-door-self"}), (two, door)]})
        refused = run_deploy(named)
    finally:
        one.exec("cp /root/hosts.kept /etc/hosts")
    assert refused.returncode != 0
    assert f"host {one.name}: sglang_peer_bind_address: sg-door-self resolves on {one.name} to 127.0.1.1 is a " \
           "loopback address" in refused.output, refused.why()
    assert "from sglang_worker_address 'sg-door-self'" in refused.output
    assert "refused before any change on any host" in refused.output
    assert one.exec(config).stdout == before


def test_the_door_moves_to_another_port_and_back_keeping_what_it_serves(fleet):
    """Issue 42, item 2: a door whose port changes is reloaded on the new one (the old one closed), checked there,
    and serves what it served; and back."""
    (one, two), inventory, _, _, _ = fleet
    name, data = shard()
    moved = inventory.parent / "door-moved.py"
    moved.write_text(inventory.read_text().replace("'sglang_benchmark_min_fraction': 0.05",
                                                   "'sglang_benchmark_min_fraction': 0.05, 'sglang_peer_port': 30050"))
    assert moved.read_text() != inventory.read_text()
    try:
        result = run_deploy(moved)
        assert result.returncode == 0, result.why()
        assert curl(two, f"https://{one.address}:30050/blobs/{name}", "-r 0-63") == ("206", data[:64].hex())
        assert curl(two, url(one, f"/blobs/{name}"))[0] == "curl exit 7"   # the old port is closed
        listening = one.exec("ss -Hltn").stdout
        assert f"{one.address}:30050" in listening and f":{PORT} " not in listening
    finally:
        back = run_deploy(inventory)
    assert back.returncode == 0, back.why()
    assert curl(two, url(one, f"/blobs/{name}"), "-r 0-63") == ("206", data[:64].hex())
    assert curl(two, f"https://{one.address}:30050/blobs/{name}")[0] == "curl exit 7"


def test_a_rebuilt_hosts_new_certificate_is_the_one_the_next_run_pins(fleet):
    """A host whose pair is lost (rebuilt) gets a new one on the next run, which reads it again: pulls pin the new
    certificate, and the old one is refused."""
    (one, _), inventory, _, _, _ = fleet
    old = door_pin(one)
    one.exec(f"rm {peerdoor.TLS_KEY} {peerdoor.TLS_CERT}")
    result = run_deploy(inventory)
    assert result.returncode == 0, result.why()
    new = door_pin(one)
    assert new != old
    assert head_from_here(one, new) == 200
    with pytest.raises(peers._Bad, match="TLS certificate other than"):
        head_from_here(one, old)


KEYS = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "keyrings"   # test keys (test_vendor_keys.py)
VENDOR_FPR, OTHER_FPR = "1AEFC7BB4072D06DD2C7CE5C774A70EA3FFA4F08", "6355F64473E74BF9BFE7D71552F10AC6422BE575"
KEY_SERVER = """import functools, http.server, ssl
# STAND-IN for a vendor's key URL (tests/e2e/test_peer_door.py): serves /root/keysrv over TLS on loopback.
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory="/root/keysrv")
server = http.server.ThreadingHTTPServer(("127.0.0.1", 8443), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/root/keysrv-tls/cert.pem", "/root/keysrv-tls/key.pem")
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""
TOOLKIT_RING, CUDA_RING = "/etc/apt/keyrings/nvidia-container-toolkit.asc", "/etc/apt/keyrings/nvidia-cuda.asc"
DRIVER_PIN = "/etc/apt/preferences.d/sglang-nvidia-driver"
STANDIN_DRIVER = ("Package: nvidia-open\nVersion: 580.105.08-1\nArchitecture: all\nMaintainer: tests "
                  "<tests@example.invalid>\nDescription: STAND-IN for NVIDIA's driver metapackage "
                  "(tests/e2e/test_peer_door.py)\n")


def keyed_inventory(inventory):
    """The fleet's inventory with the toolkit's and the CUDA repository's keys served by key_url, pinned to the
    test key (VENDOR_FPR; CUDA's in lower case: the data's case does not matter)."""
    keyed = inventory.parent / "door-keys.py"
    keyed.write_text(inventory.read_text().replace(
        "'sglang_benchmark_min_fraction': 0.05",
        "'sglang_benchmark_min_fraction': 0.05, 'sglang_nvidia_toolkit_apt_url': 'https://localhost:8443', "
        f"'sglang_nvidia_toolkit_apt_key_fingerprint': '{VENDOR_FPR}', "
        "'sglang_nvidia_cuda_apt_url': 'https://localhost:8443', "
        f"'sglang_nvidia_cuda_apt_key_fingerprint': '{VENDOR_FPR.lower()}'"))
    assert keyed.read_text() != inventory.read_text()
    return keyed


def copy_in(host, content: bytes, path: str, workdir) -> None:
    local = workdir / f"copy-{hashlib.sha256(content).hexdigest()[:12]}"
    local.write_bytes(content)
    subprocess.run(["docker", "cp", str(local), f"{host.container}:{path}"], check=True, capture_output=True,
                   timeout=60)


@pytest.fixture
def key_url(fleet, workdir):
    """Host one serves a vendor key over TLS on https://localhost:8443 (a certificate of the testbed's CA, which the
    host is made to trust): /gpgkey, the toolkit's, and /debian13/x86_64/8793F200.pub, the CUDA repository's."""
    (one, _), _, _, _, _ = fleet
    cert, key = tls.issue(standin_hub.test_ca(), "localhost", dns_names=["localhost"])
    one.exec(standin_hub.Hub.trust_command() + " && mkdir -p /root/keysrv/debian13/x86_64 /root/keysrv-tls")
    copy_in(one, cert, "/root/keysrv-tls/cert.pem", workdir)
    copy_in(one, key, "/root/keysrv-tls/key.pem", workdir)
    copy_in(one, KEY_SERVER.encode(), "/root/keysrv.py", workdir)
    one.exec("setsid nohup python3 /root/keysrv.py >/root/keysrv.log 2>&1 </dev/null & echo $! > /root/keysrv.pid; "
             "for i in $(seq 50); do curl -sf -o /dev/null https://localhost:8443/ && exit 0; sleep 0.2; done; exit 1")

    def serve(name: str) -> None:
        copy_in(one, (KEYS / name).read_bytes(), "/root/keysrv/gpgkey", workdir)
        copy_in(one, (KEYS / name).read_bytes(), "/root/keysrv/debian13/x86_64/8793F200.pub", workdir)

    yield serve
    one.exec(f"kill $(cat /root/keysrv.pid); rm -rf /root/keysrv /root/keysrv-tls /root/keysrv.py /root/keysrv.pid "
             f"{TOOLKIT_RING} {CUDA_RING}", check=False)


def test_vendor_keyrings_a_half_replaced_door_pair_and_a_dropped_driver_pin_are_put_right_on_the_next_run(
        fleet, workdir, key_url):
    """Issue 52 items 1, 6 and 7 on a real host, on a run that configures no vendor repository: every vendor keyring
    the host holds is judged on every run and replaced by exactly the pinned key when it holds another key besides
    (the toolkit's) or is a link (CUDA's: the link replaced, its target untouched); a door key replaced without its
    certificate gets a new pair the door serves with; a driver pin left from sglang_nvidia_driver_version (its
    preferences file, a held driver package) goes, the package stays. A second run changes nothing."""
    (one, two), inventory, _, _, _ = fleet
    keyed = keyed_inventory(inventory)
    key_url("vendor.asc")
    copy_in(one, (KEYS / "vendor.asc").read_bytes() + (KEYS / "other.asc").read_bytes(), TOOLKIT_RING, workdir)
    copy_in(one, (KEYS / "vendor.asc").read_bytes(), "/root/elsewhere.asc", workdir)
    one.exec(f"chmod 644 {TOOLKIT_RING} && ln -sfn /root/elsewhere.asc {CUDA_RING}")
    one.exec(f"openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out /root/other.key 2>/dev/null && "
             f"install -m 600 -o root -g root /root/other.key {peerdoor.TLS_KEY}")   # the key alone replaced
    one.exec("mkdir -p /root/nv/DEBIAN")
    copy_in(one, STANDIN_DRIVER.encode(), "/root/nv/DEBIAN/control", workdir)
    copy_in(one, b"Package: nvidia-*\nPin: version 580.105.08-*\nPin-Priority: 1001\n", DRIVER_PIN, workdir)
    one.exec("dpkg-deb --build /root/nv /root/nv.deb >/dev/null && dpkg -i /root/nv.deb >/dev/null && "
             "apt-mark hold nvidia-open >/dev/null")
    try:
        result = run_deploy(keyed)
        assert result.returncode == 0, result.why()
        for ring in (TOOLKIT_RING, CUDA_RING):
            assert one.exec(f"stat -c '%F %U %a' {ring}").stdout.strip() == "regular file root 644"
            assert one.exec(f"cat {ring}").stdout.encode() == (KEYS / "vendor.asc").read_bytes()
        assert one.exec("cat /root/elsewhere.asc").stdout.encode() == (KEYS / "vendor.asc").read_bytes()
        assert one.exec(f"test -e {TOOLKIT_RING}", check=False).returncode == 0 and \
            two.exec(f"test -e {TOOLKIT_RING}", check=False).returncode != 0   # none made where none was
        # the door's pair is one again (nginx accepts it), and the door serves with the new certificate
        pub = "openssl pkey -in {0} -pubout 2>/dev/null || openssl x509 -in {0} -pubkey -noout"
        assert one.exec(pub.format(peerdoor.TLS_KEY)).stdout == one.exec(pub.format(peerdoor.TLS_CERT)).stdout
        assert head_from_here(one, door_pin(one)) == 200
        assert "nvidia-open" not in one.exec("apt-mark showhold").stdout
        assert one.exec(f"test -e {DRIVER_PIN}", check=False).returncode != 0
        assert one.exec("dpkg-query -W -f='${Status}' nvidia-open").stdout == "install ok installed"
        again = run_deploy(keyed)
        assert again.returncode == 0 and again.changed(one.name) == [], again.why()
    finally:
        one.exec("dpkg -r nvidia-open >/dev/null 2>&1; rm -rf /root/nv /root/nv.deb /root/other.key "
                 f"/root/elsewhere.asc {DRIVER_PIN}", check=False)


def test_a_vendor_key_that_is_not_the_pinned_one_is_refused_and_nothing_of_it_trusted(fleet, workdir, key_url):
    """Issue 52 item 1 / issue 58 item 4: the key URL serves another key; the keyring there (with that key) is
    removed and the host stops naming the data key for a mirror's own key; the other host converges."""
    (one, two), inventory, _, _, _ = fleet
    keyed = keyed_inventory(inventory)
    key_url("other.asc")
    copy_in(one, (KEYS / "other.asc").read_bytes(), TOOLKIT_RING, workdir)
    one.exec(f"chmod 644 {TOOLKIT_RING}")
    result = run_deploy(keyed)
    assert result.returncode != 0
    assert "sglang_nvidia_toolkit_apt_key_fingerprint" in result.output and OTHER_FPR in result.output, result.why()
    assert one.exec(f"test -e {TOOLKIT_RING} || test -L {TOOLKIT_RING}", check=False).returncode != 0
    assert result.errors(two.name) == [], result.why()


def test_a_second_run_changes_nothing_and_no_key_removes_the_door(fleet):
    (one, two), inventory, key_file, _, again = fleet
    assert again.returncode == 0, again.why()
    assert again.changed(one.name) == [] and again.changed(two.name) == [], again.why()

    off = inventory.parent / "door-off.py"
    off.write_text(inventory.read_text().replace(repr(str(key_file)), "None"))
    closed = run_deploy(off)
    assert closed.returncode == 0, closed.why()
    name, _ = shard()
    for each in (one, two):
        assert each.exec(f"test -e {peerdoor.DOOR_DIR} || test -e {peerdoor.dropin()}", check=False).returncode != 0
        assert each.exec("systemctl is-active nginx.service", check=False).stdout.strip() != "active"
        assert each.exec("systemctl is-enabled nginx.service", check=False).stdout.strip() != "enabled"
    assert curl(two, url(one, f"/blobs/{name}"))[0] == "curl exit 7"
    still = run_deploy(off)
    assert still.returncode == 0 and still.changed(one.name) == [], still.why()
