"""Every vendor apt key pinned by its full fingerprint (issue 52 item 1, issue 58 item 4): Docker's, the Container
Toolkit's and the CUDA repository's. A keyring is sound only when it holds exactly the pinned key (one primary key,
its subkeys), in a regular file of root's no group or other user can write; the snapshot reads each on every run
(hostside/read/openpgp.py), the operation replaces anything else (operations/system.keyring_pinned), and the host
refuses a downloaded key that is not the pinned one (hostside/write/keyring.py).

The fixtures in fixtures/keyrings/ are throwaway ed25519 keys made with GnuPG for these tests (`gpg
--quick-gen-key`, `--quick-add-key`, `--export [--armor]`); their fingerprints are GnuPG's own (`gpg --show-keys
--with-colons`): vendor.asc/.gpg a primary key with one signing subkey, other.asc another key, rsa4096.asc an
RSA 4096 key with a subkey (`--quick-gen-key ... rsa4096`), the size of Docker's."""

from __future__ import annotations

import http.server
import os
import threading
from pathlib import Path

import pytest
from conftest import FakeHost, command_text, on_host, pinned_defaults, plan_for

from sglang_infra.hostside.read import openpgp
from sglang_infra.hostside.write import keyring as installer
from sglang_infra.machine import keyrings
from sglang_infra.operations import system
from sglang_infra.plan.refusals import check_data
from sglang_infra.run import factcache

KEYS = Path(__file__).parent / "fixtures" / "keyrings"
VENDOR = "1AEFC7BB4072D06DD2C7CE5C774A70EA3FFA4F08"
VENDOR_SUBKEY = "1513A41C128B199AFECFB1DD3CF3A144BDD8909C"
OTHER = "6355F64473E74BF9BFE7D71552F10AC6422BE575"
DEFAULTS = pinned_defaults()


def key(name):
    return (KEYS / name).read_bytes()


# --- the reading: what apt would trust -------------------------------------------------------------------------

def test_a_keyring_s_primary_keys_and_subkeys_are_read_as_gnupg_reads_them():
    assert openpgp.keys(key("vendor.asc")) == [[VENDOR, 1]]
    assert openpgp.keys(key("vendor.gpg")) == [[VENDOR, 1]]          # binary, as `gpg --export` writes it
    assert openpgp.keys(key("other.asc")) == [[OTHER, 0]]
    # an RSA 4096 key with a subkey, the size of Docker's (3.9 KB armored): its checksum and fingerprint as GnuPG's
    assert openpgp.keys(key("rsa4096.asc")) == [["78B7FD3B4CC4A0BC68AE36501EF4A2B3F62B0E24", 1]]
    assert openpgp.keys(key("vendor.asc") + key("other.asc")) == [[VENDOR, 1], [OTHER, 0]]


@pytest.mark.parametrize("broken,why", [
    (b"", "no public key"),
    (b"<html>404</html>", "no packet header"),
    (lambda k: k.replace(b"PUBLIC KEY BLOCK", b"PRIVATE KEY BLOCK"), "no armored public key block"),
    (lambda k: b"junk\n" + k, "text outside"),
    (lambda k: k.replace(b"=cNfo", b"=AAAA"), "checksum"),
    (lambda k: k[:-120] + b"\n-----END PGP PUBLIC KEY BLOCK-----\n", "base64|checksum|longer than"),   # cut short
    (bytes([0xC5, 0x01, 0x04]), "type 5"),            # a secret key packet
    (bytes([0xC6, 0x01, 0x06]), "version 6"),         # a key whose fingerprint is not pinned by SHA-1
    (bytes([0xC6, 0x20, 0x04]), "longer than the file"),
    (bytes([0xCD, 0xE0, 0x61]), "partial"),
])
def test_anything_but_a_public_keyring_is_no_keyring(broken, why):
    data = broken(key("vendor.asc")) if callable(broken) else broken
    with pytest.raises(ValueError, match=why):
        openpgp.keys(data)


def test_the_snapshot_reads_type_owner_mode_and_keys_never_through_a_link(tmp_path):
    ring = tmp_path / "docker.asc"
    assert openpgp.keyring(str(ring)) is None
    ring.write_bytes(key("vendor.asc"))
    ring.chmod(0o644)
    assert openpgp.keyring(str(ring)) == {"type": "file", "uid": os.getuid(), "mode": "644", "keys": [[VENDOR, 1]]}
    ring.write_bytes(b"x" * (openpgp.MAX_BYTES + 1))
    assert "larger than" in openpgp.keyring(str(ring))["error"]
    ring.unlink()
    (tmp_path / "elsewhere.asc").write_bytes(key("vendor.asc"))
    ring.symlink_to(tmp_path / "elsewhere.asc")
    assert openpgp.keyring(str(ring)) == {"type": "link"}
    ring.unlink()
    os.mkfifo(ring)
    assert openpgp.keyring(str(ring)) == {"type": "other"}


