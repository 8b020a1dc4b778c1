"""hostside/write/acl.py: one named user's or group's entry in a directory's POSIX access ACL, written as the
kernel's system.posix_acl_access attribute (the peer door's workers pass through the home by their group's,
nothing more). What the entry lets the door's workers do on a real host: tests/e2e/test_peer_door.py."""

from __future__ import annotations

import grp
import os
import pwd

import pytest

from sglang_infra.hostside.write import acl

USER = "www-data"


@pytest.fixture
def home(tmp_path):
    try:
        pwd.getpwnam(USER)
    except KeyError:
        pytest.skip(f"no {USER} user on this machine")
    path = tmp_path / "home"
    path.mkdir()
    path.chmod(0o750)
    return path


def acl_of(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return acl.entries(fd)
    finally:
        os.close(fd)


def test_grant_adds_search_alone_and_keeps_the_mode(home):
    assert acl.search_only(str(home), USER) is False
    assert acl.main(["grant", str(home), "user", USER]) == 0
    uid = pwd.getpwnam(USER).pw_uid
    assert acl_of(home) == [(acl.USER_OBJ, 7, acl.NO_ID), (acl.USER, 1, uid), (acl.GROUP_OBJ, 5, acl.NO_ID),
                            (acl.MASK, 5, acl.NO_ID), (acl.OTHER, 0, acl.NO_ID)]
    assert oct(home.stat().st_mode & 0o7777) == "0o750"
    assert acl.search_only(str(home), USER) is True


def test_revoke_takes_the_entry_back_and_keeps_another_users(home):
    other = next(p for p in pwd.getpwall() if p.pw_name not in (USER, "root"))
    acl._set(str(home), other.pw_name, 5)
    acl.main(["grant", str(home), "user", USER])
    assert acl.main(["revoke", str(home), "user", USER]) == 0
    assert acl.search_only(str(home), USER) is False
    assert (acl.USER, 5, other.pw_uid) in acl_of(home)
    acl._set(str(home), other.pw_name, None)
    with pytest.raises(OSError):
        os.getxattr(home, acl.XATTR)   # no named entry left: no ACL at all, the mode alone


def test_a_wider_entry_or_a_link_is_not_search_only(home, tmp_path):
    acl._set(str(home), USER, 5)
    assert acl.search_only(str(home), USER) is False
    link = tmp_path / "link"
    link.symlink_to(home)
    assert acl.search_only(str(link), USER) is None   # never through a link


def test_a_group_s_entry_is_granted_and_revoked_apart_from_a_user_s(home):
    """Issue 52 item 8: the door's workers pass by a group of their own; www-data's entry of earlier deploys is
    revoked on its own, the group's kept."""
    group = next(g for g in grp.getgrall() if g.gr_name != "root")
    acl.main(["grant", str(home), "user", USER])
    assert acl.search_only(str(home), group.gr_name, "group") is False
    assert acl.main(["grant", str(home), "group", group.gr_name]) == 0
    assert acl.search_only(str(home), group.gr_name, "group") is True
    assert (acl.GROUP, 1, group.gr_gid) in acl_of(home)
    assert acl.main(["revoke", str(home), "user", USER]) == 0
    assert acl.has_entry(str(home), USER) is False and acl.search_only(str(home), group.gr_name, "group") is True
    assert acl.main(["revoke", str(home), "group", group.gr_name]) == 0
    assert acl.has_entry(str(home), group.gr_name, "group") is False
    assert acl.search_only(str(home), "no-such-group-here", "group") is None
    assert acl.main(["grant", str(home), USER]) == 2   # the old form names no kind: usage
