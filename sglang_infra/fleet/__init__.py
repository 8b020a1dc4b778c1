"""The fleet: what a host's plan needs from the other hosts of the inventory.

Roles from inventory groups (roles.py), multi-node groups (nodegroups.py), the gateways in front of each model's
workers (gateways.py), what each monitor scrapes (monitoring.py), which peers each pull asks (peering.py), and the
inventory file as pyinfra reads it, for the scripts (inventoryfile.py).
"""
