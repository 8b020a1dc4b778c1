"""The pull: host programs that run in the pull's venv (huggingface_hub), as `sglang`.

hfpull.py is the command line; pull.py, transfer.py, ranges.py, peers.py, hublimits.py, pull_errors.py,
pull_locks.py and prune.py are what it imports. They may import the standard-library modules of hostside/ (`from
.. import manifest`); nothing outside this folder imports them but the pull itself, the lock's resolver
(models/lockgen.py: hublimits.py, transfer.py) and the tests.
"""
