"""unitstate: systemd units' state asked of PID 1 on its private D-Bus socket, as `systemctl show` printed it,
without the process or every property of every interface. A fake PID 1 here speaks the D-Bus wire format
(written from the specification, apart from the module's own encoder): the requests it decodes are the ones
asked, and its answers, in either byte order, come back as systemctl's."""

import socket
import struct

import pytest
from conftest import OsThread

from sglang_infra.hostside.read import snapshot as hostside_snapshot
from sglang_infra.hostside.read import unitstate

UNITS = {  # what PID 1 holds: the unit each path names, its properties
    "docker.service": {"Id": "docker.service", "LoadState": "loaded", "ActiveState": "active",
                       "UnitFileState": "enabled", "NeedDaemonReload": False},
    "sshd.service": {"Id": "ssh.service", "LoadState": "loaded", "ActiveState": "active",   # an alias
                     "UnitFileState": "enabled", "NeedDaemonReload": True},
    "nginx.service": {"Id": "nginx.service", "LoadState": "not-found", "ActiveState": "inactive",
                      "UnitFileState": "", "NeedDaemonReload": False},
}


def pad(buf: bytearray, to: int) -> None:
    buf += b"\0" * (-len(buf) % to)


def decode_request(raw: bytes) -> tuple[int, dict, list[str], int]:
    """(serial, header fields, the body's strings, the message's length) of a little-endian METHOD_CALL."""
    assert raw[:4] == b"l\1\0\1"
    body_size, serial, fields_size = struct.unpack_from("<III", raw, 4)
    fields, at = {}, 16
    while at < 16 + fields_size:
        at += -at % 8
        code, size = raw[at], raw[at + 1]
        kind = raw[at + 2:at + 2 + size].decode()
        at += 3 + size
        if kind == "g":
            fields[code] = raw[at + 1:at + 1 + raw[at]].decode()
            at += 2 + raw[at]
        else:
            at += -at % 4
            (length,) = struct.unpack_from("<I", raw, at)
            fields[code] = raw[at + 4:at + 4 + length].decode()
            at += 5 + length
    at = 16 + fields_size + (-fields_size % 8)
    end, strings = at + body_size, []
    while at < end:
        at += -at % 4
        (length,) = struct.unpack_from("<I", raw, at)
        strings.append(raw[at + 4:at + 4 + length].decode())
        at += 5 + length
    return serial, fields, strings, end


def reply(serial: int, value, order: str = "<", kind: int = 2, reply_serial: int | None = None) -> bytes:
    """A METHOD_RETURN (or ERROR, kind 3; SIGNAL, kind 4) of one variant of s or b."""
    fields = bytearray()
    signature = "v" if kind == 2 else "s"
    for code, sig, field in ((5, "u", reply_serial or serial), (8, "g", signature)):
        pad(fields, 8)
        fields += bytes([code, 1]) + sig.encode() + b"\0"
        if sig == "u":
            pad(fields, 4)
            fields += struct.pack(order + "I", field)
        else:
            fields += bytes([len(field)]) + field.encode() + b"\0"
    body = bytearray()
    if kind == 2:
        sig = "b" if isinstance(value, bool) else "s"
        body += b"\1" + sig.encode() + b"\0"
        pad(body, 4)
        body += struct.pack(order + "I", int(value)) if sig == "b" else \
            struct.pack(order + "I", len(value.encode())) + value.encode() + b"\0"
    else:
        body += struct.pack(order + "I", 5) + b"error\0"
    head = (b"l" if order == "<" else b"B") + bytes([kind, 0, 1]) + struct.pack(
        order + "III", len(body), 1000 + serial, len(fields)) + fields
    return bytes(head) + b"\0" * (-len(head) % 8) + bytes(body)


def whole(data: bytes) -> bool:
    try:
        return len(data) >= decode_request(data)[3]
    except (AssertionError, struct.error, IndexError, UnicodeDecodeError):
        return False


