"""The rolling change's programs: a worker out of its gateways and drained, the gateways' worker sets, the last
good config put back, the gate run apart from its run's connection; run inline (`python3 -I -c`) per command.

They may import hostside/'s shared modules (`from .. import apikey`); no program the hosts keep imports them.
Every module, a line each (tests/unit/test_hostside_index.py keeps the list whole):

    detach.py            the gate run apart from the run's connection: it ends on the host by itself, followed
    drain.py             waits until a worker out of its gateways has no request in flight
    gateway_workers.py   a gateway's worker set: workers.json, then the gateway's /workers API (the roll's turns
                         and the gateway task alike)
    restore_good.py      the last known-good compose.yaml and .env back, for a worker whose roll was called off
"""
