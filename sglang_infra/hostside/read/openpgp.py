"""A vendor's apt keyring read as apt would trust it: which primary keys it holds (their full fingerprints and
how many subkeys each brings), and the file's type, owner and mode, never through a link.

apt trusts every key of a `signed-by` keyring, so the deploy's promise (operations/system.vendor_repository) is
that each vendor keyring holds exactly one primary key, the pinned one, with its subkeys, in a regular file of
root's that no group or other user can write. The snapshot reads each keyring with keyring() on every run;
write/keyring.py checks a downloaded key with keys() before it takes the keyring's name.

OpenPGP (RFC 4880, RFC 9580): packets in the old or the new header format, binary or ASCII-armored; a version 4
key's fingerprint is the SHA-1 of 0x99, the key packet's two-octet length and its body. A key of another version,
a packet that is not part of a public key (a secret key, a literal message, a partial length), a broken header or
armor makes the whole file unreadable as a keyring: keys() raises ValueError naming why.
"""

import base64
import binascii
import hashlib
import os
import stat

MAX_BYTES = 1 << 20         # a vendor's public key is a few KiB; a larger keyring is not one the deploy wrote
PUBLIC_KEY, PUBLIC_SUBKEY = 6, 14
# Packets a public keyring holds besides its keys: signatures, trust, user IDs and attributes, padding.
KEY_PARTS = {2, 12, 13, 17, 21}
_BEGIN, _END = b"-----BEGIN PGP PUBLIC KEY BLOCK-----", b"-----END PGP PUBLIC KEY BLOCK-----"


def armored(data):
    """(the blocks' data, the text outside them) of ``data``: the groups of
    re.finditer(rb"-----BEGIN PGP PUBLIC KEY BLOCK-----\\r?\\n(.*?)-----END PGP PUBLIC KEY BLOCK-----", data, re.S)
    and what its sub(b"", data) leaves, without importing re (a read's CPU, docs/benchmarks.md;
    tests/unit/test_read_imports.py holds the two equal)."""
    blocks, outside, at, kept = [], [], 0, 0
    while (start := data.find(_BEGIN, at)) >= 0:
        body = start + len(_BEGIN)
        body += 2 if data.startswith(b"\r\n", body) else 1 if data.startswith(b"\n", body) else 0
        if body == start + len(_BEGIN):
            at = start + 1
            continue
        end = data.find(_END, body)
        if end < 0:
            break
        blocks.append(data[body:end])
        outside.append(data[kept:start])
        at = kept = end + len(_END)
    return blocks, b"".join(outside) + data[kept:]


def _dearmor(data):
    """The binary packets of an armored keyring: every public key block, and nothing but blanks around them."""
    blocks, outside = armored(data)
    if not blocks:
        raise ValueError("no armored public key block")
    if outside.strip():
        raise ValueError("text outside the armored public key blocks")
    binary = b""
    for block in blocks:
        lines = block.replace(b"\r", b"").split(b"\n")
        if b"" not in lines:
            raise ValueError("an armored block without the blank line before its data")
        body = lines[lines.index(b"") + 1:]
        if any(b":" not in line for line in lines[:lines.index(b"")]):
            raise ValueError("an armor header that is not 'Name: value'")
        text = b"".join(line.strip() for line in body if not line.startswith(b"="))
        checksums = [line.strip()[1:] for line in body if line.startswith(b"=")]
        try:
            decoded = base64.b64decode(text, validate=True)
            crc = [base64.b64decode(c, validate=True) for c in checksums]
        except (binascii.Error, ValueError):
            raise ValueError("armored data that is not base64") from None
        if crc and crc != [_crc24(decoded).to_bytes(3, "big")]:
            raise ValueError("an armored block whose checksum does not match its data")
        binary += decoded
    return binary


def _crc24_table():
    table = []
    for octet in range(256):
        crc = octet << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
        table.append(crc & 0xFFFFFF)
    return table


_CRC24 = _crc24_table()


def _crc24(data):
    """The armor's checksum (RFC 4880, 6.1), a table's lookup per byte: the snapshot reads every keyring each run."""
    crc = 0xB704CE
    for octet in data:
        crc = ((crc << 8) & 0xFFFFFF) ^ _CRC24[(crc >> 16) ^ octet]
    return crc


def _packets(data):
    """(tag, body) of each packet of ``data``."""
    at = 0
    while at < len(data):
        first = data[at]
        if not first & 0x80:
            raise ValueError(f"no packet header at byte {at}")
        if first & 0x40:   # the new format
            tag, at = first & 0x3F, at + 1
            if at >= len(data):
                raise ValueError("a packet header cut short")
            octet = data[at]
            if octet < 192:
                length, at = octet, at + 1
            elif octet < 224:
                if at + 1 >= len(data):
                    raise ValueError("a packet header cut short")
                length, at = ((octet - 192) << 8) + data[at + 1] + 192, at + 2
            elif octet == 255:
                length, at = int.from_bytes(data[at + 1:at + 5], "big"), at + 5
            else:
                raise ValueError("a partial-length packet (a key is never one)")
        else:              # the old format
            tag, kind, at = (first >> 2) & 0x0F, first & 0x03, at + 1
            if kind == 3:
                raise ValueError("a packet of indeterminate length (a key is never one)")
            size = (1, 2, 4)[kind]
            length, at = int.from_bytes(data[at:at + size], "big"), at + size
        if at + length > len(data):
            raise ValueError("a packet longer than the file")
        yield tag, data[at:at + length]
        at += length


def fingerprint(body):
    """A version 4 key packet's full fingerprint, 40 upper-case hex digits."""
    if not body or body[0] != 4:
        raise ValueError(f"a version {body[0] if body else '?'} key (only version 4 keys are pinned)")
    return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()


def keys(data):
    """[[fingerprint, subkeys], ...]: each primary key of the keyring ``data`` (armored or binary), in order, with
    the number of subkeys that follow it. ValueError for anything that is not a public keyring."""
    if b"-----BEGIN PGP" in data:
        data = _dearmor(data)
    found = []
    for tag, body in _packets(data):
        if tag == PUBLIC_KEY:
            found.append([fingerprint(body), 0])
        elif tag == PUBLIC_SUBKEY:
            if not found:
                raise ValueError("a subkey before any primary key")
            fingerprint(body)
            found[-1][1] += 1
        elif tag not in KEY_PARTS:
            raise ValueError(f"a packet of type {tag}, which is no part of a public key")
    if not found:
        raise ValueError("no public key")
    return found


def keyring(path):
    """What the keyring at ``path`` is: None when absent; else {"type": "file", "link" or "other", and for a regular
    file "uid", "mode" (octal text), "keys" (keys()) or "error" (why it is no keyring)}. Read with O_NOFOLLOW, at
    most MAX_BYTES."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"type": "link"}
    if not stat.S_ISREG(st.st_mode):
        return {"type": "other"}
    out = {"type": "file", "uid": st.st_uid, "mode": format(stat.S_IMODE(st.st_mode), "o")}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        return dict(out, error=f"unreadable: {error.strerror}")
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        data = handle.read(MAX_BYTES + 1)
    out.update(uid=st.st_uid, mode=format(stat.S_IMODE(st.st_mode), "o"))
    if not stat.S_ISREG(st.st_mode):
        return {"type": "other"}
    if len(data) > MAX_BYTES:
        return dict(out, error=f"larger than {MAX_BYTES} bytes")
    try:
        return dict(out, keys=keys(data))
    except ValueError as error:
        return dict(out, error=str(error))
