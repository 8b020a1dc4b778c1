"""One named user's or group's entry in a directory's POSIX access ACL: read (the snapshot) and set (the peer
door's task).

The peer door's nginx workers run as a user and group of their own (`sglang-door`, peerdoor.WORKER_USER), outside
the account's group, which may write in hf-cache, and apart from the shared `www-data` whose other services would
pass where the door passes. They reach the verified blobs through the cache's "other" bits (directories 2775,
blobs 0664: read, never write); the one directory on the way that others may not pass is the home (0750). An ACL
entry `group:sglang-door:--x` on the home lets the door's workers pass through it, nothing more: no listing, no
write, and nothing below the home that others may not read. The ACL is read and written as the kernel's
`system.posix_acl_access` attribute (no package needed), through a descriptor of the directory opened without
following a link.

usage: acl.py grant|revoke DIRECTORY user|group NAME
"""

import grp
import os
import pwd
import stat
import struct
import sys

XATTR = "system.posix_acl_access"
VERSION = 2
# Entry tags (linux/posix_acl.h) and the id the kernel stores for the entries that name no one.
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
NO_ID = 0xFFFFFFFF
SEARCH = 0o1
_ENTRY = struct.Struct("<HHI")


def _open(path):
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)


def entries(fd):
    """The directory's access ACL as [(tag, perm, id)]; its mode's three entries when it has no ACL."""
    try:
        raw = os.getxattr(fd, XATTR)
    except OSError:
        raw = b""
    if len(raw) >= 4 and struct.unpack("<I", raw[:4])[0] == VERSION and (len(raw) - 4) % _ENTRY.size == 0:
        return [_ENTRY.unpack_from(raw, 4 + k * _ENTRY.size) for k in range((len(raw) - 4) // _ENTRY.size)]
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    return [(USER_OBJ, mode >> 6 & 7, NO_ID), (GROUP_OBJ, mode >> 3 & 7, NO_ID), (OTHER, mode & 7, NO_ID)]


def _id(name, kind):
    return pwd.getpwnam(name).pw_uid if kind == "user" else grp.getgrnam(name).gr_gid


def _named(found, name_id, kind):
    tag = USER if kind == "user" else GROUP
    return [perm for tag_, perm, id_ in found if tag_ == tag and id_ == name_id]


def _read(path, name, kind):
    """(the entries of ``name``'s kind and id, the mask's) in the ACL of ``path``; None when the user or group, or
    the directory, is not there."""
    try:
        name_id = _id(name, kind)
        fd = _open(path)
    except (KeyError, OSError):
        return None
    try:
        found = entries(fd)
    finally:
        os.close(fd)
    return _named(found, name_id, kind), [perm for tag, perm, _ in found if tag == MASK]


def search_only(path, name, kind="user"):
    """True when the user (``kind`` "user") or group ``name`` may pass through ``path`` by its ACL and no more (its
    entry --x, the mask letting it through); False when it has no entry or another; None when the user or group,
    or the directory, is not there."""
    read = _read(path, name, kind)
    if read is None:
        return None
    named, mask = read
    return named == [SEARCH] and bool(mask) and bool(mask[0] & SEARCH)


def has_entry(path, name, kind="user"):
    """Whether the ACL of ``path`` has any entry of the user or group ``name`` (None: it or the directory is not
    there)."""
    read = _read(path, name, kind)
    return None if read is None else bool(read[0])


def _set(path, name, perm, kind="user"):
    """The entry of the user or group ``name`` in the ACL of ``path`` made ``perm`` (None: removed); the others kept;
    the mask the union of the group class, as setfacl works it out. Through one descriptor."""
    name_id, tag = _id(name, kind), USER if kind == "user" else GROUP
    fd = _open(path)
    try:
        kept = [e for e in entries(fd) if e[0] != MASK and not (e[0] == tag and e[2] == name_id)]
        if perm is not None:
            kept.append((tag, perm, name_id))
        group_class = [p for tag_, p, _ in kept if tag_ in (USER, GROUP_OBJ, GROUP)]
        if any(tag_ in (USER, GROUP) for tag_, _, _ in kept):
            mask = 0
            for p in group_class:
                mask |= p
            kept.append((MASK, mask, NO_ID))
        kept.sort(key=lambda e: (e[0], e[2]))
        if any(tag_ in (USER, GROUP) for tag_, _, _ in kept):
            os.setxattr(fd, XATTR, struct.pack("<I", VERSION) + b"".join(_ENTRY.pack(*e) for e in kept))
        else:
            try:
                os.removexattr(fd, XATTR)
            except OSError:
                pass
    finally:
        os.close(fd)


def main(argv):
    if len(argv) != 4 or argv[0] not in ("grant", "revoke") or argv[2] not in ("user", "group"):
        print(__doc__.rsplit("usage: ", 1)[1].strip(), file=sys.stderr)
        return 2
    action, path, kind, name = argv
    _set(path, name, SEARCH if action == "grant" else None, kind)
    if action == "grant" and not search_only(path, name, kind):
        print(f"acl: {kind} {name} still cannot pass through {path} alone (a file system without POSIX ACLs?)",
              file=sys.stderr)
        return 1
    print(f"acl: {kind} {name} {'may pass through' if action == 'grant' else 'has no entry on'} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
