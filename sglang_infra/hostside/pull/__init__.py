"""The pull: host programs that run in the pull's venv (huggingface_hub), as `sglang`.

They may import the standard-library modules of hostside/ (`from .. import safefs`); nothing outside this
folder imports them but the pull itself, the lock's resolver (models/lockgen.py: hublimits.py, transfer.py) and
the tests. Every module, a line each (tests/unit/test_hostside_index.py keeps the list whole):

    hfpull.py        the pull program's command line: `pull` and `prune`, exit codes
    pull.py          the pull itself: one revision listed, fetched, verified and linked into the cache (Puller)
    transfer.py      the pull's HTTP: where a file is served, ranged GETs with retries and backoff, one file's bytes
    ranges.py        which byte ranges of a blob a pull fetches, and the sidecar of what each holds
    peers.py         the peer side: which peer doors hold a blob, its ranges from several at once, each request
                     bounded, a peer that sent wrong bytes found and named
    hublimits.py     every answer from the Hub or a mirror bounded in bytes and in total time (used by lock.sh too)
    pull_locks.py    the pull's flock'ed files, shared with huggingface_hub's per-blob locks
    pull_errors.py   the pull's exit codes, error types, and exceptions mapped to one line and a code
    prune.py         pruning: every cached model revision not kept is deleted
    manifest.py      the verified-pull record `<home>/verified/<repo folder>/<commit>.json`, and whose it must be
                     (standard library only: the snapshot, the cache's state and the lock read it too)
"""