# --- the judgement -----------------------------------------------------------------------------------------------

SOUND = {"type": "file", "uid": 0, "mode": "644", "keys": [[VENDOR, 1]]}


@pytest.mark.parametrize("found,why", [
    (None, "absent"),
    ({**SOUND, "keys": [[VENDOR, 1], [OTHER, 0]]}, "not exactly"),      # the pinned key plus another
    ({**SOUND, "keys": [[OTHER, 0]]}, "not exactly"),                   # another key
    ({**SOUND, "keys": [[OTHER, 0], [VENDOR, 1]]}, "not exactly"),
    ({**SOUND, "uid": 1000}, "not root"),
    ({**SOUND, "mode": "664"}, "may write"),
    ({**SOUND, "mode": "646"}, "may write"),
    ({"type": "link"}, "a link"),
    ({"type": "other"}, "a other"),
    ({**SOUND, "keys": None, "error": "no public key"}, "no public key"),
])
def test_a_keyring_is_sound_only_with_exactly_the_pinned_key_root_s_and_unwritable_by_others(found, why):
    assert why in keyrings.problem(found, VENDOR)


def test_the_pinned_key_alone_with_its_subkeys_is_sound():
    assert keyrings.problem(SOUND, VENDOR) is None
    assert keyrings.problem({**SOUND, "mode": "600"}, VENDOR) is None


# --- the operation, on every run ---------------------------------------------------------------------------------

DOCKER = keyrings.VendorKey("Docker", keyrings.DOCKER, "https://example.test/linux/debian/gpg", VENDOR)


def keyring_op(found, present_only):
    snapshot = {"keyrings": {} if found is None else {DOCKER.keyring: found}}
    fake = FakeHost({"Snapshot": snapshot})
    try:
        with on_host(fake):
            commands = [command_text(c) for c in system.keyring_pinned._inner(key=DOCKER, present_only=present_only)]
    finally:
        factcache.invalidate(fake)
    return commands, fake.noops


@pytest.mark.parametrize("present_only", [True, False])
def test_a_sound_keyring_changes_nothing(present_only):
    commands, noops = keyring_op(SOUND, present_only)
    assert commands == [] and noops


@pytest.mark.parametrize("found", [{**SOUND, "keys": [[VENDOR, 1], [OTHER, 0]]}, {**SOUND, "mode": "666"},
                                   {**SOUND, "uid": 1000}, {"type": "link"}])
def test_a_keyring_that_is_anything_else_is_replaced_on_every_run(found):
    """The run's first check (present_only) replaces it whether or not this run configures the repository."""
    commands, _ = keyring_op(found, present_only=True)
    assert len(commands) == 1
    assert commands[0].startswith(
        f"python3 -I -c <hostside/write/keyring.py> {DOCKER.key_url} {DOCKER.keyring} {VENDOR} || ")
    assert "sglang_docker_apt_key_fingerprint" in commands[0]


def test_an_absent_keyring_is_made_only_where_the_run_configures_its_repository():
    assert keyring_op(None, present_only=True)[0] == []
    assert len(keyring_op(None, present_only=False)[0]) == 1


# --- the host side: a key that is not the pinned one is refused, for each vendor ---------------------------------

@pytest.fixture
def served(tmp_path):
    """A loopback HTTP server of fixtures/keyrings/ (the key URL of each vendor, in a test)."""
    handler_class = type("Quiet", (http.server.SimpleHTTPRequestHandler,),
                         {"log_message": lambda *a: None,
                          "__init__": lambda self, *a: http.server.SimpleHTTPRequestHandler.__init__(
                              self, *a, directory=str(KEYS))})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def vendor_keys(**data):
    plan = plan_for({**DEFAULTS, "sglang_docker_source": "docker", **data},
                    os={"id": "debian", "version": "13", "arch": "amd64"})
    return {k.name: k for k in plan.vendor_keys}


def test_every_vendor_s_key_is_pinned_by_its_published_full_fingerprint():
    found = vendor_keys()
    assert {name: k.fingerprint for name, k in found.items()} == {
        keyrings.DOCKER: "9DC858229FC7DD38854AE2D88D81803C0EBFCD88",
        keyrings.NVIDIA_TOOLKIT: "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
        keyrings.NVIDIA_CUDA: "02182E60104FCDC26EAE1B8597A5D4CB8793F200"}
    assert found[keyrings.DOCKER].key_url == "https://download.docker.com/linux/debian/gpg"
    mirror = vendor_keys(sglang_docker_apt_key_fingerprint=VENDOR.lower(), sglang_nvidia_cuda_apt_key_fingerprint=OTHER,
                         sglang_nvidia_toolkit_apt_key_fingerprint=VENDOR)
    assert [mirror[n].fingerprint for n in (keyrings.DOCKER, keyrings.NVIDIA_TOOLKIT, keyrings.NVIDIA_CUDA)] == [
        VENDOR, VENDOR, OTHER]


