"""The state of systemd units, asked of PID 1 itself on its private D-Bus socket (root only): the five properties
the snapshot reads, one Properties.Get each, all sent at once. `systemctl show` asked for every property of
every interface of each unit and started a process: 0.019 s of a host's CPU per read, PID 1's share the larger
(docs/benchmarks.md). None when PID 1 cannot be asked so (not root, no systemd, any error): the caller runs
systemctl then."""

import _socket
import os
import struct
import time

PRIVATE = "/run/systemd/private"
PROPERTIES = ("Id", "LoadState", "ActiveState", "UnitFileState", "NeedDaemonReload")
UNIT = "org.freedesktop.systemd1.Unit"
LIMIT = 1 << 20   # bytes of answers, for a few short strings each


def unit_path(name):
    """The unit's object path (sd_bus_path_encode): each byte not [A-Za-z0-9], and a leading digit, as _xx."""
    return "/org/freedesktop/systemd1/unit/" + "".join(
        c if c.isascii() and c.isalnum() and not (i == 0 and c.isdigit()) else "".join(f"_{b:02x}" for b in c.encode())
        for i, c in enumerate(name)) if name else "/org/freedesktop/systemd1/unit/_"


def _pad(buf, to):
    buf += b"\0" * (-len(buf) % to)


def _string(buf, text, size="I"):
    raw = text.encode()
    if size == "I":
        _pad(buf, 4)
    buf += struct.pack("<" + size, len(raw)) + raw + b"\0"


def call(serial, path, member, body_signature, *args, interface="org.freedesktop.DBus.Properties"):
    """A METHOD_CALL message (little-endian) of string arguments."""
    body = bytearray()
    for arg in args:
        _string(body, arg)
    fields = bytearray()
    for code, kind, value in ((1, "o", path), (2, "s", interface), (3, "s", member), (8, "g", body_signature)):
        _pad(fields, 8)
        fields += bytes([code]) + b"\1" + kind.encode() + b"\0"
        _string(fields, value, "B" if kind == "g" else "I")
    head = b"l\1\0\1" + struct.pack("<III", len(body), serial, len(fields)) + fields
    return bytes(head) + b"\0" * (-len(head) % 8) + bytes(body)


def _value(raw, at, kind, order):
    """(value, next offset) of one basic value of ``kind`` at ``at``: s, o, g, u or b."""
    if kind == "g":
        size = raw[at]
        return raw[at + 1:at + 1 + size].decode(), at + 2 + size
    at += -at % 4
    (number,) = struct.unpack_from(order + "I", raw, at)
    if kind in "so":
        return raw[at + 4:at + 4 + number].decode(), at + 5 + number
    if kind == "b":
        return number == 1, at + 4
    return number, at + 4


def parse(raw):
    """(kind, reply serial, value) of the message in ``raw``, a METHOD_RETURN of one variant of s or b, or None."""
    order = {108: "<", 66: ">"}[raw[0]]
    body_size, _, fields_size = struct.unpack_from(order + "III", raw, 4)
    fields, at, end = {}, 16, 16 + fields_size
    while at < end:
        at += -at % 8
        code, sig_size = raw[at], raw[at + 1]
        kind = raw[at + 2:at + 2 + sig_size].decode()
        value, at = _value(raw, at + 3 + sig_size, kind, order)
        fields[code] = value
    at = end + (-end % 8)
    value = None
    if raw[1] == 2 and fields.get(8) == "v":
        kind, at = _value(raw, at, "g", order)
        value = _value(raw, at, kind, order)[0] if kind in ("s", "b") else None
    return raw[1], fields.get(5), value


def _messages(connection, deadline):
    """Each whole message PID 1 sends, until the deadline; bounded by LIMIT."""
    buffered, size = b"", 0
    while time.monotonic() < deadline:
        while len(buffered) >= 16:
            order = "<" if buffered[:1] == b"l" else ">"
            body_size, _, fields_size = struct.unpack_from(order + "III", buffered, 4)
            whole = 16 + fields_size + (-fields_size % 8) + body_size
            if len(buffered) < whole:
                break
            yield buffered[:whole]
            buffered = buffered[whole:]
        connection.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = connection.recv(1 << 16)
        size += len(chunk)
        if not chunk or size > LIMIT:
            return
        buffered += chunk


def states(units, timeout, path=None):
    """{unit: {property: value}} of PROPERTIES for each of ``units``, or None (see above)."""
    path = path or PRIVATE
    if os.geteuid() != 0 or not os.path.exists(path):
        return None
    asked = {}
    out = bytearray()
    for unit in units:
        for prop in PROPERTIES:
            serial = len(asked) + 1
            asked[serial] = (unit, prop)
            out += call(serial, unit_path(unit), "Get", "ss", UNIT, prop)
    found = {}
    try:
        connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            connection.settimeout(timeout)
            connection.connect(path)
            connection.sendall(b"\0AUTH EXTERNAL " + str(os.geteuid()).encode().hex().encode() + b"\r\n")
            if not connection.recv(4096).startswith(b"OK "):
                return None
            connection.sendall(b"BEGIN\r\n" + out)
            for message in _messages(connection, time.monotonic() + timeout):
                kind, serial, value = parse(message)
                if serial in asked:
                    if kind != 2 or value is None:
                        return None
                    unit, prop = asked.pop(serial)
                    found.setdefault(unit, {})[prop] = value
                if not asked:
                    return found
        finally:
            connection.close()
    except (OSError, ValueError, KeyError, IndexError, struct.error):
        return None
    return None
