"""The run: pyinfra's side of the deploy, the glue between the plan and the hosts.

The preflight over every host before any command (preflight.py, `plan_of(host)`; the sources each plan fetches
from, asked from its host: sources.py), the Snapshot fact and its
cache (facts.py, factcache.py), what every custom operation shares (operation.py), the gateways' turns across
hosts (gateway_turns.py), pyinfra workarounds (workarounds.py) and the run's closing line naming failed hosts
(failedhosts.py).
"""
