"""One host's plan: its data judged, resolved and rendered, before anything on a host changes.

The shape of every key (schema.py), each key's documented reason (defaults.py), a host's roles and fleet address
(roles.py), the inventory file (inventoryfile.py), the refusals (refusals.py) and the ports of one host against each
other (hostports.py), the peer door's rules (peerdoor.py), the resolving into the frozen HostPlan (resolve.py, its
types in types.py), and the text rendered from it (render.py, through machine/templating.py).
"""
