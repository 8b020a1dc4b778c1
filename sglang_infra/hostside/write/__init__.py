"""The host's writes: programs through which root changes files and permissions on a host, never through a link,
run inline (`python3 -I -c`) per command.

They may import hostside/'s shared modules (`from .. import safefs`); no program the hosts keep imports them.
Every module, a line each (tests/unit/test_hostside_index.py keeps the list whole):

    hold.py     a run's hold on the host: one run at a time, its holder named, freed when the run is gone
    put.py      every file the deploy writes, from stdin, checked, never through a link
    acl.py      one named user's entry in a directory's POSIX access ACL (the peer door's nginx workers)
    repair.py   drift repair below the home, through safefs's walk that never follows a symlink
    keyring.py  a vendor's apt keyring made anew from its key URL, holding exactly the pinned key, else removed
    restamp.py  an earlier version's gate stamp of the host as it is, rewritten in this version's form
"""
