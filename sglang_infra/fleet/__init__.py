"""The fleet: what a host's plan needs from the other hosts of the inventory.

The run's Fleet, read once (hosts.py), and the passes over it: multi-node groups (nodegroups.py), the gateways in
front of each model's workers (gateways.py), what each monitor scrapes (monitoring.py), which peers each pull asks
(peering.py); and the lock's resolver, which reads every host's data (lockgen.py, for scripts/lock.sh).
"""
