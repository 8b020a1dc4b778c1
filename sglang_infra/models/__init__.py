"""Models: the registry and denylist (registry.py) and the lock (lockfile.py, written by fleet/lockgen.py for
scripts/lock.sh).
"""