@pytest.fixture
def pid1(tmp_path, monkeypatch):
    """A fake PID 1 on a private socket; ``behaviour`` sets how it answers; ``asked`` records each request."""
    path = str(tmp_path / "private")
    server = OsThread.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    state = {"order": "<", "asked": [], "auth": [], "error_for": None, "signal_first": False}
    paths = {unitstate.unit_path(name): props for name, props in UNITS.items()}

    def serve():
        try:
            connection, _ = server.accept()
        except OSError:
            return
        with connection:
            data = b""
            while b"BEGIN\r\n" not in data:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                data += chunk
                if b"\r\n" in data and not state["auth"]:
                    state["auth"].append(data.split(b"\r\n")[0])
                    connection.sendall(b"OK 0123456789abcdef\r\n")
            data = data.split(b"BEGIN\r\n", 1)[1]
            answered = 0
            if state["signal_first"]:
                connection.sendall(reply(0, None, state["order"], kind=4, reply_serial=0))
            while answered < len(UNITS) * len(unitstate.PROPERTIES):
                while not whole(data):
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                serial, fields, strings, end = decode_request(data)
                data = data[end:]
                state["asked"].append((fields[1], fields[2], fields[3], fields[8], strings))
                props = paths[fields[1]]
                kind = 3 if state["error_for"] == strings[1] else 2
                connection.sendall(reply(serial, props[strings[1]], state["order"], kind=kind, reply_serial=serial))
                answered += 1

    thread = OsThread(serve)
    monkeypatch.setattr(unitstate, "PRIVATE", path)
    monkeypatch.setattr(unitstate.os, "geteuid", lambda: 0)
    yield state
    OsThread.stop(server)
    thread.join(timeout=5)


@pytest.mark.parametrize("order", ["<", ">"])
def test_each_property_is_asked_of_pid1_and_read_back_in_either_byte_order(pid1, order):
    pid1["order"] = order
    found = unitstate.states(list(UNITS), 5)
    assert found == UNITS
    assert pid1["auth"] == [b"\0AUTH EXTERNAL 30"]   # uid 0, in hex digits of its decimal text
    assert sorted(pid1["asked"]) == sorted(
        (unitstate.unit_path(name), "org.freedesktop.DBus.Properties", "Get", "ss", [unitstate.UNIT, prop])
        for name in UNITS for prop in unitstate.PROPERTIES)


def test_a_signal_between_the_answers_is_skipped(pid1):
    pid1["signal_first"] = True
    assert unitstate.states(list(UNITS), 5) == UNITS


def test_an_error_from_pid1_is_no_answer(pid1):
    pid1["error_for"] = "UnitFileState"
    assert unitstate.states(list(UNITS), 5) is None


def test_not_root_or_no_systemd_is_no_answer(tmp_path, monkeypatch):
    monkeypatch.setattr(unitstate, "PRIVATE", str(tmp_path / "absent"))
    monkeypatch.setattr(unitstate.os, "geteuid", lambda: 0)
    assert unitstate.states(["docker.service"], 5) is None
    (tmp_path / "absent").write_text("")
    monkeypatch.setattr(unitstate.os, "geteuid", lambda: 1000)
    assert unitstate.states(["docker.service"], 5) is None


def test_a_unit_names_object_path_is_systemds_encoding():
    assert unitstate.unit_path("docker.service") == "/org/freedesktop/systemd1/unit/docker_2eservice"
    assert unitstate.unit_path("0a-b@c.timer") == "/org/freedesktop/systemd1/unit/_30a_2db_40c_2etimer"
    assert unitstate.unit_path("é") == "/org/freedesktop/systemd1/unit/_c3_a9"


def test_the_snapshot_reads_units_from_pid1_as_systemctl_printed_them(pid1, monkeypatch):
    """services() from PID 1's answers: the alias under its own Id (not asked for: left out, as before)."""
    monkeypatch.setattr(hostside_snapshot, "_run", lambda *argv: pytest.fail(f"started {argv}"))
    assert hostside_snapshot.services(list(UNITS)) == {
        "docker.service": {"loaded": True, "active": "active", "enabled": "enabled", "reload_needed": False},
        "nginx.service": {"loaded": False, "active": "inactive", "enabled": "", "reload_needed": False}}


def test_without_pid1s_answer_the_snapshot_asks_systemctl(monkeypatch):
    monkeypatch.setattr(unitstate, "states", lambda units, timeout: None)
    asked = []
    monkeypatch.setattr(hostside_snapshot, "_run", lambda *argv: asked.append(argv) or
                        "Id=docker.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n"
                        "NeedDaemonReload=yes\n")
    assert hostside_snapshot.services(["docker.service"]) == {
        "docker.service": {"loaded": True, "active": "active", "enabled": "enabled", "reload_needed": True}}
    assert asked[0][:2] == ("systemctl", "show")
