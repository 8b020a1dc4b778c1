"""The host's reads: programs that look at a host and change nothing, run inline (`python3 -I -c`) per command.

They may import hostside/'s shared modules (`from .. import safefs`) and each other; no program the hosts keep
imports them, so they move and change without touching a converged host. Every module, a line each
(tests/unit/test_hostside_index.py keeps the list whole):

    snapshot.py     the one read of a host: everything the deploy compares against, as one JSON document
    codecache.py    the snapshot's compiled code kept by root, keyed by its sources' digest (the sources on a miss)
    settled.py      the settled stamp: root's record of the last run that found the host as its plan wants it
    cachestate.py   the model cache, read without the Hub (used by snapshot.py)
    doorcheck.py    whether the peer door's address and port are held by the door's own nginx, and its cert
    openpgp.py      a vendor apt keyring's primary keys (full fingerprints), type, owner and mode, as apt trusts it
    reach.py        whether each source the plan will fetch from answers, asked from the host (run/sources.py)
    unitstate.py    systemd units' state asked of PID 1 on its private D-Bus socket (used by snapshot.py)
"""
