"""Models and their distribution: the registry and denylist (registry.py), the lock (lockfile.py, written by
lockgen.py for scripts/lock.sh), and the peer door that serves a host's verified blobs to the fleet (peerdoor.py).
"""
