"""One named user's entry in a directory's POSIX access ACL: read (the snapshot) and set (the peer door's task).

The peer door's nginx workers run as `www-data` alone, outside the account's group, which may write in hf-cache.
They reach the verified blobs through the cache's "other" bits (directories 2775, blobs 0664: read, never write);
the one directory on the way that others may not pass is the home (0750). An ACL entry `user:www-data:--x` on
the home lets that one user pass through it, nothing more: no listing, no write, and nothing below the home that
others may not read. The ACL is read and written as the kernel's `system.posix_acl_access` attribute (no
package needed), through a descriptor of the directory opened without following a link.

usage: acl.py grant|revoke DIRECTORY USER
"""

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


def search_only(path, user):
    """True when ``user`` may pass through ``path`` by its ACL and no more (its entry --x, the mask letting it
    through); False when it has no entry or another; None when the user or the directory is not there."""
    try:
        uid = pwd.getpwnam(user).pw_uid
        fd = _open(path)
    except (KeyError, OSError):
        return None
    try:
        found = entries(fd)
    finally:
        os.close(fd)
    named = [perm for tag, perm, id_ in found if tag == USER and id_ == uid]
    mask = [perm for tag, perm, _ in found if tag == MASK]
    return named == [SEARCH] and bool(mask) and bool(mask[0] & SEARCH)


def _set(path, user, perm):
    """``user``'s entry in the ACL of ``path`` made ``perm`` (None: removed); the others kept; the mask the union
    of the group class, as setfacl works it out. Through one descriptor."""
    uid = pwd.getpwnam(user).pw_uid
    fd = _open(path)
    try:
        kept = [e for e in entries(fd) if e[0] != MASK and not (e[0] == USER and e[2] == uid)]
        if perm is not None:
            kept.append((USER, perm, uid))
        group_class = [p for tag, p, _ in kept if tag in (USER, GROUP_OBJ, GROUP)]
        if any(tag in (USER, GROUP) for tag, _, _ in kept):
            mask = 0
            for p in group_class:
                mask |= p
            kept.append((MASK, mask, NO_ID))
        kept.sort(key=lambda e: (e[0], e[2]))
        if any(tag in (USER, GROUP) for tag, _, _ in kept):
            os.setxattr(fd, XATTR, struct.pack("<I", VERSION) + b"".join(_ENTRY.pack(*e) for e in kept))
        else:
            try:
                os.removexattr(fd, XATTR)
            except OSError:
                pass
    finally:
        os.close(fd)


def main(argv):
    if len(argv) != 3 or argv[0] not in ("grant", "revoke"):
        print(__doc__.rsplit("usage: ", 1)[1].strip(), file=sys.stderr)
        return 2
    action, path, user = argv
    _set(path, user, SEARCH if action == "grant" else None)
    if action == "grant" and not search_only(path, user):
        print(f"acl: {user} still cannot pass through {path} alone (a file system without POSIX ACLs?)",
              file=sys.stderr)
        return 1
    print(f"acl: {user} {'may pass through' if action == 'grant' else 'has no entry on'} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