@pytest.mark.parametrize("name", [keyrings.DOCKER, keyrings.NVIDIA_TOOLKIT, keyrings.NVIDIA_CUDA])
def test_a_key_that_is_not_the_pinned_one_is_refused_for_each_vendor(name, served, tmp_path):
    pinned = vendor_keys()[name]
    dest = tmp_path / "keyrings" / f"{name}.asc"
    dest.parent.mkdir(mode=0o755)
    dest.write_bytes(key("vendor.asc") + key("other.asc"))   # what was there: an extra key, replaced or removed
    for served_key in ("vendor.asc", "other.asc"):    # served at the vendor's key URL: neither is the vendor's
        with pytest.raises(installer.Refused, match=f"not exactly the pinned {pinned.fingerprint}"):
            installer.install(f"{served}/{served_key}", str(dest), pinned.fingerprint)
        assert not dest.exists() and not dest.is_symlink()


def test_the_pinned_key_replaces_anything_else_root_s_0644_never_through_a_link(served, tmp_path):
    directory = tmp_path / "keyrings"
    directory.mkdir(mode=0o755)
    target = tmp_path / "target"
    target.write_bytes(b"not to be written through")
    dest = directory / "docker.asc"
    dest.symlink_to(target)
    installer.install(f"{served}/vendor.asc", str(dest), VENDOR)
    assert dest.read_bytes() == key("vendor.asc") and not dest.is_symlink()
    assert target.read_bytes() == b"not to be written through"
    st = dest.stat()
    assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o7777)) == (0, 0, "0o644")
    assert keyrings.problem(openpgp.keyring(str(dest)), VENDOR) is None
    installer.install(f"{served}/vendor.gpg", str(dest), VENDOR)     # binary, as served by some mirrors
    assert openpgp.keyring(str(dest))["keys"] == [[VENDOR, 1]]


def test_a_keyring_directory_others_may_write_is_refused(served, tmp_path):
    directory = tmp_path / "keyrings"
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(installer.Refused, match="only root may write"):
        installer.install(f"{served}/vendor.asc", str(directory / "docker.asc"), VENDOR)
    assert list(directory.iterdir()) == []


def test_a_download_larger_than_any_key_is_refused(served):
    with pytest.raises(installer.Refused, match="more than 10 bytes"):
        installer.fetch(f"{served}/vendor.asc", limit=10)


# --- the data ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key_name", ["sglang_docker_apt_key_fingerprint", "sglang_nvidia_toolkit_apt_key_fingerprint",
                                      "sglang_nvidia_cuda_apt_key_fingerprint"])
@pytest.mark.parametrize("value", ["0EBFCD88", "9DC8 5822 9FC7 DD38 854A E2D8 8D81 803C 0EBF CD88", 42,
                                   "Z" * 40])
def test_a_fingerprint_that_is_not_40_hex_digits_is_refused_before_any_change(key_name, value):
    problems = check_data("gpu-01", {**DEFAULTS, key_name: value})
    assert any(key_name in str(problem) and "40 hex digits" in str(problem) for problem in problems)


# --- issue 52 item 7: the driver unpinned -----------------------------------------------------------------------

def test_with_no_driver_pinned_the_deploy_s_pin_and_holds_are_removed_and_only_then():
    """tasks/gpu_driver.py asks for operations/system.driver_unpinned exactly when sglang_nvidia_driver_version is
    None; with a pin, the pin stays. The driver packages themselves are never removed."""
    from test_driver_install import plan as driver_plan
    from test_driver_install import task_calls

    from sglang_infra.plan.resolve import snapshot_spec

    assert task_calls(driver_plan(None)) == [("driver_unpinned", {
        "args": (), "name": "Ensure no driver pin or hold of the deploy's is left (sglang_nvidia_driver_version None)",
        "preferences": "/etc/apt/preferences.d/sglang-nvidia-driver"})]
    assert "driver_unpinned" not in [name for name, _ in task_calls(driver_plan("580.105.08"))]
    assert "/etc/apt/preferences.d" in snapshot_spec(DEFAULTS)["system_dirs"]   # the snapshot sees the pin


def test_the_unhold_names_every_spelling_of_the_driver_the_deploy_holds_and_nothing_else():
    import re

    from sglang_infra.machine.gpus import driver_packages

    pattern = re.compile(system._HELD_DRIVER)
    held = [name.split("=")[0] for version in ("535.261.03", "580.105.08") for family in ("debian", "ubuntu")
            for open_modules in (True, False) for name in driver_packages(version, family, open_modules)]
    assert held and all(pattern.fullmatch(name) for name in held), held
    assert not any(pattern.fullmatch(name) for name in ("nvidia-container-toolkit", "libnvidia-container1",
                                                        "nvidia-driver-580-server-open-extra", "docker-ce"))
